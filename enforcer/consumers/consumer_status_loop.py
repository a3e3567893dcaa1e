"""The Consumer status loop: usage, twin namespaces and the capacity summary of every
Consumer, written through ``consumers/status``.

Any change in the caches it reads (Consumers, ShadowPods, namespaces, nodes, pods) only
marks the loop dirty; one thread then recomputes every Consumer's status at most once
per ``period`` and writes those that changed. Coalescing keeps the cost bounded however
fast pods churn (one pass is a sum over the cached objects, no API reads), and writing
only on change keeps a quiet cluster quiet. The pods' requests are parsed once per pass
for all consumers (:func:`~kube_offload.remote_resources.summarize_many`), and only those that
changed since the last pass (:class:`~kube_offload.remote_resources.PodRequestsMemo`). The pass runs on its own thread, apart from
the ShadowPod workers.

The same pass carries out drains (Consumer spec.drain, ``kube-offload drain``): within the
grace it only reports the phase; once the grace is over it deletes the consumer's ShadowPods
still there (their pods go with them), whatever the consumer does or whether it is there at
all, and it wakes itself at the next deadline rather than at the next resync.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol

from enforcer.consumers.consumer_status import desired_status, stamped, status_changed
from enforcer.consumers.quota import ConsumerUsage
from kube_offload.consumers import DRAIN_PHASE_DRAINED, ConsumerError, Drain, consumer_name, read_drain, shadowpods_due
from kube_offload.reasons import REASON_DRAIN_GRACE_EXPIRED, REASON_DRAINED
from enforcer.consumers.consumer_api import ConsumerApi
from enforcer.consumers.trim import content_changed
from enforcer.consumers.passes import run_passes
from kube_offload.runtime.kube import ApiError
from kube_offload.provider_policy import DEFAULT_POLICY, ProviderPolicyError, parse_policy
from kube_offload.shadowpod import capped_grace, controller_ref
from kube_offload.remote_resources import PodRequestsMemo, summarize_many

log = logging.getLogger("kube_offload.enforcer.consumers")

SHADOWPODS_BY_NAMESPACE = "drain-namespace"


def _namespace_of(obj: dict[str, Any]) -> list[str]:
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


class Cache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def list(self) -> list[dict[str, Any]]: ...

    def has_synced(self) -> bool: ...


class Recorder(Protocol):
    def normal(self, obj: dict[str, Any], reason: str, message: str) -> None: ...

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None: ...


class ConsumerStatusLoop:
    def __init__(
        self,
        *,
        consumers: Cache,
        shadowpods: Cache,
        namespaces: Cache,
        managed_pods: Cache | None = None,
        nodes: Cache,
        pods: Cache,
        api: ConsumerApi,
        period: float = 2.0,
        resync_seconds: float = 300.0,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        recorder: Recorder | None = None,
    ) -> None:
        self._consumers = consumers
        self._shadowpods = shadowpods
        self._managed_pods = managed_pods
        self._namespaces = namespaces
        self._nodes = nodes
        self._pods = pods
        self._api = api
        # The same running sums the ShadowPod webhook reads: a pass costs O(consumers x
        # their twin namespaces), not O(consumers x every ShadowPod).
        self._usage = ConsumerUsage(shadowpods, namespaces, managed_pods)
        # A pass parses only the pods that changed since the last one: with 10,000 pods
        # held, parsing them all every period kept this thread on the CPU, holding the
        # GIL the webhook's requests wait for (docs/performance.md, "Admission at a fixed
        # rate, holding 10,000").
        self._pod_requests = PodRequestsMemo()
        self._period = period
        self._resync = resync_seconds
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._clock = clock
        self._recorder = recorder
        self._by_namespace = hasattr(shadowpods, "add_indexer")
        if self._by_namespace:
            # A drained consumer's ShadowPods by twin namespace, not by walking every one.
            shadowpods.add_indexer(SHADOWPODS_BY_NAMESPACE, _namespace_of)  # type: ignore[attr-defined]
        # Seconds from the last pass to the next drain deadline (None: no drain pending).
        self._next_deadline: float | None = None
        self.passes = 0
        self.writes = 0
        self.drain_deletes = 0

    # --- informer handlers (on the informer threads: cheap) --------------------------------
    def on_event(self, _event: str, _old: dict[str, Any] | None, _new: dict[str, Any]) -> None:
        self._dirty.set()

    def on_trimmed_event(self, _event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """For nodes and pods: a heartbeat or a condition changes only the
        resourceVersion of the trimmed object, and is nothing to recompute for."""
        if old is None or old is new or content_changed(old, new):
            self._dirty.set()

    # --- loop --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._dirty.set()  # the first pass, once the caches are complete
            self._thread = threading.Thread(target=self._run, name="consumer-status", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._dirty.set()

    def _synced(self) -> bool:
        caches = (self._consumers, self._shadowpods, self._namespaces, self._nodes, self._pods)
        return all(cache.has_synced() for cache in caches)

    def _run(self) -> None:
        # Usage computed from a half-filled cache would publish a too-low figure.
        while not self._synced():
            if self._stopped.wait(0.2):
                return
        # A drain's grace ends with no event to wake on: wake for it (a second late at most).
        run_passes(stopped=self._stopped, dirty=self._dirty, sync=self.sync_all, period=self._period, resync=self._resync,
                   next_deadline=lambda: self._next_deadline, slack=1.0, log=log, what="consumer status")

    def sync_all(self) -> None:
        """One pass over every Consumer (also called directly by tests)."""
        self.passes += 1
        nodes = self._nodes.list()
        pods = self._pods.list()
        consumers = self._consumers.list()
        # One parse of every pod for all consumers, not one per consumer.
        capacities = summarize_many(nodes, pods, [consumer_name(consumer) for consumer in consumers],
                                    requests_of=self._pod_requests)
        self._pod_requests.next_pass()
        now = self._clock()
        self._next_deadline = None
        for consumer in consumers:
            name = consumer_name(consumer)
            twins = self._usage.twin_namespaces(name)
            drain = self._read_drain(name, consumer)
            shadowpods_left = self._drain(consumer, drain, twins, now) if drain else 0
            desired = desired_status(
                consumer,
                used=self._usage.used(name),
                twin_namespaces=twins,
                capacity=capacities[name],
                drain=drain,
                shadowpods_left=shadowpods_left,
                now=now,
            )
            if not status_changed(consumer, desired):
                continue
            was = ((consumer.get("status") or {}).get("drain") or {}).get("phase")
            now_phase = (desired.get("drain") or {}).get("phase")
            if self._recorder and now_phase == DRAIN_PHASE_DRAINED and was != DRAIN_PHASE_DRAINED:
                self._recorder.normal(consumer, REASON_DRAINED, f"consumer {name} is drained: none of its ShadowPods is left here")
            try:
                self._api.replace_consumer_status(name, stamped(desired))
                self.writes += 1
                log.debug("[%s] status: %d ShadowPods, used %s", name, desired["shadowPods"], desired["used"])
            except ApiError as exc:
                if exc.not_found:
                    continue  # deleted meanwhile
                log.warning("[%s] could not write status: %s; trying again in %.0fs", name, exc, self._period)
                self._dirty.set()

    # --- drains -----------------------------------------------------------------------
    def _delete_pod_of(self, shadowpod: Mapping[str, Any], consumer: Mapping[str, Any]) -> None:
        """The drained ShadowPod's pod, deleted with an explicit grace (its own, cut to the
        consumer's pods.maxTerminationGracePeriodSeconds) rather than left to the garbage
        collector, which would wait the pod's own grace: a pod made before the bound existed
        may ask for days, and the drain is the provider taking its resources back."""
        if self._managed_pods is None:
            return
        meta = shadowpod.get("metadata") or {}
        pod = self._managed_pods.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        if (controller_ref(pod) or {}).get("uid") != meta.get("uid"):
            return  # not this ShadowPod's pod
        try:
            cap = parse_policy((consumer.get("spec") or {}).get("policy")).pods.max_termination_grace_seconds
        except ProviderPolicyError:
            cap = DEFAULT_POLICY.pods.max_termination_grace_seconds
        grace = capped_grace((pod.get("spec") or {}).get("terminationGracePeriodSeconds"), cap)
        pod_meta = pod.get("metadata") or {}
        self._api.delete_pod(str(pod_meta.get("namespace")), str(pod_meta.get("name")), str(pod_meta.get("uid")), grace)

    @property
    def next_drain_deadline(self) -> float | None:
        """Seconds from the last pass to the next drain's deadline (None: none pending)."""
        return self._next_deadline

    @staticmethod
    def _read_drain(name: str, consumer: dict[str, Any]) -> Drain | None:
        try:
            return read_drain(consumer.get("spec") or {})
        except ConsumerError as exc:
            # New ShadowPods are refused all the same (admission reads spec.drain's presence).
            log.warning("[%s] drain not carried out: %s", name, exc)
            return None

    def _drain(self, consumer: dict[str, Any], drain: Drain, twins: list[str], now: datetime) -> int:
        """Delete what is due of a drained consumer; the number of its ShadowPods left."""
        name = consumer_name(consumer)
        if self._by_namespace:
            mine = [sp for twin in twins for sp in self._shadowpods.by_index(SHADOWPODS_BY_NAMESPACE, twin)]  # type: ignore[attr-defined]
        else:
            namespaces = set(twins)
            mine = [sp for sp in self._shadowpods.list() if (sp.get("metadata") or {}).get("namespace") in namespaces]
        due = shadowpods_due(drain, mine, now)
        if not due and mine:
            until = (drain.deadline - now).total_seconds()
            if until > 0:
                self._next_deadline = until if self._next_deadline is None else min(self._next_deadline, until)
        for shadowpod in due:
            meta = shadowpod.get("metadata") or {}
            try:
                self._api.delete_shadowpod(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))
                self._delete_pod_of(shadowpod, consumer)
                self.drain_deletes += 1
                message = (f"the drain's grace of {drain.grace_seconds}s is over: deleted ShadowPod "
                           f"{meta.get('namespace')}/{meta.get('name')} (and its pod)")
                log.warning("[%s] %s", name, message)
                if self._recorder:
                    self._recorder.warning(consumer, REASON_DRAIN_GRACE_EXPIRED, message)
            except ApiError as exc:
                log.warning("[%s] drain: could not delete ShadowPod %s/%s: %s; trying again", name, meta.get("namespace"), meta.get("name"), exc)
                self._dirty.set()
        return len(mine)
