"""Serve the extender app with gunicorn, over HTTP or HTTPS, started from Python.

Process model: by default ONE worker process with several gthread threads, because the
caches (a watch on every namespace and, in nodeCacheCapable mode, on every node) and the
Prometheus metrics live in the process that answers. With N workers there would be N
watches on the API server, N copies of the node cache, N caches that sync at different
moments and N disjoint sets of metrics. kube-scheduler calls the extender once per pod
per verb, one scheduling cycle at a time, so one process keeps up (docs/performance.md);
threads cover overlapping calls and the scrapes. ``--workers`` exists for experiments,
with those caveats.

The caches are created and started inside the worker, after the fork (``load`` runs
there because the app is not preloaded): threads do not survive ``fork()``, so a watch
started in the arbiter would be dead in the worker.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from gunicorn.app.base import BaseApplication

from extender.app import create_app
from extender.caches import ExtenderCaches
from extender.settings import ExtenderSettings, ServerSettings

log = logging.getLogger("extender.server")

CachesFactory = Callable[[], ExtenderCaches]


class ExtenderServer(BaseApplication):
    def __init__(self, server: ServerSettings, app_settings: ExtenderSettings, caches_factory: CachesFactory) -> None:
        self._server = server
        self._app_settings = app_settings
        self._caches_factory = caches_factory
        self._caches: ExtenderCaches | None = None
        super().__init__()

    def load_config(self) -> None:
        options = {
            "bind": [self._server.bind],
            "workers": self._server.workers,
            "threads": self._server.threads,
            "worker_class": "gthread",
            "certfile": self._server.tls_cert or None,
            "keyfile": self._server.tls_key or None,
            "loglevel": self._server.log_level.lower(),
            "keepalive": self._server.keepalive_seconds,
            "graceful_timeout": self._server.graceful_timeout_seconds,
            "proc_name": "kube-offload-extender",
            "preload_app": False,
            "worker_exit": self._worker_exit,
        }
        # gunicorn >= 25 opens a control socket at one fixed per-user path
        # ($HOME/.gunicorn/gunicorn.ctl): the webhook, the extender and test servers on one
        # host would take it from each other, and a read-only root filesystem refuses it.
        # Nothing here uses it.
        if "control_socket_disable" in self.cfg.settings:
            options["control_socket_disable"] = True
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        caches = self._caches_factory()
        caches.start()
        self._caches = caches
        log.info("worker %d: serving, caches %s", os.getpid(), type(caches).__name__)
        return create_app(caches, self._app_settings)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        if self._caches is not None:
            self._caches.stop()


def check_tls_files(server: ServerSettings) -> None:
    """Fail in the arbiter with a clear message rather than in every worker at boot."""
    if bool(server.tls_cert) != bool(server.tls_key):
        raise SystemExit("kube-offload extender: give both --tls-cert and --tls-key, or neither (plain HTTP)")
    for flag, path in (("--tls-cert", server.tls_cert), ("--tls-key", server.tls_key)):
        if path and not os.path.isfile(path):
            raise SystemExit(f"kube-offload extender: {flag} {path!r} does not exist")


def serve(server: ServerSettings, app_settings: ExtenderSettings, caches_factory: CachesFactory) -> None:
    """Run until SIGTERM/SIGINT. ``caches_factory`` is called in the worker process."""
    check_tls_files(server)
    if server.workers > 1:
        log.warning("%d workers: each has its own caches, watches and /metrics", server.workers)
    ExtenderServer(server, app_settings, caches_factory).run()
