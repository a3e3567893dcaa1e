"""``kube-offload gateway`` (one peering's WireGuard gateway) and ``kube-offload
gateway-routes`` (the route agent of every node): flags in, the loop declared to the
process manager for /healthz, /readyz and /metrics and a clean stop on SIGTERM, which
removes what the gateway put on its node. See docs/networking.md."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from kube_offload.runtime.flags import add_flag, positive_duration
from kube_offload.runtime.health import add_health_flag
from kube_offload.runtime.logs import LEVELS, setup_logging

log = logging.getLogger("kube_offload.gateway")


def udp_port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UDP port (1-65535)")
    return int(text)


def _common(parser: argparse.ArgumentParser, component: str) -> None:
    add_flag(parser, component, "--kubeconfig", default="", help="kubeconfig of this cluster; unset: in-cluster")
    add_flag(parser, component, "--namespace", default="kube-offload", help="namespace of the gateway's objects (the release's)")
    add_flag(parser, component, "--resync", default="5s", type=positive_duration,
             help="how often the node is converged on the ConfigMap (and a lost link or rule made again)")
    add_flag(parser, component, "--log-level", default="INFO", choices=LEVELS, help="log level")
    add_flag(parser, component, "--log-json", default=False, type=bool, help="log JSON lines instead of text")
    add_health_flag(parser, component)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from gateway.engine import MODES

    parser = subparsers.add_parser(
        "gateway",
        help="the WireGuard gateway of one peering (both sides; docs/networking.md)",
        description=(
            "Join this cluster's pod network to one peer cluster's over WireGuard, under remapped addresses: "
            "make this gateway's key (kept in --key-secret only), publish its public key in --config-map, and "
            "keep the node's link, peer, route and NETMAP rules as that ConfigMap says (kube-offload peer "
            "--gateway writes it). Runs in its node's network namespace with NET_ADMIN; on SIGTERM it removes "
            "all of it from the node."
        ),
    )
    def flag(name: str, **kw: Any) -> None:
        add_flag(parser, "gateway", name, **kw)

    flag("--peer-id", default="", help="the peer cluster's id (the remote's on the consumer, the consumer's on the provider)")
    flag("--config-map", default="", help="the gateway's ConfigMap (CIDRs, the peer's key and endpoint; its own public key)")
    flag("--key-secret", default="", help="the Secret holding this gateway's private key (made here when empty)")
    flag("--interface", default="", help="name of the WireGuard link; unset: derived from --peer-id (kowg<10 hex>)")
    flag("--listen-port", default=51820, type=udp_port, help="UDP port WireGuard listens on (on the node: hostNetwork)")
    flag("--wireguard", default="auto", choices=MODES,
         help="kernel: the kernel's WireGuard module; userspace: wireguard-go; auto: the kernel's when it has one")
    flag("--wireguard-go", default="wireguard-go", help="the wireguard-go binary (userspace mode)")
    flag("--allow-pods-of", default="",
         help="on a provider: only the pods the enforcer made for this consumer id may use the link (listed every "
              "--resync); unset: every pod of the pod CIDR (the consumer's side)")
    flag("--iptables", default="iptables-nft", help="iptables binary of the node's backend (iptables-nft or iptables-legacy)")
    _common(parser, "gateway")
    parser.set_defaults(func=run_gateway)

    routes = subparsers.add_parser(
        "gateway-routes",
        help="route every node's traffic for peered pods to the gateway's node (docs/networking.md)",
        description=(
            "On this node, route each peer's remapped pod CIDR to the node where that peering's gateway runs "
            "(routes marked with protocol 75, removed when no gateway needs them). Runs on every node "
            "(DaemonSet, hostNetwork, NET_ADMIN)."
        ),
    )
    add_flag(routes, "gateway-routes", "--node-ip", default="", help="this node's address (the pod's status.hostIP)")
    _common(routes, "gateway-routes")
    routes.set_defaults(func=run_routes)


def _kube(kubeconfig: str):  # type: ignore[no-untyped-def]
    from kube_offload.runtime.kube import Kube, load_api_client

    return Kube(load_api_client(kubeconfig or None))


def run_gateway(args: argparse.Namespace) -> int:
    from gateway.controller import Gateway, GatewaySettings
    from gateway.engine import Engine, EngineSettings
    from kube_offload import fabric as f
    from kube_offload.runtime.health import HealthSetupError
    from kube_offload.runtime.manager import Loop, Manager
    from kube_offload.runtime.probes import Check

    setup_logging(args.log_level, json_format=bool(args.log_json))
    for name in ("peer_id", "config_map", "key_secret"):
        if not getattr(args, name):
            print(f"kube-offload gateway: --{name.replace('_', '-')} is required", file=sys.stderr)
            return 2
    settings = GatewaySettings(namespace=args.namespace, config_map=args.config_map, key_secret=args.key_secret,
                               interface=args.interface or f.interface_name(args.peer_id),
                               listen_port=args.listen_port, resync=float(args.resync), allow_pods_of=args.allow_pods_of)
    if len(settings.interface) > 15:
        print(f"kube-offload gateway: --interface {settings.interface!r} is longer than 15 characters", file=sys.stderr)
        return 2
    engine = Engine(EngineSettings(mode=args.wireguard, wireguard_go=args.wireguard_go, iptables=args.iptables))
    try:
        manager = Manager(health_bind=args.health_bind, elector=None, logger=log)
    except HealthSetupError as exc:
        print(f"kube-offload gateway: {exc}", file=sys.stderr)
        return 2
    gateway = Gateway(_kube(args.kubeconfig), engine, settings)
    manager.add_ready_check(Check("gateway", gateway.ready_problem))
    manager.handle_signals()
    manager.add_loop(Loop(name="gateway", run=gateway.run, needs_leader=False, logger=log))
    return manager.run()


def run_routes(args: argparse.Namespace) -> int:
    from gateway.routes import RouteAgent
    from kube_offload.runtime.health import HealthSetupError
    from kube_offload.runtime.manager import Loop, Manager
    from kube_offload.runtime.probes import Check

    setup_logging(args.log_level, json_format=bool(args.log_json))
    if not args.node_ip:
        print("kube-offload gateway-routes: --node-ip is required (the chart gives the pod's status.hostIP)", file=sys.stderr)
        return 2
    try:
        manager = Manager(health_bind=args.health_bind, elector=None, logger=log)
    except HealthSetupError as exc:
        print(f"kube-offload gateway-routes: {exc}", file=sys.stderr)
        return 2
    agent = RouteAgent(_kube(args.kubeconfig), args.namespace, args.node_ip, float(args.resync))
    manager.add_ready_check(Check("routes", lambda: agent.problem))
    manager.handle_signals()
    manager.add_loop(Loop(name="gateway-routes", run=agent.run, needs_leader=False, logger=log))
    return manager.run()
