"""``kube-offload extender``: serve the scheduler extender; ``... extender
scheduler-config``: print the KubeSchedulerConfiguration that registers it.

Only flags and wiring live here; see extender/server.py and extender/registration.py.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING

from kube_offload.runtime.flags import add_flag, non_negative_seconds, positive_int
from kube_offload.runtime.logs import setup_logging
from kube_offload.runtime.serving import add_server_flags, read_server_flags

from kube_offload import node_filter
from extender import registration as reg
from extender.settings import SERVING_FLAGS

if TYPE_CHECKING:
    from extender.caches import ExtenderCaches

COMPONENT = "extender"
CONFIG_COMPONENT = "extender-scheduler-config"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "extender",
        help="serve the scheduler extender (filter and prioritize nodes for offloaded pods)",
        description=(
            "Serve the kube-offload scheduler extender over HTTP or HTTPS: POST /filter, "
            "POST /prioritize, GET /healthz, /readyz, /metrics. "
            "'kube-offload extender scheduler-config' prints the KubeSchedulerConfiguration "
            "that registers it."
        ),
    )
    add_flag(parser, COMPONENT, "--kubeconfig", default=None,
             help="kubeconfig of the local cluster; unset: in-cluster config, then ~/.kube/config")
    add_flag(parser, COMPONENT, "--node-cache-capable", default=False, type=bool,
             help="keep a node cache so kube-scheduler may send node names only "
                  "(must match nodeCacheCapable in the scheduler configuration)")
    add_flag(parser, COMPONENT, "--strategy", default=node_filter.DEFAULT_STRATEGY, choices=node_filter.STRATEGIES,
             help="how prioritize scores nodes: prefer-local, prefer-remote or most-free-remote")
    add_flag(parser, COMPONENT, "--capacity-max-age", default=node_filter.DEFAULT_CAPACITY_MAX_AGE, type=non_negative_seconds,
             help="seconds after which a virtual node's remote-capacity annotation is stale and "
                  "ignored (the node is then kept without a capacity check); 0: never stale")
    add_server_flags(parser, SERVING_FLAGS)
    parser.set_defaults(func=run)

    actions = parser.add_subparsers(dest="extender_action", metavar="ACTION")
    conf = actions.add_parser(
        "scheduler-config",
        help="print the KubeSchedulerConfiguration YAML that registers the extender",
        description=(
            "Print a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration whose "
            "extenders entry calls this extender (filterVerb filter, prioritizeVerb "
            "prioritize), for kube-scheduler --config."
        ),
    )
    add_flag(conf, CONFIG_COMPONENT, "--url", default=None,
             help="urlPrefix of the extender, e.g. http://127.0.0.1:8080 (https:// turns on enableHTTPS); required")
    add_flag(conf, CONFIG_COMPONENT, "--weight", default=1, type=positive_int,
             help="weight of the extender's scores against the scheduler's own")
    add_flag(conf, CONFIG_COMPONENT, "--http-timeout", default="5s",
             help="httpTimeout, a Go duration (e.g. 5s); a pod's scheduling cycle fails after it")
    add_flag(conf, CONFIG_COMPONENT, "--node-cache-capable", default=False, type=bool,
             help="nodeCacheCapable: send node names only (the extender must run with --node-cache-capable)")
    add_flag(conf, CONFIG_COMPONENT, "--ignorable", default=False, type=bool,
             help="ignorable: schedule without the extender when it fails (default false, so a "
                  "broken extender is visible in pod events rather than silently bypassed)")
    add_flag(conf, CONFIG_COMPONENT, "--ca-file", default=None,
             help="https: tlsConfig.caFile, the CA that signed the extender's certificate, as a path "
                  "kube-scheduler can read")
    add_flag(conf, CONFIG_COMPONENT, "--embed-ca", default=False, type=bool,
             help="https: embed --ca-file's contents as tlsConfig.caData instead of referring to the path")
    add_flag(conf, CONFIG_COMPONENT, "--server-name", default=None,
             help="https: tlsConfig.serverName, when the certificate does not name the URL's host")
    add_flag(conf, CONFIG_COMPONENT, "--insecure-skip-verify", default=False, type=bool,
             help="https: tlsConfig.insecure, skip verifying the extender's certificate (tests only)")
    add_flag(conf, CONFIG_COMPONENT, "--scheduler-name", default=reg.DEFAULT_SCHEDULER_NAME,
             help="schedulerName of the profile")
    conf.set_defaults(func=print_scheduler_config)


def run(args: argparse.Namespace) -> int:
    from kube_offload.runtime.kube import load_api_client

    from extender.server import serve
    from extender.settings import ExtenderSettings

    setup_logging(args.log_level)
    server = read_server_flags(args, SERVING_FLAGS)
    app_settings = ExtenderSettings(
        strategy=args.strategy,
        capacity_max_age=args.capacity_max_age or None,
        max_body_bytes=args.max_body_bytes,
        parse_memory_budget=args.parse_memory_budget,
    )
    # Load the kubeconfig once here so a bad one is one clear error, not a worker that
    # fails to boot; the worker loads its own client after the fork.
    load_api_client(args.kubeconfig)
    serve(server, app_settings, functools.partial(_informer_caches, args.kubeconfig, args.node_cache_capable))
    return 0


def _informer_caches(kubeconfig: str | None, node_cache: bool) -> ExtenderCaches:  # runs in the worker
    from kube_offload.runtime.kube import load_api_client

    from extender.caches import InformerCaches

    return InformerCaches(load_api_client(kubeconfig), node_cache=node_cache)


def print_scheduler_config(args: argparse.Namespace) -> int:
    def usage(message: str) -> int:
        print(f"kube-offload extender scheduler-config: {message}", file=sys.stderr)
        return 2

    if not args.url:
        return usage("--url is required (where kube-scheduler reaches the extender)")
    ca_file, ca_data = args.ca_file or "", b""
    if args.embed_ca:
        if not ca_file:
            return usage("--embed-ca needs --ca-file")
        try:
            with open(ca_file, "rb") as handle:
                ca_data = handle.read()
        except OSError as exc:
            return usage(f"--ca-file {ca_file!r} cannot be read: {exc.strerror}")
        ca_file = ""
    registration = reg.ExtenderRegistration(
        url=args.url,
        weight=args.weight,
        http_timeout=args.http_timeout,
        node_cache_capable=args.node_cache_capable,
        ignorable=args.ignorable,
        ca_file=ca_file,
        ca_data=ca_data,
        server_name=args.server_name or "",
        insecure_skip_verify=args.insecure_skip_verify,
        scheduler_name=args.scheduler_name,
    )
    try:
        text = reg.scheduler_configuration_yaml(registration)
    except ValueError as exc:
        return usage(str(exc))
    sys.stdout.write(text)
    return 0
