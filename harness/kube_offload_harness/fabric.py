"""What stands in for a network fabric between the loopback clusters' real nodes.

Two clusters that share pods need their pod networks joined, and, when the clusters were
built alike, their pod addresses translated (Liqo does it with a gateway and NAT; the
virtual kubelet only *shows* the translated addresses, vkubelet/shared/ip_remapping.py). On one
machine the harness joins two real nodes' network namespaces directly, never through the
machine's own namespace (whose forwarding stays off):

- a veth pair ``kof<i>a`` / ``kof<i>b`` with one end in each node's namespace, addresses
  from :data:`LINK_NETWORK` (``172.31.251.4i/30``: ``.4i+1`` and ``.4i+2``);
- each cluster's pods are known to the *other* cluster under a remapped CIDR of their own,
  :func:`remapped_pod_cidr` (``172.30.<slot>.0/24`` for the pods of slot ``<slot>``,
  ``172.31.<slot>.0/24``), the same translation the virtual kubelet is given with
  ``--remote-pod-cidr``/``--remote-pod-cidr-remapped`` and ``--local-pod-cidr``/
  ``--local-pod-cidr-remapped``;
- in each namespace: a route to the peer's remapped CIDR over the link; ``NETMAP`` of the
  destination for packets arriving on the link addressed to this node's remapped CIDR
  (PREROUTING, into its real pod CIDR), and of the source for packets of its pods leaving
  on the link (POSTROUTING, into its remapped CIDR). Replies are translated back by
  conntrack. A packet from a local pod to an offloaded pod's address (``172.30.b.x``, what
  the local pod's status and EndpointSlices show) thus reaches the remote pod
  (``172.31.b.x``), which sees it come from ``172.30.a.y``, the address the remote side's
  reflected EndpointSlices give the local pod.

Everything lives in the two node namespaces, so deleting a namespace removes its end of
the link, its routes and its rules; :func:`disconnect` removes a link while the nodes stay.
The pure functions say exactly which commands run; :func:`connect` runs them.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Callable, Sequence

LINK_NETWORK = ipaddress.IPv4Network("172.31.251.0/24")  # 64 links of /30
REMAPPED_NETWORK = ipaddress.IPv4Network("172.30.0.0/16")  # one /24 per node slot
LINK_PREFIX = "kof"
# Rules are found again by this comment (iptables -m comment), never by their position.
RULE_COMMENT = "kube-offload-fabric"


@dataclass(frozen=True)
class Member:
    """One end of a fabric link: a real node's namespace, slot and pod CIDR."""

    netns: str
    slot: int
    pod_cidr: str


@dataclass(frozen=True)
class Link:
    index: int
    a: Member
    b: Member

    def __post_init__(self) -> None:
        if not 0 <= self.index < LINK_NETWORK.num_addresses // 4:
            raise ValueError(f"fabric link index {self.index} outside 0..{LINK_NETWORK.num_addresses // 4 - 1}")
        if self.a.netns == self.b.netns:
            raise ValueError(f"a fabric link joins two namespaces, not {self.a.netns} with itself")

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{LINK_NETWORK.network_address + 4 * self.index}/30")

    def name(self, side: str) -> str:
        return f"{LINK_PREFIX}{self.index}{side}"  # <= 15 characters, the kernel's limit

    def address(self, side: str) -> str:
        return str(self.network.network_address + (1 if side == "a" else 2))


def remapped_pod_cidr(slot: int) -> str:
    """Where the pods of the real node in ``slot`` appear to every other cluster."""
    if not 0 <= slot < 256:
        raise ValueError(f"slot {slot} outside 0..255")
    return f"{REMAPPED_NETWORK.network_address + 256 * slot}/24"


Command = tuple[str, list[str]]  # (namespace, argv)


def _member(link: Link, side: str) -> Member:
    return link.a if side == "a" else link.b


def _nat_rules(link: Link, side: str) -> list[tuple[str, list[str]]]:
    """(chain, rule) of ``side``'s two translations, each carrying the comment that names
    its link: what connect appends (-A) and disconnect deletes (-D), spelt once."""
    me, dev = _member(link, side), link.name(side)
    mine_remapped = remapped_pod_cidr(me.slot)
    comment = ["-m", "comment", "--comment", f"{RULE_COMMENT} {dev}"]
    return [
        ("PREROUTING", ["-i", dev, "-d", mine_remapped, *comment, "-j", "NETMAP", "--to", me.pod_cidr]),
        ("POSTROUTING", ["-o", dev, "-s", me.pod_cidr, *comment, "-j", "NETMAP", "--to", mine_remapped]),
    ]


def _iptables(action: str, chain: str, rule: list[str]) -> list[str]:
    return ["iptables", "-w", "-t", "nat", action, chain, *rule]


def _side_commands(link: Link, side: str) -> list[Command]:
    other = "b" if side == "a" else "a"
    me, peer, dev = _member(link, side), _member(link, other), link.name(side)
    return [
        (me.netns, ["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"]),
        (me.netns, ["ip", "addr", "add", f"{link.address(side)}/30", "dev", dev]),
        (me.netns, ["ip", "link", "set", dev, "up"]),
        (me.netns, ["ip", "route", "add", remapped_pod_cidr(peer.slot), "via", link.address(other), "dev", dev]),
        *((me.netns, _iptables("-A", chain, rule)) for chain, rule in _nat_rules(link, side)),
    ]


def connect_commands(link: Link) -> list[Command]:
    """The commands that make ``link`` (pure): the veth pair made directly in the two
    namespaces (it never exists in the machine's), then each side's address, route and
    translation."""
    create = (link.a.netns, ["ip", "link", "add", link.name("a"), "type", "veth", "peer", "name", link.name("b"),
                             "netns", link.b.netns])
    return [create, *_side_commands(link, "a"), *_side_commands(link, "b")]


def disconnect_commands(link: Link) -> list[Command]:
    """Remove the link (its peer end and the routes over it go with it) and each side's
    two rules, named by their comment."""
    return [(link.a.netns, ["ip", "link", "delete", link.name("a")])] + [
        (_member(link, side).netns, _iptables("-D", chain, rule))
        for side in ("a", "b") for chain, rule in _nat_rules(link, side)
    ]


def links_for(local: Member, remotes: Sequence[Member]) -> list[Link]:
    """One link from the local cluster's node to each remote's (the star a consumer and
    its providers make; providers do not share pods with each other)."""
    return [Link(index, local, remote) for index, remote in enumerate(remotes)]


def remapping_args(local: Member, remote: Member) -> list[str]:
    """The virtual kubelet flags that show the same translation the fabric makes."""
    return [
        "--remote-pod-cidr", remote.pod_cidr, "--remote-pod-cidr-remapped", remapped_pod_cidr(remote.slot),
        "--local-pod-cidr", local.pod_cidr, "--local-pod-cidr-remapped", remapped_pod_cidr(local.slot),
    ]


# --- thin I/O ------------------------------------------------------------------------------
Runner = Callable[[str, list[str]], object]  # (netns, argv) -> raises on failure


def connect(link: Link, run: Runner) -> None:
    for netns, argv in connect_commands(link):
        run(netns, argv)


def disconnect(link: Link, run_unchecked: Runner) -> None:
    """Best effort: a namespace already deleted took its end and rules with it."""
    for netns, argv in disconnect_commands(link):
        run_unchecked(netns, argv)
