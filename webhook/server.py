"""Serve the webhook app with gunicorn over TLS, started from Python (no gunicorn CLI).

Process model: by default ONE worker process with several gthread threads. The namespace
cache (a watch on every namespace) and the Prometheus metrics live in the process that
answers; with N workers there would be N watches on the apiserver, N caches that sync at
different moments (a worker could answer before its cache is ready) and N disjoint sets
of metrics. An admission costs well under a millisecond of CPU, so one process is not
the bottleneck at the rates an apiserver sends (see docs/performance.md); threads cover
the rare blocking moment (a GET on a cache miss). ``--workers`` exists for experiments,
with those caveats.

The cache is created and started inside the worker, after the fork (``load`` runs there
because the app is not preloaded): threads do not survive ``fork()``, so a watch started
in the arbiter would be dead in the worker.
"""

from __future__ import annotations

import gc
import logging
import os
import ssl
from typing import Any, Callable

from kube_offload.serving import GunicornServer

from webhook.app import create_app
from webhook.namespace_cache import NamespaceSource
from webhook.settings import ServerSettings, WebhookSettings

log = logging.getLogger("webhook.server")

SourceFactory = Callable[[], NamespaceSource]


class WebhookServer(GunicornServer):
    def __init__(
        self, server: ServerSettings, app_settings: WebhookSettings, source_factory: SourceFactory
    ) -> None:
        self._app_settings = app_settings
        self._source_factory = source_factory
        self._source: Any = None
        super().__init__(server, proc_name="kube-offload-webhook")

    def load(self) -> Any:
        source = self._source_factory()
        start = getattr(source, "start", None)
        if callable(start):
            start()
        self._source = source
        app = create_app(self._app_settings, namespace_source=source)
        # Everything allocated so far (Flask, the kubernetes client's models ...) lives as
        # long as the worker: keep it out of the collector's full passes, whose pause
        # would otherwise land on some admission's latency.
        gc.freeze()
        log.info("worker %d: serving, namespace source %s", os.getpid(), type(source).__name__)
        return app

    def worker_exit(self) -> None:
        stop = getattr(self._source, "stop", None)
        if callable(stop):
            stop()


def check_tls_files(server: ServerSettings) -> None:
    """Fail in the arbiter with a clear message rather than in every worker at boot."""
    for flag, path in (("--tls-cert", server.tls_cert), ("--tls-key", server.tls_key)):
        if not path:
            raise SystemExit(f"kube-offload webhook: {flag} is required (a PEM file)")
        if not os.path.isfile(path):
            raise SystemExit(f"kube-offload webhook: {flag} {path!r} does not exist")
    try:
        # gunicorn only loads the pair when a client connects; a bad pair would then fail
        # every handshake while the process looks healthy.
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(server.tls_cert, server.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise SystemExit(
            f"kube-offload webhook: --tls-cert {server.tls_cert!r} and --tls-key {server.tls_key!r} "
            f"are not a usable PEM certificate and key: {exc}"
        ) from None


def serve(server: ServerSettings, app_settings: WebhookSettings, source_factory: SourceFactory) -> None:
    """Run until SIGTERM/SIGINT. ``source_factory`` is called in the worker process; it
    must be picklable when this runs in a spawned process (a function or partial)."""
    check_tls_files(server)
    if server.workers > 1:
        log.warning(
            "%d workers: each has its own namespace cache and its own /metrics",
            server.workers,
        )
    WebhookServer(server, app_settings, source_factory).run()
