"""What the two reflectors of remote Events share (events.py for offloaded pods,
object_events.py for Services, claims and Ingresses): the aggregate of remote Events one
local Event stands for, the local Event forged from it, and the bounds on writing them.

The forge is pure. One local Event per local object and key (type, reason, message, and
for a pod the container it is about), named after that key so that a restart or a resync
finds it (create, and patch on AlreadyExists: the vkubelet never reads local Events); its
count is the sum of the remote counts behind it, remembered so that an expired remote
Event does not lower it.

The bounds (:class:`CopyLedger`, on an explicit clock): a written local Event is updated
at most every :data:`UPDATE_INTERVAL_SECONDS`; a *new* one spends a token of its local
object's budget (a :class:`TokenBucket`), and, where the reflector has one, of a budget
shared by everything it copies from this remote cluster. What a budget refuses either
waits (object Events: written later, while the remote cluster still holds it) or is
dropped and counted (pod Events: as client-go's spam filter drops, docs/reflection.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Final, Mapping

from kube_offload.runtime import kinds
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH
from kube_offload.times import parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.reflection import metrics
from vkubelet.reflection.forge import event_count, event_fingerprint, event_time
from kube_offload.reasons import REASON_REFLECTION_FAILED
from vkubelet.shared import names as n
from vkubelet.shared.provider_bounds import EVENT_MESSAGE_BYTES, REASON_BYTES, truncate_utf8

# An Event may arrive before the object it is about reaches our cache; a young one is
# looked at again for this long.
YOUNG_EVENT_SECONDS: Final = 60.0
# A local Event already written is updated (its count) at most once per this many
# seconds; the loop looks again when the interval is over, so the last count always lands.
UPDATE_INTERVAL_SECONDS: Final = 15.0
# The types of Event Kubernetes defines; a remote Event of another is not copied.
EVENT_TYPES: Final = frozenset({"Normal", "Warning"})
# The local Events, counts and budgets a ledger remembers; the oldest are forgotten first
# (forgetting one costs at most one patch that changes nothing, or one early write).
REMEMBERED: Final = 4096
# What stands for the message in the name of a combined Event (Aggregate.combined).
COMBINED_KEY: Final = "(combined)"
# The remote sources named in a copy's annotation, at most.
SOURCES_SHOWN: Final = 4

# Which budget refused a new local Event (the label of the dropped-Events metric).
BOUND_OBJECT: Final = "object"
BOUND_REMOTE: Final = "remote"


# --- the aggregate and its local Event (pure) -------------------------------------------------------
def event_type_and_reason(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """A remote Event's type and reason as a copy carries them (the reason bounded), or
    None when it has no reason or a type Kubernetes does not define."""
    type_ = str(event.get("type") or "Normal")
    reason = truncate_utf8(str(event.get("reason") or ""), REASON_BYTES)
    if not reason or type_ not in EVENT_TYPES:
        return None
    return type_, reason


@dataclass
class Aggregate:
    """One local Event: every remote Event about one local object with this type, reason,
    message (and, for a pod, the container it is about: ``field_path``), or with this type
    and reason whatever their message (``combined``: its message is the latest one's, which
    changes while its name does not). ``counts``: remote Event UID -> its count."""

    type: str
    reason: str
    message: str
    field_path: str = ""
    combined: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    sources: set[str] = field(default_factory=set)

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def add(self, event: Mapping[str, Any]) -> None:
        """Count remote ``event`` in (its own count; the earliest first and latest last
        time; its source)."""
        meta = _meta(event)
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        self.counts[uid] = max(self.counts.get(uid, 0), event_count(event))
        first = event_time(event, "firstTimestamp", "eventTime")
        last = event_time(event, "lastTimestamp", "eventTime") or first
        # RFC 3339 in UTC at second precision (format_time): they sort as text.
        if first and (self.first is None or first < self.first):
            self.first = first
        if last and (self.last is None or last > self.last):
            self.last = last
        component = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        if component:
            self.sources.add(truncate_utf8(str(component), REASON_BYTES))

    def merge(self, other: "Aggregate") -> None:
        self.counts.update(other.counts)
        self.first = min(filter(None, (self.first, other.first)), default=None)
        self.last = max(filter(None, (self.last, other.last)), default=None)
        self.sources |= other.sources


def remember_counts(previous: Mapping[str, int], current: Mapping[str, int], limit: int = 64) -> dict[str, int]:
    """The counts behind one local Event: what was seen before (a remote Event that has
    expired since still counted) updated by what is seen now, never lower per remote
    Event; at most ``limit`` remote Events remembered (the oldest first out)."""
    merged = dict(previous)
    for uid, count in current.items():
        merged.pop(uid, None)
        merged[uid] = max(previous.get(uid, 0), count)
    while len(merged) > limit:
        merged.pop(next(iter(merged)))
    return merged


def local_object_event_name(obj_name: str, kind: str, obj_uid: str, type_: str, reason: str, message: str,
                            field_path: str = "") -> str:
    """The one local Event of an aggregate: a function of the local object (kind, UID) and
    the aggregation key only, so a restart or a resync finds it instead of making another."""
    key = (kind, obj_uid, type_, reason, message) + ((field_path,) if field_path else ())
    return n.local_event_name(obj_name, "\x00".join(key))


def aggregate_event_name(local_obj: Mapping[str, Any], kind: str, group: Aggregate) -> str:
    """The name of ``group``'s local Event about ``local_obj`` (of ``kind``)."""
    meta = _meta(local_obj)
    # A combined Event's key is its type and reason: no container's fieldPath looks like this.
    message, field_path = ("", COMBINED_KEY) if group.combined else (group.message, group.field_path)
    return local_object_event_name(str(meta.get("name") or ""), kind, str(meta.get("uid") or ""), group.type,
                                   group.reason, message, field_path)


def forge_object_event(
    group: Aggregate,
    local_obj: Mapping[str, Any],
    api_kind: Resource,
    *,
    count: int,
    host: str,
    component: str,
    reporting_controller: str,
) -> dict[str, Any]:
    """The local Event of ``group`` about ``local_obj`` (a pod, Service, claim or Ingress
    of kind ``api_kind``), with ``count`` (the aggregate's, as remembered)."""
    meta = _meta(local_obj)
    involved = {
        "apiVersion": api_kind.api_version,
        "kind": api_kind.kind,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "fieldPath": group.field_path,
    }
    name = aggregate_event_name(local_obj, api_kind.kind, group)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "annotations": {n.ANNOTATION_REMOTE_SOURCE: ",".join(sorted(group.sources)[:SOURCES_SHOWN])},
        },
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": group.type,
        "reason": group.reason,
        "message": truncate_utf8(group.message, EVENT_MESSAGE_BYTES),
        "count": max(1, count),
        "source": {"component": component, "host": host},
        "reportingComponent": reporting_controller,
        "reportingInstance": host,
    }
    if group.first:
        event["firstTimestamp"] = group.first
    if group.last or group.first:
        event["lastTimestamp"] = group.last or group.first
    return event


# --- the bounds -------------------------------------------------------------------------------------------
class TokenBucket:
    """A token bucket on an explicit clock: ``burst`` tokens, one more every
    ``refill_seconds``. :meth:`wait` says how long until a token is there (0: now),
    :meth:`take` spends one."""

    def __init__(self, burst: int, refill_seconds: float, now: float) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.tokens = float(burst)
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) / self.refill_seconds)
            self.stamp = now

    def wait(self, now: float) -> float:
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) * self.refill_seconds

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens = max(0.0, self.tokens - 1.0)


def update_wait(last_written: float | None, now: float, interval: float = UPDATE_INTERVAL_SECONDS) -> float:
    """Seconds until a local Event last written at ``last_written`` may be written again
    (0: now; never written: now)."""
    if last_written is None:
        return 0.0
    return max(0.0, last_written + interval - now)


@dataclass
class Decision:
    """What :meth:`CopyLedger.decide` says of one local Event: write ``event`` now
    (``write``), look again in ``wait`` seconds, or nothing; ``dropped``: remote
    occurrences a budget refused for good (``bound`` says which), when the ledger drops."""

    event: dict[str, Any]
    write: bool = False
    wait: float = 0.0
    dropped: int = 0
    bound: str = ""


def _put(store: OrderedDict[str, Any], key: str, value: object) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > REMEMBERED:
        store.popitem(last=False)


class CopyLedger:
    """What a reflector remembers of the local Events it writes (bounded; thread-safe):
    per local Event, what was written and when, the remote counts behind it, how many of
    its occurrences were dropped; per local object, its budget of new local Events
    (``burst``, then one per ``refill_seconds``)."""

    def __init__(self, burst: int, refill_seconds: float, *, shared: TokenBucket | None = None, drop: bool = False) -> None:
        self._burst = burst
        self._refill = refill_seconds
        # A budget every local object's new Events also spend (None: none).
        self._shared = shared
        # A new Event its budgets refuse is dropped (True) or waits (False).
        self._drop = drop
        self._lock = threading.Lock()
        self._written: OrderedDict[str, tuple[tuple[Any, ...], float]] = OrderedDict()
        self._counts: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._dropped: OrderedDict[str, int] = OrderedDict()
        self._budgets: OrderedDict[str, TokenBucket] = OrderedDict()

    def decide(self, name: str, counts: Mapping[str, int], forge: Callable[[int], dict[str, Any]], *, owner: str, now: float) -> Decision:
        """Local Event ``name``, which the remote ``counts`` stand behind and ``forge``
        makes from a count, about the local object ``owner`` (its UID), at ``now``
        (monotonic seconds)."""
        with self._lock:
            remembered = remember_counts(self._counts.get(name, {}), counts)
            _put(self._counts, name, remembered)
            total = sum(remembered.values())
            event = forge(total)
            written = self._written.get(name)
            if written is not None:
                if written[0] == event_fingerprint(event):
                    return Decision(event)
                wait = update_wait(written[1], now)
                return Decision(event, wait=wait) if wait > 0 else Decision(event, write=True)
            dropped_through = self._dropped.get(name, 0)
            if self._drop and dropped_through >= total:
                return Decision(event)  # nothing happened since it was dropped
            wait, bound = self._take_new(owner, now)
            if wait == 0:
                return Decision(event, write=True)
            if not self._drop:
                return Decision(event, wait=wait)
            _put(self._dropped, name, total)
            return Decision(event, dropped=total - dropped_through, bound=bound)

    def _take_new(self, owner: str, now: float) -> tuple[float, str]:
        budget = self._budgets.get(owner) or TokenBucket(self._burst, self._refill, now)
        _put(self._budgets, owner, budget)
        own, shared = budget.wait(now), (self._shared.wait(now) if self._shared is not None else 0.0)
        if own == 0 and shared == 0:
            budget.take(now)
            if self._shared is not None:
                self._shared.take(now)
            return 0.0, ""
        return (own, BOUND_OBJECT) if own >= shared else (shared, BOUND_REMOTE)

    def wrote(self, name: str, event: Mapping[str, Any], now: float) -> None:
        with self._lock:
            _put(self._written, name, (event_fingerprint(event), now))


# --- the write (I/O) and the Events' age -------------------------------------------------------------------
def converge(ledger: CopyLedger, local: Kube, name: str, counts: Mapping[str, int], forge: Callable[[int], dict[str, Any]], *,
             owner: str, logger: logging.LoggerAdapter[logging.Logger], resource: str) -> Decision:
    """Write local Event ``name`` if the ledger says so (:meth:`CopyLedger.decide`) and
    remember it written; the decision says what else to do (wait, count what was dropped)."""
    decision = ledger.decide(name, counts, forge, owner=owner, now=time.monotonic())
    if decision.write and write_local_event(local, decision.event, logger, resource=resource):
        ledger.wrote(name, decision.event, time.monotonic())
    return decision


def write_local_event(local: Kube, desired: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger], *, resource: str) -> bool:
    """Create the local copy ``desired``; if it exists (a restart, a resync, another
    replica), merge-patch what a copy changes into it instead: no read first, so the
    vkubelet needs only create and patch on local Events. False when the local API server
    refused it for good (logged and counted); transient errors raise (the loop retries)."""
    name = desired["metadata"]["name"]
    namespace = desired["metadata"]["namespace"]
    try:
        local.create(kinds.EVENTS, desired, namespace=namespace)
        metrics.wrote(resource, metrics.OPERATION_CREATE)
        logger.debug("copied remote event %s %s", desired["reason"], name)
        return True
    except ApiError as exc:
        if not exc.already_exists:
            if exc.transient or exc.conflict:
                raise
            logger.warning("could not copy remote event %s: %s", desired["reason"], exc)
            metrics.failed(resource, REASON_REFLECTION_FAILED)
            return False
    patch = {k: desired[k] for k in ("type", "reason", "message", "count", "lastTimestamp") if k in desired}
    local.patch(kinds.EVENTS, name, patch, namespace=namespace, content_type=MERGE_PATCH)
    metrics.wrote(resource, metrics.OPERATION_UPDATE)
    return True


def event_age_seconds(event: Mapping[str, Any]) -> float:
    stamp = None
    for name in ("lastTimestamp", "eventTime", "firstTimestamp"):
        stamp = parse_time_or_none(event.get(name))
        if stamp:
            break
    stamp = stamp or parse_time_or_none((event.get("metadata") or {}).get("creationTimestamp"))
    if stamp is None:
        return 0.0
    return (datetime.now(timezone.utc) - stamp).total_seconds()
