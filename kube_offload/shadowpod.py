"""The ShadowPod model: pure functions shared by the virtual kubelet (which writes
ShadowPods into the remote cluster) and the enforcer (which turns each one into a Pod).

Everything here takes and returns raw API JSON dicts and does no I/O, so the whole
contract - what a ShadowPod holds, which Pod it stands for, when that Pod must be
recreated and what the ShadowPod's status says about it - is table-tested in one place.

The recreate rule (docs/enforcer.md explains it for users):

* a pod that is being deleted is left to finish; a new one is created as soon as it is
  gone (it has the ShadowPod's name, so both cannot exist at once);
* a pod that ended because the system stopped it - evicted, preempted, rejected by the
  kubelet at admission, shut down with its node (``status.reason`` in
  :data:`KILLED_REASONS` or a ``DisruptionTarget`` condition) - is deleted and replaced;
* a pod whose ``restartPolicy`` is ``Always`` (the default) and that is Succeeded or
  Failed was stopped from outside, since its kubelet would otherwise have restarted its
  containers: replaced too;
* a pod whose ``restartPolicy`` is ``Never`` or ``OnFailure`` that Succeeded or Failed on
  its own (including ``activeDeadlineSeconds`` running out) finished its run: it is
  mirrored, never replaced, and once the ShadowPod's status records that terminal phase
  no new pod is created even if the finished one is deleted later;
* a ShadowPod whose local pod is being deleted (the virtual kubelet sets the annotation
  ``kube-offload.io/deletion-grace-period-seconds``) has its pods deleted with that grace
  period and gets no new one: the local deletion's grace period reaches the remote pod.

One contract, read from both ends: the pod a ShadowPod builds, the fate of that pod and
the plan that follows are here; the status that reports them is
:mod:`kube_offload.shadowpod_status` (it reads this module, never the reverse; what it
writes, ``runCompleted``, is what :func:`run_completed` reads back). The applied-template
annotation written by ``build_pod`` is what ``pod_update`` compares. One table of tests
covers both (tests/unit/kube_offload/test_shadowpod.py).
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, cast

from kube_offload import ephemeral_containers, pod_updates
from kube_offload.pools import Pool, apply_pool_patch
from kube_offload.provider_policy import ENFORCED_IMAGE_PULL_POLICY
from kube_offload.constants import (
    ANNOTATION_APPLIED_TEMPLATE,
    ANNOTATION_SLICE_POOL,
    SHADOWPOD_GROUP,
    SHADOWPOD_KIND,
    SHADOWPOD_VERSION,
)
from kube_offload.views import ShadowPodView, metadata as _meta, pod_template

__all__ = [
    # building and reading (the virtual kubelet writes ShadowPods with build_shadowpod)
    "API_VERSION",
    "InvalidShadowPod",
    "PodTemplate",
    "build_shadowpod",
    "read_pod_template",
    "build_pod",
    "asks_for_remote_api",
    "pod_update",
    "owner_reference",
    # pods and their owner
    "controller_ref",
    "owner_key",
    "is_owned_by",
    "choose_pod",
    # the recreate rule and the decision
    "PodFate",
    "pod_fate",
    "killed_by_system",
    "describe_end",
    "run_completed",
    "deletion_grace",
    "capped_grace",
    "Action",
    "Plan",
    "plan",
    # what the status (kube_offload/shadowpod_status.py) reads
    "STATUS_FIELDS",
    "TERMINAL_PHASES",
    "KILLED_REASONS",
]

API_VERSION = f"{SHADOWPOD_GROUP}/{SHADOWPOD_VERSION}"

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
TERMINAL_PHASES = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})

RESTART_ALWAYS = "Always"
# The API's terminationGracePeriodSeconds when a pod sets none.
DEFAULT_GRACE_SECONDS = 30

# Pod-level ``status.reason`` values with which the kubelet or the control plane ends a
# pod that did not finish on its own. "DeadlineExceeded" is deliberately absent: the
# pod's own activeDeadlineSeconds ended it, so running it again would loop forever.
KILLED_REASONS = frozenset(
    {
        "Evicted",  # node-pressure or API-initiated eviction
        "Preempting",  # preempted by a higher-priority pod
        "Shutdown",  # graceful node shutdown
        "Terminated",  # graceful node shutdown (older kubelets)
        "NodeShutdown",
        "NodeLost",
        "NodeAffinity",  # kubelet admission: node labels no longer match
        "UnexpectedAdmissionError",
    }
)
# Kubelet admission rejections for lack of a resource read "OutOfcpu", "OutOfpods", ...
KILLED_REASON_PREFIX = "OutOf"
# Since Kubernetes 1.26 the control plane marks pods it is about to disrupt (eviction,
# preemption, taint manager, pod GC) with this condition.
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"

# The status fields the enforcer owns; anything else under ``status`` is left alone.
STATUS_FIELDS = ("phase", "podName", "podUID", "recreations", "message", "conditions", "observedGeneration", "runCompleted",
                 "slicePool")


class InvalidShadowPod(ValueError):
    """The ShadowPod's spec does not have the shape of a pod template."""


@dataclass(frozen=True)
class PodTemplate:
    """What ``spec.pod`` of a ShadowPod holds: the pod's labels, annotations and PodSpec."""

    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]


class PodFate(enum.Enum):
    """What the enforcer does with an existing pod (see the module docstring)."""

    ACTIVE = "active"  # pending or running: mirror it
    COMPLETED = "completed"  # finished its own run: mirror it, never replace it
    TERMINATING = "terminating"  # being deleted: wait until gone, then create anew
    KILLED = "killed"  # stopped by the system: delete it and create anew


# --- building and reading ShadowPods ---------------------------------------------------------
def build_shadowpod(
    *,
    name: str,
    namespace: str,
    pod_metadata: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    origin_labels: Mapping[str, str] | None = None,
    origin_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ShadowPod that asks the remote cluster to run one pod.

    Only ``labels`` and ``annotations`` of ``pod_metadata`` are kept (name, namespace,
    UID, owner references and the like belong to the local pod). The origin labels and
    annotations (``kube-offload.io/origin-*``) go on the ShadowPod itself and also into
    the pod template, so the pod the enforcer creates carries them too and can be found
    by the same label selector; on a clash they win over the pod's own keys. Inputs are
    copied, never aliased.
    """
    origin_labels = dict(origin_labels or {})
    origin_annotations = dict(origin_annotations or {})
    labels = {**_str_map(pod_metadata.get("labels")), **origin_labels}
    annotations = {**_str_map(pod_metadata.get("annotations")), **origin_annotations}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if origin_labels:
        metadata["labels"] = origin_labels
    if origin_annotations:
        metadata["annotations"] = origin_annotations
    template_metadata: dict[str, Any] = {}
    if labels:
        template_metadata["labels"] = labels
    if annotations:
        template_metadata["annotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": SHADOWPOD_KIND,
        "metadata": metadata,
        "spec": {"pod": {"metadata": template_metadata, "spec": copy.deepcopy(dict(pod_spec))}},
    }


def read_pod_template(shadowpod: Mapping[str, Any]) -> PodTemplate:
    """The pod template of a ShadowPod (copies); raises InvalidShadowPod when
    ``spec.pod.spec`` is missing or not an object."""
    pod = pod_template(shadowpod)
    if pod is None:
        raise InvalidShadowPod("spec.pod is missing or not an object")
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidShadowPod("spec.pod.spec is missing or not an object")
    metadata = pod.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise InvalidShadowPod("spec.pod.metadata is not an object")
    return PodTemplate(
        labels=_str_map(metadata.get("labels")),
        annotations=_str_map(metadata.get("annotations")),
        spec=copy.deepcopy(dict(spec)),
    )


def asks_for_remote_api(shadowpod: Mapping[str, Any]) -> bool:
    """Whether the ShadowPod's pod asks for a token of the twin namespace's ServiceAccount
    (automountServiceAccountToken true: the consumer's API server mode ``remote``)."""
    return ShadowPodView(shadowpod).template_spec.get("automountServiceAccountToken") is True


def build_pod(
    shadowpod: Mapping[str, Any],
    *,
    remote_api_access: bool = False,
    pool: Pool | None = None,
    max_grace_seconds: int | None = None,
    replacing: bool = False,
) -> dict[str, Any]:
    """The Pod the enforcer creates for ``shadowpod``.

    It has the ShadowPod's name, so a create retried after a crash meets AlreadyExists
    instead of making a second pod; the template's labels plus the managed-by label;
    the template's annotations plus the record of what was applied
    (``kube-offload.io/applied-template``); the PodSpec as given but for two fields the
    provider's policy fixes (:func:`neutralized_spec`; ``remote_api_access``: whether the
    consumer's policy grants the provider's API; ``max_grace_seconds``: its largest
    termination grace); and a controller owner
    reference, so the garbage collector deletes the pod with its ShadowPod
    (blockOwnerDeletion makes a foreground deletion of the ShadowPod wait for it).
    ``pool``: the pool of the ShadowPod's resource slice, whose patch (node selector,
    tolerations, runtime class: :func:`kube_offload.pools.apply_pool_patch`) the pod gets;
    not in the applied-template record, so in-place updates never take it away.
    The template's ephemeral containers are not in it (a pod cannot be created with them:
    they are added afterwards, kube_offload/ephemeral_containers.py); ``replacing`` (the
    ShadowPod had a pod before) records them as never to run in this pod.
    """
    template = read_pod_template(shadowpod)
    meta = shadowpod.get("metadata") or {}
    labels = pod_updates.desired_labels(template.labels)
    # The record of what came from the template: later updates of the template reach
    # the running pod through pod_updates.pod_patch, which reads it.
    annotations = {
        **template.annotations,
        ANNOTATION_APPLIED_TEMPLATE: pod_updates.applied_record(labels, template.annotations, template.spec),
    }
    metadata: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [owner_reference(shadowpod)],
    }
    if replacing:
        annotations.update(ephemeral_containers.not_run_annotation(template.spec))
    spec = neutralized_spec(ephemeral_containers.without(template.spec), remote_api_access=remote_api_access,
                            max_grace_seconds=max_grace_seconds)
    if pool is not None:
        spec = apply_pool_patch(spec, pool)
        annotations[ANNOTATION_SLICE_POOL] = pool.name  # status.slicePool: later pods keep it
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def neutralized_spec(
    spec: Mapping[str, Any], *, remote_api_access: bool = False, max_grace_seconds: int | None = None
) -> dict[str, Any]:
    """``spec`` with what a consumer never decides set by the provider (docs/security.md
    "Provider policy"), rather than refused: the honest virtual kubelet sends the local
    apiserver's defaults (``imagePullPolicy: IfNotPresent`` for a tagged image), so a
    refusal would fail ordinary pods, while setting the field here holds for every path
    (the dry run checks this same pod).

    * every container's ``imagePullPolicy`` is ``Always``: the node asks the registry,
      with the pod's pull credentials, before running an image, so an image another
      tenant or the provider pulled onto the node cannot be run by a consumer lacking
      the credentials for it;
    * ``automountServiceAccountToken`` is false: a consumer's pod gets no token of a
      provider ServiceAccount (the webhook refuses serviceAccountToken projections),
      unless the template asks for it AND ``remote_api_access`` says the consumer's
      policy grants it (``pods.remoteAPIAccess``, read by the enforcer when it makes the
      pod): then the provider's ServiceAccount admission mounts the twin namespace's
      account token, the pod's way to the provider's API (docs/home-api.md);
    * with ``max_grace_seconds`` (the consumer's ``pods.maxTerminationGracePeriodSeconds``),
      ``terminationGracePeriodSeconds`` is at most that (the API's default of 30 s counts
      when the template sets none): a stopped pod never holds the provider's node longer,
      so a drain or an unpeer takes it back in bounded time.

    The fields are immutable on a running pod and not in the applied-template record,
    so in-place updates (:mod:`kube_offload.pod_updates`) never touch them."""
    out = copy.deepcopy(dict(spec))
    for field in ("initContainers", "containers"):
        for container in out.get(field) or []:
            if isinstance(container, dict):
                container["imagePullPolicy"] = ENFORCED_IMAGE_PULL_POLICY
    out["automountServiceAccountToken"] = remote_api_access and spec.get("automountServiceAccountToken") is True
    if max_grace_seconds is not None:
        out["terminationGracePeriodSeconds"] = capped_grace(spec.get("terminationGracePeriodSeconds"), max_grace_seconds)
    return out


def capped_grace(grace: Any, max_grace_seconds: int) -> int:
    """A termination grace period (a pod's ``terminationGracePeriodSeconds``, or a
    deletion's) cut to ``max_grace_seconds``; one not set (or not a whole number >= 0)
    counts as the API's default, 30 s."""
    seconds = grace if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else DEFAULT_GRACE_SECONDS
    return min(seconds, max(0, max_grace_seconds))


def pod_update(shadowpod: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The strategic merge patch that brings a running ``pod`` to its ShadowPod's current
    template (labels, annotations, images, activeDeadlineSeconds, tolerations), or None
    when it already has it (:func:`kube_offload.pod_updates.pod_patch`)."""
    template = read_pod_template(shadowpod)
    return pod_updates.pod_patch(pod, template.labels, template.annotations, template.spec)


def owner_reference(shadowpod: Mapping[str, Any]) -> dict[str, Any]:
    meta = shadowpod.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": SHADOWPOD_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- pods and their owner --------------------------------------------------------------------
def controller_ref(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod's controller owner reference if it points at a ShadowPod, else None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        api_version = str(ref.get("apiVersion") or "")
        if ref.get("kind") == SHADOWPOD_KIND and api_version.split("/", 1)[0] == SHADOWPOD_GROUP:
            return cast("dict[str, Any]", ref)
        return None  # controlled by something else
    return None


def owner_key(pod: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the ShadowPod controlling ``pod``, or None."""
    ref = controller_ref(pod)
    namespace = (pod.get("metadata") or {}).get("namespace")
    if ref is None or not namespace or not ref.get("name"):
        return None
    return f"{namespace}/{ref['name']}"


def is_owned_by(pod: Mapping[str, Any], shadowpod: Mapping[str, Any]) -> bool:
    """True when ``pod`` is controlled by this very ShadowPod (same name *and* UID: a
    ShadowPod deleted and created again under the same name is another owner)."""
    ref = controller_ref(pod)
    meta = shadowpod.get("metadata") or {}
    return ref is not None and ref.get("name") == meta.get("name") and ref.get("uid") == meta.get("uid")


def choose_pod(pods: Iterable[Mapping[str, Any]], name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Of the pods of one ShadowPod, the one to keep (the oldest) and the ones to delete.

    More than one should never exist; it could after a crash or a manual copy. Ties on
    the one-second creationTimestamp go to the pod named after the ShadowPod, then by name,
    so that every enforcer replica or restart picks the same pod.
    """
    ordered = sorted(
        pods,
        key=lambda p: (
            _meta(p).get("creationTimestamp") or "",
            _meta(p).get("name") != name,
            _meta(p).get("name") or "",
        ),
    )
    if not ordered:
        return None, []
    return dict(ordered[0]), [dict(p) for p in ordered[1:]]


def pod_fate(pod: Mapping[str, Any]) -> PodFate:
    """Decide what to do with an existing pod (the recreate rule, module docstring)."""
    if _meta(pod).get("deletionTimestamp"):
        return PodFate.TERMINATING
    status = pod.get("status") or {}
    if status.get("phase") not in TERMINAL_PHASES:
        return PodFate.ACTIVE
    if killed_by_system(pod):
        return PodFate.KILLED
    if ((pod.get("spec") or {}).get("restartPolicy") or RESTART_ALWAYS) == RESTART_ALWAYS:
        return PodFate.KILLED
    return PodFate.COMPLETED


def killed_by_system(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    if reason in KILLED_REASONS or reason.startswith(KILLED_REASON_PREFIX):
        return True
    return any(
        c.get("type") == CONDITION_DISRUPTION_TARGET and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def describe_end(pod: Mapping[str, Any]) -> str:
    """A short human account of why a pod ended, for Events and status messages."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "ended"
    message = status.get("message")
    return f"{reason}: {message}" if message else str(reason)


def run_completed(shadowpod: Mapping[str, Any]) -> bool:
    """True once the ShadowPod's status records a pod that finished its own run: from
    then on a vanished pod is not replaced (it would run the workload a second time).

    Read from what the status recorded of the pod that ran (``runCompleted``, written by
    :func:`status_from_pod` from that pod's own fate), never from the template: the
    template is the consumer's to edit, and reading its restartPolicy let a finished pod
    come back, uncounted, once its spec said Always. A status written by an enforcer
    before ``runCompleted`` existed holds a terminal phase only for such a run too; the
    template is read then, as it was (its spec can no longer change once the status is
    terminal: the webhook refuses it)."""
    view = ShadowPodView(shadowpod)
    if view.phase not in TERMINAL_PHASES:
        return False
    recorded = view.run_completed
    if recorded is not None:
        return recorded
    return (view.template_spec.get("restartPolicy") or RESTART_ALWAYS) != RESTART_ALWAYS


# --- the decision --------------------------------------------------------------------------
class Action(enum.Enum):
    NOTHING = "nothing"  # ShadowPod being deleted, or its finished run needs no new pod
    MIRROR = "mirror"  # keep ``Plan.pod`` and copy its state into the status
    CREATE = "create"  # (after the deletions) create the pod from build_pod()
    WAIT = "wait"  # the pod's name is still held by a terminating pod: check again soon
    TERMINATE = "terminate"  # its local pod is being deleted: delete the pods with ``Plan.grace``, create none


@dataclass(frozen=True)
class Plan:
    """What one reconcile of a ShadowPod does: first delete ``delete``, then ``action``."""

    action: Action
    pod: dict[str, Any] | None = None  # the pod to mirror (MIRROR)
    delete: tuple[dict[str, Any], ...] = ()  # extra pods, and a killed pod being replaced
    replaced: dict[str, Any] | None = None  # the killed pod a CREATE replaces, for Events
    grace: int | None = None  # TERMINATE: the deletion grace period (seconds) of ``delete``


def deletion_grace(shadowpod: Mapping[str, Any]) -> int | None:
    """The grace period the virtual kubelet asked for (its local pod is being deleted,
    annotation ``kube-offload.io/deletion-grace-period-seconds``), or None: not asked, or
    not a non-negative integer (then the ShadowPod is treated as not terminating, and the
    vkubelet's own deletion of it, later, ends the pod with its default grace)."""
    value = ShadowPodView(shadowpod).deletion_grace_request
    try:
        grace = int(str(value).strip()) if value is not None else None
    except ValueError:
        return None
    return grace if grace is not None and grace >= 0 else None


def _needs_termination(pod: Mapping[str, Any], grace: int) -> bool:
    """Not yet deleted, or deleted with a longer grace period (the API lets a second
    delete only shorten it, as ``kubectl delete --grace-period`` does)."""
    meta = _meta(pod)
    if not meta.get("deletionTimestamp"):
        return True
    current = meta.get("deletionGracePeriodSeconds")
    return current is not None and int(current) > grace


def plan(shadowpod: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *, max_grace_seconds: int | None = None) -> Plan:
    """Decide a reconcile from the ShadowPod and the pods it controls (same owner UID).
    ``max_grace_seconds``: the consumer's largest termination grace, which the grace its
    local pod's deletion asks for is cut to (None: not cut).

    Terminating pods are out of the running: they are going away whatever happens, and
    keeping one over a healthy younger pod would delete the healthy one. Only a
    terminating pod that holds the ShadowPod's name blocks creating the replacement.
    """
    meta = _meta(shadowpod)
    if meta.get("deletionTimestamp"):
        return Plan(Action.NOTHING)
    pods = list(pods)
    grace = deletion_grace(shadowpod)
    if grace is not None and max_grace_seconds is not None:
        grace = capped_grace(grace, max_grace_seconds)
    if grace is not None:
        # Its local pod is being deleted: the pods end with that pod's grace period and
        # none replaces them; the vkubelet deletes the ShadowPod once they are gone.
        return Plan(Action.TERMINATE, delete=tuple(dict(p) for p in pods if _needs_termination(p, grace)), grace=grace)
    name = str(meta.get("name") or "")
    terminating = [p for p in pods if pod_fate(p) is PodFate.TERMINATING]
    live = [p for p in pods if pod_fate(p) is not PodFate.TERMINATING]
    keep, extras = choose_pod(live, name)
    delete = list(extras)
    replaced = None
    if keep is not None:
        if pod_fate(keep) is not PodFate.KILLED:
            return Plan(Action.MIRROR, pod=keep, delete=tuple(delete))
        replaced = keep
        delete.append(keep)
    if run_completed(shadowpod):
        return Plan(Action.NOTHING, delete=tuple(delete))
    if any(_meta(p).get("name") == name for p in terminating):
        return Plan(Action.WAIT, delete=tuple(delete))
    return Plan(Action.CREATE, delete=tuple(delete), replaced=replaced)


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}
