"""Settings of the webhook: what the app does, and how the server runs it.

Read from flags/environment in one place (webhook/cli.py); every field has a default so
tests and benchmarks build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BIND = "0.0.0.0:8443"
# Several processes (one is one core at most), each with threads: see webhook/server.py.
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 8
# Largest request body read. Sized by bench/bench_parse_memory.py: parsing costs up to 37
# bytes of memory per body byte (a body dense in small JSON objects, which anyone who
# reaches the Service can send), so the chart's 2 workers x 8 threads at this limit stay
# within 90 % of its 256 Mi memory limit (docs/webhook.md, "Request size"). Pods are
# rarely over a few tens of KiB; larger ones are refused with 413.
DEFAULT_MAX_BODY_BYTES = 256 * 1024


@dataclass(frozen=True)
class WebhookSettings:
    """Behaviour of the Flask app."""

    # Set spec.schedulerName of mutated pods to this (when they use the default scheduler);
    # None leaves it alone.
    scheduler_name: str | None = None
    # Register POST /echo, which returns the body unchanged: the benchmark's baseline for
    # "same server stack, no admission work". Never enabled by the CLI.
    enable_echo: bool = False
    # Bodies over this are refused with 413 before they are read (Content-Length) or
    # as soon as the read passes it (chunked): see DEFAULT_MAX_BODY_BYTES.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True)
class ServerSettings:
    """How gunicorn serves the app."""

    tls_cert: str
    tls_key: str
    bind: str = DEFAULT_BIND
    workers: int = DEFAULT_WORKERS
    threads: int = DEFAULT_THREADS
    log_level: str = "INFO"
    # The apiserver keeps connections to webhooks alive and reuses them; closing idle ones
    # quickly only costs it new TLS handshakes.
    keepalive_seconds: int = 30
    # On SIGTERM, finish in-flight admissions but do not outlive a pod's grace period.
    graceful_timeout_seconds: int = 10
