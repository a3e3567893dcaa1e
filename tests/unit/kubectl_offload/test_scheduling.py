"""kube-scheduler's node filters as ``kubectl offload explain`` applies them, as tables."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from kube_offload.resources import parse_quantity as q
from kubectl_offload import scheduling

VIRTUAL_TAINT = {"key": c.TAINT_KEY, "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": c.TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoExecute"}, VIRTUAL_TAINT, True),
        ({"key": c.TAINT_KEY, "value": "true"}, VIRTUAL_TAINT, True),  # Equal by default, any effect
        ({"key": c.TAINT_KEY, "value": "false"}, VIRTUAL_TAINT, False),
        ({"key": c.TAINT_KEY, "operator": "Exists"}, VIRTUAL_TAINT, True),
        ({"operator": "Exists"}, VIRTUAL_TAINT, True),  # empty key + Exists tolerates everything
        ({"key": c.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}, VIRTUAL_TAINT, False),
        ({"key": "other", "operator": "Exists"}, VIRTUAL_TAINT, False),
        ({"key": c.TAINT_KEY, "operator": "Gt", "value": "1"}, VIRTUAL_TAINT, False),
    ],
)
def test_tolerates_is_kubernetes_toleratestaint(toleration, taint, expected):
    assert scheduling.tolerates(toleration, taint) is expected


def _node(taints=(), labels=None, unschedulable=False, allocatable=None, name="n1"):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
        "status": {"allocatable": allocatable or {"cpu": "2", "memory": "4Gi", "pods": "10"}},
    }


def _pod(**spec):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": [{"name": "a"}], **spec}}


def test_untolerated_taint_names_the_taint_and_ignores_prefer_no_schedule():
    node = _node([{"key": "soft", "effect": "PreferNoSchedule"}, VIRTUAL_TAINT])
    assert scheduling.taints_allow(_pod(), node) == (False, f"untolerated taint {c.TAINT_KEY}=true:NoExecute")
    assert scheduling.taints_allow(_pod(tolerations=[{"key": c.TAINT_KEY, "operator": "Exists"}]), node) == (True, "")


def test_the_provider_cordon_taint_says_what_it_means():
    cordon = {"key": c.TAINT_PROVIDER_CORDONED_KEY, "value": "true", "effect": "NoSchedule"}
    allowed, why = scheduling.taints_allow(_pod(tolerations=[{"key": c.TAINT_KEY, "operator": "Exists"}]), _node([VIRTUAL_TAINT, cordon]))
    assert not allowed
    assert why.startswith(f"untolerated taint {c.TAINT_PROVIDER_CORDONED_KEY}=true:NoSchedule") and "Consumer spec.cordoned" in why


def test_the_provider_drain_taint_says_what_it_means():
    drain = {"key": c.TAINT_PROVIDER_DRAINING_KEY, "value": "true", "effect": "NoExecute"}
    allowed, why = scheduling.taints_allow(_pod(tolerations=[{"key": c.TAINT_KEY, "operator": "Exists"}]), _node([VIRTUAL_TAINT, drain]))
    assert not allowed
    assert why.startswith(f"untolerated taint {c.TAINT_PROVIDER_DRAINING_KEY}=true:NoExecute") and "kube-offload undrain" in why


def test_cordoned_node_takes_only_pods_tolerating_unschedulable():
    node = _node(unschedulable=True)
    assert scheduling.unschedulable_allows(_pod(), node)[0] is False
    tolerant = _pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    assert scheduling.unschedulable_allows(tolerant, node) == (True, "")


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({}, {}, True),
        ({"nodeSelector": {"disk": "ssd"}}, {"disk": "ssd"}, True),
        ({"nodeSelector": {"disk": "ssd"}}, {"disk": "hdd"}, False),
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            ]}}}},
            {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, "zone": "a"},
            True,  # the second term (OR) matches
        ),
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}]},
            ]}}}},
            {},
            False,
        ),
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]}}}},
            {},
            True,
        ),
    ],
)
def test_affinity_allows_applies_node_selector_and_required_terms(spec, labels, expected):
    ok, why = scheduling.affinity_allows(_pod(**spec), _node(labels=labels))
    assert ok is expected
    assert bool(why) is (not expected)


def test_resources_fit_counts_the_pods_bound_to_the_node_but_not_terminated_ones_nor_itself():
    node = _node()
    busy = {"metadata": {"uid": "other"}, "spec": {"nodeName": "n1", "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1500m"}}}]}, "status": {"phase": "Running"}}
    done = {"metadata": {"uid": "done"}, "spec": {"nodeName": "n1", "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "2"}}}]}, "status": {"phase": "Succeeded"}}
    me = {"metadata": {"uid": "u1"}, "spec": {"nodeName": "n1", "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "2"}}}]}, "status": {"phase": "Running"}}
    bound = scheduling.bound_pods_by_node([busy, done, me], exclude_uid="u1")
    assert [p["metadata"]["uid"] for p in bound["n1"]] == ["other"]
    assert scheduling.resources_fit({"cpu": q("500m"), "pods": q("1")}, node, bound["n1"]) == (True, "")
    ok, why = scheduling.resources_fit({"cpu": q("1"), "pods": q("1")}, node, bound["n1"])
    assert not ok and why == "insufficient cpu: requested 1, free 500m"
