"""Serve the extender app with gunicorn, over HTTP or HTTPS, started from Python.

Process model: by default ONE worker process, because the caches (a watch on every
namespace and, in nodeCacheCapable mode, on every node) and the Prometheus metrics live
in the process that answers. With N workers there would be N watches on the API server,
N copies of the node cache, N caches that sync at different moments and N disjoint sets
of metrics. kube-scheduler calls the extender once per pod per verb, one scheduling cycle
at a time, so one process keeps up (docs/performance.md). The worker is the webhook's
(:mod:`kube_offload.runtime.asyncio_worker`, ``--worker-class asyncio``): one event loop
that parses each request and calls the WSGI app inline, no hand-off to a thread per
request; a call in progress holds up the next (and a probe or scrape) for its duration,
tens of milliseconds at most for thousands of nodes (docs/performance.md, "Extender").
``--worker-class gthread`` (with ``--threads``) is the thread model of before;
``--workers`` exists for experiments, with the caveats above.

The caches are created and started inside the worker, after the fork (``load`` runs
there because the app is not preloaded): threads do not survive ``fork()``, so a watch
started in the arbiter would be dead in the worker.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from kube_offload.runtime.serving import GunicornServer, check_tls_files

from extender.app import create_app
from extender.caches import ExtenderCaches
from kube_offload.runtime.serving import ServerSettings
from extender.settings import ExtenderSettings

log = logging.getLogger("extender.server")

CachesFactory = Callable[[], ExtenderCaches]


class ExtenderServer(GunicornServer):
    def __init__(self, server: ServerSettings, app_settings: ExtenderSettings, caches_factory: CachesFactory) -> None:
        self._app_settings = app_settings
        self._caches_factory = caches_factory
        self._caches: ExtenderCaches | None = None
        super().__init__(server, proc_name="kube-offload-extender", max_body_bytes=app_settings.max_body_bytes)

    def load(self) -> Any:
        caches = self._caches_factory()
        caches.start()
        self._caches = caches
        log.info("worker %d: serving, caches %s", os.getpid(), type(caches).__name__)
        return create_app(caches, self._app_settings)

    def worker_exit(self) -> None:
        if self._caches is not None:
            self._caches.stop()


def serve(server: ServerSettings, app_settings: ExtenderSettings, caches_factory: CachesFactory) -> None:
    """Run until SIGTERM/SIGINT. ``caches_factory`` is called in the worker process."""
    check_tls_files(server, "extender", required=False)
    if server.workers > 1:
        log.warning("%d workers: each has its own caches, watches and /metrics", server.workers)
    ExtenderServer(server, app_settings, caches_factory).run()
