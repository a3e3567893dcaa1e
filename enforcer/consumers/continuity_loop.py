"""The service continuity loop: holds the endpoints a consumer reflected here not ready
while that consumer is unreachable, deletes them when it is gone, restores them when it
returns (the decisions: enforcer/consumers/continuity.py).

Level-triggered, like the Consumer status loop: a change in the caches it reads (the
consumers' heartbeat Leases, the reflected EndpointSlices, Consumers, namespaces) only
marks it dirty, and one thread makes a pass at most once per ``period``. A Lease that
stops being renewed sends no event, so the pass also wakes at the earliest moment a
reachable consumer would turn unreachable. A pass reads caches only and writes a slice
only when it must change (with the resourceVersion read: a rewrite by the consumer's
reflector in between wins, and the next pass looks again).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable

from prometheus_client import Gauge

from enforcer.consumers.consumer_status_loop import Cache, Recorder
from enforcer.consumers.continuity import (
    GONE,
    REACHABLE,
    UNREACHABLE,
    Reachability,
    held_endpoints,
    hold_patch,
    reachability,
    reflected_owner,
    release_patch,
)
from enforcer.consumers.passes import run_passes, wait_synced
from kube_offload import constants as c
from kube_offload.consumers import service_account_of
from kube_offload.reasons import REASON_CONSUMER_REACHABLE, REASON_CONSUMER_UNREACHABLE
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE
from kube_offload.runtime.kinds import ENDPOINT_SLICES
from kube_offload.runtime.kube import ApiError, Kube

log = logging.getLogger("kube_offload.enforcer.continuity")

# Labels are consumer ids: bounded by the Consumers a provider admits.
CONSUMER_REACHABLE = Gauge(
    "enforcer_consumer_reachable",
    "1 while the consumer renews its heartbeat Lease within --consumer-unreachable-grace, 0 once it has not "
    "(its reflected endpoints are held not ready); absent for a consumer that publishes no heartbeat.",
    ["consumer"],
    namespace=NAMESPACE,
    registry=rm.REGISTRY,
)
ENDPOINTS_HELD = Gauge(
    "enforcer_endpoints_held_not_ready",
    "Endpoints of a consumer's reflected EndpointSlices that the enforcer holds not ready because the consumer "
    "is unreachable.",
    ["consumer"],
    namespace=NAMESPACE,
    registry=rm.REGISTRY,
)


class ContinuityLoop:
    def __init__(
        self,
        *,
        kube: Kube,
        consumers: Cache,
        namespaces: Cache,
        leases: Cache,
        endpoint_slices: Cache,
        grace_seconds: float,
        period: float = 2.0,
        resync_seconds: float = 300.0,
        recorder: Recorder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._kube = kube
        self._consumers = consumers
        self._namespaces = namespaces
        self._leases = leases
        self._slices = endpoint_slices
        self._grace = grace_seconds
        self._period = period
        self._resync = resync_seconds
        self._recorder = recorder
        self._clock = clock
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_deadline: float | None = None
        # The state each consumer was last seen in, to tell a change (Event, log) from a repeat.
        self._states: dict[str, str] = {}
        self.passes = 0
        self.writes = 0

    def on_event(self, _event: str, _old: dict[str, Any] | None, _new: dict[str, Any]) -> None:
        self._dirty.set()

    def start(self) -> None:
        if self._thread is None:
            self._dirty.set()
            self._thread = threading.Thread(target=self._run, name="service-continuity", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._dirty.set()

    def has_synced(self) -> bool:
        return all(cache.has_synced() for cache in (self._consumers, self._namespaces, self._leases, self._slices))

    def _run(self) -> None:
        # A consumer missing from a half-filled cache would look gone: its slices deleted.
        if not wait_synced(self._stopped, self.has_synced, lambda: log.warning(
                "service continuity still waiting for its caches (the Leases and EndpointSlices: does the "
                "enforcer's ClusterRole grant list/watch on them? docs/enforcer.md, RBAC)")):
            return
        run_passes(stopped=self._stopped, dirty=self._dirty, sync=self.sync_all, period=self._period, resync=self._resync,
                   next_deadline=lambda: self._next_deadline, slack=0.5, log=log, what="service continuity")

    def _state_of(self, consumer_id: str, now: datetime) -> tuple[Reachability, dict[str, Any] | None]:
        consumer = self._consumers.get(consumer_id)
        lease = None
        if consumer is not None:
            tenant, _account = service_account_of(consumer)
            lease = self._leases.get(f"{tenant}/{c.CONSUMER_HEARTBEAT_LEASE}")
        return reachability(consumer_id, consumer, lease, now, self._grace), consumer

    def sync_all(self) -> None:
        """One pass over every reflected EndpointSlice (also called directly by tests)."""
        self.passes += 1
        now = self._clock()
        self._next_deadline = None
        states: dict[str, tuple[Reachability, dict[str, Any] | None]] = {}
        held: dict[str, int] = {}
        written: dict[str, int] = {}
        for consumer in self._consumers.list():
            name = str((consumer.get("metadata") or {}).get("name") or "")
            states[name] = self._state_of(name, now)
        for endpoint_slice in self._slices.list():
            meta = endpoint_slice.get("metadata") or {}
            namespace = str(meta.get("namespace") or "")
            owner = reflected_owner(endpoint_slice, self._namespaces.get(namespace))
            if owner is None:
                continue
            if owner not in states:
                states[owner] = self._state_of(owner, now)
            state, _consumer = states[owner]
            wrote, after = self._apply(owner, state, endpoint_slice)
            if wrote:
                written[owner] = written.get(owner, 0) + 1
            held[owner] = held.get(owner, 0) + (held_endpoints(after) if after else 0)
        for owner, (state, known) in states.items():
            if state.expires_in is not None:
                self._next_deadline = state.expires_in if self._next_deadline is None else min(self._next_deadline, state.expires_in)
            self._report(owner, state, known, written.get(owner, 0))
            if state.state in (REACHABLE, UNREACHABLE):
                CONSUMER_REACHABLE.labels(owner).set(0.0 if state.hold else 1.0)
            else:
                _forget(CONSUMER_REACHABLE, owner)
            ENDPOINTS_HELD.labels(owner).set(float(held.get(owner, 0)))
        for gone in set(self._states) - set(states):
            self._states.pop(gone, None)
            _forget(CONSUMER_REACHABLE, gone)
            _forget(ENDPOINTS_HELD, gone)

    def _apply(self, owner: str, state: Reachability, endpoint_slice: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """Write what ``state`` asks of one slice: whether it wrote, and the slice as it is
        now (None: gone)."""
        meta = endpoint_slice.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        try:
            if state.state == GONE:
                self._kube.delete(ENDPOINT_SLICES, name, namespace=namespace, uid=meta.get("uid"))
                log.warning("[%s] EndpointSlice %s/%s deleted: %s", owner, namespace, name, state.message)
                self.writes += 1
                return True, None
            patch = hold_patch(endpoint_slice) if state.hold else release_patch(endpoint_slice) if state.release else None
            if patch is None:
                return False, endpoint_slice
            written = self._kube.patch(ENDPOINT_SLICES, name, patch, namespace=namespace, resource_version=meta.get("resourceVersion"))
            log.info("[%s] EndpointSlice %s/%s: endpoints %s", owner, namespace, name,
                     "held not ready" if state.hold else "restored")
            self.writes += 1
            return True, written
        except ApiError as exc:
            if exc.not_found:
                return False, None
            # A conflict is the consumer's reflector (or anyone) writing meanwhile: look again.
            log.warning("[%s] EndpointSlice %s/%s: %s; trying again", owner, namespace, name, exc)
            self._dirty.set()
            return False, endpoint_slice

    def _report(self, owner: str, state: Reachability, consumer: dict[str, Any] | None, written: int) -> None:
        before = self._states.get(owner)
        self._states[owner] = state.state
        if before == state.state and not written:
            return
        if state.hold and written:
            log.warning("[%s] %s (%d EndpointSlices)", owner, state.message, written)
            if self._recorder and consumer is not None:
                self._recorder.warning(consumer, REASON_CONSUMER_UNREACHABLE,
                                       f"{state.message}: {written} reflected EndpointSlice(s) marked")
        elif state.release and written:
            log.info("[%s] %s: held endpoints restored (%d EndpointSlices)", owner, state.message, written)
            if self._recorder and consumer is not None:
                self._recorder.normal(consumer, REASON_CONSUMER_REACHABLE,
                                      f"{state.message}: the endpoints held not ready in {written} reflected "
                                      "EndpointSlice(s) are restored")
        elif before is not None and before != state.state:
            log.info("[%s] now %s: %s", owner, state.state, state.message)


def _forget(gauge: Gauge, consumer: str) -> None:
    try:
        gauge.remove(consumer)
    except KeyError:
        pass
