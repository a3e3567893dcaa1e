"""Node facts and the placement table applied to one node (what the extender filters on)."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from kube_offload.nodes import cluster_id_of, is_virtual_node, node_is_ready, placement_allows
from kube_offload.policy import NamespacePolicy
from kube_offload.selector import parse_selector
from support.builders import node


def virtual(cluster: str, **labels: str) -> dict:
    return node(
        f"{c.VIRTUAL_NODE_PREFIX}{cluster}",
        {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: cluster, **labels},
    )


PHYSICAL = node("worker-1", {c.LABEL_HOSTNAME: "worker-1"})
EU = virtual("eu1", region="eu-west")
US = virtual("us1", region="us-east")


def policy(placement: str, selector: str = "", enabled: bool = True) -> NamespacePolicy:
    return NamespacePolicy("demo", enabled, placement, c.DEFAULT_MAPPING, parse_selector(selector))


def test_virtual_node_detection() -> None:
    assert is_virtual_node(EU)
    assert not is_virtual_node(PHYSICAL)
    assert not is_virtual_node(node("x", {c.LABEL_TYPE: "something-else"}))
    assert not is_virtual_node({})


def test_cluster_id() -> None:
    assert cluster_id_of(EU) == "eu1"
    assert cluster_id_of(PHYSICAL) is None
    # A cluster-id label on a physical node means nothing.
    assert cluster_id_of(node("x", {c.LABEL_CLUSTER_ID: "eu1"})) is None
    assert cluster_id_of(node("x", {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE})) is None


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "MemoryPressure", "status": "True"}], False),
        ([], False),
    ],
)
def test_node_is_ready(conditions: list, ready: bool) -> None:
    assert node_is_ready(node("n", conditions=conditions)) is ready


def test_node_without_status_is_not_ready() -> None:
    assert node_is_ready({"metadata": {"name": "n"}}) is False


@pytest.mark.parametrize(
    ("pol", "target", "allowed", "reason_fragment"),
    [
        (policy("Local"), PHYSICAL, True, ""),
        (policy("Local"), EU, False, "pod-placement=Local"),
        (policy("Remote"), PHYSICAL, False, "worker-1 is not a virtual node"),
        (policy("Remote"), EU, True, ""),
        (policy("Remote", "region=eu-west"), US, False, 'does not match the cluster selector "region=eu-west"'),
        (policy("Remote", "region=eu-west"), EU, True, ""),
        (policy("LocalAndRemote"), PHYSICAL, True, ""),
        (policy("LocalAndRemote"), US, True, ""),
        (policy("LocalAndRemote", "region!=us-east"), US, False, "cluster us1"),
        (policy("LocalAndRemote", "region!=us-east"), EU, True, ""),
        (policy("LocalAndRemote", "region!=us-east"), PHYSICAL, True, ""),
        # Not offloaded: physical nodes only, whatever the placement says.
        (policy("Remote", enabled=False), PHYSICAL, True, ""),
        (policy("LocalAndRemote", enabled=False), EU, False, "is not offloaded"),
    ],
)
def test_placement_table(pol: NamespacePolicy, target: dict, allowed: bool, reason_fragment: str) -> None:
    ok, reason = placement_allows(pol, target)
    assert ok is allowed
    if allowed:
        assert reason == ""
    else:
        assert reason_fragment in reason
        assert "demo" in reason or "worker-1" in reason
