"""An index over a remote informer: local pod key -> the remote objects standing for it.

Remote ShadowPods and pods say which local pod they stand for in their origin
annotations; the pod loop needs "every ShadowPod of local pod ns/name" (there may be
several after a restart, a namespace-mapping change or a reused name), and a scan of the
whole cache per reconcile would be quadratic in a large cluster.
"""

from __future__ import annotations

import threading
from typing import Callable

from kube_offload.runtime.informer import DELETED, Informer
from kube_offload.runtime.kube import object_key
from vkubelet.translation import origin_key


class OriginIndex:
    def __init__(self, informer: Informer, accept: Callable[[dict], bool] = lambda _obj: True) -> None:
        self._informer = informer
        self._accept = accept
        self._lock = threading.Lock()
        self._by_origin: dict[str, set[str]] = {}
        self._origin_of: dict[str, str] = {}
        informer.add_handler(self._on_event)

    def get(self, local_key: str) -> list[dict]:
        """The cached remote objects of ``local_key`` (copies of nothing: read only)."""
        with self._lock:
            keys = list(self._by_origin.get(local_key, ()))
        found = []
        for key in keys:
            obj = self._informer.get(key)
            if obj is not None and self._accept(obj) and origin_key(obj) == local_key:
                found.append(obj)
        return found

    def local_keys(self) -> list[str]:
        with self._lock:
            return list(self._by_origin)

    def _on_event(self, kind: str, _old: dict | None, new: dict) -> None:
        key = object_key(new)
        origin = origin_key(new) if kind != DELETED and self._accept(new) else None
        with self._lock:
            previous = self._origin_of.pop(key, None)
            if previous is not None:
                members = self._by_origin.get(previous)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del self._by_origin[previous]
            if origin is not None:
                self._origin_of[key] = origin
                self._by_origin.setdefault(origin, set()).add(key)
