"""The TwinNamespace controller's decisions (enforcer/consumers/twin_plan.py), table by table."""

from __future__ import annotations

import copy

import pytest

from enforcer.consumers.twin_names import name_problem
from enforcer.consumers.twin_objects import (
    RoleBindingAction,
    desired_namespace,
    desired_resourcequota,
    desired_rolebinding,
    is_ours,
    namespace_patch,
    rolebinding_action,
)
from enforcer.consumers.twin_plan import NAME_TAKEN_RECHECK_SECONDS, plan_twin
from kube_offload import constants as c

TENANT = "kube-offload-tenant-local"
KEY = f"{TENANT}/demo-local"
ROLE = "kube-offload-consumer-twin"
DELETED_AT = "2026-01-01T00:00:00Z"


def request(name: str = "demo-local", *, ns: str = TENANT, deleting: bool = False, finalizer: bool = True,
            local: str = "demo", status: dict | None = None) -> dict:
    metadata: dict = {"name": name, "namespace": ns, "generation": 3, "uid": "req-uid"}
    if finalizer:
        metadata["finalizers"] = ["other.io/keep", c.TWIN_NAMESPACE_FINALIZER]
    if deleting:
        metadata["deletionTimestamp"] = DELETED_AT
    obj = {"metadata": metadata, "spec": {"localNamespace": local}}
    if status is not None:
        obj["status"] = status
    return obj


def tenant(name: str = TENANT, consumer: str = "local") -> dict:
    return {"metadata": {"name": name, "labels": {c.LABEL_TENANT: consumer}}}


CONSUMERS = {
    "local": {"metadata": {"name": "local"}, "spec": {"podSecurityLevel": "baseline"}},
    "other": {"metadata": {"name": "other"}, "spec": {}},
}


def ours(name: str = "demo-local", *, level: str = "baseline", key: str = KEY, consumer: str = "local",
         phase: str = "Active", deleting: bool = False, local: str = "demo") -> dict:
    metadata: dict = {
        "name": name,
        "uid": "ns-uid",
        "labels": {
            c.LABEL_ORIGIN_CLUSTER_ID: consumer,
            c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
            c.LABEL_PSA_ENFORCE: level,
            c.LABEL_PSA_ENFORCE_VERSION: "latest",
            c.LABEL_NAMESPACE_NAME: name,
        },
        "annotations": {c.ANNOTATION_TWIN_OF: local, c.ANNOTATION_TWIN_REQUEST: key},
    }
    if deleting:
        metadata["deletionTimestamp"] = DELETED_AT
    return {"metadata": metadata, "status": {"phase": phase}}


def foreign(name: str = "demo-local") -> dict:
    return {"metadata": {"name": name, "uid": "foreign-uid", "labels": {"team": "x"}}, "status": {"phase": "Active"}}


def binding(name: str = "demo-local", role: str = ROLE, consumer: dict | None = None) -> dict:
    return desired_rolebinding(name, request(name), consumer or CONSUMERS["local"], role)


def counted_quota(req: dict, consumer: dict) -> dict | None:
    """The twin's ResourceQuota as the enforcer writes it (every twin has one: the policy's
    per-twin object bounds), counted by the quota controller."""
    desired = desired_resourcequota(req["metadata"]["name"], req, consumer)
    if desired is None:
        return None
    return {**desired, "metadata": {**desired["metadata"], "uid": "rq-uid"}, "status": {"hard": desired["spec"]["hard"]}}


def plan(req=None, *, tenant_ns=None, consumers=None, ns=None, rb=None):
    req = req if req is not None else request()
    consumers = consumers if consumers is not None else CONSUMERS
    owner = consumers.get("local")
    return plan_twin(
        req,
        tenant_namespace=tenant_ns if tenant_ns is not None else tenant(),
        consumers=consumers.get,
        namespace=ns,
        rolebinding=rb,
        twin_role=ROLE,
        resourcequota=counted_quota(req, owner) if ns is not None and owner is not None else None,
    )


# --- names ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, problem",
    [
        ("demo-local", ""),
        ("a", ""),
        ("x" * 63, ""),
        ("x" * 64, "not a valid namespace name"),
        ("Demo", "not a valid namespace name"),
        ("demo.local", "not a valid namespace name"),
        ("-demo", "not a valid namespace name"),
        ("demo-", "not a valid namespace name"),
        ("", "not a valid namespace name"),
        ("kube-system", "reserved"),
        ("default", "reserved"),
        ("kube-public", "reserved"),
        ("kube-node-lease", "reserved"),
        ("kube-offload-tenant-other", "reserved"),
        ("kube-offload", ""),
    ],
)
def test_name_problem(name, problem):
    result = name_problem(name)
    assert (problem in result) if problem else result == ""


# --- ownership -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "ns, mine",
    [
        (ours(), True),
        (ours(level="restricted"), True),  # the level is ours to change, not a mark
        (foreign(), False),
        (ours(consumer="other"), False),
        (ours(key=f"{TENANT}/another"), False),
        (ours(key="kube-offload-tenant-other/demo-local"), False),
        (None, False),
    ],
)
def test_is_ours(ns, mine):
    assert is_ours(ns, "local", KEY) is mine


def test_is_ours_needs_managed_by():
    ns = ours()
    del ns["metadata"]["labels"][c.LABEL_MANAGED_BY]
    assert not is_ours(ns, "local", KEY)


# --- the namespace ---------------------------------------------------------------------
def test_desired_namespace_carries_every_mark():
    assert desired_namespace(request(), "local", "restricted") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "demo-local",
            "labels": {
                c.LABEL_ORIGIN_CLUSTER_ID: "local",
                c.LABEL_MANAGED_BY: "enforcer",
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
            "annotations": {c.ANNOTATION_TWIN_OF: "demo", c.ANNOTATION_TWIN_REQUEST: KEY},
        },
    }


def test_namespace_patch_only_what_differs():
    assert namespace_patch(ours(), request(), "local", "baseline") is None
    assert namespace_patch(ours(), request(), "local", "restricted") == {
        "metadata": {"labels": {c.LABEL_PSA_ENFORCE: "restricted"}}
    }
    assert namespace_patch(ours(), request(local="other"), "local", "baseline") == {
        "metadata": {"annotations": {c.ANNOTATION_TWIN_OF: "other"}}
    }
    stale = ours()
    del stale["metadata"]["labels"][c.LABEL_PSA_ENFORCE_VERSION]
    assert namespace_patch(stale, request(), "local", "baseline") == {
        "metadata": {"labels": {c.LABEL_PSA_ENFORCE_VERSION: "latest"}}
    }


# --- further offloading (Consumer spec.furtherOffloading, docs/multihop.md) -----------------
def test_a_consumer_offloaded_further_gets_twins_its_provider_offloads():
    labels = desired_namespace(request(), "local", "baseline", c.PLACEMENT_REMOTE)["metadata"]["labels"]
    assert labels[c.LABEL_ENABLED] == c.ENABLED_VALUE
    assert labels[c.LABEL_POD_PLACEMENT] == c.PLACEMENT_REMOTE
    # off (the default): no namespace policy label at all, not even a null one
    plain = desired_namespace(request(), "local", "baseline")["metadata"]["labels"]
    assert c.LABEL_ENABLED not in plain and c.LABEL_POD_PLACEMENT not in plain


def test_turning_further_offloading_on_and_off_relabels_the_twin():
    assert namespace_patch(ours(), request(), "local", "baseline", c.PLACEMENT_LOCAL_AND_REMOTE) == {
        "metadata": {"labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL_AND_REMOTE}}
    }
    offloaded = ours()
    offloaded["metadata"]["labels"].update({c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE})
    assert namespace_patch(offloaded, request(), "local", "baseline", c.PLACEMENT_REMOTE) is None
    # off again, or set by hand on a twin of a consumer without the setting: removed (null)
    assert namespace_patch(offloaded, request(), "local", "baseline") == {
        "metadata": {"labels": {c.LABEL_ENABLED: None, c.LABEL_POD_PLACEMENT: None}}
    }


def test_the_plan_follows_the_consumer_setting():
    further = {**CONSUMERS, "local": {"metadata": {"name": "local"},
                                     "spec": {"furtherOffloading": {"enabled": True, "podPlacement": "Remote"}}}}
    created = plan(consumers=further).create_namespace
    assert created is not None and created["metadata"]["labels"][c.LABEL_POD_PLACEMENT] == c.PLACEMENT_REMOTE
    p = plan(consumers=further, ns=ours())
    assert p.namespace_patch == {"metadata": {"labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Remote"}}}

# --- the RoleBinding -----------------------------------------------------------------------
def test_desired_rolebinding_binds_the_twin_role_to_the_consumer_identity():
    rb = binding()
    assert rb["metadata"]["name"] == c.TWIN_ROLEBINDING_NAME
    assert rb["metadata"]["namespace"] == "demo-local"
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE}
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "consumer", "namespace": TENANT}]


def test_rolebinding_action():
    desired = binding()
    assert rolebinding_action(None, desired) is RoleBindingAction.CREATE
    assert rolebinding_action(copy.deepcopy(desired), desired) is RoleBindingAction.NONE
    other_role = copy.deepcopy(desired)
    other_role["roleRef"]["name"] = "cluster-admin"
    assert rolebinding_action(other_role, desired) is RoleBindingAction.RECREATE
    extra_subject = copy.deepcopy(desired)
    extra_subject["subjects"].append({"kind": "User", "name": "mallory"})
    assert rolebinding_action(extra_subject, desired) is RoleBindingAction.UPDATE
    unmarked = copy.deepcopy(desired)
    unmarked["metadata"]["labels"] = {}
    assert rolebinding_action(unmarked, desired) is RoleBindingAction.UPDATE
    # Keys the apiserver or others add do not matter.
    decorated = copy.deepcopy(desired)
    decorated["metadata"]["labels"]["extra"] = "x"
    decorated["metadata"]["resourceVersion"] = "5"
    assert rolebinding_action(decorated, desired) is RoleBindingAction.NONE


# --- plans: serving ------------------------------------------------------------------
def test_new_request_adds_the_finalizer_and_creates_the_namespace():
    p = plan(request(finalizer=False))
    assert p.add_finalizer
    assert p.create_namespace == desired_namespace(request(), "local", "baseline")
    assert p.status["phase"] == c.TWIN_PHASE_PENDING
    assert p.status["observedGeneration"] == 3
    assert not p.remove_finalizer and p.delete_namespace_uid is None


def test_namespace_without_rolebinding_is_pending_and_gets_one():
    p = plan(ns=ours())
    assert not p.add_finalizer and p.create_namespace is None and p.namespace_patch is None
    assert p.rolebinding_action is RoleBindingAction.CREATE
    assert p.rolebinding == binding()
    assert p.status["phase"] == c.TWIN_PHASE_PENDING
    assert "RoleBinding" in p.status["message"]


def test_ready_when_active_and_bound():
    p = plan(ns=ours(), rb=binding())
    assert p.status == {
        "phase": c.TWIN_PHASE_READY,
        "message": "namespace demo-local is ready",
        "namespace": "demo-local",
        "observedGeneration": 3,
    }
    assert p.rolebinding is None and p.namespace_patch is None and p.requeue_after is None


def test_not_ready_while_namespace_not_active():
    p = plan(ns=ours(phase="Pending"), rb=binding())
    assert p.status["phase"] == c.TWIN_PHASE_PENDING


def test_level_change_relabels_and_is_pending_until_seen():
    consumers = {"local": {"metadata": {"name": "local"}, "spec": {"podSecurityLevel": "restricted"}}}
    p = plan(ns=ours(level="baseline"), rb=binding(), consumers=consumers)
    assert p.namespace_patch == {"metadata": {"labels": {c.LABEL_PSA_ENFORCE: "restricted"}}}
    assert p.status["phase"] == c.TWIN_PHASE_PENDING
    assert plan(ns=ours(level="restricted"), rb=binding(), consumers=consumers).status["phase"] == c.TWIN_PHASE_READY


def test_wrong_role_is_recreated():
    p = plan(ns=ours(), rb=binding(role="cluster-admin"))
    assert p.rolebinding_action is RoleBindingAction.RECREATE
    assert p.rolebinding["roleRef"]["name"] == ROLE


def test_finalizer_restored_on_a_served_request():
    p = plan(request(finalizer=False), ns=ours(), rb=binding())
    assert p.add_finalizer
    assert p.status["phase"] == c.TWIN_PHASE_READY


def test_our_namespace_terminating_waits_then_is_created_again():
    p = plan(ns=ours(deleting=True))
    assert p.create_namespace is None and p.delete_namespace_uid is None
    assert p.status["phase"] == c.TWIN_PHASE_PENDING
    assert p.requeue_after


# --- plans: refusing -----------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message_part",
    [
        ({"req": request(name="kube-system")}, "reserved"),
        ({"req": request(name="Bad_Name")}, "not a valid namespace name"),
        ({"tenant_ns": {"metadata": {"name": TENANT, "labels": {}}}}, "is not a tenant namespace"),
        ({"consumers": {}}, "no Consumer local"),
        ({"req": request(ns="team-a"), "tenant_ns": tenant("team-a", "local")}, "has its identity in namespace"),
    ],
)
def test_refused_requests_are_never_served(kwargs, message_part):
    p = plan(**kwargs)
    assert p.status["phase"] == c.TWIN_PHASE_REFUSED
    assert message_part in p.status["message"]
    assert not p.add_finalizer and p.create_namespace is None and p.rolebinding is None
    assert p.namespace_patch is None and p.delete_namespace_uid is None


@pytest.mark.parametrize(
    "ns",
    [
        foreign(),
        ours(consumer="other"),  # made for another consumer
        ours(key="kube-offload-tenant-other/demo-local"),  # made for another request
        ours(key=f"{TENANT}/something-else"),
    ],
)
def test_existing_namespace_not_ours_is_refused_and_untouched(ns):
    p = plan(request(finalizer=False), ns=ns)
    assert p.status["phase"] == c.TWIN_PHASE_REFUSED
    assert "exists and is not yours" in p.status["message"]
    assert not p.add_finalizer and p.create_namespace is None and p.namespace_patch is None
    assert p.rolebinding is None and p.delete_namespace_uid is None
    assert p.requeue_after == NAME_TAKEN_RECHECK_SECONDS


# --- plans: deleting -----------------------------------------------------------------
def test_deleting_request_deletes_our_namespace_by_uid():
    p = plan(request(deleting=True), ns=ours())
    assert p.delete_namespace_uid == "ns-uid"
    assert not p.remove_finalizer
    assert p.status["phase"] == c.TWIN_PHASE_TERMINATING
    assert p.requeue_after


def test_deleting_request_waits_while_namespace_terminates():
    p = plan(request(deleting=True), ns=ours(deleting=True))
    assert p.delete_namespace_uid is None and not p.remove_finalizer
    assert p.status["phase"] == c.TWIN_PHASE_TERMINATING


def test_deleting_request_released_once_namespace_gone():
    p = plan(request(deleting=True), ns=None)
    assert p.remove_finalizer and p.delete_namespace_uid is None


def test_deleting_request_never_deletes_a_foreign_namespace():
    p = plan(request(deleting=True), ns=foreign())
    assert p.remove_finalizer and p.delete_namespace_uid is None


def test_deleting_request_deletes_its_namespace_even_when_the_consumer_is_gone():
    p = plan(request(deleting=True), ns=ours(), consumers={}, tenant_ns={"metadata": {"name": TENANT}})
    assert p.delete_namespace_uid == "ns-uid"


def test_deleting_request_without_our_finalizer_is_left_alone():
    p = plan(request(deleting=True, finalizer=False), ns=ours())
    assert p.delete_namespace_uid is None and not p.remove_finalizer and p.status is None
