"""What a PersistentVolumeClaim says of its class and of the node the scheduler chose for
it (pure): read by the claims reflection (vkubelet/reflection/pvcs.py), which leaves the
virtual storage class's claims alone, and by the virtual storage class itself
(vkubelet/storage/), which provisions them."""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload.views import metadata as _meta, spec as _spec

ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"
LEGACY_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def storage_class_of(claim: Mapping[str, Any]) -> str:
    """The claim's class (the legacy annotation counts, as for the PV controller)."""
    return _spec(claim).get("storageClassName") or (_meta(claim).get("annotations") or {}).get(LEGACY_CLASS_ANNOTATION) or ""


def is_virtual_claim(claim: Mapping[str, Any] | None, virtual_class: str) -> bool:
    return bool(claim) and bool(virtual_class) and storage_class_of(claim) == virtual_class  # type: ignore[arg-type]


def selected_node(claim: Mapping[str, Any]) -> str:
    return (_meta(claim).get("annotations") or {}).get(ANNOTATION_SELECTED_NODE) or ""
