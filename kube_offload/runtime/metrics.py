"""Prometheus metrics of the controller runtime: work queues, reconciles, API calls, Events.

Every long-running loop of the vkubelet and the enforcer is a
:class:`~kube_offload.runtime.controller.Controller` over a work queue, and every call to an API
server goes through a kubernetes ``ApiClient``: instrumenting those two places once gives
every controller and every call its figures without a line in the domain code.

Unlike the HTTP components' per-app registries (kube_offload/runtime/http_metrics.py), these series
live in one process-wide registry, :data:`REGISTRY`, that the process serves on its
health port (kube_offload/runtime/health.py). The vkubelet's and the enforcer's own metrics
(vkubelet/observability.py, vkubelet/reflection/metrics.py, enforcer/observability.py)
register there too, so a process's ``/metrics`` shows what its code imported.

Labels are bounded by construction: controller names are fixed in code, ``cluster`` is
``local`` or ``remote``, ``verb`` one of the API server's verbs, ``code`` an HTTP status;
never an object's name or namespace.
"""

from __future__ import annotations

import bisect
import gc
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime.http_metrics import NAMESPACE

if TYPE_CHECKING:
    from kube_offload.runtime.controller import Controller

REGISTRY = CollectorRegistry()

# The values of the ``cluster`` label: the consumer's and the provider's API servers, as
# the docs name them. The enforcer runs in the provider: all of its calls are ``remote``.
CLUSTER_LOCAL = "local"
CLUSTER_REMOTE = "remote"

# Reconcile outcomes (controller.py says what each means to the queue).
OUTCOME_SUCCESS = "success"
OUTCOME_REQUEUE = "requeue"
OUTCOME_ERROR = "error"  # retried with backoff
OUTCOME_DROPPED = "dropped"  # an error after max_retries: left to the next event or resync
OUTCOME_PERMANENT = "permanent_error"
OUTCOMES = (OUTCOME_SUCCESS, OUTCOME_REQUEUE, OUTCOME_ERROR, OUTCOME_DROPPED, OUTCOME_PERMANENT)

# A reconcile reads caches and makes a few API calls (each bounded by a 30 s read
# timeout): from a millisecond to tens of seconds.
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
API_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Transport failures (refused, reset, timed out, TLS) have no HTTP status.
CODE_ERROR = "error"

RECONCILES = Counter(
    "reconciles",
    "Reconciles run, by controller and outcome (success, requeue, error: retried, dropped: "
    "retries exhausted, permanent_error).",
    ["controller", "outcome"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
RECONCILE_DURATION = Histogram(
    "reconcile_duration_seconds",
    "Time one reconcile took, by controller.",
    ["controller"],
    namespace=NAMESPACE,
    buckets=RECONCILE_BUCKETS,
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    "api_requests",
    "Requests sent to an API server, by cluster (local, remote), verb and HTTP status code "
    "('error': no answer).",
    ["cluster", "verb", "code"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
API_REQUEST_DURATION = Histogram(
    "api_request_duration_seconds",
    "Time from sending a request to an API server to its response's headers (for WATCH: "
    "until the watch is established), by cluster and verb.",
    ["cluster", "verb"],
    namespace=NAMESPACE,
    buckets=API_BUCKETS,
    registry=REGISTRY,
)


# --- reconciles ----------------------------------------------------------------------------
def observe_reconcile(controller: str, outcome: str, seconds: float) -> None:
    RECONCILES.labels(controller=controller, outcome=outcome).inc()
    RECONCILE_DURATION.labels(controller=controller).observe(seconds)


# --- work queues: read at scrape time from the live controllers ------------------------------
_controllers: "weakref.WeakSet[Controller]" = weakref.WeakSet()
_controllers_lock = threading.Lock()


def track_controller(controller: "Controller") -> None:
    """Report ``controller``'s queue while it exists (weakly held: a controller a test
    dropped disappears from the figures)."""
    with _controllers_lock:
        _controllers.add(controller)


def tracked_controllers() -> list["Controller"]:
    with _controllers_lock:
        return list(_controllers)


def queue_figures(samples: Iterable[tuple[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """``(controller name, figures)`` pairs -> figures summed per name (two controllers of
    one name in a process - tests - add up), except ``longest_running`` (the maximum)."""
    merged: dict[str, dict[str, float]] = {}
    for name, figures in samples:
        into = merged.setdefault(name, {})
        for key, value in figures.items():
            if key == "longest_running":
                into[key] = max(into.get(key, 0.0), value)
            else:
                into[key] = into.get(key, 0.0) + value
    return merged


QUEUE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("depth", "workqueue_depth", "Keys waiting in a controller's work queue, ready to be processed."),
    ("delayed", "workqueue_delayed", "Keys waiting for a retry backoff or a requeue-after delay to end."),
    ("in_flight", "workqueue_in_flight", "Keys being reconciled right now."),
    (
        "longest_running",
        "workqueue_longest_running_seconds",
        "How long the longest reconcile in progress has been running (0: none); a figure that "
        "only grows means a stuck worker (the liveness check fails past its limit).",
    ),
)


class QueueCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        merged = queue_figures((c.name, c.queue_figures()) for c in tracked_controllers())
        for key, name, doc in QUEUE_GAUGES:
            family = GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=["controller"])
            for controller, figures in sorted(merged.items()):
                family.add_metric([controller], figures.get(key, 0.0))
            yield family


REGISTRY.register(QueueCollector())


# --- API calls: at the client's edge ----------------------------------------------------------
_COLLECTION_VERBS = {"GET": "LIST", "DELETE": "DELETECOLLECTION"}
_ITEM_VERBS = {"GET": "GET", "POST": "CREATE", "PUT": "UPDATE", "PATCH": "PATCH", "DELETE": "DELETE"}


def request_verb(method: str, url: str) -> str:
    """The verb of an HTTP request in the vocabulary of RBAC and the audit log, upper-case:
    a GET of a collection is LIST (WATCH with ``watch=true``), of one object GET; POST is
    CREATE, PUT UPDATE; a DELETE of a collection DELETECOLLECTION. (The API server's own
    ``apiserver_request_total`` says POST and PUT where this says CREATE and UPDATE;
    bench/apirequests.py reads both.) Paths that are not resources (``/version``,
    ``/apis``) keep the method's verb."""
    method = method.upper()
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if method == "GET" and query.get("watch", [""])[0].lower() in ("true", "1"):
        return "WATCH"
    segments = [s for s in parts.path.split("/") if s]
    # /api/v1/... or /apis/<group>/<version>/...
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return _ITEM_VERBS.get(method, method)
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaces/<ns>/<resource>...
    if len(rest) == 1 and method in _COLLECTION_VERBS:
        return _COLLECTION_VERBS[method]
    return _ITEM_VERBS.get(method, method)


def observe_api_call(cluster: str, verb: str, code: str, seconds: float) -> None:
    API_REQUESTS.labels(cluster=cluster, verb=verb, code=code).inc()
    API_REQUEST_DURATION.labels(cluster=cluster, verb=verb).observe(seconds)


_INSTRUMENTED = "_kube_offload_cluster"


def instrumented_cluster(api_client: Any) -> str | None:
    """The ``cluster`` label :func:`instrument_api_client` gave ``api_client`` (None: not
    instrumented). :class:`kube_offload.runtime.kube.Kube` counts its requests under it."""
    return getattr(api_client, _INSTRUMENTED, None)


def instrument_api_client(api_client: Any, cluster: str) -> None:
    """Count and time every request sent through ``api_client``, as calls to ``cluster``.

    Every request of the product goes through :class:`kube_offload.runtime.kube.Kube`,
    which counts it at its edge under this label (by code as the answer comes, before any
    retry); the official client only lends its configuration and connection pool, so
    nothing of it is wrapped. Idempotent."""
    setattr(api_client, _INSTRUMENTED, cluster)


# --- Events (kube_offload/runtime/events.py) ------------------------------------------------------
# Why an occurrence reached no Event of its own, and whether the writer keeps up.
EVENT_DROP_QUEUE_FULL = "queue_full"  # the recorder's queue was full: the newest is dropped
EVENT_DROP_RATE_LIMITED = "rate_limited"  # the object's write budget was spent (spam filter)
EVENT_DROP_FAILED = "failed"  # the API server refused the write, or it kept failing
EVENT_DROP_SHUTDOWN = "shutdown"  # still queued when the stop deadline passed, or recorded after
EVENT_DROP_REASONS = (EVENT_DROP_QUEUE_FULL, EVENT_DROP_RATE_LIMITED, EVENT_DROP_FAILED, EVENT_DROP_SHUTDOWN)
EVENT_WRITE_VERBS = ("create", "patch")

EVENTS_WRITTEN = Counter(
    "events_written",
    "Event writes that reached the API server: create (a new Event) or patch (a repeat "
    "folded into an existing Event, count and lastTimestamp updated).",
    ["verb"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
EVENTS_FOLDED = Counter(
    "events_folded",
    "Occurrences recorded without a write of their own: a repeat of one still queued, or "
    "written later within the count of the next write (min interval, write budget).",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter(
    "events_dropped",
    "Occurrences lost, by reason: queue_full, rate_limited (a new Event for an object whose "
    "write budget is spent), failed (refused by the API server, or still failing after the "
    "retries), shutdown (still queued at the stop deadline).",
    ["reason"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
for _verb in EVENT_WRITE_VERBS:
    EVENTS_WRITTEN.labels(verb=_verb)
for _reason in EVENT_DROP_REASONS:
    EVENTS_DROPPED.labels(reason=_reason)

_recorders: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track_event_recorder(recorder: Any) -> None:
    """Report ``recorder.queued()`` in ``events_queued`` while the recorder exists."""
    with _controllers_lock:
        _recorders.add(recorder)


class EventQueueCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        with _controllers_lock:
            recorders = list(_recorders)
        family = GaugeMetricFamily(
            f"{NAMESPACE}_events_queued",
            "Events waiting for the recorder's writer (repeats of a queued one are folded into it).",
        )
        family.add_metric([], float(sum(r.queued() for r in recorders)))
        yield family


REGISTRY.register(EventQueueCollector())


# --- phases (offloaded pods, ShadowPods) --------------------------------------------------------
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def count_by_phase(objects: Iterable[Mapping[str, Any]], phases: tuple[str, ...] = POD_PHASES) -> dict[str, int]:
    """How many of ``objects`` are in each of ``phases`` (every phase present, 0 when
    none, so a dashboard's series never vanish). No ``status.phase`` yet counts as the
    first phase (Pending: the API's own default); a phase outside the list as the last."""
    counts = dict.fromkeys(phases, 0)
    for obj in objects:
        phase = (obj.get("status") or {}).get("phase") or phases[0]
        counts[phase if phase in counts else phases[-1]] += 1
    return counts


# --- the cyclic garbage collector's pauses ----------------------------------------------------
# A young collection takes microseconds; a full one walks every container alive, which in
# a process holding tens of thousands of cached objects is hundreds of milliseconds, and
# every thread of the process (the enforcer's webhook requests among them) waits for it.
GC_PAUSE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
GC_GENERATIONS = (0, 1, 2)


class GcPauses(Collector):
    """Times every collection of Python's cyclic garbage collector (a ``gc.callbacks``
    hook), served as ``kube_offload_python_gc_pause_seconds{generation}``. The hook takes
    no lock and allocates no container: it runs inside the collection, with the GIL, and
    collections never overlap, so plain counters suffice; a scrape reads a snapshot."""

    def __init__(self, buckets: tuple[float, ...] = GC_PAUSE_BUCKETS, clock: Any = time.perf_counter) -> None:
        self.bounds = buckets
        self._clock = clock
        self._started = 0.0
        # per generation: counts per bucket (the last: above every bound), sum of seconds
        self.counts = {generation: [0] * (len(buckets) + 1) for generation in GC_GENERATIONS}
        self.sums = dict.fromkeys(GC_GENERATIONS, 0.0)

    def __call__(self, phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        generation = info.get("generation")
        if phase != "stop" or generation not in self.sums:
            return
        seconds = self._clock() - self._started
        self.counts[generation][bisect.bisect_left(self.bounds, seconds)] += 1
        self.sums[generation] += seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            f"{NAMESPACE}_python_gc_pause_seconds",
            "Time each collection of Python's cyclic garbage collector took, by generation (2: a "
            "full pass over every container alive); every thread of the process waits for it.",
            labels=["generation"],
        )
        for generation in GC_GENERATIONS:
            counts, total = list(self.counts[generation]), self.sums[generation]
            cumulative, running = [], 0
            for bound, count in zip((*map(str, self.bounds), "+Inf"), counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            family.add_metric([str(generation)], cumulative, total)
        yield family


_gc_pauses: GcPauses | None = None
_gc_lock = threading.Lock()


def track_gc_pauses() -> GcPauses:
    """Time the collector's pauses in this process's metrics from now on (idempotent: one
    hook per process, whoever asks)."""
    global _gc_pauses
    with _gc_lock:
        if _gc_pauses is None:
            _gc_pauses = GcPauses()
            gc.callbacks.append(_gc_pauses)
            REGISTRY.register(_gc_pauses)
        return _gc_pauses


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name ``registry`` exposes (``_total`` of counters, ``_bucket``/``_sum``/
    ``_count`` of histograms...), labelled metrics without children included: what a
    dashboard query may name."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "info": ("_info",),
        "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    }
    names: set[str] = set()
    for family in registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names
