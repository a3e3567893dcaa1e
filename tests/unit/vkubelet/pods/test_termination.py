"""Graceful deletion of an offloaded pod (vkubelet/pods/termination.py) and the enforcer's
side of it (kube_offload.shadowpod.plan with the deletion-grace annotation)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload.shadowpod import Action
from vkubelet.pods import termination as term


def local_pod(deletion_grace=None, spec_grace=None, deleted_at=None) -> dict:
    meta: dict = {"name": "web", "namespace": "demo", "uid": "u1"}
    if deletion_grace is not None:
        meta["deletionGracePeriodSeconds"] = deletion_grace
    if deleted_at is not None:
        meta["deletionTimestamp"] = deleted_at
    spec: dict = {"containers": [{"name": "app", "image": "i"}]}
    if spec_grace is not None:
        spec["terminationGracePeriodSeconds"] = spec_grace
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    "deletion, spec, expected",
    [(12, 30, 12), (None, 45, 45), (None, None, 30), (0, 30, 0), (-1, 30, 0), ("x", 9, 9)],
)
def test_grace_seconds_prefers_the_deletion_then_the_spec(deletion, spec, expected):
    assert term.grace_seconds(local_pod(deletion, spec)) == expected


def shp(annotation=None) -> dict:
    meta: dict = {"name": "web", "namespace": "demo-local", "uid": "s1"}
    if annotation is not None:
        meta["annotations"] = {c.ANNOTATION_DELETION_GRACE: annotation}
    return {"metadata": meta, "spec": {"pod": {"spec": {"containers": [{"name": "app", "image": "i"}]}}}}


def test_grace_request_is_written_once_and_only_ever_shortened():
    assert term.grace_request_patch(shp(), 20) == {"metadata": {"annotations": {c.ANNOTATION_DELETION_GRACE: "20"}}}
    assert term.grace_request_patch(shp("20"), 20) is None
    assert term.grace_request_patch(shp("20"), 25) is None
    assert term.grace_request_patch(shp("20"), 1) == {"metadata": {"annotations": {c.ANNOTATION_DELETION_GRACE: "1"}}}
    assert term.grace_request_patch(shp("garbage"), 5) is not None  # an unreadable request is replaced


def test_unreachable_deadline_is_the_deletion_timestamp_plus_the_margin():
    pod = local_pod(5, deleted_at="2025-01-01T00:00:05Z")  # deleted at 00:00:00 with grace 5
    assert term.unreachable_deadline(pod, 30) == datetime(2025, 1, 1, 0, 0, 35, tzinfo=timezone.utc)
    assert term.unreachable_deadline(pod, -3) == datetime(2025, 1, 1, 0, 0, 5, tzinfo=timezone.utc)
    assert term.unreachable_deadline(local_pod(), 30) is None


def test_unconfirmed_message_says_what_happened_and_what_follows():
    text = term.unconfirmed_message("remote-1", 5, 30.0)
    assert "remote-1 is unreachable" in text and "(5s) plus 30s" in text and "answers again" in text


# --- the enforcer's decision -------------------------------------------------------------------
def remote_pod(uid="p1", deleted_grace=None) -> dict:
    meta: dict = {"name": "web", "namespace": "demo-local", "uid": uid, "creationTimestamp": "2025-01-01T00:00:00Z"}
    if deleted_grace is not None:
        meta.update(deletionTimestamp="2025-01-01T00:01:00Z", deletionGracePeriodSeconds=deleted_grace)
    return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}


@pytest.mark.parametrize("value, expected", [(None, None), ("7", 7), (" 0 ", 0), ("-1", None), ("soon", None)])
def test_deletion_grace_reads_the_annotation(value, expected):
    assert shadowpod.deletion_grace(shp(value)) == expected


def test_plan_terminates_with_the_grace_and_never_creates():
    decision = shadowpod.plan(shp("7"), [remote_pod()])
    assert decision.action is Action.TERMINATE and decision.grace == 7
    assert [p["metadata"]["uid"] for p in decision.delete] == ["p1"]
    # Gone: nothing to delete, and still no new pod.
    decision = shadowpod.plan(shp("7"), [])
    assert decision.action is Action.TERMINATE and decision.delete == ()


def test_plan_shortens_a_longer_grace_but_leaves_a_shorter_one():
    assert len(shadowpod.plan(shp("7"), [remote_pod(deleted_grace=30)]).delete) == 1
    assert shadowpod.plan(shp("7"), [remote_pod(deleted_grace=7)]).delete == ()
    assert shadowpod.plan(shp("7"), [remote_pod(deleted_grace=2)]).delete == ()


def test_plan_without_the_annotation_is_unchanged():
    assert shadowpod.plan(shp(), [remote_pod()]).action is Action.MIRROR
    assert shadowpod.plan(shp(), []).action is Action.CREATE
