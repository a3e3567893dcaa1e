"""``/stats/summary`` and ``/metrics/resource`` of the virtual node, rendered from a
:class:`~vkubelet.kubeletapi.usage.UsageSnapshot` (pure).

Both are what a Kubernetes 1.37 kubelet serves, restricted to CPU and memory (all the
remote metrics API measures):

* ``/stats/summary``: the Summary API (``k8s.io/kubelet/pkg/apis/stats/v1alpha1``) as
  JSON: ``node`` and ``pods[]`` with ``podRef``, ``startTime``, ``containers[]``,
  ``cpu.{time,usageNanoCores,usageCoreNanoSeconds}`` and
  ``memory.{time,workingSetBytes}``;
* ``/metrics/resource``: the Prometheus text of the kubelet's resource metrics collector
  (``pkg/kubelet/metrics/collectors/resource_metrics.go``): families sorted by name,
  samples by labels, counters and gauges with the sample's timestamp in milliseconds, as
  metrics-server (which scrapes this endpoint) reads them.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from kube_offload.times import format_epoch
from typing import Any, Iterable

from vkubelet.kubeletapi.usage import ContainerUsage, NodeUsage, PodUsage, UsageSnapshot

NANO = 1_000_000_000
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"


# --- /stats/summary ------------------------------------------------------------------------
def _cpu(timestamp: float, nanocores: int | None, core_nanoseconds: int) -> dict[str, Any]:
    cpu: dict[str, Any] = {"time": format_epoch(timestamp)}
    if nanocores is not None:
        cpu["usageNanoCores"] = nanocores
    cpu["usageCoreNanoSeconds"] = core_nanoseconds
    return cpu


def _memory(timestamp: float, working_set: int) -> dict[str, Any]:
    return {"time": format_epoch(timestamp), "workingSetBytes": working_set}


def _container_stats(container: ContainerUsage) -> dict[str, Any]:
    return {
        "name": container.name,
        "startTime": format_epoch(container.start),
        "cpu": _cpu(container.timestamp, container.cpu_nanocores, container.core_nanoseconds),
        "memory": _memory(container.timestamp, container.memory_bytes),
    }


def _pod_stats(pod: PodUsage) -> dict[str, Any]:
    return {
        "podRef": {"name": pod.pod.name, "namespace": pod.pod.namespace, "uid": pod.pod.uid},
        "startTime": format_epoch(pod.start),
        "containers": [_container_stats(c) for c in pod.containers],
        "cpu": _cpu(pod.timestamp, pod.cpu_nanocores, pod.core_nanoseconds),
        "memory": _memory(pod.timestamp, pod.memory_bytes),
    }


def _node_stats(node_name: str, node: NodeUsage, now: float) -> dict[str, Any]:
    stats: dict[str, Any] = {"nodeName": node_name, "startTime": format_epoch(node.start)}
    # The node's counter moves only with its pods' samples: without a current one the
    # figures stand at the time they were last true, and no rate is claimed.
    timestamp = node.timestamp if node.timestamp is not None else now
    rate = node.cpu_nanocores if node.timestamp is not None else None
    stats["cpu"] = _cpu(timestamp, rate, node.core_nanoseconds)
    stats["memory"] = _memory(timestamp, node.memory_bytes)
    return stats


def summary(snapshot: UsageSnapshot, *, node_name: str, now: float) -> dict[str, Any]:
    return {
        "node": _node_stats(node_name, snapshot.node, now),
        "pods": [_pod_stats(pod) for pod in snapshot.pods],
    }


def summary_json(snapshot: UsageSnapshot, *, node_name: str, now: float) -> bytes:
    return json.dumps(summary(snapshot, node_name=node_name, now=now), indent=2).encode("utf-8")


# --- /metrics/resource ----------------------------------------------------------------------
# (name, type, help) as the kubelet declares them, its stability level in the help text.
_FAMILIES = {
    "container_cpu_usage_seconds_total": ("counter", "[STABLE] Cumulative cpu time consumed by the container in core-seconds"),
    "container_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the container in bytes"),
    "container_start_time_seconds": ("gauge", "[STABLE] Start time of the container since unix epoch in seconds"),
    "node_cpu_usage_seconds_total": ("counter", "[STABLE] Cumulative cpu time consumed by the node in core-seconds"),
    "node_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": ("counter", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds"),
    "pod_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the pod in bytes"),
    "resource_scrape_error": ("gauge", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise"),
    # Hidden by kubelets since 1.31 (deprecated in 1.29); still served here for scrapers and
    # dashboards written against older kubelets. Same value as resource_scrape_error.
    "scrape_error": ("gauge", "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise"),
}


def format_value(value: float) -> str:
    """A sample value as client_golang writes it: Go's ``strconv.FormatFloat(v, 'g', -1,
    64)``, the shortest digits that read back the same, in exponent form when the decimal
    exponent is below -4 or at least 6 (``0.25``, ``15``, ``6.7108864e+07``, ``1.7e-05``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    assert isinstance(exponent, int)  # not "n"/"N"/"F": NaN and infinities returned above
    text = "".join(map(str, digits)).rstrip("0") or "0"
    exponent += len(digits) - len(text)  # the zeros stripped were significant places
    decimal_exponent = len(text) + exponent - 1
    prefix = "-" if sign else ""
    if decimal_exponent < -4 or decimal_exponent >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if decimal_exponent < 0 else '+'}{abs(decimal_exponent):02d}"
    return prefix + format(Decimal(f"{text}e{exponent}"), "f")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    items = sorted(pairs)
    if not items:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in items) + "}"


def _line(name: str, labels: Iterable[tuple[str, str]], value: float, timestamp: float | None) -> str:
    suffix = f" {int(round(timestamp * 1000))}" if timestamp is not None else ""
    return f"{name}{_labels(labels)} {format_value(value)}{suffix}"


def resource_metrics(snapshot: UsageSnapshot) -> str:
    samples: dict[str, list[tuple[tuple[Any, ...], str]]] = {name: [] for name in _FAMILIES}

    def add(name: str, labels: tuple[tuple[str, str], ...], value: float, timestamp: float | None) -> None:
        samples[name].append((tuple(sorted(labels)), _line(name, labels, value, timestamp)))

    node = snapshot.node
    if node.timestamp is not None:
        # metrics-server drops a node whose counter or working set is 0: an idle virtual
        # node has no figures, as a node with nothing to measure.
        add("node_cpu_usage_seconds_total", (), node.core_nanoseconds / NANO, node.timestamp)
        add("node_memory_working_set_bytes", (), node.memory_bytes, node.timestamp)
    for pod in snapshot.pods:
        pod_labels = (("namespace", pod.pod.namespace), ("pod", pod.pod.name))
        for container in pod.containers:
            labels = (("container", container.name), *pod_labels)
            add("container_start_time_seconds", labels, container.start, None)
            add("container_cpu_usage_seconds_total", labels, container.core_nanoseconds / NANO, container.timestamp)
            add("container_memory_working_set_bytes", labels, container.memory_bytes, container.timestamp)
        add("pod_cpu_usage_seconds_total", pod_labels, pod.core_nanoseconds / NANO, pod.timestamp)
        add("pod_memory_working_set_bytes", pod_labels, pod.memory_bytes, pod.timestamp)
    error = 1 if snapshot.scrape_error else 0
    add("resource_scrape_error", (), error, None)
    add("scrape_error", (), error, None)

    lines: list[str] = []
    for name in sorted(_FAMILIES):
        if not samples[name]:
            continue
        kind, help_text = _FAMILIES[name]
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(line for _, line in sorted(samples[name]))
    return "\n".join(lines) + "\n"
