"""``kube-offload webhook``: serve the admission webhook; ``... webhook configuration``:
print the webhook configurations to register it.

Only flags and wiring live here; see webhook/server.py and webhook/registration.py.
"""

from __future__ import annotations

import argparse
import functools
import sys

from kube_offload.runtime.body_limit import budget_too_small, parse_budget_help
from kube_offload.runtime.flags import add_flag, byte_size, positive_int
from kube_offload.runtime.logs import LEVELS, setup_logging
from kube_offload.runtime.serving import WORKER_CLASSES
from kube_offload.webhook_target import add_target_flags, target_from_args
from webhook import registration as reg
from webhook.settings import (
    BASELINE_BYTES,
    DEFAULT_BIND,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PARSE_BUDGET_WAIT_SECONDS,
    DEFAULT_PARSE_MEMORY_BUDGET,
    DEFAULT_THREADS,
    DEFAULT_WORKER_CLASS,
    DEFAULT_WORKERS,
)

COMPONENT = "webhook"
CONFIGURATION_COMPONENT = "webhook-configuration"


def register(subparsers: argparse._SubParsersAction) -> None:
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
    add_flag(parser, COMPONENT, "--bind", default=DEFAULT_BIND,
             help="HOST:PORT to serve HTTPS on")
    add_flag(parser, COMPONENT, "--tls-cert", default=None,
             help="PEM serving certificate (with its chain); required to serve")
    add_flag(parser, COMPONENT, "--tls-key", default=None,
             help="PEM private key of --tls-cert; required to serve")
    add_flag(parser, COMPONENT, "--scheduler-name", default=None,
             help="set spec.schedulerName of mutated pods that use the default scheduler "
                  "(e.g. the scheduler profile that calls the kube-offload extender); unset: leave it")
    add_flag(parser, COMPONENT, "--workers", default=DEFAULT_WORKERS, type=positive_int,
             help="gunicorn worker processes (each uses one core at most); each watches namespaces "
                  "for its own cache, while /readyz and /metrics speak for all of them")
    add_flag(parser, COMPONENT, "--worker-class", default=DEFAULT_WORKER_CLASS, choices=sorted(WORKER_CLASSES),
             help="asyncio: one event loop per worker, the app called in it (the default; docs/webhook.md, "
                  "'Workers'); gthread: gunicorn's threads, --threads per worker")
    add_flag(parser, COMPONENT, "--threads", default=DEFAULT_THREADS, type=positive_int,
             help="request threads per worker (--worker-class gthread only)")
    add_flag(parser, COMPONENT, "--max-body-bytes", default=DEFAULT_MAX_BODY_BYTES, type=byte_size,
             help="largest AdmissionReview accepted, in bytes or with Ki/Mi (413 above); the default is "
                  "kube-apiserver's own request limit, so every Pod it accepts can be admitted "
                  "(docs/webhook.md, 'Request size')")
    add_flag(parser, COMPONENT, "--parse-memory-budget", default=DEFAULT_PARSE_MEMORY_BUDGET, type=byte_size,
             help=parse_budget_help(baseline_bytes=BASELINE_BYTES, wait_seconds=DEFAULT_PARSE_BUDGET_WAIT_SECONDS,
                                  doc="docs/webhook.md"))
    add_flag(parser, COMPONENT, "--log-level", default="INFO", type=str.upper, choices=LEVELS,
             help="log level")
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
    from webhook.server import check_tls_files, serve
    from webhook.settings import ServerSettings, WebhookSettings

    setup_logging(args.log_level)
    problem = budget_too_small(component=COMPONENT, budget=args.parse_memory_budget, max_body=args.max_body_bytes)
    if problem:
        raise SystemExit(f"kube-offload webhook: {problem}")
    server = ServerSettings(
        tls_cert=args.tls_cert or "",
        tls_key=args.tls_key or "",
        bind=args.bind,
        workers=args.workers,
        threads=args.threads,
        worker_class=args.worker_class,
        log_level=args.log_level,
    )
    check_tls_files(server)
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
