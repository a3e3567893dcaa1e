"""The origin marks: what says, on every remote object of ours, which local object it
stands for (pure). A ShadowPod and its pod carry the origin label (the local cluster's id,
and the slice's name for a slice's pod) and three origin annotations (namespace, name and
UID of the local pod); reflected objects carry the same annotations. Written by the pod
translation (vkubelet/pods/translation.py), read by every loop that maps a remote object
back to its local one: the informer index BY_ORIGIN (indexes.py), the pod loop, the
kubelet API's resolver, the reflectors and the virtual storage class. The names of the
marks are the contract (kube_offload/constants.py)."""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import offload_chain


def origin_labels(local_cluster_id: str, slice_name: str = "") -> dict[str, str]:
    """The labels on a ShadowPod and its pod template. ``slice_name``: the slice whose
    virtual node the pod is bound to (docs/slices.md); the provider applies that slice's
    pool patch and counts the pod against it, and each vkubelet of the peering selects
    its own ShadowPods by it."""
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: local_cluster_id}
    if slice_name:
        labels[c.LABEL_SLICE] = slice_name
    return labels


def origin_annotations(pod: Mapping[str, Any], chain: tuple[str, ...] = ()) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    annotations = {
        c.ANNOTATION_ORIGIN_NAMESPACE: str(meta.get("namespace") or ""),
        c.ANNOTATION_ORIGIN_NAME: str(meta.get("name") or ""),
        c.ANNOTATION_ORIGIN_UID: str(meta.get("uid") or ""),
    }
    # A chain of one (a pod made here) is the origin label already, which is how the
    # provider reads a missing chain: written only from the second hop on, so no running
    # ShadowPod of a single-hop peering is patched for it after an upgrade.
    if len(chain) > 1:
        annotations[c.ANNOTATION_OFFLOAD_CHAIN] = offload_chain.encode(chain)
    return annotations


def origin_key(obj: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the local pod a remote ShadowPod or pod stands for."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    namespace = annotations.get(c.ANNOTATION_ORIGIN_NAMESPACE)
    name = annotations.get(c.ANNOTATION_ORIGIN_NAME)
    return f"{namespace}/{name}" if namespace and name else None


def origin_uid(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_ORIGIN_UID)
