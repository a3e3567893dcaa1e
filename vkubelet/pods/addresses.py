"""The Warning a local pod gets when its provider reports an address outside the remote
pod range the peering configured (``--remote-pod-cidr``): the address is not shown
(status.py, provider_bounds.shown_pod_ips), and the pod says why, once.

Once per pod, not at every status write: the reconcile runs for every change of the
remote pod, and the provider decides how often that is. A restart of the virtual kubelet
tells it once more (the Event's count grows); a pod whose addresses come back inside the
range and leave it again is told again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping

from kube_offload.views import metadata as _meta

# Pods remembered (least recently told forgotten first: told again at worst).
MAX_REMEMBERED = 8192


def outside_message(outside: list[str], remote_pod_cidr: str, cluster_id: str) -> str:
    return (
        f"cluster {cluster_id} reports pod IP {', '.join(outside)}, outside --remote-pod-cidr={remote_pod_cidr}: "
        "not shown on this pod (a local client would reach whatever that address is)"
    )


class OutsideAddresses:
    """Which pods were told that an address of theirs is not shown (by UID)."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._max = max_remembered
        self._lock = threading.Lock()
        self._told: OrderedDict[str, None] = OrderedDict()

    def first_time(self, pod: Mapping[str, Any], outside: list[str]) -> bool:
        """Whether ``pod``, whose remote pod reports the addresses ``outside`` out of
        range (none: all in range), is to be told now."""
        uid = str(_meta(pod).get("uid") or "")
        with self._lock:
            if not outside:
                self._told.pop(uid, None)
                return False
            if uid in self._told:
                self._told.move_to_end(uid)
                return False
            self._told[uid] = None
            while len(self._told) > self._max:
                self._told.popitem(last=False)
            return True
