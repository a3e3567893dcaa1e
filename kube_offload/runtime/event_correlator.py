"""What the Kubernetes Events a recorder writes become: client-go's EventCorrelator.

What reaches the API server is kept small, as client-go's EventCorrelator does it
(:class:`Correlator`, pure, driven by the writer of
:class:`~kube_offload.runtime.events.EventRecorder` alone):

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

Pure and single-threaded, with the occurrences' own times as its clock: it decides which
API call an occurrence needs (a create, a patch of the count, none), and the recorder
(kube_offload/runtime/events.py) makes that call on its writer thread. One concern each:
what to write here, when and how to write it there.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kube_offload.times import format_epoch

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
# Objects and keys remembered for folding (least recently seen forgotten first).
MAX_REMEMBERED = 4096
# The API caps an Event message at 1 KiB.
MAX_MESSAGE = 1024

CREATE = "create"
PATCH = "patch"


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
    def key(self) -> tuple[str, ...]:
        return (*self.object_id, self.event_type, self.reason, self.message)


def occurrence(obj: Mapping[str, Any], event_type: str, reason: str, message: str, now: float) -> Occurrence:
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
    key: tuple[str, ...]
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
        self._folded: OrderedDict[tuple[str, ...], Folded] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._budgets: OrderedDict[tuple[str, ...], _Budget] = OrderedDict()

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

    def _create(self, occ: Occurrence, key: tuple[str, ...], message: str, *, count: int, first: float) -> Write:
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

    def _aggregate(self, occ: Occurrence) -> tuple[tuple[str, ...], str]:
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
    def _remember(table: OrderedDict[Any, Any], key: tuple[str, ...], value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MAX_REMEMBERED:
            table.popitem(last=False)
