"""The tests' recording fake of the API layer's writes (tests/support/recording_kube.py)
answers as an API server does in the cases the reconcile tests meet (the e2e tier checks
the API server itself: tests/e2e/test_runtime_kube.py), and records every write."""

from __future__ import annotations

import pytest

from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import PODS, SHADOWPODS
from kube_offload.runtime.kube import JSON_PATCH, ApiError
from support import builders
from support.informers import never_listed
from support.recording_kube import CREATE, DELETE, PATCH, RecordingKube, forbidden


def test_a_created_object_is_stored_with_the_servers_fields_and_a_second_is_already_there() -> None:
    kube = RecordingKube()
    made = kube.create(PODS, builders.pod(), namespace="ns")
    assert made["metadata"]["uid"] and made["metadata"]["resourceVersion"] and made["metadata"]["creationTimestamp"]
    assert kube.stored(PODS, "web", "ns") == made
    with pytest.raises(ApiError) as again:
        kube.create(PODS, builders.pod(), namespace="ns")
    assert again.value.already_exists
    assert [(w.verb, w.error is None) for w in kube.writes] == [(CREATE, True), (CREATE, False)]


def test_a_dry_run_stores_nothing() -> None:
    kube = RecordingKube()
    kube.create(PODS, builders.pod(), namespace="ns", dry_run=True)
    assert kube.stored(PODS, "web", "ns") is None and len(kube.of(CREATE, PODS)) == 1


def test_patches_need_the_object_and_its_version() -> None:
    kube = RecordingKube()
    with pytest.raises(ApiError) as missing:
        kube.patch(PODS, "web", {"metadata": {"labels": {"a": "b"}}}, namespace="ns")
    assert missing.value.not_found
    kube.hold(PODS, builders.pod(uid="u1", resourceVersion="7", phase="Pending"))
    with pytest.raises(ApiError) as stale:
        kube.patch(PODS, "web", {"metadata": {"resourceVersion": "6"}, "status": {"phase": "Running"}},
                   namespace="ns", subresource="status")
    assert stale.value.conflict and not stale.value.already_exists
    with pytest.raises(ApiError) as other:
        kube.patch(SHADOWPODS, "x", {"metadata": {"uid": "u2"}}, namespace="ns")
    assert other.value.not_found


def test_the_status_subresource_changes_the_status_only_and_the_object_everything_else() -> None:
    kube = RecordingKube()
    kube.hold(PODS, builders.pod(uid="u1", resourceVersion="7", phase="Pending", labels={"a": "1"}))
    kube.patch(PODS, "web", {"metadata": {"labels": {"a": "2"}}, "status": {"phase": "Running"}},
               namespace="ns", subresource="status")
    after = kube.stored(PODS, "web", "ns")
    assert after is not None and after["status"]["phase"] == "Running" and after["metadata"]["labels"] == {"a": "1"}
    kube.patch(PODS, "web", {"metadata": {"labels": {"a": "3"}}, "status": {"phase": "Failed"}}, namespace="ns")
    after = kube.stored(PODS, "web", "ns")
    assert after is not None and after["status"]["phase"] == "Running" and after["metadata"]["labels"] == {"a": "3"}
    kube.patch(PODS, "web", [{"op": "add", "path": "/metadata/labels/b", "value": "x"}], namespace="ns",
               content_type=JSON_PATCH)
    assert (kube.stored(PODS, "web", "ns") or {})["metadata"]["labels"] == {"a": "3", "b": "x"}


def test_deletes_check_their_preconditions_and_a_bound_pod_goes_gracefully() -> None:
    kube = RecordingKube()
    kube.hold(PODS, builders.pod(uid="u1", resourceVersion="7", spec={"nodeName": "n1"}))
    with pytest.raises(ApiError) as replaced:
        kube.delete(PODS, "web", namespace="ns", uid="u0")
    assert replaced.value.conflict
    kube.delete(PODS, "web", namespace="ns", uid="u1", grace_period_seconds=30)
    kept = kube.stored(PODS, "web", "ns")
    assert kept is not None and kept["metadata"]["deletionTimestamp"] and kept["metadata"]["deletionGracePeriodSeconds"] == 30
    kube.delete(PODS, "web", namespace="ns", uid="u1", grace_period_seconds=0)
    assert kube.stored(PODS, "web", "ns") is None
    assert [w.options.get("grace_period_seconds") for w in kube.of(DELETE)] == [None, 30, 0]


def test_an_error_on_demand_answers_the_matching_write_once() -> None:
    kube = RecordingKube()
    kube.hold(PODS, builders.pod(uid="u1", resourceVersion="7"))
    kube.answer_with(forbidden("denied"), verb=PATCH, resource=PODS)
    with pytest.raises(ApiError) as refused:
        kube.patch(PODS, "web", {"metadata": {"labels": {"a": "b"}}}, namespace="ns")
    assert refused.value.status == 403 and refused.value.body["reason"] == "Forbidden"
    kube.patch(PODS, "web", {"metadata": {"labels": {"a": "b"}}}, namespace="ns")
    assert [w.error.status if w.error else None for w in kube.of(PATCH)] == [403, None]


def test_reads_other_than_get_fail_the_test_and_writes_reach_a_fed_cache() -> None:
    kube = RecordingKube()
    with pytest.raises(AssertionError, match="reads come from the informers"):
        kube.list(PODS, namespace="ns")
    cache = Informer(name="pods", list_func=never_listed)
    kube.feed(PODS, cache)
    kube.create(PODS, builders.pod(), namespace="ns")
    assert cache.get("ns/web") == kube.stored(PODS, "web", "ns")
    kube.delete(PODS, "web", namespace="ns")
    assert cache.get("ns/web") is None
