"""The webhook's Flask app: thin routes over :mod:`webhook.review`.

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
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from kube_offload.runtime.body_limit import (
    OverParseBudget,
    ParseBudget,
    ParseBudgetBusy,
    body_length,
    read_body,
    too_large_message,
)
from kube_offload.runtime.http_metrics import NAMESPACE, HttpMetrics, exposition, state_gauge
from kube_offload.runtime.flask_probes import add_probe_routes
from kube_offload.runtime.probes import Check
from kube_offload.runtime.workers import FunctionGauge, WorkerGroup
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

BAD_REQUEST = "bad_request"
UNAVAILABLE = "unavailable"
ERROR = "error"


def _json(status: int, body: Any) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def _status(code: int, reason: str, message: str) -> Response:
    return _json(code, error_status(code, reason, message))


SYNCED_DOC = "1 once the namespace cache has synced (in every worker: the webhook is ready), else 0."


def create_app(
    settings: WebhookSettings, *, namespace_source: NamespaceSource, workers: WorkerGroup | None = None
) -> Flask:
    """The app of one process; with ``workers`` (the server's worker group) readiness and
    metrics are those of every worker of the server together."""
    app = Flask("kube-offload-webhook")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    metrics = HttpMetrics.create("webhook")
    # One per worker process: create_app runs in each worker after the fork.
    budget = ParseBudget(
        component="webhook",
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

    def answer(endpoint: str, decide: Callable[[AdmissionRequest], Decision]) -> tuple[str, Response]:
        # Everything parsed from the body lives in this frame, so it is freed when this
        # returns: before admit() gives the reservation back and another request parses.
        try:
            review = parse_review(read_body(request.environ, settings.max_body_bytes))
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

    def admit(endpoint: str, decide: Callable[[AdmissionRequest], Decision]) -> Response:
        started = time.perf_counter()
        outcome = ERROR
        try:
            try:
                with budget.reserve(body_length(request.environ)):
                    outcome, response = answer(endpoint, decide)
                return response
            except OverParseBudget as exc:
                outcome = BAD_REQUEST
                return _status(413, "RequestEntityTooLarge", str(exc))
            except ParseBudgetBusy as exc:
                outcome = UNAVAILABLE
                log.warning("%s: %s", endpoint, exc)
                busy = _status(503, "ServiceUnavailable", str(exc))
                busy.headers["Retry-After"] = "1"
                return busy
            except HTTPException:
                outcome = BAD_REQUEST  # e.g. 413 body too large: Flask answers it
                raise
            except Exception:
                outcome = ERROR
                log.exception("%s: unexpected failure", endpoint)
                return _status(
                    500, "InternalError", "the webhook failed unexpectedly; see its log"
                )
        finally:
            metrics.observe(endpoint, outcome, time.perf_counter() - started)

    @app.post("/mutate/pods")
    def mutate_pods() -> Response:
        return admit(
            "mutate_pods",
            lambda review: review_pod(
                review, source=namespace_source, scheduler_name=settings.scheduler_name
            ),
        )

    @app.post("/validate/namespaces")
    def validate_namespaces() -> Response:
        return admit("validate_namespaces", review_namespace)

    # Answered as every server of the project answers them (kube_offload/runtime/probes.py).
    add_probe_routes(
        app, ready=[Check("namespace-cache", lambda: None if ready() else "not synced yet")], exposition=metrics_text
    )

    if settings.enable_echo:

        @app.post("/echo")
        def echo() -> Response:
            # Same envelope as the admission routes (body read, metrics, JSON response)
            # minus the admission work: the benchmark's baseline.
            started = time.perf_counter()
            try:
                return Response(request.get_data(cache=False), mimetype="application/json")
            finally:
                metrics.observe("echo", "echoed", time.perf_counter() - started)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(exc: RequestEntityTooLarge) -> Response:
        return _status(
            413, "RequestEntityTooLarge",
            too_large_message("webhook", settings.max_body_bytes, request.content_length),
        )

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        return _status(code, exc.name.replace(" ", ""), exc.description or exc.name)

    app.extensions["kube_offload_metrics"] = metrics
    app.extensions["kube_offload_parse_budget"] = budget
    return app
