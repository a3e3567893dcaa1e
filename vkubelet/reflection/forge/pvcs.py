"""The remote PersistentVolumeClaim for a local one (pure): the claim as the user wrote
it, for the remote cluster to provision its own volume; and, since a claim's spec is
immutable but for its requests, what is applied over an existing claim.
"""

from __future__ import annotations

import copy
from typing import Mapping

from kube_offload.views import metadata as _meta
from vkubelet.reflection.forge import ForgeContext, forge_metadata

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


def pvc_apply_body(desired: Mapping, current: Mapping | None) -> dict:
    """What to apply for claim ``desired`` over the remote claim ``current`` (None: none
    yet). A claim's spec is immutable but for its requests (expansion): once the claim
    exists, every other spec field is applied as the remote claim has it (the same value
    changes nothing, another would be refused and, for a claim, never "fixed" by
    recreating it), the requests and the metadata follow the local claim. What the
    remote cluster set itself (a bound volume, a defaulted class, the PV controller's
    annotations) is never in what we apply, so it is left alone."""
    body = copy.deepcopy(dict(desired))
    if current is None:
        return body
    current_spec = current.get("spec") or {}
    spec = dict(body.get("spec") or {})
    for key in list(spec):
        if key != "resources" and key in current_spec:
            spec[key] = copy.deepcopy(current_spec[key])
    resources = {k: copy.deepcopy(v) for k, v in (current_spec.get("resources") or {}).items() if k != "requests"}
    requests = pvc_requests(desired)
    if requests:
        resources["requests"] = requests
    if resources:
        spec["resources"] = resources
    body["spec"] = spec
    return body
