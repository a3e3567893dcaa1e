"""Wiring of the ShadowPod controller: two informers (ShadowPods, and the pods the
enforcer manages, indexed by their ShadowPod), the work queue and its workers; and, once it runs,
the provider-side loops (TwinNamespace controller, Consumer status: enforcer/consumers/consumer_loops.py);
declared to the process manager (kube_offload/runtime/manager.py), which runs them."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from kubernetes import client

from enforcer.shadowpods.api import KubeEnforcerApi
from enforcer.shadowpods.events import EventRecorder
from enforcer.shadowpods.reconcile import POD_INDEXERS, Judge, Reconciler, shadowpod_of
from enforcer.shadowpods.trim import keep_shadowpod, trim_managed_pod
from enforcer.consumers.consumer_loops import ConsumerLoops
from enforcer.consumers.quota import twin_owner
from kube_offload.constants import (
    DEFAULT_CONSUMER_TWIN_ROLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_ENFORCER,
)
from kube_offload.consumers import service_account_of
from kube_offload.pools import Pool, PoolError, parse_pools
from kube_offload.provider_policy import DEFAULT_POLICY, ProviderPolicy, ProviderPolicyError, parse_policy
from kube_offload.runtime.controller import Controller
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import PODS, SHADOWPODS
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.manager import Loop, Manager, serve

log = logging.getLogger("kube_offload.enforcer")

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY_ENFORCER}"
# Parts of the manager's grace period (kube_offload/runtime/manager.py), as before it.
STOP_SECONDS = 2.0


class _Objects(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...


def consumer_policy(namespace: Mapping[str, Any] | None, consumers: _Objects) -> ProviderPolicy | None:
    """The provider policy of the consumer owning twin ``namespace``: None when it is not
    a twin or has no Consumer; the defaults when the policy does not parse (the safe
    terms: the webhook and the pod judge refuse such a consumer's pods anyway)."""
    owner = twin_owner(namespace)
    consumer = consumers.get(owner) if owner else None
    if consumer is None:
        return None
    try:
        return parse_policy((consumer.get("spec") or {}).get("policy"))
    except ProviderPolicyError:
        return DEFAULT_POLICY


def remote_api_granted(namespace: Mapping[str, Any] | None, consumers: _Objects) -> bool:
    """Whether the consumer owning twin ``namespace`` is granted the provider's API
    (``spec.policy.pods.remoteAPIAccess``). Not a twin, no such Consumer, or a policy
    that does not parse: not granted (the webhook refuses such ShadowPods anyway)."""
    policy = consumer_policy(namespace, consumers)
    return policy is not None and policy.pods.remote_api_access


def max_grace_of(namespace: Mapping[str, Any] | None, consumers: _Objects) -> int:
    """The largest termination grace of the consumer owning twin ``namespace``
    (``spec.policy.pods.maxTerminationGracePeriodSeconds``); the default bound when that
    is not known (not a twin, no Consumer): never unbounded."""
    policy = consumer_policy(namespace, consumers) or DEFAULT_POLICY
    return policy.pods.max_termination_grace_seconds


def pool_of_slice(namespace: Mapping[str, Any] | None, consumers: _Objects, slices: _Objects, slice_name: str,
                  recorded: str = "") -> Pool | None:
    """The pool of OffloadSlice ``slice_name`` of the consumer owning twin ``namespace``:
    its tenant namespace's slice, that slice's spec.pool in the Consumer's spec.pools; or,
    ``recorded`` (the ShadowPod's status.slicePool, from its first pod), that pool as the
    Consumer defines it now: a pod keeps the pool it was first made on (the judge refuses
    it while the slice names another). None when any of them is missing or the pools do
    not parse."""
    owner = twin_owner(namespace)
    consumer = consumers.get(owner) if owner else None
    if consumer is None:
        return None
    tenant, _ = service_account_of(consumer)
    offload_slice = slices.get(f"{tenant}/{slice_name}")
    if offload_slice is None:
        return None
    try:
        pools = parse_pools(consumer.get("spec") or {})
    except PoolError:
        return None
    return pools.get(recorded or str((offload_slice.get("spec") or {}).get("pool") or ""))


@dataclass(frozen=True)
class Settings:
    workers: int = 4
    """Reconciles running at once (one ShadowPod is never reconciled twice at once)."""
    resync_seconds: float = 300.0
    """How often every ShadowPod is reconciled again even if nothing changed."""
    namespace: str | None = None
    """Watch only this namespace (None: all namespaces). Set, the provider-side loops
    (cluster-wide by nature) do not run."""
    consumer_twin_role: str = DEFAULT_CONSUMER_TWIN_ROLE
    """ClusterRole bound to the consumer in each twin namespace."""
    consumer_status_seconds: float = 2.0
    """Consumer statuses are recomputed at most this often (and written only on change)."""
    release_namespace: str = ""
    """The enforcer's own namespace: never given to a consumer as a twin."""
    consumer_unreachable_grace_seconds: float = 40.0
    """A consumer whose heartbeat Lease is older than this is unreachable: the endpoints it
    reflected here are held not ready until it returns (0: never; docs/reflection.md)."""


class Enforcer:
    def __init__(self, api_client: client.ApiClient, settings: Settings) -> None:
        self.settings = settings
        # Both caches' transforms (enforcer/shadowpods/trim.py) keep what the reconcile,
        # the admission and the quota read, strings interned: at 10,000 ShadowPods they
        # are most of the enforcer's memory.
        self.shadowpods = shadowpod_informer(api_client, namespace=settings.namespace, resync_seconds=settings.resync_seconds)
        self.pods = managed_pod_informer(api_client, namespace=settings.namespace, resync_seconds=settings.resync_seconds)
        api = KubeEnforcerApi(api_client)
        # Events are written by the recorder's own thread, never by a reconcile worker.
        self.recorder = EventRecorder(api)
        self.reconciler = Reconciler(
            shadowpods=self.shadowpods,
            pods=self.pods,
            api=api,
            recorder=self.recorder,
            remote_api_access=self._remote_api_access,
            slice_pool=self._slice_pool,
            max_grace=self._max_grace,
        )
        self.controller = Controller(name="enforcer", reconcile=self.reconciler, workers=settings.workers, logger=log)
        # The echo of the reconcile's own ShadowPod status write is skipped (Reconciler.
        # own_status_write); every other ShadowPod change is reconciled.
        self.controller.watch(self.shadowpods, skip=self.reconciler.own_status_write)
        # Pod status changes are not skipped: the reconcile copies the pod's status into
        # its ShadowPod's (and replaces a pod that failed).
        # shadowpod_of: an orphaned pod (no owner left) is reconciled under its own name.
        self.controller.watch(self.pods, shadowpod_of)
        self.consumer_loops: ConsumerLoops | None = None
        if settings.namespace is None:
            self.consumer_loops = ConsumerLoops(
                api_client,
                shadowpods=self.shadowpods,
                managed_pods=self.pods,
                twin_role=settings.consumer_twin_role,
                release_namespace=settings.release_namespace,
                status_period=settings.consumer_status_seconds,
                resync_seconds=settings.resync_seconds,
                recorder=self.recorder,
                unreachable_grace=settings.consumer_unreachable_grace_seconds,
            )
            # A Consumer changed (a grant given back, the quota raised, a drain ended): the
            # ShadowPods whose pod its rules refused are judged again at once.
            self.consumer_loops.consumers.add_handler(self._consumer_changed)

    def judge_pods_with(self, judge: Judge) -> None:
        """Judge every pod before it is made with ``judge`` (the ShadowPod webhook's
        ``judge_pod``: the admission's rules and caches). Without it (no webhook served,
        so none of its caches), pods are made as their ShadowPods were admitted."""
        self.reconciler.set_judge(judge)

    def _consumer_changed(self, _event: str, _old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        loops = self.consumer_loops
        if loops is None:
            return
        name = str((new.get("metadata") or {}).get("name") or "")
        for key in self.reconciler.refused_keys():
            namespace = key.split("/", 1)[0]
            if twin_owner(loops.namespaces.get(namespace)) == name:
                self.controller.enqueue(key)

    def _max_grace(self, namespace: str) -> int | None:
        """The largest termination grace of the consumer owning twin ``namespace``, from the
        consumer loops' caches (the default bound until they have listed, or for a twin of
        no known Consumer). Without them (one namespace watched) nothing is cut."""
        loops = self.consumer_loops
        if loops is None:
            return None
        if not (loops.namespaces.has_synced() and loops.consumers.has_synced()):
            return DEFAULT_POLICY.pods.max_termination_grace_seconds
        return max_grace_of(loops.namespaces.get(namespace), loops.consumers)

    def _remote_api_access(self, namespace: str) -> bool | None:
        """Whether the consumer owning twin ``namespace`` is granted the provider's API
        (Consumer ``spec.policy.pods.remoteAPIAccess``), from the consumer loops' caches;
        None until they have listed. Without them (one namespace watched: no consumers
        known) nobody is."""
        loops = self.consumer_loops
        if loops is None:
            return False
        if not (loops.namespaces.has_synced() and loops.consumers.has_synced()):
            return None
        return remote_api_granted(loops.namespaces.get(namespace), loops.consumers)

    def _slice_pool(self, namespace: str, slice_name: str, recorded: str = "") -> Pool | None:
        """The pool of resource slice ``slice_name`` of the consumer owning twin
        ``namespace`` (``recorded``: the one its ShadowPod's first pod was made on), from the
        consumer loops' caches (docs/slices.md): None until they have listed, or when the
        slice, its pool or the Consumer is gone (the pod waits)."""
        loops = self.consumer_loops
        if loops is None or not (loops.namespaces.has_synced() and loops.consumers.has_synced() and loops.slices.has_synced()):
            return None
        return pool_of_slice(loops.namespaces.get(namespace), loops.consumers, loops.slices, slice_name, recorded)

    def declare(self, manager: Manager) -> None:
        """Declare the shared informers and the loops to ``manager``, every one needing the
        leader Lease. The workers start only once both caches are filled: reconciling
        before would mistake a pod not yet listed for a missing one. The consumer loops
        (the loop named "tenants") start after them, so that their first lists (every pod
        and node) do not delay these. Stopped in reverse: the consumer loops, the workers, then the Event recorder
        (what the workers recorded is written until its deadline), then the informers."""
        manager.add_informer(self.shadowpods)
        manager.add_informer(self.pods)
        manager.add_loop(Loop(name="event-recorder", run=self._run_recorder, logger=log))
        manager.add_loop(
            Loop(
                name="enforcer",
                run=self._run_controller,
                informers=(self.shadowpods, self.pods),
                waiting_message="still waiting for the ShadowPod and pod caches (is the ShadowPod CRD installed?)",
                logger=log,
            )
        )
        loops = self.consumer_loops
        if loops is not None:
            manager.add_loop(
                Loop(
                    # The name is in log lines and the loop's thread name; kept as it was.
                    name="tenants",
                    run=serve(loops.start, lambda: loops.stop(STOP_SECONDS)),
                    after=("enforcer",),
                    # Not the service continuity caches: a provider whose RBAC lacks them (an
                    # image newer than its chart) must still serve ShadowPods; that loop
                    # waits for its own caches and says so.
                    readiness_informers=(loops.namespaces, loops.consumers, loops.requests, loops.rolebindings,
                                         loops.resourcequotas, loops.nodes, loops.pods, loops.grant_roles,
                                         loops.grant_bindings),
                    logger=log,
                )
            )

    def _run_controller(self, stop: threading.Event) -> None:
        self.controller.start()
        log.info("caches synced; %d workers reconciling ShadowPods", self.settings.workers)
        stop.wait()
        self.controller.stop()
        # The statuses of new pods still held back (Reconciler.status_may_wait) are
        # written now, so that a restart loses no recreation count.
        written = self.reconciler.write_held_back(STOP_SECONDS)
        if written:
            log.info("wrote %d ShadowPod statuses held back", written)

    def _run_recorder(self, stop: threading.Event) -> None:
        stop.wait()
        self.recorder.stop(STOP_SECONDS)


def shadowpod_informer(api_client: client.ApiClient, *, namespace: str | None, resync_seconds: float) -> Informer:
    """The ShadowPod cache, as the controllers and the webhooks read it (the same
    definition in the webhook's own process, enforcer/webhook_process.py)."""
    return Informer(
        name="shadowpods",
        resync_seconds=resync_seconds,
        transform=keep_shadowpod,
        list_func=Kube(api_client).list_func(SHADOWPODS, namespace=namespace or None),
    )


def managed_pod_informer(api_client: client.ApiClient, *, namespace: str | None, resync_seconds: float) -> Informer:
    """The pods the enforcer made, indexed by their ShadowPod. Only those: the rest of the
    cluster's pods are none of its business, and caching them would cost memory in
    proportion to the cluster."""
    return Informer(
        name="managed-pods",
        resync_seconds=resync_seconds,
        # Kept by the informer itself, current before any handler hears of a change.
        indexers=POD_INDEXERS,
        transform=trim_managed_pod,
        list_func=Kube(api_client).list_func(PODS, namespace=namespace or None),
        list_kwargs={"label_selector": MANAGED_SELECTOR},
    )
