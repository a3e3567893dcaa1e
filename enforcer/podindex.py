"""Managed pods grouped by the ShadowPod that controls them.

Fed by the pod informer's events (registered before the controller's own handler, so
the index is current when the key it enqueues is reconciled). It spares every reconcile
a scan of all managed pods in the cluster, which a resync would otherwise turn into a
quadratic amount of work.
"""

from __future__ import annotations

import threading

from kube_offload.runtime.informer import DELETED
from kube_offload.runtime.kube import object_key
from kube_offload.shadowpod import owner_key


class PodIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[str, set[str]] = {}
        self._owner_of: dict[str, str] = {}

    def on_event(self, event: str, old: dict | None, new: dict) -> None:
        """An Informer handler."""
        pod_key = object_key(new)
        owner = None if event == DELETED else owner_key(new)
        with self._lock:
            previous = self._owner_of.pop(pod_key, None)
            if previous is not None:
                members = self._by_owner.get(previous)
                if members is not None:
                    members.discard(pod_key)
                    if not members:
                        del self._by_owner[previous]
            if owner is not None:
                self._owner_of[pod_key] = owner
                self._by_owner.setdefault(owner, set()).add(pod_key)

    def pods_of(self, shadowpod_key: str) -> list[str]:
        """Keys of the pods whose controller is the ShadowPod ``shadowpod_key``."""
        with self._lock:
            return sorted(self._by_owner.get(shadowpod_key, ()))
