"""Graceful deletion of an offloaded pod, end to end (pure).

A kubelet confirms a pod's end by deleting it with grace 0 once its containers stopped,
within the grace period the deletion gave them. For an offloaded pod the containers are
remote, so:

1. the local pod gets a ``deletionTimestamp`` (``kubectl delete``, an eviction, the
   taint manager...) with ``deletionGracePeriodSeconds``;
2. the vkubelet asks for the remote pod's end with that same grace period: the
   annotation ``kube-offload.io/deletion-grace-period-seconds`` on the ShadowPod
   (:func:`grace_request_patch`; a custom resource's delete would drop the grace period)
   and the enforcer deletes the remote pod with it, creating no replacement;
3. once the remote pod is gone the vkubelet deletes the ShadowPod, and once both are gone
   the local pod with grace 0 (as before).

A second, shorter deletion (``kubectl delete --grace-period=1`` on a terminating pod)
shortens the local grace period; the request follows (only ever down).

**Unreachable remote cluster.** Nothing can be asked or confirmed. The local pod is
deleted anyway once its grace period plus a margin (``--unreachable-deletion-margin``)
have passed (:func:`unreachable_deadline`), with a Warning Event saying its remote pod
was not seen to stop; the remote side is cleaned up when the cluster answers again (the
ShadowPod is then an orphan: its local pod is gone). A kubelet on a partitioned node
would keep the pod Terminating for ever; offloading chooses to let controllers replace
it, which briefly allows two copies of a pod for a StatefulSet (docs/virtual-kubelet.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.shadowpod import deletion_grace
from kube_offload.times import parse_time_or_none

# The API's default when neither the deletion nor the spec says (pod spec default).
DEFAULT_GRACE_SECONDS = 30


def grace_seconds(local: Mapping[str, Any]) -> int:
    """The grace period the local pod was deleted with (``deletionGracePeriodSeconds``;
    the spec's ``terminationGracePeriodSeconds`` if unset; never negative)."""
    meta = local.get("metadata") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), (local.get("spec") or {}).get("terminationGracePeriodSeconds")):
        if value is not None:
            try:
                return max(0, int(value))
            except (TypeError, ValueError):
                continue
    return DEFAULT_GRACE_SECONDS


def grace_request_patch(shadowpod: Mapping[str, Any], grace: int) -> dict[str, Any] | None:
    """A merge patch asking the enforcer to end the ShadowPod's pod with ``grace``
    seconds; None when the ShadowPod already asks for that or less."""
    current = deletion_grace(shadowpod)
    if current is not None and current <= grace:
        return None
    return {"metadata": {"annotations": {c.ANNOTATION_DELETION_GRACE: str(grace)}}}


def unreachable_deadline(local: Mapping[str, Any], margin_seconds: float) -> datetime | None:
    """When a terminating pod of an unreachable cluster is deleted locally anyway: its
    ``deletionTimestamp`` (the deletion time plus its grace period) plus the margin.
    None when the pod is not being deleted."""
    deleted = parse_time_or_none((local.get("metadata") or {}).get("deletionTimestamp"))
    if deleted is None:
        return None
    return deleted + timedelta(seconds=max(0.0, margin_seconds))


def unconfirmed_message(cluster_id: str, grace: int, margin_seconds: float) -> str:
    return (
        f"cluster {cluster_id} is unreachable: the pod was deleted here after its grace period ({grace}s) "
        f"plus {margin_seconds:g}s without seeing its remote pod stop; the remote pod is deleted when the "
        "cluster answers again"
    )
