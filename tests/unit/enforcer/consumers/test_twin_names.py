"""Twin names belong to the provider's plan (enforcer/consumers/twin_names.py): DefaultName twins end
in -<consumer id>, EnforceSameName only where granted, never a reserved name, at most
spec.policy.twinNamespaces.maxCount per consumer; refusals reach the TwinNamespace status."""

from __future__ import annotations

import pytest

from enforcer.consumers.twin_names import count_problem, plan_name_problem, request_key
from enforcer.consumers.twin_plan import plan_twin
from kube_offload import constants as c
from kube_offload.provider_policy import TwinNamespacePolicy
from vkubelet.twins.naming import twin_namespace_name

TENANT = c.tenant_namespace("local")
CONSUMERS = {
    "local": {"metadata": {"name": "local"}, "spec": {}},
    "x-local": {"metadata": {"name": "x-local"}, "spec": {}},
}


def problem(name: str, policy: TwinNamespacePolicy = TwinNamespacePolicy(), **kw) -> str:
    return plan_name_problem(name, "local", policy, consumers=CONSUMERS.get, **kw)


@pytest.mark.parametrize("name", ["web-local", "a-b-c-local", twin_namespace_name("demo", "local"),
                                  twin_namespace_name("n" * 70, "local")])
def test_default_name_twins_fit_the_plan(name):
    assert problem(name) == ""


def test_the_harness_and_vkubelet_default_names_fit():
    # What the virtual kubelet asks for by default, for any local namespace (long ones hashed).
    for local in ("default", "team-a", "x" * 63):
        assert problem(twin_namespace_name(local, "local")) == "", local
    # but a local kube-* namespace's twin is still kube-*: the provider's, never offloaded.
    assert "reserved" in problem(twin_namespace_name("kube-system", "local"))


@pytest.mark.parametrize(
    "name, fragments",
    [
        ("ingress-nginx", ['"-local"', "spec.policy.twinNamespaces.sameNames", "(none granted)"]),
        ("local", ['"-local"']),  # the id alone is not "-<id>"
        ("-local", ['"-local"']),
    ],
)
def test_other_names_need_a_same_name_grant(name, fragments):
    message = problem(name)
    assert message.startswith(f"metadata.name {name!r}")
    for fragment in fragments:
        assert fragment in message


def test_same_names_grant_exact_names_and_prefixes():
    policy = TwinNamespacePolicy(same_names=("shared", "team-*"))
    assert problem("shared", policy) == "" and problem("team-a", policy) == ""
    assert "granted: shared, team-*" in problem("sharedx", policy)


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-anything-local", "kube-offload-local",
                                  "kube-offload-tenant-x-local"])
def test_always_reserved_names_are_refused_whatever_is_granted(name):
    policy = TwinNamespacePolicy(same_names=("*",))
    assert "reserved by the provider for itself" in problem(name, policy)


def test_the_release_namespace_and_configured_reserved_names_are_refused():
    assert "reserved by the provider for itself" in problem("offload-local", release_namespace="offload-local")
    message = problem("billing-local", TwinNamespacePolicy(reserved=("billing-*",)))
    assert "spec.policy.twinNamespaces.reserved" in message


def test_another_consumers_default_name_twin_is_not_this_ones():
    # Consumer x-local exists: web-x-local is its twin of "web", not consumer local's.
    message = problem("web-x-local")
    assert "belongs to the plan of consumer 'x-local'" in message
    assert problem("web-y-local") == ""  # no consumer y-local


def test_a_consumer_whose_id_clashes_with_an_older_ones_gets_no_twin():
    # Consumer b was admitted first and may ask for web-a-b (its twin of web-a) at any
    # time: consumer a-b, admitted later, would find its twin of web taken. So the later
    # one gets none (the older keeps every twin it may ask for), whatever the name.
    message = plan_name_problem("web-a-b", "a-b", TwinNamespacePolicy(), older_consumers=("b",))
    assert "consumer 'a-b' cannot have twin namespaces here" in message and "consumer 'b'" in message
    assert "never granted" in message
    # The older one is not refused for the newer's existence (only names that are its twins).
    assert plan_name_problem("web-x-b", "b", TwinNamespacePolicy(), older_consumers=()) == ""
    assert plan_name_problem("web-a-b", "a-b", TwinNamespacePolicy(), older_consumers=("ab", "c")) == ""


def test_the_twin_plan_refuses_the_newer_of_two_clashing_consumers():
    older = {"metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}
    newer = {"metadata": {"name": "a-b", "creationTimestamp": "2026-01-02T00:00:00Z"}, "spec": {}}
    consumers = {"b": older, "a-b": newer}

    def plan_for(consumer_id: str, name: str):
        tenant = c.tenant_namespace(consumer_id)
        request = {"metadata": {"name": name, "namespace": tenant, "creationTimestamp": "2026-01-03T00:00:00Z", "uid": "u"},
                   "spec": {"localNamespace": "web"}}
        return plan_twin(request, tenant_namespace={"metadata": {"name": tenant, "labels": {c.LABEL_TENANT: consumer_id}}},
                         consumers=consumers.get, namespace=None, rolebinding=None, twin_role="role",
                         every_consumer=lambda: list(consumers.values()))

    refused = plan_for("a-b", "web-a-b")
    assert refused.status["phase"] == c.TWIN_PHASE_REFUSED and "admitted before it" in refused.status["message"]
    assert refused.create_namespace is None
    served = plan_for("b", "web-b")
    assert served.status["phase"] == c.TWIN_PHASE_PENDING and served.create_namespace is not None
    # The older one keeps the name the newer one would have wanted: the newer gets no twin.
    kept = plan_for("b", "web-a-b")
    assert kept.status["phase"] == c.TWIN_PHASE_PENDING and kept.create_namespace is not None


# --- the maximum ---------------------------------------------------------------------------------
def req(name: str, created: str, *, status: dict | None = None) -> dict:
    obj = {"metadata": {"name": name, "namespace": TENANT, "creationTimestamp": created, "uid": f"u-{name}"},
           "spec": {"localNamespace": name}}
    if status:
        obj["status"] = status
    return obj


def test_the_first_max_count_requests_by_age_are_served():
    siblings = [req("a-local", "2026-01-01T00:00:01Z"), req("b-local", "2026-01-01T00:00:02Z"),
                req("c-local", "2026-01-01T00:00:03Z")]
    kw = dict(max_count=2, eligible=lambda r: True, served=lambda r: False)
    assert count_problem(siblings[0], siblings, **kw) == ""
    assert count_problem(siblings[1], siblings, **kw) == ""
    message = count_problem(siblings[2], siblings, **kw)
    assert "maximum of 2 twin namespaces" in message and "spec.policy.twinNamespaces.maxCount" in message


def test_a_served_twin_keeps_its_place_and_ineligible_requests_take_none():
    old_unserved = req("a-local", "2026-01-01T00:00:01Z")
    served = req("b-local", "2026-01-01T00:00:02Z")
    bad = req("kube-x", "2026-01-01T00:00:00Z")
    siblings = [old_unserved, served, bad]
    kw = dict(max_count=1, eligible=lambda r: r is not bad, served=lambda r: r is served)
    assert count_problem(served, siblings, **kw) == ""
    assert "maximum of 1" in count_problem(old_unserved, siblings, **kw)
    assert count_problem(old_unserved, siblings, max_count=1, eligible=lambda r: r is not bad, served=lambda r: False) == ""


def plan(request: dict, *, siblings=(), consumer_spec: dict | None = None):
    consumers = {**CONSUMERS, "local": {"metadata": {"name": "local"}, "spec": consumer_spec or {}}}
    return plan_twin(
        request,
        tenant_namespace={"metadata": {"name": TENANT, "labels": {c.LABEL_TENANT: "local"}}},
        consumers=consumers.get,
        namespace=None,
        rolebinding=None,
        twin_role="role",
        siblings=lambda _consumer: list(siblings),
        namespace_of=lambda _name: None,
        release_namespace="kube-offload",
    )


def test_refusals_reach_the_twin_namespace_status_and_create_nothing():
    for name, fragment in (("ingress-nginx", "sameNames"), ("kube-x-local", "reserved"), ("kube-offload", "reserved")):
        decision = plan(req(name, "2026-01-01T00:00:00Z"))
        assert decision.status["phase"] == c.TWIN_PHASE_REFUSED and fragment in decision.status["message"]
        assert decision.create_namespace is None and not decision.add_finalizer
    siblings = [req(f"n{i}-local", f"2026-01-01T00:00:0{i}Z") for i in range(3)]
    over = plan(siblings[2], siblings=siblings, consumer_spec={"policy": {"twinNamespaces": {"maxCount": 2}}})
    assert over.status["phase"] == c.TWIN_PHASE_REFUSED and "maxCount" in over.status["message"]
    assert plan(siblings[1], siblings=siblings, consumer_spec={"policy": {"twinNamespaces": {"maxCount": 2}}}).create_namespace


def test_a_granted_same_name_is_created_and_a_bad_policy_is_the_providers_mistake():
    granted = plan(req("shared", "2026-01-01T00:00:00Z"), consumer_spec={"policy": {"twinNamespaces": {"sameNames": ["shared"]}}})
    assert granted.create_namespace["metadata"]["name"] == "shared"
    broken = plan(req("a-local", "2026-01-01T00:00:00Z"), consumer_spec={"policy": {"twinNamespaces": {"maxCount": -1}}})
    assert broken.status["phase"] == c.TWIN_PHASE_REFUSED and "spec.policy.twinNamespaces.maxCount" in broken.status["message"]
    assert request_key(req("a-local", "x")) == f"{TENANT}/a-local"
