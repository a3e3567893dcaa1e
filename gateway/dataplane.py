"""What the kernel of the gateway's node holds for one peering (pure; docs/networking.md).

- a WireGuard link (:attr:`Plane.interface`) with one peer, whose allowed IPs are the peer's
  remapped pod CIDR: only packets from those sources come out of the tunnel, and only
  packets for them go in;
- a route of the peer's remapped pod CIDR into the link (the route agent sends the other
  nodes' packets for it to this node, routes.py);
- in chains of its own, jumped to from the built-in ones (found again by name, never by
  position): ``NETMAP`` of the destination of what arrives from the link for this side's
  remapped CIDR into its real pod CIDR (nat PREROUTING), and of the source of its pods'
  packets leaving into the link into its remapped CIDR (nat POSTROUTING), at the same
  offsets; conntrack translates the replies. filter FORWARD accepts what crosses the link
  (a node whose FORWARD policy drops would otherwise drop it) — on a provider, only to and
  from the consumer's own pods (:attr:`Plane.allowed`), everything else crossing the link
  dropped — and mangle FORWARD clamps
  the MSS of TCP SYNs leaving into the link to its MTU, so that pods whose network says
  1500 never send segments the tunnel must fragment.

Everything is named after the link, so two peerings on one node never touch each other's,
and :func:`teardown_commands` removes exactly what this module makes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_offload.fabric import KEEPALIVE_SECONDS, GatewayConfig

# WireGuard's own default: 1500 minus the 80 bytes of its IPv6 outer headers.
DEFAULT_MTU = 1420
COMMENT = "kube-offload-gateway"

Argv = list[str]


@dataclass(frozen=True)
class Chain:
    table: str
    builtin: str  # the built-in chain that jumps to it
    name: str
    rules: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Plane:
    interface: str
    listen_port: int
    config: GatewayConfig
    mtu: int = DEFAULT_MTU
    # The pods (their real addresses) the peer may reach and be reached by through the
    # link; None: every pod of the CIDR (the consumer's side: its own cluster).
    allowed: tuple[str, ...] | None = None


def chain_name(interface: str, suffix: str) -> str:
    return f"KO-{interface}-{suffix}"  # <= 28 characters: iptables' limit


def chains(plane: Plane) -> list[Chain]:
    """The chains of ``plane`` and their rules, in the order they are made."""
    dev, cfg = plane.interface, plane.config
    return [
        Chain("nat", "PREROUTING", chain_name(dev, "PRE"), (
            ("-i", dev, "-d", str(cfg.pod_cidr_remapped), "-j", "NETMAP", "--to", str(cfg.pod_cidr)),)),
        Chain("nat", "POSTROUTING", chain_name(dev, "POST"), (
            ("-o", dev, "-s", str(cfg.pod_cidr), "-j", "NETMAP", "--to", str(cfg.pod_cidr_remapped)),)),
        Chain("filter", "FORWARD", chain_name(dev, "FWD"), forward_rules(plane)),
        Chain("mangle", "FORWARD", chain_name(dev, "MSS"), (
            ("-o", dev, "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"),)),
    ]


def forward_rules(plane: Plane) -> tuple[tuple[str, ...], ...]:
    """What may cross the link. FORWARD sees a packet after PREROUTING's NETMAP and before
    POSTROUTING's, so both directions are matched at the pods' real addresses."""
    dev = plane.interface
    if plane.allowed is None:
        return (("-i", dev, "-j", "ACCEPT"), ("-o", dev, "-j", "ACCEPT"))
    rules: list[tuple[str, ...]] = []
    for ip in plane.allowed:
        rules += [("-i", dev, "-d", f"{ip}/32", "-j", "ACCEPT"), ("-o", dev, "-s", f"{ip}/32", "-j", "ACCEPT")]
    return (*rules, ("-i", dev, "-j", "DROP"), ("-o", dev, "-j", "DROP"))


def restore_text(chain: Chain) -> str:
    """``iptables-restore --noflush`` input that replaces the chain's rules in one
    transaction: no packet ever meets it half-filled (an empty filter chain would let
    everything through to the built-in chain's policy)."""
    lines = [f"*{chain.table}", f"-F {chain.name}", *(f"-A {chain.name} {' '.join(rule)}" for rule in chain.rules), "COMMIT"]
    return "\n".join(lines) + "\n"


def jump(chain: Chain) -> tuple[str, ...]:
    """The rule in the built-in chain that sends everything to ``chain`` (first, so that
    kube-proxy's or the network plugin's own rules do not decide before it)."""
    return ("-m", "comment", "--comment", f"{COMMENT} {chain.name}", "-j", chain.name)


def wireguard_config(private_key: str, plane: Plane) -> str:
    """The ``wg setconf``/``syncconf`` text of the link (read from standard input: the
    private key is never written to a file)."""
    cfg = plane.config
    lines = ["[Interface]", f"PrivateKey = {private_key}", f"ListenPort = {plane.listen_port}"]
    if cfg.has_peer:
        lines += ["", "[Peer]", f"PublicKey = {cfg.peer_public_key}", f"AllowedIPs = {cfg.peer_pod_cidr_remapped}",
                  f"PersistentKeepalive = {KEEPALIVE_SECONDS}"]
        if cfg.peer_endpoint is not None:
            lines.append(f"Endpoint = {cfg.peer_endpoint[0]}:{cfg.peer_endpoint[1]}")
    return "\n".join(lines) + "\n"


def route_command(plane: Plane) -> Argv:
    return ["ip", "route", "replace", str(plane.config.peer_pod_cidr_remapped), "dev", plane.interface]


def link_up_command(plane: Plane) -> Argv:
    return ["ip", "link", "set", plane.interface, "mtu", str(plane.mtu), "up"]


def teardown_chain_commands(iptables: str, interface: str) -> list[Argv]:
    """Remove the jumps and chains of ``interface`` (each command may fail: already gone).
    The rules are not needed to name them: a chain is flushed whole."""
    out: list[Argv] = []
    for table, builtin, suffix in (("nat", "PREROUTING", "PRE"), ("nat", "POSTROUTING", "POST"),
                                   ("filter", "FORWARD", "FWD"), ("mangle", "FORWARD", "MSS")):
        name = chain_name(interface, suffix)
        out.append([iptables, "-w", "-t", table, "-D", builtin, "-m", "comment", "--comment", f"{COMMENT} {name}",
                    "-j", name])
        out.append([iptables, "-w", "-t", table, "-F", name])
        out.append([iptables, "-w", "-t", table, "-X", name])
    return out
