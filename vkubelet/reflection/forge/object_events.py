"""Local Events from the remote Events about reflected Services, claims and Ingresses (pure):
what crosses, how it is aggregated, and how often it may be written.

Remote -> local, like the Events of offloaded pods (forge/events.py), but with two
differences that make it fit for objects whose remote copy is looked after by the
provider's own controllers (its service controller and load-balancer provider, its PV
controller and provisioners, its Ingress controller):

* **Only what is about the consumer's object crosses.** The message is the provider's
  free text; addresses (IPv4/IPv6, with a prefix or port), UUIDs (remote UIDs, volume
  names made of them) and node names (after the word ``node``/``host``) are masked, and the
  twin namespace's name is written as the local namespace's. Reasons that are only about
  the provider's allocators or topology are not copied at all (:data:`INTERNAL_REASONS`).
  docs/security.md argues why.
* **Aggregated.** One local Event per local object, type, reason and masked message:
  remote Events that differ only in what was masked (another address, another volume)
  add up on one local Event, whose count is the sum of theirs.

The rate bounds (:class:`TokenBucket`, :data:`UPDATE_INTERVAL_SECONDS`) are applied by the
loop (vkubelet/reflection/object_events.py); they live here to be tested without a clock.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Callable, Final, Iterable, Mapping

from kube_offload.runtime import kinds
from kube_offload.runtime.kinds import Resource
from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n
from vkubelet.reflection import settings as s
from vkubelet.reflection.forge.events import event_count, event_time

# The reflected types whose remote Events come back, and their kind in the API. The kind is
# both the remote field selector (involvedObject.kind) and the local involvedObject: what
# `kubectl describe` selects a local object's Events by (with its name, namespace and UID).
KINDS: Final[Mapping[str, Resource]] = {
    s.SERVICES: kinds.SERVICES,
    s.PERSISTENTVOLUMECLAIMS: kinds.PERSISTENT_VOLUME_CLAIMS,
    s.INGRESSES: kinds.INGRESSES,
}

# Reasons about the provider's cluster itself, not about the consumer's object: the repair
# loops of its cluster-IP and node-port allocators name an allocation the consumer never
# sees (reflection clears cluster IPs and node ports, the remote cluster allocates its
# own), and a load-balancer implementation's "which node announces it" names its topology.
INTERNAL_REASONS: Final = frozenset({
    "ClusterIPOutOfRange",
    "ClusterIPAlreadyAllocated",
    "ClusterIPNotAllocated",
    "PortOutOfRange",
    "PortAlreadyAllocated",
    "PortNotAllocated",
    "nodeAssigned",
})

# What a masked part reads as.
MASK_ADDRESS: Final = "<provider address>"
MASK_NODE: Final = "<provider node>"
MASK_UID: Final = "<uid>"

MESSAGE_LIMIT: Final = 1024

# Rate bounds (docs/reflection.md#events-of-services-claims-and-ingresses): a local Event
# already written is updated (its count) at most once per this many seconds; the loop
# looks again when the interval is over, so the last count always lands.
UPDATE_INTERVAL_SECONDS: Final = 15.0
# New local Events per local object: a burst of this many, then one per
# NEW_EVENT_REFILL_SECONDS (a controller that puts a changing text in every message
# cannot flood a local namespace; what waits is written later, not dropped).
NEW_EVENT_BURST: Final = 10
NEW_EVENT_REFILL_SECONDS: Final = 60.0

# Candidates only: each is checked by the ipaddress module before it is masked, so
# times (07:20:00), versions (1.2.3) and ratios are left as they are.
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?:/\d{1,2})?(?::\d{1,5})?(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:.])\[?([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})\]?(?:/\d{1,3})?(?::\d{1,5})?(?![\w:])")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# "node worker-3", node "worker", host: "ip-10-0-0-1.ec2.internal", nodes [a-1 b-2]: a quoted
# name always; an unquoted one only when it looks like a name (a digit, "-" or "."),
# so that "node affinity" or "nodes are available" stay readable.
_NODE = re.compile(
    r"\b(?P<word>[Nn]odes?|[Hh]osts?|[Hh]ostname)(?P<sep>\s*[:=]?\s*)"
    r"(?:(?P<q>[\"'])(?P<quoted>[^\"'\s]+)(?P=q)|(?P<bare>[A-Za-z0-9][A-Za-z0-9.\-]*))"
)


def _mask_address(match: re.Match) -> str:
    """The match masked if its address group is a real IP address (a v4 candidate has no
    colon, a v6 one has colons, so one parser serves both patterns), else as written."""
    try:
        ipaddress.ip_address(match.group(1))
    except ValueError:
        return match.group(0)
    return MASK_ADDRESS


def _mask_node(match: re.Match) -> str:
    quoted = match.group("quoted")
    if quoted is None:
        bare = match.group("bare")
        if not re.search(r"[0-9.\-]", bare) or bare.startswith(MASK_NODE):
            return match.group(0)
        return f"{match.group('word')}{match.group('sep')}{MASK_NODE}"
    q = match.group("q")
    return f"{match.group('word')}{match.group('sep')}{q}{MASK_NODE}{q}"


def sanitize_message(message: str, *, twin_namespace: str, local_namespace: str) -> str:
    """The provider's ``message`` as the consumer's users may read it: the twin namespace
    named as the local one, UUIDs, addresses and node names masked, at most
    :data:`MESSAGE_LIMIT` characters. Deterministic: the same remote text always gives the
    same local text (the aggregation key)."""
    text = str(message or "")
    if twin_namespace and twin_namespace != local_namespace:
        text = re.sub(rf"(?<![a-z0-9.\-]){re.escape(twin_namespace)}(?![a-z0-9\-])", local_namespace, text)
    text = _UUID.sub(MASK_UID, text)
    text = _IPV4.sub(_mask_address, text)
    text = _IPV6.sub(_mask_address, text)
    text = _NODE.sub(_mask_node, text)
    return text[:MESSAGE_LIMIT]


def copied(event: Mapping) -> bool:
    """Whether a remote Event about one of our remote copies is copied at all."""
    return bool(event.get("reason")) and event.get("reason") not in INTERNAL_REASONS


@dataclass
class Aggregate:
    """One local Event: every remote Event about one remote copy with this type, reason
    and masked message. ``counts``: remote Event UID -> its count."""

    type: str
    reason: str
    message: str
    counts: dict[str, int] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    sources: set[str] = field(default_factory=set)

    @property
    def count(self) -> int:
        return sum(self.counts.values())


def aggregate(events: Iterable[Mapping], sanitize: Callable[[str], str]) -> dict[tuple[str, str, str], Aggregate]:
    """The remote Events about one remote copy, grouped by (type, reason, masked message);
    those not :func:`copied` left out."""
    groups: dict[tuple[str, str, str], Aggregate] = {}
    for event in events:
        if not copied(event):
            continue
        type_ = str(event.get("type") or "Normal")
        reason = str(event.get("reason"))
        message = sanitize(str(event.get("message") or ""))
        key = (type_, reason, message)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Aggregate(type_, reason, message)
        uid = str(_meta(event).get("uid") or f"{_meta(event).get('namespace')}/{_meta(event).get('name')}")
        group.counts[uid] = max(group.counts.get(uid, 0), event_count(event))
        first = event_time(event, "firstTimestamp", "eventTime")
        last = event_time(event, "lastTimestamp", "eventTime") or first
        # RFC 3339 in UTC at second precision (format_time): they sort as text.
        if first and (group.first is None or first < group.first):
            group.first = first
        if last and (group.last is None or last > group.last):
            group.last = last
        component = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        if component:
            group.sources.add(str(component))
    return groups


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


def local_object_event_name(obj_name: str, kind: str, obj_uid: str, type_: str, reason: str, message: str) -> str:
    """The one local Event of an aggregate: a function of the local object (kind, UID) and
    the aggregation key only, so a restart or a resync finds it instead of making another."""
    return n.local_event_name(obj_name, "\x00".join((kind, obj_uid, type_, reason, message)))


def forge_object_event(
    group: Aggregate,
    local_obj: Mapping,
    api_kind: Resource,
    *,
    count: int,
    host: str,
    component: str,
    reporting_controller: str,
) -> dict:
    """The local Event of ``group`` about ``local_obj`` (a Service, claim or Ingress of
    kind ``api_kind``), with ``count`` (the aggregate's, as remembered)."""
    meta = _meta(local_obj)
    involved = {
        "apiVersion": api_kind.api_version,
        "kind": api_kind.kind,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    name = local_object_event_name(
        str(meta.get("name") or ""), api_kind.kind, str(meta.get("uid") or ""), group.type, group.reason, group.message
    )
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "annotations": {n.ANNOTATION_REMOTE_SOURCE: ",".join(sorted(group.sources))},
        },
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": group.type,
        "reason": group.reason,
        "message": group.message,
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
