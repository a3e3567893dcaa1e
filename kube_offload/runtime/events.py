"""Kubernetes Events (core/v1) recorded by our controllers: what `kubectl describe` shows.

Recording is asynchronous and bounded, as client-go's recorder is: :meth:`EventRecorder.record`
(``normal``/``warning``) snapshots the occurrence into a queue and returns at once; one
writer thread per recorder, started with the first record, writes them in order. An Event
is a courtesy: a reconcile never waits for one, and one that cannot be written (queue full,
API server refusing) is counted and dropped, never raised.

What reaches the API server is kept small, as client-go's EventCorrelator does it:
repeats folded into one Event's count, similar messages combined, a write budget per
object (kube_offload/runtime/event_correlator.py, pure, driven by the writer alone).

The queue holds at most ``queue_size`` distinct occurrences (client-go: 1000); when full,
the *newest* is dropped, as client-go's non-blocking send does: the queue stays in the
order things happened, and the first report of a burst, often its cause, is the one kept.
Repeats of a queued occurrence never take a place of their own, so a retry loop cannot
fill it. :meth:`EventRecorder.stop` writes what is queued until a deadline.

Each component keeps its own reasons and wraps :class:`EventRecorder` with its name.
Metrics: ``kube_offload_events_*`` (kube_offload/runtime/metrics.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping, Protocol

from kubernetes import client

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.event_correlator import (
    CREATE,
    FOLDED,
    PATCH,
    RATE_LIMITED,
    SPAM_BURST,
    SPAM_REFILL_SECONDS,
    Correlator,
    Occurrence,
    Write,
    occurrence,
)
from kube_offload.runtime.kinds import EVENTS
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH

NORMAL = "Normal"
WARNING = "Warning"

# client-go's broadcaster channel holds 1000 events.
QUEUE_SIZE = 1000
# A write that fails for a transient reason (5xx, 429, no answer) is tried this often in
# all, RETRY_SECONDS, then twice that, apart: an apiserver that is down costs the queue a
# few seconds per Event, not the 12 x 10 s client-go spends.
WRITE_ATTEMPTS = 3
RETRY_SECONDS = 0.5
# A writer with nothing to write for this long ends; the next record starts another.
IDLE_SECONDS = 60.0
# How long stop() keeps writing what is queued.
STOP_SECONDS = 2.0
# A dropped-events warning at most this often (the counter has every one).
DROP_LOG_SECONDS = 60.0

log = logging.getLogger("kube_offload.runtime.events")


class EventSink(Protocol):
    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]: ...

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class KubeEventSink:
    """core/v1 Events through :class:`kube_offload.runtime.kube.Kube` (raw JSON in and out),
    made from the official client's ``ApiClient`` or handed a ``Kube`` (a test's recording
    one: tests/support/recording_kube.py)."""

    def __init__(self, api_client: client.ApiClient | Kube) -> None:
        self._kube = api_client if isinstance(api_client, Kube) else Kube(api_client)

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(EVENTS, event, namespace=namespace)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._kube.patch(EVENTS, name, patch, namespace=namespace, content_type=MERGE_PATCH)


# --- the recorder: a bounded queue and its writer ---------------------------------------------
class EventRecorder:
    def __init__(
        self,
        sink: EventSink,
        *,
        component: str,
        reporting_controller: str,
        instance: str,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.time,
        queue_size: int = QUEUE_SIZE,
        spam_burst: int = SPAM_BURST,
        spam_refill_seconds: float = SPAM_REFILL_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self._queue_size = queue_size
        self._retry_seconds = retry_seconds
        self._correlator = Correlator(
            component=component,
            reporting_controller=reporting_controller,
            instance=instance,
            min_interval=min_interval,
            spam_burst=spam_burst,
            spam_refill_seconds=spam_refill_seconds,
        )
        self._cond = threading.Condition()
        # Distinct occurrences in the order recorded; a repeat is folded into its entry.
        self._pending: OrderedDict[tuple[str, ...], Occurrence] = OrderedDict()
        self._writing = False
        self._writer: threading.Thread | None = None
        self._stopping = False
        self._abandon = threading.Event()  # the stop deadline passed: no more retries
        self._dropped_since_log = 0
        self._next_drop_log = 0.0
        rm.track_event_recorder(self)

    # -- the callers' side: never blocks on the API server, never raises --
    def normal(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)

    def record(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        try:
            occ = occurrence(obj, event_type, reason, message, self._clock())
            self._enqueue(occ)
        except Exception:  # a courtesy must never break the caller
            log.exception("could not queue event %s", reason)

    def _enqueue(self, occ: Occurrence) -> None:
        with self._cond:
            if self._stopping:
                self._count_drop(rm.EVENT_DROP_SHUTDOWN, occ)
                return
            queued = self._pending.get(occ.key)
            if queued is not None:
                queued.repeats += 1  # counted as folded (or dropped) with it by the writer
                queued.last = occ.last
                return
            if len(self._pending) >= self._queue_size:
                self._count_drop(rm.EVENT_DROP_QUEUE_FULL, occ)
                return
            self._pending[occ.key] = occ
            if self._writer is None:
                self._writer = threading.Thread(target=self._run, name="event-writer", daemon=True)
                self._writer.start()
            self._cond.notify_all()

    def queued(self) -> int:
        """Occurrences waiting for the writer (the one being written not included)."""
        with self._cond:
            return len(self._pending)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything recorded so far is written (or given up); False if
        ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._writing, timeout)

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Write what is queued for at most ``timeout`` seconds, then drop the rest
        (counted) and stop the writer. Records after this are dropped."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._pending and not self._writing, max(0.0, deadline - time.monotonic()))
            self._abandon.set()
            left = list(self._pending.values())
            self._pending.clear()
            for occ in left:
                self._count_drop(rm.EVENT_DROP_SHUTDOWN, occ)
            self._cond.notify_all()
            writer = self._writer
        if writer is not None:
            writer.join(max(0.0, deadline - time.monotonic()))

    # -- the writer's side --
    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stopping, IDLE_SECONDS)
                if not self._pending:
                    # Stopping and nothing left, or idle: the next record starts a writer
                    # again (a recorder nobody uses holds no thread).
                    self._writer = None
                    return
                _key, occ = self._pending.popitem(last=False)
                self._writing = True
            try:
                self._write(occ)
            except Exception:  # the writer must outlive any one Event
                log.exception("[%s/%s] could not record event %s", occ.namespace, occ.involved.get("name"), occ.reason)
                self._count_drop(rm.EVENT_DROP_FAILED, occ)
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def _write(self, occ: Occurrence) -> None:
        decision = self._correlator.correlate(occ)
        if decision == FOLDED:
            rm.EVENTS_FOLDED.inc(occ.repeats)
            return
        if decision == RATE_LIMITED:
            self._count_drop(rm.EVENT_DROP_RATE_LIMITED, occ)
            return
        assert isinstance(decision, Write)
        write = decision
        if occ.repeats > 1:
            rm.EVENTS_FOLDED.inc(occ.repeats - 1)  # written within this write's count
        try:
            self._send(write)
        except ApiError as exc:
            if not (write.verb == PATCH and exc.not_found):
                log.warning("[%s/%s] could not record event %s: %s", occ.namespace, occ.involved.get("name"), occ.reason, exc)
                self._count_drop(rm.EVENT_DROP_FAILED, occ)
                return
            # The Event expired (or was deleted): a new one carries the count on.
            write = self._correlator.recreate(write, occ)
            try:
                self._send(write)
            except ApiError as again:
                log.warning("[%s/%s] could not record event %s: %s", occ.namespace, occ.involved.get("name"), occ.reason, again)
                self._count_drop(rm.EVENT_DROP_FAILED, occ)
                return
        self._correlator.written(write)

    def _send(self, write: Write) -> None:
        """One write, tried again on transient failures (not once the stop deadline passed)."""
        delay = self._retry_seconds
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                if write.verb == CREATE:
                    self._sink.create_event(write.namespace, write.body)
                else:
                    self._sink.patch_event(write.namespace, write.name, write.body)
                rm.EVENTS_WRITTEN.labels(verb=write.verb).inc()
                return
            except ApiError as exc:
                if not exc.transient or attempt == WRITE_ATTEMPTS or self._abandon.wait(delay):
                    raise
                delay *= 2

    def _count_drop(self, reason: str, occ: Occurrence) -> None:
        rm.EVENTS_DROPPED.labels(reason=reason).inc(occ.repeats)
        if reason == rm.EVENT_DROP_FAILED:
            return  # logged where it failed, with the API's message
        # A full queue can drop thousands a second: one warning a minute says so.
        with self._cond:  # reentrant: _enqueue and stop call this holding it
            now = time.monotonic()
            self._dropped_since_log += occ.repeats
            if now < self._next_drop_log:
                return
            dropped, self._dropped_since_log = self._dropped_since_log, 0
            self._next_drop_log = now + DROP_LOG_SECONDS
        log.warning(
            "dropped %d event(s) (%s; latest: %s %s on %s/%s); see kube_offload_events_dropped_total",
            dropped, reason, occ.event_type, occ.reason, occ.namespace, occ.involved.get("name"),
        )


