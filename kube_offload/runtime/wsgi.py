"""A WSGI app without a framework: a routing table of handlers that each return a
:class:`Reply`, the probe routes (``/healthz``, ``/readyz``, ``/metrics``) answered by
:func:`kube_offload.runtime.probes.probe_answer` like every other server of ours, and the
envelope every body-reading route shares (:func:`within_parse_budget`: the body limit,
the parse memory budget, the answers to a client's mistake).

The webhook and the extender serve their few fixed routes this way rather than through
Flask: on their request path Flask's request and response objects, context push and
dispatch cost more than the admission itself (docs/performance.md, "Webhook"; for the
extender, "Extender"). A handler takes the WSGI ``environ`` and returns the whole
answer; what is left to WSGI is :func:`send`. Each component words its errors in its own
JSON (a ``metav1.Status`` for the webhook, ``{"Error": ...}`` for the extender): an
:data:`ErrorReply`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Callable, Generic, Iterable, Mapping, Sequence, TypeVar
from wsgiref.types import StartResponse, WSGIEnvironment

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge

from kube_offload.runtime.body_limit import OverParseBudget, ParseBudget, ParseBudgetBusy, body_length, too_large_message
from kube_offload.runtime.probes import HEALTHZ, METRICS, READYZ, Check, probe_answer

log = logging.getLogger("kube_offload.runtime.wsgi")

M = TypeVar("M")  # a component's metrics

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
# (code, reason, message) -> the component's error answer: the webhook's metav1.Status,
# the extender's {"Error": message}.
ErrorReply = Callable[[int, str, str], Reply]

# The outcomes of a body-reading route that are the envelope's, not the route's (the
# ``outcome`` label of the components' request metrics).
BAD_REQUEST = "bad_request"
UNAVAILABLE = "unavailable"  # the parse memory budget stayed taken: 503, retried by the client
ERROR = "error"


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


def http_error(error: ErrorReply, exc: HTTPException) -> Reply:
    """A werkzeug HTTP error (the 400 of a bad Content-Length, 404, 405, 413) in the
    component's words."""
    return error(exc.code or 500, exc.name.replace(" ", ""), exc.description or exc.name)


def dispatch(routes: Routes, environ: WSGIEnvironment, error: ErrorReply) -> Reply:
    """The answer of the route for the request's path and method: 404 for a path not
    routed, 405 (with ``Allow``) for a method the path does not take."""
    methods = routes.get(environ.get("PATH_INFO", ""))
    if methods is None:
        return http_error(error, NotFound())
    handler = methods.get(environ.get("REQUEST_METHOD", ""))
    if handler is None:
        refused = http_error(error, MethodNotAllowed())
        return Reply(refused.status, refused.body, refused.content_type, (("Allow", ", ".join(sorted(methods))),))
    return handler(environ)


class WsgiApp(Generic[M]):
    """The WSGI callable of one worker process: its routes, its component's words for an
    error, and its metrics and parse budget (which tests and benchmarks look at). A route
    catches its own failures; one that escapes is logged and answered 500, never a dead
    worker."""

    def __init__(self, routes: Routes, *, component: str, error: ErrorReply, metrics: M,
                 parse_budget: ParseBudget) -> None:
        self.routes = routes
        self.error = error
        self.metrics = metrics
        self.parse_budget = parse_budget
        self.internal_error = error(500, "InternalError", f"the {component} failed unexpectedly; see its log")

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            reply = dispatch(self.routes, environ, self.error)
        except Exception:  # the routes catch their own; this is for the rest
            log.exception("%s %s: unexpected failure", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            reply = self.internal_error
        return send(start_response, reply)


def within_parse_budget(
    environ: WSGIEnvironment,
    *,
    budget: ParseBudget,
    component: str,
    endpoint: str,
    max_body: int,
    error: ErrorReply,
    answer: Callable[[], tuple[str, Reply]],
    failed: Reply,
) -> tuple[str, Reply]:
    """``answer()`` (an outcome and its reply) inside a reservation of the request body's
    parse memory, and what the envelope answers instead: the 400 of a Content-Length
    that is not a number of bytes; a 413 for a body over ``max_body`` (announced or found
    while reading: ``answer`` reads it with :func:`~kube_offload.runtime.body_limit.read_body`)
    or one the whole budget could never parse; a 503 with ``Retry-After`` when the budget
    stayed taken; ``failed`` (logged) when ``answer`` raises anything else. Everything
    ``answer`` parsed is freed when it returns, before the reservation is given back."""
    try:
        length = body_length(environ)
    except HTTPException as exc:
        return BAD_REQUEST, http_error(error, exc)
    try:
        with budget.reserve(length):
            return answer()
    except RequestEntityTooLarge:
        return BAD_REQUEST, error(413, "RequestEntityTooLarge", too_large_message(component, max_body, length))
    except OverParseBudget as exc:
        log.info("%s: %s", endpoint, exc)
        return BAD_REQUEST, error(413, "RequestEntityTooLarge", str(exc))
    except ParseBudgetBusy as exc:
        log.warning("%s: %s", endpoint, exc)
        busy = error(503, "ServiceUnavailable", str(exc))
        return UNAVAILABLE, Reply(busy.status, busy.body, busy.content_type, (("Retry-After", "1"),))
    except Exception:
        log.exception("%s: unexpected failure", endpoint)
        return ERROR, failed
