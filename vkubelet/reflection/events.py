"""Events remote -> local: what the remote cluster says about an offloaded pod (the
remote scheduler's Scheduled, the kubelet's Pulled/Started/BackOff, the enforcer's
notes on the ShadowPod) shows on the local pod, in `kubectl describe pod` and
`kubectl get events`.

The remote Events watched are those about Pods and ShadowPods (field-selected) in our
usable twin namespaces only (namespace-scoped watches: the consumer may read Events
nowhere else on the provider); one is copied only if it says something new (not the
enforcer's routine PodCreated: shared/remote_events.py) and its object is one of ours
(origin label) standing for a local pod that still exists with the UID it was made for.
The policy is read on the local pod.

Whoever administers the provider writes those Events, so they cross bounded, as the
Events a kubelet writes about its own pods are (client-go's EventCorrelator): the forge
part of this module and event_copies.py, docs/reflection.md#events.

- **Aggregated.** The work queue is keyed by the remote pod (its Events and its
  ShadowPod's, one reconcile for a burst). One local Event per local pod, container, type,
  reason and message, its count the sum of the remote counts behind it, named after that
  key (a restart finds it and patches it, never makes a second); remote Events of one type
  and reason that differ only in their message stand alone up to nine messages, and from
  the tenth on are one Event "(combined from similar events): <latest message>", as
  client-go's EventAggregator does.
- **Bounded.** A local Event is updated at most every 15 s; a new one spends a token of
  its pod's budget (client-go's spam filter: 25 at once, then here one a minute) and of
  the remote cluster's (a kubelet's default event budget: 100 at once, 50 a second). One
  that a budget refuses is dropped: counted in
  ``kube_offload_reflection_events_dropped_total{bound}``, said once per pod in the log
  (the remote's budget: at most once a minute); a later remote Event of the same key is
  written when the budget allows again.
- **Sized.** Reason and message as an Event's API bounds them (128 and 1,024 bytes),
  the container's fieldPath kept only when it names a container of the local pod.
"""


from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from typing import Any, Final, Iterable, Mapping, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.remote_resources import is_ours
from kube_offload.runtime import kinds
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.event_correlator import COMBINED_PREFIX, SIMILAR_MAX, SPAM_BURST
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.views import metadata as _meta
from vkubelet.reflection import metrics
from vkubelet.reflection.caches import shared_informer
from vkubelet.reflection.event_copies import (
    BOUND_OBJECT,
    YOUNG_EVENT_SECONDS,
    Aggregate,
    CopyLedger,
    TokenBucket,
    converge,
    event_age_seconds,
    event_type_and_reason,
    aggregate_event_name,
    forge_object_event,
)
from vkubelet.reflection.policy import Policy, should_reflect
from vkubelet.reflection.settings import EVENTS
from vkubelet.shared import events as vk_events
from vkubelet.shared.origin import origin_key, origin_uid
from vkubelet.shared.provider_bounds import EVENT_MESSAGE_BYTES, truncate_utf8
from vkubelet.shared.remote_events import says_something_new
from vkubelet.shared.trim import trim_event

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

# --- the forge (pure): the local Events of one pod, from the remote ones ------------------------------
# A pod's budget of new local Events: client-go's spam filter's burst (a kubelet's Events
# about one pod come through it), then one a minute (as for reflected objects' Events:
# the pod's remote Events come from several sources, the kubelet's, the scheduler's and the
# enforcer's, which a remote spam filter budgets each on its own).
POD_EVENT_BURST: Final = SPAM_BURST
POD_EVENT_REFILL_SECONDS: Final = 60.0
# The remote cluster's budget, shared by all its pods: a kubelet's default event budget
# (KubeletConfiguration eventBurst 100, eventRecordQPS 50).
REMOTE_EVENT_BURST: Final = 100
REMOTE_EVENT_REFILL_SECONDS: Final = 1 / 50
# Dropped Events of the remote's budget are logged at most this often (the metric has each).
REMOTE_DROP_LOG_SECONDS: Final = 60.0

# What a copy's fieldPath may say: a container of the local pod (the kubelet's form).
_CONTAINER_PATH = re.compile(r"^spec\.(?:containers|initContainers|ephemeralContainers)\{([^}]*)\}$")


def container_names(pod: Mapping[str, Any]) -> frozenset[str]:
    spec = pod.get("spec") or {}
    return frozenset(
        str(container.get("name"))
        for field in ("containers", "initContainers", "ephemeralContainers")
        for container in spec.get(field) or []
        if isinstance(container, Mapping)
    )


def copied_field_path(event: Mapping[str, Any], containers: frozenset[str]) -> str:
    """The remote Event's fieldPath if it names a container of the local pod, else none."""
    involved = event.get("involvedObject") or {}
    path = str(involved.get("fieldPath") or "")
    match = _CONTAINER_PATH.match(path) if involved.get("kind") == "Pod" else None
    return path if match and match.group(1) in containers else ""


def pod_event_groups(events: Iterable[Mapping[str, Any]], containers: frozenset[str]) -> list[Aggregate]:
    """The local Events that the remote Events about one offloaded pod (its remote pod's
    and its ShadowPod's) make, for a local pod with ``containers``: one per container,
    type, reason and message (texts bounded); per type and reason, the tenth distinct
    message and those after it (in the order they first happened) combined into one, its
    message the latest of them behind :data:`COMBINED_PREFIX`."""
    groups: dict[tuple[str, str, str, str], Aggregate] = {}
    for event in events:
        kind = event_type_and_reason(event)
        if kind is None or not says_something_new(event):
            continue
        message = truncate_utf8(str(event.get("message") or ""), EVENT_MESSAGE_BYTES)
        key = (*kind, message, copied_field_path(event, containers))
        group = groups.get(key)
        if group is None:
            group = groups[key] = Aggregate(kind[0], kind[1], message, field_path=key[3])
        group.add(event)
    by_reason: dict[tuple[str, str], list[Aggregate]] = {}
    for group in groups.values():
        by_reason.setdefault((group.type, group.reason), []).append(group)
    result: list[Aggregate] = []
    for (type_, reason), similar in by_reason.items():
        similar.sort(key=lambda g: (g.first or "", g.message, g.field_path))
        alone: list[Aggregate] = []
        combined: list[Aggregate] = []
        messages: set[str] = set()
        for group in similar:
            if group.message in messages or len(messages) < SIMILAR_MAX - 1:
                messages.add(group.message)
                alone.append(group)
            else:
                combined.append(group)
        result += alone
        if combined:
            latest = max(combined, key=lambda g: (g.last or "", g.message))
            merged = Aggregate(type_, reason, truncate_utf8(COMBINED_PREFIX + latest.message, EVENT_MESSAGE_BYTES),
                               combined=True)
            for group in combined:
                merged.merge(group)
            result.append(merged)
    return result


def pod_event_name(pod: Mapping[str, Any], group: Aggregate) -> str:
    return aggregate_event_name(pod, kinds.PODS.kind, group)


def involved_key(event: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the remote pod (or its ShadowPod, of the same name) an Event
    is about: the work queue's key."""
    involved = event.get("involvedObject") or {}
    namespace = involved.get("namespace") or _meta(event).get("namespace")
    return f"{namespace}/{involved['name']}" if namespace and involved.get("name") else None


# --- the reflector ------------------------------------------------------------
BY_INVOLVED: Final = "by-involved"

log = logging.getLogger("kube_offload.vkubelet.reflection.events")


class EventReflector:
    resource = EVENTS

    def __init__(self, context: "LoopContext") -> None:
        self.settings = context.settings
        self.name = f"reflect-{self.resource}"
        resource_settings = self.settings.reflection.of(self.resource)
        self.policy: Policy = resource_settings.policy
        self._twins = context.twins
        informers = context.informers
        self._informers = informers
        self._local = Kube(informers.local_client)
        self.pod_events = shared_informer(
            informers, "remote", EVENTS, kinds.EVENTS, field_selector="involvedObject.kind=Pod",
            transform=trim_event,
        )
        self.shadowpod_events = shared_informer(
            informers, "remote", EVENTS, kinds.EVENTS, field_selector=f"involvedObject.kind={c.SHADOWPOD_KIND}",
            transform=trim_event,
        )
        for informer in (self.pod_events, self.shadowpod_events):
            informer.add_indexer(BY_INVOLVED, lambda event: [key] if (key := involved_key(event)) else [])
        self.remote_pods = informers.remote_pods()
        self.shadowpods = informers.remote_shadowpods()
        self.local_pods = informers.local_pods()
        self._ledger = CopyLedger(
            POD_EVENT_BURST, POD_EVENT_REFILL_SECONDS, drop=True,
            shared=TokenBucket(REMOTE_EVENT_BURST, REMOTE_EVENT_REFILL_SECONDS, time.monotonic()),
        )
        self._log_lock = threading.Lock()
        # Pods whose dropped Events were said in the log (by UID; bounded, oldest out).
        self._said: OrderedDict[str, None] = OrderedDict()
        self._remote_said_at = float("-inf")
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=resource_settings.workers, logger=log)
        self.controller.watch(self.pod_events, self._key_if_relevant)
        self.controller.watch(self.shadowpod_events, self._key_if_relevant)

    # --- the Loop protocol -------------------------------------------------------------------
    def informers(self) -> list[Cache]:
        return [
            self.pod_events, self.shadowpod_events, self.remote_pods, self.shadowpods, self.local_pods,
            *self._twins.informers(),
        ]

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def resync_all(self) -> None:
        for informer in (self.pod_events, self.shadowpod_events):
            for key in set(informer.index_values(BY_INVOLVED)):
                if key.split("/", 1)[0] in self._informers.twin_namespaces():
                    self.controller.enqueue(key)

    # --- reconcile ---------------------------------------------------------------------------
    def _in_twin(self, event: Mapping[str, Any]) -> bool:
        namespace = (event.get("metadata") or {}).get("namespace")
        return bool(namespace) and namespace in self._informers.twin_namespaces()

    def _key_if_relevant(self, event: dict[str, Any]) -> str | None:
        # The watches are scoped to the twins already; a twin that stopped being usable
        # delivers its Events as deletions, which need no copy.
        if not self._in_twin(event) or not says_something_new(event):
            return None
        return involved_key(event)

    def _events_of_pod(self, key: str) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The remote Events behind ``key`` (the remote pod's and the ShadowPod's), by the
        local pod they are about (its UID): (the local pod, its Events). Events whose
        object is not ours, an earlier object of that name, or stands for no local pod
        are left out; raises Requeue while a young Event's object is not cached yet."""
        by_pod: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        for informer, owners in ((self.pod_events, self.remote_pods), (self.shadowpod_events, self.shadowpods)):
            events = [e for e in informer.by_index(BY_INVOLVED, key) if self._in_twin(e)]
            if not events:
                continue
            owner = owners.get(key)
            if owner is None:
                if min(event_age_seconds(e) for e in events) < YOUNG_EVENT_SECONDS:
                    raise Requeue(2.0, "the object of the Event is not in the cache yet")
                continue
            if not is_ours(owner, self.settings.local_cluster_id):
                continue
            owner_uid = _meta(owner).get("uid")
            local_key = origin_key(owner)
            pod = self.local_pods.get(local_key) if local_key else None
            if pod is None or _meta(pod).get("uid") != origin_uid(owner) or not should_reflect(pod, self.policy):
                continue
            # Not about an earlier object of that name.
            mine = [e for e in events if (e.get("involvedObject") or {}).get("uid") in (None, "", owner_uid)]
            entry = by_pod.setdefault(str(_meta(pod).get("uid")), (pod, []))
            entry[1].extend(mine)
        return by_pod

    def reconcile(self, key: str) -> None:
        waits = []
        for uid, (pod, events) in self._events_of_pod(key).items():
            logger = ObjectLogger(log, {"key": f"pod {_meta(pod).get('namespace')}/{_meta(pod).get('name')}"})
            for group in pod_event_groups(events, container_names(pod)):
                waits.append(self._converge(group, pod, uid, logger))
        wait = min((w for w in waits if w > 0), default=0.0)
        if wait > 0:
            raise Requeue(wait, "local Events of this pod are rate-bounded")

    def _converge(self, group: Aggregate, pod: Mapping[str, Any], uid: str, logger: logging.LoggerAdapter[logging.Logger]) -> float:
        """Write the local Event of ``group`` if it changed and its bounds allow; else the
        seconds until they do (0: nothing to wait for, or dropped)."""
        name = pod_event_name(pod, group)

        def forge(count: int) -> dict[str, Any]:
            return forge_object_event(
                group, pod, kinds.PODS, count=count, host=self.settings.node_name,
                component=vk_events.COMPONENT, reporting_controller=vk_events.REPORTING_CONTROLLER,
            )

        decision = converge(self._ledger, self._local, name, group.counts, forge, owner=uid, logger=logger,
                            resource=self.resource)
        if decision.dropped:
            self._dropped(decision.dropped, decision.bound, uid, logger)
        return decision.wait

    def _dropped(self, count: int, bound: str, uid: str, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Count what a budget dropped; say it once per pod (the remote's budget: at most
        once a minute, whichever pod it was)."""
        metrics.dropped_events(bound, count)
        now = time.monotonic()
        with self._log_lock:
            if bound == BOUND_OBJECT:
                if uid in self._said:
                    return
                self._said[uid] = None
                while len(self._said) > 4096:
                    self._said.popitem(last=False)
                why = (f"the pod's budget ({POD_EVENT_BURST} new Events at once, then one every "
                       f"{POD_EVENT_REFILL_SECONDS:.0f}s) is spent; said once per pod")
            else:
                if now - self._remote_said_at < REMOTE_DROP_LOG_SECONDS:
                    return
                self._remote_said_at = now
                why = (f"the remote cluster's budget ({REMOTE_EVENT_BURST} new Events at once, then "
                       f"{1 / REMOTE_EVENT_REFILL_SECONDS:.0f} a second, all pods together) is spent; "
                       f"said at most every {REMOTE_DROP_LOG_SECONDS:.0f}s")
        logger.warning("dropped %d remote Event(s) about this pod: %s; every one is counted in "
                       "kube_offload_reflection_events_dropped_total", count, why)
