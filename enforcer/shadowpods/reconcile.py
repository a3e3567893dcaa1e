"""Reconcile one ShadowPod: exactly one Pod, replaced at once when it is lost, and
changed in place when the ShadowPod's template changes in what a running pod may change.

The decision is :func:`kube_offload.shadowpod.plan` (pure, table-tested); this module
reads the caches, carries the plan out against the API server and turns every API
answer into the controller's outcomes (return, Requeue, PermanentError, or an error
retried with backoff). Running it twice in a row, or after a crash at any line, leaves
the same state: pods are created under the ShadowPod's own name, so a repeated create
meets AlreadyExists instead of making a duplicate, and deletions name the pod's UID.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping, Protocol

from enforcer.shadowpods.api import (
    GRANT_UNKNOWN_RECHECK_SECONDS,
    REFUSED_RECHECK_SECONDS,
    STALE_CACHE_RECHECK_SECONDS,
    EnforcerApi,
    pod_message,
    write_refused,
)
from enforcer.shadowpods.debugging import EphemeralContainers
from enforcer.shadowpods.events import EventRecorder
from enforcer.shadowpods.resize import Resizer
from kube_offload import ephemeral_containers, reasons
from kube_offload.admission import Decision
from kube_offload.constants import ANNOTATION_APPLIED_TEMPLATE, LABEL_MANAGED_BY, LABEL_SLICE, MANAGED_BY_ENFORCER
from kube_offload.pools import Pool
from kube_offload.runtime.controller import PermanentError, Requeue
from kube_offload.runtime.events import NORMAL, WARNING
from kube_offload.runtime.kube import ApiError, split_key
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.runtime.predicates import WriteEchoes, only_status_changed
from kube_offload.pod_updates import describe_patch
from kube_offload.shadowpod import (
    Action,
    InvalidShadowPod,
    PodFate,
    asks_for_remote_api,
    build_pod,
    capped_grace,
    controller_ref,
    deletion_grace,
    describe_end,
    is_owned_by,
    owner_key,
    plan,
    pod_fate,
    pod_update,
)
from kube_offload.shadowpod_status import (
    creation_failed_message,
    status_changed,
    status_from_pod,
    status_may_wait,
    status_without_pod,
    with_recorded_pod,
)

# How soon to look again at a name still held by a terminating pod. The pod's DELETED
# event normally triggers the reconcile first; this is the fallback.
TERMINATING_RECHECK_SECONDS = 2.0
# A pod of that name that the enforcer does not own blocks the ShadowPod; poll for it to go.
NAME_TAKEN_RECHECK_SECONDS = 30.0
# A resource slice's ShadowPod whose pool is not known (caches still listing, the slice
# or its pool gone meanwhile): its pod waits, never made without the pool's patch.
SLICE_POOL_RECHECK_SECONDS = 5.0
# How long the status of a ShadowPod's first pod may wait for that pod to leave Pending,
# so that creating and starting it is one status write instead of two (or, with the
# pod's conditions mirrored as before, three or four). A pod still Pending then is
# written Pending. Recreations, refusals, and anything that ends are written at once.
STATUS_COALESCE_SECONDS = 5.0

log = logging.getLogger("kube_offload.enforcer")


# The pod informer's index of managed pods by the ShadowPod controlling them
# (``namespace/name``): a reconcile finds its pods without scanning every managed pod in
# the cluster, which a resync would turn into a quadratic amount of work. The informer
# updates it before the event reaches the controller, so the reconcile a pod event
# triggers finds that pod where it now belongs.
BY_SHADOWPOD = "by-shadowpod"


def shadowpod_of(pod: dict[str, Any]) -> str | None:
    """The index function of :data:`BY_SHADOWPOD` (and the pod informer's key function
    for the controller): the ShadowPod controlling the pod; for a pod the enforcer made
    that has no controller at all any more, the ShadowPod it was made for, which has the
    pod's own name. The garbage collector strips the owner reference from dependents of
    an object deleted with ``--cascade=orphan``: without this such a pod would never be
    reconciled again, and would run on uncounted by anything but the quota."""
    key = owner_key(pod)
    if key is not None or not is_enforcer_orphan(pod):
        return key
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def is_enforcer_orphan(pod: dict[str, Any]) -> bool:
    """A pod the enforcer made (its label and its applied-template record, which only
    ``build_pod`` writes) that no controller owns any more. Such a pod belongs to no live
    ShadowPod (every pod is created with a controller reference to its ShadowPod), so it
    is deleted; a pod without both marks is never touched."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY_ENFORCER:
        return False
    if ANNOTATION_APPLIED_TEMPLATE not in (meta.get("annotations") or {}):
        return False
    return not any(ref.get("controller") for ref in meta.get("ownerReferences") or [])


POD_INDEXERS = {BY_SHADOWPOD: shadowpod_of}


class Cache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...


class PodCache(Cache, Protocol):
    """The managed pods, with the :data:`POD_INDEXERS` (an Informer, or in tests an Indexer)."""

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]: ...


Judge = Callable[[Mapping[str, Any]], Decision]
"""ShadowPod -> may the enforcer create its pod now? (enforcer/admission/shadowpod_webhook.py
``judge_pod``: the admission's own rules against the Consumer as it is now). A 503 means
"could not verify yet" (caches still listing): the pod waits; any other refusal is the
provider's no, written where the consumer reads it."""


def admit_every_pod(_shadowpod: Mapping[str, Any]) -> Decision:
    """The judge of an enforcer that serves no ShadowPod webhook (none configured): it has
    none of the admission's caches, so nothing is judged here either (as at admission)."""
    return Decision.allow()


class Reconciler:
    def __init__(
        self,
        *,
        shadowpods: Cache,
        pods: PodCache,
        api: EnforcerApi,
        recorder: EventRecorder,
        remote_api_access: Callable[[str], bool | None] = lambda _namespace: False,
        slice_pool: Callable[[str, str, str], Pool | None] = lambda _namespace, _slice, _recorded: None,
        max_grace: Callable[[str], int | None] = lambda _namespace: None,
        judge: Judge = admit_every_pod,
        status_coalesce_seconds: float = STATUS_COALESCE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``remote_api_access``: whether the consumer owning a twin namespace is granted
        the provider's API (``pods.remoteAPIAccess``); None while not known yet.
        ``slice_pool``: (twin namespace, slice name, recorded pool) -> the pool of that
        consumer's OffloadSlice, whose patch the pod of a ShadowPod labelled with the slice
        gets: the one its status recorded from its first pod, when it did (a pod keeps its
        pool); None while not known (the pod waits).
        ``max_grace``: twin namespace -> its consumer's largest termination grace
        (``pods.maxTerminationGracePeriodSeconds``), which every pod made is cut to and
        every deletion passes explicitly; None: not cut (no Consumer known).
        ``judge``: whether a pod may be created now (:data:`Judge`), asked before every
        create, the first and each recreation.
        ``status_coalesce_seconds``: see :data:`STATUS_COALESCE_SECONDS` (0: write the
        status of a new pod as soon as it is created)."""
        self._shadowpods = shadowpods
        self._remote_api_access = remote_api_access
        self._slice_pool = slice_pool
        self._max_grace = max_grace
        self._judge = judge
        # ShadowPod key -> the refusal its pod met at the last create (judge): judged again
        # when its Consumer changes (refused_keys, read by an informer's thread: hence the
        # lock) and every REFUSED_RECHECK_SECONDS.
        self._refused: dict[str, str] = {}
        self._refused_lock = threading.Lock()
        self._pods = pods
        self._api = api
        self._recorder = recorder
        # ShadowPod key -> the applied-template record of an update the provider refused:
        # not tried again (at every pod event) until the template changes.
        self._refused_updates: dict[str, str] = {}
        self._resizer = Resizer(api, recorder)  # in-place resize (enforcer/shadowpods/resize.py)
        # The resourceVersions our own ShadowPod status writes produced (their echoes).
        self._status_echoes = WriteEchoes()
        self._coalesce = max(0.0, status_coalesce_seconds)
        self._clock = clock
        # ShadowPod key -> (UID, deadline) of the first pod created for it whose status is
        # held back (status_may_wait). Used only to word and count what follows: a next
        # pod counts as a recreation of this one (with_recorded_pod). Lost on a restart,
        # when the pod, if it still exists, is written at once by the next enforcer.
        # A key is reconciled by one worker at a time, so entries are never raced.
        self._unrecorded: dict[str, tuple[str, float]] = {}
        # Ephemeral containers (kubectl debug) of the template, added to the running pod.
        self._ephemeral = EphemeralContainers(api, recorder, lambda: self._judge, clock)

    def __call__(self, key: str) -> None:
        namespace, name = split_key(key)
        if namespace is None:
            return  # ShadowPods are namespaced; nothing else is ever enqueued
        logger = ObjectLogger(log, {"key": key})
        shadowpod = self._shadowpods.get(key)
        pods = self._pods.by_index(BY_SHADOWPOD, key)
        if shadowpod is None:
            self._forget_refusal(key)
            self._refused_updates.pop(key, None)
            self._resizer.forget(key)
            self._status_echoes.forget(key)
            self._unrecorded.pop(key, None)
            self._ephemeral.forget(key)
            # The garbage collector deletes these through the owner reference; this is
            # the safety net for when it cannot (no kube-controller-manager, say).
            self._delete_orphans(namespace, name, pods, logger)
            return
        mine = [p for p in pods if is_owned_by(p, shadowpod)]
        orphans = [p for p in pods if not is_owned_by(p, shadowpod)]
        if orphans:
            # Pods of an earlier ShadowPod of the same name, not yet collected.
            self._delete_orphans(namespace, name, orphans, logger)

        # The consumer's largest grace, looked up only when the local pod's deletion asks
        # for one (the plan cuts it); every other deletion reads it in _delete.
        cap = self._max_grace(namespace) if deletion_grace(shadowpod) is not None else None
        decision = plan(shadowpod, mine, max_grace_seconds=cap)
        logger.debug("%s (pods: %d, deleting: %d)", decision.action.value, len(mine), len(decision.delete))
        if decision.action is not Action.CREATE:
            self._forget_refusal(key)
        for pod in decision.delete:
            self._delete(pod, logger, grace=decision.grace)
            if pod is not decision.replaced and decision.action is not Action.TERMINATE:
                self._recorder.record(
                    shadowpod,
                    NORMAL,
                    reasons.REASON_EXTRA_POD_DELETED,
                    f"Deleted pod {_name(pod)}: only one pod may run for a ShadowPod",
                )

        if decision.action is Action.MIRROR:
            assert decision.pod is not None
            wait = self._held_back(key, shadowpod, decision.pod)
            if not wait:
                self._write_status(shadowpod, status_from_pod(self._recorded(key, shadowpod), decision.pod), logger)
            self._update_in_place(shadowpod, decision.pod, logger)
            self._ephemeral.sync(shadowpod, decision.pod, logger)
            self._resizer.resize(shadowpod, decision.pod, logger)
            if wait:
                raise Requeue(wait, f"status of pod {name} held back while it is Pending")
        elif decision.action is Action.WAIT:
            raise Requeue(TERMINATING_RECHECK_SECONDS, f"pod {name} is still terminating")
        elif decision.action is Action.CREATE:
            self._create(shadowpod, decision.replaced, logger)
        elif decision.action is Action.TERMINATE and decision.delete:
            self._recorder.record(
                shadowpod,
                NORMAL,
                reasons.REASON_POD_TERMINATING,
                f"Deleting pod {name} with a grace period of {decision.grace}s: its local pod is being deleted",
            )

    # --- actions -----------------------------------------------------------------------
    def set_judge(self, judge: Judge) -> None:
        """Judge every pod with ``judge`` from now on (the webhook is built after this)."""
        self._judge = judge

    def refused_keys(self) -> list[str]:
        """The ShadowPods whose pod the provider's rules refused at the last create: what a
        change of their Consumer should have judged again."""
        with self._refused_lock:
            return list(self._refused)

    def _forget_refusal(self, key: str) -> str | None:
        with self._refused_lock:
            return self._refused.pop(key, None)

    def _judged(self, shadowpod: dict[str, Any], view: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Ask the judge whether the pod may be made now; raises Requeue when not (yet)."""
        meta = shadowpod["metadata"]
        key, name = f"{meta['namespace']}/{meta['name']}", meta["name"]
        # The pod as it is created: its ephemeral containers are judged when they are added.
        verdict = self._judge(ephemeral_containers.for_pod_create(shadowpod))
        if verdict.allowed:
            if self._forget_refusal(key) is not None:
                logger.info("pod %s is admitted again by the provider's rules", name)
            return
        if verdict.code == 503:
            raise Requeue(GRANT_UNKNOWN_RECHECK_SECONDS, f"could not judge pod {name} yet: {verdict.message}")
        again = "again " if (view.get("status") or {}).get("podUID") else ""
        message = creation_failed_message(
            name, f"the provider's rules refuse to run it {again}now (every pod is judged against the Consumer as it "
                  f"is when the pod is made): {verdict.message}"
        )
        with self._refused_lock:
            known = self._refused.get(key)
            self._refused[key] = verdict.message
        if known != verdict.message:
            logger.warning("%s", message)
            self._recorder.record(shadowpod, WARNING, reasons.REASON_POD_REFUSED, message)
        self._write_status(shadowpod, status_without_pod(view, message), logger, best_effort=True)
        raise Requeue(REFUSED_RECHECK_SECONDS, f"pod {name} refused by the provider's rules")

    def _create(self, shadowpod: dict[str, Any], replaced: dict[str, Any] | None, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = shadowpod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = f"{namespace}/{name}"
        # The status as if it recorded every pod this ShadowPod had: one whose status
        # write was held back, or one that ended before anything was written.
        view = with_recorded_pod(self._recorded(key, shadowpod), _uid(replaced))
        self._judged(shadowpod, view, logger)
        granted = False
        if asks_for_remote_api(shadowpod):
            answer = self._remote_api_access(namespace)
            if answer is None:
                raise Requeue(GRANT_UNKNOWN_RECHECK_SECONDS, "waiting for the Consumer caches: is the provider's API granted?")
            granted = answer
        pool = None
        slice_name = (meta.get("labels") or {}).get(LABEL_SLICE)
        if slice_name:
            pool = self._slice_pool(namespace, str(slice_name), str((view.get("status") or {}).get("slicePool") or ""))
            if pool is None:
                raise Requeue(SLICE_POOL_RECHECK_SECONDS, f"waiting for the pool of resource slice {slice_name}")
        try:
            pod = build_pod(shadowpod, remote_api_access=granted, pool=pool, max_grace_seconds=self._max_grace(namespace),
                            replacing=bool((view.get("status") or {}).get("podUID")))
        except InvalidShadowPod as exc:
            self._recorder.record(shadowpod, WARNING, reasons.REASON_INVALID_SHADOWPOD, str(exc))
            self._write_status(shadowpod, status_without_pod(view, f"invalid ShadowPod: {exc}"), logger)
            raise PermanentError(f"invalid ShadowPod: {exc}") from exc
        try:
            created = self._api.create_pod(namespace, pod)
        except ApiError as exc:
            if exc.already_exists:
                self._name_taken(shadowpod, logger)
            if exc.transient:
                raise
            # Refused for what the pod is or where it would go: quota, LimitRange,
            # PodSecurity, an admission webhook, validation. Say so where the user looks,
            # then let the controller retry with backoff (quota may free up).
            message = creation_failed_message(name, exc.message)
            self._recorder.record(shadowpod, WARNING, reasons.REASON_POD_CREATION_FAILED, message)
            self._write_status(shadowpod, status_without_pod(view, message), logger, best_effort=True)
            raise

        previous_uid = (view.get("status") or {}).get("podUID")
        if not previous_uid:
            # The routine create: no Event (the status says it, and the vkubelet would
            # copy the Event to the local pod, one write more in each cluster), and the
            # status waits for the pod to leave Pending (status_may_wait).
            logger.info("created pod %s", name)
            if self._coalesce and status_may_wait(shadowpod, created):
                self._unrecorded[key] = (str(_uid(created)), self._clock() + self._coalesce)
                raise Requeue(self._coalesce, f"status of new pod {name} held back while it is Pending")
            self._write_status(shadowpod, status_from_pod(shadowpod, created), logger)
            return
        if replaced is not None:
            message = f"Created pod {name} to replace one that ended ({describe_end(replaced)})"
        else:
            message = f"Created pod {name} to replace pod {previous_uid}, which was deleted"
        logger.info("%s", message)
        self._recorder.record(shadowpod, NORMAL, reasons.REASON_POD_RECREATED, message)
        # Written at once: the count must not wait on anything an enforcer restart loses.
        self._write_status(shadowpod, status_from_pod(view, created), logger)

    def _update_in_place(self, shadowpod: dict[str, Any], pod: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """A changed template (labels, annotations, images, activeDeadlineSeconds,
        tolerations: what a running pod may change) reaches the running pod by a patch,
        never by recreating it (kube_offload.pod_updates). A provider that refuses the
        patch (an admission policy, the pod's own validation) leaves the pod running as
        it was; the refusal is a Warning Event on the ShadowPod, which the consumer's
        virtual kubelet shows on its local pod."""
        if pod_fate(pod) is not PodFate.ACTIVE:
            return  # a finished run is mirrored, not changed
        try:
            patch = pod_update(shadowpod, pod)
        except InvalidShadowPod:
            return
        if patch is None:
            return
        key = f"{shadowpod['metadata']['namespace']}/{shadowpod['metadata']['name']}"
        applied = patch["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE]
        if self._refused_updates.get(key) == applied:
            return
        meta = pod["metadata"]
        what = describe_patch(patch)
        try:
            self._api.patch_pod(meta["namespace"], meta["name"], patch)
        except ApiError as exc:
            if not write_refused(exc, meta["name"]):
                return
            self._refused_updates[key] = applied
            message = (
                f"the provider refused to update pod {meta['name']} in place ({what}): {pod_message(exc)}; "
                "the pod keeps running as it was"
            )
            logger.warning("%s", message)
            self._recorder.record(shadowpod, WARNING, reasons.REASON_POD_UPDATE_REFUSED, message)
            return
        self._refused_updates.pop(key, None)
        logger.info("updated pod %s in place: %s", meta["name"], what)
        self._recorder.record(shadowpod, NORMAL, reasons.REASON_POD_UPDATED, f"Updated pod {meta['name']} in place: {what}")

    def _name_taken(self, shadowpod: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """The create met a pod of the same name that the cache does not show as ours
        (yet). Always raises: what to do depends on whose pod it is."""
        meta = shadowpod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        existing = self._api.get_pod(namespace, name)
        if existing is None or is_owned_by(existing, shadowpod):
            # Ours: the old pod still terminating, or one the informer has not delivered.
            raise Requeue(STALE_CACHE_RECHECK_SECONDS, f"pod {name} exists; waiting for the cache or its termination")
        if (controller_ref(existing) is not None and (controller_ref(existing) or {}).get("name") == name) or is_enforcer_orphan(
            existing
        ):
            # Made for an earlier ShadowPod of this name: its owner is gone (or it was
            # orphaned by a --cascade=orphan delete).
            self._delete_orphans(namespace, name, [existing], logger)
            raise Requeue(STALE_CACHE_RECHECK_SECONDS, f"deleted pod {name} of an earlier ShadowPod")
        message = f"a pod named {name} exists and is not managed by the enforcer; delete or rename it"
        self._recorder.record(shadowpod, WARNING, reasons.REASON_POD_NAME_TAKEN, message)
        view = self._recorded(f"{namespace}/{name}", shadowpod)
        self._write_status(shadowpod, status_without_pod(view, message), logger, best_effort=True)
        raise Requeue(NAME_TAKEN_RECHECK_SECONDS, message)

    def _delete(self, pod: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger], *, grace: int | None = None) -> None:
        """Delete ``pod`` (by UID) with an explicit grace: ``grace``, or the pod's own cut to
        its consumer's largest (a pod made before the bound, or by hand, may ask for more)."""
        meta = pod["metadata"]
        if grace is None:
            grace = self._pod_grace(pod)
        if grace is None:
            logger.info("deleting pod %s (uid %s)", meta["name"], meta.get("uid"))
            self._api.delete_pod(meta["namespace"], meta["name"], meta["uid"])
            return
        logger.info("deleting pod %s (uid %s) with a grace period of %ds", meta["name"], meta.get("uid"), grace)
        self._api.delete_pod(meta["namespace"], meta["name"], meta["uid"], grace_period_seconds=grace)

    def _pod_grace(self, pod: dict[str, Any]) -> int | None:
        cap = self._max_grace(str(pod["metadata"].get("namespace") or ""))
        if cap is None:
            return None
        return capped_grace((pod.get("spec") or {}).get("terminationGracePeriodSeconds"), cap)

    def _delete_orphans(self, namespace: str, name: str, pods: list[dict[str, Any]], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Delete the pods whose owning ShadowPod no longer exists, after checking with the
        API server itself: a cache that lags must never cost a live pod."""
        candidates = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        if not candidates:
            return
        live = self._api.get_shadowpod(namespace, name)
        live_uid = ((live or {}).get("metadata") or {}).get("uid")
        for pod in candidates:
            if is_enforcer_orphan(pod):
                # No owner at all (orphaned by the garbage collector): whatever the
                # ShadowPod of that name is now, this pod is not its pod.
                logger.info("pod %s was orphaned from its ShadowPod (--cascade=orphan?); deleting it", _name(pod))
                self._delete(pod, logger)
                continue
            ref_uid = (controller_ref(pod) or {}).get("uid")
            if ref_uid is None or ref_uid == live_uid:
                continue  # controlled by something else, or by the live ShadowPod
            logger.info("pod %s outlived its ShadowPod", _name(pod))
            self._delete(pod, logger)

    def write_held_back(self, seconds: float) -> int:
        """On a graceful stop, after the workers: write every status still held back
        (status_may_wait), so that the next enforcer finds each pod this one created
        recorded and counts a replacement of it, even of one deleted meanwhile (then the
        status names it with no pod: Pending). Best effort, for at most ``seconds``;
        returns how many were written. Only crashes are left to the window the docs
        describe (docs/enforcer.md, Status writes)."""
        deadline = self._clock() + seconds
        written = 0
        for key, (uid, _due) in list(self._unrecorded.items()):
            if self._clock() >= deadline:
                log.warning("stopping with %d ShadowPod statuses not written", len(self._unrecorded))
                break
            shadowpod = self._shadowpods.get(key)
            if shadowpod is None:
                continue
            view = self._recorded(key, shadowpod)
            pod = next((p for p in self._pods.by_index(BY_SHADOWPOD, key) if _uid(p) == uid), None)
            desired = status_from_pod(view, pod) if pod is not None else status_without_pod(view, "")
            try:
                self._write_status(shadowpod, desired, ObjectLogger(log, {"key": key}), best_effort=True)
            except Exception as exc:  # noqa: BLE001 - stopping: say so and go on with the next
                log.warning("[%s] could not write the status held back: %s", key, exc)
                continue
            written += key not in self._unrecorded
        return written

    def _recorded(self, key: str, shadowpod: dict[str, Any]) -> dict[str, Any]:
        """The ShadowPod as if the status of a pod held back (:attr:`_unrecorded`) had
        been written."""
        entry = self._unrecorded.get(key)
        return dict(with_recorded_pod(shadowpod, entry[0] if entry else None))

    def _held_back(self, key: str, shadowpod: dict[str, Any], pod: dict[str, Any]) -> float:
        """Seconds the status write for ``pod`` may still wait (0: write it now): only
        for the first pod this enforcer created, while it is Pending, until the deadline."""
        entry = self._unrecorded.get(key)
        if entry is None or entry[0] != _uid(pod) or not status_may_wait(shadowpod, pod):
            return 0.0
        left = entry[1] - self._clock()
        return left if left > 0 else 0.0

    def _write_status(
        self, shadowpod: dict[str, Any], desired: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger], *, best_effort: bool = False
    ) -> None:
        meta = shadowpod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if not status_changed(shadowpod, desired):
            if desired.get("podUID"):
                self._unrecorded.pop(key, None)
            return
        try:
            written = self._api.patch_shadowpod_status(meta["namespace"], meta["name"], desired, meta.get("resourceVersion", ""))
        except ApiError as exc:
            if best_effort:
                logger.warning("could not update status: %s", exc)
                return
            if exc.not_found:
                return  # deleted meanwhile; its DELETED event brings us back
            if exc.conflict:
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "ShadowPod changed meanwhile") from exc
            raise
        # Its watch event may come before this line (then it is reconciled, harmlessly).
        self._status_echoes.wrote(written)
        if desired.get("podUID"):
            self._unrecorded.pop(key, None)  # the status records a pod now

    def own_status_write(self, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
        """Whether a ShadowPod update is only the echo of our own status write: the
        reconcile reads the ShadowPod's status (recreations, podUID), so someone else's
        status write is reconciled, but what we just wrote needs no second look."""
        return only_status_changed(old, new) and self._status_echoes.is_echo(new)


def _uid(pod: dict[str, Any] | None) -> str | None:
    uid: str | None = (pod or {}).get("metadata", {}).get("uid")
    return uid


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name"))
