"""Serve the webhook app with gunicorn over TLS, started from Python (no gunicorn CLI).

Process model: several worker processes (2 by default), each running one asyncio event
loop (:mod:`kube_offload.runtime.asyncio_worker`, ``--worker-class asyncio``) that parses
each request and calls the WSGI app inline: no hand-off to a thread per request, which
took more of gunicorn gthread's CPU than TLS or the admission (docs/performance.md,
"Webhook"). One worker is one core at most (the GIL). While the app runs, its worker
serves nothing else: the one blocking call, the namespace cache's fallback GET on a miss,
is bounded (``FALLBACK_TIMEOUT``, 1 s + 2 s) and rare, and holds up only that worker.
``--worker-class gthread`` (with ``--threads``) is the thread model of before.

Each worker holds its own namespace cache (a watch on every namespace: small), but the
pod still has one readiness and one set of metrics (:mod:`kube_offload.runtime.workers`):
``/readyz`` answers 200 only once every worker's cache has synced, and ``/metrics``
merges the counters of all workers through prometheus-client's multiprocess mode,
whichever worker answers the scrape.

The cache is created and started inside each worker, after the fork (``load`` runs there
because the app is not preloaded): threads do not survive ``fork()``, so a watch started
in the arbiter would be dead in the worker.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from typing import Any, Callable

from kube_offload.runtime.serving import GunicornServer, check_tls_files
from kube_offload.runtime.workers import WorkerGroup

from webhook.app import create_app
from webhook.namespace_cache import NamespaceSource
from kube_offload.runtime.serving import ServerSettings
from webhook.settings import WebhookSettings

log = logging.getLogger("webhook.server")

SourceFactory = Callable[[], NamespaceSource]


class WebhookServer(GunicornServer):
    def __init__(
        self,
        server: ServerSettings,
        app_settings: WebhookSettings,
        source_factory: SourceFactory,
        workers: WorkerGroup,
    ) -> None:
        self._app_settings = app_settings
        self._source_factory = source_factory
        self._source: Any = None
        self._workers = workers
        self._stopping = threading.Event()
        super().__init__(server, proc_name="kube-offload-webhook", max_body_bytes=app_settings.max_body_bytes)

    def load(self) -> Any:
        # Before the app creates its metrics: they must write to the shared directory.
        self._workers.enable_shared_metrics()
        source = self._source_factory()
        start = getattr(source, "start", None)
        if callable(start):
            start()
        self._source = source
        self._workers.mark_ready_when(source.ready, self._stopping)
        app = create_app(self._app_settings, namespace_source=source, workers=self._workers)
        # Everything allocated so far (the app, the kubernetes client's models ...) lives as
        # long as the worker: keep it out of the collector's full passes, whose pause
        # would otherwise land on some admission's latency.
        gc.freeze()
        log.info("worker %d: serving, namespace source %s", os.getpid(), type(source).__name__)
        return app

    def worker_exit(self) -> None:
        self._stopping.set()
        stop = getattr(self._source, "stop", None)
        if callable(stop):
            stop()

    def child_exit(self, pid: int) -> None:
        self._workers.worker_exited(pid)

    def stopped(self) -> None:
        self._workers.close()


def serve(server: ServerSettings, app_settings: WebhookSettings, source_factory: SourceFactory) -> None:
    """Run until SIGTERM/SIGINT. ``source_factory`` is called in the worker process; it
    must be picklable when this runs in a spawned process (a function or partial)."""
    check_tls_files(server, "webhook", required=True)
    workers = WorkerGroup.create(server.workers, component="webhook")
    log.info("%d workers; shared metrics and readiness in %s", server.workers, workers.directory)
    try:
        WebhookServer(server, app_settings, source_factory, workers).run()
    finally:
        workers.close()  # also when gunicorn exits before its on_exit hook
