"""The OffloadSlice loop: the enforcer decides each consumer's resource slices and writes the
decision into their status (docs/slices.md "How a slice is decided"), with an Event on the
slice when the decision changes (docs/slices.md "Events").

Keys are tenant namespaces: a consumer's slices are decided together
(:func:`kube_offload.slices.decide_slices`, pure), oldest first, so one slice's change may
move what is left for the later ones. A key is enqueued on any change of a slice in it, on
a change of its Consumer's spec (its quota, its pools) and, for every tenant with a slice,
on a change of a node (labels, allocatable, readiness: the nodes' cache keeps nothing that
changes on a heartbeat). The status is written only when it differs from the stored one,
so the loop's own write comes back as an event that writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Protocol

from enforcer.consumers.consumer_api import ConsumerApi
from enforcer.consumers.consumer_status_loop import Recorder
from kube_offload import constants as c
from kube_offload.consumers import requesting_consumer, service_account_of
from kube_offload.runtime.kube import ApiError
from kube_offload.slice_requests import SLICE_API_VERSION, decision_event
from kube_offload.slices import REASON_NO_CONSUMER, SliceDecision, decide_slices, first_decided_of, slice_status
from kube_offload.times import format_micro_time, utc_now

log = logging.getLogger("kube_offload.enforcer.slices")

NAMESPACE_INDEX = "namespace"

class Cache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def list(self) -> list[dict[str, Any]]: ...


class SliceCache(Cache, Protocol):
    def by_index(self, name: str, value: str) -> list[dict[str, Any]]: ...

    def index_values(self, name: str) -> list[str]: ...


def namespace_of(obj: Mapping[str, Any]) -> list[str]:
    """The slices' index: their (tenant) namespace."""
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


class SliceReconciler:
    def __init__(self, *, slices: SliceCache, namespaces: Cache, consumers: Cache, nodes: Cache, api: ConsumerApi,
                 recorder: Recorder | None = None) -> None:
        self._slices = slices
        self._recorder = recorder
        self._namespaces = namespaces
        self._consumers = consumers
        self._nodes = nodes
        self._api = api

    def __call__(self, tenant: str) -> None:
        objects = [s for s in self._slices.by_index(NAMESPACE_INDEX, tenant)
                   if not (s.get("metadata") or {}).get("deletionTimestamp")]
        consumer, why = requesting_consumer(tenant, self._namespaces.get(tenant), self._consumers.get)
        if consumer is None:
            decisions = {str((s.get("metadata") or {}).get("name") or ""): SliceDecision(
                c.SLICE_PHASE_PENDING, REASON_NO_CONSUMER, why) for s in objects}
        else:
            decisions = decide_slices(objects, consumer, self._nodes.list())
        # One stamp for every slice first decided in this pass: they tie on it and their
        # names order them, now and in every later pass (kube_offload/slices.py).
        now = format_micro_time(utc_now())
        for obj in objects:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name") or "")
            decision = decisions[name]
            status = slice_status(decision, int(meta.get("generation") or 0), first_decided_of(obj) or now)
            if obj.get("status") != status:
                try:
                    self._api.replace_slice_status(tenant, name, status)
                except ApiError as exc:
                    if exc.not_found:  # deleted meanwhile: its event is on its way
                        continue
                    raise
                log.info("OffloadSlice %s/%s: %s (%s) %s", tenant, name, decision.phase, decision.reason, decision.message)
                self._record(obj, decision)

    def _record(self, obj: Mapping[str, Any], decision: SliceDecision) -> None:
        """An Event on the OffloadSlice when the decision differs from the stored one (a
        status rewritten only for its generation or its amounts says nothing new)."""
        before = obj.get("status") or {}
        if self._recorder is None or (before.get("phase"), before.get("reason"), before.get("message")) == (
            decision.phase, decision.reason, decision.message
        ):
            return
        meta = obj.get("metadata") or {}
        event = decision_event(str(meta.get("name") or ""), str((obj.get("spec") or {}).get("pool") or ""),
                               decision.phase, decision.reason, decision.message)
        # Informer items carry no kind: the Event's involvedObject needs one.
        involved = {"apiVersion": SLICE_API_VERSION, "kind": c.SLICE_KIND,
                    "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if meta.get(k)}}
        (self._recorder.warning if event.warning else self._recorder.normal)(involved, event.reason, event.message)

    # --- which keys an event concerns --------------------------------------------------------
    def keys_for_consumer(self, consumer: Mapping[str, Any]) -> list[str]:
        namespace, _ = service_account_of(consumer)
        return [namespace]

    def all_keys(self) -> list[str]:
        return [ns for ns in self._slices.index_values(NAMESPACE_INDEX) if ns]
