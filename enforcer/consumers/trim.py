"""What the enforcer's cluster-wide caches keep of each object (informer transforms).

The capacity summary needs every Node and every Pod of the provider, and the
TwinNamespace controller every Namespace; caching them whole would cost memory in
proportion to the cluster (a Pod is often several KiB, most of it managedFields, env and
volumes). Each transform keeps only the fields its readers use — for pods and nodes,
what :func:`kube_offload.remote_resources.summarize` reads — plus the resourceVersion
the informer compares on a re-list. Pure.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.runtime.interning import interned

_OUR_ANNOTATION_PREFIX = f"{c.DOMAIN}/"


def _pick(source: Mapping[str, Any] | None, *keys: str) -> dict[str, Any]:
    source = source or {}
    return {k: source[k] for k in keys if source.get(k) is not None}


def _metadata(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return _pick(obj.get("metadata"), "name", "namespace", "uid", "resourceVersion", "deletionTimestamp", *keys)


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Name, namespace, the origin label (the summary's "is it the consumer's own?"),
    deletionTimestamp, nodeName, the requests of containers and init containers (with the
    init containers' restartPolicy: sidecars count differently), pod-level resources,
    overhead and the phase; strings interned (kube_offload/runtime/interning.py)."""
    metadata = _metadata(pod)
    origin = ((pod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID)
    if origin is not None:
        metadata["labels"] = {c.LABEL_ORIGIN_CLUSTER_ID: origin}
    source = pod.get("spec") or {}
    spec = _pick(source, "nodeName", "overhead")
    if source.get("resources") is not None:
        spec["resources"] = _pick(source["resources"], "requests")
    for field in ("containers", "initContainers"):
        containers = source.get(field)
        if isinstance(containers, list):
            spec[field] = [_trim_container(item) for item in containers]
        elif containers is not None:
            spec[field] = containers  # malformed: keep it so pod_requests says so, as before
    trimmed: dict[str, Any] = {"metadata": metadata, "spec": spec}
    phase = (pod.get("status") or {}).get("phase")
    if phase is not None:
        trimmed["status"] = {"phase": phase}
    # Every pod of the provider is held: one copy of each repeated key and value.
    result: dict[str, Any] = interned(trimmed)
    return result


def _trim_container(container: object) -> object:
    if not isinstance(container, Mapping):
        return container
    trimmed = _pick(container, "name", "restartPolicy")
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        trimmed["resources"] = _pick(resources, "requests")
    elif resources is not None:
        trimmed["resources"] = resources
    return trimmed


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Name, the labels (the virtual-node type label; the pools of resource slices select
    nodes by any label: kube_offload/pools.py), unschedulable, allocatable, the addresses
    (which no consumer EndpointSlice may name: enforcer/admission/endpointslice_policy.py)
    and the conditions' type and status (heartbeat times and messages change every few
    seconds). Nodes are few: their labels cost little next to the pods'."""
    metadata = _metadata(node, "labels")
    status = node.get("status") or {}
    trimmed_status: dict[str, Any] = _pick(status, "allocatable")
    addresses = status.get("addresses")
    if isinstance(addresses, list):
        trimmed_status["addresses"] = [_pick(a, "type", "address") for a in addresses if isinstance(a, Mapping)]
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        trimmed_status["conditions"] = [_pick(cond, "type", "status") for cond in conditions if isinstance(cond, Mapping)]
    return {"metadata": metadata, "spec": _pick(node.get("spec"), "unschedulable"), "status": trimmed_status}


def trim_namespace(namespace: dict[str, Any]) -> dict[str, Any]:
    """Name, UID, labels (tenant, origin, managed-by, Pod Security), our own annotations
    (twin-request, twin-of) and the phase."""
    metadata = _metadata(namespace, "labels")
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    ours = {k: v for k, v in annotations.items() if k.startswith(_OUR_ANNOTATION_PREFIX)}
    if ours:
        metadata["annotations"] = ours
    trimmed: dict[str, Any] = {"metadata": metadata}
    phase = (namespace.get("status") or {}).get("phase")
    if phase is not None:
        trimmed["status"] = {"phase": phase}
    return trimmed


def content_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether two trimmed versions of an object differ in anything but resourceVersion
    (a node's heartbeat, a pod's condition: nothing the summary reads)."""
    if old is None:
        return True
    return _without_version(old) != _without_version(new)


def _without_version(obj: Mapping[str, Any]) -> dict[str, Any]:
    copy = dict(obj)
    copy["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return copy
