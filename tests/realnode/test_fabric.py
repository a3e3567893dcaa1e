"""The fabric between two real nodes' namespaces, for real, without clusters: the kernel
routes and translates (NETMAP) as fabric.py says, in namespaces this test makes and
removes. A "pod" is a namespace behind a veth of its node's namespace, as the CNI bridge's
pods are; the cluster-level path (a local Service to an offloaded pod) is in the
charts-as-pods tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Iterator

import pytest

from kube_offload_harness import fabric, netns

NODE_A, NODE_B, POD_A, POD_B = "koft-a", "koft-b", "koft-pa", "koft-pb"
A = fabric.Member(NODE_A, slot=200, pod_cidr="172.31.200.0/24")
B = fabric.Member(NODE_B, slot=201, pod_cidr="172.31.201.0/24")
LINK = fabric.Link(63, A, B)


def _need_root() -> None:
    unmet = [what for what, ok in (("root", os.geteuid() == 0), ("iptables", shutil.which("iptables")),
                                  ("ip", shutil.which("ip")), ("nsenter", shutil.which("nsenter"))) if not ok]
    if unmet:
        message = f"the fabric test needs {', '.join(unmet)} (scripts/bootstrap.sh installs them as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _run(ns: str, argv: list[str]) -> subprocess.CompletedProcess:
    return netns.in_netns(ns, argv)


def _pod(node: str, pod: str, side: str, cidr: str) -> None:
    """A namespace with one address of ``cidr`` (.10) behind a veth whose node end has .1."""
    prefix = cidr.rsplit(".", 1)[0]
    node_end, pod_end = f"kofp{side}n", f"kofp{side}p"
    subprocess.run(["ip", "netns", "add", pod], check=True)
    _run(node, ["ip", "link", "add", node_end, "type", "veth", "peer", "name", pod_end, "netns", pod])
    _run(node, ["ip", "addr", "add", f"{prefix}.1/24", "dev", node_end])
    _run(node, ["ip", "link", "set", node_end, "up"])
    _run(pod, ["ip", "addr", "add", f"{prefix}.10/24", "dev", pod_end])
    _run(pod, ["ip", "link", "set", pod_end, "up"])
    _run(pod, ["ip", "link", "set", "lo", "up"])
    _run(pod, ["ip", "route", "add", "default", "via", f"{prefix}.1"])


@pytest.fixture
def joined() -> Iterator[None]:
    _need_root()
    made = [NODE_A, NODE_B, POD_A, POD_B]
    leftover = [ns for ns in made if ns in netns.list_netns()]
    assert not leftover, f"namespaces of an earlier run still exist: {leftover}"
    try:
        for node in (NODE_A, NODE_B):
            subprocess.run(["ip", "netns", "add", node], check=True)
            _run(node, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            _run(node, ["ip", "link", "set", "lo", "up"])
        _pod(NODE_A, POD_A, "a", A.pod_cidr)
        _pod(NODE_B, POD_B, "b", B.pod_cidr)
        fabric.connect(LINK, _run)
        yield
    finally:
        for ns in made:
            if ns in netns.list_netns():
                subprocess.run(["ip", "netns", "delete", ns], check=False)
        assert not [ns for ns in made if ns in netns.list_netns()]


SERVER = ("import socket,sys\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', 8080)); s.listen(1); print('listening', flush=True)\n"
          "c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n")
CLIENT = ("import socket,sys\n"
          "c=socket.create_connection((sys.argv[1], 8080), timeout=5); print(c.recv(100).decode())\n")


def _exchange(server_ns: str, client_ns: str, address: str) -> str:
    """Connect from ``client_ns`` to ``address``:8080 served in ``server_ns``; the server
    answers with the source address it saw."""
    server = subprocess.Popen(["nsenter", f"--net={netns.netns_path(server_ns)}", "--", sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        client = netns.in_netns(client_ns, [sys.executable, "-c", CLIENT, address])
        return client.stdout.strip()
    finally:
        server.kill()
        server.wait(timeout=10)


def test_pods_reach_each_other_under_remapped_addresses(joined) -> None:
    # a local pod reaches the remote pod 172.31.201.10 at the address the local cluster
    # shows for it, and the remote pod sees the local pod's remapped address
    assert _exchange(POD_B, POD_A, "172.30.201.10") == "172.30.200.10"
    # and the other way (the remote pod calling a local endpoint of a reflected Service)
    assert _exchange(POD_A, POD_B, "172.30.200.10") == "172.30.201.10"


def test_the_real_pod_addresses_are_not_routed_across(joined) -> None:
    # only the remapped CIDRs cross the link: a pod's real address of the other cluster
    # is not routed (the clusters may use the same pod CIDR)
    server = subprocess.Popen(["nsenter", f"--net={netns.netns_path(POD_B)}", "--", sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        result = netns.in_netns(POD_A, [sys.executable, "-c", CLIENT, "172.31.201.10"], check=False)
    finally:
        server.kill()
        server.wait(timeout=10)
    assert result.returncode != 0
    assert "unreachable" in result.stderr or "timed out" in result.stderr, result.stderr


def test_disconnect_removes_link_routes_and_rules(joined) -> None:
    fabric.disconnect(LINK, lambda ns, argv: netns.in_netns(ns, argv, check=False))
    for node, dev in ((NODE_A, LINK.name("a")), (NODE_B, LINK.name("b"))):
        assert not netns.link_exists(dev, node)
        rules = _run(node, ["iptables", "-w", "-t", "nat", "-S"]).stdout
        assert fabric.RULE_COMMENT not in rules, rules
        routes = _run(node, ["ip", "route"]).stdout
        assert "172.30." not in routes, routes
    started = time.monotonic()
    with pytest.raises(netns.NetnsError):
        netns.in_netns(POD_A, [sys.executable, "-c", CLIENT, "172.30.201.10"])
    assert time.monotonic() - started < 30
