"""When a pod the remote cluster cannot run is handed back (pure).

A pod bound to the virtual node whose remote pod stays unschedulable there (the remote
scheduler's PodScheduled=False, reason Unschedulable) for ``--handback-after``, or whose
remote pod the provider refuses to create for a reason waiting does not change, is
evicted locally (the Eviction API: PodDisruptionBudgets apply), so its controller makes a
new pod and the scheduler places it elsewhere; the extender keeps the workload off this
node for a while (kube_offload/handed_back.py). The I/O is vkubelet/pods/handback.py.

Which refusals are for good is decided conservatively, from the provider API server's
message: as the provider's ShadowPod webhook answers the create (it dry-runs the pod, so
quota and Pod Security refusals usually come back there), or as the enforcer reports a
pod creation it was refused in the ShadowPod's ``status.message``
(kube_offload.shadowpod_status.creation_failed_message):

* a ResourceQuota the pod *alone* exceeds (``requested`` above ``limited`` in some
  resource): no other pod ending frees that; a quota exceeded only with what is ``used``
  is not (it frees up);
* a LimitRange bound per container or per pod (``maximum cpu usage per Container is``...);
* Pod Security (``violates PodSecurity``): the twin namespace's level is the provider's;
* the pod's own validation (``Pod "x" is invalid:``).

Anything else (an admission webhook's word, a transient error, a quota that frees up) is
waited out as before, however long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.handed_back import controller_of
from kube_offload.resources import QuantityError, parse_quantity
from kube_offload.shadowpod_status import creation_failure
from kube_offload.times import parse_time_or_none
from vkubelet.pods import status as st

# Reasons of a handback (the Warning Event's message and the metric's label name them).
CAUSE_UNSCHEDULABLE = "RemoteUnschedulable"
CAUSE_REFUSED = "RemoteRefused"

# k8s.io/apiserver/pkg/admission/plugin/resourcequota: "exceeded quota: %s, requested: %s,
# used: %s, limited: %s" (each a comma-separated list of name=quantity).
_QUOTA = re.compile(
    r"exceeded quota: [^,]+, requested: (?P<requested>.*?), used: (?P<used>.*?), limited: (?P<limited>[^;\n]*)"
)
# plugin/pkg/admission/limitranger: "maximum cpu usage per Container is 1, but limit is 2", and
# the minimum and ratio forms, per Container or Pod (a claim's bounds are not the pod's).
_LIMIT_RANGE = re.compile(r"(maximum|minimum) \S+ usage per (Container|Pod) is |limit to request ratio per (Container|Pod) is ")
_POD_SECURITY = re.compile(r"violates PodSecurity ")
_INVALID = re.compile(r'\bPod "[^"]*" is invalid: ')


@dataclass(frozen=True)
class Due:
    """The pod is to be handed back, for ``cause`` (a CAUSE_*), in the remote's words."""

    cause: str
    message: str


@dataclass(frozen=True)
class NotYet:
    """Not (yet) due; look again in ``recheck`` seconds (None: only when something changes)."""

    recheck: float | None


def _quantities(text: str) -> dict[str, int] | None:
    result: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            return None
        try:
            result[name.strip()] = parse_quantity(value.strip())
        except QuantityError:
            return None
    return result


def quota_alone_exceeded(message: str) -> bool:
    """Whether a ResourceQuota refusal says the pod by itself asks more than the quota's
    hard limit in some resource (so no other pod ending would let it in)."""
    match = _QUOTA.search(message)
    if match is None:
        return False
    requested, limited = _quantities(match["requested"]), _quantities(match["limited"])
    if requested is None or limited is None:
        return False
    return any(name in limited and amount > limited[name] for name, amount in requested.items())


def permanent_refusal(message: str) -> bool:
    """Whether the provider API server's refusal ``message`` stays true however long one
    waits (see the module doc); unknown words are not."""
    return bool(
        quota_alone_exceeded(message)
        or _LIMIT_RANGE.search(message)
        or _POD_SECURITY.search(message)
        or _INVALID.search(message)
    )


def creation_refusal(shadowpod: Mapping[str, Any] | None) -> str | None:
    """The provider's refusal of the remote pod, as the enforcer wrote it in the
    ShadowPod's status, when it is for good; else None."""
    refusal = creation_failure(shadowpod)
    return refusal if refusal is not None and permanent_refusal(refusal) else None


def refusal_due(message: str, *, after_seconds: float) -> Due | None:
    """The provider refused the ShadowPod itself (its webhook dry-runs the pod, so a quota
    or Pod Security refusal comes back here, in the provider's words): due at once when
    for good; None otherwise, or when handback is off."""
    if after_seconds <= 0 or not permanent_refusal(message):
        return None
    return Due(CAUSE_REFUSED, message)


def unschedulable_since(remote: Mapping[str, Any]) -> datetime | None:
    """Since when the remote scheduler says it cannot place ``remote`` (its PodScheduled
    condition's lastTransitionTime; the pod's creation if it has none), or None."""
    for condition in (remote.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == st.CONDITION_SCHEDULED
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return parse_time_or_none(condition.get("lastTransitionTime")) or parse_time_or_none(
                (remote.get("metadata") or {}).get("creationTimestamp")
            )
    return None


def decide(
    remote: Mapping[str, Any] | None,
    shadowpod: Mapping[str, Any] | None,
    *,
    now: datetime,
    after_seconds: float,
) -> Due | NotYet:
    """Whether the pod whose remote side is ``remote`` (None: not created) and
    ``shadowpod`` is due for handback now. ``after_seconds`` 0: never."""
    if after_seconds <= 0:
        return NotYet(None)
    if remote is None:
        refusal = creation_refusal(shadowpod)
        if refusal is not None:
            return Due(CAUSE_REFUSED, refusal)
        return NotYet(None)
    since = unschedulable_since(remote)
    if since is None:
        return NotYet(None)
    waited = (now - since).total_seconds()
    if waited >= after_seconds:
        return Due(CAUSE_UNSCHEDULABLE, st.remote_unschedulable(remote) or "")
    return NotYet(after_seconds - waited)


def ineligible(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> str | None:
    """Why ``pod`` must not be handed back (None: it may be). A pod without a controller
    would be gone for good, so only if its namespace asks for it
    (``kube-offload.io/handback-uncontrolled: "true"``); a DaemonSet's pod belongs to its
    node and would only come back to it."""
    owner = controller_of(pod)
    if owner is None:
        annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(c.ANNOTATION_HANDBACK_UNCONTROLLED) != "true":
            return (
                "it has no controller to recreate it elsewhere (set the annotation "
                f'{c.ANNOTATION_HANDBACK_UNCONTROLLED}="true" on its namespace to evict such pods too)'
            )
        return None
    if owner.get("kind") == "DaemonSet":
        return "a DaemonSet pod belongs to its node"
    return None


def event_message(due: Due, cluster_id: str, node_name: str, refused_seconds: float | None) -> str:
    """The Warning Event on the evicted pod: the remote's reason, and for how long the
    workload's next pods are kept off this node (None: the pod has no controller)."""
    if due.cause == CAUSE_UNSCHEDULABLE:
        what = f"cluster {cluster_id} could not schedule it: {due.message}"
    else:
        what = f"cluster {cluster_id} refused it: {due.message}"
    text = f"evicted from virtual node {node_name} to run elsewhere: {what}"
    if refused_seconds is not None:
        text += f"; its controller's next pods avoid {node_name} for {int(refused_seconds)}s"
    return text[:1024]
