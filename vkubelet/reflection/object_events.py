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
from dataclasses import dataclass
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
from vkubelet.reflection.caches import owned_selector, shared_informer
from vkubelet.reflection.event_copies import (
    YOUNG_EVENT_SECONDS,
    Aggregate,
    CopyLedger,
    converge,
    event_age_seconds,
    event_type_and_reason,
    aggregate_event_name,
    forge_object_event,
)
from vkubelet.reflection.policy import should_reflect
from vkubelet.reflection.reflector import ReflectionLoop, is_terminating
from vkubelet.reflection.settings import EVENTS
from vkubelet.shared.origin import origin_key
from vkubelet.shared.provider_bounds import EVENT_MESSAGE_BYTES, truncate_utf8
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

MESSAGE_LIMIT: Final = EVENT_MESSAGE_BYTES

# Rate bounds (docs/reflection.md#events-of-services-claims-and-ingresses): a local Event
# already written is updated (its count) at most every 15 s (event_copies.py).
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
    :data:`MESSAGE_LIMIT` bytes. Deterministic: the same remote text always gives the
    same local text (the aggregation key)."""
    text = str(message or "")
    if twin_namespace and twin_namespace != local_namespace:
        text = re.sub(rf"(?<![a-z0-9.\-]){re.escape(twin_namespace)}(?![a-z0-9\-])", local_namespace, text)
    text = _UUID.sub(MASK_UID, text)
    text = _IPV4.sub(_mask_address, text)
    text = _IPV6.sub(_mask_address, text)
    text = _NODE.sub(_mask_node, text)
    return truncate_utf8(text, MESSAGE_LIMIT)


def copied(event: Mapping[str, Any]) -> bool:
    """Whether a remote Event about one of our remote copies is copied at all."""
    return bool(event.get("reason")) and event.get("reason") not in INTERNAL_REASONS


def aggregate(events: Iterable[Mapping[str, Any]], sanitize: Callable[[str], str]) -> dict[tuple[str, str, str], Aggregate]:
    """The remote Events about one remote copy, grouped by (type, reason, masked message);
    those not :func:`copied` left out."""
    groups: dict[tuple[str, str, str], Aggregate] = {}
    for event in events:
        kind = event_type_and_reason(event)
        if kind is None or not copied(event):
            continue
        key = (*kind, sanitize(str(event.get("message") or "")))
        group = groups.get(key)
        if group is None:
            group = groups[key] = Aggregate(*key)
        group.add(event)
    return groups


# --- the reflector ------------------------------------------------------------
# Index of the remote Events by the object they are about (kind/namespace/name).
BY_INVOLVED: Final = "by-involved"
# Everything events.py does not watch: in practice Services, claims, Ingresses (what else
# has Events in a twin namespace is rare, and dropped by the key function).
FIELD_SELECTOR: Final = f"involvedObject.kind!=Pod,involvedObject.kind!={c.SHADOWPOD_KIND}"
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
        # What was written, the counts behind it, each local object's budget of new ones.
        self._ledger = CopyLedger(NEW_EVENT_BURST, NEW_EVENT_REFILL_SECONDS)
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
        name = aggregate_event_name(local, api_kind.kind, group)

        def forge(count: int) -> dict[str, Any]:
            return forge_object_event(
                group, local, api_kind, count=count, host=self.settings.node_name,
                component=vk_events.COMPONENT, reporting_controller=vk_events.REPORTING_CONTROLLER,
            )

        return converge(self._ledger, self._local, name, group.counts, forge, owner=str(meta.get("uid") or ""),
                        logger=logger, resource=self.resource).wait
