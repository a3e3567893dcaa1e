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


@dataclass(frozen=True)
class WebhookSettings:
    """Behaviour of the Flask app."""

    # Set spec.schedulerName of mutated pods to this (when they use the default scheduler);
    # None leaves it alone.
    scheduler_name: str | None = None
    # Register POST /echo, which returns the body unchanged: the benchmark's baseline for
    # "same server stack, no admission work". Never enabled by the CLI.
    enable_echo: bool = False
    # AdmissionReviews carry the object and the old object; etcd caps an object at
    # 1.5 MiB, so 8 MiB leaves room and still bounds memory per request.
    max_body_bytes: int = 8 * 1024 * 1024


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
