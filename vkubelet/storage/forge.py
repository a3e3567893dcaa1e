"""Pure decisions and objects of the virtual storage class (docs/storage.md).

Kubernetes' own protocol is followed, so that the stock PV controller and scheduler do
the binding:

1. the claim's class has ``volumeBindingMode: WaitForFirstConsumer``: the scheduler picks
   a node for the claim's first pod and writes it into the claim's
   ``volume.kubernetes.io/selected-node`` annotation, then waits for the claim to bind;
2. a provisioner (here: the virtual kubelet of that virtual node, or the physical
   delegate) creates a PersistentVolume whose ``claimRef`` names the claim (UID
   included), and records itself in ``pv.kubernetes.io/provisioned-by``;
3. the PV controller binds the two (``spec.volumeName``, the ``pv.kubernetes.io/
   bind-completed`` annotations, both phases Bound); the scheduler checks the volume's
   node affinity against the node it chose and binds the pod.

The stand-in volume's node affinity is what keeps a claim where its data is: a pod that
uses it can only ever be scheduled to that virtual node (or, for a local volume, to the
physical nodes the real volume allows).
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.resources import parse_quantity
from kube_offload.views import metadata as _meta, spec as _spec
from vkubelet.shared.claims import ANNOTATION_SELECTED_NODE, storage_class_of

ANNOTATION_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
HOSTNAME_LABEL = "kubernetes.io/hostname"
STORAGE = "storage"


def claim_key(claim: Mapping[str, Any]) -> str:
    return f"{_meta(claim).get('namespace')}/{_meta(claim).get('name')}"


def is_terminating(obj: Mapping[str, Any] | None) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def standin_name(claim: Mapping[str, Any]) -> str:
    """``pvc-<claim uid>``: the name the PV controller and external provisioners give a
    volume provisioned for a claim; deterministic, so a restart finds what it made."""
    return f"pvc-{_meta(claim).get('uid')}"


def requested_storage(claim: Mapping[str, Any]) -> str:
    return str(((_spec(claim).get("resources") or {}).get("requests") or {}).get(STORAGE) or "")


def bound_capacity(claim: Mapping[str, Any] | None) -> str:
    """The capacity of a Bound claim (its volume's), or ""."""
    status = (claim or {}).get("status") or {}
    if status.get("phase") != "Bound":
        return ""
    return str((status.get("capacity") or {}).get(STORAGE) or "")


def larger(a: str, b: str) -> str:
    if not a:
        return b
    if not b:
        return a
    return a if parse_quantity(a) >= parse_quantity(b) else b


def claim_ref(claim: Mapping[str, Any]) -> dict[str, Any]:
    meta = _meta(claim)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }


def claim_ref_key(volume: Mapping[str, Any]) -> str | None:
    ref = _spec(volume).get("claimRef") or {}
    if ref.get("namespace") and ref.get("name"):
        return f"{ref['namespace']}/{ref['name']}"
    return None


def reclaim_policy(storage_class: Mapping[str, Any] | None) -> str:
    return (storage_class or {}).get("reclaimPolicy") or "Delete"


def claim_is_gone(volume: Mapping[str, Any], claim: Mapping[str, Any] | None) -> bool:
    """The claim a stand-in volume was made for no longer exists (deleted, or replaced by
    another claim of the same name: a StatefulSet's claim deleted and made again)."""
    ref = _spec(volume).get("claimRef") or {}
    return claim is None or bool(ref.get("uid")) and ref.get("uid") != _meta(claim).get("uid")


# --- claims of a virtual node ---------------------------------------------------------------------
def virtual_node_affinity(node_name: str) -> dict[str, Any]:
    """Only that virtual node: its hostname AND the virtual-node type (a physical node
    that happened to carry the same hostname label is still refused)."""
    return {
        "required": {
            "nodeSelectorTerms": [{
                "matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": [node_name]},
                    {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]},
                ]
            }]
        }
    }


def remote_standin(
    claim: Mapping[str, Any],
    remote_claim: Mapping[str, Any],
    *,
    node_name: str,
    cluster_id: str,
    storage_class: Mapping[str, Any] | None,
    slice_name: str = "",
) -> dict[str, Any]:
    """The local PersistentVolume that stands for ``remote_claim`` (the reflected copy of
    ``claim`` in cluster ``cluster_id``), pre-bound to ``claim``; ``slice_name``: the slice
    whose node ``node_name`` is ("" for the peering's own), labelled so that each process
    selects only its own stand-ins (:func:`standin_selector`).

    Its capacity is the remote volume's once the remote claim is bound, the request until
    then; its source is a CSI volume of a driver no node has (REMOTE_VOLUME_CSI_DRIVER),
    so no kubelet can mount it: the data is in the other cluster."""
    remote_meta = _meta(remote_claim)
    remote_key = f"{remote_meta.get('namespace')}/{remote_meta.get('name')}"
    spec = _spec(claim)
    capacity = larger(bound_capacity(remote_claim), requested_storage(claim))
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": standin_name(claim),
            "labels": {c.LABEL_VOLUME_LOCATION: c.VOLUME_LOCATION_REMOTE, c.LABEL_CLUSTER_ID: cluster_id,
                       **({c.LABEL_SLICE: slice_name} if slice_name else {})},
            "annotations": {ANNOTATION_PROVISIONED_BY: c.STORAGE_PROVISIONER, c.ANNOTATION_REMOTE_CLAIM: remote_key},
        },
        "spec": {
            "capacity": {STORAGE: capacity},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "storageClassName": storage_class_of(claim),
            "persistentVolumeReclaimPolicy": reclaim_policy(storage_class),
            "claimRef": claim_ref(claim),
            "nodeAffinity": virtual_node_affinity(node_name),
            "csi": {
                "driver": c.REMOTE_VOLUME_CSI_DRIVER,
                "volumeHandle": f"{cluster_id}/{remote_key}",
                "volumeAttributes": {
                    "clusterID": cluster_id,
                    "namespace": str(remote_meta.get("namespace") or ""),
                    "claim": str(remote_meta.get("name") or ""),
                },
            },
        },
    }


def standin_selector(cluster_id: str, slice_name: str = "") -> str:
    """The stand-ins of one virtual node of peering ``cluster_id``: its slice ``slice_name``'s,
    or ("") the peering's own node's (no slice label: those made before slices had stand-ins
    too), so no process releases or grows another's."""
    node = f"{c.LABEL_SLICE}={slice_name}" if slice_name else f"!{c.LABEL_SLICE}"
    return f"{c.LABEL_VOLUME_LOCATION}={c.VOLUME_LOCATION_REMOTE},{c.LABEL_CLUSTER_ID}={cluster_id},{node}"


def capacity_update(volume: Mapping[str, Any], remote_claim: Mapping[str, Any] | None) -> str | None:
    """The new capacity of a remote stand-in when its remote claim grew (expansion done
    remotely), else None."""
    current = str((_spec(volume).get("capacity") or {}).get(STORAGE) or "")
    remote = bound_capacity(remote_claim)
    if remote and (not current or parse_quantity(remote) > parse_quantity(current)):
        return remote
    return None


# --- claims of a physical node (the physical delegate) -------------------------------------------
def real_claim(claim: Mapping[str, Any], *, local_class: str, namespace: str, node_name: str) -> dict[str, Any]:
    """The claim of the real local class that provisions a volume for ``claim`` on
    physical node ``node_name``: in the storage namespace, named by the claim's UID (a
    claim deleted and made again under the same name gets a new volume), the node
    selected as the scheduler would (the real class is WaitForFirstConsumer too, most
    often)."""
    meta = _meta(claim)
    spec = _spec(claim)
    body_spec: dict[str, Any] = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {STORAGE: requested_storage(claim)}},
        "volumeMode": spec.get("volumeMode") or "Filesystem",
        "storageClassName": local_class,
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": str(meta.get("uid")),
            "namespace": namespace,
            "labels": {c.LABEL_VOLUME_LOCATION: c.VOLUME_LOCATION_LOCAL},
            "annotations": {
                ANNOTATION_SELECTED_NODE: node_name,
                c.ANNOTATION_ORIGIN_NAMESPACE: str(meta.get("namespace")),
                c.ANNOTATION_ORIGIN_NAME: str(meta.get("name")),
                c.ANNOTATION_ORIGIN_UID: str(meta.get("uid")),
            },
        },
        "spec": body_spec,
    }


def real_claim_origin(real: Mapping[str, Any]) -> str | None:
    annotations = _meta(real).get("annotations") or {}
    namespace, name = annotations.get(c.ANNOTATION_ORIGIN_NAMESPACE), annotations.get(c.ANNOTATION_ORIGIN_NAME)
    return f"{namespace}/{name}" if namespace and name else None


def not_virtual_term() -> dict[str, Any]:
    return {"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}


def physical_affinity(real_volume: Mapping[str, Any]) -> dict[str, Any]:
    """The real volume's node affinity with "not a virtual node" ANDed into every term
    (a real volume without affinity: every physical node)."""
    terms = (((_spec(real_volume).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")) or [{}]
    merged = []
    for term in terms:
        term = dict(term)
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), not_virtual_term()]
        merged.append(term)
    return {"required": {"nodeSelectorTerms": merged}}


# The fields of a PersistentVolumeSpec that say where the data is and how to mount it.
_NOT_SOURCE = {
    "capacity", "accessModes", "claimRef", "persistentVolumeReclaimPolicy", "storageClassName",
    "mountOptions", "volumeMode", "nodeAffinity", "volumeAttributesClassName",
}


def volume_source(volume: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in _spec(volume).items() if k not in _NOT_SOURCE}


def local_standin(claim: Mapping[str, Any], real: Mapping[str, Any], real_volume: Mapping[str, Any], *, storage_class: Mapping[str, Any] | None) -> dict[str, Any]:
    """The volume bound to ``claim`` that mounts the same storage as ``real_volume`` (the
    volume the real class provisioned for the ``real`` claim): its source and node
    affinity, its capacity, our class and claim."""
    real_meta = _meta(real)
    spec = _spec(real_volume)
    body: dict[str, Any] = {
        **volume_source(real_volume),
        "capacity": dict(spec.get("capacity") or {STORAGE: requested_storage(claim)}),
        "accessModes": list(_spec(claim).get("accessModes") or spec.get("accessModes") or ["ReadWriteOnce"]),
        "volumeMode": spec.get("volumeMode") or "Filesystem",
        "storageClassName": storage_class_of(claim),
        "persistentVolumeReclaimPolicy": reclaim_policy(storage_class),
        "claimRef": claim_ref(claim),
        "nodeAffinity": physical_affinity(real_volume),
    }
    if spec.get("mountOptions"):
        body["mountOptions"] = list(spec["mountOptions"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": standin_name(claim),
            "labels": {c.LABEL_VOLUME_LOCATION: c.VOLUME_LOCATION_LOCAL},
            "annotations": {
                ANNOTATION_PROVISIONED_BY: c.STORAGE_PROVISIONER,
                c.ANNOTATION_REAL_CLAIM: f"{real_meta.get('namespace')}/{real_meta.get('name')}",
            },
        },
        "spec": body,
    }


def real_claim_key_of(volume: Mapping[str, Any]) -> tuple[str, str] | None:
    value = (_meta(volume).get("annotations") or {}).get(c.ANNOTATION_REAL_CLAIM) or ""
    namespace, sep, name = value.partition("/")
    return (namespace, name) if sep and namespace and name else None
