"""The gateway's data plane for real, without clusters (harness gateway_lab.py): two
clusters' nodes as namespaces this test makes and removes, the product's engine
(gateway/engine.py) making the WireGuard link (wireguard-go here: this machine's kernel has
no WireGuard module), the peer, the route and the NETMAP rules; the route agent's route on
a second node of cluster A. The cluster-level paths (Services, DNS, the gateway as a pod)
are in test_offloaded_pods.py and test_charts_as_pods.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

from gateway import dataplane as dp
from kube_offload_harness import binaries, gateway_lab as lab_mod, netns
from kube_offload_harness.gateway_lab import A1, A2, B1, PA1, PA2, PB1, REMAPPED_A, REMAPPED_B, Lab


def _need() -> None:
    unmet = [what for what, ok in (("root", os.geteuid() == 0), ("iptables-nft", shutil.which("iptables-nft")),
                                  ("wg", shutil.which("wg")), ("nsenter", shutil.which("nsenter")),
                                  ("wireguard-go", os.access(binaries.wireguard_go_path(), os.X_OK))) if not ok]
    if unmet:
        message = f"the gateway test needs {', '.join(unmet)} (scripts/bootstrap.sh installs them as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    _need()
    made = lab_mod.make(overlap=True, wireguard_go=binaries.wireguard_go_path())
    try:
        lab_mod.start_gateways(made)
        yield made
    finally:
        assert lab_mod.remove(made) == []


SERVER = ("import socket,sys\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', 8080)); s.listen(1); print('listening', flush=True)\n"
          "c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n")
CLIENT = ("import socket,sys\n"
          "c=socket.create_connection((sys.argv[1], 8080), timeout=float(sys.argv[2])); print(c.recv(100).decode())\n")


def exchange(server_ns: str, client_ns: str, address: str, timeout: float = 10) -> subprocess.CompletedProcess:
    """Connect from ``client_ns`` to ``address``:8080 served in ``server_ns``; the server
    answers with the source address it saw."""
    server = subprocess.Popen(["nsenter", f"--net={netns.netns_path(server_ns)}", "--", sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        return netns.in_netns(client_ns, [sys.executable, "-c", CLIENT, address, str(timeout)], check=False)
    finally:
        server.kill()
        server.wait(timeout=10)


def test_the_same_pod_cidr_on_both_sides(lab: Lab) -> None:
    # the shape that needs remapping: both pods have the same address
    assert lab.pod_ip(PA1) == lab.pod_ip(PB1) == "172.31.200.10"


def test_pods_reach_each_other_through_the_tunnel_under_remapped_addresses(lab: Lab) -> None:
    pa1, pb1 = lab.pod_ip(PA1), lab.pod_ip(PB1)
    # A's pod reaches B's at the address A shows for it; B's pod sees A's remapped address
    answer = exchange(PB1, PA1, lab.remapped(pb1, REMAPPED_B))
    assert answer.stdout.strip() == lab.remapped(pa1, REMAPPED_A), answer.stderr
    # and the other way (an offloaded pod calling a local endpoint of a reflected Service)
    answer = exchange(PA1, PB1, lab.remapped(pa1, REMAPPED_A))
    assert answer.stdout.strip() == lab.remapped(pb1, REMAPPED_B), answer.stderr
    # it went through WireGuard: the peer completed a handshake
    assert lab.engines["a"].latest_handshake(lab.planes["a"].interface) is not None


def test_another_node_reaches_the_peer_through_the_gateways_node(lab: Lab) -> None:
    # a2 has no tunnel: the route agent's route (via a1) brings its pods' packets there
    answer = exchange(PB1, PA2, lab.remapped(lab.pod_ip(PB1), REMAPPED_B))
    assert answer.stdout.strip() == lab.remapped(lab.pod_ip(PA2), REMAPPED_A), answer.stderr
    routes = netns.in_netns(A2, ["ip", "-4", "route", "show", "proto", "75"]).stdout
    assert f"{REMAPPED_B} via" in routes, routes


def test_the_link_is_the_userspace_one_where_the_kernel_has_none(lab: Lab) -> None:
    kernel = subprocess.run(["ip", "link", "add", "kogw-probe", "type", "wireguard"], capture_output=True, check=False)
    if kernel.returncode == 0:
        subprocess.run(["ip", "link", "delete", "kogw-probe"], check=False)
        assert lab.engines["a"].kind == "kernel"
    else:
        assert lab.engines["a"].kind == "userspace"
        assert lab.engines["a"]._userspace_alive()


def test_apply_again_changes_nothing_and_mends_a_lost_rule(lab: Lab) -> None:
    engine, plane = lab.engines["a"], lab.planes["a"]
    before = netns.in_netns(A1, ["iptables-nft", "-t", "nat", "-S"]).stdout
    engine.apply(engine._applied[0], plane)  # type: ignore[index]
    assert netns.in_netns(A1, ["iptables-nft", "-t", "nat", "-S"]).stdout == before
    # someone flushes the gateway's chain: the next pass puts the rule back
    pre = dp.chain_name(plane.interface, "PRE")
    netns.in_netns(A1, ["iptables-nft", "-t", "nat", "-F", pre])
    assert exchange(PB1, PA1, lab.remapped(lab.pod_ip(PB1), REMAPPED_B), timeout=3).returncode == 0  # outbound still SNATs
    assert exchange(PA1, PB1, lab.remapped(lab.pod_ip(PA1), REMAPPED_A), timeout=3).returncode != 0  # inbound lost its DNAT
    engine.apply(engine._applied[0], plane)  # type: ignore[index]
    assert netns.in_netns(A1, ["iptables-nft", "-t", "nat", "-S"]).stdout == before
    assert exchange(PA1, PB1, lab.remapped(lab.pod_ip(PA1), REMAPPED_A)).returncode == 0


def test_a_provider_gateway_lets_only_the_allowed_pods_use_the_link(lab: Lab) -> None:
    from dataclasses import replace

    engine, plane = lab.engines["b"], lab.planes["b"]
    private = engine._applied[0]  # type: ignore[index]
    toward_b = lab.remapped(lab.pod_ip(PB1), REMAPPED_B)
    try:
        engine.apply(private, replace(plane, allowed=()))  # no pod of B's is the consumer's
        assert exchange(PB1, PA1, toward_b, timeout=3).returncode != 0
        assert exchange(PA1, PB1, lab.remapped(lab.pod_ip(PA1), REMAPPED_A), timeout=3).returncode != 0
        engine.apply(private, replace(plane, allowed=(lab.pod_ip(PB1),)))
        answer = exchange(PB1, PA1, toward_b)
        assert answer.stdout.strip() == lab.remapped(lab.pod_ip(PA1), REMAPPED_A), answer.stderr
        assert exchange(PA1, PB1, lab.remapped(lab.pod_ip(PA1), REMAPPED_A)).returncode == 0
    finally:
        engine.apply(private, plane)


def test_teardown_leaves_nothing_on_the_node(lab: Lab) -> None:
    engine, plane = lab.engines["b"], lab.planes["b"]
    engine.teardown(plane.interface)
    assert not netns.link_exists(plane.interface, B1)
    for table in ("nat", "filter", "mangle"):
        rules = netns.in_netns(B1, ["iptables-nft", "-t", table, "-S"]).stdout
        assert f"KO-{plane.interface}" not in rules, rules
    assert "172.30." not in netns.in_netns(B1, ["ip", "route"]).stdout
    assert not os.path.exists(f"/var/run/wireguard/{plane.interface}.sock")
    assert exchange(PB1, PA1, lab.remapped(lab.pod_ip(PB1), REMAPPED_B), timeout=3).returncode != 0
