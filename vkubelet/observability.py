"""What the virtual kubelet tells Prometheus and the kubelet's probes about itself.

Metrics (in the process registry, kube_offload/runtime/metrics.py, read at scrape time
from the running :class:`~vkubelet.runner.VirtualKubelet`): the pods bound to the
virtual node by phase, whether the remote cluster answers, and which cluster this is.
The controllers', work queues' and API calls' figures come from the shared runtime;
reflection's from vkubelet/reflection/metrics.py.

Health (served by the process manager, kube_offload/runtime/manager.py): *healthz* - the
node's loops (probe, status, lease) and every controller are alive; *readyz* - every
loop's caches have listed, every loop started, and the remote API server answered within
``--ping-timeout`` (the node's own Ready rule), so a vkubelet cut off from its cluster is
taken out of Service endpoints but not restarted.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime import health
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE

if TYPE_CHECKING:
    from kube_offload.runtime.manager import Manager
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
            labels=["cluster_id", "node"],
        )
        pods = GaugeMetricFamily(
            f"{SUBSYSTEM}_pods",
            "Pods bound to the virtual node (offloaded or about to be), by phase.",
            labels=["cluster_id", "node", "phase"],
        )
        handed_back = CounterMetricFamily(
            f"{SUBSYSTEM}_pods_handed_back",
            "Pods evicted because the remote cluster could not run them (docs/virtual-kubelet.md#handback), "
            "by cause: RemoteUnschedulable (past --handback-after) or RemoteRefused (refused for good).",
            labels=["cluster_id", "node", "cause"],
        )
        # Labelled by node too: a peering has one virtual node per slice (docs/slices.md),
        # each its own vkubelet, and their series must not collide.
        for vk in vks:
            settings = vk.settings
            for cause, count in vk.pods.handbacks.snapshot().items():
                handed_back.add_metric([settings.cluster_id, settings.node_name, cause], float(count))
            info.add_metric([settings.cluster_id, settings.local_cluster_id, settings.node_name], 1.0)
            reachable.add_metric([settings.cluster_id, settings.node_name], 1.0 if vk.node.ready else 0.0)
            for phase, count in rm.count_by_phase(vk.pods.local_pods.list()).items():
                pods.add_metric([settings.cluster_id, settings.node_name, phase], float(count))
        yield info
        yield reachable
        yield pods
        yield handed_back


rm.REGISTRY.register(VirtualKubeletCollector())


# --- health ------------------------------------------------------------------------------------
def declare_health(manager: "Manager", vk: "VirtualKubelet") -> None:
    """Report ``vk`` in this process's metrics, and add its own checks to what the manager
    serves (the election, the controllers, the loops' caches and start: the manager's)."""
    track(vk)

    def node_loops() -> str | None:
        dead = vk.node.dead_loops()
        return f"node loop(s) {', '.join(dead)} exited" if dead else None

    def remote() -> str | None:
        if vk.node.ready:
            return None
        return f"the API server of cluster {vk.settings.cluster_id} has not answered within --ping-timeout"

    manager.add_live_check(health.Check("node-loops", node_loops))
    manager.add_ready_check(health.Check("remote-cluster", remote))
