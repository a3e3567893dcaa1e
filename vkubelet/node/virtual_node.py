"""The virtual Node: keeps it existing, labelled, tainted, sized and healthy, plus its Lease.

Three small loops, each on its own thread so that a slow call in one never delays the
others (a lease that stops being renewed makes the node lifecycle controller mark the
node Unknown, whatever the reason):

* probe: asks the remote API server for /version every ping interval; the node is Ready
  while the remote cluster answered within the ping timeout;
* status: converges the Node (create if missing, our labels/annotation/taint, status via
  nodes/status) when something changed - our Consumer object on the provider
  (rate-limited), readiness, the Node itself - and at least every
  ``node_status_report_seconds`` as a heartbeat;
* lease: renews ``kube-node-lease/<node>`` every ``lease_renew_seconds``.

Capacity, pressure and the remote-capacity annotation come from the provider's summary in
our ``Consumer`` object (vkubelet/shared/provider_terms.py): the consumer may not read the provider's nodes
or pods. Capacity is capped by the Consumer's quota, and the labels the provider suggests
go on the node under the configured ones.

The Node is never deleted here, not even on shutdown: pods bound to it must survive a
vkubelet restart (deleting the node would make the pod GC delete them). A removed slice's
node is ``kube-offload peer``'s to delete (docs/slices.md "Removing a slice").
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, TYPE_CHECKING

from kube_offload import capacity as cap
from kube_offload import constants as c
from kube_offload import slice_requests as slices
from kube_offload.runtime.kinds import LEASES, NODES
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube, MERGE_PATCH
from vkubelet.node import forge
from vkubelet.node.slice_request import NodeSlice, Recorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.shared import provider_terms as terms
from vkubelet.shared.provider_terms import ProviderTerms

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings


log = logging.getLogger("kube_offload.vkubelet.node")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class VirtualNode:
    def __init__(
        self,
        settings: Settings,
        informers: SharedInformers,
        *,
        clock: Clock = utc_now,
        recorder: Recorder | None = None,  # Events on the node
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._local = Kube(informers.local_client)
        self._remote = Kube(informers.remote_client)
        self._informers = informers
        self.node_informer = informers.local_node()
        self.consumer = informers.remote_consumer()

        self._stop = threading.Event()
        self._wake = threading.Event()
        self._capacity_dirty = threading.Event()
        self._capacity_dirty.set()
        self._lock = threading.Lock()
        self._last_answer = 0.0  # monotonic time of the last successful probe
        self._reachable = False
        self._remote_version = ""
        self._terms: ProviderTerms | None = None  # None: our Consumer not listed yet
        self._terms_lock = threading.Lock()  # read from the status thread and the controllers
        self._label_listeners: list[Callable[[], None]] = []
        self._written: dict[str, Any] | None = None  # the Node as our last write returned it
        self._ready_listeners: list[Callable[[], None]] = []
        self._lost_listeners: list[Callable[[], None]] = []
        self._threads: list[threading.Thread] = []

        self.consumer.add_handler(self._on_consumer_change)
        self.node_informer.add_handler(lambda _kind, _old, _new: self._wake.set())
        # Slice mode: our OffloadSlice (what we ask for, the provider's answer) sizes the node.
        self.slice = None if settings.slice is None else NodeSlice(settings, informers.remote_slice(), self._remote, recorder)
        if self.slice is not None:
            self.slice.informer.add_handler(self._on_consumer_change)

    # --- public ----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        with self._lock:
            return self._reachable

    def terms(self) -> ProviderTerms | None:
        """The provider's terms as last read (None until our Consumer has been listed)."""
        if self._terms is None and self.consumer.has_synced():
            self._read_terms()
        return self._terms

    def labels(self) -> dict[str, str]:
        """The virtual node's labels as they are now (what translation strips from a pod's
        node affinity: they chose this node)."""
        return forge.node_labels(self.settings, self._suggested())

    def peering_labels(self) -> dict[str, str]:
        """The labels of the peering's own node (what namespace cluster selectors match to
        decide twin namespaces): a slice's node answers as the peering's node would, so
        every vkubelet of a peering plans the same twins (docs/slices.md)."""
        current = self.terms()
        labels = forge.node_labels(self.settings, current.suggested_labels if current else None)
        if self.settings.slice is not None:
            labels.pop(c.LABEL_SLICE, None)
            labels[c.LABEL_HOSTNAME] = c.virtual_node_name(self.settings.cluster_id)
        return labels

    def _suggested(self) -> dict[str, str] | None:
        current = self.terms()
        suggested = current.suggested_labels if current else None
        answer = self.slice.answer if self.slice else None
        if answer is None or not answer.node_labels:
            return suggested
        merged, _ = forge.slice_suggested(suggested, answer.node_labels)
        return merged

    def on_labels_changed(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when the provider's suggested labels change: which local
        namespaces are offloaded here may change with them."""
        self._label_listeners.append(listener)

    def on_reconnect(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever the remote cluster becomes reachable again: the
        controllers re-check every object, since work dropped during an outage would
        otherwise wait for the next full resync."""
        self._ready_listeners.append(listener)

    def on_disconnect(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever the node turns NotReady because the remote cluster
        stopped answering: the pods follow it (vkubelet/pods/readiness.py)."""
        self._lost_listeners.append(listener)

    def remote_reachable(self) -> bool:
        """Whether the remote API server answered within the ping timeout, computed now
        by the same rule as the Ready condition (which is re-evaluated every ping
        interval): a loop starting right after its caches listed must not see a stale
        "not yet probed" as an outage."""
        last = max(self._last_answer, self._informers.remote_last_contact())
        return bool(last) and time.monotonic() - last <= self.settings.ping_timeout

    def start(self) -> None:
        for name, target in (("probe", self._probe_loop), ("status", self._status_loop), ("lease", self._lease_loop)):
            thread = threading.Thread(target=target, name=f"vnode-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def dead_loops(self) -> list[str]:
        """Names of the node's loops whose thread exited while not told to stop (liveness)."""
        if self._stop.is_set():
            return []
        return [t.name for t in self._threads if not t.is_alive()]

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # --- probe ------------------------------------------------------------------------------
    def probe_once(self) -> None:
        timeout = max(1.0, min(self.settings.ping_interval, 5.0))
        try:
            # No retry: a probe that fails says so (the Ready rule counts the answers).
            version = self._remote.request("GET", "/version", timeout=(timeout, timeout), retry=NO_RETRY)
        except ApiError as exc:
            log.debug("remote API server probe failed: %s", exc)
        else:
            with self._lock:
                self._last_answer = time.monotonic()
                self._remote_version = str(version.get("gitVersion") or self._remote_version)
        self._update_reachability()

    def _update_reachability(self) -> None:
        last = max(self._last_answer, self._informers.remote_last_contact())
        silent = time.monotonic() - last if last else None
        reachable = silent is not None and silent <= self.settings.ping_timeout
        with self._lock:
            changed = reachable != self._reachable
            self._reachable = reachable
        if changed:
            if reachable:
                log.info("remote cluster %s reachable: node %s Ready", self.settings.cluster_id, self.settings.node_name)
            else:
                log.warning(
                    "remote cluster %s unreachable for %s: node %s NotReady",
                    self.settings.cluster_id,
                    f"{silent:.0f}s" if silent is not None else "ever",
                    self.settings.node_name,
                )
            self._wake.set()
            for listener in self._ready_listeners if reachable else self._lost_listeners:
                try:
                    listener()
                except Exception:
                    log.exception("%s listener failed", "reconnect" if reachable else "disconnect")

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.probe_once()
            self._stop.wait(max(0.0, self.settings.ping_interval - (time.monotonic() - started)))

    # --- status -----------------------------------------------------------------------------
    def _on_consumer_change(self, _kind: str, _old: dict[str, Any] | None, _new: dict[str, Any]) -> None:
        self._capacity_dirty.set()
        self._wake.set()

    def _read_terms(self) -> None:
        """Re-read our Consumer from its cache (once it listed); say what changed."""
        with self._terms_lock:
            consumer = self.consumer.get(self.settings.local_cluster_id)
            fresh = terms.read_consumer(consumer)
            previous = self._terms
            self._terms = fresh
        if previous is None or previous.admitted != fresh.admitted:
            if fresh.admitted:
                log.info("provider admits consumer %s (Consumer object found)", self.settings.local_cluster_id)
            else:
                log.warning(
                    "cluster %s has no Consumer %s for us: the virtual node offers nothing until the provider admits "
                    "this cluster (kube-offload-remote chart, consumers.%s)",
                    self.settings.cluster_id,
                    self.settings.local_cluster_id,
                    self.settings.local_cluster_id,
                )
        if (previous.cordoned if previous else False) != fresh.cordoned:
            if fresh.cordoned:
                log.warning(
                    "the provider cordons consumer %s (Consumer spec.cordoned): node %s gets the taint %s:%s, so new "
                    "pods go elsewhere or wait; its pods keep running",
                    self.settings.local_cluster_id,
                    self.settings.node_name,
                    c.TAINT_PROVIDER_CORDONED_KEY,
                    c.TAINT_PROVIDER_CORDONED_EFFECT,
                )
            else:
                log.info("the provider lifted its cordon of consumer %s: taint %s removed", self.settings.local_cluster_id, c.TAINT_PROVIDER_CORDONED_KEY)
        if (previous.draining if previous else False) != fresh.draining:
            if fresh.draining:
                log.warning(
                    "the provider drains consumer %s (Consumer spec.drain): node %s gets the taint %s:%s, so the pods "
                    "offloaded there are evicted and recreated on other nodes; what is left after the provider's grace "
                    "it deletes itself",
                    self.settings.local_cluster_id,
                    self.settings.node_name,
                    c.TAINT_PROVIDER_DRAINING_KEY,
                    c.TAINT_PROVIDER_DRAINING_EFFECT,
                )
            else:
                log.info("the provider ended its drain of consumer %s: taint %s removed", self.settings.local_cluster_id, c.TAINT_PROVIDER_DRAINING_KEY)
        if previous is None or previous.problems != fresh.problems:
            for problem in fresh.problems:
                log.warning("Consumer %s: %s", self.settings.local_cluster_id, problem)
        if previous is not None and previous.suggested_labels != fresh.suggested_labels:
            log.info("provider-suggested node labels now %s", fresh.suggested_labels or "none")
            for listener in self._label_listeners:
                try:
                    listener()
                except Exception:
                    log.exception("label listener failed")

    def observe(self) -> forge.Observation:
        """Re-read the provider's terms if our Consumer (or our slice) changed (once it listed)."""
        if self._capacity_dirty.is_set() and self.consumer.has_synced() and (self.slice is None or self.slice.listed()):
            self._capacity_dirty.clear()
            self._read_terms()
            if self.slice is not None:
                self.slice.read()
        last = max(self._last_answer, self._informers.remote_last_contact())
        with self._lock:
            reachable, version = self._reachable, self._remote_version
        current = self._terms
        summary = current.summary if current else None
        capacity = terms.node_capacity(current, self.settings.sharing_percentage) if current else None
        if self.settings.slice is not None and current is not None and current.admitted:
            # A slice's node offers what the provider accepted, never the Consumer's
            # summary of the whole provider (the pool is a part of it).
            answer = self.slice.answer if self.slice else None
            # Pods a slice does not bound: as many as the peering's own node offers.
            pods = (capacity or {}).get("pods", 0)
            capacity = slices.node_capacity(answer, default_pods=pods) if answer is not None else None
        return forge.Observation(
            reachable=reachable,
            silent_for=(time.monotonic() - last) if last else None,
            capacity=capacity,
            pressure=summary.pressure if summary else {},
            remote_version=version,
        )

    def _current_node(self) -> dict[str, Any] | None:
        cached = self.node_informer.get(self.settings.node_name)
        written = self._written
        if cached is None or written is None:
            return cached if self.node_informer.has_synced() else (cached or written)
        # Right after our own write the cache may lag behind it; the newer copy wins.
        return written if _rv(written) > _rv(cached) else cached

    def sync(self) -> None:
        """Converge the Node once (idempotent)."""
        now = self._clock()
        if self.slice is not None:
            self.slice.ensure()
        observation = self.observe()
        node = self._current_node()
        annotations: dict[str, str] = {}
        current = self._terms
        summary = current.summary if current else None
        suggested = self._suggested()
        cordoned = bool(current and current.admitted and current.cordoned)
        draining = bool(current and current.admitted and current.draining)
        answer = self.slice.answer if self.slice else None
        slice_refused = self.settings.slice is not None and not (answer is not None and answer.usable)
        if (current is not None and not current.admitted) or self.settings.slice is not None:
            # A slice's node publishes no remote-capacity summary: the consumer does not
            # know which provider nodes make its pool, so the Consumer's summary of them all
            # would let the extender pass pods the pool cannot hold; the node's allocatable
            # (what the provider accepted) is the bound the scheduler applies.
            summary = None
        if summary is not None:
            fresh = cap.encode_remote_capacity(summary.free_by_node, updated=now)
            current = ((node or {}).get("metadata") or {}).get("annotations", {}).get(c.ANNOTATION_REMOTE_CAPACITY)
            if forge.annotation_due(current, fresh, now, self.settings.node_status_report_seconds):
                annotations[c.ANNOTATION_REMOTE_CAPACITY] = fresh
        desired = forge.node_status(self.settings, observation, (node or {}).get("status"), now)

        if node is None:
            body = forge.build_node(
                self.settings, desired, annotations, suggested, cordoned=cordoned, draining=draining, slice_refused=slice_refused
            )
            try:
                node = self._local.create(NODES, body)
                log.info("created virtual node %s", self.settings.node_name)
            except ApiError as exc:
                if not exc.already_exists:
                    raise
                node = self._local.get(NODES, self.settings.node_name)
            self._written = node

        patch = forge.metadata_patch(
            node, self.settings, annotations, suggested, cordoned=cordoned, draining=draining, slice_refused=slice_refused
        )
        if patch:
            node = self._local.patch(NODES, self.settings.node_name, patch, content_type=MERGE_PATCH)
            self._written = node
        patch = forge.status_patch(node.get("status"), desired, now, self.settings.node_status_report_seconds)
        if patch:
            self._written = self._local.patch(
                NODES, self.settings.node_name, patch, subresource="status", content_type=MERGE_PATCH
            )
        if self.slice is not None:
            self.slice.record_event(node)

    def _status_loop(self) -> None:
        backoff = 0.5
        # Wake at least this often to notice a heartbeat falling due.
        tick = max(1.0, min(self.settings.ping_interval, self.settings.node_status_report_seconds / 4))
        while not self._stop.is_set():
            try:
                self.sync()
                backoff = 0.5
            except ApiError as exc:
                log.warning("node %s: update failed (%s); retrying in %.1fs", self.settings.node_name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            except Exception:
                log.exception("node %s: update failed; retrying in %.1fs", self.settings.node_name, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            self._wake.wait(tick)
            if self._stop.is_set():
                return
            if self._capacity_dirty.is_set():
                # A burst of Consumer status writes becomes one recomputation.
                self._stop.wait(self.settings.capacity_min_interval_seconds)
            self._wake.clear()

    # --- lease ------------------------------------------------------------------------------
    def renew_lease(self) -> bool:
        """Renew (or create) the lease; False when the Node does not exist yet."""
        name, namespace = self.settings.node_name, forge.LEASE_NAMESPACE
        patch = forge.lease_renewal(self.settings, self._clock())
        try:
            self._local.patch(LEASES, name, patch, namespace=namespace, content_type=MERGE_PATCH)
            return True
        except ApiError as exc:
            if not exc.not_found:
                raise
        node = self._current_node()
        if node is None:
            return False  # the status loop creates the node first; the lease is owned by it
        uid = (node.get("metadata") or {}).get("uid")
        # Created without renewTime: the patch below writes it, as every renewal does (one
        # place formats the MicroTime, whose fractional seconds the API requires).
        try:
            self._local.create(LEASES, forge.build_lease(self.settings, uid), namespace=namespace)
        except ApiError as exc:
            if not exc.already_exists:
                raise
        self._local.patch(LEASES, name, patch, namespace=namespace, content_type=MERGE_PATCH)
        return True

    def _lease_loop(self) -> None:
        while not self._stop.is_set():
            try:
                # Right after start the node may not exist yet: look again soon rather
                # than leave the node without a lease for a whole renewal period.
                delay = self.settings.lease_renew_seconds if self.renew_lease() else min(0.5, self.settings.lease_renew_seconds)
            except ApiError as exc:
                log.warning("lease %s: renewal failed (%s)", self.settings.node_name, exc)
                delay = min(2.0, self.settings.lease_renew_seconds)
            except Exception:
                log.exception("lease %s: renewal failed", self.settings.node_name)
                delay = min(2.0, self.settings.lease_renew_seconds)
            self._stop.wait(delay)


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0
