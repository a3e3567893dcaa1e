"""What every reflected kind's forge shares (pure): the metadata of every reflected
object, the ownership check, copying fields, and the Event helpers both Event reflectors
and the cache trimmer use. Each kind's own forge sits with its reflector in one module
per kind (vkubelet/reflection/``configmaps``, ``secrets``, ``services``,
``endpointslices``, ``ingresses``, ``pvcs``, ``serviceaccounts`` for the pods' token
Secrets, ``events`` and ``object_events`` for the remote Events copied back).

Every ``forge_*`` takes the local object as the API serves it (a dict) and a
:class:`ForgeContext`, and returns the desired remote object, or None when this object is
not reflected by design. A local object that must not be reflected because of a conflict
the user can fix raises :class:`Unreflectable` (the reflector turns it into an Event).

What every reflected object gets (:func:`forge_metadata`): the local labels plus the
origin label and the reflector label; the local annotations (minus kubectl's
last-applied copy) plus the origin namespace and name; nothing else of the local
metadata (UIDs, owner references, finalizers and managed fields belong to the local
cluster).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.times import format_time, parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.shared.ip_remapping import NO_REMAPPING, Remapping
from vkubelet.shared import names as n

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class Unreflectable(Exception):
    """A local object that cannot be reflected as it stands; the message says why."""


@dataclass(frozen=True)
class ForgeContext:
    local_cluster_id: str
    # The twin namespace the object goes to.
    remote_namespace: str
    # The LABEL_REFLECTOR value: the resource type reflecting it.
    reflector: str
    # The virtual node: local endpoints of pods bound to it are the remote pods themselves.
    virtual_node_name: str = ""
    # Local StorageClass -> remote one (see ReflectionSettings.storage_classes).
    storage_classes: Mapping[str, str] = field(default_factory=dict)
    # Local pod addresses -> as the remote cluster reaches them (--local-pod-cidr-remapped).
    endpoint_addresses: Remapping = NO_REMAPPING


# --- metadata -------------------------------------------------------------------------------
def forge_metadata(
    local: Mapping[str, Any], ctx: ForgeContext, *, name: str | None = None, drop_annotation: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    meta = _meta(local)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[c.LABEL_ORIGIN_CLUSTER_ID] = ctx.local_cluster_id
    labels[n.LABEL_REFLECTOR] = ctx.reflector
    annotations = {
        str(k): str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if k != LAST_APPLIED and not (drop_annotation and drop_annotation(k))
    }
    annotations[c.ANNOTATION_ORIGIN_NAMESPACE] = str(meta.get("namespace") or "")
    annotations[c.ANNOTATION_ORIGIN_NAME] = str(meta.get("name") or "")
    return {
        "name": name or str(meta.get("name") or ""),
        "namespace": ctx.remote_namespace,
        "labels": labels,
        "annotations": annotations,
    }


def is_owned(remote: Mapping[str, Any], local_cluster_id: str, reflector: str) -> bool:
    """Written by this cluster's reflector of this type: the only remote objects a
    reflector ever updates or deletes."""
    labels = _meta(remote).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id and labels.get(n.LABEL_REFLECTOR) == reflector


# --- copying -----------------------------------------------------------------------------------------
def copy_fields(source: Mapping[str, Any], target: dict[str, Any], keys: Iterable[str]) -> None:
    """Deep copies: a forged object must never share structure with the informer's cache."""
    for key in keys:
        if key in source and source[key] is not None:
            target[key] = copy.deepcopy(source[key])


# --- Events (the two Event reflectors, events.py and object_events.py, and the cache trimmer) ---
def event_time(event: Mapping[str, Any], *names: str) -> str | None:
    """The first of ``names`` the Event has, at second precision (what a core/v1 Event's
    timestamps carry; Events written through events.k8s.io have only eventTime)."""
    for name in names:
        moment = parse_time_or_none(event.get(name))
        if moment is not None:
            return format_time(moment)
    moment = parse_time_or_none((event.get("series") or {}).get("lastObservedTime")) or parse_time_or_none(
        _meta(event).get("creationTimestamp")
    )
    return format_time(moment) if moment is not None else None


def event_count(event: Mapping[str, Any]) -> int:
    return int(event.get("count") or (event.get("series") or {}).get("count") or 1)


def event_fingerprint(event: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a write of a local copy changes: equal fingerprints, nothing to write."""
    return tuple(event.get(k) for k in ("type", "reason", "message", "count", "lastTimestamp"))
