"""The pod loop: its watches (which events bring a local pod's key back), and one
reconcile per local pod that reads the caches and picks the step that converges it
(package vkubelet.pods: shadowpods, ending, forbidden, local); the remote pod's status is
mirrored here."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, TYPE_CHECKING, cast

from kube_offload.remote_resources import is_ours
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.kube import Kube, object_key, split_key
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.times import parse_time_or_none
from kube_offload.views import ConsumerView
from vkubelet.pods import addresses, daemonsets
from kube_offload import reasons
from vkubelet.pods import readiness
from vkubelet.pods import refusals as rf
from vkubelet.pods import status as st
from vkubelet.shared.events import EventRecorder
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.home_api.pod_access import APIServerMode, resolve_mode
from vkubelet.shared.indexes import BY_ORIGIN, ours_by_origin
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.pods import debugging, ending, handback, resizes, shadowpods
from vkubelet.pods.first_status import FirstWriteHolds
from vkubelet.pods.forbidden import ForbiddenTwins
from vkubelet.pods.local import LocalPods
from vkubelet.shared.policy_events import PolicyNotices
from vkubelet.shared.provider_terms import PolicyReader
from vkubelet.reflection import usage
from vkubelet.pods.step_context import Desired
from vkubelet.pods.translation import TranslationContext, shadowpod_of, translate_pod
from vkubelet.shared.origin import origin_key, origin_uid

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

UNSCHEDULABLE_RETRY_SECONDS = 30.0

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
        home_api: Callable[[], HomeAPIEndpoint | None] | None = None,
    ) -> None:
        self.settings = settings
        # Where this remote cluster's pods reach their home API server (the consumer's relay
        # Service on the provider), read at each translation; None: no relay known.
        self.home_api = home_api or (lambda: None)
        # By-use reflection (vkubelet/reflection/usage.py): each says what of its kind a
        # pod references and is not exported yet; set by the runner once the reflectors
        # exist. A new pod's ShadowPod waits for them (bounded).
        self.export_gates: list[Callable[[Mapping[str, Any]], list[str]]] = []
        self.local = LocalPods(Kube(informers.local_client), settings.node_name)
        self.kube = Kube(informers.remote_client)
        self.twins = twins
        self.recorder = recorder
        self.refusals = rf.RefusalBackoff()
        # Pods handed back since start, by cause (vkubelet/pods/handback.py; a metric).
        self.handbacks = handback.HandbackCounts()
        # The provider's policy for us, read from our Consumer's cache at each use.
        self._policy = PolicyReader(lambda: twins.consumer.get(settings.local_cluster_id))
        self.notices = PolicyNotices(recorder)
        # Pods told that an address their provider reports is not shown (once each).
        self.outside_addresses = addresses.OutsideAddresses()
        # The first status write of a pod whose remote pod is Pending waits a moment, so
        # that its start is one write, not two (status.first_write_may_wait).
        self.first_writes = FirstWriteHolds(st.FIRST_WRITE_HOLD_SECONDS)
        # Per pod key, the inputs of the last template sync that found nothing to carry
        # (_sync_template): the same inputs give the same answer, so the translation is
        # not done again for each remote pod event, status echo and resync.
        self._templates_in_sync: dict[str, tuple[Any, ...]] = {}
        # The last context built (context()): an equal one is this object, so the entries
        # above share one context instead of holding a copy each (its node labels, quota
        # and policy: about 1.6 KiB per pod, issue 39), and comparing them is an identity check.
        self._last_context: TranslationContext | None = None
        # Pods not sent because the policy refuses them: tried again when it changes.
        self._policy_refused: set[str] = set()
        self._policy_refused_lock = threading.Lock()
        # Whether the remote cluster answers (the virtual node's Ready rule); while it does
        # not, pods are marked not Ready and nothing remote is attempted.
        self.reachable = reachable or (lambda: True)
        self._lost = False  # an outage seen and not yet over
        self._reconnected_at = 0.0  # monotonic: remote pods listed after this are the truth

        self.local_pods = informers.local_pods()
        self.shadowpods = informers.remote_shadowpods()
        self.remote_pods = informers.remote_pods()
        self.priority_classes = informers.remote_priority_classes()
        # Remote ShadowPods and pods by the local pod they stand for (vkubelet/shared/indexes.py),
        # kept by the informers themselves: current before any handler hears of a change.
        by_origin = ours_by_origin(settings.local_cluster_id)
        self.shadowpods.add_indexer(BY_ORIGIN, by_origin)
        self.remote_pods.add_indexer(BY_ORIGIN, by_origin)
        self.forbidden = ForbiddenTwins(settings, twins, recorder, self.shadowpods, self.remote_pods)

        self.controller = Controller(name="pods", reconcile=self.reconcile, workers=settings.workers)
        # Local pods: the echo of our own status patch is skipped (it only shows what we
        # just wrote; reconciling it again found nothing to do, for every status change of
        # every pod). Any other status-only update is not: the reconcile reads the local
        # status (terminal phase, startTime, the Ready it marked, conditions it keeps) and
        # must answer someone else's write at once, e.g. the node lifecycle controller
        # marking the virtual node's pods not Ready after a missed lease.
        self.controller.watch(self.local_pods, skip=self.local.own_status_write)
        # Remote pods and ShadowPods: never skipped on status. The remote pod's status is
        # what the local pod mirrors, and the ShadowPod's (recreations) goes into the
        # local restart counts.
        self.controller.watch(self.shadowpods, self._local_key_of)
        # A remote pod's milestone (running, ready, ended, lost) is the progress of a pod
        # already offloaded: the fast lane, so a burst of new pods to offload does not
        # hold every "Running" behind the last ShadowPod create. Its other changes wait in
        # line and fold into one status write (status.worth_hurrying).
        self.controller.watch(self.remote_pods, self._local_key_of, urgent=st.worth_hurrying)
        self.controller.watch(twins.requests, self._pods_of_twin)
        # Our Consumer object on the provider: when its terms ease (quota raised, usage
        # down, uncordoned), refused pods are tried again now, not at their backoff's end.
        twins.consumer.add_handler(self._on_consumer)

    def _wait_for_exports(self, local: dict[str, Any]) -> None:
        """Hold a new pod's ShadowPod back until what it references is exported
        (by-use policy): the reflectors were kicked by the same pod event."""
        if not self.export_gates:
            return
        pending = [what for gate in self.export_gates for what in gate(local)]
        created = parse_time_or_none((local.get("metadata") or {}).get("creationTimestamp"))
        waited = None if created is None else (datetime.now(timezone.utc) - created).total_seconds()
        why = usage.hold_for_exports(pending, waited)
        if why is not None:
            log.debug("pod %s/%s: %s", local["metadata"].get("namespace"), local["metadata"].get("name"), why)
            raise Requeue(usage.EXPORT_WAIT_RETRY_SECONDS, why)

    def informers(self) -> list[Any]:
        """Caches that must be complete before the first reconcile: deciding that a
        ShadowPod is an orphan from a half-listed cache would delete a live pod."""
        return [self.local_pods, self.shadowpods, self.remote_pods, *self.twins.informers()]

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
    def _is_ours(self, obj: Mapping[str, Any]) -> bool:
        return is_ours(obj, self.settings.local_cluster_id)

    def _shadows_of(self, key: str) -> list[dict[str, Any]]:
        """Our ShadowPods standing for local pod ``key``."""
        return self.shadowpods.by_index(BY_ORIGIN, key)

    def remote_pods_of(self, key: str) -> list[dict[str, Any]]:
        """Our remote pods standing for local pod ``key``."""
        return self.remote_pods.by_index(BY_ORIGIN, key)

    def _local_key_of(self, obj: dict[str, Any]) -> str | None:
        return origin_key(obj) if self._is_ours(obj) else None

    def _pods_of_twin(self, request: dict[str, Any]) -> list[str]:
        local_ns = self.twins.local_namespace_of(request)
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
            self.local.status_echoes.forget(key)
            self.first_writes.forget(key)
            self._templates_in_sync.pop(key, None)
        if local is None or (local.get("metadata") or {}).get("deletionTimestamp"):
            self.refusals.forget_prefix(key)
            self.not_policy_refused(key)
        if local is None:
            if shadows and not self.reachable():
                return  # nothing can be deleted there now; the reconnect resync brings it back
            if shadows and self.local.still_exists_elsewhere(key, shadows, logger):
                return
            for shp in shadows:
                shadowpods.delete(self.kube, shp, logger, "its local pod no longer exists")
            return
        forbidden = self.forbidden.twin_of(split_key(key)[0] or "")
        if forbidden is not None:
            # Everything below may act on what the remote caches do not show (end a pod
            # whose remote side "is gone", fail it, create what "is missing"): not here.
            self.forbidden.hold(local, forbidden)
        if (local.get("metadata") or {}).get("deletionTimestamp"):
            ending.terminate(self, local, shadows, logger)
            return

        daemonset = daemonsets.daemonset_of(local)
        if daemonset is not None and not self.settings.offload_daemonset_pods:
            ending.keep_home(self, local, daemonset, shadows, logger)
            return

        if not self.reachable():
            ending.mark_unreachable(self, local, logger)
            return

        namespace, name = split_key(key)
        twin, why = self.twins.pod_twin_for(namespace or "")
        if twin is None:
            ending.not_placeable(self, local, why, shadows, logger)
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
            shadowpods.delete(self.kube, shp, logger, "it stands for another pod of the same name or namespace")
        if current is None:
            if blocked:
                raise Requeue(1.0, "waiting for the previous ShadowPod of this name to go")
            self._wait_for_exports(local)
            attempt = self.refusals.attempt((key, shadowpods.CREATE), local)
            if attempt.wait > 0:
                raise Requeue(attempt.wait, "refused by the provider; waiting out the backoff")
            desired = self.desired(local, twin)
            if not desired.remote.loop:
                # A pod the provider's policy refuses is tried again when the policy changes.
                if desired.remote.refused:
                    self.policy_refused(key)
                else:
                    self.not_policy_refused(key)
            shadowpods.create(self, local, twin, desired, attempt, logger)
            return

        self._sync_template(key, local, current, twin, logger)
        resizes.sync_resize(self, local, current, self._policy.read()[1], logger)
        remote = self.remote_pods.get(f"{twin}/{name}")
        if remote is not None and (not self._is_ours(remote) or not shadowpods.belongs_to(remote, current)):
            remote = None  # a leftover of an older ShadowPod: its status is not this pod's
        if remote is None:
            # The enforcer has not made it yet (its creation will bring us back), or the
            # provider refuses to: for good, the pod is handed back.
            handback.consider(self, local, None, current, logger)
            return
        if readiness.needs_fresh_truth(local, self.remote_pods.listed_since(twin, self._reconnected_at)):
            raise Requeue(1.0, "back from an outage: waiting for a fresh list of the remote pods")
        self._sync_status(local, remote, current, logger)
        unschedulable = st.remote_unschedulable(remote)
        if unschedulable:
            self.recorder.warning(
                local,
                reasons.REASON_REMOTE_UNSCHEDULABLE,
                f"cluster {self.settings.cluster_id} cannot schedule the pod: {unschedulable}",
            )
            handed_back, due_in = handback.consider(self, local, remote, current, logger)
            if handed_back:
                return
            retry = UNSCHEDULABLE_RETRY_SECONDS if due_in is None else min(UNSCHEDULABLE_RETRY_SECONDS, due_in + 0.5)
            raise Requeue(retry, "remote pod unschedulable")

    def _sync_template(self, key: str, local: dict[str, Any], shp: dict[str, Any], twin: str,
                       logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """shadowpods.sync_template, skipped when its every input is what it was at the
        last sync that found the template in sync: the local pod and the ShadowPod (their
        resourceVersions: any change of either is a new version), the translation context
        (the provider's policy, the node's labels, the relay...) and the pod's API server
        mode. A running pod's reconciles are mostly remote pod events and echoes, which
        change none of these; the translation (a deep copy of the spec, the policy fit,
        the ShadowPod built) was most of such a reconcile's CPU (issue 39)."""
        context = self.context()
        mode = self.api_server_mode(local)
        inputs = (_version(local), shp["metadata"].get("uid"), _version(shp), twin, context, mode)
        if self._templates_in_sync.get(key) == inputs:
            return
        desired = self.desired(local, twin, context=context, mode=mode)
        # A debug container the policy refuses is sent when the provider grants it.
        if desired.remote.ephemeral_refused:
            self.policy_refused(key)
        else:
            self.not_policy_refused(key)
        in_sync = shadowpods.sync_template(self, local, shp, desired, logger)
        if debugging.sync(self, local, shp, desired, logger) and in_sync:
            self._templates_in_sync[key] = inputs
        else:
            self._templates_in_sync.pop(key, None)

    # --- what the steps are handed ---------------------------------------------------------------------
    def desired(self, local: dict[str, Any], twin: str, *, context: TranslationContext | None = None,
                mode: APIServerMode | None = None) -> Desired:
        """The pod as the remote cluster should run it and its ShadowPod in ``twin``, from
        the inputs read once here (the translation context, the pod's API server mode;
        read now unless the caller just read them)."""
        context = context or self.context()
        mode = mode or self.api_server_mode(local)
        remote = translate_pod(local, context, api_server=mode.mode, remote_namespace=twin)
        return Desired(
            remote=remote,
            shadowpod=shadowpod_of(remote, local, twin, context),
            mode=mode,
            relay_missing=bool(context.reflection) and context.home_api is None,
        )

    def context(self) -> TranslationContext:
        """The translation's context now; the same object as the last one while nothing in
        it changed (``_last_context``)."""
        built = self._build_context()
        last = self._last_context
        if last is not None and last == built:
            return last
        self._last_context = built  # a race between workers only costs a copy
        return built

    def _build_context(self) -> TranslationContext:
        policy, quota = self._policy.read()
        consumer = ConsumerView(self.twins.consumer.get(self.settings.local_cluster_id))
        return TranslationContext(
            local_cluster_id=self.settings.local_cluster_id,
            virtual_node_labels=self.twins.node_labels(),
            virtual_node_name=self.settings.node_name,
            remote_priority_classes=frozenset(self.priority_classes.keys()),
            policy=policy,
            quota=quota,
            provider_closed=consumer.cordoned or consumer.drain is not None,
            # Reflection provides the pod's tokens and kube-root-ca.crt in the twin
            # namespace; without it the pod runs with no API identity (translation.py).
            reflection=self.settings.reflection.service_account_tokens,
            home_api=self.home_api(),
            home_cluster_domain=self.settings.home_cluster_domain,
            slice_name=self.settings.slice_name,
            remote_cluster_id=self.settings.cluster_id,
        )

    def api_server_mode(self, local: Mapping[str, Any]) -> APIServerMode:
        """The pod's API server mode (its annotation, else its namespace's, else home)."""
        namespace = (local.get("metadata") or {}).get("namespace") or ""
        return resolve_mode(local, self.twins.local_namespaces.get(namespace))

    def _on_consumer(self, _event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if rf.terms_eased(old, new):
            self.provider_terms_changed()

    def provider_terms_changed(self) -> None:
        """The provider's terms for us eased (refusals.terms_eased): every refused pod is
        tried again now, not at the end of its backoff."""
        # RefusalBackoff keys any Hashable; this loop keys it by (pod key, operation).
        for key, operation in cast("list[tuple[str, str]]", self.refusals.keys()):
            if operation in (shadowpods.CREATE, resizes.RESIZE) and self.refusals.allow_now((key, operation)):
                self.controller.enqueue(key)
        with self._policy_refused_lock:
            refused = list(self._policy_refused)
        for key in refused:
            self.controller.enqueue(key)

    def policy_refused(self, key: str) -> None:
        with self._policy_refused_lock:
            self._policy_refused.add(key)

    def not_policy_refused(self, key: str) -> None:
        with self._policy_refused_lock:
            self._policy_refused.discard(key)

    def _sync_status(self, local: dict[str, Any], remote: dict[str, Any], shp: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        pod_ips = self.settings.remapping.remote_pod_ips
        outside = pod_ips.outside(st.remote_pod_ips(remote))
        if self.outside_addresses.first_time(local, outside):
            # Not shown (status.py): the provider chose them, and no honest provider's pod
            # has one (the enforcer refuses hostNetwork), or the range was set too narrow.
            message = addresses.outside_message(outside, self.settings.remapping.remote_pod_cidr, self.settings.cluster_id)
            logger.warning(message)
            self.recorder.warning(local, reasons.REASON_POD_IP_NOT_REMAPPED, message)
        desired = st.desired_status(local, remote, shp, self.settings.node_address, pod_ips)
        patch = st.status_patch(local, desired)
        if patch is None:
            return
        key = object_key(local)
        if st.first_write_may_wait(local, remote):
            wait = self.first_writes.left(key)
            if wait > 0:
                # No Requeue: the reconcile goes on to what follows the status sync.
                self.controller.enqueue_after(key, wait)
                return
        self.first_writes.forget(key)
        self.local.patch_status(local, patch)
        logger.debug("status updated: phase %s", (desired or {}).get("phase"))


def _version(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")
