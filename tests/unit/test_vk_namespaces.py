"""Which local namespaces get a twin in this remote cluster, and what a twin looks like."""

import pytest

from kube_offload import constants as c
from vkubelet.namespaces import build_twin, is_our_twin, plan_twin

NODE_LABELS = {
    c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE,
    c.LABEL_CLUSTER_ID: "remote-1",
    "topology.kubernetes.io/region": "eu-west",
    "kube-offload.io/provider": "acme",
}


def _ns(name="demo", labels=None, selector=None, deleting=False):
    meta = {"name": name, "labels": labels or {}, "annotations": {}}
    if selector is not None:
        meta["annotations"][c.ANNOTATION_CLUSTER_SELECTOR] = selector
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def _plan(namespace, name="demo"):
    return plan_twin(namespace, name=name, virtual_node_labels=NODE_LABELS, local_cluster_id="local")


ENABLED = {c.LABEL_ENABLED: "true"}


@pytest.mark.parametrize(
    "labels, selector, twin",
    [
        (ENABLED, None, "demo-local"),  # default placement LocalAndRemote
        ({**ENABLED, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}, None, "demo-local"),
        ({**ENABLED, c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL}, None, None),
        ({**ENABLED, c.LABEL_NAMESPACE_MAPPING: c.MAPPING_ENFORCE_SAME_NAME}, None, "demo"),
        (ENABLED, "topology.kubernetes.io/region in (eu-west,eu-south)", "demo-local"),
        (ENABLED, "topology.kubernetes.io/region=us-east", None),
        (ENABLED, "kube-offload.io/provider!=acme", None),
        ({}, None, None),
        ({c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}, None, None),  # not enabled
    ],
)
def test_plan_follows_the_policy(labels, selector, twin):
    plan = _plan(_ns(labels=labels, selector=selector))
    assert plan.twin == twin
    assert plan.policy_error is None
    assert plan.reason


def test_deleted_or_terminating_namespace_has_no_twin():
    assert _plan(None).twin is None
    assert _plan(_ns(labels=ENABLED, deleting=True)).twin is None


def test_invalid_policy_is_reported_not_acted_upon():
    plan = _plan(_ns(labels={c.LABEL_ENABLED: "yes"}))
    assert plan.twin is None
    assert plan.policy_error is not None
    assert c.LABEL_ENABLED in plan.reason


def test_twin_carries_origin_label_and_local_namespace():
    twin = build_twin("demo-local", "demo", "local")
    assert twin["metadata"] == {
        "name": "demo-local",
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
        "annotations": {c.ANNOTATION_TWIN_OF: "demo"},
    }
    assert is_our_twin(twin, "demo", "local")


@pytest.mark.parametrize(
    "labels, annotations",
    [
        ({}, {}),  # created by the remote cluster's users
        ({c.LABEL_ORIGIN_CLUSTER_ID: "other"}, {c.ANNOTATION_TWIN_OF: "demo"}),  # another consumer's
        ({c.LABEL_ORIGIN_CLUSTER_ID: "local"}, {c.ANNOTATION_TWIN_OF: "other-ns"}),  # ours, for another namespace
    ],
)
def test_foreign_namespaces_are_not_ours(labels, annotations):
    remote = {"metadata": {"name": "demo", "labels": labels, "annotations": annotations}}
    assert not is_our_twin(remote, "demo", "local")
