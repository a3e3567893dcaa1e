"""Which ShadowPods (and pods) count for a consumer's usage, and how much (enforcer/consumers/quota.py):
charges with limits, the spec.quota keys and quotaMode, and the pods the enforcer made that
count until they are gone."""

from __future__ import annotations

import random

import pytest

from enforcer.consumers.quota import (
    LIVE_REQUESTS_BY_NAMESPACE, TWIN_NAMESPACES_BY_CONSUMER, ConsumerUsage, consumer_usage, live_requests, live_shadowpod,
    shadowpod_requests, twin_owner, twin_owner_index, usage_of_namespaces, uncounted_charges,
)
from kube_offload.consumer_quota import consumer_quota, counted_resources, pod_charges, quota_limits
from kube_offload.resources import QuantityError, containers_without_limit, limits_unequal_to_requests, pod_limits
from kube_offload.runtime.indexer import Indexer
from kube_offload.constants import LABEL_MANAGED_BY, LABEL_ORIGIN_CLUSTER_ID, MANAGED_BY_ENFORCER

GI = 1024**3 * 1000  # one Gi in milli-bytes
MI = 1024**2 * 1000


def namespace(name: str, labels: dict | None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}}


def twin(name: str, consumer: str) -> dict:
    return namespace(name, {LABEL_ORIGIN_CLUSTER_ID: consumer, LABEL_MANAGED_BY: MANAGED_BY_ENFORCER})


NAMESPACES = {
    "a-1": twin("a-1", "a"),
    "a-2": twin("a-2", "a"),
    "b-1": twin("b-1", "b"),
    # Carries a's origin label but the enforcer did not make it: a consumer cannot make a
    # namespace count (or not count) for itself by labelling.
    "fake-a": namespace("fake-a", {LABEL_ORIGIN_CLUSTER_ID: "a"}),
    "plain": namespace("plain", {}),
}


def shadowpod(
    ns: str,
    name: str,
    *,
    cpu: str | None = "500m",
    memory: str | None = "1Gi",
    phase: str | None = None,
    deleting: bool = False,
    origin: str | None = None,
    extra: dict | None = None,
) -> dict:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    requests.update(extra or {})
    metadata: dict = {"namespace": ns, "name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict = {
        "metadata": metadata,
        "spec": {
            "pod": {
                "metadata": {"labels": {LABEL_ORIGIN_CLUSTER_ID: origin} if origin else {}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
            }
        },
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


@pytest.mark.parametrize(
    "ns, expected",
    [
        (NAMESPACES["a-1"], "a"),
        (NAMESPACES["b-1"], "b"),
        (NAMESPACES["fake-a"], None),
        (NAMESPACES["plain"], None),
        (namespace("x", {LABEL_MANAGED_BY: MANAGED_BY_ENFORCER}), None),
        (namespace("x", {LABEL_MANAGED_BY: MANAGED_BY_ENFORCER, LABEL_ORIGIN_CLUSTER_ID: ""}), None),
        (None, None),
        ({}, None),
    ],
)
def test_twin_owner(ns, expected):
    assert twin_owner(ns) == expected


@pytest.mark.parametrize(
    "obj, live",
    [
        (shadowpod("a-1", "p"), True),
        (shadowpod("a-1", "p", phase="Pending"), True),
        (shadowpod("a-1", "p", phase="Running"), True),
        (shadowpod("a-1", "p", phase="Unknown"), True),
        (shadowpod("a-1", "p", phase="Succeeded"), False),
        (shadowpod("a-1", "p", phase="Failed"), False),
        (shadowpod("a-1", "p", deleting=True), False),
        (shadowpod("a-1", "p", phase="Running", deleting=True), False),
    ],
)
def test_live_shadowpod(obj, live):
    assert live_shadowpod(obj) is live


def test_shadowpod_requests_counts_the_pod_slot():
    assert shadowpod_requests(shadowpod("a-1", "p")) == {"cpu": 500, "memory": GI, "pods": 1000}


def test_malformed_shadowpod_counts_as_one_pod_only():
    assert shadowpod_requests(shadowpod("a-1", "p", cpu="lots")) == {"pods": 1000}
    assert shadowpod_requests({"metadata": {}, "spec": {"pod": {"spec": {"containers": "x"}}}}) == {"pods": 1000}


def test_shadowpod_without_pod_is_one_empty_pod():
    assert shadowpod_requests({"metadata": {}}) == {"pods": 1000}


def usage(objs, consumer):
    return consumer_usage(objs, consumer, namespace_of=NAMESPACES.get)


def test_usage_sums_live_shadowpods_in_the_consumers_twins_only():
    objs = [
        shadowpod("a-1", "p1"),
        shadowpod("a-2", "p2", cpu="1", memory="512Mi", extra={"nvidia.com/gpu": "1"}),
        shadowpod("a-1", "done", phase="Succeeded"),
        shadowpod("a-1", "failed", phase="Failed"),
        shadowpod("a-1", "going", deleting=True),
        shadowpod("b-1", "other"),
        # b's ShadowPod claiming to be a's by label is still b's.
        shadowpod("b-1", "liar", origin="a"),
        shadowpod("fake-a", "p"),
        shadowpod("plain", "p"),
        shadowpod("unknown-ns", "p"),
    ]
    assert usage(objs, "a") == {"cpu": 1500, "memory": GI + GI // 2, "nvidia.com/gpu": 1000, "pods": 2000}
    assert usage(objs, "b") == {"cpu": 1000, "memory": 2 * GI, "pods": 2000}


@pytest.mark.parametrize("consumer", ["a", "nobody", ""])
def test_no_shadowpods_means_zero_pods(consumer):
    assert usage([], consumer) == {"pods": 0}


def test_pods_without_requests_count_only_pods():
    assert usage([shadowpod("a-1", "p", cpu=None, memory=None)], "a") == {"pods": 1000}


def test_namespace_is_looked_up_once_per_namespace():
    calls: list[str] = []

    def lookup(name):
        calls.append(name)
        return NAMESPACES.get(name)

    consumer_usage([shadowpod("a-1", f"p{i}") for i in range(5)], "a", namespace_of=lookup)
    assert calls == ["a-1"]


def stored(obj: dict, uid: str, version: str) -> dict:
    obj["metadata"].update(uid=uid, resourceVersion=version)
    return obj


def test_requests_of_a_stored_version_are_parsed_once(monkeypatch):
    from enforcer.consumers import quota

    calls: list[str] = []
    real = quota._compute_requests
    monkeypatch.setattr(quota, "_compute_requests", lambda obj: calls.append(obj["metadata"]["name"]) or real(obj))
    objs = [stored(shadowpod("a-1", f"p{i}"), f"uid-cache-{i}", "7") for i in range(3)]
    first = usage(objs, "a")
    assert usage(objs, "a") == first == {"cpu": 1500, "memory": 3 * GI, "pods": 3000}
    assert sorted(calls) == ["p0", "p1", "p2"]  # the second sum parsed nothing


def test_a_new_resource_version_is_parsed_again():
    first = stored(shadowpod("a-1", "p", cpu="500m"), "uid-cache-new-version", "1")
    assert shadowpod_requests(first)["cpu"] == 500
    second = stored(shadowpod("a-1", "p", cpu="2"), "uid-cache-new-version", "2")
    assert shadowpod_requests(second)["cpu"] == 2000


def test_changing_a_returned_dict_does_not_change_the_cache():
    obj = stored(shadowpod("a-1", "p"), "uid-cache-copy", "1")
    shadowpod_requests(obj)["cpu"] = 0
    assert shadowpod_requests(obj)["cpu"] == 500


def test_objects_without_uid_or_version_are_not_cached(monkeypatch):
    from enforcer.consumers import quota

    monkeypatch.setattr(quota, "_REQUESTS_CACHE", {})
    shadowpod_requests(shadowpod("a-1", "p"))
    shadowpod_requests(stored(shadowpod("a-1", "q"), "uid-no-version", ""))
    assert quota._REQUESTS_CACHE == {}


def test_the_cache_is_bounded(monkeypatch):
    from enforcer.consumers import quota

    monkeypatch.setattr(quota, "_REQUESTS_CACHE", {})
    monkeypatch.setattr(quota, "_REQUESTS_CACHE_MAX", 2)
    for i in range(5):
        assert shadowpod_requests(stored(shadowpod("a-1", f"p{i}"), f"uid-bound-{i}", "1"))["pods"] == 1000
        assert len(quota._REQUESTS_CACHE) <= 2


# --- the running sums the webhook reads (LIVE_REQUESTS_BY_NAMESPACE over the real store) ---------
def tallied_usage(store: Indexer, namespaces: Indexer, consumer: str) -> dict:
    twins = namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, consumer)
    return usage_of_namespaces(lambda ns: store.tally(LIVE_REQUESTS_BY_NAMESPACE, ns), twins)


class Walked:
    """A cache without indexes or tallies (what ConsumerUsage walks)."""

    def __init__(self, store: Indexer) -> None:
        self.list, self.get = store.list, store.get


def namespace_store() -> Indexer:
    store = Indexer({TWIN_NAMESPACES_BY_CONSUMER: twin_owner_index})
    for ns in NAMESPACES.values():
        store.put(ns)
    return store


def test_tallied_usage_equals_the_walk_through_every_change():
    # Random creates, updates (requests, phase, deletion, namespace moves are not possible
    # in Kubernetes, but a recreate under the same name with other requests is), deletes
    # and full relists: after each, the running sums equal the walk over the cache.
    import random

    rng = random.Random(7)
    store = Indexer()
    store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)
    namespaces = namespace_store()
    usage, walking = ConsumerUsage(store, namespaces), ConsumerUsage(Walked(store), Walked(namespaces))
    names = [f"p{i}" for i in range(12)]
    for step in range(600):
        ns = rng.choice(list(NAMESPACES) + ["unknown-ns"])
        name = rng.choice(names)
        action = rng.random()
        if action < 0.55:
            obj = shadowpod(ns, name, cpu=rng.choice(["100m", "1", None]), memory=rng.choice(["1Gi", "512Mi", None]),
                            phase=rng.choice([None, None, "Running", "Succeeded", "Failed"]), deleting=rng.random() < 0.1,
                            extra=rng.choice([{}, {"nvidia.com/gpu": "1"}]))
            obj["metadata"]["resourceVersion"] = str(step)
            obj["metadata"]["uid"] = f"{ns}/{name}"
            store.put(obj)
        elif action < 0.9:
            store.pop(f"{ns}/{name}")
        else:
            store.replace({k: o for k, o in zip(store.keys(), store.list(), strict=True) if rng.random() < 0.8})
        for consumer in ("a", "b", "nobody"):
            walked = consumer_usage(store.list(), consumer, namespace_of=namespaces.get)
            assert tallied_usage(store, namespaces, consumer) == walked, (step, consumer)
            # The reader the webhook and the status loop share, both ways.
            assert usage.tallied and not walking.tallied
            assert usage.used(consumer) == walking.used(consumer) == walked, (step, consumer)
            assert usage.twin_namespaces(consumer) == walking.twin_namespaces(consumer), (step, consumer)


def test_tally_is_empty_for_a_namespace_with_nothing_live():
    store = Indexer()
    store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)
    store.put(shadowpod("a-1", "p1"))
    assert store.tally(LIVE_REQUESTS_BY_NAMESPACE, "a-1") == {"cpu": 500, "memory": GI, "pods": 1000}
    store.put(shadowpod("a-1", "p1", phase="Succeeded"))  # finished: frees its share
    assert store.tally(LIVE_REQUESTS_BY_NAMESPACE, "a-1") == {}
    store.put(shadowpod("a-1", "p1"))
    store.pop("a-1/p1")
    assert store.tally(LIVE_REQUESTS_BY_NAMESPACE, "a-1") == {}
    assert tallied_usage(store, namespace_store(), "a") == {"pods": 0}


def test_a_tally_registered_late_counts_what_is_cached():
    store = Indexer()
    store.put(shadowpod("a-1", "p1"))
    store.put(shadowpod("a-2", "p2", cpu="1"))
    store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)
    assert tallied_usage(store, namespace_store(), "a") == {"cpu": 1500, "memory": 2 * GI, "pods": 2000}
    with pytest.raises(ValueError, match="already registered"):
        store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, lambda obj: (None, {}))


# === quota counts what runs ===================================================================


def container(name="c", requests=None, limits=None, **extra) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod_of(*containers, init=(), overhead=None, resources=None) -> dict:
    spec: dict = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    if resources:
        spec["resources"] = resources
    return {"spec": spec}


# --- charges ------------------------------------------------------------------------------------
def test_charges_hold_requests_under_plain_names_and_limits_under_limits_dot():
    pod = pod_of(container(requests={"cpu": "250m", "ephemeral-storage": "1Gi"}, limits={"cpu": "1", "memory": "256Mi"}))
    assert pod_charges(pod) == {
        "cpu": 250,
        "ephemeral-storage": GI,
        "memory": 256 * MI,  # a limit without a request requests it (apiserver defaulting)
        "pods": 1000,
        "limits.cpu": 1000,
        "limits.memory": 256 * MI,
    }


def test_overhead_counts_in_requests_and_limits():
    pod = pod_of(container(requests={"cpu": "100m"}, limits={"cpu": "200m"}), overhead={"cpu": "50m", "memory": "10Mi"})
    charges = pod_charges(pod)
    assert charges["cpu"] == 150 and charges["limits.cpu"] == 250
    assert charges["memory"] == 10 * MI and charges["limits.memory"] == 10 * MI


def test_limits_take_the_init_peak_sidecars_and_pod_level_as_kubernetes_does():
    pod = pod_of(
        container("app", limits={"cpu": "1", "memory": "1Gi"}),
        init=[
            container("setup", limits={"cpu": "3"}),
            container("proxy", limits={"cpu": "500m"}, restartPolicy="Always"),
        ],
    )
    assert pod_limits(pod) == {"cpu": 3000, "memory": GI}  # max(1 + 0.5 sidecar, 3 alone before it)
    leveled = pod_of(container("app", limits={"cpu": "1"}), resources={"limits": {"cpu": "2"}})
    assert pod_limits(leveled) == {"cpu": 2000}


def test_containers_without_limit_name_the_field_unless_the_pod_level_bounds_it():
    pod = pod_of(container("a", limits={"cpu": "1"}), container("b"), init=[container("i")])
    assert containers_without_limit(pod, "cpu") == ["spec.initContainers[0]", "spec.containers[1]"]
    assert containers_without_limit(pod_of(container("b"), resources={"limits": {"cpu": "1"}}), "cpu") == []
    assert containers_without_limit(pod_of(container("b"), resources={"limits": {"cpu": "1"}}), "ephemeral-storage") == [
        "spec.containers[0]"
    ]


# --- spec.quota keys and quotaMode -------------------------------------------------------------
@pytest.mark.parametrize(
    "quota, mode, expected",
    [
        ({"cpu": "2", "pods": "3"}, "requests", {"cpu": 2000, "pods": 3000}),
        ({"cpu": "2"}, "limits", {"limits.cpu": 2000}),
        ({"cpu": "2", "memory": "1Gi"}, "both", {"cpu": 2000, "limits.cpu": 2000, "memory": GI, "limits.memory": GI}),
        ({"requests.cpu": "1", "limits.cpu": "4"}, "limits", {"cpu": 1000, "limits.cpu": 4000}),
        ({"cpu": "2", "requests.cpu": "1"}, "requests", {"cpu": 1000}),  # two keys, one figure: the lower holds
        ({"count/pods": "5", "pods": "7"}, "requests", {"pods": 5000}),
        ({"ephemeral-storage": "10Gi", "limits.ephemeral-storage": "20Gi"}, "requests",
         {"ephemeral-storage": 10 * GI, "limits.ephemeral-storage": 20 * GI}),
        # Object counts and storage: kept apart under their own names, never a pod's.
        ({"count/services": "2", "services.nodeports": "0", "requests.storage": "5Gi",
          "gold.storageclass.storage.k8s.io/requests.storage": "1Gi"}, "both",
         {"count/services": 2000, "services.nodeports": 0, "requests.storage": 5 * GI,
          "gold.storageclass.storage.k8s.io/requests.storage": GI}),
        (None, "requests", {}),
    ],
)
def test_quota_keys(quota, mode, expected):
    if mode == "both":  # hard counts exactly as both does (it only adds an admission rule)
        assert quota_limits(quota, "hard") == expected
    assert quota_limits(quota, mode) == expected


def test_consumer_quota_reads_the_mode_from_the_policy_and_names_bad_keys():
    assert consumer_quota({"quota": {"cpu": "1"}, "policy": {"quotaMode": "limits"}}) == {"limits.cpu": 1000}
    assert consumer_quota({"quota": {"cpu": "1"}}) == {"cpu": 1000}
    assert consumer_quota({"quota": {"cpu": "1"}, "policy": {"quotaMode": "hard"}}) == {"cpu": 1000, "limits.cpu": 1000}
    with pytest.raises(QuantityError, match=r"spec.policy.quotaMode"):
        consumer_quota({"quota": {"cpu": "1"}, "policy": {"quotaMode": "sometimes"}})
    with pytest.raises(QuantityError, match=r"^spec.quota: cpu: "):
        consumer_quota({"quota": {"cpu": "lots"}})


@pytest.mark.parametrize(
    "quota, expected",
    [
        ({"cpu": 1000, "limits.cpu": 1000, "memory": GI}, ["cpu", "memory"]),
        ({"limits.nvidia.com/gpu": 1000, "pods": 3000}, ["nvidia.com/gpu"]),
        ({"pods": 3000, "count/services": 2000, "requests.storage": GI}, []),
        ({}, []),
    ],
)
def test_counted_resources_are_the_compute_ones_in_any_spelling(quota, expected):
    assert counted_resources(quota) == expected


def test_limits_unequal_to_requests_name_each_container_and_what_it_sets():
    pod = pod_of(
        container("same", requests={"cpu": "500m"}, limits={"cpu": "0.5"}),
        container("only-limit", limits={"cpu": "1"}),  # the API server copies it to the request
        container("burst", requests={"cpu": "1"}, limits={"cpu": "2"}),
        container("unbounded", requests={"cpu": "1"}),
        init=[container("bare")],
        resources={"requests": {"memory": "1Gi"}},  # pod-level, names no cpu: not judged for cpu
    )
    assert limits_unequal_to_requests(pod, "cpu") == [
        ("spec.initContainers[0]", "bare", None, None),
        ("spec.containers[2]", "burst", 1000, 2000),
        ("spec.containers[3]", "unbounded", 1000, None),
    ]
    assert limits_unequal_to_requests(pod, "memory")[-1] == ("spec", "", GI, None)
    with pytest.raises(QuantityError):
        limits_unequal_to_requests(pod_of(container("x", limits={"cpu": "lots"})), "cpu")


# --- pods that count until they are gone -------------------------------------------------------
def made_pod(ns: str, name: str, *, owner_uid: str | None, cpu="500m", memory="1Gi", phase="Running", deleting=False) -> dict:
    meta: dict = {"namespace": ns, "name": name, "uid": f"pod-{ns}-{name}", "labels": {LABEL_MANAGED_BY: MANAGED_BY_ENFORCER}}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": name, "uid": owner_uid, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}, "status": {"phase": phase}}


def with_uid(obj: dict, uid: str) -> dict:
    obj["metadata"]["uid"] = uid
    return obj


def test_a_pod_whose_shadowpod_counts_adds_only_what_it_holds_beyond_it():
    sp = with_uid(shadowpod("a-1", "p", cpu="500m"), "sp-1")
    assert uncounted_charges(made_pod("a-1", "p", owner_uid="sp-1"), sp) == {}
    # A LimitRange default or a RuntimeClass overhead gave the pod more than its template says.
    assert uncounted_charges(made_pod("a-1", "p", owner_uid="sp-1", cpu="700m"), sp) == {"cpu": 200}


@pytest.mark.parametrize(
    "shadowpod_state",
    ["deleting", "gone", "orphaned", "replaced"],
)
def test_a_pod_counts_whole_while_no_live_shadowpod_counts_for_it(shadowpod_state):
    sp = with_uid(shadowpod("a-1", "p", deleting=shadowpod_state == "deleting"), "sp-1")
    owner = {"orphaned": None, "replaced": "sp-0"}.get(shadowpod_state, "sp-1")
    pod = made_pod("a-1", "p", owner_uid=owner)
    assert uncounted_charges(pod, None if shadowpod_state == "gone" else sp) == {"cpu": 500, "memory": GI, "pods": 1000}


def test_a_pod_being_deleted_counts_until_it_is_gone_and_a_finished_one_not_at_all():
    sp = with_uid(shadowpod("a-1", "p", deleting=True), "sp-1")
    assert uncounted_charges(made_pod("a-1", "p", owner_uid="sp-1", deleting=True), sp)["pods"] == 1000
    assert uncounted_charges(made_pod("a-1", "p", owner_uid="sp-1", phase="Succeeded"), sp) == {}
    assert uncounted_charges(made_pod("a-1", "p", owner_uid=None, phase="Failed"), None) == {}


def test_consumer_usage_counts_a_deleted_shadowpods_pod_until_it_is_gone():
    sp = with_uid(shadowpod("a-1", "p"), "sp-1")
    pod = made_pod("a-1", "p", owner_uid="sp-1")
    before = consumer_usage([sp], "a", namespace_of=NAMESPACES.get, pods=[pod])
    assert before == {"cpu": 500, "memory": GI, "pods": 1000}
    deleting = with_uid(shadowpod("a-1", "p", deleting=True), "sp-1")
    assert consumer_usage([deleting], "a", namespace_of=NAMESPACES.get, pods=[pod]) == before
    assert consumer_usage([], "a", namespace_of=NAMESPACES.get, pods=[pod]) == before  # ShadowPod gone, pod runs
    assert consumer_usage([], "a", namespace_of=NAMESPACES.get, pods=[]) == {"pods": 0}  # pod gone
    assert consumer_usage([], "b", namespace_of=NAMESPACES.get, pods=[pod]) == {"pods": 0}  # another consumer's


class Handled:
    """An Indexer that tells handlers of each change after storing it, as an Informer does
    (the thing under test is the join in enforcer/consumers/quota.py, not this)."""

    def __init__(self, store: Indexer) -> None:
        self.store = store
        self.handlers: list = []
        self.list, self.get, self.keys = store.list, store.get, store.keys
        self.add_tally, self.tally = store.add_tally, store.tally

    def add_handler(self, handler) -> None:
        self.handlers.append(handler)

    def put(self, obj: dict) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        old = self.store.get(key)
        self.store.put(obj)
        for handler in self.handlers:
            handler("MODIFIED" if old else "ADDED", old, obj)

    def pop(self, key: str) -> None:
        old = self.store.pop(key)
        if old is not None:
            for handler in self.handlers:
                handler("DELETED", old, old)


def test_the_running_join_equals_the_walk_through_every_change():
    rng = random.Random(11)
    shadowpods = Handled(Indexer())
    shadowpods.store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)
    pods = Handled(Indexer())
    namespaces = namespace_store()
    usage = ConsumerUsage(shadowpods, namespaces, pods)
    walking = ConsumerUsage(Walked(shadowpods.store), Walked(namespaces), Walked(pods.store))
    names = [f"p{i}" for i in range(8)]
    for step in range(800):
        ns = rng.choice(list(NAMESPACES))
        name = rng.choice(names)
        key = f"{ns}/{name}"
        action = rng.random()
        if action < 0.35:
            sp = shadowpod(ns, name, cpu=rng.choice(["100m", "1"]), deleting=rng.random() < 0.2,
                           phase=rng.choice([None, "Running", "Succeeded"]))
            sp["metadata"].update(uid=f"sp-{rng.randint(1, 2)}", resourceVersion=str(step))
            shadowpods.put(sp)
        elif action < 0.5:
            shadowpods.pop(key)
        elif action < 0.85:
            pod = made_pod(ns, name, owner_uid=rng.choice([None, "sp-1", "sp-2"]), cpu=rng.choice(["100m", "1", "2"]),
                           phase=rng.choice(["Pending", "Running", "Succeeded"]), deleting=rng.random() < 0.3)
            pod["metadata"]["resourceVersion"] = str(step)
            pods.put(pod)
        else:
            pods.pop(key)
        for consumer in ("a", "b"):
            assert usage.used(consumer) == walking.used(consumer), (step, consumer)
