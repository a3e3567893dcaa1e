"""Serve a WSGI app (the webhook's own, the extender's Flask app) with gunicorn, started
from Python (no gunicorn CLI): the process model shared by the webhook and the extender.

The worker class is one of :data:`WORKER_CLASSES`: ``gthread`` (gunicorn's threads; the
extender's) or ``asyncio`` (:mod:`kube_offload.runtime.asyncio_worker`: one event loop,
the app called inline; the webhook's). Either way the app (and the cache it reads) is built in each worker after the fork
(``preload_app`` off), because threads - a watch, say - do not survive ``fork()``. A
subclass says how to build the app (:meth:`load`) and what to stop at worker exit.
"""

from __future__ import annotations

from typing import Any, Protocol

from gunicorn.app.base import BaseApplication


class ServerOptions(Protocol):
    # Read-only: the components' settings are frozen dataclasses.
    @property
    def bind(self) -> str: ...

    @property
    def workers(self) -> int: ...

    @property
    def threads(self) -> int: ...

    @property
    def tls_cert(self) -> str | None: ...

    @property
    def tls_key(self) -> str | None: ...

    @property
    def log_level(self) -> str: ...

    @property
    def keepalive_seconds(self) -> int: ...

    @property
    def graceful_timeout_seconds(self) -> int: ...


# What a server may name as its worker class: gunicorn's spelling of each.
WORKER_CLASSES = {
    "gthread": "gthread",
    "asyncio": "kube_offload.runtime.asyncio_worker.AsyncioWorker",
}


class GunicornServer(BaseApplication):
    def __init__(
        self,
        server: ServerOptions,
        *,
        proc_name: str,
        worker_class: str = "gthread",
        max_body_bytes: int | None = None,
    ) -> None:
        if worker_class not in WORKER_CLASSES:
            raise ValueError(f"worker class {worker_class!r}: use one of {', '.join(WORKER_CLASSES)}")
        self._server = server
        self._proc_name = proc_name
        self._worker_class = worker_class
        # The app's request body limit: the asyncio worker does not read a body announced
        # over it (the app answers 413 from the length).
        self.max_body_bytes = max_body_bytes
        super().__init__()

    def load_config(self) -> None:
        server = self._server
        options: dict[str, Any] = {
            "bind": [server.bind],
            "workers": server.workers,
            "threads": server.threads,
            "worker_class": WORKER_CLASSES[self._worker_class],
            "certfile": server.tls_cert or None,
            "keyfile": server.tls_key or None,
            "loglevel": server.log_level.lower(),
            "keepalive": server.keepalive_seconds,
            "graceful_timeout": server.graceful_timeout_seconds,
            "proc_name": self._proc_name,
            "preload_app": False,
            "worker_exit": lambda _arbiter, _worker: self.worker_exit(),
            "child_exit": lambda _arbiter, worker: self.child_exit(worker.pid),
            "on_exit": lambda _arbiter: self.stopped(),
        }
        # gunicorn >= 25 opens a control socket at one fixed per-user path
        # ($HOME/.gunicorn/gunicorn.ctl): the webhook, the extender and test servers on one
        # host would take it from each other, and a read-only root filesystem refuses it.
        # Nothing here uses it.
        if "control_socket_disable" in self.cfg.settings:
            options["control_socket_disable"] = True
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must say how to build its app (load)")

    def worker_exit(self) -> None:
        """Stop what :meth:`load` started in this worker."""

    def child_exit(self, pid: int) -> None:
        """In the arbiter: worker ``pid`` has exited (crashed, timed out or stopped)."""

    def stopped(self) -> None:
        """In the arbiter, once every worker has stopped: clean up what it shared."""
