"""Handing a pod back (the I/O around vkubelet/pods/handback_rules.py): the workload's record on the
virtual Node first (so its next pod is already kept off this node when the scheduler
sees it), then the eviction of the local pod through the Eviction API (so its
PodDisruptionBudgets apply: a refused eviction is tried again later), then a Warning
Event ``HandedBack`` naming the remote's reason."""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

from kube_offload import handed_back as records
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kinds import NODES, PODS
from kube_offload.runtime.kube import MERGE_PATCH, NO_RETRY, ApiError, Kube
from kube_offload.times import utc_now
from kube_offload import reasons
from vkubelet.pods import handback_rules as hb
from vkubelet.pods.step_context import StepContext

# A PodDisruptionBudget that refuses the eviction (429): asked again this often.
EVICTION_BLOCKED_RETRY_SECONDS = 30.0


class HandbackCounts:
    """Pods handed back since start, by cause (the vkubelet's metric)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, cause: str) -> None:
        with self._lock:
            self._counts[cause] = self._counts.get(cause, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def consider(
    pods: StepContext,
    local: dict[str, Any],
    remote: Mapping[str, Any] | None,
    shadowpod: Mapping[str, Any] | None,
    logger: logging.LoggerAdapter[logging.Logger],
) -> tuple[bool, float | None]:
    """(handed back, seconds until it may be due): hand ``local`` back when it is due
    and may be evicted."""
    settings = pods.settings
    verdict = hb.decide(remote, shadowpod, now=utc_now(), after_seconds=settings.handback_after)
    if isinstance(verdict, hb.NotYet):
        return False, verdict.recheck
    return hand_back(pods, local, verdict, logger), None


def consider_refusal(pods: StepContext, local: dict[str, Any], message: str, logger: logging.LoggerAdapter[logging.Logger]) -> bool:
    """Hand ``local`` back if the provider's refusal of its ShadowPod (``message``, the
    provider's words) is for good; True when it was evicted."""
    due = hb.refusal_due(message, after_seconds=pods.settings.handback_after)
    return due is not None and hand_back(pods, local, due, logger)


def hand_back(pods: StepContext, local: dict[str, Any], verdict: hb.Due, logger: logging.LoggerAdapter[logging.Logger]) -> bool:
    """Record, evict, tell (see the module doc); False when the pod may not be evicted
    (said in a NotHandedBack Event) or is gone already."""
    settings = pods.settings
    meta = local["metadata"]
    why_not = hb.ineligible(local, pods.twins.local_namespaces.get(meta["namespace"]))
    if why_not is not None:
        pods.recorder.warning(
            local,
            reasons.REASON_NOT_HANDED_BACK,
            f"cluster {settings.cluster_id} cannot run the pod ({verdict.message}), but it is not evicted: {why_not}",
        )
        return False
    owner = records.controller_of(local)
    refused_seconds = None
    if owner is not None:
        refused_seconds = _record(pods.local.kube, settings.node_name, str(owner["uid"]), meta["uid"], verdict.cause)
    if not _evict(pods.local.kube, local, logger):
        return False
    pods.handbacks.add(verdict.cause)
    message = hb.event_message(verdict, settings.cluster_id, settings.node_name, refused_seconds)
    logger.warning("%s", message)
    pods.recorder.warning(local, reasons.REASON_HANDED_BACK, message)
    return True


def _record(kube: Kube, node_name: str, controller_uid: str, pod_uid: str, cause: str) -> float:
    """Write the workload's record on the virtual Node; the seconds it refuses the node."""
    node = kube.get(NODES, node_name)
    now = utc_now()
    updated = records.with_handback(records.records_of(node), controller_uid, pod_uid, cause, now)
    patch = records.node_patch(node, updated)
    if patch is not None:
        try:
            kube.patch(NODES, node_name, patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.conflict:
                raise Requeue(0.2, "virtual node changed meanwhile: handback record written again") from exc
            raise
    return max(0.0, (updated[controller_uid].until - now).total_seconds())


def _evict(kube: Kube, local: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> bool:
    """Evict the pod (this UID only); False when it is gone already or was replaced."""
    meta = local["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "deleteOptions": {"preconditions": {"uid": meta["uid"]}},
    }
    try:
        # No client retry on 429: here it is a PodDisruptionBudget's answer, not the
        # API server's flow control, and the queue asks again later.
        kube.create(PODS, body, namespace=meta["namespace"], subresource="eviction", retry=NO_RETRY)
    except ApiError as exc:
        if exc.not_found or exc.conflict:
            return False
        if exc.status == 429:
            logger.info("handback: eviction refused for now (%s); trying again", exc.message)
            raise Requeue(EVICTION_BLOCKED_RETRY_SECONDS, "eviction blocked by a PodDisruptionBudget") from exc
        raise
    return True
