"""Events remote -> local: what the remote cluster says about an offloaded pod (the
remote scheduler's Scheduled, the kubelet's Pulled/Started/BackOff, the enforcer's
notes on the ShadowPod) shows on the local pod, in `kubectl describe pod` and
`kubectl get events`.

The remote Events watched are those about Pods and ShadowPods (field-selected) in our
usable twin namespaces only (namespace-scoped watches: the consumer may read Events
nowhere else on the provider); one is copied only if it says something new (not the enforcer's routine PodCreated:
shared/remote_events.py) and its object is one of ours (origin label) standing for a local pod that
still exists with the UID it was made for. The copy's name is derived from the remote
Event's UID (names.local_event_name), so a restart or a resync finds the copy it made
and at most patches its count (create, and patch on AlreadyExists: no read); remote Events are never deleted locally (they expire
with the local cluster's event TTL). The policy is read on the local pod.
"""


from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Mapping, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.remote_resources import is_ours
from kube_offload.runtime import kinds
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.times import parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.shared import events as vk_events
from vkubelet.reflection import metrics
from vkubelet.shared import names as n
from vkubelet.reflection.caches import shared_informer
from vkubelet.reflection.forge import event_count, event_fingerprint, event_time
from vkubelet.shared.remote_events import says_something_new
from vkubelet.reflection.policy import Policy, should_reflect
from kube_offload.reasons import REASON_REFLECTION_FAILED
from vkubelet.reflection.settings import EVENTS
from vkubelet.shared.origin import origin_key, origin_uid
from vkubelet.shared.trim import trim_event

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

# --- the forge (pure): the local Event to write, from the remote ones ------------------------------
def forge_local_event(remote_event: Mapping[str, Any], local_pod: Mapping[str, Any], *, host: str, component: str, reporting_controller: str) -> dict[str, Any]:
    """The local copy of a remote Event about the remote pod (or ShadowPod) standing for
    ``local_pod``: same type, reason, message and count, about the local pod; named after
    the remote Event's UID so it is made once."""
    pod_meta = _meta(local_pod)
    involved_remote = remote_event.get("involvedObject") or {}
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": pod_meta.get("namespace"),
        "name": pod_meta.get("name"),
        "uid": pod_meta.get("uid"),
    }
    if involved_remote.get("kind") == "Pod" and involved_remote.get("fieldPath"):
        involved["fieldPath"] = involved_remote["fieldPath"]
    source = remote_event.get("source") or {}
    remote_source = source.get("component") or remote_event.get("reportingComponent") or ""
    first = event_time(remote_event, "firstTimestamp", "eventTime")
    last = event_time(remote_event, "lastTimestamp", "eventTime") or first
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": n.local_event_name(str(pod_meta.get("name") or ""), str(_meta(remote_event).get("uid") or "")),
            "namespace": pod_meta.get("namespace"),
            "annotations": {n.ANNOTATION_REMOTE_SOURCE: str(remote_source)},
        },
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": remote_event.get("type") or "Normal",
        "reason": remote_event.get("reason") or "",
        "message": str(remote_event.get("message") or "")[:1024],
        "count": event_count(remote_event),
        "source": {"component": component, "host": host},
        "reportingComponent": reporting_controller,
        "reportingInstance": host,
    }
    if first:
        event["firstTimestamp"] = first
    if last:
        event["lastTimestamp"] = last
    return event


# --- the reflector ------------------------------------------------------------
# An Event may arrive before the pod it is about reaches our cache; a young one is
# looked at again for this long.
YOUNG_EVENT_SECONDS = 60.0
_REMEMBERED = 4096

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
        self.remote_pods = informers.remote_pods()
        self.shadowpods = informers.remote_shadowpods()
        self.local_pods = informers.local_pods()
        self._lock = threading.Lock()
        # Local Event name -> what was last written (or found) there.
        self._written: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
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
            for event in informer.list():
                key = self._key_if_relevant(event)
                if key:
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
        meta = event.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    def _event(self, key: str) -> dict[str, Any] | None:
        return self.pod_events.get(key) or self.shadowpod_events.get(key)

    def reconcile(self, key: str) -> None:
        event = self._event(key)
        if event is None or not self._in_twin(event):
            return
        meta = event.get("metadata") or {}
        involved = event.get("involvedObject") or {}
        namespace = involved.get("namespace") or meta.get("namespace")
        cache = self.remote_pods if involved.get("kind") == "Pod" else self.shadowpods
        owner = cache.get(f"{namespace}/{involved.get('name')}")
        if owner is None:
            if event_age_seconds(event) < YOUNG_EVENT_SECONDS:
                raise Requeue(2.0, "the object of the Event is not in the cache yet")
            return
        if not is_ours(owner, self.settings.local_cluster_id):
            return
        if involved.get("uid") and (owner.get("metadata") or {}).get("uid") != involved["uid"]:
            return  # about an earlier object of that name
        local_key = origin_key(owner)
        pod = self.local_pods.get(local_key) if local_key else None
        if pod is None or (pod.get("metadata") or {}).get("uid") != origin_uid(owner):
            return
        if not should_reflect(pod, self.policy):
            return
        desired = forge_local_event(
            event,
            pod,
            host=self.settings.node_name,
            component=vk_events.COMPONENT,
            reporting_controller=vk_events.REPORTING_CONTROLLER,
        )
        self._write(desired, ObjectLogger(log, {"key": f"pod {local_key}"}))

    def _write(self, desired: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        name = desired["metadata"]["name"]
        fingerprint = event_fingerprint(desired)
        with self._lock:
            if self._written.get(name) == fingerprint:
                return
        if not write_local_event(self._local, desired, logger, resource=self.resource):
            return
        with self._lock:
            self._written[name] = fingerprint
            self._written.move_to_end(name)
            while len(self._written) > _REMEMBERED:
                self._written.popitem(last=False)


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
