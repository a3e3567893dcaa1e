"""The twin ResourceQuota: what the enforcer writes into each twin namespace from a
Consumer's spec.quota (object counts and storage only, never compute), and when it
creates, updates, deletes or leaves it. tests/e2e/test_provider_policy_object_quota.py
shows the API server enforcing it under the consumer identity."""

from __future__ import annotations

import pytest

from kube_offload.consumer_quota import is_object_quota_key, twin_object_quota
from enforcer.consumers.twin_objects import (
    ResourceQuotaAction,
    RoleBindingAction,
    desired_resourcequota,
    resourcequota_action,
)
from enforcer.consumers.twin_plan import plan_twin
from kube_offload import constants as c
from kube_offload.resources import QuantityError

TENANT = "kube-offload-tenant-local"
KEY = f"{TENANT}/demo-local"
GOLD_STORAGE = "gold.storageclass.storage.k8s.io/requests.storage"
GOLD_CLAIMS = "gold.storageclass.storage.k8s.io/persistentvolumeclaims"


@pytest.mark.parametrize(
    "quota, hard",
    [
        (None, {}),
        ({}, {}),
        # compute keys are the enforcer's per-consumer count: never in the ResourceQuota
        ({"cpu": "4", "requests.memory": "8Gi", "limits.cpu": "8", "pods": "10", "count/pods": "10",
          "requests.ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"}, {}),
        ({"count/services": "1"}, {"count/services": "1"}),
        ({"services.nodeports": 0, "services.loadbalancers": "0"}, {"services.nodeports": "0", "services.loadbalancers": "0"}),
        ({"count/secrets": "20", "count/configmaps": "20", "secrets": "30", "configmaps": "30"},
         {"count/secrets": "20", "count/configmaps": "20", "secrets": "30", "configmaps": "30"}),
        ({"count/persistentvolumeclaims": "3", "persistentvolumeclaims": "3", "requests.storage": "10Gi"},
         {"count/persistentvolumeclaims": "3", "persistentvolumeclaims": "3", "requests.storage": "10Gi"}),
        ({GOLD_STORAGE: "5Gi", GOLD_CLAIMS: "1", "cpu": "2"}, {GOLD_STORAGE: "5Gi", GOLD_CLAIMS: "1"}),
        ({"count/services": "2", "memory": "1Gi", "count/ingresses.networking.k8s.io": "1"},
         {"count/services": "2", "count/ingresses.networking.k8s.io": "1"}),
    ],
)
def test_twin_object_quota_keeps_object_and_storage_keys_only(quota, hard):
    assert twin_object_quota(quota) == hard
    for key in hard:
        assert is_object_quota_key(key)


@pytest.mark.parametrize(
    "quota, named",
    [
        ({"count/services": "many"}, "spec.quota[count/services]"),
        ({"requests.storage": "-1Gi"}, "spec.quota[requests.storage]"),
        ({GOLD_STORAGE: True}, f"spec.quota[{GOLD_STORAGE}]"),
        (["count/services"], "spec.quota"),
    ],
)
def test_twin_object_quota_names_the_key_that_does_not_parse(quota, named):
    with pytest.raises(QuantityError, match=named.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        twin_object_quota(quota)


def consumer(quota: dict | None = None, name: str = "local") -> dict:
    spec: dict = {"podSecurityLevel": "baseline"}
    if quota is not None:
        spec["quota"] = quota
    return {"metadata": {"name": name}, "spec": spec}


def request(name: str = "demo-local") -> dict:
    return {
        "metadata": {"name": name, "namespace": TENANT, "generation": 1, "uid": "req-uid",
                     "finalizers": [c.TWIN_NAMESPACE_FINALIZER]},
        "spec": {"localNamespace": "demo"},
    }


def test_desired_resourcequota_is_marked_and_named():
    quota = desired_resourcequota("demo-local", request(), consumer({"count/services": "1", "cpu": "2"}))
    assert quota == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": c.TWIN_RESOURCEQUOTA_NAME,
            "namespace": "demo-local",
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"},
            "annotations": {c.ANNOTATION_TWIN_REQUEST: KEY},
        },
        "spec": {"hard": {"count/services": "1"}},
    }


@pytest.mark.parametrize("quota", [None, {}, {"cpu": "2", "pods": "5"}])
def test_no_object_key_no_resourcequota(quota):
    # The default: nothing in a twin is bounded by a ResourceQuota (reflection as before).
    assert desired_resourcequota("demo-local", request(), consumer(quota)) is None


def stored(hard: dict, *, ours: bool = True, annotations: dict | None = None, counted: dict | None = None) -> dict:
    """A stored twin ResourceQuota; ``counted``: its status.hard (default: ``hard``, the
    quota controller has caught up)."""
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"} if ours else {}
    return {
        "status": {"hard": counted if counted is not None else hard},
        "metadata": {"name": c.TWIN_RESOURCEQUOTA_NAME, "namespace": "demo-local", "uid": "rq-uid",
                     "resourceVersion": "7", "labels": labels,
                     "annotations": annotations if annotations is not None else {c.ANNOTATION_TWIN_REQUEST: KEY}},
        "spec": {"hard": hard},
    }


WANT = {"count/services": "1", "requests.storage": "1Gi"}


@pytest.mark.parametrize(
    "existing, quota, action",
    [
        (None, None, ResourceQuotaAction.NONE),
        (None, WANT, ResourceQuotaAction.CREATE),
        (stored(WANT), WANT, ResourceQuotaAction.NONE),
        # the API server writes quantities back canonically: not a difference
        (stored({"count/services": "1000m", "requests.storage": "1024Mi"}), WANT, ResourceQuotaAction.NONE),
        (stored({"count/services": "2", "requests.storage": "1Gi"}), WANT, ResourceQuotaAction.UPDATE),
        (stored({"count/services": "1"}), WANT, ResourceQuotaAction.UPDATE),
        (stored({**WANT, "cpu": "1"}), WANT, ResourceQuotaAction.UPDATE),  # a compute key slipped in: removed
        (stored(WANT, ours=False), WANT, ResourceQuotaAction.UPDATE),  # marks put back
        (stored(WANT, annotations={}), WANT, ResourceQuotaAction.UPDATE),
        (stored(WANT), None, ResourceQuotaAction.DELETE),  # the provider dropped every object key
        (stored(WANT, ours=False), None, ResourceQuotaAction.NONE),  # the admin's own: never deleted
    ],
)
def test_resourcequota_action(existing, quota, action):
    desired = desired_resourcequota("demo-local", request(), consumer(quota))
    assert resourcequota_action(existing, desired) is action


def ours_namespace() -> dict:
    return {
        "metadata": {
            "name": "demo-local",
            "uid": "ns-uid",
            "labels": {
                c.LABEL_ORIGIN_CLUSTER_ID: "local",
                c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
                c.LABEL_PSA_ENFORCE: "baseline",
                c.LABEL_PSA_ENFORCE_VERSION: "latest",
            },
            "annotations": {c.ANNOTATION_TWIN_OF: "demo", c.ANNOTATION_TWIN_REQUEST: KEY},
        },
        "status": {"phase": "Active"},
    }


def plan(quota: dict | None, existing: dict | None):
    from enforcer.consumers.twin_objects import desired_rolebinding

    the_consumer = consumer(quota)
    return plan_twin(
        request(),
        tenant_namespace={"metadata": {"name": TENANT, "labels": {c.LABEL_TENANT: "local"}}},
        consumers={"local": the_consumer}.get,
        namespace=ours_namespace(),
        rolebinding=desired_rolebinding("demo-local", request(), the_consumer, "twin-role"),
        twin_role="twin-role",
        resourcequota=existing,
    )


def test_plan_creates_the_resourcequota_and_waits_for_it():
    result = plan({"count/services": "1"}, None)
    assert result.resourcequota_action is ResourceQuotaAction.CREATE
    assert result.resourcequota["spec"]["hard"] == {"count/services": "1"}
    assert result.rolebinding_action is RoleBindingAction.NONE
    assert result.status["phase"] == c.TWIN_PHASE_PENDING
    assert f"ResourceQuota {c.TWIN_RESOURCEQUOTA_NAME}" in result.status["message"]


def test_plan_ready_when_the_resourcequota_matches():
    result = plan({"count/services": "1"}, stored({"count/services": "1"}))
    assert result.resourcequota_action is ResourceQuotaAction.NONE
    assert result.status["phase"] == c.TWIN_PHASE_READY


@pytest.mark.parametrize("counted", [{}, {"count/services": "2"}])
def test_plan_pending_until_the_quota_controller_counted_it(counted):
    # Until then the API server refuses every Service ("status unknown for quota").
    result = plan({"count/services": "1"}, stored({"count/services": "1"}, counted=counted))
    assert result.resourcequota_action is ResourceQuotaAction.NONE
    assert result.status["phase"] == c.TWIN_PHASE_PENDING
    assert "quota controller" in result.status["message"]


def test_plan_raising_the_figure_updates_it():
    result = plan({"count/services": "2"}, stored({"count/services": "1"}))
    assert result.resourcequota_action is ResourceQuotaAction.UPDATE
    assert result.resourcequota["spec"]["hard"] == {"count/services": "2"}


def test_plan_deletes_ours_by_uid_when_no_key_is_left():
    result = plan({"cpu": "2"}, stored({"count/services": "1"}))
    assert result.resourcequota_action is ResourceQuotaAction.DELETE
    assert result.resourcequota_uid == "rq-uid"


def test_plan_keeps_the_resourcequota_when_the_quota_does_not_parse():
    result = plan({"count/services": "lots"}, stored({"count/services": "1"}))
    assert result.resourcequota_action is ResourceQuotaAction.NONE
    assert any("spec.quota[count/services]" in note for note in result.notes)
