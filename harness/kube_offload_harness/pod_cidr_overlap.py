"""Two clusters with the same pod CIDR on one machine (docs/real-nodes.md, "Overlapping
pod CIDRs").

Clusters built alike hand out the same pod addresses; the gateways (gateway/, docs/networking.md) and the
virtual kubelet's remapping exist for exactly that. The harness gives a remote's real node
the local real node's pod CIDR when the topology asks (``Topology.overlapping_pod_cidrs``),
and then one thing needs care: both kube-apiservers run in the machine's network namespace
and reach their own cluster's pods by their real addresses (the enforcer's webhook behind
its Service, a virtual kubelet pod's API), and pods reach their apiserver through the
forwarder on the machine end of their node's link. The machine's main routing table
sends the shared CIDR to the *local* node; for the remote node:

- the route to the CIDR through the remote node's link lives in a routing table of its own
  (:func:`table`), chosen by a firewall mark (``ip rule fwmark``);
- connections the remote's kube-apiserver opens get the mark: the process is moved into a
  cgroup v2 group of the harness (``kube-offload-overlap-<slot>``) and ``iptables -t mangle
  OUTPUT -m cgroup --path`` marks what its sockets send;
- connections that arrive from the remote node (a pod calling its apiserver's forwarder)
  are marked on the way in (``CONNMARK --set-mark`` in PREROUTING on the link) and their
  answers by the mark of their connection (``-m connmark`` in OUTPUT): a SYN-ACK belongs
  to no process, so a cgroup cannot mark it.

Nothing is forwarded (the machine's ip_forward stays 0): every packet starts or ends in a
process of the machine. Each rule carries the comment ``kube-offload-overlap <slot>``;
:func:`disconnect_commands` removes exactly what :func:`connect_commands` made.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

COMMENT = "kube-offload-overlap"
TABLE_BASE = 7300  # routing table 7300 + slot
RULE_PRIORITY_BASE = 7300  # before the main table's rule (32766)
MARK_BASE = 0x4B0F0000  # fwmark MARK_BASE + slot: far from kube-proxy's 0x4000/0x8000 bits
CGROUP2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))  # hybrid, then pure v2


@dataclass(frozen=True)
class Overlap:
    """One remote real node whose pod CIDR is also the local node's."""

    slot: int
    pod_cidr: str
    node_ip: str  # the node end of its link
    link: str  # the machine end of its link (the veth in the machine's namespace)

    @property
    def table(self) -> int:
        return TABLE_BASE + self.slot

    @property
    def mark(self) -> str:
        return hex(MARK_BASE + self.slot)

    @property
    def cgroup(self) -> str:
        """The cgroup v2 group (relative to the v2 root) its apiserver is moved into."""
        return f"kube-offload-overlap-{self.slot}"

    @property
    def comment(self) -> list[str]:
        return ["-m", "comment", "--comment", f"{COMMENT} {self.slot}"]


def route(overlap: Overlap) -> list[str]:
    return [overlap.pod_cidr, "via", overlap.node_ip, "dev", overlap.link, "table", str(overlap.table)]


def rule(overlap: Overlap) -> list[str]:
    return ["fwmark", overlap.mark, "lookup", str(overlap.table), "priority", str(RULE_PRIORITY_BASE + overlap.slot)]


def mangle_rules(overlap: Overlap) -> list[tuple[str, list[str]]]:
    """(chain, rule) of the marks: what the apiserver opens, what arrives on the link and
    the answers to it."""
    return [
        ("OUTPUT", ["-m", "cgroup", "--path", overlap.cgroup, *overlap.comment, "-j", "MARK", "--set-mark", overlap.mark]),
        ("PREROUTING", ["-i", overlap.link, *overlap.comment, "-j", "CONNMARK", "--set-mark", overlap.mark]),
        ("OUTPUT", ["-m", "connmark", "--mark", overlap.mark, *overlap.comment, "-j", "MARK", "--set-mark", overlap.mark]),
    ]


def connect_commands(overlap: Overlap) -> list[list[str]]:
    """The machine-namespace commands that route the remote's shared CIDR (pure)."""
    return [
        ["ip", "route", "replace", *route(overlap)],
        ["ip", "rule", "add", *rule(overlap)],
        *(["iptables", "-w", "-t", "mangle", "-A", chain, *spec] for chain, spec in mangle_rules(overlap)),
    ]


def disconnect_commands(overlap: Overlap) -> list[list[str]]:
    return [
        *(["iptables", "-w", "-t", "mangle", "-D", chain, *spec] for chain, spec in mangle_rules(overlap)),
        ["ip", "rule", "delete", *rule(overlap)],
        ["ip", "route", "delete", *route(overlap)],
    ]


# --- thin I/O ------------------------------------------------------------------------------
def cgroup2_root() -> Path | None:
    for candidate in CGROUP2_CANDIDATES:
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    return None


def _run(argv: list[str], *, check: bool) -> bool:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise OverlapError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
    return result.returncode == 0


class OverlapError(RuntimeError):
    pass


def connect(overlap: Overlap, apiserver_pids: list[int]) -> None:
    """Route the shared CIDR to the remote node for its apiserver (``apiserver_pids``)
    and for the connections its pods open; raises OverlapError naming what failed."""
    root = cgroup2_root()
    if root is None:
        raise OverlapError("no cgroup v2 hierarchy (/sys/fs/cgroup/unified or /sys/fs/cgroup): "
                           "overlapping pod CIDRs need one to mark the remote apiserver's connections")
    if not apiserver_pids:
        raise OverlapError("the remote cluster's kube-apiserver process was not found")
    _remove_rules(overlap)  # rules of a crashed run of this slot would be doubled
    group = root / overlap.cgroup
    group.mkdir(exist_ok=True)  # before the rule that names it: iptables resolves the path
    for pid in apiserver_pids:
        (group / "cgroup.procs").write_text(f"{pid}\n")
    for argv in connect_commands(overlap):
        _run(argv, check=True)


def _remove_rules(overlap: Overlap) -> list[str]:
    done = []
    for argv in disconnect_commands(overlap):
        while _run(argv, check=False):
            done.append(" ".join(argv[:6]))
    return done


def disconnect(overlap: Overlap) -> list[str]:
    """Remove the rules, the rule and the route (each as often as it is there), move what
    is left in the group back to the root and remove the group; what was removed."""
    done = _remove_rules(overlap)
    root = cgroup2_root()
    group = root / overlap.cgroup if root is not None else None
    if group is not None and group.is_dir():
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:
                pass  # exited meanwhile
        try:
            group.rmdir()
            done.append(f"cgroup {group}")
        except OSError:
            pass
    return done


def leftovers(overlap: Overlap) -> list[str]:
    """What of ``overlap`` still exists (empty after a clean disconnect)."""
    found = []
    rules = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True, check=False).stdout
    if f"lookup {overlap.table}" in rules:
        found.append(f"ip rule lookup {overlap.table}")
    routes = subprocess.run(["ip", "route", "show", "table", str(overlap.table)], capture_output=True, text=True,
                            check=False).stdout
    if routes.strip():
        found.append(f"routes of table {overlap.table}")
    mangle = subprocess.run(["iptables", "-w", "-t", "mangle", "-S"], capture_output=True, text=True, check=False).stdout
    found += [f"iptables rule {line}" for line in mangle.splitlines() if f'"{COMMENT} {overlap.slot}"' in line]
    root = cgroup2_root()
    if root is not None and (root / overlap.cgroup).is_dir():
        found.append(f"cgroup {root / overlap.cgroup}")
    return found
