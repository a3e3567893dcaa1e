"""A WSGI app without a framework: a routing table of handlers that each return a
:class:`Reply`, and the probe routes (``/healthz``, ``/readyz``, ``/metrics``) answered by
:func:`kube_offload.runtime.probes.probe_answer` like every other server of ours.

The webhook serves its few fixed routes this way rather than through Flask: on its
admission path Flask's request and response objects, context push and dispatch cost more
than the admission itself (docs/performance.md, "Webhook"). A handler takes the WSGI
``environ`` and returns the whole answer; what is left to WSGI is :func:`send`.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Callable, Iterable, Mapping, Sequence
from wsgiref.types import StartResponse, WSGIEnvironment

from kube_offload.runtime.probes import HEALTHZ, METRICS, READYZ, Check, probe_answer

# "200 OK", "404 Not Found" ... by code, as WSGI's start_response wants the status.
STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole answer: status code, body, its content type and any other headers."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[WSGIEnvironment], Reply]
# path -> method -> handler
Routes = Mapping[str, Mapping[str, Handler]]


def send(start_response: StartResponse, reply: Reply) -> Iterable[bytes]:
    """Hand ``reply`` to the WSGI server."""
    start_response(
        STATUS_LINES.get(reply.status, f"{reply.status} Unknown"),
        [("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body))), *reply.headers],
    )
    return [reply.body]


def probe_routes(*, ready: Sequence[Check], exposition: Callable[[], tuple[bytes, str]]) -> dict[str, dict[str, Handler]]:
    """The three probe paths, GET (and HEAD: the server drops the body) only; liveness has
    no check of its own: a process that answers is alive."""

    def probe(environ: WSGIEnvironment) -> Reply:
        found = probe_answer(
            environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), live=[], ready=ready, exposition=exposition
        )
        assert found is not None  # only the probe paths are routed here
        return Reply(found.status, found.body, found.content_type)

    return {path: {"GET": probe, "HEAD": probe} for path in (HEALTHZ, READYZ, METRICS)}
