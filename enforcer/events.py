"""Kubernetes Events about ShadowPods (core/v1 Events, as ``kubectl describe shp`` shows).

Repeats of one event (same object, type, reason and message - a creation that keeps
failing on a quota, say) are folded into one Event whose ``count`` grows, as the Go
event recorder does, so a retry loop cannot flood the namespace. Recording never fails
the caller: an Event is a courtesy, losing one must not stop a pod from being created.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import OrderedDict
from typing import Mapping

from enforcer.api import EnforcerApi
from kube_offload.kube import ApiError

NORMAL = "Normal"
WARNING = "Warning"

COMPONENT = "kube-offload-enforcer"
REPORTING_CONTROLLER = "kube-offload.io/enforcer"

# Reasons, written once so docs and tests can refer to them.
REASON_CREATED = "PodCreated"
REASON_RECREATED = "PodRecreated"
REASON_CREATE_FAILED = "PodCreationFailed"
REASON_DELETED_EXTRA = "ExtraPodDeleted"
REASON_NAME_TAKEN = "PodNameTaken"
REASON_INVALID = "InvalidShadowPod"

# A repeat within this window bumps the existing Event; later ones start a new Event.
AGGREGATE_SECONDS = 600.0
MAX_REMEMBERED = 4096

log = logging.getLogger("kube_offload.enforcer.events")


class EventRecorder:
    def __init__(self, api: EnforcerApi, *, instance: str | None = None, clock=time.time) -> None:
        self._api = api
        self._instance = instance or socket.gethostname()
        self._clock = clock
        self._lock = threading.Lock()
        # (namespace, uid, type, reason, message) -> (event name, count, first seen)
        self._seen: OrderedDict[tuple[str, str, str, str, str], tuple[str, int, float]] = OrderedDict()

    def record(self, obj: Mapping, event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        key = (namespace, str(meta.get("uid") or meta.get("name")), event_type, reason, message)
        now = self._clock()
        with self._lock:
            previous = self._seen.get(key)
        try:
            if previous is not None and now - previous[2] < AGGREGATE_SECONDS:
                name, count, first = previous
                try:
                    self._api.patch_event(namespace, name, {"count": count + 1, "lastTimestamp": _ts(now)})
                    self._remember(key, (name, count + 1, first))
                    return
                except ApiError as exc:
                    if not exc.not_found:
                        raise
            created = self._api.create_event(namespace, self._event(obj, namespace, event_type, reason, message, now))
            name = str((created.get("metadata") or {}).get("name") or "")
            if name:
                self._remember(key, (name, 1, now))
        except ApiError as exc:
            log.warning("[%s/%s] could not record event %s: %s", namespace, meta.get("name"), reason, exc)

    def _remember(self, key: tuple[str, str, str, str, str], value: tuple[str, int, float]) -> None:
        with self._lock:
            self._seen[key] = value
            self._seen.move_to_end(key)
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)

    def _event(self, obj: Mapping, namespace: str, event_type: str, reason: str, message: str, now: float) -> dict:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "object")
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name,
            "namespace": namespace,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        return {
            "apiVersion": "v1",
            "kind": "Event",
            # The Go recorder's naming: unique per occurrence, sorted by time.
            "metadata": {"name": f"{name[:230]}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "firstTimestamp": _ts(now),
            "lastTimestamp": _ts(now),
            "count": 1,
        }


def _ts(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
