"""What the ShadowPod controller's informers keep of each object (their transforms).

The enforcer holds every ShadowPod of every consumer and every pod it made for them: at
10,000 ShadowPods the caches are most of its memory (docs/performance.md, "Provider:
10,000 ShadowPods of one consumer"). Pure.

- ShadowPods are kept whole (the reconcile builds the pod from the whole template, the
  admission ledger and the quota read spec and status), with their strings interned.
- Managed pods keep only what their readers use, strings interned:
  the reconcile and :func:`kube_offload.shadowpod.plan` (identity, owner references,
  labels and annotations: the applied-template record, the managed-by label; creation
  and deletion timestamps, the deletion grace period; ``restartPolicy``; the status,
  whole: phase, reason, message, conditions are mirrored into the ShadowPod);
  :func:`kube_offload.pod_updates.pod_patch` (the mutable spec fields: each container's
  name and image, ``activeDeadlineSeconds``, tolerations; the ephemeral containers' names:
  enforcer/shadowpods/debugging.py); the explicit grace of every
  deletion (``terminationGracePeriodSeconds``); the quota's
  :func:`kube_offload.resources.pod_requests` (containers' requests and init
  containers' ``restartPolicy``, pod-level resources, overhead, ``nodeName``); the
  EndpointSlice webhook's index by pod IP (the status).
  Dropped: volumes and mounts, env, ports, probes, security contexts, commands and the
  rest of the spec the API server defaulted, which no reader of this cache looks at.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload.runtime.interning import interned

# The pod spec fields a reader of the managed-pod cache uses (see the module docstring).
POD_SPEC_FIELDS = (
    "nodeName", "restartPolicy", "activeDeadlineSeconds", "tolerations", "overhead", "resources", "priority",
    "terminationGracePeriodSeconds",
)
CONTAINER_FIELDS = ("name", "image", "restartPolicy", "resources")
# Ephemeral containers by name: which of the template's the pod already has
# (enforcer/shadowpods/debugging.py).
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def keep_shadowpod(shadowpod: dict[str, Any]) -> dict[str, Any]:
    """The ShadowPod whole (managedFields are already gone), its strings interned."""
    result: dict[str, Any] = interned(shadowpod)
    return result


def trim_managed_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with only what the readers of the managed-pod cache use, interned."""
    trimmed: dict[str, Any] = {k: pod[k] for k in ("apiVersion", "kind", "metadata", "status") if k in pod}
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        kept: dict[str, Any] = {k: spec[k] for k in POD_SPEC_FIELDS if spec.get(k) is not None}
        for field in CONTAINER_LISTS:
            containers = spec.get(field)
            if isinstance(containers, list):
                kept[field] = [_container(item) for item in containers]
            elif containers is not None:
                kept[field] = containers  # malformed: kept so its readers say so, as before
        trimmed["spec"] = kept
    result: dict[str, Any] = interned(trimmed)
    return result


def _container(container: object) -> object:
    if not isinstance(container, Mapping):
        return container
    return {k: container[k] for k in CONTAINER_FIELDS if k in container}
