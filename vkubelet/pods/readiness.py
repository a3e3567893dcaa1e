"""The pods of an unreachable virtual node are not Ready (pure).

When a kubelet's node stops answering, the node lifecycle controller marks its pods not
Ready (``MarkPodsNotReady``), so Services and EndpointSlices stop sending them traffic.
The virtual node never stops answering the local control plane: the vkubelet renews its
Lease and writes ``Ready=False`` itself when the remote API server is silent, which the
node lifecycle controller taints (``node.kubernetes.io/not-ready``) but does not treat as
that transition. So the vkubelet does it for its pods, within the same ping timeout that
turns the node NotReady:

* ``Ready`` and ``ContainersReady`` turn ``False`` with reason
  :data:`REASON_UNREACHABLE` (the node condition's own word) and every container's
  ``ready`` turns false: nobody can vouch for them;
* everything else (phase, container states, IPs, restart counts) stays as last seen,
  since it is not known to have changed;
* when the remote cluster answers again the status is taken again from the remote pod,
  and only from a list of the remote pods made after the return (a cache from before the
  outage, or a watch that slept through it, would be a guess): :func:`needs_fresh_truth`.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from vkubelet.node.forge import REASON_NOT_READY
from vkubelet.pods.status import TERMINAL_PHASES

REASON_UNREACHABLE = REASON_NOT_READY
# The pod conditions a lost node makes false (the node lifecycle controller only sets
# Ready; ContainersReady follows, as a kubelet would report it).
NOT_READY_CONDITIONS = ("Ready", "ContainersReady")


def unreachable_message(node_name: str, cluster_id: str) -> str:
    """Stable (no durations): a message that changed every write would rewrite every pod."""
    return (
        f"virtual node {node_name} is NotReady: cluster {cluster_id} does not answer, "
        "so the state of the pod there is unknown"
    )


def unreachable_status(local: Mapping[str, Any], message: str, now: str) -> dict[str, Any] | None:
    """The managed status fields (vkubelet/pods/status.py) of ``local`` while its remote
    cluster is unreachable; None for a pod that already ended (its status is final).
    Written through :func:`vkubelet.pods.status.status_patch`, so a pod already marked is not
    written again."""
    current = local.get("status") or {}
    if current.get("phase") in TERMINAL_PHASES:
        return None
    conditions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for cond in current.get("conditions") or []:
        kind = cond.get("type")
        if kind in NOT_READY_CONDITIONS:
            seen.add(str(kind))
            cond = _not_ready(cond, message, now)
        conditions.append(copy.deepcopy(dict(cond)))
    for kind in NOT_READY_CONDITIONS:
        if kind not in seen:
            conditions.append(_not_ready({"type": kind}, message, now))
    status: dict[str, Any] = {"conditions": conditions}
    if current.get("containerStatuses"):
        # Init containers keep theirs: for them ready means "completed", still true.
        status["containerStatuses"] = [
            {**copy.deepcopy(dict(container)), "ready": False} for container in current["containerStatuses"]
        ]
    return status


def marked_unreachable(local: Mapping[str, Any]) -> bool:
    """True while the pod carries our unreachable mark (set by :func:`unreachable_status`
    and not yet replaced by the remote pod's own conditions)."""
    for cond in (local.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "False" and cond.get("reason") == REASON_UNREACHABLE)
    return False


def needs_fresh_truth(local: Mapping[str, Any], listed_since_reconnect: bool) -> bool:
    """Whether the remote pod's cached status must not be copied yet: the pod was marked
    while the remote cluster was unreachable, and its remote pods have not been listed
    again since the cluster answered."""
    return marked_unreachable(local) and not listed_since_reconnect


def _not_ready(cond: Mapping[str, Any], message: str, now: str) -> dict[str, Any]:
    if cond.get("status") == "False" and cond.get("reason") == REASON_UNREACHABLE and cond.get("message") == message:
        return dict(cond)
    updated = {k: v for k, v in cond.items() if k != "observedGeneration"}
    updated.update(status="False", reason=REASON_UNREACHABLE, message=message)
    if cond.get("status") != "False" or not cond.get("lastTransitionTime"):
        updated["lastTransitionTime"] = now
    updated.pop("lastProbeTime", None)
    return updated
