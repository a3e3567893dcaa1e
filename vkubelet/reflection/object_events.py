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

What crosses, how it is aggregated and the rate bounds are pure (forge/object_events.py):
one local Event per local object, type, reason and masked message, its count the sum of
the remote counts behind it; named after that key (restart safe: a restart finds it and
patches it, never makes a second); updated at most every 15 s, and at most 10 new local
Events per local object at once, then one a minute. The work queue is keyed by the remote
copy, so a burst of remote Events about one object is one reconcile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Mapping

from kube_offload import constants as c
from kube_offload.runtime import kinds
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.runtime.manager import Synced
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from kube_offload.views import metadata as _meta
from vkubelet import events as vk_events
from vkubelet.reflection import forge as f
from vkubelet.reflection.caches import owned_selector, shared_informer
from vkubelet.reflection.events import YOUNG_EVENT_SECONDS, event_age_seconds, write_local_event
from vkubelet.reflection.forge import object_events as oe
from vkubelet.reflection.forge.events import event_fingerprint
from vkubelet.reflection.policy import Policy, should_reflect
from vkubelet.reflection.reflector import is_terminating
from vkubelet.reflection.scope import offloaded_namespaces
from vkubelet.reflection.settings import EVENTS
from vkubelet.translation import origin_key
from vkubelet.trim import trim_event

if TYPE_CHECKING:
    from vkubelet.runner import LoopContext

# Index of the remote Events by the object they are about (kind/namespace/name).
BY_INVOLVED: Final = "by-involved"
# Everything events.py does not watch: in practice Services, claims, Ingresses (what else
# has Events in a twin namespace is rare, and dropped by the key function).
FIELD_SELECTOR: Final = f"involvedObject.kind!=Pod,involvedObject.kind!={c.SHADOWPOD_KIND}"
# Local Events (and local objects' budgets) remembered; the oldest are forgotten first
# (forgetting one costs at most one patch that changes nothing, or one early write).
_REMEMBERED = 4096

log = logging.getLogger("kube_offload.vkubelet.reflection.object_events")


def by_involved(event: dict) -> list[str]:
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


def _bounded_put(store: OrderedDict, key: str, value: object) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > _REMEMBERED:
        store.popitem(last=False)


class ObjectEventReflector:
    resource = EVENTS

    def __init__(self, context: "LoopContext") -> None:
        self.settings = context.settings
        self.name = f"reflect-{self.resource}-objects"
        resource_settings = self.settings.reflection.of(self.resource)
        self.policy: Policy = resource_settings.policy
        self._local_id = self.settings.local_cluster_id
        self._twins = context.twins
        informers = context.informers
        self._informers = informers
        self._local = Kube(informers.local_client)
        self.scope = offloaded_namespaces(informers, context.twins)
        self.events = shared_informer(informers, "remote", EVENTS, kinds.EVENTS, field_selector=FIELD_SELECTOR, transform=trim_event)
        self.events.add_indexer(BY_INVOLVED, by_involved)
        # Kind (involvedObject.kind) -> the caches of the type.
        self._kinds: dict[str, _Kind] = {}
        for resource, api_kind in oe.KINDS.items():
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
        self._written: OrderedDict[str, tuple[tuple, float]] = OrderedDict()
        # Local Event name -> remote Event UID -> count (oe.remember_counts).
        self._counts: OrderedDict[str, dict[str, int]] = OrderedDict()
        # Local object UID -> its budget of new local Events.
        self._budgets: OrderedDict[str, oe.TokenBucket] = OrderedDict()
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=resource_settings.workers, logger=log)
        self.controller.watch(self.events, self._key)

    # --- the Loop protocol -------------------------------------------------------------------
    def informers(self) -> list[Synced]:
        caches: list[Synced] = [self.scope, self.events]
        for kind in self._kinds.values():
            caches += [kind.remote, kind.local]
        return [*caches, *self._twins.informers()]

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def resync_all(self) -> None:
        for involved in set(self.events.index_values(BY_INVOLVED)):
            if involved.split("/", 1)[0] in self._kinds:
                self.controller.enqueue(involved)

    # --- reconcile ---------------------------------------------------------------------------
    def _key(self, event: dict) -> str | None:
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
            return oe.sanitize_message(message, twin_namespace=twin_namespace, local_namespace=local_namespace)

        logger = ObjectLogger(log, {"key": f"{kind.api_kind.kind} {local_key}"})
        waits = [self._converge(group, local, kind.api_kind, logger) for group in oe.aggregate(events, sanitize).values()]
        wait = min((w for w in waits if w > 0), default=0.0)
        if wait > 0:
            raise Requeue(wait, "local Events of this object are rate-bounded")

    def _converge(self, group: oe.Aggregate, local: Mapping, api_kind: Resource, logger: logging.LoggerAdapter) -> float:
        """Write the local Event of ``group`` if it changed and its bounds allow; else
        the seconds until they do (0: nothing to wait for)."""
        meta = _meta(local)
        name = oe.local_object_event_name(
            str(meta.get("name") or ""), api_kind.kind, str(meta.get("uid") or ""), group.type, group.reason, group.message
        )
        now = time.monotonic()
        with self._lock:
            counts = oe.remember_counts(self._counts.get(name, {}), group.counts)
            _bounded_put(self._counts, name, counts)
            written = self._written.get(name)
        desired = oe.forge_object_event(
            group, local, api_kind, count=sum(counts.values()), host=self.settings.node_name,
            component=vk_events.COMPONENT, reporting_controller=vk_events.REPORTING_CONTROLLER,
        )
        fingerprint = event_fingerprint(desired)
        if written is not None and written[0] == fingerprint:
            return 0.0
        budget: oe.TokenBucket | None = None
        if written is not None:
            wait = oe.update_wait(written[1], now)
        else:
            owner = str(meta.get("uid") or "")
            with self._lock:
                budget = self._budgets.get(owner)
                if budget is None:
                    budget = oe.TokenBucket(oe.NEW_EVENT_BURST, oe.NEW_EVENT_REFILL_SECONDS, now)
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
