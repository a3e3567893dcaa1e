"""fabric.py's pure plan: names, addresses, remapped CIDRs and the exact commands."""

from __future__ import annotations

import ipaddress

import pytest

from kube_offload_harness import fabric
import argparse

from vkubelet.shared.ip_remapping import add_remapping_flags, remapping_settings_from_args

A = fabric.Member("kon-0", 0, "172.31.0.0/24")
B = fabric.Member("kon-1", 1, "172.31.1.0/24")


def test_link_names_and_addresses_fit_the_kernel_and_the_range() -> None:
    link = fabric.Link(63, A, B)
    assert link.name("a") == "kof63a" and len(link.name("b")) <= 15
    assert link.network == ipaddress.IPv4Network("172.31.251.252/30")
    assert (link.address("a"), link.address("b")) == ("172.31.251.253", "172.31.251.254")
    with pytest.raises(ValueError, match="index 64"):
        fabric.Link(64, A, B)
    with pytest.raises(ValueError, match="itself"):
        fabric.Link(0, A, A)


def test_remapped_cidrs_are_one_per_slot_and_never_a_pod_cidr() -> None:
    assert fabric.remapped_pod_cidr(0) == "172.30.0.0/24"
    assert fabric.remapped_pod_cidr(7) == "172.30.7.0/24"
    assert not ipaddress.IPv4Network(fabric.remapped_pod_cidr(7)).overlaps(ipaddress.IPv4Network("172.31.0.0/16"))
    with pytest.raises(ValueError):
        fabric.remapped_pod_cidr(256)


def test_each_side_routes_the_peer_and_translates_its_own_pods() -> None:
    commands = fabric.connect_commands(fabric.Link(0, A, B))
    assert commands[0] == ("kon-0", ["ip", "link", "add", "kof0a", "type", "veth", "peer", "name", "kof0b",
                                     "netns", "kon-1"])
    by_ns = {ns: [" ".join(argv) for n, argv in commands if n == ns] for ns in ("kon-0", "kon-1")}
    assert "ip route add 172.30.1.0/24 via 172.31.251.2 dev kof0a" in by_ns["kon-0"]
    assert "ip route add 172.30.0.0/24 via 172.31.251.1 dev kof0b" in by_ns["kon-1"]
    pre = [c for c in by_ns["kon-1"] if "PREROUTING" in c]
    assert pre == ["iptables -w -t nat -A PREROUTING -i kof0b -d 172.30.1.0/24 -m comment --comment "
                   "kube-offload-fabric kof0b -j NETMAP --to 172.31.1.0/24"]
    post = [c for c in by_ns["kon-0"] if "POSTROUTING" in c]
    assert post == ["iptables -w -t nat -A POSTROUTING -o kof0a -s 172.31.0.0/24 -m comment --comment "
                    "kube-offload-fabric kof0a -j NETMAP --to 172.30.0.0/24"]


def test_disconnect_deletes_exactly_the_rules_connect_added() -> None:
    link = fabric.Link(2, A, B)
    added = {(ns, tuple(argv[argv.index("-A") + 1:])) for ns, argv in fabric.connect_commands(link) if "-A" in argv}
    deleted = {(ns, tuple(argv[argv.index("-D") + 1:])) for ns, argv in fabric.disconnect_commands(link) if "-D" in argv}
    assert added == deleted and len(added) == 4


def test_remapping_args_are_what_the_virtual_kubelet_parses_and_match_the_fabric() -> None:
    parser = argparse.ArgumentParser()
    add_remapping_flags(parser, "vkubelet")
    settings = remapping_settings_from_args(parser.parse_args(fabric.remapping_args(A, B)))
    assert settings.problem() is None
    # the remote pod 172.31.1.9 is shown locally where the fabric delivers it, and the
    # remote side is told the local pod's address the fabric gives it
    assert settings.remote_pod_ips.translate("172.31.1.9") == "172.30.1.9"
    assert settings.local_pod_ips.translate("172.31.0.4") == "172.30.0.4"


def test_links_for_makes_a_star_from_the_local_node() -> None:
    c = fabric.Member("kon-2", 2, "172.31.2.0/24")
    links = fabric.links_for(A, [B, c])
    assert [(link.index, link.a.netns, link.b.netns) for link in links] == [(0, "kon-0", "kon-1"), (1, "kon-0", "kon-2")]
