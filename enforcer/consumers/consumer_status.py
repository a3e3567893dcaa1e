"""What a Consumer's status should say (pure): the enforcer-owned half of the Consumer.

``used``/``shadowPods`` and ``twinNamespaces`` come from :class:`enforcer.consumers.quota.ConsumerUsage`
(the same sum the ShadowPod webhook checks against the quota, pods counted until they are
gone; twins by the namespaces' enforcer-written labels), ``capacity`` from
:func:`kube_offload.remote_resources.summarize` in the shape
:func:`kube_offload.remote_resources.encode_capacity_status` writes: anonymous free shapes,
no node names or addresses (the consumer's virtual kubelet reads it back instead of
listing this cluster's nodes and pods).
"""

from __future__ import annotations

from datetime import datetime, timezone
from kube_offload.times import format_time
from typing import Any, Mapping

from kube_offload.consumers import Drain, drain_phase
from kube_offload.remote_resources import RemoteResources, encode_capacity_status
from kube_offload.resources import MILLI, ResourceList, format_resource_list

# Set on every write, so it is left out when deciding whether anything changed.
UPDATED = "updated"


def desired_status(
    consumer: Mapping[str, Any],
    *,
    used: ResourceList,
    twin_namespaces: list[str],
    capacity: RemoteResources,
    drain: Drain | None = None,
    shadowpods_left: int = 0,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The status without its timestamp (see :func:`stamped`); ``drain`` the consumer's
    spec.drain as read, ``shadowpods_left`` its ShadowPod objects still there."""
    status: dict[str, Any] = {
        "used": format_resource_list(used),
        "shadowPods": used.get("pods", 0) // MILLI,
        "twinNamespaces": list(twin_namespaces),
        "capacity": encode_capacity_status(capacity),
    }
    if drain is not None:
        moment = now or datetime.now(timezone.utc)
        status["drain"] = {"phase": drain_phase(drain, moment, shadowpods_left), "deadline": format_time(drain.deadline)}
    generation = (consumer.get("metadata") or {}).get("generation")
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def status_changed(consumer: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing ``desired`` would change anything but the timestamp."""
    current = {k: v for k, v in (consumer.get("status") or {}).items() if k != UPDATED}
    return current != {k: v for k, v in desired.items() if k != UPDATED}


def stamped(status: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    moment = now or datetime.now(timezone.utc)
    return {**status, UPDATED: format_time(moment)}
