"""Settings of the scheduler extender: what the app decides, and how the server runs it.

Read from flags/environment in one place (extender/cli.py); every field has a default so
tests and benchmarks build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.core import DEFAULT_CAPACITY_MAX_AGE, DEFAULT_STRATEGY

DEFAULT_BIND = "0.0.0.0:8080"
# One process, several threads: see extender/server.py for why.
DEFAULT_WORKERS = 1
DEFAULT_THREADS = 8
# Largest request body read. Sized by bench/bench_parse_memory.py: parsing costs up to 37
# bytes of memory per body byte (a body dense in small JSON objects), so the chart's 8
# threads at this limit stay within 90 % of its 512 Mi memory limit. Without
# nodeCacheCapable, kube-scheduler sends every candidate Node object (~3-10 KiB each,
# status.images dominates): this carries ~300 of them; nodeCacheCapable sends names
# (~40 bytes each), tens of thousands (docs/extender.md, "Request size").
DEFAULT_MAX_BODY_BYTES = 1408 * 1024


@dataclass(frozen=True)
class ExtenderSettings:
    """Behaviour of the Flask app."""

    strategy: str = DEFAULT_STRATEGY
    # Seconds after which a capacity annotation is stale (then ignored); None = never.
    capacity_max_age: float | None = DEFAULT_CAPACITY_MAX_AGE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Register POST /bench/passthrough (stdlib json.loads + json.dumps of the body, nothing
    # else): the HTTP benchmark's baseline on the same server stack. Off unless asked for.
    bench_passthrough: bool = False


@dataclass(frozen=True)
class ServerSettings:
    """How gunicorn serves the app."""

    bind: str = DEFAULT_BIND
    tls_cert: str | None = None
    tls_key: str | None = None
    workers: int = DEFAULT_WORKERS
    threads: int = DEFAULT_THREADS
    log_level: str = "INFO"
    # kube-scheduler reuses its connections to the extender; closing idle ones quickly
    # would only cost it new (TLS) handshakes on the scheduling path.
    keepalive_seconds: int = 30
    # On SIGTERM, finish in-flight calls but do not outlive a pod's grace period.
    graceful_timeout_seconds: int = 10

    @property
    def https(self) -> bool:
        return bool(self.tls_cert)
