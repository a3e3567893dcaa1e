"""The work queue's contract: de-duplication, no concurrent processing of one key,
dirty re-queue, delays and backoff."""

import threading
import time

import pytest

from kube_offload.runtime.controller import Controller, PermanentError, Requeue
from kube_offload.runtime.workqueue import ShutDown, WorkQueue


def test_duplicate_adds_are_held_once():
    q = WorkQueue()
    for _ in range(5):
        q.add("ns/a")
    q.add("ns/b")
    assert [q.get(timeout=1), q.get(timeout=1)] == ["ns/a", "ns/b"]
    with pytest.raises(TimeoutError):
        q.get(timeout=0.05)


def test_key_added_while_processing_is_requeued_after_done_not_before():
    q = WorkQueue()
    q.add("k")
    assert q.get(timeout=1) == "k"
    q.add("k")  # while processing
    with pytest.raises(TimeoutError):
        q.get(timeout=0.05)
    q.done("k")
    assert q.get(timeout=1) == "k"


def test_add_after_delays_and_rate_limit_grows():
    q = WorkQueue(base_delay=0.05, max_delay=1)
    start = time.monotonic()
    q.add_after("x", 0.1)
    assert q.get(timeout=1) == "x"
    assert time.monotonic() - start >= 0.09
    q.done("x")
    assert q.add_rate_limited("y") == pytest.approx(0.05)
    assert q.add_rate_limited("y") == pytest.approx(0.1)
    q.forget("y")
    assert q.add_rate_limited("y") == pytest.approx(0.05)


def test_shutdown_wakes_blocked_getters():
    q = WorkQueue()
    errors = []

    def getter():
        try:
            q.get()
        except ShutDown:
            errors.append("shutdown")

    thread = threading.Thread(target=getter)
    thread.start()
    time.sleep(0.05)
    q.shutdown()
    thread.join(1)
    assert errors == ["shutdown"]


def test_controller_retry_policy():
    calls: list[str] = []

    def reconcile(key: str) -> None:
        calls.append(key)
        if key == "requeue":
            raise Requeue(after=0.01)
        if key == "permanent":
            raise PermanentError("bad spec")
        if key == "flaky":
            raise RuntimeError("boom")

    c = Controller(name="t", reconcile=reconcile, max_retries=2)
    c.process_one("permanent")
    assert c.queue.failures("permanent") == 0 and len(c.queue) == 0
    c.process_one("requeue")
    assert c.queue.get(timeout=1) == "requeue"
    c.queue.done("requeue")
    for _ in range(3):
        c.process_one("flaky")
    # two retries scheduled, the third failure drops the key and resets its backoff
    assert c.queue.failures("flaky") == 0
    assert calls.count("flaky") == 3


def test_informer_stop_wakes_a_blocked_watch_reader():
    """stop() must return promptly even while the watch thread is blocked reading a quiet
    stream (close() on a urllib3 response would wait for the reader's lock)."""
    import socket

    from kube_offload.runtime.informer import Informer

    class QuietResponse:
        def __init__(self):
            self.a, self.b = socket.socketpair()
            self.shut = False

        def shutdown(self):
            self.shut = True
            self.a.shutdown(socket.SHUT_RDWR)

    informer = Informer(name="t", list_func=lambda **_: None)
    response = QuietResponse()
    informer._response = response
    reader = threading.Thread(target=lambda: response.a.recv(1), daemon=True)
    reader.start()
    started = time.monotonic()
    informer.stop()
    reader.join(2)
    assert response.shut
    assert not reader.is_alive()
    assert time.monotonic() - started < 2


def test_many_add_after_for_one_key_keep_one_entry_delivered_once_at_the_earliest():
    q = WorkQueue()
    start = time.monotonic()
    q.add_after("k", 0.15)
    for _ in range(50):  # every event and resync of a key stuck in retry asks again
        q.add_after("k", 1.0)
    assert q.depths() == (0, 1)
    assert q.pending_deadline("k") == pytest.approx(start + 0.15, abs=0.05)
    assert q.get(timeout=2) == "k"
    assert 0.14 <= time.monotonic() - start < 0.9
    q.done("k")
    with pytest.raises(TimeoutError):  # no second delivery from the later asks
        q.get(timeout=1.2)
    assert len(q) == 0


def test_a_later_add_after_with_an_earlier_deadline_moves_the_entry_earlier():
    q = WorkQueue()
    start = time.monotonic()
    q.add_after("k", 5.0)
    q.add_after("k", 0.1)
    assert q.depths() == (0, 1)
    assert q.get(timeout=1) == "k"
    assert time.monotonic() - start < 1.0
    q.done("k")
    with pytest.raises(TimeoutError):  # the superseded 5 s entry is gone too
        q.get(timeout=0.2)
    assert q.pending_deadline("k") is None and len(q) == 0


def test_add_after_dedup_is_per_key_and_a_key_can_be_delayed_again_once_delivered():
    q = WorkQueue()
    q.add_after("a", 0.05)
    q.add_after("b", 0.05)
    q.add_after("a", 0.06)
    assert q.depths() == (0, 2)
    assert sorted([q.get(timeout=1), q.get(timeout=1)]) == ["a", "b"]
    q.done("a")
    q.add_after("a", 0.05)  # a fresh pending entry after the first was delivered
    assert q.get(timeout=1) == "a"


def test_superseded_entries_do_not_accumulate():
    q = WorkQueue()
    for i in range(1000):  # each ask earlier than the last: every one supersedes
        q.add_after("k", 100.0 - i * 0.01)
    assert q.depths() == (0, 1)
    assert len(q._delayed) <= 2 * 1 + 64 + 1


# --- the fast lane ---------------------------------------------------------------------------
def test_urgent_keys_are_handed_out_before_the_waiting_ones_in_order():
    q = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    q.add("x", urgent=True)
    q.add("y", urgent=True)
    assert [q.get(timeout=1) for _ in range(5)] == ["x", "y", "a", "b", "c"]


def test_an_urgent_add_moves_a_waiting_key_up_and_it_is_handed_out_once():
    q = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    q.add("c", urgent=True)
    q.add("c")  # a later normal add does not move it back
    got = [q.get(timeout=1) for _ in range(3)]
    assert got == ["c", "a", "b"]
    assert len(q) == 0
    with pytest.raises(TimeoutError):
        q.get(timeout=0.05)


def test_an_urgent_add_while_processing_requeues_in_the_fast_lane():
    q = WorkQueue()
    q.add("a")
    q.add("b")
    assert q.get(timeout=1) == "a"
    q.add("a", urgent=True)  # while "a" is processed: dirty, and urgent
    q.done("a")
    assert q.get(timeout=1) == "a"
    assert q.get(timeout=1) == "b"


def test_depths_count_each_waiting_key_once_across_lanes():
    q = WorkQueue()
    for key in ("a", "b"):
        q.add(key)
    q.add("a", urgent=True)
    assert q.depths() == (2, 0)
    assert len(q) == 2


def test_stale_lane_entries_do_not_accumulate():
    q = WorkQueue()
    for round_ in range(300):
        q.add(f"k{round_}")
        q.add(f"k{round_}", urgent=True)  # leaves a stale entry in the normal lane
        assert q.get(timeout=1) == f"k{round_}"
        q.done(f"k{round_}")
    # compacted once stale entries pass 64 (plus twice the keys waiting): bounded, not 300
    assert len(q._queue) + len(q._urgent) <= 66
