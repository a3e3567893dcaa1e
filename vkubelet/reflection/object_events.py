"""Events remote -> local for reflected Services, PersistentVolumeClaims and Ingresses: what
the provider's controllers say about the remote copy (a LoadBalancer being provisioned or
failing, a claim waiting for its first consumer or failing to provision, an Ingress
controller's sync) shows on the local object, in ``kubectl describe`` and ``kubectl get
events``.

Watched: remote Events whose ``involvedObject.kind`` is neither Pod nor ShadowPod (those
are events.py's), in the usable twin namespaces only: one watch per twin for the three
kinds (a field selector takes one value per ``=``, but any number of ``!=``), of which
those about a kind whose reflection runs are looked at. One is considered only if its object is a remote copy **this
cluster's reflector of that kind wrote** (origin and reflector labels, from that
reflector's own cache: no extra watch), with the UID the Event names, standing for a local
object that exists, is not being deleted and that the ``events`` policy selects.

What crosses, how it is aggregated and the rate bounds are pure (the forge part of this module):
one local Event per local object, type, reason and masked message, its count the sum of
the remote counts behind it; named after that key (restart safe: a restart finds it and
patches it, never makes a second); updated at most every 15 s, and at most 10 new local
Events per local object at once, then one a minute. The work queue is keyed by the remote
copy, so a burst of remote Events about one object is one reconcile.
"""


from __future__ import annotations

import ipaddress
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Iterable, Mapping, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.runtime import kinds
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.runtime.manager import Synced
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from kube_offload.views import metadata as _meta
from vkubelet.shared import events as vk_events
from vkubelet.reflection import forge as f, settings as s
from vkubelet.shared import names as n
from vkubelet.reflection.caches import owned_selector, shared_informer
from vkubelet.reflection.events import YOUNG_EVENT_SECONDS, event_age_seconds, write_local_event
from vkubelet.reflection.forge import event_fingerprint, event_count, event_time
from vkubelet.reflection.policy import should_reflect
from vkubelet.reflection.reflector import ReflectionLoop, is_terminating
from vkubelet.reflection.settings import EVENTS
from vkubelet.shared.origin import origin_key
from vkubelet.shared.trim import trim_event

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

# --- the forge (pure): the local Event to write, from the remote ones ------------------------------
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


def _mask_address(match: re.Match[str]) -> str:
    """The match masked if its address group is a real IP address (a v4 candidate has no
    colon, a v6 one has colons, so one parser serves both patterns), else as written."""
    try:
        ipaddress.ip_address(match.group(1))
    except ValueError:
        return match.group(0)
    return MASK_ADDRESS


def _mask_node(match: re.Match[str]) -> str:
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


def copied(event: Mapping[str, Any]) -> bool:
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


def aggregate(events: Iterable[Mapping[str, Any]], sanitize: Callable[[str], str]) -> dict[tuple[str, str, str], Aggregate]:
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
    local_obj: Mapping[str, Any],
    api_kind: Resource,
    *,
    count: int,
    host: str,
    component: str,
    reporting_controller: str,
) -> dict[str, Any]:
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


# --- the reflector ------------------------------------------------------------
# Index of the remote Events by the object they are about (kind/namespace/name).
BY_INVOLVED: Final = "by-involved"
# Everything events.py does not watch: in practice Services, claims, Ingresses (what else
# has Events in a twin namespace is rare, and dropped by the key function).
FIELD_SELECTOR: Final = f"involvedObject.kind!=Pod,involvedObject.kind!={c.SHADOWPOD_KIND}"
# Local Events (and local objects' budgets) remembered; the oldest are forgotten first
# (forgetting one costs at most one patch that changes nothing, or one early write).
_REMEMBERED = 4096

log = logging.getLogger("kube_offload.vkubelet.reflection.object_events")


def by_involved(event: dict[str, Any]) -> list[str]:
    involved = event.get("involvedObject") or {}
    namespace = involved.get("namespace") or _meta(event).get("namespace")
    if not (namespace and involved.get("name") and involved.get("kind")):
        return []
    return [f"{involved['kind']}/{namespace}/{involved['name']}"]


@dataclass
class _Kind:
    """The caches of one reflected type whose Events come back."""

    resource: str
    api_kind: Resource
    remote: MultiNamespaceInformer
    local: MultiNamespaceInformer


def _bounded_put(store: OrderedDict[str, Any], key: str, value: object) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > _REMEMBERED:
        store.popitem(last=False)


class ObjectEventReflector(ReflectionLoop):
    resource = EVENTS

    def __init__(self, context: "LoopContext") -> None:
        super().__init__(context, name=f"reflect-{EVENTS}-objects", logger=log)
        informers = context.informers
        self._informers = informers
        self._local = Kube(informers.local_client)
        self.events = shared_informer(informers, "remote", EVENTS, kinds.EVENTS, field_selector=FIELD_SELECTOR, transform=trim_event)
        self.events.add_indexer(BY_INVOLVED, by_involved)
        # Kind (involvedObject.kind) -> the caches of the type.
        self._kinds: dict[str, _Kind] = {}
        for resource, api_kind in KINDS.items():
            if not self.settings.reflection.enabled(resource):
                continue  # nothing of that type is reflected: no copy has Events
            # The same informers as the reflector of that type (shared by name).
            remote = shared_informer(
                informers, "remote", resource, api_kind, label_selector=owned_selector(self._local_id, resource)
            )
            local = self.scope.local_informer(resource, api_kind)
            self._kinds[api_kind.kind] = _Kind(resource, api_kind, remote, local)
        self._lock = threading.Lock()
        # Local Event name -> (what was written, when: monotonic seconds).
        self._written: OrderedDict[str, tuple[tuple[Any, ...], float]] = OrderedDict()
        # Local Event name -> remote Event UID -> count (remember_counts).
        self._counts: OrderedDict[str, dict[str, int]] = OrderedDict()
        # Local object UID -> its budget of new local Events.
        self._budgets: OrderedDict[str, TokenBucket] = OrderedDict()
        self.controller.watch(self.events, self._key)

    # --- the Loop protocol -------------------------------------------------------------------
    def informers(self) -> list[Synced]:
        caches: list[Synced] = [self.scope, self.events]
        for kind in self._kinds.values():
            caches += [kind.remote, kind.local]
        return [*caches, *self._twins.informers()]

    def resync_all(self) -> None:
        for involved in set(self.events.index_values(BY_INVOLVED)):
            if involved.split("/", 1)[0] in self._kinds:
                self.controller.enqueue(involved)

    # --- reconcile ---------------------------------------------------------------------------
    def _key(self, event: dict[str, Any]) -> str | None:
        """``Kind/namespace/name`` of the remote object the Event is about, if it is of a
        kind whose reflection runs."""
        # The watches are scoped to the twins; a twin that stopped being usable delivers
        # its Events as deletions, which need no copy.
        namespace = _meta(event).get("namespace")
        if not namespace or namespace not in self._informers.twin_namespaces():
            return None
        involved = by_involved(event)
        return involved[0] if involved and involved[0].split("/", 1)[0] in self._kinds else None

    def reconcile(self, key: str) -> None:
        kind_name, _, remote_key = key.partition("/")
        kind = self._kinds.get(kind_name)
        if kind is None:
            return
        resource = kind.resource
        events = self.events.by_index(BY_INVOLVED, key)
        if not events:
            return
        copy = kind.remote.get(remote_key)
        if copy is None:
            # An Event can arrive before the copy it is about reaches our cache.
            if min(event_age_seconds(e) for e in events) < YOUNG_EVENT_SECONDS:
                raise Requeue(2.0, "the object of the Event is not in the cache yet")
            return
        if not f.is_owned(copy, self._local_id, resource):
            return
        copy_uid = _meta(copy).get("uid")
        events = [e for e in events if (e.get("involvedObject") or {}).get("uid") in (None, "", copy_uid)]
        local_key = origin_key(copy)
        local = kind.local.get(local_key) if local_key else None
        if local is None or is_terminating(local) or not should_reflect(local, self.policy):
            return
        twin_namespace = str(_meta(copy).get("namespace") or "")
        local_namespace = str(_meta(local).get("namespace") or "")

        def sanitize(message: str) -> str:
            return sanitize_message(message, twin_namespace=twin_namespace, local_namespace=local_namespace)

        logger = ObjectLogger(log, {"key": f"{kind.api_kind.kind} {local_key}"})
        waits = [self._converge(group, local, kind.api_kind, logger) for group in aggregate(events, sanitize).values()]
        wait = min((w for w in waits if w > 0), default=0.0)
        if wait > 0:
            raise Requeue(wait, "local Events of this object are rate-bounded")

    def _converge(self, group: Aggregate, local: Mapping[str, Any], api_kind: Resource, logger: logging.LoggerAdapter[logging.Logger]) -> float:
        """Write the local Event of ``group`` if it changed and its bounds allow; else
        the seconds until they do (0: nothing to wait for)."""
        meta = _meta(local)
        name = local_object_event_name(
            str(meta.get("name") or ""), api_kind.kind, str(meta.get("uid") or ""), group.type, group.reason, group.message
        )
        now = time.monotonic()
        with self._lock:
            counts = remember_counts(self._counts.get(name, {}), group.counts)
            _bounded_put(self._counts, name, counts)
            written = self._written.get(name)
        desired = forge_object_event(
            group, local, api_kind, count=sum(counts.values()), host=self.settings.node_name,
            component=vk_events.COMPONENT, reporting_controller=vk_events.REPORTING_CONTROLLER,
        )
        fingerprint = event_fingerprint(desired)
        if written is not None and written[0] == fingerprint:
            return 0.0
        budget: TokenBucket | None = None
        if written is not None:
            wait = update_wait(written[1], now)
        else:
            owner = str(meta.get("uid") or "")
            with self._lock:
                budget = self._budgets.get(owner)
                if budget is None:
                    budget = TokenBucket(NEW_EVENT_BURST, NEW_EVENT_REFILL_SECONDS, now)
                _bounded_put(self._budgets, owner, budget)
                wait = budget.wait(now)
                if wait == 0:
                    budget.take(now)
        if wait > 0:
            return wait
        if not write_local_event(self._local, desired, logger, resource=self.resource):
            return 0.0
        with self._lock:
            _bounded_put(self._written, name, (fingerprint, now))
        return 0.0
