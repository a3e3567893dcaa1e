"""The owner index the enforcer keeps over its pod informer, and the Event recorder."""

from __future__ import annotations

from enforcer.events import AGGREGATE_SECONDS, EventRecorder
from enforcer.podindex import PodIndex
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from kube_offload.runtime.kube import ApiError


def pod(name: str, owner: str | None, namespace: str = "ns") -> dict:
    meta: dict = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": owner, "uid": "u", "controller": True}
        ]
    return {"metadata": meta}


def test_index_follows_adds_moves_and_deletes():
    index = PodIndex()
    index.on_event(ADDED, None, pod("a", "web"))
    index.on_event(ADDED, None, pod("b", "web"))
    index.on_event(ADDED, None, pod("c", None))
    assert index.pods_of("ns/web") == ["ns/a", "ns/b"]
    index.on_event(MODIFIED, pod("b", "web"), pod("b", "db"))
    assert index.pods_of("ns/web") == ["ns/a"] and index.pods_of("ns/db") == ["ns/b"]
    index.on_event(DELETED, pod("a", "web"), pod("a", "web"))
    assert index.pods_of("ns/web") == []
    index.on_event(DELETED, None, pod("a", "web"))  # a repeated delete is harmless
    assert index.pods_of("other/web") == []


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
    now = [1_700_000_000.0]
    api = RecordingApi()
    recorder = EventRecorder(api, instance="enforcer-0", clock=lambda: now[0])
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    event = api.created[0]
    assert event["involvedObject"] == {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": "web",
                                       "namespace": "ns", "uid": "u1", "resourceVersion": "5"}
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "PodCreationFailed", 1)
    assert event["metadata"]["name"].startswith("web.") and event["metadata"]["namespace"] == "ns"
    assert event["firstTimestamp"] == "2023-11-14T22:13:20Z"
    now[0] += 10
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    assert len(api.created) == 1
    assert api.patched == [(event["metadata"]["name"], {"count": 2, "lastTimestamp": "2023-11-14T22:13:30Z"})]
    recorder.record(SHP, "Warning", "PodCreationFailed", "another message")
    assert len(api.created) == 2
    now[0] += AGGREGATE_SECONDS + 1
    recorder.record(SHP, "Warning", "PodCreationFailed", "exceeded quota")
    assert len(api.created) == 3


def test_recorder_never_raises():
    EventRecorder(RecordingApi(fail=True)).record(SHP, "Normal", "PodCreated", "x")
