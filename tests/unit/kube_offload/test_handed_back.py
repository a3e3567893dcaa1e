"""The handed-back record on a virtual Node (kube_offload/handed_back.py): backoff growth,
what a retried eviction does, forgetting, and what the extender reads from it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload import handed_back as hb

NOW = datetime(2026, 11, 27, 3, 0, 0, tzinfo=timezone.utc)
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8", "uid": "rs-1", "controller": True}


def node(annotation: str | None = None) -> dict:
    annotations = {} if annotation is None else {c.ANNOTATION_HANDED_BACK: annotation}
    return {"metadata": {"name": "kube-offload-eu1", "resourceVersion": "9", "annotations": annotations}}


def pod(uid: str = "p-1", owners: list | None = None) -> dict:
    return {"metadata": {"name": "web", "namespace": "ns", "uid": uid, "ownerReferences": [OWNER] if owners is None else owners}}


@pytest.mark.parametrize("count, seconds", [(0, 0), (1, 600), (2, 1200), (3, 2400), (6, 19200), (7, 21600), (100, 21600)])
def test_refusal_doubles_up_to_the_cap(count: int, seconds: float) -> None:
    assert hb.refusal_seconds(count) == seconds


def test_each_new_pod_of_a_workload_doubles_the_refusal() -> None:
    records: dict = {}
    for n, pod_uid in enumerate(["p-1", "p-2", "p-3"], start=1):
        at = NOW + timedelta(hours=n)
        records = hb.with_handback(records, "rs-1", pod_uid, "RemoteUnschedulable", at)
        assert records["rs-1"].count == n
        assert records["rs-1"].until == at + timedelta(seconds=hb.refusal_seconds(n))


def test_the_same_pod_recorded_again_counts_once() -> None:
    first = hb.with_handback({}, "rs-1", "p-1", "RemoteUnschedulable", NOW)
    again = hb.with_handback(first, "rs-1", "p-1", "RemoteUnschedulable", NOW + timedelta(seconds=30))
    assert again == first


def test_a_record_long_expired_is_forgotten_and_the_count_starts_over() -> None:
    first = hb.with_handback({}, "rs-1", "p-1", "RemoteUnschedulable", NOW)
    later = first["rs-1"].until + timedelta(seconds=hb.FORGET_AFTER_SECONDS + 1)
    assert hb.with_handback(first, "other", "p-9", "RemoteRefused", later).keys() == {"other"}
    assert hb.with_handback(first, "rs-1", "p-2", "RemoteUnschedulable", later)["rs-1"].count == 1
    # Expired but remembered: the next one still doubles.
    soon = first["rs-1"].until + timedelta(seconds=60)
    assert hb.with_handback(first, "rs-1", "p-2", "RemoteUnschedulable", soon)["rs-1"].count == 2


def test_records_are_bounded_keeping_the_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hb, "MAX_RECORDS", 3)
    records: dict = {}
    for i in range(5):
        records = hb.with_handback(records, f"rs-{i}", f"p-{i}", "RemoteUnschedulable", NOW + timedelta(seconds=i))
    assert sorted(records) == ["rs-2", "rs-3", "rs-4"]


def test_encode_and_read_back_from_a_node() -> None:
    records = hb.with_handback({}, "rs-1", "p-1", "RemoteRefused", NOW)
    patch = hb.node_patch(node(), records)
    assert patch is not None and patch["metadata"]["resourceVersion"] == "9"
    text = patch["metadata"]["annotations"][c.ANNOTATION_HANDED_BACK]
    assert json.loads(text) == {"rs-1": {"until": "2026-11-27T03:10:00Z", "count": 1, "pod": "p-1", "reason": "RemoteRefused"}}
    assert hb.records_of(node(text)) == records
    assert hb.node_patch(node(text), records) is None  # already written
    assert hb.node_patch(node(text), {})["metadata"]["annotations"] == {c.ANNOTATION_HANDED_BACK: None}


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"rs-1": 3}', '{"rs-1": {"until": "soon", "count": 1}}',
                                  '{"rs-1": {"until": "2026-11-27T03:10:00Z", "count": 0}}',
                                  '{"rs-1": {"until": "2026-11-27T03:10:00Z", "count": true}}'])
def test_unreadable_records_read_as_none(text: str) -> None:
    assert hb.records_of(node(text)) == {}
    assert hb.refused_until(node(text), pod(), NOW) is None


def test_refused_until_follows_the_pods_controller_and_the_clock() -> None:
    text = hb.encode(hb.with_handback({}, "rs-1", "p-1", "RemoteUnschedulable", NOW))
    record = hb.refused_until(node(text), pod("p-2"), NOW + timedelta(seconds=599))
    assert record is not None and record.count == 1 and record.reason == "RemoteUnschedulable"
    assert hb.refused_until(node(text), pod("p-2"), NOW + timedelta(seconds=600)) is None  # expired
    other = {**OWNER, "uid": "rs-2"}
    assert hb.refused_until(node(text), pod("p-2", [other]), NOW) is None  # another workload
    assert hb.refused_until(node(text), pod("p-2", [{**OWNER, "controller": False}]), NOW) is None  # not its controller
    assert hb.refused_until(node(text), pod("p-2", []), NOW) is None
