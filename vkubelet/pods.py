"""Pod offloading (loops 4, 6 and 7 of ARCHITECTURE.md): each local pod bound to the
virtual node is run as a ShadowPod in its twin namespace, and its status follows the
remote pod's.

One reconcile per local pod key ``namespace/name``, triggered by the local pod, its
ShadowPod(s), its remote pod and its twin namespace; it reads only caches and converges:

* local pod gone -> every ShadowPod of ours that stood for it is deleted (orphans, e.g.
  after a vkubelet crash between the user's delete and ours);
* local pod terminating -> its ShadowPod asks for the remote pod's end with the local
  deletion's grace period, and is deleted once that pod is gone; once the ShadowPod and
  the remote pod are both gone, the local pod is deleted with grace 0, as a kubelet
  confirms a pod's end (termination.py; unreachable remote cluster: after the grace
  period plus a margin, with a Warning Event);
* remote cluster unreachable (the virtual node NotReady) -> the pod is marked not Ready,
  and Ready again only from a fresh list of the remote pods (readiness.py);
* a DaemonSet pod -> not offloaded unless --offload-daemonset-pods: left Pending with a
  reason (daemonsets.py), so its DaemonSet controller does not churn it;
* otherwise -> exactly one ShadowPod, named like the pod, in the twin namespace, for this
  pod's UID (one for an older pod of the same name is deleted first); what a running pod
  may change (labels, annotations, images, activeDeadlineSeconds, tolerations) follows
  into its template, and from there the enforcer patches the remote pod in place
  (kube_offload/pod_updates.py); the remote pod's status is copied back when it differs.

Deterministic names (same pod name, twin namespace from naming.py) are what make a crash
at any point safe: a second create meets AlreadyExists instead of making a duplicate.

A provider may also revoke our access to one Ready twin (its RoleBinding
``kube-offload-consumer`` deleted): the twin-scoped caches of that namespace are then
empty or stale (kube_offload/runtime/namespaced_informer.py: forbidden), so they prove
no absence. The namespace's pods are left exactly as they are - no ShadowPod created,
none deleted, no status written, no local pod failed or deleted - with one Warning log
line naming the twin and the fix and a Warning Event ``TwinNamespaceForbidden`` on each
pod, until a list there is accepted again; every other namespace carries on.

A provider may refuse a ShadowPod (its webhook, quota, Pod Security: 403/422). The pod
then gets a Warning Event ``ProviderRefused`` with the provider's words, stays Pending
with ``status.reason``/``message`` saying it waits for the provider, and is tried again
with a per-pod exponential backoff (refusals.py); every reconcile in between (informer
events, resyncs, our own status write) is answered without a request.

Before sending, the provider's policy for us (``Consumer.spec.policy``) takes out what its
admission would refuse (translation.py, policy_fit.py): each field changed gets one Warning
Event ``ProviderPolicyAdjusted`` on the local pod once the ShadowPod is created. A pod the
policy refuses whatever is dropped (a volume type it does not grant) is not sent: Warning
Events ``ProviderPolicyRefused`` name the fields, the pod stays Pending with
``status.reason`` ``ProviderRefused``, and it is looked at again when it or the policy
changes. Each note is told once per pod (policy_events.py), not at every resync.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Mapping

from kubernetes import client

from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.pod_updates import template_patch
from kube_offload.runtime.kinds import SHADOWPODS
from kube_offload.runtime.kube import ApiError, Kube, call_json, object_key, split_key, MERGE_PATCH
from kube_offload.runtime.predicates import WriteEchoes, only_status_changed
from kube_offload.runtime.logs import ObjectLogger
from vkubelet import daemonsets
from vkubelet import policy_fit
from vkubelet import events as ev
from vkubelet import readiness
from vkubelet import refusals as rf
from vkubelet import status as st
from vkubelet import termination as term
from vkubelet.events import EventRecorder
from vkubelet.informers import SharedInformers
from vkubelet.namespaces import FORBIDDEN_RETRY_SECONDS, TwinNamespaces
from kube_offload.times import now_time, parse_time_or_none
from vkubelet.indexes import BY_ORIGIN, ours_by_origin
from kube_offload.remote_resources import is_ours
from vkubelet.settings import Settings
from vkubelet.policy_events import PolicyNotices
from vkubelet.provider_terms import PolicyReader
from vkubelet.translation import TranslationContext, origin_key, origin_uid, shadowpod_of, translate_pod
# status.reason of a pod ended because its namespace stopped being offloaded here.
from kube_offload.reasons import REASON_NOT_OFFLOADED  # noqa: F401  (re-exported)


# A pod arriving together with its namespace's first offloading may find the twin not
# created yet; only warn when that lasts.
TWIN_WAIT_WARNING_SECONDS = 10.0
# How often to look again at a pod whose namespace is not offloaded to this cluster.
NOT_OFFLOADED_RETRY_SECONDS = 30.0
REJECTED_RETRY_SECONDS = 30.0
# A pod the provider's policy refuses is looked at again this often (and at once when
# the policy on our Consumer changes).
POLICY_REFUSED_RETRY_SECONDS = 60.0
UNSCHEDULABLE_RETRY_SECONDS = 30.0
TERMINATION_POLL_SECONDS = 2.0
# Backoff keys of the two requests a provider may refuse: (pod key, operation).
CREATE = "create"
UPDATE = "update"

log = logging.getLogger("kube_offload.vkubelet.pods")


class PodOffloader:
    def __init__(
        self,
        settings: Settings,
        informers: SharedInformers,
        twins: TwinNamespaces,
        recorder: EventRecorder,
        *,
        reachable: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self._local = client.CoreV1Api(informers.local_client)
        self._kube = Kube(informers.remote_client)
        self._twins = twins
        self._recorder = recorder
        self.refusals = rf.RefusalBackoff()
        # The provider's policy for us, read from our Consumer's cache at each use.
        self._policy = PolicyReader(lambda: twins.consumer.get(settings.local_cluster_id))
        self._notices = PolicyNotices(recorder)
        # Pods not sent because the policy refuses them: tried again when it changes.
        self._policy_refused: set[str] = set()
        self._policy_refused_lock = threading.Lock()
        # Whether the remote cluster answers (the virtual node's Ready rule); while it does
        # not, pods are marked not Ready and nothing remote is attempted.
        self._reachable = reachable or (lambda: True)
        self._lost = False  # an outage seen and not yet over
        self._reconnected_at = 0.0  # monotonic: remote pods listed after this are the truth

        self.local_pods = informers.local_pods()
        self.shadowpods = informers.remote_shadowpods()
        self.remote_pods = informers.remote_pods()
        self.priority_classes = informers.remote_priority_classes()
        # Remote ShadowPods and pods by the local pod they stand for (vkubelet/indexes.py),
        # kept by the informers themselves: current before any handler hears of a change.
        by_origin = ours_by_origin(settings.local_cluster_id)
        self.shadowpods.add_indexer(BY_ORIGIN, by_origin)
        self.remote_pods.add_indexer(BY_ORIGIN, by_origin)
        # Twin namespaces whose 403 was already logged (once per revocation, not per pod).
        self._forbidden_told: set[str] = set()
        self._forbidden_lock = threading.Lock()
        # The resourceVersions our own pods/status patches produced (their echoes).
        self._status_echoes = WriteEchoes()

        self.controller = Controller(name="pods", reconcile=self.reconcile, workers=settings.workers)
        # Local pods: the echo of our own status patch is skipped (it only shows what we
        # just wrote; reconciling it again found nothing to do, for every status change of
        # every pod). Any other status-only update is not: the reconcile reads the local
        # status (terminal phase, startTime, the Ready it marked, conditions it keeps) and
        # must answer someone else's write at once, e.g. the node lifecycle controller
        # marking the virtual node's pods not Ready after a missed lease.
        self.controller.watch(self.local_pods, skip=self._own_status_write)
        # Remote pods and ShadowPods: never skipped on status. The remote pod's status is
        # what the local pod mirrors, and the ShadowPod's (recreations) goes into the
        # local restart counts.
        self.controller.watch(self.shadowpods, self._local_key_of)
        self.controller.watch(self.remote_pods, self._local_key_of)
        self.controller.watch(twins.requests, self._pods_of_twin)
        # Our Consumer object on the provider: when its terms ease (quota raised, usage
        # down, uncordoned), refused pods are tried again now, not at their backoff's end.
        twins.consumer.add_handler(self._on_consumer)

    def informers(self) -> list:
        """Caches that must be complete before the first reconcile: deciding that a
        ShadowPod is an orphan from a half-listed cache would delete a live pod."""
        return [self.local_pods, self.shadowpods, self.remote_pods, *self._twins.informers()]

    def remote_lost(self) -> None:
        """The virtual node turned NotReady: every pod is marked not Ready now."""
        self._lost = True
        for key in self.local_pods.keys():
            self.controller.enqueue(key)

    def remote_reconnected(self) -> None:
        """The remote cluster answers again: its pods and ShadowPods are listed afresh, and
        a pod marked not Ready takes its status from the remote pod only once that list
        is in (readiness.needs_fresh_truth). Called before resync_all."""
        if not self._lost:
            return  # the first contact after start-up: the caches were just listed
        self._lost = False
        self._reconnected_at = time.monotonic()
        self.remote_pods.relist()
        self.shadowpods.relist()

    def resync_all(self) -> None:
        for key in set(self.local_pods.keys()) | set(self.shadowpods.index_values(BY_ORIGIN)):
            self.controller.enqueue(key)

    # --- event -> key ------------------------------------------------------------------------
    def _is_ours(self, obj: Mapping) -> bool:
        return is_ours(obj, self.settings.local_cluster_id)

    def _shadows_of(self, key: str) -> list[dict]:
        """Our ShadowPods standing for local pod ``key``."""
        return self.shadowpods.by_index(BY_ORIGIN, key)

    def _remote_pods_of(self, key: str) -> list[dict]:
        """Our remote pods standing for local pod ``key``."""
        return self.remote_pods.by_index(BY_ORIGIN, key)

    def _own_status_write(self, old: dict | None, new: dict) -> bool:
        """Whether a local pod update is only the echo of our own pods/status patch."""
        return only_status_changed(old, new) and self._status_echoes.is_echo(new)

    def _local_key_of(self, obj: dict) -> str | None:
        return origin_key(obj) if self._is_ours(obj) else None

    def _pods_of_twin(self, request: dict) -> list[str]:
        local_ns = self._twins.local_namespace_of(request)
        if not local_ns:
            return []
        prefix = f"{local_ns}/"
        return [key for key in self.local_pods.keys() if key.startswith(prefix)]

    # --- reconcile -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        logger = ObjectLogger(log, {"key": key})
        local = self.local_pods.get(key)
        shadows = self._shadows_of(key)
        if local is None:
            self._status_echoes.forget(key)
        if local is None or (local.get("metadata") or {}).get("deletionTimestamp"):
            self.refusals.forget_prefix(key)
            self._not_policy_refused(key)
        if local is None:
            if shadows and not self._reachable():
                return  # nothing can be deleted there now; the reconnect resync brings it back
            if shadows and self._still_exists_elsewhere(key, shadows, logger):
                return
            for shp in shadows:
                self._delete_shadowpod(shp, logger, "its local pod no longer exists")
            return
        forbidden = self._forbidden_twin(split_key(key)[0] or "")
        if forbidden is not None:
            # Everything below may act on what the remote caches do not show (end a pod
            # whose remote side "is gone", fail it, create what "is missing"): not here.
            self._twin_forbidden(local, forbidden, logger)
        if (local.get("metadata") or {}).get("deletionTimestamp"):
            self._terminate(local, shadows, logger)
            return

        daemonset = daemonsets.daemonset_of(local)
        if daemonset is not None and not self.settings.offload_daemonset_pods:
            self._keep_home(local, daemonset, shadows, logger)
            return

        if not self._reachable():
            self._mark_unreachable(local, logger)
            return

        namespace, name = split_key(key)
        twin, why = self._twins.pod_twin_for(namespace or "")
        if twin is None:
            self._not_placeable(local, why, shadows, logger)
            return

        uid = local["metadata"]["uid"]
        current = None
        blocked = False
        for shp in shadows:
            meta = shp["metadata"]
            if meta.get("namespace") == twin and origin_uid(shp) == uid and not meta.get("deletionTimestamp"):
                current = shp
                continue
            if meta.get("namespace") == twin:
                blocked = True  # same name, so the new one can only be created once it is gone
            self._delete_shadowpod(shp, logger, "it stands for another pod of the same name or namespace")
        if current is None:
            if blocked:
                raise Requeue(1.0, "waiting for the previous ShadowPod of this name to go")
            self._create_shadowpod(local, twin, logger)
            return

        self._sync_template(local, current, twin, logger)
        remote = self.remote_pods.get(f"{twin}/{name}")
        if remote is not None and (not self._is_ours(remote) or not _belongs_to(remote, current)):
            remote = None  # a leftover of an older ShadowPod: its status is not this pod's
        if remote is None:
            return  # the enforcer has not made it yet; its creation will bring us back
        if readiness.needs_fresh_truth(local, self.remote_pods.listed_since(twin, self._reconnected_at)):
            raise Requeue(1.0, "back from an outage: waiting for a fresh list of the remote pods")
        self._sync_status(local, remote, current, logger)
        unschedulable = st.remote_unschedulable(remote)
        if unschedulable:
            self._recorder.warning(
                local,
                ev.REASON_REMOTE_UNSCHEDULABLE,
                f"cluster {self.settings.cluster_id} cannot schedule the pod: {unschedulable}",
            )
            raise Requeue(UNSCHEDULABLE_RETRY_SECONDS, "remote pod unschedulable")

    # --- a twin we may not read ------------------------------------------------------------
    def _forbidden_twin(self, namespace: str) -> str | None:
        """The twin namespace of local ``namespace`` whose remote caches were answered 403
        (None: readable, or no twin). The twin is found from the namespace's plan and from
        our TwinNamespace requests (a namespace no longer offloaded still has its twin)."""
        forbidden = set(self.shadowpods.forbidden_namespaces()) | set(self.remote_pods.forbidden_namespaces())
        self._forget_recovered(forbidden)
        if not forbidden:
            return None
        plan = self._twins.plan(namespace)
        if plan.twin in forbidden:
            return plan.twin
        for twin in sorted(forbidden):
            request = self._twins.requests.get(f"{self.settings.tenant_namespace}/{twin}")
            if request is not None and self._twins.local_namespace_of(request) == namespace:
                return twin
        return None

    def _forget_recovered(self, forbidden: set[str]) -> None:
        with self._forbidden_lock:
            back = self._forbidden_told - forbidden
            self._forbidden_told -= back
        for twin in sorted(back):
            log.info("twin namespace %s on cluster %s can be read again: its pods are managed again", twin, self.settings.cluster_id)

    def forbidden_message(self, twin: str, namespace: str) -> str:
        reason = self.shadowpods.forbidden_reason(twin) or self.remote_pods.forbidden_reason(twin)
        return (
            f"twin namespace {twin} of namespace {namespace} on cluster {self.settings.cluster_id} cannot be read "
            f"(HTTP 403 Forbidden: {reason or 'forbidden'}): the provider revoked this consumer's access. Its pods are "
            "left as they are (no status mirroring, no offloading, nothing deleted) until access returns; fix on the "
            f"provider: restore RoleBinding {c.TWIN_ROLEBINDING_NAME} in namespace {twin} (the enforcer writes it for a "
            f"Ready TwinNamespace request), or delete the request {self.settings.tenant_namespace}/{twin} to end the "
            "offloading there"
        )

    def _twin_forbidden(self, local: dict, twin: str, logger: logging.LoggerAdapter) -> None:
        namespace = local["metadata"]["namespace"]
        message = self.forbidden_message(twin, namespace)
        with self._forbidden_lock:
            first = twin not in self._forbidden_told
            self._forbidden_told.add(twin)
        if first:
            log.warning("%s", message)
        self._recorder.warning(local, ev.REASON_TWIN_FORBIDDEN, message)
        raise Requeue(FORBIDDEN_RETRY_SECONDS, f"twin namespace {twin} forbidden")

    # --- steps -----------------------------------------------------------------------------
    def context(self) -> TranslationContext:
        return TranslationContext(
            local_cluster_id=self.settings.local_cluster_id,
            virtual_node_labels=self._twins.node_labels(),
            virtual_node_name=self.settings.node_name,
            remote_priority_classes=frozenset(self.priority_classes.keys()),
            policy=self._policy(),
            # Reflection provides the pod's tokens and kube-root-ca.crt in the twin
            # namespace; without it the pod runs with no API identity (translation.py).
            reflection=self.settings.reflection.service_account_tokens,
        )

    def _on_consumer(self, _event: str, old: dict | None, new: dict) -> None:
        if rf.terms_eased(old, new):
            self.provider_terms_changed()

    def provider_terms_changed(self) -> None:
        """The provider's terms for us eased (refusals.terms_eased): every refused pod is
        tried again now, not at the end of its backoff."""
        for key, operation in list(self.refusals.keys()):
            if operation == CREATE and self.refusals.allow_now((key, operation)):
                self.controller.enqueue(key)
        with self._policy_refused_lock:
            refused = list(self._policy_refused)
        for key in refused:
            self.controller.enqueue(key)

    def _not_policy_refused(self, key: str) -> None:
        with self._policy_refused_lock:
            self._policy_refused.discard(key)

    def _refused_by_policy(self, local: dict, refused: tuple[policy_fit.Note, ...], logger: logging.LoggerAdapter) -> None:
        """The provider's policy refuses the pod whatever we drop: not sent, said on the
        pod (Events, once per note; status.reason ProviderRefused), looked at again
        later or when the policy changes."""
        key = object_key(local)
        with self._policy_refused_lock:
            self._policy_refused.add(key)
        refusal = rf.policy_refusal(self.settings.cluster_id, [note.message for note in refused])
        if self._notices.tell(local, refused=refused):
            logger.warning("%s", refusal.message)
        self._mark_waiting(local, refusal)
        raise Requeue(POLICY_REFUSED_RETRY_SECONDS, "refused by the provider's policy: not sent")

    def _create_shadowpod(self, local: dict, twin: str, logger: logging.LoggerAdapter) -> None:
        backoff_key = (object_key(local), CREATE)
        print_ = rf.pod_fingerprint(local)
        wait = self.refusals.wait(backoff_key, print_)
        if wait > 0:
            raise Requeue(wait, "refused by the provider; waiting out the backoff")
        context = self.context()
        remote = translate_pod(local, context)
        if remote.refused:
            self._refused_by_policy(local, remote.refused, logger)
        self._not_policy_refused(object_key(local))
        body = shadowpod_of(remote, local, twin, context)
        try:
            self._kube.create(SHADOWPODS, body, namespace=twin)
        except ApiError as exc:
            if exc.already_exists:
                raise Requeue(0.5, "ShadowPod exists but is not in the cache yet") from exc
            if exc.transient:
                raise
            if exc.not_found:
                raise Requeue(2.0, f"twin namespace {twin} not found yet") from exc
            refusal = rf.refusal_of(exc)
            if refusal is not None:
                delay = self._refused(local, backoff_key, print_, refusal, f"ShadowPod {twin}/{local['metadata']['name']}", logger)
                self._mark_waiting(local, refusal)
                raise Requeue(delay, f"refused by the provider: {refusal.message}") from exc
            message = f"cluster {self.settings.cluster_id} refused the ShadowPod {twin}/{local['metadata']['name']}: {exc.message}"
            logger.warning(message)
            self._recorder.warning(local, ev.REASON_OFFLOADING_FAILED, message)
            raise Requeue(REJECTED_RETRY_SECONDS, message) from exc
        self.refusals.forget(backoff_key)
        self._clear_waiting(local)
        # What the provider's policy took out, on the pod that now runs without it.
        self._notices.tell(local, adjusted=remote.adjusted)
        logger.info("created ShadowPod %s/%s in cluster %s", twin, local["metadata"]["name"], self.settings.cluster_id)
        self._recorder.normal(
            local, ev.REASON_OFFLOADED, f"running in cluster {self.settings.cluster_id} as {twin}/{local['metadata']['name']}"
        )

    def _refused(
        self, local: dict, backoff_key: tuple, print_: str, refusal: rf.Refusal, what: str, logger: logging.LoggerAdapter
    ) -> float:
        """Count one refusal: log it, tell the pod's Events, return the backoff delay.
        The recorder folds repeats (min_interval), so a refusal repeated at every step
        adds to one Event's count rather than writing Events faster than the steps."""
        attempt, delay = self.refusals.refused(backoff_key, print_)
        logger.warning(
            "cluster %s refused %s %s (HTTP %d, refusal %d in a row, next attempt in %.0fs): %s",
            self.settings.cluster_id, backoff_key[1], what, refusal.status, attempt, delay, refusal.message,
        )
        self._recorder.warning(local, ev.REASON_PROVIDER_REFUSED, refusal.message)
        return delay

    def _mark_waiting(self, local: dict, refusal: rf.Refusal) -> None:
        patch = rf.waiting_status_patch(local, self.settings.cluster_id, refusal)
        if patch is not None:
            self._patch_status(local, patch)

    def _clear_waiting(self, local: dict) -> None:
        patch = rf.clear_waiting_patch(local)
        if patch is not None:
            try:
                self._patch_status(local, patch)
            except (ApiError, Requeue):
                pass  # cosmetic: the remote pod's status overwrites it soon anyway

    def _still_exists_elsewhere(self, key: str, shadows: list[dict], logger: logging.LoggerAdapter) -> bool:
        """Before deleting ShadowPods as orphans, ask the API server itself: a cache
        that lags behind, or a pod bound to another virtual node of this same remote
        cluster (two vkubelets of one local cluster sharing a provider), must not cost
        a running pod. True when the local pod exists after all."""
        namespace, name = split_key(key)
        try:
            pod = call_json(self._local.read_namespaced_pod, name, namespace)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        uids = {origin_uid(shp) for shp in shadows}
        if pod.get("metadata", {}).get("uid") not in uids:
            return False  # another pod of the same name: the ShadowPods are orphans
        if (pod.get("spec") or {}).get("nodeName") == self.settings.node_name:
            raise Requeue(2.0, "the local pod exists; waiting for the cache to show it")
        logger.warning(
            "ShadowPods of this pod exist but it is bound to node %s, not %s: left alone",
            (pod.get("spec") or {}).get("nodeName"),
            self.settings.node_name,
        )
        return True

    def _delete_shadowpod(self, shp: dict, logger: logging.LoggerAdapter, why: str) -> None:
        meta = shp["metadata"]
        if meta.get("deletionTimestamp"):
            return
        try:
            self._kube.delete(SHADOWPODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"])
            logger.info("deleted ShadowPod %s/%s: %s", meta["namespace"], meta["name"], why)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # already gone, or replaced by one we did not mean to delete
            raise

    def _terminate(self, local: dict, shadows: list[dict], logger: logging.LoggerAdapter) -> None:
        """The local pod is being deleted (termination.py): its grace period reaches the
        remote pod through the ShadowPod; the local pod goes once the remote side has."""
        key = object_key(local)
        if not self._reachable():
            self._terminate_unreachable(local, logger)
            return
        grace = term.grace_seconds(local)
        remote_pods = self._remote_pods_of(key)
        # An enforcer that does not honour the request (an older one) must not keep the
        # pod for ever: past the deadline the ShadowPod goes, and its pod with it.
        deadline = term.unreachable_deadline(local, self.settings.unreachable_deletion_margin)
        overdue = deadline is not None and datetime.now(timezone.utc) >= deadline
        for shp in shadows:
            running = [p for p in remote_pods if _belongs_to(p, shp)]
            if running and not overdue:
                self._request_termination(shp, grace, logger)
            else:
                self._delete_shadowpod(shp, logger, "its local pod is being deleted and its remote pod is gone")
        remaining = [f"ShadowPod {s['metadata']['namespace']}/{s['metadata']['name']}" for s in shadows]
        remaining += [f"pod {p['metadata']['namespace']}/{p['metadata']['name']}" for p in remote_pods]
        if remaining:
            raise Requeue(TERMINATION_POLL_SECONDS, f"waiting for remote {', '.join(remaining)} to go")
        self._delete_local(local, logger, "remote pod gone: deleted the local pod")

    def _request_termination(self, shp: dict, grace: int, logger: logging.LoggerAdapter) -> None:
        meta = shp["metadata"]
        patch = term.grace_request_patch(shp, grace)
        if patch is None or meta.get("deletionTimestamp"):
            return
        patch["metadata"]["uid"] = meta["uid"]  # this very ShadowPod, not a newer one of the name
        try:
            self._kube.patch(SHADOWPODS, meta["name"], patch, namespace=meta["namespace"], content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # gone or replaced meanwhile; its event brings us back
            raise
        logger.info("asked cluster %s to end ShadowPod %s/%s's pod with a grace period of %ds",
                    self.settings.cluster_id, meta["namespace"], meta["name"], grace)

    def _terminate_unreachable(self, local: dict, logger: logging.LoggerAdapter) -> None:
        """Nothing can be asked of the remote cluster nor confirmed by it: the local pod
        goes after its grace period plus the margin, with a Warning Event."""
        self._mark_unreachable(local, logger)
        margin = self.settings.unreachable_deletion_margin
        deadline = term.unreachable_deadline(local, margin)
        now = datetime.now(timezone.utc)
        if deadline is not None and now < deadline:
            raise Requeue(max(0.5, (deadline - now).total_seconds()), "remote cluster unreachable: waiting out the grace period")
        message = term.unconfirmed_message(self.settings.cluster_id, term.grace_seconds(local), margin)
        logger.warning("%s", message)
        self._recorder.warning(local, ev.REASON_TERMINATION_UNCONFIRMED, message)
        self._delete_local(local, logger, "remote cluster unreachable: deleted the local pod after its grace period")

    def _delete_local(self, local: dict, logger: logging.LoggerAdapter, done: str) -> None:
        """The final delete (grace 0, this pod's UID), as a kubelet confirms a pod's end."""
        meta = local["metadata"]
        try:
            call_json(
                self._local.delete_namespaced_pod,
                meta["name"],
                meta["namespace"],
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
            logger.info("%s", done)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return
            raise

    def _mark_unreachable(self, local: dict, logger: logging.LoggerAdapter) -> None:
        """Ready and ContainersReady false while the remote cluster does not answer
        (readiness.py); written once, not at every reconcile."""
        message = readiness.unreachable_message(self.settings.node_name, self.settings.cluster_id)
        patch = st.status_patch(local, readiness.unreachable_status(local, message, now_time()))
        if patch is None:
            return
        self._patch_status(local, patch)
        logger.warning("remote cluster %s unreachable: pod marked not Ready", self.settings.cluster_id)
        self._recorder.warning(local, ev.REASON_NODE_NOT_READY, message)

    def _not_placeable(self, local: dict, why: str, shadows: list[dict], logger: logging.LoggerAdapter) -> None:
        meta = local["metadata"]
        plan = self._twins.plan(meta["namespace"])
        if plan.twin is not None and plan.pods:
            # Offloaded here, twin on its way: normally a matter of milliseconds.
            created = parse_time_or_none(meta.get("creationTimestamp"))
            age = (datetime.now(timezone.utc) - created).total_seconds() if created else 0.0
            if age >= TWIN_WAIT_WARNING_SECONDS:
                self._recorder.warning(local, ev.REASON_OFFLOADING_FAILED, why)
            raise Requeue(1.0, why)
        message = f"cannot run on virtual node {self.settings.node_name}: {why}"
        if plan.policy_error is not None:
            # A typo in a namespace label must not end running pods: wait for a fix.
            self._recorder.warning(local, ev.REASON_OFFLOADING_FAILED, message)
            raise Requeue(NOT_OFFLOADED_RETRY_SECONDS, message)
        # The namespace is no longer offloaded to this cluster (label removed, placement
        # Local, selector no longer matching): the pod cannot run here any more. Its
        # remote side is stopped first; then the pod ends like one a kubelet cannot
        # admit, so that its controller replaces it where the policy now allows.
        for shp in shadows:
            self._delete_shadowpod(shp, logger, why)
        remaining = shadows + self._remote_pods_of(f"{meta['namespace']}/{meta['name']}")
        if remaining:
            raise Requeue(TERMINATION_POLL_SECONDS, f"{message}; waiting for its remote pod to go")
        failed = st.failed_status(local, REASON_NOT_OFFLOADED, message, now_time())
        if failed is None:
            return
        patch = st.status_patch(local, failed)
        if patch is not None:
            logger.warning("%s: marking the pod Failed", message)
            self._recorder.warning(local, ev.REASON_OFFLOADING_FAILED, message)
            self._patch_status(local, patch)

    def _keep_home(self, local: dict, daemonset: str, shadows: list[dict], logger: logging.LoggerAdapter) -> None:
        """A DaemonSet pod is not offloaded (vkubelet/daemonsets.py): Pending with a
        reason, so that its DaemonSet controller neither deletes nor recreates it; a pod
        offloaded before is stopped remotely first, then ends."""
        text = daemonsets.message(daemonset, self.settings.cluster_id, self.settings.node_name)
        for shp in shadows:
            self._delete_shadowpod(shp, logger, "DaemonSet pods are not offloaded")
        remaining = shadows + self._remote_pods_of(object_key(local))
        if remaining:
            raise Requeue(TERMINATION_POLL_SECONDS, "DaemonSet pod: waiting for its remote pod to go")
        if daemonsets.needs_ending(local):
            failed = st.failed_status(local, daemonsets.REASON_NOT_OFFLOADED, text, now_time())
            patch = st.status_patch(local, failed) if failed is not None else None
            if patch is not None:
                logger.warning("%s: its remote pod is gone, marking the pod Failed", text)
                self._recorder.warning(local, daemonsets.REASON_NOT_OFFLOADED, text)
                self._patch_status(local, patch)
            return
        patch = daemonsets.pending_patch(local, text)
        if patch is None:
            return  # already says so: nothing to write, no Event repeated at every resync
        self._patch_status(local, patch)
        logger.info("DaemonSet %s: pod left Pending, not offloaded", daemonset)
        self._recorder.normal(local, daemonsets.REASON_NOT_OFFLOADED, text)

    def _sync_template(self, local: dict, shp: dict, twin: str, logger: logging.LoggerAdapter) -> None:
        """What a running pod may change - labels and annotations (a controller adopting
        or releasing it, `kubectl label`), container images, activeDeadlineSeconds,
        tolerations - follows into the ShadowPod's template; the enforcer then patches
        the remote pod in place (kube_offload.pod_updates). The rest of the template is
        left as first written."""
        context = self.context()
        remote = translate_pod(local, context)
        wanted = shadowpod_of(remote, local, twin, context)["spec"]["pod"]
        have = (shp.get("spec") or {}).get("pod") or {}
        patch = template_patch(have, wanted)
        if not patch:
            return
        meta = shp["metadata"]
        backoff_key = (object_key(local), UPDATE)
        print_ = rf.pod_fingerprint(local)
        if self.refusals.wait(backoff_key, print_) > 0:
            return  # refused before and nothing changed since; a timer brings us back
        try:
            self._kube.patch(
                SHADOWPODS, meta["name"], {"spec": {"pod": patch}}, namespace=meta["namespace"], content_type=MERGE_PATCH
            )
        except ApiError as exc:
            refusal = rf.refusal_of(exc)
            if refusal is None:
                raise
            # The pod runs on; only its new labels/annotations wait. The status sync
            # of this reconcile must still happen, so no Requeue: a timer instead.
            delay = self._refused(local, backoff_key, print_, refusal, f"the update of ShadowPod {meta['namespace']}/{meta['name']}", logger)
            self.controller.enqueue_after(object_key(local), delay)
            return
        self.refusals.forget(backoff_key)
        # What the policy took out of what a running pod may change (labels,
        # annotations, tolerations); the rest of the template was told at creation.
        self._notices.tell(local, adjusted=[n for n in remote.adjusted if n.field.startswith(_UPDATABLE_FIELDS)])
        logger.info("updated ShadowPod %s/%s: %s", meta["namespace"], meta["name"], ", ".join(_changed(patch)))

    def _sync_status(self, local: dict, remote: dict, shp: dict, logger: logging.LoggerAdapter) -> None:
        pod_ips = self.settings.remapping.remote_pod_ips
        outside = pod_ips.outside(st.remote_pod_ips(remote))
        if outside:
            # Shown as they are (a host-network pod's node address, a CIDR left out of
            # --remote-pod-cidr): the local cluster may not reach them.
            message = (
                f"pod IP {', '.join(outside)} is outside --remote-pod-cidr={self.settings.remapping.remote_pod_cidr}: "
                "shown as the remote cluster assigned it, not remapped"
            )
            logger.warning(message)
            self._recorder.warning(local, ev.REASON_POD_IP_NOT_REMAPPED, message)
        desired = st.desired_status(local, remote, shp, self.settings.node_address, pod_ips)
        patch = st.status_patch(local, desired)
        if patch is not None:
            self._patch_status(local, patch)
            logger.debug("status updated: phase %s", (desired or {}).get("phase"))

    def _patch_status(self, local: dict, patch: dict) -> None:
        meta = local["metadata"]
        try:
            written = call_json(
                self._local.patch_namespaced_pod_status, meta["name"], meta["namespace"], patch, _content_type=MERGE_PATCH
            )
        except ApiError as exc:
            if exc.not_found:
                return
            if exc.conflict:
                raise Requeue(0.2, "local pod changed meanwhile") from exc
            raise
        # Its watch event may come before this line (then it is reconciled, harmlessly).
        self._status_echoes.wrote(written)


# The fields of a running pod an update carries (kube_offload/pod_updates.py) whose
# policy notes are told when it is carried.
_UPDATABLE_FIELDS = ("metadata.labels", "metadata.annotations", "spec.tolerations")




def _changed(template_patch: Mapping) -> list[str]:
    return [*sorted((template_patch.get("metadata") or {}).keys()), *sorted((template_patch.get("spec") or {}).keys())]


def _belongs_to(pod: Mapping, shp: Mapping) -> bool:
    """The remote pod was made for this very ShadowPod (or carries no owner to say)."""
    if shadowpod.controller_ref(pod) is None:
        return True
    return shadowpod.is_owned_by(pod, shp)
