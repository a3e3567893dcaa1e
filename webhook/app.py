"""The webhook's WSGI app: thin routes over :mod:`webhook.review`, with no web framework
(:mod:`kube_offload.runtime.wsgi`: a table of paths and methods, handlers that return the
whole answer); Flask's envelope cost more than the admission (docs/performance.md,
"Webhook").

Every admission route does the same four things: read the body, parse the review, ask
the route's decision function, answer. A client's mistake is a 400 with a Status body
naming the problem; a policy that cannot be read is a 503 (the registration's
failurePolicy then decides); anything else is a logged 500, never a dead worker.
All four happen inside a reservation of the worker's parse memory budget
(:class:`~kube_offload.runtime.body_limit.ParseBudget`): a body too large for the whole
budget is a 413, and one that finds the budget taken for longer than the wait is a 503
with ``Retry-After``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import orjson
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from wsgiref.types import WSGIEnvironment

from kube_offload.runtime.body_limit import ParseBudget, body_length, read_body, too_large_message
from kube_offload.runtime.http_metrics import NAMESPACE, HttpMetrics, exposition, state_gauge
from kube_offload.runtime.probes import Check
from kube_offload.runtime.workers import FunctionGauge, WorkerGroup
from kube_offload.runtime.wsgi import (
    BAD_REQUEST,
    ERROR,
    UNAVAILABLE,
    Handler,
    Reply,
    Routes,
    WsgiApp,
    http_error,
    probe_routes,
    within_parse_budget,
)
from kube_offload.runtime import wsgi
from kube_offload.admission import (
    AdmissionRequest,
    BadRequest,
    Decision,
    error_status,
    parse_review,
    review_response,
)
from webhook.namespace_cache import NamespaceSource, NamespaceUnavailable
from webhook.review import review_namespace, review_pod
from webhook.settings import WebhookSettings

log = logging.getLogger("webhook.app")

COMPONENT = "webhook"
JSON = "application/json"


def _json(status: int, body: Any) -> Reply:
    return Reply(status, orjson.dumps(body), JSON)


def _status(code: int, reason: str, message: str) -> Reply:
    """The webhook's error answer: a metav1.Status, as the apiserver reads one."""
    return _json(code, error_status(code, reason, message))


INTERNAL_ERROR = _status(500, "InternalError", "the webhook failed unexpectedly; see its log")


def dispatch(routes: Routes, environ: WSGIEnvironment) -> Reply:
    """The answer of the route for the request's path and method (404, 405 as Status)."""
    return wsgi.dispatch(routes, environ, _status)


class WebhookApp(WsgiApp[HttpMetrics]):
    """The webhook's WSGI app (one per worker process): its errors are Status bodies."""

    def __init__(self, routes: Routes, *, metrics: HttpMetrics, parse_budget: ParseBudget) -> None:
        super().__init__(routes, component=COMPONENT, error=_status, metrics=metrics, parse_budget=parse_budget)


SYNCED_DOC = "1 once the namespace cache has synced (in every worker: the webhook is ready), else 0."


def create_app(
    settings: WebhookSettings, *, namespace_source: NamespaceSource, workers: WorkerGroup | None = None
) -> WebhookApp:
    """The app of one process; with ``workers`` (the server's worker group) readiness and
    metrics are those of every worker of the server together."""
    metrics = HttpMetrics.create(COMPONENT)
    # One per worker process: create_app runs in each worker after the fork.
    budget = ParseBudget(
        component=COMPONENT,
        capacity=settings.parse_memory_budget,
        max_body=settings.max_body_bytes,
        wait_seconds=settings.parse_budget_wait_seconds,
    )
    if workers is None:

        def ready() -> bool:
            return namespace_source.ready()

        state_gauge(
            metrics.registry, "webhook", "namespace_cache_synced", SYNCED_DOC, lambda: 1.0 if ready() else 0.0
        )

        def metrics_text() -> tuple[bytes, str]:
            return exposition(metrics.registry)

    else:

        def ready() -> bool:
            return workers.ready(namespace_source.ready)

        synced = FunctionGauge(
            f"{NAMESPACE}_webhook_namespace_cache_synced", SYNCED_DOC, lambda: 1.0 if ready() else 0.0
        )

        def metrics_text() -> tuple[bytes, str]:
            return workers.exposition([synced])

    def too_large(content_length: int | None) -> Reply:
        return _status(
            413, "RequestEntityTooLarge", too_large_message(COMPONENT, settings.max_body_bytes, content_length)
        )

    def answer(environ: WSGIEnvironment, endpoint: str, decide: Callable[[AdmissionRequest], Decision]) -> tuple[str, Reply]:
        # Everything parsed from the body lives in this frame, so it is freed when this
        # returns: before the parse budget's reservation is given back.
        try:
            review = parse_review(read_body(environ, settings.max_body_bytes))
            decision = decide(review)
        except BadRequest as exc:
            log.info("%s: bad request: %s", endpoint, exc)
            return BAD_REQUEST, _status(400, "BadRequest", str(exc))
        except NamespaceUnavailable as exc:
            return UNAVAILABLE, _status(503, "ServiceUnavailable", str(exc))
        if not decision.allowed:
            log.info(
                "%s: denied %s %s/%s: %s", endpoint, review.kind.kind,
                review.namespace, review.name, decision.message,
            )
        return decision.outcome, _json(200, review_response(review, decision))

    def admit(environ: WSGIEnvironment, endpoint: str, decide: Callable[[AdmissionRequest], Decision]) -> Reply:
        started = time.perf_counter()
        outcome = ERROR
        try:
            outcome, reply = within_parse_budget(
                environ, budget=budget, component=COMPONENT, endpoint=endpoint, max_body=settings.max_body_bytes,
                error=_status, answer=lambda: answer(environ, endpoint, decide), failed=INTERNAL_ERROR,
            )
            return reply
        finally:
            metrics.observe(endpoint, outcome, time.perf_counter() - started)

    def mutate_pods(environ: WSGIEnvironment) -> Reply:
        return admit(
            environ,
            "mutate_pods",
            lambda review: review_pod(review, source=namespace_source, scheduler_name=settings.scheduler_name),
        )

    def validate_namespaces(environ: WSGIEnvironment) -> Reply:
        return admit(environ, "validate_namespaces", review_namespace)

    routes: dict[str, dict[str, Handler]] = {
        "/mutate/pods": {"POST": mutate_pods},
        "/validate/namespaces": {"POST": validate_namespaces},
        # Answered as every server of the project answers them (kube_offload/runtime/probes.py).
        **probe_routes(
            ready=[Check("namespace-cache", lambda: None if ready() else "not synced yet")], exposition=metrics_text
        ),
    }

    if settings.enable_echo:

        def echo(environ: WSGIEnvironment) -> Reply:
            # Same envelope as the admission routes (body read, metrics, JSON response)
            # minus the admission work: the benchmark's baseline.
            started = time.perf_counter()
            try:
                return Reply(200, read_body(environ, settings.max_body_bytes), JSON)
            except RequestEntityTooLarge:
                return too_large(body_length(environ))
            except HTTPException as exc:
                return http_error(_status, exc)
            finally:
                metrics.observe("echo", "echoed", time.perf_counter() - started)

        routes["/echo"] = {"POST": echo}

    return WebhookApp(routes, metrics=metrics, parse_budget=budget)
