"""What the virtual kubelet tells Prometheus and the kubelet's probes about itself.

Metrics (in the process registry, kube_offload/runtime/metrics.py, read at scrape time
from the running :class:`~vkubelet.runner.VirtualKubelet`): the pods bound to the
virtual node by phase, whether the remote cluster answers, and which cluster this is.
The controllers', work queues' and API calls' figures come from the shared runtime;
reflection's from vkubelet/reflection/metrics.py.

Health (kube_offload/runtime/health.py): *healthz* - the node's loops (probe, status, lease) and
every controller are alive; *readyz* - every loop's caches have listed and the remote
API server answered within ``--ping-timeout`` (the node's own Ready rule), so a
vkubelet cut off from its cluster is taken out of Service endpoints but not restarted.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime import health
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE

if TYPE_CHECKING:
    from kube_offload.runtime.leader_election import LeaderElector
    from vkubelet.runner import VirtualKubelet

SUBSYSTEM = f"{NAMESPACE}_vkubelet"

_running: "weakref.WeakSet[VirtualKubelet]" = weakref.WeakSet()
_lock = threading.Lock()


def track(vk: "VirtualKubelet") -> None:
    """Report ``vk`` (weakly held) in this process's metrics."""
    with _lock:
        _running.add(vk)


def _tracked() -> list["VirtualKubelet"]:
    with _lock:
        return list(_running)


class VirtualKubeletCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        vks = _tracked()
        info = GaugeMetricFamily(
            f"{SUBSYSTEM}_info",
            "1 per virtual kubelet, labelled with its remote cluster's id, the local cluster's id and the node's name.",
            labels=["cluster_id", "local_cluster_id", "node"],
        )
        reachable = GaugeMetricFamily(
            f"{SUBSYSTEM}_remote_reachable",
            "1 while the remote API server answers (the virtual node's Ready condition, "
            "re-evaluated every --ping-interval), else 0.",
            labels=["cluster_id"],
        )
        pods = GaugeMetricFamily(
            f"{SUBSYSTEM}_pods",
            "Pods bound to the virtual node (offloaded or about to be), by phase.",
            labels=["cluster_id", "phase"],
        )
        for vk in vks:
            settings = vk.settings
            info.add_metric([settings.cluster_id, settings.local_cluster_id, settings.node_name], 1.0)
            reachable.add_metric([settings.cluster_id], 1.0 if vk.node.ready else 0.0)
            for phase, count in rm.count_by_phase(vk.pods.local_pods.list()).items():
                pods.add_metric([settings.cluster_id, phase], float(count))
        yield info
        yield reachable
        yield pods


rm.REGISTRY.register(VirtualKubeletCollector())


# --- health ------------------------------------------------------------------------------------
def live_checks(vk: "VirtualKubelet") -> list[health.Check]:
    def node_loops() -> str | None:
        dead = vk.node.dead_loops()
        return f"node loop(s) {', '.join(dead)} exited" if dead else None

    return [health.Check("node-loops", node_loops), health.controllers_check()]


def ready_checks(vk: "VirtualKubelet") -> list[health.Check]:
    def remote() -> str | None:
        if vk.node.ready:
            return None
        return f"the API server of cluster {vk.settings.cluster_id} has not answered within --ping-timeout"

    caches = health.caches_check(lambda: [inf for loop in vk.loops for inf in loop.informers()])
    return [caches, health.Check("remote-cluster", remote)]


def health_server(vk: "VirtualKubelet", bind: str, *, elector: "LeaderElector | None" = None) -> health.HealthServer:
    """The health port of ``vk`` (not started); raises HealthSetupError. With ``elector``,
    a standby is live (its election loop runs) but not ready: ``/readyz`` says who leads."""
    track(vk)
    live, ready = live_checks(vk), ready_checks(vk)
    if elector is not None:
        live.insert(0, health.Check("leader-election", elector.alive_problem))
        ready.insert(0, health.Check("leader-election", elector.ready_problem))
    return health.HealthServer(bind, live=live, ready=ready)
