"""Serve a WSGI app (the webhook's, the extender's: :mod:`kube_offload.runtime.wsgi`) with
gunicorn, started from Python (no gunicorn CLI): the process model shared by the webhook
and the extender, their server settings (:class:`ServerSettings`) and their serving flags
(:func:`add_server_flags`), written once.

The worker class is one of :data:`WORKER_CLASSES`: ``asyncio``
(:mod:`kube_offload.runtime.asyncio_worker`: one event loop, the app called inline; the
default of both) or ``gthread`` (gunicorn's threads, the model of before). Either way the
app (and the cache it reads) is built in each worker after the fork (``preload_app``
off), because threads - a watch, say - do not survive ``fork()``. A subclass says how to
build the app (:meth:`load`) and what to stop at worker exit.
"""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass
from typing import Any

from gunicorn.app.base import BaseApplication

from kube_offload.runtime.body_limit import budget_too_small, parse_budget_help
from kube_offload.runtime.flags import add_flag, byte_size, positive_int
from kube_offload.runtime.logs import LEVELS

DEFAULT_WORKER_CLASS = "asyncio"


@dataclass(frozen=True)
class ServerSettings:
    """How gunicorn serves a component's app. Each component's settings module gives its
    own defaults (a subclass: webhook/settings.py, extender/settings.py)."""

    # PEM serving certificate and key; neither: plain HTTP (the webhook requires both).
    tls_cert: str | None = None
    tls_key: str | None = None
    bind: str = "0.0.0.0:8080"
    # Worker processes; each one core at most, each with its own caches.
    workers: int = 1
    threads: int = 8  # gthread only
    worker_class: str = DEFAULT_WORKER_CLASS
    log_level: str = "INFO"
    # The apiserver and kube-scheduler keep their connections alive and reuse them;
    # closing idle ones quickly only costs them new (TLS) handshakes.
    keepalive_seconds: int = 30
    # On SIGTERM, finish in-flight calls but do not outlive a pod's grace period.
    graceful_timeout_seconds: int = 10

    @property
    def https(self) -> bool:
        return bool(self.tls_cert)


# What a server may name as its worker class: gunicorn's spelling of each.
WORKER_CLASSES = {
    "gthread": "gthread",
    "asyncio": "kube_offload.runtime.asyncio_worker.AsyncioWorker",
}


class GunicornServer(BaseApplication):
    def __init__(
        self,
        server: ServerSettings,
        *,
        proc_name: str,
        max_body_bytes: int | None = None,
    ) -> None:
        if server.worker_class not in WORKER_CLASSES:
            raise ValueError(f"worker class {server.worker_class!r}: use one of {', '.join(WORKER_CLASSES)}")
        self._server = server
        self._proc_name = proc_name
        self._worker_class = server.worker_class
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


# --- the serving flags of the webhook and the extender ------------------------------------
@dataclass(frozen=True)
class ServingFlags:
    """What a component's serving flags need to know: its defaults and the words of its
    ``--help`` that are its own."""

    component: str  # the flags' environment prefix (KUBE_OFFLOAD_<COMPONENT>_...) and messages
    defaults: ServerSettings  # the component's ServerSettings()
    max_body_bytes: int
    parse_memory_budget: int
    baseline_bytes: int  # the server at rest, for the parse budget's help
    parse_budget_wait_seconds: float
    doc: str  # the component's page, e.g. docs/webhook.md
    tls_required: bool  # the webhook serves HTTPS only; the extender HTTP without a certificate
    workers_help: str
    max_body_help: str


def add_server_flags(parser: argparse.ArgumentParser, flags: ServingFlags) -> None:
    """``--bind``, ``--tls-cert``, ``--tls-key``, ``--workers``, ``--worker-class``,
    ``--threads``, ``--max-body-bytes``, ``--parse-memory-budget`` and ``--log-level``."""
    component, defaults = flags.component, flags.defaults
    add_flag(parser, component, "--bind", default=defaults.bind,
             help="HOST:PORT to serve HTTPS on" if flags.tls_required else "HOST:PORT to serve on")
    add_flag(parser, component, "--tls-cert", default=None,
             help="PEM serving certificate (with its chain); " + (
                 "required to serve" if flags.tls_required else "with --tls-key serves HTTPS, unset: plain HTTP"))
    add_flag(parser, component, "--tls-key", default=None,
             help="PEM private key of --tls-cert" + ("; required to serve" if flags.tls_required else ""))
    add_flag(parser, component, "--workers", default=defaults.workers, type=positive_int, help=flags.workers_help)
    add_flag(parser, component, "--worker-class", default=defaults.worker_class, choices=sorted(WORKER_CLASSES),
             help=f"asyncio: one event loop per worker, the app called in it (the default; {flags.doc}, "
                  "'Workers'); gthread: gunicorn's threads, --threads per worker")
    add_flag(parser, component, "--threads", default=defaults.threads, type=positive_int,
             help="request threads per worker (--worker-class gthread only)")
    add_flag(parser, component, "--max-body-bytes", default=flags.max_body_bytes, type=byte_size,
             help=flags.max_body_help)
    add_flag(parser, component, "--parse-memory-budget", default=flags.parse_memory_budget, type=byte_size,
             help=parse_budget_help(baseline_bytes=flags.baseline_bytes,
                                    wait_seconds=flags.parse_budget_wait_seconds, doc=flags.doc))
    add_flag(parser, component, "--log-level", default=defaults.log_level, type=str.upper, choices=LEVELS,
             help="log level")


def read_server_flags(args: argparse.Namespace, flags: ServingFlags) -> ServerSettings:
    """The server settings the flags of :func:`add_server_flags` ask for (the component's
    class, its other fields at their defaults); exits with the reason when the parse
    budget cannot parse a body at the cap, or the TLS files are not a usable pair."""
    problem = budget_too_small(component=flags.component, budget=args.parse_memory_budget, max_body=args.max_body_bytes)
    if problem:
        raise SystemExit(f"kube-offload {flags.component}: {problem}")
    settings = type(flags.defaults)(
        tls_cert=args.tls_cert or None,
        tls_key=args.tls_key or None,
        bind=args.bind,
        workers=args.workers,
        threads=args.threads,
        worker_class=args.worker_class,
        log_level=args.log_level,
    )
    check_tls_files(settings, flags.component, required=flags.tls_required)
    return settings


def check_tls_files(server: ServerSettings, component: str, *, required: bool) -> None:
    """Fail in the arbiter with a clear message rather than in every worker at boot, or at
    every handshake while the process looks healthy (gunicorn only loads the pair when a
    client connects)."""
    if required:
        for flag, path in (("--tls-cert", server.tls_cert), ("--tls-key", server.tls_key)):
            if not path:
                raise SystemExit(f"kube-offload {component}: {flag} is required (a PEM file)")
    elif bool(server.tls_cert) != bool(server.tls_key):
        raise SystemExit(f"kube-offload {component}: give both --tls-cert and --tls-key, or neither (plain HTTP)")
    if not server.tls_cert or not server.tls_key:
        return
    for flag, path in (("--tls-cert", server.tls_cert), ("--tls-key", server.tls_key)):
        if not os.path.isfile(path):
            raise SystemExit(f"kube-offload {component}: {flag} {path!r} does not exist")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(server.tls_cert, server.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise SystemExit(
            f"kube-offload {component}: --tls-cert {server.tls_cert!r} and --tls-key {server.tls_key!r} "
            f"are not a usable PEM certificate and key: {exc}"
        ) from None
