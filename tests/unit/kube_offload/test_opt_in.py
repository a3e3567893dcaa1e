"""Per-pod opt-in through the kube-offload RuntimeClass (kube_offload/opt_in.py): the
policy such a pod is held to, what the webhook patches into it, what the extender's filter
keeps, and the RuntimeClass object itself."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from kube_offload import constants as c
from kube_offload.node_filter import REASON_PLACEMENT, filter_nodes
from kube_offload.opt_in import opt_in_policy, opts_in, pod_policy, runtime_class
from kube_offload.pod_mutation import decide_pod
from kube_offload.policy import NamespacePolicy, PolicyError, policy_from_namespace

VIRTUAL = {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}
REGION_EU = {"key": "region", "operator": "In", "values": ["eu"]}


def pod(runtime_class_name: str | None = c.RUNTIME_CLASS_OPT_IN, namespace: str = "plain") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx"}]}
    if runtime_class_name is not None:
        spec["runtimeClassName"] = runtime_class_name
    return {"metadata": {"name": "web-0", "namespace": namespace, "uid": "u-1"}, "spec": spec}


def namespace(name: str = "plain", labels: dict[str, str] | None = None, selector: str | None = None) -> dict[str, Any]:
    annotations = {c.ANNOTATION_CLUSTER_SELECTOR: selector} if selector else {}
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations}}


def node(name: str, *, virtual: bool, region: str = "eu") -> dict[str, Any]:
    labels = {c.LABEL_HOSTNAME: name}
    if virtual:
        labels.update({c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: name, "region": region})
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize(
    "name, expected",
    [(c.RUNTIME_CLASS_OPT_IN, True), ("gvisor", False), (None, False), ("Kube-Offload", False)],
)
def test_only_the_kube_offload_class_opts_in(name: str | None, expected: bool) -> None:
    assert opts_in(pod(name)) is expected
    assert opts_in({"spec": None}) is False


@pytest.mark.parametrize(
    "labels, selector, mapping",
    [
        ({}, None, c.DEFAULT_MAPPING),  # unlabelled
        ({}, "region=eu", c.DEFAULT_MAPPING),  # a selector without the label still says where
        ({c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL}, None, c.DEFAULT_MAPPING),
        ({c.LABEL_ENABLED: "true", c.LABEL_NAMESPACE_MAPPING: c.MAPPING_ENFORCE_SAME_NAME}, "region=eu",
         c.MAPPING_ENFORCE_SAME_NAME),
    ],
)
def test_an_opted_in_pod_is_remote_whatever_the_namespace_says(
    labels: dict[str, str], selector: str | None, mapping: str
) -> None:
    own = policy_from_namespace(namespace(labels=labels, selector=selector))
    effective = pod_policy(pod(), "plain", own)
    assert isinstance(effective, NamespacePolicy)
    assert (effective.enabled, effective.placement, effective.opt_in) == (True, c.PLACEMENT_REMOTE, True)
    # Where stays the namespace's: its selector and mapping.
    assert effective.cluster_selector == own.cluster_selector
    assert effective.mapping == mapping
    # A pod that does not opt in keeps the namespace's own policy, untouched.
    assert pod_policy(pod(None), "plain", own) is own


def test_unknown_namespace_and_invalid_policy() -> None:
    unknown = pod_policy(pod(), "fresh", None)
    assert isinstance(unknown, NamespacePolicy)
    assert (unknown.namespace, unknown.enabled, unknown.placement) == ("fresh", True, c.PLACEMENT_REMOTE)
    assert not unknown.cluster_selector.requirements
    assert pod_policy(pod(None), "fresh", None) is None
    # Invalid labels stay invalid: nothing goes remote until they are fixed.
    error = PolicyError(c.LABEL_ENABLED, "yes", (c.ENABLED_VALUE,))
    assert pod_policy(pod(), "plain", error) is error


def test_one_namespace_policy_gives_one_opt_in_policy_object() -> None:
    # The webhook's patch cache is keyed by identity (pod_mutation._policy_terms).
    own = policy_from_namespace(namespace())
    assert opt_in_policy("plain", own) is opt_in_policy("plain", own)
    assert opt_in_policy("fresh", None) is opt_in_policy("fresh", None)


def test_webhook_patch_for_an_opted_in_pod_of_an_unlabelled_namespace() -> None:
    original = pod()
    decision = decide_pod(original, "plain", None, scheduler_name=None)
    assert decision.allowed
    patched = jsonpatch.apply_patch(copy.deepcopy(original), decision.patch)
    assert patched["spec"]["tolerations"] == [
        {"key": c.TAINT_KEY, "operator": "Equal", "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}
    ]
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [VIRTUAL]}]
    # Idempotent (reinvocationPolicy IfNeeded): the webhook's own output gets no more ops.
    assert decide_pod(patched, "plain", None, scheduler_name=None).patch == ()
    # Without the class, an unlabelled namespace's pod is left alone.
    assert decide_pod(pod(None), "plain", None, scheduler_name=None).patch == ()


def test_webhook_patch_keeps_the_namespace_selector_and_overrides_local_placement() -> None:
    own = policy_from_namespace(namespace(
        labels={c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL}, selector="region=eu"))
    decision = decide_pod(pod(), "plain", own, scheduler_name=None)
    patched = jsonpatch.apply_patch(pod(), decision.patch)
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [VIRTUAL, REGION_EU]}]
    assert patched["spec"]["tolerations"]
    # The same namespace's other pods stay local (NotIn virtual-node, no toleration).
    local = jsonpatch.apply_patch(pod(None), decide_pod(pod(None), "plain", own, scheduler_name=None).patch)
    assert "tolerations" not in local["spec"]


def test_extender_keeps_only_virtual_nodes_for_an_opted_in_pod() -> None:
    nodes = [node("worker-1", virtual=False), node("kube-offload-eu", virtual=True),
             node("kube-offload-us", virtual=True, region="us")]
    unlabelled = policy_from_namespace(namespace())
    result = filter_nodes(pod(), nodes, unlabelled, lambda _n: None)
    assert not result.passthrough
    assert result.passed == ["kube-offload-eu", "kube-offload-us"]
    failure = result.failures["worker-1"]
    assert failure.reason == REASON_PLACEMENT and failure.unresolvable
    assert f"runtimeClassName {c.RUNTIME_CLASS_OPT_IN}" in failure.message
    # The namespace's selector still chooses among clusters.
    with_selector = policy_from_namespace(namespace(selector="region=eu"))
    assert filter_nodes(pod(), nodes, with_selector, lambda _n: None).passed == ["kube-offload-eu"]
    # Unknown namespace: the same; without the class: none of the extender's business.
    assert filter_nodes(pod(), nodes, None, lambda _n: None).passed == ["kube-offload-eu", "kube-offload-us"]
    assert filter_nodes(pod(None), nodes, unlabelled, lambda _n: None).passthrough


def test_runtime_class_cannot_run_on_a_real_node_and_schedules_on_virtual_ones() -> None:
    rc = runtime_class()
    assert rc["kind"] == "RuntimeClass" and rc["metadata"]["name"] == c.RUNTIME_CLASS_OPT_IN
    assert rc["handler"] == c.RUNTIME_CLASS_OPT_IN_HANDLER != c.RUNTIME_CLASS_OPT_IN
    assert rc["scheduling"]["nodeSelector"] == {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE}
    [toleration] = rc["scheduling"]["tolerations"]
    assert (toleration["key"], toleration["effect"]) == (c.TAINT_KEY, c.TAINT_EFFECT)
