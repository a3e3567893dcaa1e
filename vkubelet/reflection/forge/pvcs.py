"""The remote PersistentVolumeClaim for a local one (pure): the claim as the user wrote
it, for the remote cluster to provision its own volume; and, since a claim's spec is
immutable but for its requests, how it is compared and updated.
"""

from __future__ import annotations

import copy
from typing import Mapping

from kube_offload.views import metadata as _meta
from vkubelet.reflection.forge import ForgeContext, forge_metadata, is_up_to_date, update_body

# Annotations the PersistentVolume controller and the scheduler write on claims: they
# describe one cluster's binding and provisioning, so they are neither copied from the
# local claim nor taken away from the remote one.
PVC_CONTROLLER_ANNOTATION_PREFIXES = ("pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/")
# Claim fields that name objects of the local cluster (a volume, a snapshot, a class of
# volume attributes, volumes chosen by label): meaningless remotely.
PVC_LOCAL_FIELDS = ("volumeName", "selector", "dataSource", "dataSourceRef", "volumeAttributesClassName")


def is_pvc_controller_annotation(key: str) -> bool:
    return key.startswith(PVC_CONTROLLER_ANNOTATION_PREFIXES)


def map_storage_class(name: str | None, mapping: Mapping[str, str]) -> str | None:
    """The remote StorageClass for local class ``name`` (None: the remote default)."""
    if not name:
        return None
    if name in mapping:
        return mapping[name] or None
    if "*" in mapping:
        return mapping["*"] or None
    return name


def forge_pvc(local: Mapping, ctx: ForgeContext) -> dict | None:
    """The claim as the user wrote it, for the remote cluster to provision its own
    volume: nothing that names a local volume or snapshot, the class mapped."""
    spec = copy.deepcopy(dict(local.get("spec") or {}))
    legacy_class = (_meta(local).get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class")
    storage_class = map_storage_class(spec.get("storageClassName") or legacy_class, ctx.storage_classes)
    for key in (*PVC_LOCAL_FIELDS, "storageClassName"):
        spec.pop(key, None)
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": forge_metadata(local, ctx, drop_annotation=is_pvc_controller_annotation),
        "spec": spec,
    }


def pvc_requests(pvc: Mapping) -> dict:
    return dict(((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {})


def pvc_update_body(desired: Mapping, current: Mapping) -> dict:
    """A claim's spec is immutable but for its requests (expansion): the remote spec is
    kept, the requests and the metadata follow the local claim."""
    body = update_body(desired, current, foreign_annotation=is_pvc_controller_annotation)
    spec = copy.deepcopy(dict(current.get("spec") or {}))
    requests = pvc_requests(desired)
    if requests:
        spec.setdefault("resources", {})["requests"] = requests
    body["spec"] = spec
    return body


def pvc_is_up_to_date(desired: Mapping, current: Mapping) -> bool:
    metadata_only = {"metadata": current.get("metadata")}
    if not is_up_to_date({"metadata": desired.get("metadata")}, metadata_only, foreign_annotation=is_pvc_controller_annotation):
        return False
    return pvc_requests(desired) == pvc_requests(current)
