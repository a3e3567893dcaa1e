"""Which local namespaces get a twin in this remote cluster, and what a twin looks like."""

import pytest

from kube_offload import constants as c
from vkubelet.shared import twin_requests as tr
from vkubelet.twins.namespaces import plan_twin, request_state

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


LOCAL_PLACEMENT = {**ENABLED, c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL}


@pytest.mark.parametrize(
    "labels, selector, twin",
    [
        (ENABLED, None, "demo-local"),  # default placement LocalAndRemote
        ({**ENABLED, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}, None, "demo-local"),
        (LOCAL_PLACEMENT, None, "demo-local"),  # service offloading: a twin, but no pods in it
        (LOCAL_PLACEMENT, "topology.kubernetes.io/region=us-east", None),
        ({**LOCAL_PLACEMENT, c.LABEL_NAMESPACE_MAPPING: c.MAPPING_ENFORCE_SAME_NAME}, None, "demo"),
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


@pytest.mark.parametrize(
    "placement, pods",
    [(c.PLACEMENT_LOCAL, False), (c.PLACEMENT_REMOTE, True), (c.PLACEMENT_LOCAL_AND_REMOTE, True)],
)
def test_only_local_placement_keeps_pods_out_of_the_twin(placement, pods):
    plan = _plan(_ns(labels={**ENABLED, c.LABEL_POD_PLACEMENT: placement}))
    assert plan.twin == "demo-local"
    assert plan.pods is pods
    if not pods:
        # The pod loop's "why not running here" for a pod bound to the virtual node anyway.
        assert f"{c.LABEL_POD_PLACEMENT}={c.PLACEMENT_LOCAL}" in plan.reason and "stay in the local cluster" in plan.reason


def test_deleted_or_terminating_namespace_has_no_twin():
    assert _plan(None).twin is None
    assert _plan(_ns(labels=ENABLED, deleting=True)).twin is None


def test_invalid_policy_is_reported_not_acted_upon():
    plan = _plan(_ns(labels={c.LABEL_ENABLED: "yes"}))
    assert plan.twin is None
    assert plan.policy_error is not None
    assert c.LABEL_ENABLED in plan.reason


# --- the request's state, from the consumer's side --------------------------------------------
def _request(name="demo-local", *, local="demo", origin="local", phase=None, message=None, deleting=False, granted=None):
    req = tr.build_request(name, tenant_namespace="kube-offload-tenant-local", local_namespace=local, local_cluster_id="local")
    req["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] = origin
    status = {}
    if phase:
        status["phase"] = phase
    if message:
        status["message"] = message
    if granted:
        status["namespace"] = granted
    if status:
        req["status"] = status
    if deleting:
        req["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return req


def _state(request, twin="demo-local", local="demo"):
    return request_state(request, twin=twin, local_namespace=local, local_cluster_id="local", cluster_id="remote-1")


def test_ready_request_of_ours_is_usable():
    state = _state(_request(phase=c.TWIN_PHASE_READY, granted="demo-local"))
    assert state.usable and state.reason == ""


@pytest.mark.parametrize(
    "request_, flag, words",
    [
        (None, "waiting", "not requested"),
        (_request(), "waiting", "Pending"),  # no status yet: the provider has not answered
        (_request(phase=c.TWIN_PHASE_PENDING), "waiting", "Pending"),
        (_request(phase=c.TWIN_PHASE_READY, deleting=True), "waiting", "being deleted"),
        (_request(phase=c.TWIN_PHASE_TERMINATING), "waiting", "being deleted"),
        (_request(phase=c.TWIN_PHASE_REFUSED, message="exists and is not yours"), "refused", "exists and is not yours"),
        (_request(phase=c.TWIN_PHASE_REFUSED), "refused", "no reason given"),
        (_request(local="other", phase=c.TWIN_PHASE_READY), "conflict", "local namespace other"),
        (_request(origin="someone", phase=c.TWIN_PHASE_READY), "conflict", "someone else"),
        # Ready for another namespace name than asked: never used
        (_request(phase=c.TWIN_PHASE_READY, granted="elsewhere"), "waiting", "Ready"),
    ],
)
def test_unusable_requests_say_why(request_, flag, words):
    state = _state(request_)
    assert not state.usable
    assert getattr(state, flag)
    assert words in state.reason
    assert "remote-1" in state.reason or flag == "conflict"


def test_the_request_is_what_the_provider_contract_says():
    req = tr.build_request("demo-local", tenant_namespace="kube-offload-tenant-local", local_namespace="demo", local_cluster_id="local")
    assert req["apiVersion"] == f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}"
    assert req["kind"] == c.TWIN_NAMESPACE_KIND
    assert req["metadata"] == {
        "name": "demo-local",
        "namespace": "kube-offload-tenant-local",
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
    }
    assert req["spec"] == {"localNamespace": "demo"}
    assert tr.local_namespace_of(req) == "demo" and tr.is_ours(req, "local") and not tr.is_ours(req, "other")


# --- per-pod opt-in: the namespace extended on demand -----------------------------------
def _plan_opted_in(namespace, name="demo"):
    return plan_twin(namespace, name=name, virtual_node_labels=NODE_LABELS, local_cluster_id="local", opted_in=True)


@pytest.mark.parametrize(
    "labels, selector, twin",
    [
        ({}, None, "demo-local"),  # unlabelled: extended because an opted-in pod is bound here
        ({c.LABEL_NAMESPACE_MAPPING: c.MAPPING_ENFORCE_SAME_NAME}, None, "demo"),  # its mapping holds
        (LOCAL_PLACEMENT, None, "demo-local"),  # service offloading, and pods too now
        ({}, "topology.kubernetes.io/region=us-east", None),  # its selector still says where
    ],
)
def test_opted_in_pods_extend_their_namespace(labels, selector, twin):
    plan = _plan_opted_in(_ns(labels=labels, selector=selector))
    assert plan.twin == twin
    if twin is not None:
        assert plan.pods is True
        assert f"runtimeClassName {c.RUNTIME_CLASS_OPT_IN}" in plan.reason
    # Without such a pod the namespace's own labels decide, as before.
    assert _plan(_ns(labels=labels, selector=selector)).pods is (labels != LOCAL_PLACEMENT)


def test_opt_in_does_not_override_a_deleted_or_invalid_namespace():
    assert _plan_opted_in(None).twin is None
    assert _plan_opted_in(_ns(deleting=True)).twin is None
    invalid = _plan_opted_in(_ns(labels={c.LABEL_ENABLED: "yes"}))
    assert invalid.twin is None and invalid.policy_error is not None


def test_opted_in_index_names_the_namespace_of_opted_in_pods_only():
    from vkubelet.twins.namespaces import _opted_in_key, _opted_in_namespace

    opted = {"metadata": {"namespace": "demo", "name": "p"}, "spec": {"runtimeClassName": c.RUNTIME_CLASS_OPT_IN}}
    other = {"metadata": {"namespace": "demo", "name": "q"}, "spec": {"runtimeClassName": "gvisor"}}
    assert _opted_in_namespace(opted) == ["demo"] and _opted_in_key(opted) == "demo"
    assert _opted_in_namespace(other) == [] and _opted_in_key(other) is None
