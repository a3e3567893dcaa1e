"""The webhook's WSGI app without a socket (werkzeug's test client): routing by path and
method, the probes, the Status bodies of what is not an admission, and the 500 that an
unexpected failure becomes. The admissions themselves: tests/component/test_webhook_http.py."""

from __future__ import annotations

import io
import sys

import orjson
import pytest
from werkzeug.test import Client

from kube_offload.admission import build_review
from kube_offload.runtime.wsgi import Reply, send
from webhook.app import WebhookApp, create_app, dispatch
from webhook.namespace_cache import StaticNamespaceSource
from webhook.settings import WebhookSettings

REMOTE = {"metadata": {"name": "remote", "labels": {"kube-offload.io/enabled": "true",
                                                    "kube-offload.io/pod-placement": "Remote"}}}


def _app(**settings) -> WebhookApp:
    return create_app(WebhookSettings(**settings), namespace_source=StaticNamespaceSource([REMOTE]))


def _review() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "remote"},
           "spec": {"containers": [{"name": "app", "image": "nginx"}]}}
    return orjson.dumps(build_review(pod, uid="u1"))


def test_an_admission_is_answered_as_json() -> None:
    response = Client(_app()).post("/mutate/pods?timeout=10s", data=_review())
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/json"
    assert response.headers["Content-Length"] == str(len(response.data))
    answer = response.get_json()["response"]
    assert answer["uid"] == "u1" and answer["patchType"] == "JSONPatch"


@pytest.mark.parametrize(("method", "path", "code", "reason"), [
    ("GET", "/mutate/pods", 405, "MethodNotAllowed"),
    ("OPTIONS", "/validate/namespaces", 405, "MethodNotAllowed"),
    ("POST", "/healthz", 405, "MethodNotAllowed"),
    ("POST", "/nowhere", 404, "NotFound"),
    ("POST", "/mutate/pods/", 404, "NotFound"),
    ("POST", "/echo", 404, "NotFound"),  # only with --enable-echo
])
def test_other_paths_and_methods_are_a_status(method: str, path: str, code: int, reason: str) -> None:
    response = Client(_app()).open(path, method=method, data=b"{}")
    assert response.status_code == code
    status = response.get_json()
    assert status["kind"] == "Status" and status["code"] == code and status["reason"] == reason
    if code == 405:
        assert response.headers["Allow"] in ("POST", "GET, HEAD")


def test_probes_answer_get_and_head() -> None:
    client = Client(_app())
    assert client.get("/healthz").text == "ok\n"
    assert client.get("/readyz?verbose").text == "[+]namespace-cache ok\nreadyz check passed\n"
    head = client.head("/readyz")
    assert head.status_code == 200 and head.headers["Content-Length"] == "3"
    client.post("/mutate/pods", data=_review())
    metrics = client.get("/metrics").text
    assert 'kube_offload_webhook_requests_total{endpoint="mutate_pods",outcome="patched"} 1.0' in metrics
    assert "kube_offload_webhook_namespace_cache_synced 1.0" in metrics


def test_readyz_is_503_before_the_cache_syncs() -> None:
    class Unsynced(StaticNamespaceSource):
        def ready(self) -> bool:
            return False

    app = create_app(WebhookSettings(), namespace_source=Unsynced([]))
    response = Client(app).get("/readyz")
    assert response.status_code == 503 and "not synced" in response.text


def test_echo_sends_the_body_back_and_refuses_one_over_the_limit() -> None:
    client = Client(_app(enable_echo=True, max_body_bytes=1024, parse_memory_budget=1 << 20))
    assert client.post("/echo", data=b'{"a": 1}').data == b'{"a": 1}'
    response = client.post("/echo", data=b" " * 1025)
    assert response.status_code == 413 and "of 1025 bytes" in response.get_json()["message"]


def _environ(content_length: str, body: bytes = b"") -> dict:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/mutate/pods", "CONTENT_LENGTH": content_length,
            "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr}


def test_a_content_length_that_is_no_number_is_a_400() -> None:
    app = _app()
    reply = dispatch(app.routes, _environ("twelve"))
    assert reply.status == 400
    assert orjson.loads(reply.body)["message"] == "Content-Length 'twelve' is not a number of bytes"
    assert app.metrics.requests.labels("mutate_pods", "bad_request")._value.get() == 1


def test_an_unexpected_failure_is_a_logged_500_counted_as_error(monkeypatch) -> None:
    import webhook.app

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(webhook.app, "review_pod", broken)
    app = _app()
    response = Client(app).post("/mutate/pods", data=_review())
    assert response.status_code == 500 and response.get_json()["reason"] == "InternalError"
    assert app.metrics.requests.labels("mutate_pods", "error")._value.get() == 1


def test_a_route_that_raises_is_a_500_not_a_dead_worker() -> None:
    def broken(environ) -> Reply:
        raise RuntimeError("boom")

    app = WebhookApp({"/x": {"GET": broken}}, metrics=_app().metrics, parse_budget=_app().parse_budget)
    response = Client(app).get("/x")
    assert response.status_code == 500 and response.get_json()["code"] == 500


def test_send_gives_wsgi_the_status_line_and_the_length() -> None:
    started: list = []
    body = send(lambda status, headers, exc_info=None: started.append((status, headers)),
                Reply(503, b"busy", "text/plain", (("Retry-After", "1"),)))
    assert list(body) == [b"busy"]
    assert started == [("503 Service Unavailable",
                        [("Content-Type", "text/plain"), ("Content-Length", "4"), ("Retry-After", "1")])]
