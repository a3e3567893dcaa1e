"""Kubernetes Events (core/v1) recorded by our controllers: what `kubectl describe` shows.

Repeats of one (object, type, reason, message) are folded into one Event whose ``count``
grows, as the Go event recorder does, so a retry loop cannot flood a namespace; with
``min_interval`` a repeat is written at most that often (counted meanwhile). Recording
never raises: an Event is a courtesy and losing one must not stop a reconcile.

Each component keeps its own reasons and wraps :class:`EventRecorder` with its name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping, Protocol

from kubernetes import client

from kube_offload.runtime.kube import ApiError, call_json

NORMAL = "Normal"
WARNING = "Warning"

# A repeat within this window bumps the existing Event; later ones start a new Event.
AGGREGATE_SECONDS = 600.0
MAX_REMEMBERED = 4096
_MERGE_PATCH = "application/merge-patch+json"

log = logging.getLogger("kube_offload.runtime.events")


class EventSink(Protocol):
    def create_event(self, namespace: str, event: dict) -> dict: ...

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict: ...


class CoreV1EventSink:
    """Events through the official client's CoreV1Api (raw JSON in and out)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = client.CoreV1Api(api_client)

    def create_event(self, namespace: str, event: dict) -> dict:
        return call_json(self._api.create_namespaced_event, namespace, event)

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return call_json(self._api.patch_namespaced_event, name, namespace, patch, _content_type=_MERGE_PATCH)


class EventRecorder:
    def __init__(
        self,
        sink: EventSink,
        *,
        component: str,
        reporting_controller: str,
        instance: str,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sink = sink
        self._component = component
        self._reporting_controller = reporting_controller
        self._instance = instance
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
            if previous is not None and now - previous[2] < AGGREGATE_SECONDS:
                name, count = previous[0], previous[1] + 1
                try:
                    self._sink.patch_event(namespace, name, {"count": count, "lastTimestamp": timestamp(now)})
                    self._remember(key, [name, count, previous[2], now])
                    return
                except ApiError as exc:
                    if not exc.not_found:
                        raise
            created = self._sink.create_event(namespace, self.event(obj, namespace, event_type, reason, message, now))
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
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)

    def event(self, obj: Mapping, namespace: str, event_type: str, reason: str, message: str, now: float) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "object")
        involved = {
            "apiVersion": obj.get("apiVersion") or "v1",
            "kind": obj.get("kind") or "Pod",
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        stamp = timestamp(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            # The Go recorder's naming: unique per occurrence, sortable by time.
            "metadata": {"name": f"{name[:230]}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "type": event_type,
            "reason": reason,
            # The API caps an Event message at 1 KiB.
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self._component, "host": self._instance},
            "reportingComponent": self._reporting_controller,
            "reportingInstance": self._instance,
        }


def timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
