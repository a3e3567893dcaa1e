"""The fabric's pure half: the four CIDRs, the gateway's ConfigMap, keys and endpoints."""

from __future__ import annotations

import pytest

from kube_offload import fabric as f

KEY = "SwuqK2itykU02zfFbOIBiyYegw8IoxCNyniHZpPQoVM="


def cidrs(**overrides: str) -> f.FabricCIDRs:
    args = {"local": "10.0.0.0/16", "local_remapped": "10.200.0.0/16", "remote": "10.0.0.0/16",
            "remote_remapped": "10.100.0.0/16"}
    args.update(overrides)
    return f.FabricCIDRs.parse(**args)


def test_overlapping_pod_cidrs_are_what_the_remapping_is_for() -> None:
    c = cidrs()
    assert c.local_gateway() == {f.POD_CIDR: "10.0.0.0/16", f.POD_CIDR_REMAPPED: "10.200.0.0/16",
                                 f.PEER_POD_CIDR_REMAPPED: "10.100.0.0/16"}
    assert c.remote_gateway() == {f.POD_CIDR: "10.0.0.0/16", f.POD_CIDR_REMAPPED: "10.100.0.0/16",
                                  f.PEER_POD_CIDR_REMAPPED: "10.200.0.0/16"}
    # the virtual kubelet is told the same translation
    assert c.vkubelet_values() == {"podCIDR": "10.0.0.0/16", "podCIDRRemapped": "10.100.0.0/16",
                                   "localPodCIDRRemapped": "10.200.0.0/16"}


@pytest.mark.parametrize("overrides, message", [
    ({"local": "10.0.0.1/16"}, "--local-pod-cidr '10.0.0.1/16' is not a CIDR without host bits"),
    ({"remote_remapped": "10.100.0.0/24"}, "--remote-pod-cidr-remapped 10.100.0.0/24 must have the prefix length"),
    ({"remote_remapped": "10.0.0.0/16"}, "--remote-pod-cidr-remapped 10.0.0.0/16 overlaps --local-pod-cidr"),
    ({"local_remapped": "10.0.0.0/16"}, "--local-pod-cidr-remapped 10.0.0.0/16 overlaps --remote-pod-cidr"),
    ({"local_remapped": "10.100.0.0/16"}, "the two sides' remapped ranges must differ"),
    ({"local": "fd00::/64"}, "IPv4 only"),
])
def test_bad_cidrs_name_the_flag(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(f.FabricError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cidrs(**overrides)


def test_gateway_config_is_read_and_checked() -> None:
    data = {**cidrs().local_gateway(), f.PEER_PUBLIC_KEY: KEY, f.PEER_ENDPOINT: "172.31.250.5:51920"}
    config = f.parse_gateway_config(data, "cm")
    assert config.has_peer and config.peer_endpoint == ("172.31.250.5", 51920)
    assert str(config.peer_pod_cidr_remapped) == "10.100.0.0/16"
    # no peer yet: the gateway still comes up (peer exchanges the keys once both are)
    assert not f.parse_gateway_config(cidrs().local_gateway(), "cm").has_peer


@pytest.mark.parametrize("change, message", [
    ({f.POD_CIDR: ""}, "cm has no podCIDR"),
    ({f.PEER_PUBLIC_KEY: "not-base64!"}, "cm peerPublicKey is not base64"),
    ({f.PEER_PUBLIC_KEY: "AAAA"}, "decodes to 3 bytes"),
    ({f.PEER_ENDPOINT: "host"}, "expected HOST:PORT"),
    ({f.PEER_ENDPOINT: "host:70000"}, "expected HOST:PORT"),
    ({f.PEER_POD_CIDR_REMAPPED: "10.0.5.0/24"}, "overlaps podCIDR"),
])
def test_a_bad_config_map_names_the_key(change: dict[str, str], message: str) -> None:
    data = {**cidrs().local_gateway(), f.PEER_PUBLIC_KEY: KEY, **change}
    with pytest.raises(f.FabricError, match=message):
        f.parse_gateway_config(data, "cm")


def test_names() -> None:
    assert f.gateway_name("kube-offload", "remote-1") == "kube-offload-gateway-remote-1"
    assert f.key_secret_name("kube-offload", "remote-1") == "kube-offload-gateway-remote-1-key"
    name = f.interface_name("a-very-long-cluster-id-of-sixty-three-characters-abcdefghijklmno")
    assert len(name) <= 15 and name == f.interface_name("a-very-long-cluster-id-of-sixty-three-characters-abcdefghijklmno")
    assert f.interface_name("remote-1") != f.interface_name("remote-2")
