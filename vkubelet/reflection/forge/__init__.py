"""The remote object reflection wants for a local one, and the checks around it (pure):
what every kind shares here, what differs in one module per kind beside it
(``configmaps``, ``secrets``, ``services``, ``endpointslices``, ``ingresses``, ``pvcs``,
``serviceaccounts`` for the pods' token Secrets, ``events`` for the remote Events copied
back), named as the reflector modules of vkubelet/reflection/ that use them.

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
from typing import Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.views import metadata as _meta
from vkubelet.ip_remapping import NO_REMAPPING, Remapping
from vkubelet.reflection import names as n

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_TOP_LEVEL_META = ("apiVersion", "kind", "metadata")


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
    local: Mapping, ctx: ForgeContext, *, name: str | None = None, drop_annotation: Callable[[str], bool] | None = None
) -> dict:
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


def is_owned(remote: Mapping, local_cluster_id: str, reflector: str) -> bool:
    """Written by this cluster's reflector of this type: the only remote objects a
    reflector ever updates or deletes."""
    labels = _meta(remote).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id and labels.get(n.LABEL_REFLECTOR) == reflector


# --- comparison and update ----------------------------------------------------------------------------
def _without(mapping: Mapping | None, foreign: Callable[[str], bool] | None) -> dict:
    return {k: v for k, v in (mapping or {}).items() if not (foreign and foreign(k))}


def is_up_to_date(desired: Mapping, current: Mapping, *, foreign_annotation: Callable[[str], bool] | None = None) -> bool:
    """Whether ``current`` (the remote object, as comparable: see the reflectors'
    ``remote_view``) already is ``desired``: labels equal, annotations equal bar those the
    remote side owns, every other top-level field but status equal (absent, null and
    empty alike). Both sides were defaulted by an API server, so equality is exact: a
    field someone added remotely is drift too."""
    dm, cm = _meta(desired), _meta(current)
    if (dm.get("labels") or {}) != (cm.get("labels") or {}):
        return False
    if _without(dm.get("annotations"), foreign_annotation) != _without(cm.get("annotations"), foreign_annotation):
        return False
    keys = (set(desired) | set(current)) - {*_TOP_LEVEL_META, "status"}
    return all((desired.get(key) or None) == (current.get(key) or None) for key in keys)


def update_body(desired: Mapping, current: Mapping, *, foreign_annotation: Callable[[str], bool] | None = None) -> dict:
    """What to PUT to turn ``current`` into ``desired``: desired's fields and labels and
    annotations on current's metadata (resourceVersion for optimistic concurrency,
    finalizers and owner references that remote controllers may have added, and the
    annotations the remote side owns)."""
    body = copy.deepcopy(dict(desired))
    meta = {k: copy.deepcopy(v) for k, v in _meta(current).items() if k != "managedFields"}
    annotations = dict(_meta(desired).get("annotations") or {})
    if foreign_annotation:
        annotations.update({k: v for k, v in (meta.get("annotations") or {}).items() if foreign_annotation(k)})
    meta["labels"] = dict(_meta(desired).get("labels") or {})
    meta["annotations"] = annotations
    body["metadata"] = meta
    return body


def copy_fields(source: Mapping, target: dict, keys: Iterable[str]) -> None:
    """Deep copies: a forged object must never share structure with the informer's cache."""
    for key in keys:
        if key in source and source[key] is not None:
            target[key] = copy.deepcopy(source[key])
