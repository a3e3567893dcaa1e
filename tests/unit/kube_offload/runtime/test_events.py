"""The Event recorder (kube_offload/runtime/events.py): asynchronous and bounded, repeats
folded, similar events combined, a write budget per object, flushed on stop.

Pure logic against a fake sink (the two API calls an Event needs) and a fake clock; the
sink can be held to play an API server that does not answer, so a test can tell what
record() does before any write. The same behaviour against a real kube-apiserver:
tests/e2e/test_runtime_events.py."""

from __future__ import annotations

import threading
import time

import pytest

from kube_offload.runtime import event_correlator as correlator
from kube_offload.runtime import events as ev
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.kube import ApiError
from support import builders

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "5"}}


def pod(name: str, uid: str | None = None) -> dict:
    return builders.pod(name, uid=uid or f"uid-{name}")


class FakeSink:
    """Records every call in order; ``hold()`` makes calls wait until ``release()``;
    ``fail`` is raised by the next calls (a list: one per call)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []  # (verb, name, body)
        self.events: dict[str, dict] = {}
        self.fail: list[Exception] = []
        self._open = threading.Event()
        self._open.set()
        self.waiting = threading.Event()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _gate(self) -> None:
        self.waiting.set()
        assert self._open.wait(10), "the sink was never released"
        if self.fail:
            raise self.fail.pop(0)

    def create_event(self, namespace, event):
        self._gate()
        self.calls.append(("create", event["metadata"]["name"], event))
        self.events[event["metadata"]["name"]] = dict(event)
        return event

    def patch_event(self, namespace, name, patch):
        self._gate()
        self.calls.append(("patch", name, patch))
        if name not in self.events:
            raise ApiError(404, "NotFound", f'events "{name}" not found')
        self.events[name].update(patch)
        return self.events[name]

    def creates(self) -> list[dict]:
        return [body for verb, _, body in self.calls if verb == "create"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def recorder(sink: FakeSink, clock: Clock | None = None, **kwargs) -> ev.EventRecorder:
    kwargs.setdefault("retry_seconds", 0.01)
    return ev.EventRecorder(sink, component="test", reporting_controller="kube-offload.io/test", instance="host-0",
                            clock=clock or Clock(), **kwargs)


def counter(metric, **labels) -> float:
    return (metric.labels(**labels) if labels else metric)._value.get()


@pytest.fixture
def sink() -> FakeSink:
    return FakeSink()


def test_record_returns_before_the_write_and_the_writer_delivers_it(sink):
    sink.hold()  # an API server that does not answer
    rec = recorder(sink)
    started = time.monotonic()
    rec.normal(POD, "Offloaded", "running in cluster eu1")
    assert time.monotonic() - started < 0.5, "record() waited for the API server"
    assert sink.waiting.wait(5), "the writer never tried"
    assert sink.calls == [] and not rec.flush(timeout=0.05)
    sink.release()
    assert rec.flush(timeout=5)
    [event] = sink.creates()
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "ns",
                                       "uid": "u1", "resourceVersion": "5"}
    assert (event["type"], event["reason"], event["message"], event["count"]) == ("Normal", "Offloaded", "running in cluster eu1", 1)
    assert event["metadata"]["name"].startswith("web.") and event["metadata"]["namespace"] == "ns"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2023-11-14T22:13:20Z"
    assert event["source"] == {"component": "test", "host": "host-0"}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("kube-offload.io/test", "host-0")


def test_the_object_is_snapshotted_when_recorded(sink):
    sink.hold()
    rec = recorder(sink)
    obj = pod("web")
    rec.warning(obj, "Failed", "x")
    obj["metadata"]["name"] = "changed-after"
    sink.release()
    rec.flush(5)
    assert sink.creates()[0]["involvedObject"]["name"] == "web"


def test_writes_keep_the_order_of_recording(sink):
    rec = recorder(sink)
    for i in range(20):
        rec.normal(pod(f"p{i}"), "Offloaded", f"m{i}")
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == [f"p{i}" for i in range(20)]


def test_repeats_fold_into_one_event_whose_count_grows(sink):
    clock = Clock()
    rec = recorder(sink, clock)
    rec.warning(POD, "PodCreationFailed", "exceeded quota")
    rec.flush(5)
    clock.now += 10
    rec.warning(POD, "PodCreationFailed", "exceeded quota")
    rec.flush(5)
    name = sink.creates()[0]["metadata"]["name"]
    assert sink.calls[1] == ("patch", name, {"count": 2, "lastTimestamp": "2023-11-14T22:13:30Z"})
    rec.warning(POD, "PodCreationFailed", "another message")  # another Event
    rec.flush(5)
    assert len(sink.creates()) == 2
    clock.now += correlator.AGGREGATE_SECONDS  # the first Event's window is over: a new one
    rec.warning(POD, "PodCreationFailed", "exceeded quota")
    rec.flush(5)
    assert len(sink.creates()) == 3 and sink.creates()[2]["count"] == 1


def test_the_same_reason_on_an_object_recreated_under_its_name_is_a_new_event(sink):
    rec = recorder(sink)
    rec.normal(pod("web", "uid-a"), "Offloaded", "x")
    rec.normal(pod("web", "uid-b"), "Offloaded", "x")
    rec.flush(5)
    assert [e["involvedObject"]["uid"] for e in sink.creates()] == ["uid-a", "uid-b"]


def test_repeats_of_a_queued_event_take_no_place_of_their_own(sink):
    sink.hold()
    clock = Clock()
    rec = recorder(sink, clock, queue_size=2)
    rec.warning(pod("a"), "Failed", "x")
    assert sink.waiting.wait(5)  # "a" is being written (held); the queue is empty again
    folded = counter(rm.EVENTS_FOLDED)
    rec.warning(pod("b"), "Failed", "x")
    for _ in range(50):
        clock.now += 1
        rec.warning(pod("b"), "Failed", "x")  # a retry loop
    rec.warning(pod("c"), "Failed", "x")
    assert rec.queued() == 2
    sink.release()
    rec.flush(5)
    assert counter(rm.EVENTS_FOLDED) - folded == 50
    creates = sink.creates()
    assert [e["involvedObject"]["name"] for e in creates] == ["a", "b", "c"]
    b = creates[1]
    assert b["count"] == 51, "the folded repeats are in the count of the one write"
    assert (b["firstTimestamp"], b["lastTimestamp"]) == ("2023-11-14T22:13:20Z", "2023-11-14T22:14:10Z")


def test_a_full_queue_drops_the_newest_and_counts_it(sink):
    sink.hold()
    rec = recorder(sink, queue_size=3)
    rec.normal(pod("first"), "R", "m")
    assert sink.waiting.wait(5)  # taken by the writer, which waits on the API server
    dropped = counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_QUEUE_FULL)
    for i in range(10):
        rec.normal(pod(f"p{i}"), "R", "m")
    assert rec.queued() == 3
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_QUEUE_FULL) - dropped == 7
    sink.release()
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["first", "p0", "p1", "p2"]


def test_similar_events_are_combined_from_the_tenth_message(sink):
    clock = Clock()
    rec = recorder(sink, clock)
    for i in range(correlator.SIMILAR_MAX - 1):
        clock.now += 1
        rec.warning(POD, "ProviderRefused", f"refused: attempt {i}")
    rec.flush(5)
    assert len(sink.creates()) == correlator.SIMILAR_MAX - 1  # each its own Event
    for i in range(correlator.SIMILAR_MAX - 1, correlator.SIMILAR_MAX + 4):
        clock.now += 1
        rec.warning(POD, "ProviderRefused", f"refused: attempt {i}")
        rec.flush(5)
    creates = sink.creates()
    assert len(creates) == correlator.SIMILAR_MAX, "one combined Event for the rest"
    combined = creates[-1]
    assert combined["message"] == f"(combined from similar events): refused: attempt {correlator.SIMILAR_MAX - 1}"
    assert (combined["type"], combined["reason"], combined["count"]) == ("Warning", "ProviderRefused", 1)
    patches = [body for verb, name, body in sink.calls if verb == "patch"]
    assert [p["count"] for p in patches] == [2, 3, 4, 5]
    assert patches[-1]["message"] == f"(combined from similar events): refused: attempt {correlator.SIMILAR_MAX + 3}"
    assert sink.events[combined["metadata"]["name"]]["count"] == 5
    # Another reason, or the same one on another object, is not combined with these.
    rec.warning(POD, "OffloadingFailed", "refused: attempt 0")
    rec.warning(pod("other"), "ProviderRefused", "refused: attempt 99")
    rec.flush(5)
    assert [e["message"] for e in sink.creates()[-2:]] == ["refused: attempt 0", "refused: attempt 99"]


def test_similar_events_are_not_combined_once_the_window_passed(sink):
    clock = Clock()
    rec = recorder(sink, clock)
    for i in range(correlator.SIMILAR_MAX - 1):
        rec.warning(POD, "ProviderRefused", f"m{i}")
    clock.now += correlator.SIMILAR_SECONDS + 1  # quiet for longer than the window
    rec.warning(POD, "ProviderRefused", "m-late")
    rec.flush(5)
    assert sink.creates()[-1]["message"] == "m-late"


def test_min_interval_counts_repeats_and_writes_them_with_the_next_one(sink):
    clock = Clock()
    rec = recorder(sink, clock, min_interval=30.0)
    rec.warning(POD, "NodeNotReady", "unreachable")
    rec.flush(5)
    for _ in range(3):
        clock.now += 5
        rec.warning(POD, "NodeNotReady", "unreachable")
        rec.flush(5)
    assert len(sink.calls) == 1, "no write within the interval"
    clock.now += 30
    rec.warning(POD, "NodeNotReady", "unreachable")
    rec.flush(5)
    assert sink.calls[-1][0] == "patch" and sink.calls[-1][2]["count"] == 5


def test_the_write_budget_per_object_defers_repeats_and_drops_new_events(sink):
    clock = Clock()
    rec = recorder(sink, clock, spam_burst=3, spam_refill_seconds=60.0)
    limited = counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_RATE_LIMITED)
    for _ in range(5):
        clock.now += 1
        rec.warning(POD, "Failed", "x")
        rec.flush(5)
    assert len(sink.calls) == 3, "three writes, then the budget is spent"
    rec.warning(POD, "Other", "y")  # a new Event for the same object: dropped
    rec.warning(pod("another"), "Other", "y")  # another object has its own budget
    rec.flush(5)
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_RATE_LIMITED) - limited == 1
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["web", "another"]
    clock.now += 60  # one write more
    rec.warning(POD, "Failed", "x")
    rec.flush(5)
    assert sink.calls[-1][0] == "patch" and sink.calls[-1][2]["count"] == 6, "the deferred repeats are counted"


def test_a_patch_of_an_expired_event_creates_a_new_one_with_the_count(sink):
    clock = Clock()
    rec = recorder(sink, clock)
    rec.warning(POD, "Failed", "x")
    rec.flush(5)
    sink.events.clear()  # the Event's TTL passed
    clock.now += 5
    rec.warning(POD, "Failed", "x")
    rec.flush(5)
    assert [verb for verb, _, _ in sink.calls] == ["create", "patch", "create"]
    again = sink.creates()[-1]
    assert again["count"] == 2 and again["firstTimestamp"] == "2023-11-14T22:13:20Z"
    clock.now += 5
    rec.warning(POD, "Failed", "x")
    rec.flush(5)
    assert sink.calls[-1] == ("patch", again["metadata"]["name"], {"count": 3, "lastTimestamp": "2023-11-14T22:13:30Z"})


def test_transient_failures_are_retried_and_refusals_dropped(sink):
    rec = recorder(sink)
    failed = counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_FAILED)
    sink.fail = [ApiError(503, "ServiceUnavailable", "try later"), ApiError(0, "Unreachable", "connection refused")]
    rec.normal(pod("a"), "R", "m")
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["a"]
    sink.fail = [ApiError(403, "Forbidden", "namespace ns is being terminated")]
    rec.normal(pod("b"), "R", "m")
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["a"]
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_FAILED) - failed == 1
    sink.fail = [ApiError(500, "InternalError", "etcd")] * ev.WRITE_ATTEMPTS
    rec.normal(pod("c"), "R", "m")
    rec.normal(pod("d"), "R", "m")  # the writer goes on after giving up on one
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["a", "d"]
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_FAILED) - failed == 2


def test_an_idle_writer_ends_and_the_next_record_starts_another(sink, monkeypatch):
    monkeypatch.setattr(ev, "IDLE_SECONDS", 0.05)
    rec = recorder(sink)
    rec.normal(pod("a"), "R", "m")
    assert rec.flush(5)
    deadline = time.monotonic() + 5
    while rec._writer is not None:
        assert time.monotonic() < deadline, "the idle writer did not end"
        time.sleep(0.01)
    rec.normal(pod("b"), "R", "m")
    assert rec.flush(5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == ["a", "b"]


def test_recording_never_raises(sink):
    class Broken:
        def create_event(self, namespace, event):
            raise RuntimeError("bug")

        patch_event = create_event

    rec = recorder(Broken())
    rec.normal(POD, "R", "m")
    rec.record({"metadata": None}, "Normal", "R", "m")  # an odd object
    assert rec.flush(5)


def test_stop_writes_what_is_queued(sink):
    rec = recorder(sink)
    sink.hold()
    for i in range(5):
        rec.normal(pod(f"p{i}"), "R", "m")
    threading.Timer(0.2, sink.release).start()
    rec.stop(timeout=5)
    assert [e["involvedObject"]["name"] for e in sink.creates()] == [f"p{i}" for i in range(5)]
    shutdown = counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_SHUTDOWN)
    rec.normal(pod("late"), "R", "m")
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_SHUTDOWN) - shutdown == 1
    assert len(sink.creates()) == 5


def test_stop_gives_up_at_its_deadline_and_counts_the_rest(sink):
    rec = recorder(sink)
    sink.hold()  # never answers in time
    for i in range(4):
        rec.normal(pod(f"p{i}"), "R", "m")
    assert sink.waiting.wait(5)
    shutdown = counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_SHUTDOWN)
    started = time.monotonic()
    rec.stop(timeout=0.3)
    assert time.monotonic() - started < 2
    assert counter(rm.EVENTS_DROPPED, reason=rm.EVENT_DROP_SHUTDOWN) - shutdown == 3, "p1..p3 still queued"
    assert rec.queued() == 0
    sink.release()


def test_the_queue_is_exported_as_a_gauge(sink):
    sink.hold()
    rec = recorder(sink)
    rec.normal(pod("a"), "R", "m")
    assert sink.waiting.wait(5)
    rec.normal(pod("b"), "R", "m")
    rec.normal(pod("c"), "R", "m")
    assert rm.REGISTRY.get_sample_value("kube_offload_events_queued") >= 2
    sink.release()
    rec.flush(5)
    names = rm.exported_names(rm.REGISTRY)
    assert {"kube_offload_events_written_total", "kube_offload_events_dropped_total",
            "kube_offload_events_folded_total", "kube_offload_events_queued"} <= names
