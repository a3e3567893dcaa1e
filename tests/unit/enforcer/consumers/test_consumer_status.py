"""Consumer status: what it says (enforcer/consumers/consumer_status.py) and when the loop writes it
(enforcer/consumers/consumer_status_loop.py, one pass over in-memory caches; the API server is a recorder
here, tests/e2e/test_twin_namespaces.py runs the loop against a real one)."""

from __future__ import annotations

from datetime import datetime, timezone

from enforcer.consumers.consumer_status import desired_status, stamped, status_changed
from enforcer.consumers.quota import twin_namespaces_of
from kube_offload.runtime.indexer import Indexer
from enforcer.consumers.consumer_status_loop import ConsumerStatusLoop
from kube_offload import constants as c
from kube_offload.runtime.kube import ApiError
from kube_offload.remote_resources import RemoteResources, decode_capacity_status

GI = 1024**3 * 1000


def ns(name, consumer=None, managed=True):
    labels = {}
    if consumer:
        labels[c.LABEL_ORIGIN_CLUSTER_ID] = consumer
    if managed:
        labels[c.LABEL_MANAGED_BY] = c.MANAGED_BY_ENFORCER
    return {"metadata": {"name": name, "labels": labels}}


def consumer(name, status=None, generation=1):
    obj = {"metadata": {"name": name, "generation": generation}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


def shadowpod(namespace, name, cpu="500m", phase=None):
    obj = {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"pod": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}},
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def node(name, cpu="4"):
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name, node_name, cpu, origin=None):
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: origin} if origin else {}
    return {"metadata": {"name": name, "namespace": "x", "labels": labels},
            "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": {"cpu": cpu}}}]}}


def test_twin_namespaces_of():
    namespaces = [ns("b-local", "local"), ns("a-local", "local"), ns("x-other", "other"),
                  ns("fake", "local", managed=False), ns("plain")]
    assert twin_namespaces_of(namespaces, "local") == ["a-local", "b-local"]
    assert twin_namespaces_of(namespaces, "nobody") == []


def test_desired_status_shape():
    status = desired_status(
        consumer("local", generation=4),
        used={"cpu": 1500, "memory": GI, "pods": 3000},
        twin_namespaces=["demo-local"],
        capacity=RemoteResources(shareable={"cpu": 3000}, free_by_node={"n1": {"cpu": 3000}}, schedulable_nodes=1, total_nodes=1),
    )
    assert status == {
        "used": {"cpu": "1500m", "memory": "1Gi", "pods": "3"},
        "shadowPods": 3,
        "twinNamespaces": ["demo-local"],
        "capacity": {"shareable": {"cpu": "3"}, "freeShapes": [{"cpu": "3"}], "pressure": {},
                     "schedulableNodes": 1, "totalNodes": 1},
        "observedGeneration": 4,
    }


def test_status_changed_ignores_the_timestamp():
    desired = {"used": {"pods": "0"}, "shadowPods": 0}
    assert status_changed(consumer("a"), desired)
    written = stamped(desired, datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc))
    assert written["updated"] == "2026-05-01T12:00:00Z"
    assert not status_changed(consumer("a", status=written), desired)
    assert status_changed(consumer("a", status=written), {**desired, "shadowPods": 1})


class Cache:
    def __init__(self, objs, key=lambda o: o["metadata"]["name"]):
        self.store = {key(o): o for o in objs}

    def get(self, key):
        return self.store.get(key)

    def list(self):
        return list(self.store.values())

    def has_synced(self):
        return True


class RecordingApi:
    def __init__(self):
        self.writes = []
        self.fail: ApiError | None = None

    def replace_consumer_status(self, name, status):
        if self.fail:
            raise self.fail
        self.writes.append((name, status))
        return {}


def make_loop(consumers, shadowpods, api):
    return ConsumerStatusLoop(
        consumers=Cache(consumers),
        shadowpods=Cache(shadowpods, key=lambda o: f"{o['metadata']['namespace']}/{o['metadata']['name']}"),
        namespaces=Cache([ns("demo-local", "local"), ns("demo-other", "other")]),
        nodes=Cache([node("n1"), node("n2", cpu="2")]),
        pods=Cache([pod("mine", "n1", "500m", origin="local"), pod("theirs", "n2", "1")]),
        api=api,
    )


def test_one_pass_writes_each_consumer_usage_and_capacity():
    api = RecordingApi()
    loop = make_loop(
        [consumer("local"), consumer("other")],
        [shadowpod("demo-local", "a"), shadowpod("demo-local", "b", cpu="1"), shadowpod("demo-local", "done", phase="Succeeded"),
         shadowpod("demo-other", "c")],
        api,
    )
    loop.sync_all()
    written = dict(api.writes)
    assert written["local"]["used"] == {"cpu": "1500m", "pods": "2"}
    assert written["local"]["shadowPods"] == 2
    assert written["local"]["twinNamespaces"] == ["demo-local"]
    assert written["other"]["used"] == {"cpu": "500m", "pods": "1"}
    # The consumer's own pods are not subtracted from what is shareable with it.
    shareable_local = decode_capacity_status(written["local"]["capacity"]).shareable
    shareable_other = decode_capacity_status(written["other"]["capacity"]).shareable
    assert shareable_local["cpu"] == 5000 and shareable_other["cpu"] == 4500
    assert "updated" in written["local"]


class IndexedCache(Indexer):
    """An informer's store: indexes and tallies, and no walk allowed (list() fails)."""

    def list(self):
        raise AssertionError("the status pass walked every cached object")


def test_a_pass_over_informer_caches_reads_the_running_sums_not_every_shadowpod():
    shadowpods = IndexedCache()
    for obj in (shadowpod("demo-local", "a"), shadowpod("demo-local", "b", cpu="1"),
                shadowpod("demo-local", "done", phase="Succeeded"), shadowpod("demo-other", "c")):
        shadowpods.put(obj)
    namespaces = IndexedCache()
    for obj in (ns("demo-local", "local"), ns("demo-other", "other"), ns("fake", "local", managed=False)):
        namespaces.put(obj)
    api = RecordingApi()
    loop = ConsumerStatusLoop(
        consumers=Cache([consumer("local"), consumer("other")]),
        shadowpods=shadowpods,
        namespaces=namespaces,
        nodes=Cache([node("n1")]),
        pods=Cache([]),
        api=api,
    )
    loop.sync_all()
    written = dict(api.writes)
    assert (written["local"]["used"], written["local"]["twinNamespaces"]) == ({"cpu": "1500m", "pods": "2"}, ["demo-local"])
    assert (written["other"]["used"], written["other"]["twinNamespaces"]) == ({"cpu": "500m", "pods": "1"}, ["demo-other"])
    shadowpods.pop("demo-local/b")  # the sums follow the store
    loop.sync_all()
    assert dict(api.writes[2:])["local"]["used"] == {"cpu": "500m", "pods": "1"}


def test_unchanged_status_is_not_written_again():
    api = RecordingApi()
    loop = make_loop([consumer("local")], [shadowpod("demo-local", "a")], api)
    loop.sync_all()
    name, status = api.writes[0]
    loop._consumers.store["local"]["status"] = status
    loop.sync_all()
    assert len(api.writes) == 1
    loop._shadowpods.store["demo-local/b"] = shadowpod("demo-local", "b")
    loop.sync_all()
    assert len(api.writes) == 2 and api.writes[1][1]["shadowPods"] == 2


def test_a_failed_write_marks_the_loop_dirty_and_a_deleted_consumer_is_skipped():
    api = RecordingApi()
    loop = make_loop([consumer("local")], [], api)
    api.fail = ApiError(500, "InternalError", "boom")
    loop._dirty.clear()
    loop.sync_all()
    assert loop._dirty.is_set()
    api.fail = ApiError(404, "NotFound", "gone")
    loop._dirty.clear()
    loop.sync_all()
    assert not loop._dirty.is_set()


# --- drain: the ShadowPods left when the grace ends are deleted --------------------------------------
class DrainApi(RecordingApi):
    def __init__(self):
        super().__init__()
        self.deleted = []

    def delete_shadowpod(self, namespace, name, uid):
        self.deleted.append((namespace, name, uid))


class Events:
    def __init__(self):
        self.seen = []

    def normal(self, obj, reason, message):
        self.seen.append((obj["metadata"]["name"], "Normal", reason, message))

    def warning(self, obj, reason, message):
        self.seen.append((obj["metadata"]["name"], "Warning", reason, message))


def drained_consumer(name, grace):
    obj = consumer(name)
    obj["spec"]["drain"] = {"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": grace}
    return obj


def test_a_drain_deletes_the_consumers_shadowpods_only_once_its_grace_is_over():
    from datetime import timedelta

    start = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)
    now = [start + timedelta(seconds=30)]
    shadowpods = IndexedCache()
    for obj in (shadowpod("demo-local", "a"), shadowpod("demo-local", "b"), shadowpod("demo-other", "c")):
        obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
        shadowpods.put(obj)
    namespaces = IndexedCache()
    for obj in (ns("demo-local", "local"), ns("demo-other", "other")):
        namespaces.put(obj)
    api = DrainApi()
    events = Events()
    consumers = Cache([drained_consumer("local", 60), consumer("other")])
    loop = ConsumerStatusLoop(
        consumers=consumers,
        shadowpods=shadowpods, namespaces=namespaces, nodes=Cache([node("n1")]), pods=Cache([]),
        api=api, clock=lambda: now[0], recorder=events,
    )
    loop.sync_all()
    assert api.deleted == []
    written = dict(api.writes)
    assert written["local"]["drain"] == {"phase": "Draining", "deadline": "2026-11-27T03:01:00Z"}
    assert "drain" not in written["other"]
    assert loop.next_drain_deadline == 30.0  # the loop wakes for the deadline, not at the next resync

    now[0] = start + timedelta(seconds=60)
    loop.sync_all()
    # Only the drained consumer's, by UID; the other consumer's stays.
    assert sorted(api.deleted) == [("demo-local", "a", "uid-a"), ("demo-local", "b", "uid-b")]
    assert sorted(events.seen) == [
        ("local", "Warning", "DrainGraceExpired", "the drain's grace of 60s is over: deleted ShadowPod demo-local/a (and its pod)"),
        ("local", "Warning", "DrainGraceExpired", "the drain's grace of 60s is over: deleted ShadowPod demo-local/b (and its pod)"),
    ]
    assert dict(api.writes[2:])["local"]["drain"]["phase"] == "GraceExpired"

    shadowpods.pop("demo-local/a")  # gone; b is still terminating
    b = shadowpods.get("demo-local/b")
    shadowpods.put({**b, "metadata": {**b["metadata"], "deletionTimestamp": "2026-11-27T03:01:00Z"}})
    loop.sync_all()
    assert len(api.deleted) == 2  # one being deleted is not deleted again
    shadowpods.pop("demo-local/b")
    loop.sync_all()
    assert dict(api.writes)["local"]["drain"]["phase"] == "Drained"
    assert loop.next_drain_deadline is None
    assert events.seen[-1] == ("local", "Normal", "Drained", "consumer local is drained: none of its ShadowPods is left here")


def test_an_unreadable_drain_deletes_nothing():
    api = DrainApi()
    bad = consumer("local")
    bad["spec"]["drain"] = {"startedAt": "never", "gracePeriodSeconds": 0}
    loop = make_loop([bad], [shadowpod("demo-local", "a")], api)
    loop.sync_all()
    assert api.deleted == [] and "drain" not in dict(api.writes)["local"]


def test_a_drained_shadowpods_pod_goes_with_an_explicit_bounded_grace():
    from datetime import timedelta

    start = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)
    shadowpods = IndexedCache()
    mine = shadowpod("demo-local", "a")
    mine["metadata"]["uid"] = "uid-a"
    shadowpods.put(mine)
    namespaces = IndexedCache()
    namespaces.put(ns("demo-local", "local"))

    def pod(name: str, owner_uid: str, grace: int | None) -> dict:
        spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
        return {"metadata": {"name": name, "namespace": "demo-local", "uid": f"pod-{name}",
                             "ownerReferences": [{"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": name,
                                                  "uid": owner_uid, "controller": True}]}, "spec": spec}

    managed = Indexer()
    managed.put(pod("a", "uid-a", 8 * 24 * 3600))  # made by an older enforcer: 8 days of grace

    class PodDrainApi(DrainApi):
        def __init__(self):
            super().__init__()
            self.pods = []

        def delete_pod(self, namespace, name, uid, grace_period_seconds):
            self.pods.append((namespace, name, uid, grace_period_seconds))

    api = PodDrainApi()
    drained = drained_consumer("local", 60)
    drained["spec"]["policy"] = {"pods": {"maxTerminationGracePeriodSeconds": 120}}
    loop = ConsumerStatusLoop(consumers=Cache([drained]), shadowpods=shadowpods, namespaces=namespaces, managed_pods=managed,
                              nodes=Cache([node("n1")]), pods=Cache([]), api=api, clock=lambda: start + timedelta(seconds=61))
    loop.sync_all()
    assert api.deleted == [("demo-local", "a", "uid-a")]
    assert api.pods == [("demo-local", "a", "pod-a", 120)]
