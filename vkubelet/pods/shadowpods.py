"""The pod loop's steps on the ShadowPod that stands for a local pod: create it (fitted
to the provider's policy first), carry what a running pod may change into its template,
ask for its pod's end, delete it. A provider that refuses a request (403/422) costs the
pod a per-pod exponential backoff (refusals.py) and says so on the pod."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload import views
from kube_offload.pod_updates import template_patch
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kinds import SHADOWPODS
from kube_offload.runtime.kube import MERGE_PATCH, ApiError, Kube, object_key
from kube_offload import reasons
from kube_offload.runtime.events import NORMAL, WARNING
from vkubelet.shared import policy_fit
from vkubelet.pods import refusals as rf
from vkubelet.pods import handback
from vkubelet.pods import termination as term
from vkubelet.home_api.pod_access import APIServerMode
from vkubelet.pods.step_context import Desired, StepContext

REJECTED_RETRY_SECONDS = 30.0
# A pod the provider's policy refuses is looked at again this often (and at once when
# the policy on our Consumer changes).
POLICY_REFUSED_RETRY_SECONDS = 60.0
# Backoff keys of the two requests a provider may refuse: (pod key, operation).
CREATE = "create"
UPDATE = "update"
# The fields of a running pod an update carries (kube_offload/pod_updates.py) whose
# policy notes are told when it is carried.
_UPDATABLE_FIELDS = ("metadata.labels", "metadata.annotations", "spec.tolerations")


def create(
    loop: StepContext, local: dict[str, Any], twin: str, desired: Desired, attempt: rf.Attempt, logger: logging.LoggerAdapter[logging.Logger]
) -> None:
    """Send ``desired``'s ShadowPod. The reconcile translated the pod (``desired``) and found
    its backoff over (``attempt``); a pod the provider's policy refuses, or that would loop
    back to a cluster it came through, is not sent but said on the pod."""
    remote = desired.remote
    if remote.loop:
        _refused_loop(loop, local, remote.loop, logger)
    if remote.refused:
        _refused_by_policy(loop, local, remote.refused, logger)
    try:
        loop.kube.create(SHADOWPODS, desired.shadowpod, namespace=twin)
    except ApiError as exc:
        if exc.already_exists:
            raise Requeue(0.5, "ShadowPod exists but is not in the cache yet") from exc
        if exc.transient:
            raise
        if exc.not_found:
            raise Requeue(2.0, f"twin namespace {twin} not found yet") from exc
        refusal = rf.refusal_of(exc)
        if refusal is not None:
            delay = _refused(loop, local, attempt, refusal, f"ShadowPod {twin}/{local['metadata']['name']}", logger)
            _mark_waiting(loop, local, refusal)
            # A refusal for good (the provider's dry run of the pod meets a quota it alone
            # exceeds, Pod Security...): the pod goes elsewhere instead of waiting here.
            if handback.consider_refusal(loop, local, refusal.message, logger):
                return
            raise Requeue(delay, f"refused by the provider: {refusal.message}") from exc
        message = f"cluster {loop.settings.cluster_id} refused the ShadowPod {twin}/{local['metadata']['name']}: {exc.message}"
        logger.warning(message)
        loop.recorder.warning(local, reasons.REASON_OFFLOADING_FAILED, message)
        raise Requeue(REJECTED_RETRY_SECONDS, message) from exc
    _clear_waiting(loop, local, loop.refusals.accepted(attempt.key, local))
    # What the provider's policy took out, on the pod that now runs without it.
    loop.notices.tell(local, adjusted=remote.adjusted)
    logger.info("created ShadowPod %s/%s in cluster %s", twin, local["metadata"]["name"], loop.settings.cluster_id)
    kind, reason, message = offloaded_event(loop.settings.cluster_id, twin, local["metadata"]["name"], desired.mode,
                                            relay_missing=desired.relay_missing)
    if kind == WARNING:
        loop.recorder.warning(local, reason, message)
    else:
        loop.recorder.normal(local, reason, message)


def sync_template(loop: StepContext, local: dict[str, Any], shp: dict[str, Any], desired: Desired, logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """What a running pod may change - labels and annotations (a controller adopting
    or releasing it, `kubectl label`), container images, activeDeadlineSeconds,
    tolerations - follows into the ShadowPod's template; the enforcer then patches
    the remote pod in place (kube_offload.pod_updates). The rest of the template is
    left as first written."""
    patch = template_patch(views.pod_template(shp) or {}, views.pod_template(desired.shadowpod) or {})
    if not patch:
        return
    meta = shp["metadata"]
    attempt = loop.refusals.attempt((object_key(local), UPDATE), local)
    if attempt.wait > 0:
        return  # refused before and nothing changed since; a timer brings us back
    try:
        loop.kube.patch(
            SHADOWPODS, meta["name"], {"spec": {"pod": patch}}, namespace=meta["namespace"], content_type=MERGE_PATCH
        )
    except ApiError as exc:
        refusal = rf.refusal_of(exc)
        if refusal is None:
            raise
        # The pod runs on; only its new labels/annotations wait. The status sync
        # of this reconcile must still happen, so no Requeue: a timer instead.
        delay = _refused(loop, local, attempt, refusal, f"the update of ShadowPod {meta['namespace']}/{meta['name']}", logger)
        loop.controller.enqueue_after(object_key(local), delay)
        return
    loop.refusals.forget(attempt.key)
    # What the policy took out of what a running pod may change (labels,
    # annotations, tolerations); the rest of the template was told at creation.
    loop.notices.tell(local, adjusted=[n for n in desired.remote.adjusted if n.field.startswith(_UPDATABLE_FIELDS)])
    logger.info("updated ShadowPod %s/%s: %s", meta["namespace"], meta["name"], ", ".join(_changed(patch)))


def request_termination(loop: StepContext, shp: dict[str, Any], grace: int, logger: logging.LoggerAdapter[logging.Logger]) -> None:
    meta = shp["metadata"]
    patch = term.grace_request_patch(shp, grace)
    if patch is None or meta.get("deletionTimestamp"):
        return
    patch["metadata"]["uid"] = meta["uid"]  # this very ShadowPod, not a newer one of the name
    try:
        loop.kube.patch(SHADOWPODS, meta["name"], patch, namespace=meta["namespace"], content_type=MERGE_PATCH)
    except ApiError as exc:
        if exc.not_found or exc.conflict:
            return  # gone or replaced meanwhile; its event brings us back
        raise
    logger.info("asked cluster %s to end ShadowPod %s/%s's pod with a grace period of %ds",
                loop.settings.cluster_id, meta["namespace"], meta["name"], grace)


def delete(kube: Kube, shp: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger], why: str) -> None:
    meta = shp["metadata"]
    if meta.get("deletionTimestamp"):
        return
    try:
        kube.delete(SHADOWPODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        logger.info("deleted ShadowPod %s/%s: %s", meta["namespace"], meta["name"], why)
    except ApiError as exc:
        if exc.not_found or exc.conflict:
            return  # already gone, or replaced by one we did not mean to delete
        raise


def belongs_to(pod: Mapping[str, Any], shp: Mapping[str, Any]) -> bool:
    """The remote pod was made for this very ShadowPod (or carries no owner to say)."""
    if shadowpod.controller_ref(pod) is None:
        return True
    return shadowpod.is_owned_by(pod, shp)


def offloaded_event(cluster_id: str, twin: str, name: str, mode: APIServerMode, *, relay_missing: bool) -> tuple[str, str, str]:
    """The one Event the vkubelet writes on a pod it has just offloaded: (type, reason,
    message). Normally ``Offloaded`` (where the pod runs). When the pod's in-cluster
    configuration is not what it asked for - an annotation value that means nothing, or
    mode ``home`` where the provider runs no relay to our API server for us - the Warning
    that says so takes its place and names where the pod runs too: one write per pod,
    not two (issue 27), and the Warning is what `kubectl get events --field-selector
    type=Warning` must find. A recreation of the ShadowPod tells it again; the recorder
    folds repeats."""
    where = f"running in cluster {cluster_id} as {twin}/{name}"
    if mode.problem:
        return WARNING, reasons.REASON_INVALID_API_SERVER_MODE, f"{where}, but {mode.problem}"
    if mode.mode == c.API_SERVER_HOME and relay_missing:
        return WARNING, reasons.REASON_HOME_API_UNAVAILABLE, (
            f"{where}, but cluster {cluster_id} runs no relay to this cluster's API server for us (no Service "
            f"{c.HOME_API_SERVICE} in our tenant namespace there): the pod's in-cluster configuration reaches the "
            f"provider's API server, where its home token is worth nothing. Ask the provider to enable the relay "
            f"(docs/home-api.md), or set {c.ANNOTATION_API_SERVER}={c.API_SERVER_DISABLED} on the pod or namespace"
        )
    return NORMAL, reasons.REASON_OFFLOADED, where


def _refused_by_policy(loop: StepContext, local: dict[str, Any], refused: tuple[policy_fit.Note, ...], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """The provider's policy refuses the pod whatever we drop: not sent, said on the
    pod (Events, once per note; status.reason ProviderRefused), looked at again
    later or when the policy changes (the reconcile keeps the pods it refuses)."""
    refusal = rf.policy_refusal(loop.settings.cluster_id, [note.message for note in refused])
    if loop.notices.tell(local, refused=refused):
        logger.warning("%s", refusal.message)
    _mark_waiting(loop, local, refusal)
    raise Requeue(POLICY_REFUSED_RETRY_SECONDS, "refused by the provider's policy: not sent")


def _refused_loop(loop: StepContext, local: dict[str, Any], problem: str, logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """The pod came through the cluster it would go to (docs/multihop.md): not sent, said
    on the pod (Event OffloadingLoop, the waiting status), looked at again later. Nothing we
    can change makes it fit: only the peerings or the providers' furtherOffloading can.
    (The provider's enforcer refuses it too, when it knows its own cluster id.)"""
    refusal = rf.Refusal(0, reasons.REASON_OFFLOADING_LOOP, f"not sent to cluster {loop.settings.cluster_id}: {problem}")
    logger.warning("%s", refusal.message)
    loop.recorder.warning(local, reasons.REASON_OFFLOADING_LOOP, refusal.message)
    _mark_waiting(loop, local, refusal)
    raise Requeue(POLICY_REFUSED_RETRY_SECONDS, "offloading loop: not sent")


def _refused(
    loop: StepContext, local: dict[str, Any], attempt: rf.Attempt, refusal: rf.Refusal, what: str, logger: logging.LoggerAdapter[logging.Logger],
) -> float:
    """Count one refusal: log it, tell the pod's Events, return the backoff delay.
    The recorder folds repeats (min_interval), so a refusal repeated at every step
    adds to one Event's count rather than writing Events faster than the steps."""
    count, delay = loop.refusals.refused(attempt.key, attempt.fingerprint)
    operation = attempt.key[1] if isinstance(attempt.key, tuple) else attempt.key
    logger.warning(
        "cluster %s refused %s %s (HTTP %d, refusal %d in a row, next attempt in %.0fs): %s",
        loop.settings.cluster_id, operation, what, refusal.status, count, delay, refusal.message,
    )
    loop.recorder.warning(local, reasons.REASON_PROVIDER_REFUSED, refusal.message)
    return delay


def _mark_waiting(loop: StepContext, local: dict[str, Any], refusal: rf.Refusal) -> None:
    patch = rf.waiting_status_patch(local, loop.settings.cluster_id, refusal)
    if patch is not None:
        loop.local.patch_status(local, patch)


def _clear_waiting(loop: StepContext, local: dict[str, Any], patch: dict[str, Any] | None) -> None:
    if patch is not None:
        try:
            loop.local.patch_status(local, patch)
        except (ApiError, Requeue):
            pass  # cosmetic: the remote pod's status overwrites it soon anyway


def _changed(template_patch: Mapping[str, Any]) -> list[str]:
    return [*sorted((template_patch.get("metadata") or {}).keys()), *sorted((template_patch.get("spec") or {}).keys())]
