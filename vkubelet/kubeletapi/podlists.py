"""``/pods`` and ``/runningpods/`` of the virtual node, shaped as a kubelet shapes them
(pure: the caller hands in the local pods bound to the node, from its informer, and for
``/runningpods/`` how to find each one's remote pod).

What a kubelet answers (``pkg/kubelet/server/server.go``, getPods / getRunningPods, both
JSON ``v1 PodList`` with ``kind``/``apiVersion`` on the list only, as Go encodes a list
whose items carry no TypeMeta):

* ``/pods``: every pod bound to the node as its pod manager holds it (the API objects the
  kubelet watches), terminated ones included until they are deleted. Here: the local pods
  whose ``spec.nodeName`` is the virtual node, from the vkubelet's pod informer, whole.
* ``/runningpods/``: the pods *the container runtime* has running, rebuilt from what the
  runtime knows (``kubecontainer.Pod.ToAPIPod``): only ``metadata.name``, ``namespace``
  and ``uid``, and ``spec.containers[]`` with ``name`` and ``image`` of the running
  containers; everything else empty. A virtual node has no runtime of its own: its
  "runtime" is the remote cluster. So a local pod bound to the node is listed when *its
  remote pod* (the one the kubelet API resolves for logs and exec: vkubelet/kubeletapi/
  resolver.py) shows a container running, with those containers; the image is the remote
  container status's ``image`` (what the runtime reports, as on a kubelet) or the local
  spec's when the status has none.

Why the remote pod and not the local pod's status: the status sync writes the local
status (Running, Ready) from the remote pod in the vkubelet's remote pod cache, and the
local pod informer sees that write only when its watch event comes back, some time
later. Listed from the local informer's copy, a pod the API server already shows Ready
could be missing from ``/runningpods/`` for that moment; a kubelet never shows a pod
Ready before its runtime lists it (virtual-kubelet's e2e suite checks exactly that,
docs/testing.md). Read from the same remote cache, every status the sync has written is
backed by a remote pod at least as new.

Differences from a kubelet's ``/runningpods/``, by construction: a pod whose sandbox runs
but whose containers have not started is listed by a kubelet with no containers and not
here (no sandbox is visible in a pod's status); the runtime's view is the vkubelet's
remote pod cache (as fresh as its watch), not a live runtime query; items are sorted by
namespace and name (a kubelet's order is the runtime's).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

JSON_CONTENT_TYPE = "application/json"
_TERMINAL = ("Succeeded", "Failed")


def _pod_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


def _sort_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def pod_list(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``/pods``: the pods as the informer holds them, without their own kind/apiVersion."""
    items = [{k: v for k, v in pod.items() if k not in ("kind", "apiVersion")} for pod in pods]
    return _pod_list(sorted(items, key=_sort_key))


def running_containers(pod: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"name", "image"}]`` of the containers ``runtime`` (the local ``pod``'s remote pod)
    shows running; none without a remote pod or once either side has finished."""
    if runtime is None or any(((p.get("status") or {}).get("phase")) in _TERMINAL for p in (pod, runtime)):
        return []
    spec_images = {c.get("name"): c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []}
    running = []
    for status in (runtime.get("status") or {}).get("containerStatuses") or []:
        if not ((status.get("state") or {}).get("running") is not None):
            continue
        name = str(status.get("name") or "")
        running.append({"name": name, "image": str(status.get("image") or spec_images.get(name) or "")})
    return running


def running_pod(pod: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The runtime-shaped pod, or None when nothing of it runs. The empty fields are
    spelt as Go writes an empty v1.Pod (``creationTimestamp: null``, ``resources: {}``,
    ``status: {}``) so a client decoding either gets the same object."""
    containers = running_containers(pod, runtime)
    if not containers:
        return None
    meta = pod.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "creationTimestamp": None,
        },
        "spec": {"containers": [{**c, "resources": {}} for c in containers]},
        "status": {},
    }


def running_pod_list(pods: Iterable[Mapping[str, Any]], runtime_of: Callable[[Mapping[str, Any]], Mapping[str, Any] | None]) -> dict[str, Any]:
    """``/runningpods/``: ``pods`` are the local pods bound to the node, ``runtime_of``
    gives each one's remote pod (None when it has none)."""
    items = [shaped for shaped in (running_pod(pod, runtime_of(pod)) for pod in pods) if shaped is not None]
    return _pod_list(sorted(items, key=_sort_key))


def encode(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document).encode("utf-8")
