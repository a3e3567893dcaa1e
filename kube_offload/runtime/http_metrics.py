"""Prometheus metrics shared by the HTTP components (webhook, extender, kubelet API).

Each app gets its own :class:`~prometheus_client.CollectorRegistry` rather than the
process-global one, so tests and benchmarks can build many apps in one process without
"Duplicated timeseries" errors, and ``/metrics`` shows only that app's series.

Series are per process. The webhook runs several gunicorn workers and merges their
series at scrape time (multiprocess mode, kube_offload/runtime/workers.py); the extender runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

NAMESPACE = "kube_offload"

# Admission and extender calls sit on the apiserver's / scheduler's critical path with
# budgets of a few milliseconds up to the webhook timeout (seconds): resolve both ends.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)


@dataclass
class HttpMetrics:
    """Requests by endpoint and outcome, and a latency histogram by endpoint."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    # labels() takes a lock and builds a key on every call; children are reused instead.
    _children: dict[tuple[str, str], tuple[Counter, Histogram]] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, component: str, registry: CollectorRegistry | None = None) -> HttpMetrics:
        registry = registry if registry is not None else CollectorRegistry()
        requests = Counter(
            "requests",
            f"HTTP requests served by the {component}, by endpoint and outcome.",
            ["endpoint", "outcome"],
            namespace=NAMESPACE,
            subsystem=component,
            registry=registry,
        )
        latency = Histogram(
            "request_duration_seconds",
            f"Time the {component} spent answering a request, by endpoint.",
            ["endpoint"],
            namespace=NAMESPACE,
            subsystem=component,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        return cls(registry=registry, requests=requests, latency=latency)

    def observe(self, endpoint: str, outcome: str, seconds: float) -> None:
        key = (endpoint, outcome)
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(endpoint=endpoint, outcome=outcome),
                self.latency.labels(endpoint=endpoint),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)


def state_gauge(
    registry: CollectorRegistry, component: str, name: str, doc: str, read: Callable[[], float]
) -> Gauge:
    """A gauge whose value is read at scrape time (e.g. "cache synced" as 0/1)."""
    gauge = Gauge(name, doc, namespace=NAMESPACE, subsystem=component, registry=registry)
    gauge.set_function(read)
    return gauge


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of ``registry`` and its content type, for a ``/metrics`` route."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
