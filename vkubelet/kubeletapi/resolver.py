"""Which remote pod a kubelet request for local pod ``ns/name`` is about.

Only a pod bound to this virtual node is served, and only through the remote pod that
*our ShadowPod owns in this consumer's twin namespace of the pod's namespace*:

1. the twin namespace is the one the twin-namespace rule gives for the local namespace
   (``TwinNamespaces.twin_for``: offloaded here, ours, ready), never one read off a
   remote object;
2. in it, a ShadowPod of ours (origin label = our local cluster id) whose origin
   annotations name this very local pod (namespace, name **and UID**);
3. and a pod in that same namespace whose controller ownerReference is that ShadowPod
   (name **and UID**: the enforcer sets it) and whose origin annotations agree.

Why not the labels and annotations alone: anyone who can create a pod somewhere in the
provider (another consumer in its own twin namespaces, the provider's users) can copy our
origin label and annotations onto it; ``kubectl exec`` would then run in a pod we do not
own. Only we may create ShadowPods in our twin namespaces, and only the enforcer makes
pods owned by them, so the chain above cannot be forged by another tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from kube_offload.runtime.cache import Cache
from kube_offload.remote_resources import is_ours
from kube_offload.shadowpod import is_owned_by
from kube_offload.views import metadata as _meta
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.shared.indexes import BY_ORIGIN, ours_by_origin
from vkubelet.shared.origin import origin_key, origin_uid


@dataclass(frozen=True)
class RemotePod:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class TwinRule(Protocol):
    """The twin-namespace rule (vkubelet/twins/namespaces.py ``TwinNamespaces``)."""

    def twin_for(self, name: str) -> tuple[str | None, str]: ...


def _stands_for(obj: Mapping[str, Any], *, key: str, uid: str, local_cluster_id: str) -> bool:
    return is_ours(obj, local_cluster_id) and origin_key(obj) == key and origin_uid(obj) == uid


def _not_running_yet(key: str, cluster_id: str) -> RequestError:
    return RequestError(
        400,
        f"pod {key} has no running counterpart in remote cluster {cluster_id} yet "
        "(not created yet, or being recreated); try again in a moment",
    )


def choose_remote_pod(
    local_pod: Mapping[str, Any] | None,
    shadowpods: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    twin: str | None,
    twin_problem: str = "",
    key: str,
    node_name: str,
    cluster_id: str,
    local_cluster_id: str,
    pod_uid: str = "",
) -> RemotePod:
    """The remote pod to serve ``key`` from, or RequestError saying why there is none.

    ``twin`` is the twin namespace of the pod's namespace (None, with ``twin_problem``,
    when there is none usable); ``shadowpods`` and ``pods`` are the remote candidates
    (any namespace: the ones outside ``twin`` are ignored)."""
    if local_pod is None or (local_pod.get("spec") or {}).get("nodeName") != node_name:
        raise RequestError(404, f"pod {key} is not bound to virtual node {node_name}")
    uid = _meta(local_pod).get("uid", "")
    if pod_uid and pod_uid != uid:
        raise RequestError(404, f"pod {key} with UID {pod_uid} is not bound to virtual node {node_name}")
    if twin is None:
        namespace = key.split("/", 1)[0]
        raise RequestError(
            400, f"pod {key} has no counterpart in remote cluster {cluster_id}: namespace {namespace} has no twin there "
            f"({twin_problem or 'not offloaded there'})"
        )
    owners = [
        shp
        for shp in shadowpods
        if _meta(shp).get("namespace") == twin and _stands_for(shp, key=key, uid=uid, local_cluster_id=local_cluster_id)
    ]
    matching = [
        pod
        for pod in pods
        if _meta(pod).get("namespace") == twin
        and _stands_for(pod, key=key, uid=uid, local_cluster_id=local_cluster_id)
        and any(is_owned_by(pod, shp) for shp in owners)
    ]
    if not matching:
        # Made here, not kept in a local: an exception a frame's local refers to is a
        # reference cycle (exception -> traceback -> frame -> exception) that pins the
        # frames of every caller, the usage sampler's list of all pods included; frozen
        # by a full collection (kube_offload/runtime/gc_freeze.py) it stays until the
        # next thaw (issue 39: about 6 KiB per pod).
        raise _not_running_yet(key, cluster_id)
    # A pod being deleted and its replacement may coexist for a moment: prefer the live
    # one, then the newest.
    matching.sort(
        key=lambda pod: (not _meta(pod).get("deletionTimestamp"), _meta(pod).get("creationTimestamp") or ""),
        reverse=True,
    )
    meta = _meta(matching[0])
    return RemotePod(meta.get("namespace", ""), meta.get("name", ""))


class PodResolver:
    """:func:`choose_remote_pod` over the virtual kubelet's caches and twin rule."""

    def __init__(
        self,
        *,
        local_pods: Cache,
        remote_pods: Cache,
        shadowpods: Cache,
        twins: TwinRule,
        node_name: str,
        cluster_id: str,
        local_cluster_id: str,
    ) -> None:
        self._local_pods = local_pods
        self._twins = twins
        self._node_name = node_name
        self._cluster_id = cluster_id
        self._local_cluster_id = local_cluster_id
        # The pod loop's index on these shared informers (the same function: one index).
        by_origin = ours_by_origin(local_cluster_id)
        remote_pods.add_indexer(BY_ORIGIN, by_origin)
        shadowpods.add_indexer(BY_ORIGIN, by_origin)
        self._pods = remote_pods
        self._shadowpods = shadowpods

    def resolve(self, namespace: str, pod: str, pod_uid: str = "") -> RemotePod:
        return self._choose(namespace, pod, pod_uid, self._twins.twin_for(namespace))

    def for_one_pass(self) -> Callable[[str, str, str], RemotePod]:
        """:meth:`resolve` for one pass over many pods (a usage-sampling round, a
        ``/runningpods/`` listing): each namespace's twin is decided once for the pass
        instead of once per pod (the twin rule parses the namespace's policy and builds
        the node's labels each time: a fifth of the vkubelet's CPU while it holds 2,000
        pods, docs/performance.md). A pass lasts a moment; the next one decides again, as
        a kubelet request always does."""
        twins: dict[str, tuple[str | None, str]] = {}

        def resolve(namespace: str, pod: str, pod_uid: str = "") -> RemotePod:
            twin = twins.get(namespace)
            if twin is None:
                twin = twins[namespace] = self._twins.twin_for(namespace)
            return self._choose(namespace, pod, pod_uid, twin)

        return resolve

    def _choose(self, namespace: str, pod: str, pod_uid: str, twin_and_problem: tuple[str | None, str]) -> RemotePod:
        key = f"{namespace}/{pod}"
        twin, problem = twin_and_problem
        return choose_remote_pod(
            self._local_pods.get(key),
            self._shadowpods.by_index(BY_ORIGIN, key),
            self._pods.by_index(BY_ORIGIN, key),
            twin=twin,
            twin_problem=problem,
            key=key,
            node_name=self._node_name,
            cluster_id=self._cluster_id,
            local_cluster_id=self._local_cluster_id,
            pod_uid=pod_uid,
        )

    def remote_pods_of_one_pass(self) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
        """For one pass over many local pods (``/runningpods/``, as :meth:`for_one_pass`):
        the remote pod :meth:`resolve` names for each, as the remote pod cache holds it
        (the cache the status sync reads), or None when there is none."""
        resolve = self.for_one_pass()

        def remote_pod_of(local_pod: Mapping[str, Any]) -> dict[str, Any] | None:
            meta = _meta(local_pod)
            try:
                found = resolve(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))
            except RequestError:
                return None
            return self._pods.get(str(found))

        return remote_pod_of
