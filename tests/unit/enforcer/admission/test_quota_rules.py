"""The webhook rules that keep the quota counting what runs (enforcer/admission/quota_rules.py), alone
and through enforcer.admission.validation.decide: consumer finalizers, lowered requests and limits,
limits a quota counts, and quotaMode."""

from __future__ import annotations

import copy

import orjson
import pytest

from enforcer.admission.quota_rules import added_finalizers, finalizer_problem, lowered_resources, missing_limits
from enforcer.admission.validation import decide, requests_delta
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review
from support import builders

NS = "demo-local"
CONSUMER = "local"
USER = f"system:serviceaccount:{c.tenant_namespace(CONSUMER)}:{c.CONSUMER_SERVICE_ACCOUNT}"
TWIN = {"metadata": {"name": NS, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER, c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}}}


def consumer(**spec) -> dict:
    return {"apiVersion": "kube-offload.io/v1alpha1", "kind": c.CONSUMER_KIND, "metadata": {"name": CONSUMER}, "spec": spec}


def shadowpod(requests=None, limits=None, *, finalizers=None, overhead=None, deleting=False) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    spec: dict = {"containers": [{"name": "app", "image": "nginx", "resources": resources}]}
    if overhead:
        spec["overhead"] = overhead
    meta = {"finalizers": finalizers} if finalizers is not None else {}
    return builders.shadowpod("web", NS, spec=spec, origin=CONSUMER, deleting=deleting, uid="uid-1", generation=1, **meta)


def request(obj: dict, *, operation: str = "CREATE", old: dict | None = None, user: str = USER):
    review = build_review(obj, operation=operation, old_object=old, user_info={"username": user, "groups": []})
    return parse_review(orjson.dumps(review))


def run(obj, *, operation="CREATE", old=None, user=USER, the_consumer=None, usage=None):
    return decide(
        request(obj, operation=operation, old=old, user=user),
        namespace=TWIN,
        consumer=the_consumer or consumer(quota={"cpu": "4", "memory": "8Gi", "pods": "10"}),
        usage=usage or {"pods": 0},
        service_account=lambda name: None,
    )


# --- finalizers ---------------------------------------------------------------------------------
def test_added_finalizers_are_the_new_ones():
    old = shadowpod(finalizers=["a"])
    assert added_finalizers(request(shadowpod(finalizers=["a", "b"]), operation="UPDATE", old=old)) == ["b"]
    assert added_finalizers(request(shadowpod(finalizers=["a"]))) == ["a"]
    assert added_finalizers(request(shadowpod(finalizers=[]), operation="UPDATE", old=old)) == []


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_consumer_finalizer_is_refused_naming_the_field(operation):
    obj = shadowpod({"cpu": "1"}, finalizers=["example.com/keep"])
    decision = run(obj, operation=operation, old=shadowpod({"cpu": "1"}) if operation == "UPDATE" else None)
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith("metadata.finalizers:") and "'example.com/keep'" in decision.message


def test_a_finalizer_added_by_someone_else_or_removed_is_not_the_consumers():
    with_finalizer = shadowpod({"cpu": "1"}, finalizers=["example.com/keep"])
    assert finalizer_problem(
        request(with_finalizer, operation="UPDATE", old=shadowpod({"cpu": "1"}), user="system:admin"),
        namespace=TWIN, consumer=consumer(),
    ) == ""
    # Removing one (the GC's orphan finalizer, say) is never refused.
    assert run(shadowpod({"cpu": "1"}), operation="UPDATE", old=with_finalizer).allowed


# --- lowering requests and limits ---------------------------------------------------------------
def test_an_update_lowering_a_request_is_refused_naming_the_field_and_why():
    old = shadowpod({"cpu": "500m", "memory": "256Mi"})
    new = shadowpod({"cpu": "100m", "memory": "256Mi"})
    decision = run(new, operation="UPDATE", old=old)
    assert not decision.allowed and decision.code == 422
    assert decision.message.startswith("spec.pod.spec.containers[0].resources.requests.cpu: lowered from 500m to 100m")
    assert "the running pod keeps its old requests" in decision.message


def test_removing_a_limit_or_the_overhead_counts_as_lowering():
    old = shadowpod({"cpu": "1"}, {"cpu": "2"}, overhead={"memory": "10Mi"})
    problems = lowered_resources(request(shadowpod({"cpu": "1"}), operation="UPDATE", old=old))
    assert [p.split(":", 1)[0] for p in problems] == [
        "spec.pod.spec.containers[0].resources.limits.cpu",
        "spec.pod.spec.overhead.memory",
    ]
    assert "removed (was 2)" in problems[0]


def test_a_limit_without_a_request_requests_it_so_dropping_it_lowers_the_request():
    old = shadowpod(None, {"cpu": "1"})
    problems = lowered_resources(request(shadowpod(None, None), operation="UPDATE", old=old))
    assert any(p.startswith("spec.pod.spec.containers[0].resources.requests.cpu: removed") for p in problems)


def test_raising_or_keeping_resources_is_not_lowering_and_a_finished_or_deleting_old_one_is_exempt():
    old = shadowpod({"cpu": "500m"})
    assert lowered_resources(request(shadowpod({"cpu": "1"}), operation="UPDATE", old=old)) == []
    assert lowered_resources(request(shadowpod({"cpu": "500m"}), operation="UPDATE", old=old)) == []
    finished = copy.deepcopy(old)
    finished["status"] = {"phase": "Succeeded"}
    assert lowered_resources(request(shadowpod({"cpu": "1m"}), operation="UPDATE", old=finished)) == []
    assert lowered_resources(request(shadowpod({"cpu": "1m"}), operation="UPDATE", old=shadowpod({"cpu": "1"}, deleting=True))) == []


def test_a_sidecar_turned_init_container_lowers_the_total_and_is_refused():
    old = shadowpod({"cpu": "100m"})
    old["spec"]["pod"]["spec"]["initContainers"] = [
        {"name": "proxy", "image": "p", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    ]
    new = copy.deepcopy(old)
    del new["spec"]["pod"]["spec"]["initContainers"][0]["restartPolicy"]
    problems = lowered_resources(request(new, operation="UPDATE", old=old))
    assert len(problems) == 1 and problems[0].startswith("spec.pod.spec: this update lowers the pod's total cpu")


# --- limits the quota counts, and quotaMode -----------------------------------------------------
def test_when_the_quota_counts_limits_every_container_must_set_them():
    limited = consumer(quota={"cpu": "4"}, policy={"quotaMode": "limits"})
    decision = run(shadowpod({"cpu": "1"}), the_consumer=limited)
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith("spec.pod.spec.containers[0].resources.limits.cpu: must be set")
    assert "limits.cpu" in decision.message and "spec.policy.quotaMode" in decision.message
    assert run(shadowpod({"cpu": "1"}, {"cpu": "2"}), the_consumer=limited).allowed
    assert missing_limits(request(shadowpod({"cpu": "1"})), {"cpu": 4000}, CONSUMER) == []


@pytest.mark.parametrize(
    "mode, limit, allowed",
    [
        ("requests", "8", True),  # requests 1 of 4: the limits are not counted
        ("limits", "8", False),  # limits 8 > 4
        ("limits", "3", True),
        ("both", "3", True),
        ("both", "5", False),
    ],
)
def test_quota_mode_decides_what_a_plain_key_limits(mode, limit, allowed):
    the_consumer = consumer(quota={"cpu": "4"}, policy={"quotaMode": mode})
    decision = run(shadowpod({"cpu": "1"}, {"cpu": limit}), the_consumer=the_consumer)
    assert decision.allowed is allowed, decision.message
    if not allowed:
        assert "exceeded quota" in decision.message and "limits.cpu" in decision.message


def test_explicit_limits_key_and_ephemeral_storage_and_overhead_are_counted():
    the_consumer = consumer(quota={"limits.memory": "1Gi", "ephemeral-storage": "1Gi"})
    ok = shadowpod({"ephemeral-storage": "512Mi"}, {"memory": "512Mi"})
    assert run(ok, the_consumer=the_consumer).allowed
    assert not run(ok, the_consumer=the_consumer, usage={"pods": 0, "limits.memory": 600 * 1024**2 * 1000}).allowed
    heavy = shadowpod({"ephemeral-storage": "512Mi"}, {"memory": "512Mi"}, overhead={"memory": "600Mi"})
    decision = run(heavy, the_consumer=the_consumer)
    assert not decision.allowed and "limits.memory: requested 1112Mi" in decision.message


def test_requests_delta_carries_limits():
    assert requests_delta(request(shadowpod({"cpu": "1"}, {"cpu": "2"}))) == {"cpu": 1000, "limits.cpu": 2000, "pods": 1000}


def test_a_policy_that_does_not_parse_is_the_providers_mistake_naming_the_key():
    decision = run(shadowpod({"cpu": "1"}), the_consumer=consumer(quota={"cpu": "1"}, policy={"quotaMode": "often"}))
    assert not decision.allowed and decision.code == 403
    assert "misconfigured (spec.policy.quotaMode: 'often' is not one of requests, limits, both)" in decision.message
