"""The Kubernetes objects unit tests build again and again, in the shape the API server
returns them. Each builder takes the fields a test varies as keywords and leaves out
what it is not given, so a test states only what matters to it.

ShadowPods come from the product's own :func:`kube_offload.shadowpod.build_shadowpod`
(a test must not drift from what the vkubelet sends)."""

from __future__ import annotations

from typing import Any

from kube_offload import constants as c
from kube_offload.constants import LABEL_ORIGIN_CLUSTER_ID
from kube_offload.shadowpod import build_shadowpod

# The deletionTimestamp of an object being deleted (any past time will do).
DELETING_SINCE = "2026-01-01T00:00:00Z"


def container(name: str = "app", image: str = "nginx", *, requests: dict[str, Any] | None = None,
              limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """A container; ``resources`` only when requests or limits are given."""
    obj: dict[str, Any] = {"name": name, "image": image}
    resources = {key: value for key, value in (("requests", requests), ("limits", limits)) if value is not None}
    if resources:
        obj["resources"] = resources
    return obj


def pod(name: str | None = "web", namespace: str = "ns", *, containers: list[Any] | None = None, spec: dict[str, Any] | None = None,
        phase: str | None = None, **meta: Any) -> dict[str, Any]:
    """A Pod: ``meta`` (uid, labels, resourceVersion, generateName, ...) beside its name
    (none when ``name`` is None, e.g. with generateName) and namespace; a spec only when
    ``containers`` or ``spec`` is given (``spec``'s keys after ``containers``, so they
    win); ``phase`` as its status."""
    metadata: dict[str, Any] = {"name": name} if name is not None else {}
    metadata.update(namespace=namespace, **meta)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    if containers is not None or spec is not None:
        obj["spec"] = {**({"containers": containers} if containers is not None else {}), **(spec or {})}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def shadowpod(name: str = "web", namespace: str = "ns", *, spec: dict[str, Any], pod_labels: dict[str, Any] | None = None,
              pod_annotations: dict[str, Any] | None = None, origin: str | None = None,
              origin_annotations: dict[str, Any] | None = None, phase: str | None = None, deleting: bool = False,
              **meta: Any) -> dict[str, Any]:
    """A ShadowPod for a pod of ``spec`` with ``pod_labels``/``pod_annotations``, ``origin``
    as its origin cluster label; ``meta`` (uid, resourceVersion, generation, finalizers,
    labels, ...) set over its own metadata; ``phase`` as its status; ``deleting``: a
    deletionTimestamp."""
    pod_metadata = {key: value for key, value in (("labels", pod_labels), ("annotations", pod_annotations))
                    if value is not None}
    obj = build_shadowpod(
        name=name,
        namespace=namespace,
        pod_metadata=pod_metadata,
        pod_spec=spec,
        origin_labels={LABEL_ORIGIN_CLUSTER_ID: origin} if origin is not None else None,
        origin_annotations=origin_annotations,
    )
    obj["metadata"].update(meta)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = DELETING_SINCE
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def node(name: str, labels: dict[str, Any] | None = None, conditions: list[Any] | None = None, *,
         allocatable: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Node: ``labels`` and ``status.conditions`` always present (empty by default),
    ``status.allocatable`` when given."""
    status: dict[str, Any] = {"conditions": conditions or []}
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "status": status}


def namespace(name: str = "demo", *, labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Namespace; ``labels``/``annotations`` only when given (an absent map and an
    empty one are different inputs to the policy parsers)."""
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def twin_request(name: str, tenant_namespace: str, local_namespace: str = "ns", *, cluster_id: str = "local",
                 phase: str = c.TWIN_PHASE_READY) -> dict[str, Any]:
    """A TwinNamespace request of consumer ``cluster_id`` in its tenant namespace, for the
    twin ``name`` of ``local_namespace``, in ``phase`` (Ready: the enforcer made the twin)."""
    return {
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {"name": name, "namespace": tenant_namespace, "resourceVersion": "1",
                     "labels": {c.LABEL_ORIGIN_CLUSTER_ID: cluster_id}},
        "spec": {"localNamespace": local_namespace},
        "status": {"phase": phase},
    }
