"""The gateway's pure parts: keys, the kernel's state for one peering, the route agent."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gateway import dataplane as dp
from gateway import keys
from gateway import routes as r
from kube_offload import fabric as f


def plane(endpoint: tuple[str, int] | None = ("192.0.2.7", 31820), peer_key: str = "K" * 43 + "=") -> dp.Plane:
    config = f.GatewayConfig(f.parse_cidr("10.0.0.0/16", "a"), f.parse_cidr("10.200.0.0/16", "b"),
                             f.parse_cidr("10.100.0.0/16", "c"), peer_key, endpoint)
    return dp.Plane("kowg0123456789", 51820, config)


def test_public_key_is_what_wg_prints() -> None:
    private = keys.generate_private_key()
    assert private != keys.generate_private_key()
    if shutil.which("wg"):
        printed = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True, check=True).stdout
        assert keys.public_key(private) == printed.strip()
    assert f.key_problem(keys.public_key(private), "k") is None


def test_wireguard_config_names_one_peer_and_its_range_only() -> None:
    text = dp.wireguard_config("PRIVATE", plane())
    assert text.splitlines() == [
        "[Interface]", "PrivateKey = PRIVATE", "ListenPort = 51820", "",
        "[Peer]", f"PublicKey = {'K' * 43}=", "AllowedIPs = 10.100.0.0/16", "PersistentKeepalive = 25",
        "Endpoint = 192.0.2.7:31820",
    ]
    # the peer dials us: no endpoint; no peer yet: no [Peer]
    assert "Endpoint" not in dp.wireguard_config("P", plane(endpoint=None))
    assert "[Peer]" not in dp.wireguard_config("P", plane(peer_key=""))


def test_nat_at_the_same_offsets_in_chains_named_after_the_link() -> None:
    chains = {c.name: c for c in dp.chains(plane())}
    pre, post = chains["KO-kowg0123456789-PRE"], chains["KO-kowg0123456789-POST"]
    assert (pre.table, pre.builtin) == ("nat", "PREROUTING")
    assert pre.rules == (("-i", "kowg0123456789", "-d", "10.200.0.0/16", "-j", "NETMAP", "--to", "10.0.0.0/16"),)
    assert post.rules == (("-o", "kowg0123456789", "-s", "10.0.0.0/16", "-j", "NETMAP", "--to", "10.200.0.0/16"),)
    assert all(len(name) <= 28 for name in chains)
    assert dp.route_command(plane()) == ["ip", "route", "replace", "10.100.0.0/16", "dev", "kowg0123456789"]
    # teardown names every chain made, and the jump to it
    teardown = [" ".join(argv) for argv in dp.teardown_chain_commands("iptables-nft", "kowg0123456789")]
    for chain in chains.values():
        assert any(f"-D {chain.builtin} " in line and line.endswith(f"-j {chain.name}") for line in teardown)
        assert f"iptables-nft -w -t {chain.table} -X {chain.name}" in teardown


def test_route_agent_routes_to_gateways_on_other_nodes_only() -> None:
    places = [r.GatewayPlace("remote-1", "10.100.0.0/16", "192.0.2.1"),
              r.GatewayPlace("remote-2", "10.101.0.0/16", "192.0.2.2"),
              r.GatewayPlace("remote-3", "10.102.0.0/16", "")]  # its pod runs nowhere now
    assert r.desired_routes(places, {"192.0.2.2"}) == {"10.100.0.0/16": "192.0.2.1"}
    current = r.parse_routes("10.101.0.0/16 via 192.0.2.2 dev eth0 \n10.100.0.0/16 via 192.0.2.9 dev eth0 \n")
    assert r.route_commands(current, {"10.100.0.0/16": "192.0.2.1"}) == [
        ["ip", "route", "replace", "10.100.0.0/16", "via", "192.0.2.1", "proto", "75"],
        ["ip", "route", "delete", "10.101.0.0/16", "proto", "75"],
    ]
    assert r.route_commands({"10.100.0.0/16": "192.0.2.1"}, {"10.100.0.0/16": "192.0.2.1"}) == []


def test_route_agent_reads_gateways_from_their_config_maps_and_pods() -> None:
    label = {f.LABEL_GATEWAY_PEER: "remote-1"}
    config_maps = [{"metadata": {"labels": label}, "data": {f.PEER_POD_CIDR_REMAPPED: "10.100.0.0/16"}}]
    pending = {"metadata": {"labels": label}, "status": {"phase": "Pending", "hostIP": "192.0.2.5"}}
    running = {"metadata": {"labels": label}, "status": {"phase": "Running", "hostIP": "192.0.2.1"}}
    assert r.places_from(config_maps, [pending]) == [r.GatewayPlace("remote-1", "10.100.0.0/16", "")]
    assert r.places_from(config_maps, [pending, running]) == [r.GatewayPlace("remote-1", "10.100.0.0/16", "192.0.2.1")]


@pytest.mark.parametrize("bad", ["", "AAAA"])
def test_public_key_of_a_bad_private_key_fails(bad: str) -> None:
    with pytest.raises(ValueError):
        keys.public_key(bad)


def test_a_providers_link_carries_the_consumers_own_pods_only() -> None:
    open_plane = plane()
    assert dp.forward_rules(open_plane) == (("-i", "kowg0123456789", "-j", "ACCEPT"), ("-o", "kowg0123456789", "-j", "ACCEPT"))
    fenced = dp.Plane(open_plane.interface, 51820, open_plane.config, allowed=("10.0.3.7",))
    assert dp.forward_rules(fenced) == (
        ("-i", "kowg0123456789", "-d", "10.0.3.7/32", "-j", "ACCEPT"),
        ("-o", "kowg0123456789", "-s", "10.0.3.7/32", "-j", "ACCEPT"),
        ("-i", "kowg0123456789", "-j", "DROP"),
        ("-o", "kowg0123456789", "-j", "DROP"),
    )
    # replaced in one transaction, never flushed in the open
    [forward] = [c for c in dp.chains(fenced) if c.table == "filter"]
    assert dp.restore_text(forward).splitlines() == [
        "*filter", "-F KO-kowg0123456789-FWD",
        "-A KO-kowg0123456789-FWD -i kowg0123456789 -d 10.0.3.7/32 -j ACCEPT",
        "-A KO-kowg0123456789-FWD -o kowg0123456789 -s 10.0.3.7/32 -j ACCEPT",
        "-A KO-kowg0123456789-FWD -i kowg0123456789 -j DROP",
        "-A KO-kowg0123456789-FWD -o kowg0123456789 -j DROP", "COMMIT"]
