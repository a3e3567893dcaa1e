"""``kube-offload relay``: the home API relay of one consumer (docs/home-api.md), run by
the remote chart in the consumer's tenant namespace. Flags in, the relay declared to the
process manager (kube_offload/runtime/manager.py) for /healthz, /readyz and /metrics and
a clean stop on SIGTERM. It needs no API access at all: its pod mounts no token."""

from __future__ import annotations

import argparse
import logging
import sys

from kube_offload.constants import HOME_API_RELAY_SERVE_PORT, HOME_API_RELAY_UPLINK_PORT
from kube_offload.runtime.flags import add_flag, positive_duration, positive_int
from kube_offload.runtime.health import add_health_flag
from kube_offload.runtime.logs import LEVELS, setup_logging

COMPONENT = "relay"
# Uplinks are accepted on loopback only, whatever the flags say: that is what makes an
# uplink need a port-forward through the provider's API server (docs/home-api.md, "Trust").
UPLINK_HOST = "127.0.0.1"

log = logging.getLogger("kube_offload.relay")


def port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "relay",
        help="relay offloaded pods' connections to their home API server (provider side)",
        description=(
            "Pair each connection of an offloaded pod with an uplink the consumer's virtual kubelet "
            "holds open through this cluster's API server, and pipe the bytes untouched "
            "(docs/home-api.md). Runs in the consumer's tenant namespace of the provider."
        ),
    )
    add_flag(parser, COMPONENT, "--serve-bind", default=f"0.0.0.0:{HOME_API_RELAY_SERVE_PORT}",
             help="HOST:PORT where offloaded pods connect (the home API Service's target port)")
    add_flag(parser, COMPONENT, "--uplink-port", default=HOME_API_RELAY_UPLINK_PORT, type=port,
             help=f"port on {UPLINK_HOST} (only) where the virtual kubelet's port-forwards arrive")
    add_flag(parser, COMPONENT, "--pair-timeout", default="10s", type=positive_duration,
             help="how long a pod's connection waits for an idle uplink before it is closed")
    add_flag(parser, COMPONENT, "--max-connections", default=1024, type=positive_int,
             help="pod connections piped at once (this relay serves one consumer: its pods' bound here); more are "
             "closed at once, counted and logged")
    add_flag(parser, COMPONENT, "--max-connections-per-source", default=64, type=positive_int,
             help="pod connections piped at once from one address (one pod), so one pod cannot take the relay from "
             "the consumer's others; more are closed at once, counted and logged")
    add_flag(parser, COMPONENT, "--max-uplinks", default=256, type=positive_int,
             help="idle uplinks kept (the consumer's virtual kubelet holds --home-api-uplinks, 4, per relay pod); "
             "more are closed on arrival")
    add_flag(parser, COMPONENT, "--log-level", default="INFO", choices=LEVELS, help="log level")
    add_flag(parser, COMPONENT, "--log-json", default=False, type=bool, help="log JSON lines instead of text")
    add_health_flag(parser, COMPONENT)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kube_offload.runtime.health import HealthSetupError
    from kube_offload.runtime.https_server import parse_bind
    from kube_offload.runtime.manager import Loop, Manager, serve
    from kube_offload.runtime.metrics import REGISTRY
    from relay.server import Relay, RelaySettings

    setup_logging(args.log_level, json_format=bool(args.log_json))
    try:
        serve_bind = parse_bind(args.serve_bind)
    except ValueError as exc:
        print(f"kube-offload relay: --serve-bind: {exc}", file=sys.stderr)
        return 2
    settings = RelaySettings(serve=serve_bind, uplink=(UPLINK_HOST, args.uplink_port),
                             pair_timeout=float(args.pair_timeout), max_connections=args.max_connections,
                             max_connections_per_source=args.max_connections_per_source, max_uplinks=args.max_uplinks)
    try:
        manager = Manager(health_bind=args.health_bind, elector=None, logger=log)
    except HealthSetupError as exc:
        print(f"kube-offload relay: {exc}", file=sys.stderr)
        return 2
    try:
        # The process registry, which the health port serves (one relay per process).
        relay = Relay(settings, REGISTRY)
    except OSError as exc:
        manager.health.server_close()
        print(f"kube-offload relay: cannot listen on {settings.serve} or {settings.uplink}: {exc}", file=sys.stderr)
        return 2
    manager.handle_signals()
    # Ready = listening (the loop started). Not "an uplink is idle": the vkubelet opens
    # uplinks to Ready relay pods only, so that would never become true.
    manager.add_loop(Loop(name="relay", run=serve(relay.start, relay.stop), needs_leader=False, logger=log))
    return manager.run()
