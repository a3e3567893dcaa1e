"""``kube-offload enforcer``: settings in, controller started, stopped on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from kube_offload.flags import add_flag, positive_duration, positive_int
from kube_offload.kube import load_api_client
from kube_offload.logs import LEVELS, setup_logging

COMPONENT = "enforcer"

log = logging.getLogger("kube_offload.enforcer")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "enforcer",
        help="run the ShadowPod controller in a remote cluster",
        description=(
            "Turn each ShadowPod into exactly one Pod and recreate that Pod at once when it is "
            "deleted or evicted. Runs in the remote (provider) cluster."
        ),
    )
    add_flag(
        parser,
        COMPONENT,
        "--kubeconfig",
        default=None,
        help="kubeconfig of the cluster to enforce in; unset: in-cluster config, then ~/.kube/config",
    )
    add_flag(parser, COMPONENT, "--workers", default=4, type=positive_int, help="ShadowPods reconciled in parallel")
    add_flag(
        parser,
        COMPONENT,
        "--resync-period",
        default="300s",
        type=positive_duration,
        help="reconcile every ShadowPod again after this long even if nothing changed (e.g. 90s, 5m)",
    )
    add_flag(
        parser,
        COMPONENT,
        "--install-crd",
        default=False,
        type=bool,
        help="create the ShadowPod CRD from kube_offload/manifests if it is missing (--install-crd=true)",
    )
    add_flag(parser, COMPONENT, "--namespace", default=None, help="watch only this namespace; unset: all namespaces")
    add_flag(parser, COMPONENT, "--log-level", default="INFO", choices=LEVELS, help="log level")
    add_flag(parser, COMPONENT, "--log-json", default=False, type=bool, help="log JSON lines instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so ``kube-offload --help`` does not pay for the controller's imports.
    from enforcer.controller import Enforcer, Settings
    from enforcer.crd import ensure_crd

    setup_logging(args.log_level, json_format=args.log_json)
    # argparse runs a string default through ``type`` too, so this is always seconds.
    settings = Settings(workers=args.workers, resync_seconds=float(args.resync_period), namespace=args.namespace or None)
    api_client = load_api_client(args.kubeconfig or None)
    if args.install_crd:
        ensure_crd(api_client)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    enforcer = Enforcer(api_client, settings)
    log.info(
        "enforcer starting (namespace: %s, workers: %d, resync: %.0fs)",
        settings.namespace or "all",
        settings.workers,
        settings.resync_seconds,
    )
    try:
        enforcer.start(stop)
        # A timed wait keeps the main thread responsive to signals on every platform.
        while not stop.wait(1.0):
            pass
    finally:
        enforcer.stop()
        log.info("enforcer stopped")
    return 0
