"""``/healthz``, ``/readyz`` and ``/metrics`` of a long-running component (the vkubelet,
the enforcer) on a plain-HTTP port of its own, served by the process manager
(kube_offload/runtime/manager.py).

Apart from the kubelet API (10250) and the ShadowPod webhook (9443) on purpose: those
serve TLS to the API server and authenticate their callers, while a probe or a
Prometheus scrape needs neither, and must still answer when the TLS material is wrong.

The checks are named and answered as the Kubernetes components do
(kube_offload/runtime/probes.py, shared with every other server of the project).

- *healthz* (liveness: restart me) - the process's loops are alive: no controller lost
  a worker, no reconcile has been running for longer than a call could take.
- *readyz* (readiness) - the caches have listed (and, for the vkubelet, the remote
  cluster answers); what each component checks is in its ``observability`` module.
"""

from __future__ import annotations

import logging
from http.server import ThreadingHTTPServer
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.flags import add_flag
from kube_offload.runtime.https_server import BackgroundServing, parse_bind
from kube_offload.runtime.http_handler import ResponseWriter

# The answers themselves, re-exported (health.Check, health.evaluate...): written once in
# kube_offload/runtime/probes.py for every server of the project.
from kube_offload.runtime.probes import (
    HEALTHZ as HEALTHZ,
    METRICS as METRICS,
    NOT_FOUND,
    READYZ as READYZ,
    TEXT,
    Answer as Answer,
    Check as Check,
    Verdict as Verdict,
    evaluate as evaluate,
    probe_answer,
)

log = logging.getLogger("kube_offload.runtime.health")

# Every API call has a 30 s read timeout and a reconcile makes a few: one running this
# long is stuck (a deadlock, a hung socket), and only a restart frees its worker.
STUCK_RECONCILE_SECONDS = 600.0

# Loopback, any free port: several components (and test runs) on one machine never
# collide, and nothing is exposed beyond the host; the charts set 0.0.0.0:<port>.
DEFAULT_BIND = "127.0.0.1:0"
FLAG = "--health-bind"

def add_health_flag(parser: Any, component: str) -> None:
    add_flag(
        parser,
        component,
        FLAG,
        default=DEFAULT_BIND,
        help=f"HOST:PORT serving plain-HTTP {HEALTHZ}, {READYZ} and {METRICS} (docs/observability.md); "
        "port 0: any free port (logged at start-up)",
    )


# --- checks every component shares ---------------------------------------------------------
def controllers_check(stuck_after: float = STUCK_RECONCILE_SECONDS) -> Check:
    """Every controller of this process has its workers and none is stuck."""

    def run() -> str | None:
        problems = [p for c in rm.tracked_controllers() if (p := c.problem(stuck_after))]
        return "; ".join(sorted(problems)) or None

    return Check("controllers", run)


def caches_check(caches: Callable[[], Iterable[Any]], name: str = "informers") -> Check:
    """Every cache ``caches()`` returns (anything with ``name`` and ``has_synced()``: an
    Informer, a MultiNamespaceInformer...) has listed once."""

    def run() -> str | None:
        waiting = sorted({str(getattr(c, "name", c)) for c in caches() if not c.has_synced()})
        return f"not synced yet: {', '.join(waiting)}" if waiting else None

    return Check(name, run)


# --- the server --------------------------------------------------------------------------------
class HealthServer(BackgroundServing, ThreadingHTTPServer):
    """Plain HTTP on ``bind`` (HOST:PORT; port 0 picks a free one, see :attr:`port`)."""

    daemon_threads = True
    thread_name = "health"

    def __init__(
        self,
        bind: str,
        *,
        live: Sequence[Check],
        ready: Sequence[Check],
        registries: Sequence[CollectorRegistry] = (rm.REGISTRY,),
        flag: str = FLAG,
    ) -> None:
        try:
            address = parse_bind(bind)
        except ValueError as exc:
            raise HealthSetupError(f"{flag}: {exc}") from None
        self.live = list(live)
        self.ready = list(ready)
        self.registries = list(registries)
        try:
            super().__init__(address, HealthRequestHandler)
        except OSError as exc:
            raise HealthSetupError(
                f"{flag}: cannot listen on {bind}: {exc.strerror or exc} (pick another port, or port 0 for any free one)"
            ) from None

    def start(self) -> None:
        super().start()
        host, port = self.server_address[0:2]
        log.info("health and metrics on http://%s:%d (%s, %s, %s)", host, port, HEALTHZ, READYZ, METRICS)

    def exposition(self) -> bytes:
        return b"".join(generate_latest(registry) for registry in self.registries)


class HealthSetupError(Exception):
    """The health port cannot be served as configured (the message names the flag)."""


class HealthRequestHandler(ResponseWriter):
    server: HealthServer
    protocol_version = "HTTP/1.1"
    server_version = "kube-offload"
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("health %s: " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        server = self.server
        answer = probe_answer(
            parts.path, parts.query, live=server.live, ready=server.ready,
            exposition=lambda: (server.exposition(), CONTENT_TYPE_LATEST),
        )
        if answer is None:
            self._text(404, NOT_FOUND)
        else:
            self.send_body(answer.status, answer.body, answer.content_type)

    def _method_not_allowed(self) -> None:
        self.close_connection = True  # the body, if any, is not read
        self._text(405, f"{self.command} is not supported; GET {HEALTHZ}, {READYZ} or {METRICS}")

    do_POST = do_PUT = do_DELETE = do_PATCH = _method_not_allowed

    def _text(self, code: int, text: str) -> None:
        self.send_body(code, (text + "\n").encode(), TEXT)

