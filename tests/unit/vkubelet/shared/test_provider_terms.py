"""Reading our Consumer object: capacity from the provider's summary, capped by the quota;
suggested labels filtered; malformed parts named, not fatal."""

import pytest

from kube_offload import constants as c
from kube_offload.remote_resources import RemoteResources, anonymous, encode_capacity_status
from kube_offload.resources import parse_quantity as q
from vkubelet.shared import provider_terms as pt

SUMMARY = RemoteResources(
    shareable={"cpu": q("10"), "memory": q("20Gi"), "pods": q("200"), "nvidia.com/gpu": q("4")},
    free_by_node={"n1": {"cpu": q("4"), "memory": q("8Gi"), "pods": q("100")}},
    pressure={"MemoryPressure": ["n1"], "DiskPressure": [], "PIDPressure": []},
    schedulable_nodes=1,
    total_nodes=2,
)


def _consumer(*, capacity=SUMMARY, quota=None, labels=None, cordoned=None, drain=None):
    spec = {}
    if drain is not None:
        spec["drain"] = drain
    if quota is not None:
        spec["quota"] = quota
    if labels is not None:
        spec["nodeLabels"] = labels
    if cordoned is not None:
        spec["cordoned"] = cordoned
    status = {} if capacity is None else {"capacity": encode_capacity_status(capacity) if isinstance(capacity, RemoteResources) else capacity}
    return {"apiVersion": "kube-offload.io/v1alpha1", "kind": c.CONSUMER_KIND, "metadata": {"name": "local"}, "spec": spec, "status": status}


def test_no_consumer_means_not_admitted_and_nothing_offered():
    terms = pt.read_consumer(None)
    assert not terms.admitted
    assert pt.node_capacity(terms, 90) == {"pods": 0}


def test_summary_not_published_yet_keeps_what_the_node_shows():
    terms = pt.read_consumer(_consumer(capacity=None))
    assert terms.admitted and terms.summary is None
    assert pt.node_capacity(terms, 90) is None


def test_capacity_is_the_sharing_percentage_of_the_shareable_summary():
    terms = pt.read_consumer(_consumer())
    assert terms.summary == anonymous(SUMMARY)  # the provider names no node
    capacity = pt.node_capacity(terms, 50)
    assert capacity == {"cpu": q("5"), "memory": q("10Gi"), "pods": q("100"), "nvidia.com/gpu": q("2")}


def test_quota_caps_each_resource_it_names_and_only_those():
    terms = pt.read_consumer(_consumer(quota={"cpu": "2", "pods": 10, "memory": "64Gi", "example.com/fpga": "1"}))
    assert terms.quota == {"cpu": q("2"), "pods": q("10"), "memory": q("64Gi"), "example.com/fpga": q("1")}
    capacity = pt.node_capacity(terms, 100)
    assert capacity == {"cpu": q("2"), "memory": q("20Gi"), "pods": q("10"), "nvidia.com/gpu": q("4")}
    assert "example.com/fpga" not in capacity  # a quota does not invent a resource


@pytest.mark.parametrize(
    "capacity, quota, want",
    [
        ({"cpu": 5000}, {}, {"cpu": 5000}),
        ({"cpu": 5000}, {"cpu": 1000}, {"cpu": 1000}),
        ({"cpu": 500}, {"cpu": 1000}, {"cpu": 500}),
        ({"cpu": 500, "pods": 3000}, {"pods": 0}, {"cpu": 500, "pods": 0}),  # quota 0: nothing of it
    ],
)
def test_cap_by_quota(capacity, quota, want):
    assert pt.cap_by_quota(capacity, quota) == want


def test_malformed_parts_are_named_and_ignored():
    terms = pt.read_consumer(
        _consumer(capacity={"shareable": {"cpu": "lots"}}, quota={"cpu": "two", "memory": "1Gi"}, labels={"ok": "yes"})
    )
    assert terms.summary is None
    assert terms.quota == {"memory": q("1Gi")}
    assert terms.suggested_labels == {"ok": "yes"}
    assert any("status.capacity.shareable" in p for p in terms.problems)
    assert any("spec.quota[cpu]" in p for p in terms.problems)


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("topology.kubernetes.io/region", "eu-west", True),
        ("topology.kubernetes.io/zone", "eu-west-1a", True),
        ("node.kubernetes.io/instance-type", "m5.large", True),
        ("provider", "acme", True),
        ("example.com/tier", "gold", True),
        (c.LABEL_TYPE, "physical", False),  # ours
        ("x.kube-offload.io/anything", "v", False),
        ("kubernetes.io/hostname", "n1", False),
        ("node-role.kubernetes.io/control-plane", "", False),
        ("k8s.io/thing", "v", False),
        ("bad key!", "v", False),
        ("fine", "not a valid value!", False),
    ],
)
def test_which_suggested_labels_a_provider_may_set(key, value, allowed):
    assert (pt.suggested_label_problem(key, value) is None) == allowed
    terms = pt.read_consumer(_consumer(labels={key: value}))
    assert (key in terms.suggested_labels) == allowed
    assert bool(terms.problems) != allowed


def test_cordon_is_read():
    assert pt.read_consumer(_consumer(cordoned=True)).cordoned
    assert not pt.read_consumer(_consumer()).cordoned


def test_drain_is_read_even_when_this_consumer_cannot_parse_it():
    assert pt.read_consumer(_consumer(drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})).draining
    assert pt.read_consumer(_consumer(drain={"future": "format"})).draining
    terms = pt.read_consumer(_consumer())
    assert not terms.draining and not terms.cordoned


def test_a_requests_dot_quota_key_caps_the_resource_like_a_plain_one():
    capacity = {"cpu": q("10"), "memory": q("20Gi")}
    assert pt.cap_by_quota(capacity, {"requests.cpu": q("2"), "limits.memory": q("1Gi")}) == {"cpu": q("2"), "memory": q("20Gi")}
    assert pt.cap_by_quota(capacity, {"requests.cpu": q("3"), "cpu": q("2")}) == {"cpu": q("2"), "memory": q("20Gi")}


# --- the provider's policy ------------------------------------------------------------------------
def test_the_policy_is_read_and_absent_means_the_defaults():
    from kube_offload.provider_policy import DEFAULT_POLICY

    assert pt.read_consumer(_consumer()).policy == DEFAULT_POLICY
    consumer = _consumer()
    consumer["spec"]["policy"] = {"pods": {"priorityClasses": ["batch"]}, "services": {"types": ["NodePort"]}}
    terms = pt.read_consumer(consumer)
    assert terms.policy.pods.priority_classes == ("batch",)
    assert terms.policy.services.types == ("NodePort",)
    assert terms.problems == ()


@pytest.mark.parametrize(
    "policy, words",
    [
        ({"pods": {"priorityClasses": ["system-node-critical"]}}, "spec.policy.pods.priorityClasses"),
        ({"services": {"externalIPCIDRs": ["not-a-cidr"]}}, "spec.policy.services.externalIPCIDRs"),
        ({"pods": {"tolerations": "gpu"}}, "spec.policy.pods.tolerations"),
        ({"newSection": {}}, "unknown key(s) newSection"),
    ],
)
def test_an_unreadable_policy_falls_back_to_the_strictest_and_says_why(policy, words):
    from kube_offload.provider_policy import DEFAULT_POLICY

    consumer = _consumer()
    consumer["spec"]["policy"] = policy
    terms = pt.read_consumer(consumer)
    assert terms.admitted and terms.policy == DEFAULT_POLICY
    assert len(terms.problems) == 1 and words in terms.problems[0] and "the strictest" in terms.problems[0]


def test_the_policy_reader_follows_the_cached_consumer():
    from kube_offload.provider_policy import DEFAULT_POLICY

    current: dict = {"consumer": None}
    read = pt.PolicyReader(lambda: current["consumer"])
    assert read() == DEFAULT_POLICY  # no Consumer (yet): the strictest
    consumer = _consumer()
    consumer["metadata"]["resourceVersion"] = "1"
    consumer["spec"]["policy"] = {"pods": {"priorityClasses": ["batch"]}}
    current["consumer"] = consumer
    assert read().pods.priority_classes == ("batch",)
    newer = _consumer()
    newer["metadata"]["resourceVersion"] = "2"
    newer["spec"]["policy"] = {"pods": {"priorityClasses": ["batch", "high"]}}
    current["consumer"] = newer
    assert read().pods.priority_classes == ("batch", "high")
