"""What the enforcer tells Prometheus and the kubelet's probes about itself.

Metrics (in the process registry, kube_offload/runtime/metrics.py): ShadowPods by phase,
read from the enforcer's cache at scrape time; the controllers', work queues' and API
calls' figures come from the shared runtime, the ShadowPod webhook's from its own
registry (enforcer/webhook_server.py), served on the same port.

Health (kube_offload/runtime/health.py): *healthz* - every controller is alive; *readyz* - every
cache has listed: the ShadowPod controller's, the tenant loops' (twin namespaces,
Consumer status) and, with the ShadowPod webhook on, the webhook's (a webhook answering
from half a cache would admit over quota).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime import health
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE

if TYPE_CHECKING:
    from enforcer.controller import Enforcer
    from kube_offload.runtime.leader_election import LeaderElector
    from enforcer.webhook_server import ShadowPodWebhook

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


rm.REGISTRY.register(EnforcerCollector())


def caches(enforcer: "Enforcer", webhook: "ShadowPodWebhook | None") -> list[Any]:
    found: list[Any] = [enforcer.shadowpods, enforcer.pods]
    tenants = enforcer.tenants
    if tenants is not None:
        found += [tenants.namespaces, tenants.consumers, tenants.requests, tenants.rolebindings,
                  tenants.resourcequotas, tenants.nodes, tenants.pods]
    if webhook is not None:
        found += [i for i in webhook.informers() if all(i is not f for f in found)]
    return found


def health_server(
    enforcer: "Enforcer", webhook: "ShadowPodWebhook | None", bind: str, *, elector: "LeaderElector | None" = None
) -> health.HealthServer:
    """The enforcer's health port (not started); raises HealthSetupError. With ``elector``,
    a standby is live but not ready (``/readyz`` says who leads)."""
    with _lock:
        _running.add(enforcer)
    registries = [rm.REGISTRY] + ([webhook.server.metrics.registry] if webhook is not None else [])
    live = [health.controllers_check()]
    ready = [health.caches_check(lambda: caches(enforcer, webhook))]
    if elector is not None:
        live.insert(0, health.Check("leader-election", elector.alive_problem))
        ready.insert(0, health.Check("leader-election", elector.ready_problem))
    return health.HealthServer(bind, live=live, ready=ready, registries=registries)
