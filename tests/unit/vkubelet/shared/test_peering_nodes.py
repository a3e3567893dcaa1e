"""Which local nodes are a peering's slice nodes (vkubelet/shared/peering_nodes.py, pure)."""

from __future__ import annotations

from kube_offload import constants as c
from vkubelet.shared.peering_nodes import slice_node_names, slice_node_selector

BASE = "kube-offload-remote-1"


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, **labels}}}


def test_a_slice_node_is_labelled_with_the_peering_and_a_slice_and_named_for_it():
    nodes = [
        node(f"{BASE}-gpu", **{c.LABEL_CLUSTER_ID: "remote-1", c.LABEL_SLICE: "gpu"}),
        node(f"{BASE}-general", **{c.LABEL_CLUSTER_ID: "remote-1", c.LABEL_SLICE: "general"}),
        # The peering's own node is no slice's.
        node(BASE, **{c.LABEL_CLUSTER_ID: "remote-1"}),
        # Another peering's slice, even one whose name starts like ours (cluster "remote-1-x").
        node(f"{BASE}-x-gpu", **{c.LABEL_CLUSTER_ID: "remote-1-x", c.LABEL_SLICE: "gpu"}),
        # Labelled as ours but not named as the contract names a slice's node.
        node("someone-elses", **{c.LABEL_CLUSTER_ID: "remote-1", c.LABEL_SLICE: "gpu"}),
        node(f"{BASE}-empty", **{c.LABEL_CLUSTER_ID: "remote-1", c.LABEL_SLICE: ""}),
    ]
    assert slice_node_names(nodes, base_node=BASE, cluster_id="remote-1") == {f"{BASE}-gpu", f"{BASE}-general"}
    assert slice_node_names([], base_node=BASE, cluster_id="remote-1") == frozenset()


def test_the_selector_asks_for_the_peerings_virtual_nodes_with_a_slice():
    assert slice_node_selector("remote-1") == (
        f"{c.LABEL_TYPE}={c.TYPE_VIRTUAL_NODE},{c.LABEL_CLUSTER_ID}=remote-1,{c.LABEL_SLICE}"
    )


def test_a_slice_nodes_cache_keeps_its_name_and_labels_only():
    from vkubelet.shared import trim

    full = node(f"{BASE}-gpu", **{c.LABEL_CLUSTER_ID: "remote-1", c.LABEL_SLICE: "gpu"})
    full["metadata"]["annotations"] = {"big": "x" * 1000}
    full["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    kept = trim.trim_to_labels(full)
    assert kept["metadata"] == {"name": f"{BASE}-gpu", "labels": full["metadata"]["labels"]}
    assert "status" not in kept
    assert slice_node_names([kept], base_node=BASE, cluster_id="remote-1") == {f"{BASE}-gpu"}
