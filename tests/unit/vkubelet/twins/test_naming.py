"""Twin namespace and node names: deterministic, valid DNS labels, collision-resistant."""

import re

import pytest

from kube_offload import constants as c
from vkubelet.twins.naming import twin_namespace_name, virtual_node_name

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_virtual_node_name_is_the_contract_name():
    assert virtual_node_name("remote-1") == "kube-offload-remote-1"


@pytest.mark.parametrize(
    "namespace, mapping, expected",
    [
        ("demo", c.MAPPING_DEFAULT_NAME, "demo-local"),
        ("demo", c.MAPPING_ENFORCE_SAME_NAME, "demo"),
        ("a", c.MAPPING_DEFAULT_NAME, "a-local"),
    ],
)
def test_short_names(namespace, mapping, expected):
    assert twin_namespace_name(namespace, "local", mapping) == expected


def test_default_mapping_is_default_name():
    assert twin_namespace_name("demo", "alpha") == "demo-alpha"


def test_exactly_63_characters_is_kept_verbatim():
    namespace = "n" * (63 - len("-local"))
    assert twin_namespace_name(namespace, "local") == namespace + "-local"


def test_long_names_are_shortened_with_a_hash_and_keep_the_cluster_id():
    namespace = "a-very-long-namespace-name-that-goes-on-and-on-and-on-for-ever"
    twin = twin_namespace_name(namespace, "consumer-cluster")
    assert len(twin) <= 63
    assert DNS_LABEL.match(twin)
    assert twin.endswith("-consumer-cluster")
    assert twin.startswith("a-very-long")
    # Deterministic: a restarted vkubelet finds the same twin.
    assert twin == twin_namespace_name(namespace, "consumer-cluster")


def test_long_names_differing_only_at_the_end_get_different_twins():
    base = "x" * 60
    first = twin_namespace_name(base + "-one", "local")
    second = twin_namespace_name(base + "-two", "local")
    assert first != second
    assert len(first) <= 63 and len(second) <= 63


def test_cut_never_leaves_a_dash_before_the_hash():
    # With "local" the namespace part keeps 48 characters: the 48th is a dash here.
    namespace = "a" * 47 + "-" + "b" * 15
    twin = twin_namespace_name(namespace, "local")
    assert DNS_LABEL.match(twin)
    assert "--" not in twin
    assert twin.startswith("a" * 47 + "-") and twin.endswith("-local")


def test_very_long_cluster_id_still_gives_a_valid_name():
    cluster_id = "c" * 60
    twin = twin_namespace_name("demo-namespace", cluster_id)
    assert len(twin) <= 63
    assert DNS_LABEL.match(twin)
    assert twin != twin_namespace_name("demo-namespacf", cluster_id)
