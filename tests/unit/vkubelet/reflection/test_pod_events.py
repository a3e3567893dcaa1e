"""Events of offloaded pods, remote -> local (vkubelet/reflection/events.py's forge and the
ledger of event_copies.py): what a copy says, how the remote Events of one pod aggregate as
client-go's EventCorrelator would, and the budgets that bound what a provider can make the
consumer write, on an explicit clock."""

from __future__ import annotations

import pytest

from kube_offload.runtime import kinds
from kube_offload.runtime.event_correlator import COMBINED_PREFIX
from vkubelet.reflection import event_copies as ec
from vkubelet.reflection import events as ev
from vkubelet.shared import names as n

TWIN = "demo-local"
NODE = "kube-offload-remote-1"
LOCAL_POD = {
    "metadata": {"name": "web-1", "namespace": "demo", "uid": "local-pod-uid"},
    "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "setup"}]},
}
CONTAINERS = ev.container_names(LOCAL_POD)


def remote_event(uid: str = "e1", *, kind: str = "Pod", type_: str = "Warning", reason: str = "BackOff",
                 message: str = "Back-off restarting failed container", count: int | None = 3,
                 first: str | None = "2026-01-01T12:00:00Z", last: str | None = "2026-01-01T12:05:00Z",
                 field_path: str | None = "spec.containers{app}", **extra) -> dict:
    involved = {"kind": kind, "namespace": TWIN, "name": "web-1", "uid": "remote-pod-uid"}
    if field_path:
        involved["fieldPath"] = field_path
    event = {
        "metadata": {"name": f"web-1.{uid}", "namespace": TWIN, "uid": uid, "creationTimestamp": "2026-01-01T12:00:00Z"},
        "involvedObject": involved, "type": type_, "reason": reason, "message": message, "count": count,
        "firstTimestamp": first, "lastTimestamp": last, "source": {"component": "kubelet", "host": "remote-node-0"},
    }
    event.update(extra)
    return event


def local_events(events: list[dict]) -> list[dict]:
    return [
        ec.forge_object_event(group, LOCAL_POD, kinds.PODS, count=group.count, host=NODE, component="kube-offload-vkubelet",
                              reporting_controller="kube-offload.io/vkubelet")
        for group in ev.pod_event_groups(events, CONTAINERS)
    ]


# --- what a copy says ----------------------------------------------------------------------------------
def test_a_remote_event_becomes_an_event_of_the_local_pod():
    [event] = local_events([remote_event()])
    [group] = ev.pod_event_groups([remote_event()], CONTAINERS)
    assert event["metadata"]["namespace"] == "demo"
    assert event["metadata"]["name"] == ev.pod_event_name(LOCAL_POD, group)
    assert event["metadata"]["name"].startswith("web-1.ko")
    assert event["metadata"]["annotations"] == {n.ANNOTATION_REMOTE_SOURCE: "kubelet"}
    # What `kubectl describe pod` selects by, and the container the kubelet spoke of.
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "demo", "name": "web-1",
                                       "uid": "local-pod-uid", "fieldPath": "spec.containers{app}"}
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "BackOff", 3)
    assert event["message"] == "Back-off restarting failed container"
    assert event["source"] == {"component": "kube-offload-vkubelet", "host": NODE}
    assert (event["firstTimestamp"], event["lastTimestamp"]) == ("2026-01-01T12:00:00Z", "2026-01-01T12:05:00Z")


def test_an_event_of_the_shadowpod_or_without_legacy_timestamps_is_about_the_pod_itself():
    shadow = remote_event(kind="ShadowPod", field_path=None, first=None, last=None, count=None, source={},
                          eventTime="2026-01-01T12:00:01.654321Z", reportingComponent="kube-offload-enforcer")
    [event] = local_events([shadow])
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-01T12:00:01Z"
    assert event["count"] == 1
    assert "fieldPath" not in event["involvedObject"] and event["involvedObject"]["kind"] == "Pod"
    assert event["metadata"]["annotations"][n.ANNOTATION_REMOTE_SOURCE] == "kube-offload-enforcer"


@pytest.mark.parametrize(("kind", "field_path", "kept"), [
    ("Pod", "spec.containers{app}", True),
    ("Pod", "spec.initContainers{setup}", True),
    ("Pod", "spec.containers{ghost}", False),  # not a container of the local pod
    ("Pod", "spec.containers{app}" + "x" * 5000, False),  # not the kubelet's form
    ("Pod", "metadata.annotations['x']", False),
    ("ShadowPod", "spec.containers{app}", False),  # a ShadowPod has no containers
])
def test_the_field_path_is_kept_only_when_it_names_a_container_of_the_local_pod(kind, field_path, kept):
    assert ev.copied_field_path(remote_event(kind=kind, field_path=field_path), CONTAINERS) == (field_path if kept else "")


def test_reasons_and_messages_are_cut_as_the_event_api_bounds_them_and_odd_types_are_not_copied():
    [event] = local_events([remote_event(reason="R" * 500, message="é" * 1000)])
    assert event["reason"] == "R" * 128
    assert len(event["message"].encode()) <= 1024 and event["message"] == "é" * 512  # never inside a character
    assert local_events([remote_event(type_="Critical")]) == []
    assert local_events([remote_event(reason="")]) == []
    # The enforcer's routine PodCreated on the ShadowPod says nothing the local pod does not.
    assert local_events([remote_event(kind="ShadowPod", type_="Normal", reason="PodCreated", field_path=None)]) == []


# --- aggregated as the EventCorrelator would ---------------------------------------------------------------
def test_remote_events_saying_the_same_are_one_local_event_named_by_its_key_not_by_the_remote_uids():
    repeats = [remote_event(f"e{i}", count=2, first=f"2026-01-01T12:0{i}:00Z", last=f"2026-01-01T12:0{i}:30Z")
               for i in range(5)]
    [event] = local_events(repeats)
    assert event["count"] == 10
    assert (event["firstTimestamp"], event["lastTimestamp"]) == ("2026-01-01T12:00:00Z", "2026-01-01T12:04:30Z")
    [other_uids] = local_events([remote_event("another", count=1)])
    assert other_uids["metadata"]["name"] == event["metadata"]["name"]
    # Another container, message or reason is another local Event.
    names = {e["metadata"]["name"] for e in local_events([
        remote_event("a"), remote_event("b", field_path="spec.initContainers{setup}"),
        remote_event("c", message="other"), remote_event("d", reason="Failed"),
    ])}
    assert len(names) == 4


def test_from_the_tenth_distinct_message_of_one_reason_they_are_combined():
    chatty = [remote_event(f"c{i:02d}", reason="Unhealthy", message=f"probe failed: {i:02d}", count=1,
                           first=f"2026-01-01T12:{i:02d}:00Z", last=f"2026-01-01T12:{i:02d}:00Z") for i in range(15)]
    events = local_events(chatty)
    alone = [e for e in events if not e["message"].startswith(COMBINED_PREFIX)]
    [combined] = [e for e in events if e["message"].startswith(COMBINED_PREFIX)]
    assert sorted(e["message"] for e in alone) == [f"probe failed: {i:02d}" for i in range(9)]  # the first nine
    assert combined["message"] == COMBINED_PREFIX + "probe failed: 14"  # the latest
    assert combined["count"] == 6 and "fieldPath" not in combined["involvedObject"]
    assert combined["firstTimestamp"] == "2026-01-01T12:09:00Z" and combined["lastTimestamp"] == "2026-01-01T12:14:00Z"
    # A later message changes the combined Event's message and count, never its name.
    [later] = [e for e in local_events(chatty + [remote_event("c15", reason="Unhealthy", message="probe failed: 15",
                                                              count=1, first="2026-01-01T12:15:00Z", last="2026-01-01T12:15:00Z")])
               if e["message"].startswith(COMBINED_PREFIX)]
    assert later["message"] == COMBINED_PREFIX + "probe failed: 15" and later["count"] == 7
    assert later["metadata"]["name"] == combined["metadata"]["name"]
    # Nine distinct messages stay alone; another reason is counted on its own.
    assert not any(e["message"].startswith(COMBINED_PREFIX) for e in local_events(chatty[:9]))
    assert len(local_events(chatty[:9] + [remote_event("x", reason="Other")])) == 10


def test_events_are_keyed_by_the_remote_pod_they_are_about():
    assert ev.involved_key(remote_event()) == f"{TWIN}/web-1"
    assert ev.involved_key(remote_event(kind="ShadowPod")) == f"{TWIN}/web-1"  # one reconcile for both
    assert ev.involved_key({"metadata": {}, "involvedObject": {}}) is None


# --- the budgets ---------------------------------------------------------------------------------------------
def forge(name: str):
    def make(count: int) -> dict:
        return {"metadata": {"name": name}, "type": "Warning", "reason": name, "message": "m", "count": count,
                "lastTimestamp": "2026-01-01T12:00:00Z"}
    return make


def test_past_its_pods_budget_a_new_local_event_is_dropped_counted_once_and_written_when_it_happens_again():
    ledger = ec.CopyLedger(3, 60.0, drop=True)
    decisions = [ledger.decide(f"r{i}", {f"e{i}": 2}, forge(f"r{i}"), owner="pod", now=0.0) for i in range(5)]
    assert [d.write for d in decisions] == [True, True, True, False, False]
    assert [(d.dropped, d.bound, d.wait) for d in decisions[3:]] == [(2, ec.BOUND_OBJECT, 0.0)] * 2
    # Looked at again with nothing new: not counted twice, still not written.
    again = ledger.decide("r3", {"e3": 2}, forge("r3"), owner="pod", now=1.0)
    assert (again.write, again.dropped) == (False, 0)
    # Another pod has a budget of its own.
    assert ledger.decide("other", {"x": 1}, forge("other"), owner="pod-2", now=1.0).write
    # It happens again after the budget refilled: written, with every occurrence counted.
    later = ledger.decide("r3", {"e3": 3}, forge("r3"), owner="pod", now=61.0)
    assert later.write and later.event["count"] == 3
    # ... but a refilled token is one Event: the next new one is dropped again.
    assert ledger.decide("r9", {"e9": 1}, forge("r9"), owner="pod", now=61.0).dropped == 1


def test_the_remote_clusters_budget_bounds_all_pods_together():
    ledger = ec.CopyLedger(25, 60.0, drop=True, shared=ec.TokenBucket(4, 0.5, 0.0))
    decisions = [ledger.decide(f"e{i}", {f"u{i}": 1}, forge(f"e{i}"), owner=f"pod-{i}", now=0.0) for i in range(6)]
    assert [d.write for d in decisions] == [True] * 4 + [False] * 2
    assert {d.bound for d in decisions[4:]} == {ec.BOUND_REMOTE}
    # A pod refused by the remote's budget did not spend its own.
    assert ledger.decide("e4b", {"u4b": 1}, forge("e4b"), owner="pod-4", now=0.5).write


def test_a_written_local_event_is_updated_at_most_every_interval_and_never_dropped():
    ledger = ec.CopyLedger(1, 60.0, drop=True)
    first = ledger.decide("r", {"e": 1}, forge("r"), owner="pod", now=0.0)
    ledger.wrote("r", first.event, 0.0)
    assert ledger.decide("r", {"e": 1}, forge("r"), owner="pod", now=1.0) == ec.Decision(first.event)  # unchanged
    grown = ledger.decide("r", {"e": 5}, forge("r"), owner="pod", now=5.0)
    assert not grown.write and grown.wait == pytest.approx(10.0) and grown.dropped == 0
    assert ledger.decide("r", {"e": 5}, forge("r"), owner="pod", now=15.0).write


def test_an_object_ledger_makes_a_new_event_wait_rather_than_drop_it():
    ledger = ec.CopyLedger(1, 60.0)
    assert ledger.decide("a", {"e": 1}, forge("a"), owner="svc", now=0.0).write
    waiting = ledger.decide("b", {"f": 1}, forge("b"), owner="svc", now=0.0)
    assert (waiting.write, waiting.dropped, waiting.wait) == (False, 0, pytest.approx(60.0))
