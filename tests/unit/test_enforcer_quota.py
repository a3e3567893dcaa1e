"""Which ShadowPods count for a consumer's usage, and how much (enforcer/quota.py)."""

from __future__ import annotations

import pytest

from enforcer.quota import (
    LIVE_REQUESTS_BY_NAMESPACE, TWIN_NAMESPACES_BY_CONSUMER, ConsumerUsage, consumer_usage, live_requests, live_shadowpod,
    shadowpod_requests, twin_owner, twin_owner_index, usage_of_namespaces,
)
from kube_offload.runtime.indexer import Indexer
from kube_offload.constants import LABEL_MANAGED_BY, LABEL_ORIGIN_CLUSTER_ID, MANAGED_BY_ENFORCER

GI = 1024**3 * 1000  # one Gi in milli-bytes


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
    from enforcer import quota

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
    from enforcer import quota

    monkeypatch.setattr(quota, "_REQUESTS_CACHE", {})
    shadowpod_requests(shadowpod("a-1", "p"))
    shadowpod_requests(stored(shadowpod("a-1", "q"), "uid-no-version", ""))
    assert quota._REQUESTS_CACHE == {}


def test_the_cache_is_bounded(monkeypatch):
    from enforcer import quota

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
            store.replace({k: o for k, o in zip(store.keys(), store.list()) if rng.random() < 0.8})
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
