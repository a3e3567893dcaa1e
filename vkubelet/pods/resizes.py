"""The pod loop's step for an in-place resize of a running pod (``kubectl patch pod X
--subresource resize``): the new cpu and memory of its containers and sidecars go into the
ShadowPod's template, in a patch of their own (kube_offload/pod_resize.py), for the
provider to judge and its enforcer to apply through ``pods/resize``.

What the local pod shows meanwhile is what a kubelet shows (docs/virtual-kubelet.md,
"In-place resize"): once the provider took the resize, the remote kubelet's own
``PodResizeInProgress`` / ``PodResizePending`` and container resources (status.py); while
it does not, a ``PodResizePending`` condition written here, as the kubelet's allocation
manager writes it:

* ``Infeasible``: the pod alone asks more than this cluster's whole quota there (decided
  here with the provider's own quota rule, not sent), or the provider refuses the resize
  for what it is (422: its node could never hold it, a QoS class change...);
* ``Deferred``: the provider refuses it for now (403: the quota or the slice is used by
  other pods, a drain): tried again with the pod's backoff, and at once when the
  provider's terms for us ease, as a kubelet retries a deferred resize.

Each comes with the provider's words (the limit and the fix) and a Warning Event
(``ResizeInfeasible`` / ``ResizeDeferred``, the kubelet's reasons)."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kube_offload import pod_resize
from kube_offload import views
from kube_offload.runtime.kinds import SHADOWPODS
from kube_offload.runtime.kube import MERGE_PATCH, ApiError, object_key
from kube_offload.times import now_time
from vkubelet.pods import refusals as rf
from vkubelet.pods.step_context import StepContext

# Backoff key of the resize request: (pod key, RESIZE).
RESIZE = "resize"
# The kubelet's Event reasons for a pending resize (pkg/kubelet/events).
EVENT_REASONS = {pod_resize.INFEASIBLE: "ResizeInfeasible", pod_resize.DEFERRED: "ResizeDeferred"}


def sync_resize(loop: StepContext, local: dict[str, Any], shp: Mapping[str, Any], quota: Mapping[str, int],
                logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """Carry the local pod's resized containers into ``shp``'s template, or say on the pod
    why not. ``quota``: our Consumer's, as the provider counts it."""
    template = views.pod_template(shp) or {}
    spec = pod_resize.template_resize(template.get("spec") or {}, local.get("spec") or {})
    if spec is None:
        loop.refusals.forget((object_key(local), RESIZE))
        return
    attempt = loop.refusals.attempt((object_key(local), RESIZE), local)
    if attempt.wait > 0:
        return  # refused before and nothing changed since; a timer brings us back
    beyond = pod_resize.beyond_quota(local, quota, loop.settings.cluster_id)
    if beyond is not None:
        # Said on the pod first: a write that fails (409) leaves the verdict uncounted, so
        # the next reconcile says it instead of waiting out a backoff with nothing shown.
        _pending(loop, local, pod_resize.INFEASIBLE, f"not sent: {beyond}", logger)
        loop.refusals.refused(attempt.key, attempt.fingerprint)
        return
    meta = shp["metadata"]
    try:
        loop.kube.patch(SHADOWPODS, meta["name"], {"spec": {"pod": {"spec": spec}}}, namespace=meta["namespace"],
                        content_type=MERGE_PATCH)
    except ApiError as exc:
        refusal = rf.refusal_of(exc)
        if refusal is None:
            raise
        reason = pod_resize.DEFERRED if refusal.status == 403 else pod_resize.INFEASIBLE
        _pending(loop, local, reason, f"cluster {loop.settings.cluster_id} refused the resize: {refusal.message}", logger)
        _count, delay = loop.refusals.refused(attempt.key, attempt.fingerprint)
        if reason == pod_resize.DEFERRED:
            loop.controller.enqueue_after(object_key(local), delay)
        return
    loop.refusals.forget(attempt.key)
    logger.info("resize of %s sent to ShadowPod %s/%s", ", ".join(pod_resize.resized_containers(template.get("spec") or {},
                local.get("spec") or {})), meta["namespace"], meta["name"])


def _pending(loop: StepContext, local: dict[str, Any], reason: str, message: str,
             logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """The local pod's PodResizePending condition (and the kubelet's Event), written once."""
    message = message[: rf.MAX_STATUS_MESSAGE]
    generation = (local.get("metadata") or {}).get("generation")
    condition = pod_resize.pending_condition(reason, message, generation=generation if isinstance(generation, int) else None,
                                             now=now_time())
    conditions = pod_resize.with_pending(list((local.get("status") or {}).get("conditions") or []), condition)
    if conditions is None:
        return  # said already
    logger.warning("resize %s: %s", reason, message)
    loop.recorder.warning(local, EVENT_REASONS[reason], message)
    version = (local.get("metadata") or {}).get("resourceVersion")
    loop.local.patch_status(local, {"metadata": {"resourceVersion": version}, "status": {"conditions": conditions}})
