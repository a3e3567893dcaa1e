"""Two clusters' nodes as network namespaces, joined by the product's gateway, without any
cluster (docs/networking.md, "Proof"): what tests/realnode/test_gateway_dataplane.py and
bench/bench_gateway.py run the gateway's data plane (gateway/engine.py, wireguard-go) in.

    cluster A                                         cluster B
    pod kogw-pa1 ── node kogw-a1 ══ WireGuard ══ node kogw-b1 ── pod kogw-pb1
    pod kogw-pa2 ── node kogw-a2 ─┘ (a1 ↔ a2: A's own network; a1 ↔ b1: the underlay)

- every node forwards; a "pod" is a namespace behind a veth of its node, its node's end
  the default gateway (as the CNI bridge's pods);
- A's pod CIDR is :data:`POD_CIDR_A`, split between its two nodes (``.0/25`` on a1,
  ``.128/25`` on a2, routed between them over their link as a network plugin would); B's
  is the same CIDR when ``overlap`` (the shape that needs remapping), else :data:`POD_CIDR_B`;
- A is reached from B as :data:`REMAPPED_A`, B from A as :data:`REMAPPED_B`;
- the gateways listen on the underlay link's addresses (:data:`UNDERLAY`), made here;
- a2 reaches B through the route the route agent would give it (via a1).

Every address is in 172.31.252.0/24 (links), 172.31.200-201.0/24 (pods) and
172.30.200-201.0/24 (remapped): ranges of the harness's 172.31/16 and 172.30/16 that no
environment uses (real nodes take slots 0..63). :func:`remove` deletes the namespaces;
the gateways' links and rules live in them and go with them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gateway import dataplane as dp
from gateway import keys
from gateway.engine import Engine, EngineSettings
from gateway.routes import route_commands
from kube_offload import fabric as f
from kube_offload_harness import netns

A1, A2, B1 = "kogw-a1", "kogw-a2", "kogw-b1"
PA1, PA2, PB1 = "kogw-pa1", "kogw-pa2", "kogw-pb1"
NAMESPACES = (A1, A2, B1, PA1, PA2, PB1)
POD_CIDR_A, POD_CIDR_B = "172.31.200.0/24", "172.31.201.0/24"
REMAPPED_A, REMAPPED_B = "172.30.200.0/24", "172.30.201.0/24"
INTERNAL = ("172.31.252.1", "172.31.252.2")  # a1, a2: cluster A's own node network
UNDERLAY = ("172.31.252.5", "172.31.252.6")  # a1, b1: where each gateway receives
LISTEN_PORT = 51820


@dataclass
class Lab:
    overlap: bool
    wireguard_go: Path
    engines: dict[str, Engine] = field(default_factory=dict)
    planes: dict[str, dp.Plane] = field(default_factory=dict)

    @property
    def pod_cidr_b(self) -> str:
        return POD_CIDR_A if self.overlap else POD_CIDR_B

    def pod_ip(self, pod: str) -> str:
        """``.10`` of its node's half (a2's pods: ``.138``)."""
        base = {PA1: POD_CIDR_A, PA2: POD_CIDR_A, PB1: self.pod_cidr_b}[pod].rsplit(".", 1)[0]
        return f"{base}.{138 if pod == PA2 else 10}"

    @staticmethod
    def remapped(pod_ip: str, remapped_cidr: str) -> str:
        return remapped_cidr.rsplit(".", 1)[0] + "." + pod_ip.rsplit(".", 1)[1]


def _run(ns: str, argv: list[str]) -> subprocess.CompletedProcess:
    return netns.in_netns(ns, argv)


def _pod(node: str, pod: str, name: str, cidr: str, ip: str) -> None:
    gateway = cidr.rsplit(".", 1)[0] + "." + ("129" if ip.endswith(".138") else "1")
    prefix = "25"
    subprocess.run(["ip", "netns", "add", pod], check=True)
    _run(node, ["ip", "link", "add", f"{name}n", "type", "veth", "peer", "name", f"{name}p", "netns", pod])
    _run(node, ["ip", "addr", "add", f"{gateway}/{prefix}", "dev", f"{name}n"])
    _run(node, ["ip", "link", "set", f"{name}n", "up"])
    _run(pod, ["ip", "addr", "add", f"{ip}/{prefix}", "dev", f"{name}p"])
    for dev in (f"{name}p", "lo"):
        _run(pod, ["ip", "link", "set", dev, "up"])
    _run(pod, ["ip", "route", "add", "default", "via", gateway])


def _link(a: str, b: str, name: str, a_ip: str, b_ip: str) -> None:
    _run(a, ["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b", "netns", b])
    for ns, dev, ip in ((a, f"{name}a", a_ip), (b, f"{name}b", b_ip)):
        _run(ns, ["ip", "addr", "add", f"{ip}/30", "dev", dev])
        _run(ns, ["ip", "link", "set", dev, "up"])


def leftovers() -> list[str]:
    return [ns for ns in NAMESPACES if ns in netns.list_netns()]


def make(*, overlap: bool, wireguard_go: Path, direct_routes: bool = False) -> Lab:
    """The namespaces, links and pods (no gateway yet: :func:`start_gateways`).
    ``direct_routes`` (only without overlap): also route each cluster's real pod CIDR over
    the underlay, the direct path a benchmark compares the tunnel with."""
    if leftovers():
        raise RuntimeError(f"namespaces of an earlier run still exist: {leftovers()} (ip netns delete them)")
    lab = Lab(overlap, wireguard_go)
    for node in (A1, A2, B1):
        subprocess.run(["ip", "netns", "add", node], check=True)
        _run(node, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        _run(node, ["ip", "link", "set", "lo", "up"])
    _link(A1, A2, "kogwi", *INTERNAL)
    _link(A1, B1, "kogwu", *UNDERLAY)
    _pod(A1, PA1, "kogwpa1", POD_CIDR_A, lab.pod_ip(PA1))
    _pod(A2, PA2, "kogwpa2", POD_CIDR_A, lab.pod_ip(PA2))
    _pod(B1, PB1, "kogwpb1", lab.pod_cidr_b, lab.pod_ip(PB1))
    # cluster A's network plugin: each node routes the other's half over their link
    _run(A1, ["ip", "route", "add", POD_CIDR_A.replace(".0/24", ".128/25"), "via", INTERNAL[1]])
    _run(A2, ["ip", "route", "add", POD_CIDR_A.replace(".0/24", ".0/25"), "via", INTERNAL[0]])
    if direct_routes:
        if overlap:
            raise ValueError("no direct path between overlapping pod CIDRs: that is what the remapping is for")
        _run(A1, ["ip", "route", "add", POD_CIDR_B, "via", UNDERLAY[1]])
        _run(B1, ["ip", "route", "add", POD_CIDR_A, "via", UNDERLAY[0]])
    return lab


def start_gateways(lab: Lab) -> None:
    """A gateway on a1 and one on b1 (the product's engine, wireguard-go where the kernel
    has no WireGuard), each with a key made here, configured as peer would; and the route
    agent's route on a2."""
    private = {side: keys.generate_private_key() for side in "ab"}
    config = {
        "a": f.GatewayConfig(f.parse_cidr(POD_CIDR_A, "A"), f.parse_cidr(REMAPPED_A, "A'"), f.parse_cidr(REMAPPED_B, "B'"),
                             keys.public_key(private["b"]), (UNDERLAY[1], LISTEN_PORT)),
        "b": f.GatewayConfig(f.parse_cidr(lab.pod_cidr_b, "B"), f.parse_cidr(REMAPPED_B, "B'"), f.parse_cidr(REMAPPED_A, "A'"),
                             keys.public_key(private["a"]), (UNDERLAY[0], LISTEN_PORT)),
    }
    for side, node in (("a", A1), ("b", B1)):
        # one interface name per side: wireguard-go's control sockets share the machine's /var/run
        lab.planes[side] = dp.Plane(f.interface_name(f"gateway-lab-{side}"), LISTEN_PORT, config[side])
        lab.engines[side] = Engine(EngineSettings(wireguard_go=str(lab.wireguard_go), netns=str(netns.netns_path(node))))
        lab.engines[side].apply(private[side], lab.planes[side])
    for argv in route_commands({}, {REMAPPED_B: INTERNAL[0]}):
        _run(A2, argv)


def stop_gateways(lab: Lab) -> None:
    for side, engine in lab.engines.items():
        engine.teardown(lab.planes[side].interface)


def remove(lab: Lab | None = None) -> list[str]:
    """Stop the gateways, delete the namespaces; what is still there (empty when clean)."""
    if lab is not None:
        stop_gateways(lab)
    for ns in NAMESPACES:
        if ns in netns.list_netns():
            subprocess.run(["ip", "netns", "delete", ns], check=False)
    return leftovers()
