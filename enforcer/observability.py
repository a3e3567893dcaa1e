"""What the enforcer tells Prometheus and the kubelet's probes about itself.

Metrics (in the process registry, kube_offload/runtime/metrics.py): ShadowPods by phase,
read from the enforcer's cache at scrape time; the controllers', work queues' and API
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
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime import metrics as rm
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


rm.REGISTRY.register(EnforcerCollector())


def track(enforcer: "Enforcer") -> None:
    """Report ``enforcer``'s ShadowPods (weakly held) in this process's metrics."""
    with _lock:
        _running.add(enforcer)
