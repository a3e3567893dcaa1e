"""Evicting the pods of a virtual node that is going away (``unpeer``, and ``peer`` removing
a slice): through the Eviction API, so PodDisruptionBudgets are honoured, while the node's
virtual kubelet still runs and so takes each pod's remote copy down first."""

from __future__ import annotations

import time

from kube_offload.peer.api import Cluster
from kube_offload.peer.errors import CommandError
from kube_offload.peer.session import POLL_SECONDS
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import NO_RETRY, ApiError


def evict_pods(local: Cluster, pods: list[str], *, timeout: float, command: str) -> str:
    """Evict every pod (``namespace/name``; PodDisruptionBudgets honoured, refusals retried)
    and wait until they are gone: the virtual kubelet deletes each one's remote ShadowPod,
    then the pod. A pod still terminating at the deadline (its virtual kubelet is down) is
    deleted at once. ``command`` is what to run again after a refusal that outlasted the
    deadline."""
    remaining = set(pods)
    refused: dict[str, str] = {}
    forced: list[str] = []
    deadline = time.monotonic() + timeout
    while remaining:
        late = time.monotonic() >= deadline
        for key in sorted(remaining):
            namespace, name = key.split("/", 1)
            pod = local.get(kinds.PODS, name, namespace=namespace)
            if pod is None:
                remaining.discard(key)
                refused.pop(key, None)
            elif pod["metadata"].get("deletionTimestamp"):
                if late and key not in forced:
                    local.delete(kinds.PODS, name, namespace=namespace, grace_period_seconds=0)
                    forced.append(key)
            else:
                eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
                try:
                    # One try: a refusal is retried by this loop, until the deadline.
                    local.kube.create(kinds.PODS, eviction, namespace=namespace, subresource="eviction", retry=NO_RETRY)
                    refused.pop(key, None)
                except ApiError as exc:
                    if exc.status == 429:  # a PodDisruptionBudget says not now
                        refused[key] = exc.message
                    elif not exc.not_found:
                        raise local.error(exc) from None
        if not remaining:
            break
        if late and refused:
            details = "; ".join(f"{key}: {message}" for key, message in sorted(refused.items()))
            raise CommandError(
                f"local: eviction refused until the deadline ({int(timeout)}s) for {details}; "
                f"scale the workload or relax its PodDisruptionBudget, then run {command} again"
            )
        if time.monotonic() >= deadline + 60:
            raise CommandError(f"local: pods {', '.join(sorted(remaining))} are still there after deletion")
        time.sleep(POLL_SECONDS)
    if forced:
        return f"evicted; still terminating after {int(timeout)}s, so deleted at once: {', '.join(forced)}"
    return "evicted"
