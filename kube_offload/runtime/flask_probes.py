"""/healthz, /readyz and /metrics on a Flask app (the extender's; the webhook's
WSGI app has :func:`kube_offload.runtime.wsgi.probe_routes`), answered
by :func:`kube_offload.runtime.probes.probe_answer` like every other server of ours."""

from __future__ import annotations

from typing import Callable, Sequence

from flask import Flask, Response, request

from kube_offload.runtime.probes import HEALTHZ, METRICS, READYZ, Check, probe_answer


def add_probe_routes(app: Flask, *, ready: Sequence[Check], exposition: Callable[[], tuple[bytes, str]]) -> None:
    """Route the three probe paths of ``app`` (GET only; liveness has no check of its own:
    a process that answers is alive)."""

    @app.get(HEALTHZ, endpoint="healthz")
    @app.get(READYZ, endpoint="readyz")
    @app.get(METRICS, endpoint="metrics_route")
    def probe() -> Response:
        found = probe_answer(request.path, request.query_string.decode(), live=[], ready=ready, exposition=exposition)
        assert found is not None  # only the probe paths are routed here
        return Response(found.body, status=found.status, content_type=found.content_type)
