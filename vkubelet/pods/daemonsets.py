"""DaemonSet pods stay home (pure).

A DaemonSet runs one pod per node, node agents mostly (log collectors, CNI agents, node
exporters): they are about the node they run on, and a virtual node has no machine of
its own; run in a provider, such a pod would watch the provider's node, with the
consumer's privileges in mind. The virtual node's NoExecute taint keeps most DaemonSets
away, but one whose pods tolerate every taint (``tolerations: [{operator: Exists}]``)
still gets a pod bound to it by the DaemonSet controller, which does not use the
scheduler's filters. The virtual kubelet does not offload such a pod (unless
``--offload-daemonset-pods``):

* it stays **Pending**, with ``status.reason`` :data:`REASON_NOT_OFFLOADED` and a message
  that says why (``kubectl get pod`` shows the reason as its STATUS, ``kubectl describe``
  the message, plus a Normal Event of the same reason). Pending, not Failed: the
  DaemonSet controller deletes and recreates a Failed daemon pod (with backoff), which
  would churn forever; a Pending one it leaves alone, counting it unavailable;
* a pod offloaded before (the flag was on, or an older version) is stopped remotely
  first; it cannot go back to Pending, so once its remote side is gone it ends Failed
  with the same reason, and the DaemonSet controller's replacement then stays Pending.

Liqo leaves such pods in ``OffloadingBackOff`` (Pending) and advises a node affinity
``liqo.io/type DoesNotExist`` on the DaemonSet; here the equivalent is
``kube-offload.io/type NotIn [virtual-node]`` (docs/virtual-kubelet.md).
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
# status.reason of a DaemonSet pod left Pending (or ended) on a virtual node, and the
# reason of the Event that says so.
from kube_offload.reasons import REASON_DAEMONSET_NOT_OFFLOADED as REASON_NOT_OFFLOADED

DAEMONSET_KIND = "DaemonSet"
DAEMONSET_GROUP = "apps"
PENDING = "Pending"


def daemonset_of(pod: Mapping[str, Any]) -> str | None:
    """The name of the DaemonSet that controls ``pod`` (its controller owner reference is
    an apps DaemonSet), or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion") or "").partition("/")[0]
        if ref.get("kind") == DAEMONSET_KIND and group == DAEMONSET_GROUP:
            return str(ref.get("name") or "")
        return None
    return None


def message(daemonset: str, cluster_id: str, node_name: str) -> str:
    return (
        f"DaemonSet {daemonset}: DaemonSet pods are node agents and are not offloaded to cluster {cluster_id} "
        f"(virtual node {node_name} has no machine of its own), so this pod stays Pending. To keep DaemonSet "
        f"pods off virtual nodes, give the DaemonSet the node affinity {c.LABEL_TYPE} NotIn "
        f"[{c.TYPE_VIRTUAL_NODE}]; to offload them anyway, run the virtual kubelet with --offload-daemonset-pods"
    )


def pending_patch(pod: Mapping[str, Any], text: str) -> dict[str, Any] | None:
    """A pods/status merge patch leaving a not-yet-started pod Pending with the reason and
    ``text``; None when it already says so, or when the pod is past Pending (see
    :func:`needs_ending`)."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "", PENDING):
        return None
    if status.get("phase") == PENDING and status.get("reason") == REASON_NOT_OFFLOADED and status.get("message") == text:
        return None
    return {"status": {"phase": PENDING, "reason": REASON_NOT_OFFLOADED, "message": text}}


def needs_ending(pod: Mapping[str, Any]) -> bool:
    """A pod that had been offloaded and runs (or ran): a pod cannot go back to Pending,
    so it ends (Failed) once its remote side is gone, and its DaemonSet replaces it."""
    return (pod.get("status") or {}).get("phase") == "Running"
