"""The index of pods by ShadowPod the enforcer's pod informer keeps (enforcer.shadowpods.reconcile
POD_INDEXERS, fed here the way a watch feeds it), and the Event recorder."""

from __future__ import annotations

from enforcer.shadowpods.events import EventRecorder
from kube_offload.runtime.event_correlator import AGGREGATE_SECONDS
from enforcer.shadowpods.reconcile import BY_SHADOWPOD, POD_INDEXERS
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED, Informer
from kube_offload.runtime.kube import ApiError
from support.informers import never_listed


def pod(name: str, owner: str | None, namespace: str = "ns") -> dict:
    meta: dict = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": owner, "uid": "u", "controller": True}
        ]
    return {"metadata": meta}


def test_index_follows_adds_moves_and_deletes():
    pods = Informer(name="managed-pods", list_func=never_listed, indexers=POD_INDEXERS)

    def of(shadowpod: str) -> list[str]:
        return pods.index_keys(BY_SHADOWPOD, shadowpod)

    pods.apply(ADDED, pod("a", "web"))  # the path a watch event takes
    pods.apply(ADDED, pod("b", "web"))
    pods.apply(ADDED, pod("c", None))  # no controlling ShadowPod: not indexed
    assert of("ns/web") == ["ns/a", "ns/b"]
    assert [p["metadata"]["name"] for p in pods.by_index(BY_SHADOWPOD, "ns/web")] == ["a", "b"]
    pods.apply(MODIFIED, pod("b", "db"))
    assert of("ns/web") == ["ns/a"] and of("ns/db") == ["ns/b"]
    pods.apply(DELETED, pod("a", "web"))
    assert of("ns/web") == []
    pods.apply(DELETED, pod("a", "web"))  # a repeated delete is harmless
    assert of("other/web") == [] and pods.index_values(BY_SHADOWPOD) == ["ns/db"]


class RecordingApi:
    def __init__(self, fail: bool = False) -> None:
        self.created: list[dict] = []
        self.patched: list[tuple[str, dict]] = []
        self.fail = fail

    def create_event(self, namespace, event):
        if self.fail:
            raise ApiError(403, "Forbidden", "events is forbidden")
        self.created.append(event)
        return event

    def patch_event(self, namespace, name, patch):
        self.patched.append((name, patch))
        return {}


SHP = {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod",
       "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "5"}}


def test_recorder_builds_core_v1_events_and_folds_repeats():
    # Recording is asynchronous (kube_offload/runtime/events.py): flush() waits for the writer.
    now = [1_700_000_000.0]
    api = RecordingApi()
    recorder = EventRecorder(api, instance="enforcer-0", clock=lambda: now[0])
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    assert recorder.flush(5)
    event = api.created[0]
    assert event["involvedObject"] == {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": "web",
                                       "namespace": "ns", "uid": "u1", "resourceVersion": "5"}
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "PodCreationFailed", 1)
    assert event["metadata"]["name"].startswith("web.") and event["metadata"]["namespace"] == "ns"
    assert event["firstTimestamp"] == "2023-11-14T22:13:20Z"
    now[0] += 10
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    assert recorder.flush(5)
    assert len(api.created) == 1
    assert api.patched == [(event["metadata"]["name"], {"count": 2, "lastTimestamp": "2023-11-14T22:13:30Z"})]
    recorder.record(SHP, "Warning", "PodCreationFailed", "another message")
    assert recorder.flush(5)
    assert len(api.created) == 2
    now[0] += AGGREGATE_SECONDS + 1
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    assert recorder.flush(5)
    assert len(api.created) == 3


def test_recorder_never_raises():
    recorder = EventRecorder(RecordingApi(fail=True))
    recorder.record(SHP, "Normal", "PodCreated", "x")
    assert recorder.flush(5) and recorder.queued() == 0
