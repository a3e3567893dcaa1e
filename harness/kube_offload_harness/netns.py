"""Thin I/O on network namespaces, veth links, mounts and cgroups for the real nodes.

Every function acts on one named object the harness created (a namespace ``kon-<slot>``,
a veth ``kon<slot>h``, mounts under a node's state directory, a cgroup ``/kube-offload-<slot>``)
and never on anything found by a broad pattern, so ``down`` removes exactly what ``up`` made.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts a namespace


class NetnsError(RuntimeError):
    """A namespace/link command failed; the message has the command and its error."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def setns(path: Path | str) -> None:
    """Move the calling thread into the network namespace at ``path``."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path) as target:
        if libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def list_netns() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def link_exists(name: str, netns: str | None = None) -> bool:
    args = ["-n", netns] if netns else []
    return _ip(*args, "link", "show", "dev", name, check=False).returncode == 0


def reserve_netns(netns: str) -> bool:
    """Create the namespace now, or say it exists already (False). `ip netns add` fails on
    an existing name, so two environments choosing slots at once never get the same one."""
    result = _ip("netns", "add", netns, check=False)
    if result.returncode == 0:
        return True
    if netns in list_netns():
        return False
    raise NetnsError(f"`ip netns add {netns}` failed: {result.stderr.strip()}")


def create_node_network(netns: str, veth_host: str, veth_node: str, host_cidr: str, node_cidr: str) -> None:
    """A namespace (made now, or reserved when the slot was chosen) joined to the machine
    by one veth pair with an address at each end; forwarding on inside it only (the
    setting is per namespace; the machine's stays 0)."""
    if netns not in list_netns():
        _ip("netns", "add", netns)
    _ip("link", "add", veth_host, "type", "veth", "peer", "name", veth_node)
    _ip("link", "set", veth_node, "netns", netns)
    # IPv4 only: no IPv6 link-local addresses, router solicitations or neighbour discovery
    # on our links (each setting is the interface's own).
    Path(f"/proc/sys/net/ipv6/conf/{veth_host}/disable_ipv6").write_text("1\n")
    in_netns(netns, ["sysctl", "-q", "-w", f"net.ipv6.conf.{veth_node}.disable_ipv6=1"])
    _ip("addr", "add", host_cidr, "dev", veth_host)
    _ip("link", "set", veth_host, "up")
    _ip("-n", netns, "link", "set", "lo", "up")
    _ip("-n", netns, "addr", "add", node_cidr, "dev", veth_node)
    _ip("-n", netns, "link", "set", veth_node, "up")
    in_netns(netns, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])


def add_route(route: list[str], netns: str | None = None) -> None:
    """``ip route replace <route>`` (idempotent) in ``netns``, or in the machine's namespace."""
    _ip(*(["-n", netns] if netns else []), "route", "replace", *route)


def route_exists(destination: str, netns: str | None = None) -> bool:
    args = ["-n", netns] if netns else []
    result = _ip(*args, "route", "show", "exact", destination, check=False)
    return result.returncode == 0 and bool(result.stdout.strip())


def delete_route(route: list[str], netns: str | None = None) -> bool:
    """Delete one route the harness added; False if it was not there (its link gone)."""
    if not route_exists(route[0], netns):
        return False
    return _ip(*(["-n", netns] if netns else []), "route", "delete", *route, check=False).returncode == 0


def in_netns(netns: str, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``argv`` in ``netns`` only (nsenter --net: unlike `ip netns exec`, the mount
    namespace stays the machine's, so /sys/fs/cgroup is still there)."""
    result = subprocess.run(["nsenter", f"--net={netns_path(netns)}", "--", *argv], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` in {netns} failed: {result.stderr.strip()}")
    return result


def delete_node_network(netns: str, veth_host: str) -> None:
    """Delete the namespace (its veth end, bridge and pods' veths go with it) and the
    machine's end of the veth if the kernel has not removed it already."""
    if netns in list_netns():
        _ip("netns", "delete", netns)
    if link_exists(veth_host):
        _ip("link", "delete", veth_host, check=False)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or under ``directory``, deepest first (the order to unmount in)."""
    prefix = str(directory.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_under(directory: Path) -> list[str]:
    """Unmount everything the node's kubelet and containerd mounted under its directory
    (overlay rootfs, shm, netns bind mounts, volume tmpfs); lazily, as the kubelet does."""
    done = []
    for _ in range(5):  # a mount may be stacked several times on one point
        points = mounts_under(directory)
        if not points:
            break
        for point in points:
            if subprocess.run(["umount", "-l", point], capture_output=True, check=False).returncode == 0:
                done.append(point)
    return done


def cgroup_dirs(root: str, hierarchies: list[Path]) -> list[Path]:
    """Every directory of cgroup ``root`` in each v1 hierarchy, children first."""
    found: list[Path] = []
    for hierarchy in hierarchies:
        top = hierarchy / root.strip("/")
        if top.is_dir():
            found += [Path(dirpath) for dirpath, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def v1_hierarchies(cgroup_mount: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """The machine's v1 hierarchies (cpu, memory, ..., systemd); not the hybrid unified one."""
    return sorted(p for p in cgroup_mount.iterdir() if p.is_dir() and p.name != "unified" and (p / "cgroup.procs").exists())


def create_cgroup_root(root: str, hierarchies: list[Path]) -> None:
    """The kubelet's --cgroup-root must exist in every hierarchy; a new cpuset cgroup has no
    CPUs or memory nodes until given its parent's."""
    for hierarchy in hierarchies:
        path = hierarchy / root.strip("/")
        path.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((hierarchy / name).read_text())


def pids_in_cgroup(root: str, hierarchies: list[Path]) -> set[int]:
    pids: set[int] = set()
    for directory in cgroup_dirs(root, hierarchies):
        try:
            pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    return pids


def kill_cgroup(root: str, hierarchies: list[Path], timeout: float = 10) -> set[int]:
    """SIGKILL every process in the node's cgroup tree (its containers and nothing else)."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = pids_in_cgroup(root, hierarchies)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


def remove_cgroup(root: str, hierarchies: list[Path]) -> list[Path]:
    left = []
    for directory in cgroup_dirs(root, hierarchies):
        try:
            directory.rmdir()
        except OSError:
            left.append(directory)
    return left


def pids_with_arg(value: str, *, prefix: bool = False) -> list[int]:
    """Processes whose command line has ``value`` as one argument (e.g. the node's
    containerd socket: its shims are started with ``-address <socket>``), or, with
    ``prefix``, an argument that starts with it (``172.31.250.1:`` for a forwarder's
    ``--listen 172.31.250.1:<port>``)."""
    found = []
    wanted = value.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.startswith(wanted) for arg in args) if prefix else wanted in args:
            found.append(int(entry.name))
    return found
