"""The pod loop's steps for a pod that ends or cannot run here: being deleted (its grace
period reaches the remote pod through the ShadowPod; the local pod goes once the remote
side has: termination.py), the remote cluster unreachable (marked not Ready:
readiness.py), its namespace no longer offloaded to this cluster, a DaemonSet pod that
is not offloaded (daemonsets.py). Each stops the remote side first."""

from __future__ import annotations

from typing import Any

import logging
from datetime import datetime, timezone

from kube_offload.reasons import REASON_NOT_OFFLOADED
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kube import object_key
from kube_offload.times import now_time, parse_time_or_none
from vkubelet.pods import daemonsets
from kube_offload import reasons
from vkubelet.pods import readiness
from vkubelet.pods import status as st
from vkubelet.pods import termination as term
from vkubelet.pods import shadowpods
from vkubelet.pods.step_context import StepContext

# A pod arriving together with its namespace's first offloading may find the twin not
# created yet; only warn when that lasts.
TWIN_WAIT_WARNING_SECONDS = 10.0
# How often to look again at a pod whose namespace is not offloaded to this cluster.
NOT_OFFLOADED_RETRY_SECONDS = 30.0
TERMINATION_POLL_SECONDS = 2.0


def terminate(loop: StepContext, local: dict[str, Any], shadows: list[dict[str, Any]], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """The local pod is being deleted (termination.py): its grace period reaches the
    remote pod through the ShadowPod; the local pod goes once the remote side has."""
    key = object_key(local)
    if not loop.reachable():
        _terminate_unreachable(loop, local, logger)
        return
    grace = term.grace_seconds(local)
    remote_pods = loop.remote_pods_of(key)
    # An enforcer that does not honour the request (an older one) must not keep the
    # pod for ever: past the deadline the ShadowPod goes, and its pod with it.
    deadline = term.unreachable_deadline(local, loop.settings.unreachable_deletion_margin)
    overdue = deadline is not None and datetime.now(timezone.utc) >= deadline
    for shp in shadows:
        running = [p for p in remote_pods if shadowpods.belongs_to(p, shp)]
        if running and not overdue:
            shadowpods.request_termination(loop, shp, grace, logger)
        else:
            shadowpods.delete(loop.kube, shp, logger, "its local pod is being deleted and its remote pod is gone")
    remaining = [f"ShadowPod {s['metadata']['namespace']}/{s['metadata']['name']}" for s in shadows]
    remaining += [f"pod {p['metadata']['namespace']}/{p['metadata']['name']}" for p in remote_pods]
    if remaining:
        raise Requeue(TERMINATION_POLL_SECONDS, f"waiting for remote {', '.join(remaining)} to go")
    loop.local.delete(local, logger, "remote pod gone: deleted the local pod")


def _terminate_unreachable(loop: StepContext, local: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """Nothing can be asked of the remote cluster nor confirmed by it: the local pod
    goes after its grace period plus the margin, with a Warning Event."""
    mark_unreachable(loop, local, logger)
    margin = loop.settings.unreachable_deletion_margin
    deadline = term.unreachable_deadline(local, margin)
    now = datetime.now(timezone.utc)
    if deadline is not None and now < deadline:
        raise Requeue(max(0.5, (deadline - now).total_seconds()), "remote cluster unreachable: waiting out the grace period")
    message = term.unconfirmed_message(loop.settings.cluster_id, term.grace_seconds(local), margin)
    logger.warning("%s", message)
    loop.recorder.warning(local, reasons.REASON_TERMINATION_UNCONFIRMED, message)
    loop.local.delete(local, logger, "remote cluster unreachable: deleted the local pod after its grace period")


def mark_unreachable(loop: StepContext, local: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """Ready and ContainersReady false while the remote cluster does not answer
    (readiness.py); written once, not at every reconcile."""
    message = readiness.unreachable_message(loop.settings.node_name, loop.settings.cluster_id)
    patch = st.status_patch(local, readiness.unreachable_status(local, message, now_time()))
    if patch is None:
        return
    loop.local.patch_status(local, patch)
    logger.warning("remote cluster %s unreachable: pod marked not Ready", loop.settings.cluster_id)
    loop.recorder.warning(local, reasons.REASON_NODE_NOT_READY, message)


def not_placeable(loop: StepContext, local: dict[str, Any], why: str, shadows: list[dict[str, Any]], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    meta = local["metadata"]
    plan = loop.twins.plan(meta["namespace"])
    if plan.twin is not None and plan.pods:
        # Offloaded here, twin on its way: normally a matter of milliseconds.
        created = parse_time_or_none(meta.get("creationTimestamp"))
        age = (datetime.now(timezone.utc) - created).total_seconds() if created else 0.0
        if age >= TWIN_WAIT_WARNING_SECONDS:
            loop.recorder.warning(local, reasons.REASON_OFFLOADING_FAILED, why)
        raise Requeue(1.0, why)
    message = f"cannot run on virtual node {loop.settings.node_name}: {why}"
    if plan.policy_error is not None:
        # A typo in a namespace label must not end running pods: wait for a fix.
        loop.recorder.warning(local, reasons.REASON_OFFLOADING_FAILED, message)
        raise Requeue(NOT_OFFLOADED_RETRY_SECONDS, message)
    # The namespace is no longer offloaded to this cluster (label removed, placement
    # Local, selector no longer matching): the pod cannot run here any more. Its
    # remote side is stopped first; then the pod ends like one a kubelet cannot
    # admit, so that its controller replaces it where the policy now allows.
    for shp in shadows:
        shadowpods.delete(loop.kube, shp, logger, why)
    remaining = shadows + loop.remote_pods_of(f"{meta['namespace']}/{meta['name']}")
    if remaining:
        raise Requeue(TERMINATION_POLL_SECONDS, f"{message}; waiting for its remote pod to go")
    failed = st.failed_status(local, REASON_NOT_OFFLOADED, message, now_time())
    if failed is None:
        return
    patch = st.status_patch(local, failed)
    if patch is not None:
        logger.warning("%s: marking the pod Failed", message)
        loop.recorder.warning(local, reasons.REASON_OFFLOADING_FAILED, message)
        loop.local.patch_status(local, patch)


def keep_home(loop: StepContext, local: dict[str, Any], daemonset: str, shadows: list[dict[str, Any]], logger: logging.LoggerAdapter[logging.Logger]) -> None:
    """A DaemonSet pod is not offloaded (vkubelet/pods/daemonsets.py): Pending with a
    reason, so that its DaemonSet controller neither deletes nor recreates it; a pod
    offloaded before is stopped remotely first, then ends."""
    text = daemonsets.message(daemonset, loop.settings.cluster_id, loop.settings.node_name)
    for shp in shadows:
        shadowpods.delete(loop.kube, shp, logger, "DaemonSet pods are not offloaded")
    remaining = shadows + loop.remote_pods_of(object_key(local))
    if remaining:
        raise Requeue(TERMINATION_POLL_SECONDS, "DaemonSet pod: waiting for its remote pod to go")
    if daemonsets.needs_ending(local):
        failed = st.failed_status(local, reasons.REASON_DAEMONSET_NOT_OFFLOADED, text, now_time())
        patch = st.status_patch(local, failed) if failed is not None else None
        if patch is not None:
            logger.warning("%s: its remote pod is gone, marking the pod Failed", text)
            loop.recorder.warning(local, reasons.REASON_DAEMONSET_NOT_OFFLOADED, text)
            loop.local.patch_status(local, patch)
        return
    patch = daemonsets.pending_patch(local, text)
    if patch is None:
        return  # already says so: nothing to write, no Event repeated at every resync
    loop.local.patch_status(local, patch)
    logger.info("DaemonSet %s: pod left Pending, not offloaded", daemonset)
    loop.recorder.normal(local, reasons.REASON_DAEMONSET_NOT_OFFLOADED, text)
