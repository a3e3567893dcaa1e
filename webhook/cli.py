"""``kube-offload webhook``: serve the admission webhook; ``... webhook configuration``:
print the webhook configurations to register it.

Only flags and wiring live here; see webhook/server.py and webhook/registration.py.
"""

from __future__ import annotations

import argparse
import functools
import sys

from kube_offload.runtime.flags import add_flag
from kube_offload.runtime.logs import setup_logging
from kube_offload.runtime.serving import add_server_flags, read_server_flags
from kube_offload.webhook_target import add_target_flags, target_from_args
from webhook import registration as reg
from webhook.settings import SERVING_FLAGS

COMPONENT = "webhook"
CONFIGURATION_COMPONENT = "webhook-configuration"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "webhook",
        help="serve the admission webhook (pod mutation, namespace policy validation)",
        description=(
            "Serve the kube-offload admission webhook over HTTPS: POST /mutate/pods, "
            "POST /validate/namespaces, GET /healthz, /readyz, /metrics. "
            "'kube-offload webhook configuration' prints the configurations that register it."
        ),
    )
    add_flag(parser, COMPONENT, "--kubeconfig", default=None,
             help="kubeconfig of the local cluster; unset: in-cluster config, then ~/.kube/config")
    add_flag(parser, COMPONENT, "--scheduler-name", default=None,
             help="set spec.schedulerName of mutated pods that use the default scheduler "
                  "(e.g. the scheduler profile that calls the kube-offload extender); unset: leave it")
    add_server_flags(parser, SERVING_FLAGS)
    parser.set_defaults(func=run)

    actions = parser.add_subparsers(dest="webhook_action", metavar="ACTION")
    conf = actions.add_parser(
        "configuration",
        help="print the Mutating/ValidatingWebhookConfiguration YAML",
        description=(
            "Print both webhook configurations (named kube-offload-webhook) for "
            "'kubectl apply -f -'. Give --url for a webhook reached by URL, or "
            "--service-namespace/--service-name for one behind an in-cluster Service."
        ),
    )
    add_target_flags(conf, CONFIGURATION_COMPONENT, example_url="https://127.0.0.1:8443")
    add_flag(conf, CONFIGURATION_COMPONENT, "--pod-failure-policy",
             default=reg.DEFAULT_POD_FAILURE_POLICY, choices=reg.FAILURE_POLICIES,
             help="failurePolicy of the pod webhook (Fail: no pod of an offloaded namespace "
                  "is created while the webhook is down; Ignore: they are created unmutated)")
    add_flag(conf, CONFIGURATION_COMPONENT, "--namespace-failure-policy",
             default=reg.DEFAULT_NAMESPACE_FAILURE_POLICY, choices=reg.FAILURE_POLICIES,
             help="failurePolicy of the namespace validation webhook")
    add_flag(conf, CONFIGURATION_COMPONENT, "--timeout-seconds",
             default=reg.DEFAULT_TIMEOUT_SECONDS, type=int,
             help="timeoutSeconds of both webhooks (1-30)")
    conf.set_defaults(func=print_configuration)


def run(args: argparse.Namespace) -> int:
    from kubernetes.config.config_exception import ConfigException

    from kube_offload.runtime.kube import load_api_client
    from webhook.namespace_cache import informer_source
    from webhook.server import serve
    from webhook.settings import WebhookSettings

    setup_logging(args.log_level)
    server = read_server_flags(args, SERVING_FLAGS)
    # Load the kubeconfig once here so a bad one is one clear error, not a worker that
    # fails to boot; the worker loads its own client after the fork.
    try:
        load_api_client(args.kubeconfig)
    except ConfigException as exc:
        raise SystemExit(
            f"kube-offload webhook: no usable kubeconfig ({exc}); not running in a cluster "
            "and ~/.kube/config is missing or invalid: pass --kubeconfig"
        ) from None
    serve(
        server,
        WebhookSettings(
            scheduler_name=args.scheduler_name or None,
            max_body_bytes=args.max_body_bytes,
            parse_memory_budget=args.parse_memory_budget,
        ),
        functools.partial(informer_source, args.kubeconfig),
    )
    return 0


def print_configuration(args: argparse.Namespace) -> int:
    def usage(message: str) -> int:
        print(f"kube-offload webhook configuration: {message}", file=sys.stderr)
        return 2

    try:
        target = target_from_args(args)
        text = reg.configurations_yaml(
            target,
            pod_failure_policy=args.pod_failure_policy,
            namespace_failure_policy=args.namespace_failure_policy,
            timeout_seconds=args.timeout_seconds,
        )
    except ValueError as exc:
        return usage(str(exc))
    sys.stdout.write(text)
    return 0
