"""Kubernetes Events in the local cluster about the objects the vkubelet serves (what
`kubectl describe pod` shows under Events: why a pod is not running remotely).

A reconcile that keeps failing would record the same Event on every retry; repeats of
one (object, type, reason, message) are folded into one Event whose ``count`` grows, and
written at most once per ``min_interval`` seconds. Recording never raises: an Event is a
courtesy and losing one must not stop a reconcile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Callable, Mapping

from kubernetes import client

from kube_offload.kube import ApiError, call_json

NORMAL = "Normal"
WARNING = "Warning"

COMPONENT = "kube-offload-vkubelet"
REPORTING_CONTROLLER = "kube-offload.io/vkubelet"

# Reasons (docs/virtual-kubelet.md lists them).
REASON_OFFLOADED = "Offloaded"
REASON_OFFLOADING_FAILED = "OffloadingFailed"
REASON_REMOTE_UNSCHEDULABLE = "RemoteUnschedulable"
REASON_TWIN_CONFLICT = "TwinNamespaceConflict"
REASON_POLICY_INVALID = "InvalidOffloadingPolicy"

_MERGE_PATCH = "application/merge-patch+json"
_MAX_REMEMBERED = 4096
_AGGREGATE_SECONDS = 600.0

log = logging.getLogger("kube_offload.vkubelet.events")


class EventRecorder:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        host: str,
        min_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = client.CoreV1Api(api_client)
        self._host = host
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [event name, count, first recorded, last written]
        self._seen: OrderedDict[tuple, list] = OrderedDict()

    def normal(self, obj: Mapping, reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping, reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)

    def record(self, obj: Mapping, event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        # Events of cluster-scoped objects (namespaces) live in "default", as client-go does it.
        namespace = str(meta.get("namespace") or "default")
        key = (namespace, str(meta.get("uid") or meta.get("name")), event_type, reason, message)
        now = self._clock()
        with self._lock:
            previous = self._seen.get(key)
            if previous is not None and now - previous[3] < self._min_interval:
                previous[1] += 1  # counted, written with the next repeat after the interval
                return
        try:
            if previous is not None and now - previous[2] < _AGGREGATE_SECONDS:
                name, count = previous[0], previous[1] + 1
                try:
                    call_json(
                        self._api.patch_namespaced_event,
                        name,
                        namespace,
                        {"count": count, "lastTimestamp": _timestamp(now)},
                        _content_type=_MERGE_PATCH,
                    )
                    self._remember(key, [name, count, previous[2], now])
                    return
                except ApiError as exc:
                    if not exc.not_found:
                        raise
            created = call_json(
                self._api.create_namespaced_event, namespace, self._event(obj, namespace, event_type, reason, message, now)
            )
            name = str((created.get("metadata") or {}).get("name") or "")
            if name:
                self._remember(key, [name, 1, now, now])
        except ApiError as exc:
            log.warning("[%s/%s] could not record event %s: %s", namespace, meta.get("name"), reason, exc)
        except Exception:  # a courtesy must never break the caller
            log.exception("[%s/%s] could not record event %s", namespace, meta.get("name"), reason)

    def _remember(self, key: tuple, value: list) -> None:
        with self._lock:
            self._seen[key] = value
            self._seen.move_to_end(key)
            while len(self._seen) > _MAX_REMEMBERED:
                self._seen.popitem(last=False)

    def _event(self, obj: Mapping, namespace: str, event_type: str, reason: str, message: str, now: float) -> dict:
        meta = obj.get("metadata") or {}
        involved = {
            "apiVersion": obj.get("apiVersion") or "v1",
            "kind": obj.get("kind") or "Pod",
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if meta.get("namespace"):
            involved["namespace"] = meta["namespace"]
        stamp = _timestamp(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name') or 'object'}.", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "type": event_type,
            "reason": reason,
            # The API caps an Event message at 1 KiB.
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT, "host": self._host},
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self._host,
        }


def _timestamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
