"""Settings of the scheduler extender: what the app decides, and how the server runs it.

Read from flags/environment in one place (extender/cli.py); every field has a default so
tests and benchmarks build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_offload.node_filter import DEFAULT_CAPACITY_MAX_AGE, DEFAULT_STRATEGY
from kube_offload.runtime import serving
from kube_offload.runtime.body_limit import MIB, largest_parseable_body, worker_parse_budget

DEFAULT_BIND = "0.0.0.0:8080"
# One process, one event loop: see extender/server.py for why.
DEFAULT_WORKERS = 1
DEFAULT_WORKER_CLASS = serving.DEFAULT_WORKER_CLASS
DEFAULT_THREADS = 8  # gthread only
# The server at rest (one worker with its threads; PSS, bench/bench_parse_memory.py
# measured 48 MiB), rounded up; and the chart's memory limit (resources.limits.memory).
# tests/unit/kube_offload/runtime/test_body_limit.py holds the chart to both.
BASELINE_BYTES = 50 * MIB
MEMORY_LIMIT_BYTES = 512 * MIB
# Bytes the bodies the worker is parsing may take together (ParseBudget,
# kube_offload/runtime/body_limit.py): the budget plus the baseline stays within 90 % of
# the memory limit (410 MiB).
DEFAULT_PARSE_MEMORY_BUDGET = worker_parse_budget(
    memory_limit=MEMORY_LIMIT_BYTES, baseline=BASELINE_BYTES, workers=DEFAULT_WORKERS
)
# Largest request body read (413 above): the largest that the budget can parse alone at
# the worst amplification, 37 bytes per body byte (a body dense in small JSON objects,
# which anyone who reaches the Service can send): 11 MiB, 407 MiB reserved. kube-scheduler
# calls the extender one pod at a time, so one body at the cap is the load to carry; the
# threads are for overlap and scrapes, and a second large body waits for the first.
# Without nodeCacheCapable, kube-scheduler sends every candidate Node object (~3-10 KiB
# each, status.images dominates): this carries ~1,100-3,700 of them (~2,400 of the
# benchmark's 4.6 KiB Nodes); nodeCacheCapable sends names (~40 bytes each)
# (docs/extender.md, "Request size").
DEFAULT_MAX_BODY_BYTES = largest_parseable_body(DEFAULT_PARSE_MEMORY_BUDGET)
# How long a request waits for room in the budget before a 503: well under the
# scheduler's httpTimeout (5s by default), so kube-scheduler gets the answer (a filter
# error: it retries the pod with backoff) rather than a timeout.
DEFAULT_PARSE_BUDGET_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class ExtenderSettings:
    """Behaviour of the app (extender/app.py)."""

    strategy: str = DEFAULT_STRATEGY
    # Seconds after which a capacity annotation is stale (then ignored); None = never.
    capacity_max_age: float | None = DEFAULT_CAPACITY_MAX_AGE
    # Bodies over this are refused with 413 before they are read (Content-Length) or
    # as soon as the read passes it (chunked): see DEFAULT_MAX_BODY_BYTES.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Memory for bodies being parsed, at PARSE_AMPLIFICATION bytes per body byte; a
    # request waits up to parse_budget_wait_seconds for room, then gets a 503.
    parse_memory_budget: int = DEFAULT_PARSE_MEMORY_BUDGET
    parse_budget_wait_seconds: float = DEFAULT_PARSE_BUDGET_WAIT_SECONDS
    # Register POST /bench/passthrough (stdlib json.loads + json.dumps of the body, nothing
    # else): the HTTP benchmark's baseline on the same server stack. Off unless asked for.
    bench_passthrough: bool = False


@dataclass(frozen=True)
class ServerSettings(serving.ServerSettings):
    """How gunicorn serves the app: the runtime's settings with the extender's defaults
    (plain HTTP without a certificate)."""

    bind: str = DEFAULT_BIND
    workers: int = DEFAULT_WORKERS


SERVING_FLAGS = serving.ServingFlags(
    component="extender",
    defaults=ServerSettings(),
    max_body_bytes=DEFAULT_MAX_BODY_BYTES,
    parse_memory_budget=DEFAULT_PARSE_MEMORY_BUDGET,
    baseline_bytes=BASELINE_BYTES,
    parse_budget_wait_seconds=DEFAULT_PARSE_BUDGET_WAIT_SECONDS,
    doc="docs/extender.md",
    tls_required=False,
    workers_help="gunicorn worker processes; each has its own caches and metrics, so keep 1 unless measuring",
    max_body_help="largest request body accepted, in bytes or with Ki/Mi (413 above); the default is the "
                  "largest body --parse-memory-budget can parse at the worst amplification; without "
                  "nodeCacheCapable ExtenderArgs carry every candidate Node (docs/extender.md, 'Request size')",
)
