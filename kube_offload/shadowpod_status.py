"""A ShadowPod's status (pure): what the enforcer reports of the pod it made - phase,
pod name and UID, recreations, the run's end, conditions - from that pod, or from a
creation that failed; and whether a status write is due at all. Part of the ShadowPod
contract (:mod:`kube_offload.shadowpod`, whose recreate rule decides what this reports:
this module reads it, never the reverse).
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload.shadowpod import (
    PHASE_PENDING,
    PodFate,
    STATUS_FIELDS,
    TERMINAL_PHASES,
    pod_fate,
)
from kube_offload.views import metadata as _meta

__all__ = ["status_from_pod", "with_recorded_pod", "status_may_wait", "creation_failed_message", "creation_failure", "status_without_pod", "status_changed"]


def status_from_pod(shadowpod: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ShadowPod status that mirrors ``pod``: its phase, name, UID and message, and
    the recreations. Not the pod's conditions: nobody reads them from the ShadowPod (the
    vkubelet mirrors the remote pod itself, vkubelet/pods/status.py), and mirroring them cost a
    status write at every condition change, about 3.5 writes per pod instead of 1
    (docs/performance.md). ``conditions`` is written as null, which the merge patch turns
    into removing what an older enforcer wrote.

    ``recreations`` grows by one whenever the pod observed is not the one the status last
    recorded. Counting from the status itself (not from an in-memory counter) keeps the
    number right across enforcer restarts, even one between creating a pod and writing
    the status, provided the write is conditional on the ShadowPod's resourceVersion.
    """
    current = shadowpod.get("status") or {}
    pod_meta = _meta(pod)
    pod_status = pod.get("status") or {}
    uid = str(pod_meta.get("uid") or "")
    recreations = _recreations(current)
    previous_uid = current.get("podUID")
    if previous_uid and uid and previous_uid != uid:
        recreations += 1
    phase = str(pod_status.get("phase") or PHASE_PENDING)
    # Said only of a pod that ended (so the status of a running pod is written as before):
    # True for a run that finished on its own, False for a pod the system stopped.
    completed = (pod_fate(pod) is PodFate.COMPLETED) if phase in TERMINAL_PHASES else None
    return _status(
        shadowpod,
        phase=phase,
        pod_name=str(pod_meta.get("name") or ""),
        pod_uid=uid,
        recreations=recreations,
        message=str(pod_status.get("message") or ""),
        run_completed=completed,
    )


def with_recorded_pod(shadowpod: Mapping[str, Any], uid: str | None) -> Mapping[str, Any]:
    """``shadowpod`` as if its status already recorded the pod ``uid`` (named after the
    ShadowPod, as every pod the enforcer makes is), when it records none yet: the pod the
    enforcer created but whose status write it was still holding back (see
    :func:`status_may_wait`), or a pod it saw end before it wrote anything. A status then
    computed from this view counts the next pod as a recreation, as if the write had
    happened. Returns ``shadowpod`` itself when there is nothing to add."""
    current = shadowpod.get("status") or {}
    if not uid or current.get("podUID"):
        return shadowpod
    view = dict(shadowpod)
    view["status"] = {**current, "podUID": uid, "podName": current.get("podName") or _meta(shadowpod).get("name") or ""}
    return view


def status_may_wait(shadowpod: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the status write for ``pod``, the first pod the ShadowPod has, may be held
    back a moment so that "Pending" and "Running" become one write: the status records
    no pod and no message yet (a creation failure must be cleared at once: the consumer's
    vkubelet reads it, :func:`creation_failure`), and the pod is still Pending and not
    being deleted. Everything else (a recreation, a pod that runs or ended) is written
    at once; the count never depends on a write held back (:func:`with_recorded_pod`)."""
    current = shadowpod.get("status") or {}
    if current.get("podUID") or current.get("message"):
        return False
    if _meta(pod).get("deletionTimestamp"):
        return False
    return ((pod.get("status") or {}).get("phase") or PHASE_PENDING) == PHASE_PENDING


_CREATION_FAILED_PREFIX = "creating pod "
_CREATION_FAILED_INFIX = " failed: "


def creation_failed_message(name: str, message: str) -> str:
    """The ShadowPod's ``status.message`` when the provider refused to create its pod:
    the consumer's vkubelet reads the API server's words back with
    :func:`creation_failure` (a refusal for good hands the pod back)."""
    return f"{_CREATION_FAILED_PREFIX}{name}{_CREATION_FAILED_INFIX}{message}"


def creation_failure(shadowpod: Mapping[str, Any] | None) -> str | None:
    """The API server's refusal of the ShadowPod's pod, while the status says its
    creation failed (see :func:`creation_failed_message`); else None."""
    status = (shadowpod or {}).get("status") or {}
    text = str(status.get("message") or "")
    if status.get("phase") not in (None, "", PHASE_PENDING) or not text.startswith(_CREATION_FAILED_PREFIX):
        return None
    _name, infix, message = text[len(_CREATION_FAILED_PREFIX):].partition(_CREATION_FAILED_INFIX)
    return message.strip() if infix and message.strip() else None


def status_without_pod(shadowpod: Mapping[str, Any], message: str) -> dict[str, Any]:
    """The status while no pod exists (creation failed, or the old one is still going).

    podName/podUID keep naming the last pod, so the next pod still counts as a
    recreation.
    """
    current = shadowpod.get("status") or {}
    return _status(
        shadowpod,
        phase=PHASE_PENDING,
        pod_name=str(current.get("podName") or ""),
        pod_uid=str(current.get("podUID") or ""),
        recreations=_recreations(current),
        message=message,
    )


def status_changed(shadowpod: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True if writing ``desired`` would change what the status says."""
    current = shadowpod.get("status") or {}
    return any(_normal(current.get(field)) != _normal(desired.get(field)) for field in STATUS_FIELDS)


def _status(
    shadowpod: Mapping[str, Any],
    *,
    phase: str,
    pod_name: str,
    pod_uid: str,
    recreations: int,
    message: str,
    run_completed: bool | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "podName": pod_name,
        "podUID": pod_uid,
        "recreations": recreations,
        "message": message,
        # Not mirrored any more (status_from_pod); null removes an older enforcer's copy.
        "conditions": None,
        # Whether the pod recorded, which ended, finished its own run (run_completed reads
        # it); null (removed) while it has not ended.
        "runCompleted": run_completed,
    }
    generation = _meta(shadowpod).get("generation")
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def _recreations(status: Mapping[str, Any]) -> int:
    try:
        return max(0, int(status.get("recreations") or 0))
    except (TypeError, ValueError):
        return 0


def _clean(value: Any) -> Any:
    """Drop nulls (e.g. a pod condition's ``lastProbeTime: null``): a structural schema
    prunes them, and comparing against what was stored must not see a difference."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _normal(value: Any) -> Any:
    """Absent, null, "" and [] all read as "nothing" when comparing statuses."""
    value = _clean(value)
    return None if value in ("", [], {}) else value
