"""Which remote pod a kubelet request for local pod ``ns/name`` is about.

Only a pod bound to this virtual node is served, and only through a remote pod of ours
(origin label = our local cluster id) whose origin annotations name that very local pod
(namespace, name and UID). Reading the origin annotations rather than recomputing the
twin namespace keeps this right whatever the namespace mapping was when the pod was
offloaded, and never reaches a pod of another consumer cluster or of the provider's
own users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from kube_offload.informer import Informer
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.origin_index import OriginIndex
from kube_offload.remote_resources import is_ours
from vkubelet.translation import origin_key, origin_uid


@dataclass(frozen=True)
class RemotePod:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def choose_remote_pod(
    local_pod: Mapping | None,
    candidates: Sequence[Mapping],
    *,
    key: str,
    node_name: str,
    cluster_id: str,
    local_cluster_id: str,
    pod_uid: str = "",
) -> RemotePod:
    """The remote pod to serve ``key`` from, or RequestError saying why there is none."""
    if local_pod is None or (local_pod.get("spec") or {}).get("nodeName") != node_name:
        raise RequestError(404, f"pod {key} is not bound to virtual node {node_name}")
    uid = (local_pod.get("metadata") or {}).get("uid", "")
    if pod_uid and pod_uid != uid:
        raise RequestError(404, f"pod {key} with UID {pod_uid} is not bound to virtual node {node_name}")
    matching = [
        pod
        for pod in candidates
        if is_ours(pod, local_cluster_id) and origin_key(pod) == key and origin_uid(pod) == uid
    ]
    if not matching:
        raise RequestError(
            400,
            f"pod {key} has no running counterpart in remote cluster {cluster_id} yet "
            "(not created yet, or being recreated); try again in a moment",
        )
    # A pod being deleted and its replacement may coexist for a moment: prefer the live
    # one, then the newest.
    matching.sort(
        key=lambda pod: (
            not (pod.get("metadata") or {}).get("deletionTimestamp"),
            (pod.get("metadata") or {}).get("creationTimestamp") or "",
        ),
        reverse=True,
    )
    meta = matching[0].get("metadata") or {}
    return RemotePod(meta.get("namespace", ""), meta.get("name", ""))


class PodResolver:
    """:func:`choose_remote_pod` over the virtual kubelet's caches."""

    def __init__(
        self,
        *,
        local_pods: Informer,
        remote_pods: Informer,
        node_name: str,
        cluster_id: str,
        local_cluster_id: str,
    ) -> None:
        self._local_pods = local_pods
        self._node_name = node_name
        self._cluster_id = cluster_id
        self._local_cluster_id = local_cluster_id
        self._index = OriginIndex(remote_pods, lambda pod: is_ours(pod, local_cluster_id))

    def resolve(self, namespace: str, pod: str, pod_uid: str = "") -> RemotePod:
        key = f"{namespace}/{pod}"
        return choose_remote_pod(
            self._local_pods.get(key),
            self._index.get(key),
            key=key,
            node_name=self._node_name,
            cluster_id=self._cluster_id,
            local_cluster_id=self._local_cluster_id,
            pod_uid=pod_uid,
        )
