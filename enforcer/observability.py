"""What the enforcer tells Prometheus and the kubelet's probes about itself.

Metrics (in the process registry, kube_offload/runtime/metrics.py): ShadowPods by phase,
and each resource slice's phase, accepted amounts and usage, read from the enforcer's
caches at scrape time; the controllers', work queues' and API
calls' figures come from the shared runtime, the ShadowPod webhook's from its own
registry (enforcer/admission/webhook_server.py), served on the same port.

Health (served by the process manager, kube_offload/runtime/manager.py, from what the
enforcer's loops declare): *healthz* - every controller is alive; *readyz* - every cache
has listed (the ShadowPod controller's, the consumer loops' - twin namespaces, Consumer
status - and, with the ShadowPod webhook on, the webhook's: a webhook answering from half
a cache would admit over quota) and every loop has started.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from enforcer.consumers.quota import live_shadowpod, shadowpod_requests, twin_owner
from kube_offload import constants as c
from kube_offload.consumers import tenant_of
from kube_offload.resources import QuantityError, ResourceList
from kube_offload.runtime import metrics as rm
from kube_offload.slices import accepted_of
from kube_offload.runtime.http_metrics import NAMESPACE

if TYPE_CHECKING:
    from enforcer.controller import Enforcer

_running: "weakref.WeakSet[Enforcer]" = weakref.WeakSet()
_lock = threading.Lock()


class EnforcerCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        with _lock:
            enforcers = list(_running)
        family = GaugeMetricFamily(
            f"{NAMESPACE}_enforcer_shadowpods",
            "ShadowPods in this cluster, by the phase of their pod (status.phase).",
            labels=["phase"],
        )
        counts = dict.fromkeys(rm.POD_PHASES, 0)
        for enforcer in enforcers:
            for phase, count in rm.count_by_phase(enforcer.shadowpods.list()).items():
                counts[phase] += count
        for phase, count in counts.items():
            family.add_metric([phase], float(count))
        yield family
        yield from slice_families(enforcers)


def slice_families(enforcers: "list[Enforcer]") -> Iterator[Metric]:
    """Per OffloadSlice (docs/slices.md): its phase, what was accepted and what its live
    ShadowPods request, per resource listed in ``status.accepted`` (in units: cores for
    cpu, bytes for memory), read from the caches at scrape time."""
    phase = GaugeMetricFamily(f"{NAMESPACE}_enforcer_slice_phase",
                              "1 for the phase each OffloadSlice is in (status.phase).", labels=["consumer", "slice", "phase"])
    accepted = GaugeMetricFamily(f"{NAMESPACE}_enforcer_slice_accepted",
                                 "What the enforcer accepted of each OffloadSlice (status.accepted), per resource.",
                                 labels=["consumer", "slice", "pool", "resource"])
    used = GaugeMetricFamily(f"{NAMESPACE}_enforcer_slice_used",
                             "The requests of each OffloadSlice's live ShadowPods, per resource it accepted.",
                             labels=["consumer", "slice", "pool", "resource"])
    for enforcer in enforcers:
        loops = enforcer.consumer_loops
        if loops is None:
            continue
        usage = slice_usage(enforcer.shadowpods.list(), _owner_in(loops.namespaces))
        for offload_slice in loops.slices.list():
            meta = offload_slice.get("metadata") or {}
            consumer = tenant_of(loops.namespaces.get(str(meta.get("namespace") or ""))) or ""
            name = str(meta.get("name") or "")
            pool = str((offload_slice.get("spec") or {}).get("pool") or "")
            status = offload_slice.get("status") or {}
            phase.add_metric([consumer, name, str(status.get("phase") or c.SLICE_PHASE_PENDING)], 1.0)
            try:
                granted = accepted_of(offload_slice) or {}
            except QuantityError:
                granted = {}
            mine = usage.get((consumer, name), {})
            for resource, milli in sorted(granted.items()):
                accepted.add_metric([consumer, name, pool, resource], milli / 1000)
                used.add_metric([consumer, name, pool, resource], mine.get(resource, 0) / 1000)
    yield phase
    yield accepted
    yield used


def _owner_in(namespaces: "Any") -> "Callable[[str], str | None]":
    return lambda name: twin_owner(namespaces.get(name))


def slice_usage(shadowpods: "list[dict[str, Any]]", owner_of: "Callable[[str], str | None]") -> dict[tuple[str, str], ResourceList]:
    """(consumer, slice) -> the summed requests of the live ShadowPods labelled with the slice."""
    usage: dict[tuple[str, str], ResourceList] = {}
    for shadowpod in shadowpods:
        meta = shadowpod.get("metadata") or {}
        name = ((meta.get("labels") or {}).get(c.LABEL_SLICE))
        if not name or not live_shadowpod(shadowpod):
            continue
        owner = owner_of(str(meta.get("namespace") or ""))
        if owner is None:
            continue
        total = usage.setdefault((owner, str(name)), {})
        for resource, amount in shadowpod_requests(shadowpod).items():
            total[resource] = total.get(resource, 0) + amount
    return usage


rm.REGISTRY.register(EnforcerCollector())


def track(enforcer: "Enforcer") -> None:
    """Report ``enforcer``'s ShadowPods (weakly held) in this process's metrics."""
    with _lock:
        _running.add(enforcer)
