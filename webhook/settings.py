"""Settings of the webhook: what the app does, and how the server runs it.

Read from flags/environment in one place (webhook/cli.py); every field has a default so
tests and benchmarks build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_offload.runtime import serving
from kube_offload.runtime.body_limit import APISERVER_MAX_REQUEST_BODY_BYTES, MIB, worker_parse_budget

DEFAULT_BIND = "0.0.0.0:8443"
# Several processes (one is one core at most), each one event loop: see webhook/server.py.
DEFAULT_WORKERS = 2
# kube_offload/runtime/serving.py WORKER_CLASSES: "asyncio" or "gthread" (then with threads).
DEFAULT_WORKER_CLASS = serving.DEFAULT_WORKER_CLASS
DEFAULT_THREADS = 8
# Largest request body read (413 above): the apiserver's own request limit, so every Pod
# it accepts can be admitted. Memory is bounded by the parse budget below, not by this.
DEFAULT_MAX_BODY_BYTES = APISERVER_MAX_REQUEST_BODY_BYTES
# The server at rest, arbiter and workers (PSS; bench/bench_parse_memory.py measured 67
# MiB with the default workers and threads), rounded up; and the chart's memory limit
# (resources.limits.memory). tests/unit/kube_offload/runtime/test_body_limit.py holds the chart to both.
BASELINE_BYTES = 70 * MIB
MEMORY_LIMIT_BYTES = 384 * MIB
# Bytes the bodies one worker is parsing may take together (kube_offload/runtime/
# body_limit.py, ParseBudget): every worker's budget plus the baseline stays within 90 %
# of the memory limit (137 MiB). It holds one AdmissionReview at the hard cap reserved at
# the worst amplification (3 MiB x 37 = 111 MiB) beside many small ones
# (docs/webhook.md, "Request size").
DEFAULT_PARSE_MEMORY_BUDGET = worker_parse_budget(
    memory_limit=MEMORY_LIMIT_BYTES, baseline=BASELINE_BYTES, workers=DEFAULT_WORKERS
)
# How long a request waits for room in the budget before a 503: well under the
# registration's timeoutSeconds (5 by default), so the apiserver gets the clear answer
# rather than a timeout.
DEFAULT_PARSE_BUDGET_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class WebhookSettings:
    """Behaviour of the app (webhook/app.py)."""

    # Set spec.schedulerName of mutated pods to this (when they use the default scheduler);
    # None leaves it alone.
    scheduler_name: str | None = None
    # Register POST /echo, which returns the body unchanged: the benchmark's baseline for
    # "same server stack, no admission work". Never enabled by the CLI.
    enable_echo: bool = False
    # Bodies over this are refused with 413 before they are read (Content-Length) or
    # as soon as the read passes it (chunked): see DEFAULT_MAX_BODY_BYTES.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Memory per worker for bodies being parsed, at PARSE_AMPLIFICATION bytes per body
    # byte; a request waits up to parse_budget_wait_seconds for room, then gets a 503.
    parse_memory_budget: int = DEFAULT_PARSE_MEMORY_BUDGET
    parse_budget_wait_seconds: float = DEFAULT_PARSE_BUDGET_WAIT_SECONDS


@dataclass(frozen=True)
class ServerSettings(serving.ServerSettings):
    """How gunicorn serves the app: the runtime's settings with the webhook's defaults
    (HTTPS only: kube_offload/runtime/serving.py check_tls_files requires the pair)."""

    bind: str = DEFAULT_BIND
    workers: int = DEFAULT_WORKERS


SERVING_FLAGS = serving.ServingFlags(
    component="webhook",
    defaults=ServerSettings(),
    max_body_bytes=DEFAULT_MAX_BODY_BYTES,
    parse_memory_budget=DEFAULT_PARSE_MEMORY_BUDGET,
    baseline_bytes=BASELINE_BYTES,
    parse_budget_wait_seconds=DEFAULT_PARSE_BUDGET_WAIT_SECONDS,
    doc="docs/webhook.md",
    tls_required=True,
    workers_help="gunicorn worker processes (each uses one core at most); each watches namespaces "
                 "for its own cache, while /readyz and /metrics speak for all of them",
    max_body_help="largest AdmissionReview accepted, in bytes or with Ki/Mi (413 above); the default is "
                  "kube-apiserver's own request limit, so every Pod it accepts can be admitted "
                  "(docs/webhook.md, 'Request size')",
)
