"""The webhook rules that keep the quota counting what runs (enforcer/admission/quota_rules.py), alone
and through enforcer.admission.validation.decide: consumer finalizers, lowered requests and limits,
limits a quota counts, and quotaMode."""

from __future__ import annotations

import copy

import orjson
import pytest

from enforcer.admission.quota_rules import (
    added_finalizers,
    finalizer_problem,
    lowered_resources,
    missing_limits,
    unequal_limits,
)
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
    old = shadowpod({"cpu": "500m", "ephemeral-storage": "1Gi"})
    new = shadowpod({"cpu": "500m", "ephemeral-storage": "512Mi"})
    decision = run(new, operation="UPDATE", old=old)
    assert not decision.allowed and decision.code == 422
    assert decision.message.startswith("spec.pod.spec.containers[0].resources.requests.ephemeral-storage: lowered from 1Gi to 512Mi")
    assert "the running pod keeps its old requests" in decision.message


def _with_init(spec_owner: dict, name: str, cpu: str, *, sidecar: bool) -> dict:
    init = {"name": name, "image": "p", "resources": {"requests": {"cpu": cpu}}}
    if sidecar:
        init["restartPolicy"] = "Always"
    spec_owner["spec"]["pod"]["spec"]["initContainers"] = [init]
    return spec_owner


def test_lowering_the_cpu_and_memory_of_a_container_or_sidecar_is_a_resize_and_admitted():
    old = _with_init(shadowpod({"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"}), "proxy", "1", sidecar=True)
    new = _with_init(shadowpod({"cpu": "100m", "memory": "128Mi"}, {"cpu": "200m", "memory": "256Mi"}), "proxy", "100m", sidecar=True)
    assert lowered_resources(request(new, operation="UPDATE", old=old)) == []
    assert run(new, operation="UPDATE", old=old).allowed


def test_an_ordinary_init_container_is_not_resized_so_lowering_it_is_refused():
    old = _with_init(shadowpod({"cpu": "100m"}), "setup", "1", sidecar=False)
    new = _with_init(shadowpod({"cpu": "100m"}), "setup", "100m", sidecar=False)
    problems = lowered_resources(request(new, operation="UPDATE", old=old))
    assert [p.split(":", 1)[0] for p in problems] == ["spec.pod.spec.initContainers[0].resources.requests.cpu"]


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
    assert "misconfigured (spec.policy.quotaMode: 'often' is not one of requests, limits, both, hard)" in decision.message


# --- quota mode hard: limits equal requests -------------------------------------------------------
HARD = consumer(quota={"cpu": "4", "memory": "8Gi", "pods": "10"}, policy={"quotaMode": "hard"})


def two_containers(app: dict, init: dict) -> dict:
    spec = {
        "initContainers": [{"name": "setup", "image": "busybox", "resources": init}],
        "containers": [{"name": "app", "image": "nginx", "resources": app}],
    }
    return builders.shadowpod("web", NS, spec=spec, origin=CONSUMER, uid="uid-1", generation=1)


EQUAL = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "0.5", "memory": "1024Mi"}}


@pytest.mark.parametrize(
    "app, init, field, got",
    [
        # a limit above the request: the container could burst beyond what is counted
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, EQUAL,
         'spec.pod.spec.containers[0].resources.limits.cpu (container "app")', "must equal requests.cpu (limit 2, request 1)"),
        # a missing limit, named with the request it must equal
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1"}}, EQUAL,
         'spec.pod.spec.containers[0].resources.limits.memory (container "app")', "must be set"),
        # init containers too
        (EQUAL, {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
         'spec.pod.spec.initContainers[0].resources.limits.memory (container "setup")',
         "must equal requests.memory (limit 128Mi, request 64Mi)"),
        # nothing at all
        ({}, EQUAL, 'spec.pod.spec.containers[0].resources.limits.cpu (container "app")', "must be set"),
    ],
)
def test_hard_mode_refuses_limits_unequal_to_requests_naming_container_field_and_fix(app, init, field, got):
    decision = run(two_containers(app, init), the_consumer=HARD)
    assert not decision.allowed and decision.code == 403
    first = decision.message.splitlines()[0]
    assert first.startswith(f"{field}: {got}: "), decision.message
    assert "quota mode hard (Consumer spec.policy.quotaMode)" in first and "(cpu, memory)" in first
    assert "; set " in first


def test_hard_mode_names_every_offending_container_and_the_fix():
    app = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    init = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    problems = unequal_limits(request(two_containers(app, init)), {"cpu": 4000, "limits.cpu": 4000, "memory": 8 * 2**30 * 1000}, CONSUMER)
    assert len(problems) == 2, problems
    assert problems[0].startswith('spec.pod.spec.containers[0].resources.limits.cpu (container "app"): must be set')
    assert problems[0].endswith("set limits.cpu to the request, 1")
    assert problems[1].startswith('spec.pod.spec.initContainers[0].resources.limits.memory (container "setup"): must equal')
    assert problems[1].endswith("set limits.memory and requests.memory to the same amount")


def test_hard_mode_admits_equal_limits_and_a_limit_alone_which_the_api_server_copies_to_the_request():
    assert run(two_containers(EQUAL, EQUAL), the_consumer=HARD).allowed
    only_limits = {"limits": {"cpu": "250m", "memory": "256Mi"}}
    assert run(two_containers(only_limits, only_limits), the_consumer=HARD).allowed


def test_hard_mode_checks_only_the_resources_the_quota_counts():
    cpu_only = consumer(quota={"requests.cpu": "4"}, policy={"quotaMode": "hard"})
    # memory is not counted: its limit may differ or be absent; cpu, named as requests.cpu, must be equal
    free_memory = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    assert run(two_containers(free_memory, {"limits": {"cpu": "1"}}), the_consumer=cpu_only).allowed
    decision = run(two_containers({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}, {"limits": {"cpu": "1"}}), the_consumer=cpu_only)
    assert not decision.allowed and "limits.cpu" in decision.message and "(cpu)" in decision.message
    # a quota of pods or objects only counts no compute resource: nothing to equal
    counts_only = consumer(quota={"pods": "3", "services": "2"}, policy={"quotaMode": "hard"})
    assert run(two_containers({"requests": {"cpu": "1"}}, {}), the_consumer=counts_only).allowed


def test_hard_mode_checks_pod_level_resources_when_they_name_a_counted_resource():
    pod = two_containers(EQUAL, EQUAL)
    pod["spec"]["pod"]["spec"]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    decision = run(pod, the_consumer=HARD)
    assert not decision.allowed
    assert decision.message.startswith("spec.pod.spec.resources.limits.cpu (pod-level resources): must equal requests.cpu")


@pytest.mark.parametrize("limit, allowed", [("4", True), ("5", False)])
def test_hard_mode_counts_requests_and_limits_as_both_does(limit, allowed):
    equal = {"requests": {"cpu": limit}, "limits": {"cpu": limit}}
    decision = run(two_containers(equal, equal), the_consumer=consumer(quota={"cpu": "4"}, policy={"quotaMode": "hard"}))
    assert decision.allowed is allowed, decision.message
    if not allowed:
        assert "exceeded quota" in decision.message and "cpu: requested 5" in decision.message


def test_hard_mode_admits_metadata_updates_of_shadowpods_admitted_before_the_mode_changed():
    # Admitted under "requests" with a limit above the request; the provider then set hard.
    old = shadowpod({"cpu": "1"}, {"cpu": "2"})
    relabelled = copy.deepcopy(old)
    relabelled["metadata"].setdefault("labels", {})["team"] = "b"
    assert run(relabelled, operation="UPDATE", old=old, the_consumer=HARD).allowed
    # A spec update is judged by the mode in force.
    changed = copy.deepcopy(old)
    changed["spec"]["pod"]["spec"]["containers"][0]["image"] = "nginx:2"
    decision = run(changed, operation="UPDATE", old=old, the_consumer=HARD)
    assert not decision.allowed and "must equal requests.cpu" in decision.message
