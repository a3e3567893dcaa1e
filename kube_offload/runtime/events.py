"""Kubernetes Events (core/v1) recorded by our controllers: what `kubectl describe` shows.

Recording is asynchronous and bounded, as client-go's recorder is: :meth:`EventRecorder.record`
(``normal``/``warning``) snapshots the occurrence into a queue and returns at once; one
writer thread per recorder, started with the first record, writes them in order. An Event
is a courtesy: a reconcile never waits for one, and one that cannot be written (queue full,
API server refusing) is counted and dropped, never raised.

What reaches the API server is kept small, as client-go's EventCorrelator does it
(:class:`Correlator`, pure, driven by the writer alone):

- **repeats** of one (object, type, reason, message) within :data:`AGGREGATE_SECONDS` of
  the first are folded into one Event whose ``count`` grows (a patch, not a create); with
  ``min_interval`` a repeat is written at most that often (counted meanwhile). A repeat of
  an occurrence still queued is folded into it before it is written at all;
- **similar events**, differing only in their message: from the :data:`SIMILAR_MAX`-th
  distinct message for one (object, type, reason) within :data:`SIMILAR_SECONDS`, they go
  into one Event ``(combined from similar events): <latest message>`` whose count grows;
- **a write budget per object**: :data:`SPAM_BURST` writes, one more every
  :data:`SPAM_REFILL_SECONDS` (client-go's spam filter). Past it a repeat is only counted
  (written with the next one the budget allows) and a new Event is dropped.

The queue holds at most ``queue_size`` distinct occurrences (client-go: 1000); when full,
the *newest* is dropped, as client-go's non-blocking send does: the queue stays in the
order things happened, and the first report of a burst, often its cause, is the one kept.
Repeats of a queued occurrence never take a place of their own, so a retry loop cannot
fill it. :meth:`EventRecorder.stop` writes what is queued until a deadline.

Each component keeps its own reasons and wraps :class:`EventRecorder` with its name.
Metrics: ``kube_offload_events_*`` (kube_offload/runtime/metrics.py).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from kubernetes import client

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.kinds import EVENTS
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH
from kube_offload.times import format_epoch

NORMAL = "Normal"
WARNING = "Warning"

# A repeat within this window of the Event's first occurrence bumps its count; later ones
# start a new Event.
AGGREGATE_SECONDS = 600.0
# client-go's EventAggregator: the SIMILAR_MAX-th distinct message for one (object, type,
# reason) within SIMILAR_SECONDS of the previous one starts the combined Event.
SIMILAR_MAX = 10
SIMILAR_SECONDS = 600.0
COMBINED_PREFIX = "(combined from similar events): "
# client-go's EventSourceObjectSpamFilter: 25 writes per object, then one per 5 minutes.
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
# client-go's broadcaster channel holds 1000 events.
QUEUE_SIZE = 1000
# Objects and keys remembered for folding (least recently seen forgotten first).
MAX_REMEMBERED = 4096
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
# The API caps an Event message at 1 KiB.
MAX_MESSAGE = 1024

CREATE = "create"
PATCH = "patch"

log = logging.getLogger("kube_offload.runtime.events")


class EventSink(Protocol):
    def create_event(self, namespace: str, event: dict) -> dict: ...

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict: ...


class KubeEventSink:
    """core/v1 Events through :class:`kube_offload.runtime.kube.Kube` (raw JSON in and out)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._kube = Kube(api_client)

    def create_event(self, namespace: str, event: dict) -> dict:
        return self._kube.create(EVENTS, event, namespace=namespace)

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return self._kube.patch(EVENTS, name, patch, namespace=namespace, content_type=MERGE_PATCH)


# --- the pure part: what one occurrence becomes -----------------------------------------------
@dataclass
class Occurrence:
    """One recorded event, snapshotted when recorded (the caller's object may change
    afterwards), and how many identical ones were recorded while it waited in the queue."""

    namespace: str
    involved: dict[str, Any]
    event_type: str
    reason: str
    message: str
    first: float
    last: float
    repeats: int = 1

    @property
    def object_id(self) -> tuple[str, str]:
        # The UID, not the name: a pod deleted and created again under its name is
        # another object, and gets Events of its own.
        return (self.namespace, str(self.involved.get("uid") or self.involved.get("name")))

    @property
    def key(self) -> tuple:
        return (*self.object_id, self.event_type, self.reason, self.message)


def occurrence(obj: Mapping, event_type: str, reason: str, message: str, now: float) -> Occurrence:
    meta = obj.get("metadata") or {}
    involved = {
        "apiVersion": obj.get("apiVersion") or "v1",
        "kind": obj.get("kind") or "Pod",
        "name": str(meta.get("name") or "object"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return Occurrence(
        # Events of cluster-scoped objects (namespaces) live in "default", as client-go does it.
        namespace=str(meta.get("namespace") or "default"),
        involved={k: v for k, v in involved.items() if v},
        event_type=event_type,
        reason=reason,
        message=message[:MAX_MESSAGE],
        first=now,
        last=now,
    )


@dataclass
class Folded:
    """An Event written (or being written): its name, its count so far (counted repeats not
    yet written included), its first occurrence and when it was last written."""

    name: str
    count: int
    first: float
    written: float


@dataclass
class Write:
    """One API call to make: ``verb`` is :data:`CREATE` (``body`` the Event) or :data:`PATCH`
    (``body`` the merge patch of Event ``name``); ``folded`` is remembered under ``key``
    once it succeeded."""

    verb: str
    namespace: str
    name: str
    body: dict[str, Any]
    key: tuple
    object_id: tuple[str, str]
    folded: Folded


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Budget:
    tokens: float
    at: float


# What correlate() says about an occurrence that needs no write now.
FOLDED = "folded"  # counted: written within the count of a later write
RATE_LIMITED = "rate_limited"  # dropped: a new Event for an object whose budget is spent


class Correlator:
    """Turns occurrences into writes (client-go's EventCorrelator: aggregation, folding,
    spam filter). Pure and single-threaded: the recorder's writer is its only user; the
    clock is the occurrences' own times."""

    def __init__(
        self,
        *,
        component: str,
        reporting_controller: str,
        instance: str,
        min_interval: float = 0.0,
        spam_burst: int = SPAM_BURST,
        spam_refill_seconds: float = SPAM_REFILL_SECONDS,
        names: Callable[[], int] | None = None,
    ) -> None:
        self._component = component
        self._reporting_controller = reporting_controller
        self._instance = instance
        self._min_interval = min_interval
        self._spam_burst = spam_burst
        self._spam_refill = spam_refill_seconds
        # Event names: unique per Event and sortable by time, as the Go recorder's are.
        counter = itertools.count()
        self._names = names or (lambda: time.time_ns() + next(counter))
        self._folded: OrderedDict[tuple, Folded] = OrderedDict()
        self._similar: OrderedDict[tuple, _Similar] = OrderedDict()
        self._budgets: OrderedDict[tuple, _Budget] = OrderedDict()

    def correlate(self, occ: Occurrence) -> Write | str:
        """The write ``occ`` needs, or why none is needed now (:data:`FOLDED`,
        :data:`RATE_LIMITED`)."""
        key, message = self._aggregate(occ)
        folded = self._folded.get(key)
        if folded is not None and occ.last - folded.first >= AGGREGATE_SECONDS:
            folded = None  # an old Event is left as it is; this starts a new one
        if folded is not None and occ.last - folded.written < self._min_interval:
            folded.count += occ.repeats
            return FOLDED
        if not self._take_budget(occ.object_id, occ.last):
            if folded is not None:
                folded.count += occ.repeats
                return FOLDED
            return RATE_LIMITED
        if folded is not None:
            count = folded.count + occ.repeats
            patch: dict[str, Any] = {"count": count, "lastTimestamp": format_epoch(occ.last)}
            if message != occ.message:
                patch["message"] = message  # a combined Event shows its latest message
            return Write(PATCH, occ.namespace, folded.name, patch, key, occ.object_id,
                         Folded(folded.name, count, folded.first, occ.last))
        return self._create(occ, key, message, count=occ.repeats, first=occ.first)

    def written(self, write: Write) -> None:
        self._remember(self._folded, write.key, write.folded)

    def recreate(self, write: Write, occ: Occurrence) -> Write:
        """The create that replaces a patch of an Event gone meanwhile (Events expire, an
        hour by default): same count, first occurrence and message."""
        message = str(write.body.get("message") or occ.message)  # a combined Event's patch names its message
        return self._create(occ, write.key, message, count=write.folded.count, first=write.folded.first)

    def _create(self, occ: Occurrence, key: tuple, message: str, *, count: int, first: float) -> Write:
        name = f"{str(occ.involved.get('name'))[:230]}.{self._names():x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": occ.namespace},
            "involvedObject": dict(occ.involved),
            "type": occ.event_type,
            "reason": occ.reason,
            "message": message,
            "count": count,
            "firstTimestamp": format_epoch(first),
            "lastTimestamp": format_epoch(occ.last),
            "source": {"component": self._component, "host": self._instance},
            "reportingComponent": self._reporting_controller,
            "reportingInstance": self._instance,
        }
        return Write(CREATE, occ.namespace, name, event, key, occ.object_id, Folded(name, count, first, occ.last))

    def _aggregate(self, occ: Occurrence) -> tuple[tuple, str]:
        """The fold key and message of ``occ``: its own, or those of the combined Event of
        its (object, type, reason) once that has seen SIMILAR_MAX distinct messages within
        SIMILAR_SECONDS of one another."""
        similar_key = (*occ.object_id, occ.event_type, occ.reason)
        similar = self._similar.get(similar_key)
        if similar is None or occ.last - similar.last > SIMILAR_SECONDS:
            similar = _Similar()
        # Bounded: past the limit every message of this key is combined anyway.
        if len(similar.messages) < SIMILAR_MAX:
            similar.messages.add(occ.message)
        similar.last = occ.last
        self._remember(self._similar, similar_key, similar)
        if len(similar.messages) < SIMILAR_MAX:
            return occ.key, occ.message
        # One element shorter than an occurrence's own key: the two never collide.
        return similar_key, (COMBINED_PREFIX + occ.message)[:MAX_MESSAGE]

    def _take_budget(self, object_id: tuple[str, str], now: float) -> bool:
        budget = self._budgets.get(object_id)
        if budget is None:
            budget = _Budget(float(self._spam_burst), now)
        elif self._spam_refill > 0:
            budget.tokens = min(float(self._spam_burst), budget.tokens + max(0.0, now - budget.at) / self._spam_refill)
            budget.at = max(budget.at, now)
        self._remember(self._budgets, object_id, budget)
        if budget.tokens < 1.0:
            return False
        budget.tokens -= 1.0
        return True

    @staticmethod
    def _remember(table: OrderedDict, key: tuple, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MAX_REMEMBERED:
            table.popitem(last=False)


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
        self._pending: OrderedDict[tuple, Occurrence] = OrderedDict()
        self._writing = False
        self._writer: threading.Thread | None = None
        self._stopping = False
        self._abandon = threading.Event()  # the stop deadline passed: no more retries
        self._dropped_since_log = 0
        self._next_drop_log = 0.0
        rm.track_event_recorder(self)

    # -- the callers' side: never blocks on the API server, never raises --
    def normal(self, obj: Mapping, reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping, reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)

    def record(self, obj: Mapping, event_type: str, reason: str, message: str) -> None:
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


