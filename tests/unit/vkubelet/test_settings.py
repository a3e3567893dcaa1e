"""The vkubelet settings of home API access: the home cluster's Service domain (the long
name of the API server a pod may use), from its flag, checked with a message naming it."""

from __future__ import annotations

import argparse

import pytest

from vkubelet import cli
from vkubelet.settings import Settings, SettingsError


def _settings(*flags: str) -> Settings:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["vkubelet", "--cluster-id", "r", "--local-cluster-id", "l", "--remote-kubeconfig", "/k", *flags])
    return cli.settings_from_args(args)


def test_the_home_cluster_domain_defaults_to_cluster_local_and_is_a_flag():
    assert _settings().home_cluster_domain == "cluster.local"
    assert _settings("--home-cluster-domain", "corp.example").home_cluster_domain == "corp.example"


@pytest.mark.parametrize("domain", ["", "Cluster.Local", "cluster..local", "-x.local"])
def test_a_domain_that_is_no_dns_name_names_the_flag(domain):
    with pytest.raises(SettingsError, match="--home-cluster-domain"):
        Settings(cluster_id="r", local_cluster_id="l", home_cluster_domain=domain).validate()
