"""Pod IP remapping (vkubelet/shared/ip_remapping.py): translation keeps an address's offset in its
network, addresses outside are kept and reported, and every setting that cannot work is
refused at start-up with the flag named."""

from __future__ import annotations

import argparse

import pytest

from vkubelet import cli
from vkubelet.shared.ip_remapping import (
    LOCAL_POD_CIDR_FLAG,
    LOCAL_POD_CIDR_REMAPPED_FLAG,
    NO_REMAPPING,
    REMOTE_POD_CIDR_FLAG,
    REMOTE_POD_CIDR_REMAPPED_FLAG,
    RemappingError,
    RemappingSettings,
    build_remapping,
    parse_cidrs,
)
from vkubelet.settings import Settings, SettingsError


def remote(real: str, remapped: str):
    return build_remapping(real, remapped, real_flag=REMOTE_POD_CIDR_FLAG, remapped_flag=REMOTE_POD_CIDR_REMAPPED_FLAG)


# --- translation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("real", "remapped", "address", "expected"),
    [
        ("10.0.0.0/16", "10.100.0.0/16", "10.0.3.7", "10.100.3.7"),
        ("10.0.0.0/16", "10.100.0.0/16", "10.0.0.0", "10.100.0.0"),  # first and last keep their place
        ("10.0.0.0/16", "10.100.0.0/16", "10.0.255.255", "10.100.255.255"),
        ("10.0.0.0/24", "192.168.7.0/24", "10.0.0.34", "192.168.7.34"),  # Liqo's example, any range
        ("10.244.0.0/14", "100.64.0.0/14", "10.247.1.2", "100.67.1.2"),  # offsets carry across octets
        ("fd00:10::/64", "fd00:99::/64", "fd00:10::a:7", "fd00:99::a:7"),
        ("fd00:10::/64", "fd00:99::/64", "FD00:10:0:0:0:0:A:7", "fd00:99::a:7"),  # written canonically
    ],
)
def test_an_address_keeps_its_offset(real, remapped, address, expected):
    mapping = remote(real, remapped)
    assert mapping.configured
    assert mapping.translate(address) == expected
    assert mapping.outside([address]) == []


@pytest.mark.parametrize("address", ["10.1.0.5", "192.168.1.1", "fd00:10::1", "web.example.com", "not-an-ip", ""])
def test_addresses_outside_the_real_cidr_are_left_as_they_are_and_reported(address):
    mapping = remote("10.0.0.0/16", "10.100.0.0/16")
    assert mapping.translate(address) == address
    assert mapping.outside([address]) == ([address] if address else [])


def test_dual_stack_translates_each_family_with_its_own_mapping():
    mapping = remote("10.0.0.0/16,fd00:10::/64", "fd00:99::/64, 10.100.0.0/16")  # paired by family, any order
    assert mapping.translate("10.0.1.2") == "10.100.1.2"
    assert mapping.translate("fd00:10::2") == "fd00:99::2"


def test_unconfigured_means_no_remapping():
    mapping = remote("", "")
    assert mapping is NO_REMAPPING and not mapping.configured
    assert mapping.translate("10.0.0.7") == "10.0.0.7"
    assert mapping.outside(["10.0.0.7", "192.168.0.1"]) == []  # nothing is "not remapped" when nothing is asked
    settings = RemappingSettings()
    assert settings.problem() is None
    assert not settings.remote_pod_ips.configured and not settings.local_pod_ips.configured


# --- configuration errors ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("real", "remapped", "words"),
    [
        ("10.0.0.0/16", "10.100.0.0/24", [REMOTE_POD_CIDR_REMAPPED_FLAG, "/24", REMOTE_POD_CIDR_FLAG, "/16",
                                          "same size", f"{REMOTE_POD_CIDR_REMAPPED_FLAG}=10.100.0.0/16"]),
        ("10.0.0.0/24", "10.100.0.0/16", ["/16", "/24", f"{REMOTE_POD_CIDR_REMAPPED_FLAG}=10.100.0.0/24"]),
        ("", "10.100.0.0/16", [REMOTE_POD_CIDR_REMAPPED_FLAG, "needs", REMOTE_POD_CIDR_FLAG]),
        ("10.0.0.0/16", "", [REMOTE_POD_CIDR_FLAG, "needs", REMOTE_POD_CIDR_REMAPPED_FLAG]),
        ("10.0.0.0/16", "fd00:99::/64", [REMOTE_POD_CIDR_FLAG, "IPv4", REMOTE_POD_CIDR_REMAPPED_FLAG, "has none"]),
        ("10.0.0.0/16", "10.100.0.0/16,fd00:99::/64", [REMOTE_POD_CIDR_REMAPPED_FLAG, "IPv6", "has none"]),
        ("10.0.0.1/24", "10.100.0.0/24", [REMOTE_POD_CIDR_FLAG, "host bits", "did you mean 10.0.0.0/24"]),
        ("10.0.0.0", "10.100.0.0/24", [REMOTE_POD_CIDR_FLAG, "not a CIDR"]),
        ("10.0.0.0/33", "10.100.0.0/24", [REMOTE_POD_CIDR_FLAG, "not a CIDR"]),
        ("10.0.0.0/16,10.1.0.0/16", "10.100.0.0/16", [REMOTE_POD_CIDR_FLAG, "at most one IPv4"]),
    ],
)
def test_settings_that_cannot_work_name_the_flag(real, remapped, words):
    with pytest.raises(RemappingError) as caught:
        remote(real, remapped)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_parse_cidrs_ignores_blanks():
    assert [str(n) for n in parse_cidrs(" 10.0.0.0/8 , ,fd00::/8 ", "--x")] == ["10.0.0.0/8", "fd00::/8"]


def test_a_remapped_cidr_landing_on_the_pods_it_must_be_told_from_is_refused():
    clash = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.1.0.0/16",
                              local_pod_cidr="10.1.0.0/16", local_pod_cidr_remapped="10.201.0.0/16")
    problem = clash.problem()
    assert problem and REMOTE_POD_CIDR_REMAPPED_FLAG in problem and LOCAL_POD_CIDR_FLAG in problem and "overlaps" in problem
    clash = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.100.0.0/16",
                              local_pod_cidr="10.0.0.0/16", local_pod_cidr_remapped="10.0.128.0/17")
    with pytest.raises(RemappingError):  # /17 for a /16: the size is checked first
        clash.local_pod_ips  # noqa: B018 (the property raises)
    clash = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.100.0.0/16",
                              local_pod_cidr="10.0.0.0/16", local_pod_cidr_remapped="10.0.0.0/16")
    problem = clash.problem()
    assert problem and LOCAL_POD_CIDR_REMAPPED_FLAG in problem and REMOTE_POD_CIDR_FLAG in problem


def test_the_harness_layout_is_valid_both_ways():
    settings = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.100.0.0/16",
                                 local_pod_cidr="10.0.0.0/16", local_pod_cidr_remapped="10.200.0.0/16")
    assert settings.problem() is None
    assert settings.remote_pod_ips.translate("10.0.0.4") == "10.100.0.4"
    assert settings.local_pod_ips.translate("10.0.0.4") == "10.200.0.4"


# --- flags ----------------------------------------------------------------------------------------
def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["vkubelet", "--cluster-id", "remote-1", "--local-cluster-id", "local",
                              "--remote-kubeconfig", "/dev/null", *argv])


def test_flags_reach_the_settings():
    settings = cli.settings_from_args(_parse(
        "--remote-pod-cidr", "10.0.0.0/16", "--remote-pod-cidr-remapped", "10.100.0.0/16",
        "--local-pod-cidr", "10.0.0.0/16", "--local-pod-cidr-remapped", "10.200.0.0/16",
    ))
    assert settings.remapping.remote_pod_ips.translate("10.0.9.9") == "10.100.9.9"
    assert settings.remapping.local_pod_ips.translate("10.0.9.9") == "10.200.9.9"
    assert not cli.settings_from_args(_parse()).remapping.remote_pod_ips.configured


def test_a_prefix_length_mismatch_stops_start_up_naming_the_flag():
    with pytest.raises(SettingsError, match=REMOTE_POD_CIDR_REMAPPED_FLAG):
        cli.settings_from_args(_parse("--remote-pod-cidr", "10.0.0.0/16", "--remote-pod-cidr-remapped", "10.100.0.0/24"))
    with pytest.raises(SettingsError, match=LOCAL_POD_CIDR_REMAPPED_FLAG):
        Settings(cluster_id="remote-1", local_cluster_id="local",
                 remapping=RemappingSettings(local_pod_cidr_remapped="10.200.0.0/16")).validate()


def test_the_cli_exits_2_with_the_message(capsys):
    args = _parse("--remote-pod-cidr", "10.0.0.0/16", "--remote-pod-cidr-remapped", "10.100.0.0/24")
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert "kube-offload vkubelet:" in err and REMOTE_POD_CIDR_REMAPPED_FLAG in err and "Traceback" not in err
