"""The pure parts of observability (kube_offload/runtime/metrics.py, kube_offload/runtime/health.py)
and the controller's figures; the health port over a real socket. The running vkubelet's
and enforcer's endpoints are checked in tests/e2e/test_observability.py."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kube_offload.runtime import health
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.controller import Controller, PermanentError, Requeue
from kube_offload.runtime.kube import ApiError


def sample(name: str, **labels: str) -> float:
    return rm.REGISTRY.get_sample_value(name, labels) or 0.0


# --- API verbs --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "url", "verb"),
    [
        ("GET", "https://h/api/v1/pods", "LIST"),
        ("GET", "https://h/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true", "WATCH"),
        ("GET", "https://h/api/v1/pods?watch=1", "WATCH"),
        ("GET", "https://h/api/v1/pods?watch=false", "LIST"),
        ("GET", "https://h/api/v1/namespaces", "LIST"),
        ("GET", "https://h/api/v1/namespaces/demo", "GET"),
        ("GET", "https://h/api/v1/namespaces/demo/pods", "LIST"),
        ("GET", "https://h/api/v1/namespaces/demo/pods/p", "GET"),
        ("GET", "https://h/api/v1/namespaces/demo/pods/p/log?follow=true", "GET"),
        ("GET", "https://h/apis/kube-offload.io/v1alpha1/namespaces/t/shadowpods", "LIST"),
        ("GET", "https://h/apis/kube-offload.io/v1alpha1/consumers/local", "GET"),
        ("POST", "https://h/apis/kube-offload.io/v1alpha1/namespaces/t/shadowpods", "CREATE"),
        ("POST", "https://h/api/v1/namespaces/demo/serviceaccounts/default/token", "CREATE"),
        ("PUT", "https://h/api/v1/namespaces/demo/configmaps/c", "UPDATE"),
        ("PATCH", "https://h/api/v1/nodes/kube-offload-r1/status", "PATCH"),
        ("DELETE", "https://h/api/v1/namespaces/demo/pods/p", "DELETE"),
        ("DELETE", "https://h/api/v1/namespaces/demo/pods", "DELETECOLLECTION"),
        ("GET", "https://h/version", "GET"),
        ("GET", "https://h/apis", "GET"),
        ("get", "https://h/api/v1/nodes", "LIST"),
    ],
)
def test_request_verb_names_requests_as_the_api_server_does(method: str, url: str, verb: str) -> None:
    assert rm.request_verb(method, url) == verb


class FakeResponse:
    """An urllib3 response as Kube reads it."""

    def __init__(self, status: int, body: bytes = b"{}") -> None:
        self.status = status
        self.reason = "Not Found" if status == 404 else "OK"
        self._body = body

    def read(self) -> bytes:
        return self._body

    def release_conn(self) -> None:
        pass


class FakePool:
    """Stands for the connection pool of kubernetes' ApiClient, the one thing Kube sends through."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str]] = []

    def request(self, method, url, **_kwargs):
        self.sent.append((method, url))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_instrumented_client_counts_calls_by_cluster_verb_and_code() -> None:
    from kubernetes import client

    from kube_offload.runtime import kinds
    from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube

    cluster = "test-instrumented"
    api = client.ApiClient(client.Configuration(host="https://h"))
    pool = FakePool([FakeResponse(200, b'{"items": []}'), FakeResponse(404), ConnectionRefusedError("refused")])
    api.rest_client.pool_manager = pool
    rm.instrument_api_client(api, cluster)
    rm.instrument_api_client(api, cluster)  # idempotent: one label, one count per call
    kube = Kube(api, retry=NO_RETRY)

    assert kube.request("GET", kinds.PODS.path(namespace="d")) == {"items": []}
    with pytest.raises(ApiError) as missing:
        kube.get(kinds.PODS, "p", namespace="d")
    assert missing.value.status == 404
    with pytest.raises(ApiError) as refused:
        kube.create(kinds.PODS, {"metadata": {"name": "p"}}, namespace="d")
    assert refused.value.status == 0

    assert pool.sent == [("GET", "https://h/api/v1/namespaces/d/pods"), ("GET", "https://h/api/v1/namespaces/d/pods/p"),
                         ("POST", "https://h/api/v1/namespaces/d/pods")]
    total = "kube_offload_api_requests_total"
    assert sample(total, cluster=cluster, verb="LIST", code="200") == 1
    assert sample(total, cluster=cluster, verb="GET", code="404") == 1
    assert sample(total, cluster=cluster, verb="CREATE", code=rm.CODE_ERROR) == 1
    assert sample("kube_offload_api_request_duration_seconds_count", cluster=cluster, verb="LIST") == 1


# --- phases -----------------------------------------------------------------------------------
def test_count_by_phase_reports_every_phase() -> None:
    pods = [
        {"status": {"phase": "Running"}},
        {"status": {"phase": "Running"}},
        {"status": {}},  # not yet given a phase: Pending, as the API defaults it
        {},
        {"status": {"phase": "Succeeded"}},
        {"status": {"phase": "Evicted?"}},  # not a phase: Unknown
    ]
    assert rm.count_by_phase(pods) == {"Pending": 2, "Running": 2, "Succeeded": 1, "Failed": 0, "Unknown": 1}
    assert rm.count_by_phase([]) == dict.fromkeys(rm.POD_PHASES, 0)


# --- work queues --------------------------------------------------------------------------------
def test_queue_figures_add_up_per_name_and_keep_the_longest_running() -> None:
    merged = rm.queue_figures([
        ("pods", {"depth": 2, "delayed": 1, "in_flight": 1, "longest_running": 3.0}),
        ("pods", {"depth": 1, "delayed": 0, "in_flight": 2, "longest_running": 9.0}),
        ("reflect-secrets", {"depth": 0, "delayed": 4, "in_flight": 0, "longest_running": 0.0}),
    ])
    assert merged == {
        "pods": {"depth": 3, "delayed": 1, "in_flight": 3, "longest_running": 9.0},
        "reflect-secrets": {"depth": 0, "delayed": 4, "in_flight": 0, "longest_running": 0.0},
    }


def test_controller_reports_its_queue_through_the_registry() -> None:
    controller = Controller(name="test-queue-figures", reconcile=lambda key: None)
    controller.enqueue("a")
    controller.enqueue("b")
    controller.enqueue_after("c", 60)
    assert sample("kube_offload_workqueue_depth", controller="test-queue-figures") == 2
    assert sample("kube_offload_workqueue_delayed", controller="test-queue-figures") == 1
    assert sample("kube_offload_workqueue_in_flight", controller="test-queue-figures") == 0


# --- reconcile outcomes ---------------------------------------------------------------------------
def test_reconcile_outcomes_are_counted_per_controller() -> None:
    name = "test-outcomes"
    results = {
        "ok": None,
        "later": Requeue(30),
        "bad": PermanentError("no"),
        "flaky": ApiError(503, "ServiceUnavailable", "try again"),
    }

    def reconcile(key: str) -> None:
        result = results[key]
        if isinstance(result, Exception):
            raise result

    controller = Controller(name=name, reconcile=reconcile, max_retries=1)
    for key in ("ok", "later", "bad", "flaky", "flaky"):  # the second failure exhausts max_retries=1
        controller.process_one(key)
    outcomes = {o: sample("kube_offload_reconciles_total", controller=name, outcome=o) for o in rm.OUTCOMES}
    assert outcomes == {"success": 1, "requeue": 1, "permanent_error": 1, "error": 1, "dropped": 1}
    assert sample("kube_offload_reconcile_duration_seconds_count", controller=name) == 5


def test_a_stuck_reconcile_shows_in_the_figures_and_fails_liveness() -> None:
    release = threading.Event()
    entered = threading.Event()

    def reconcile(_key: str) -> None:
        entered.set()
        release.wait(10)

    controller = Controller(name="test-stuck", reconcile=reconcile, workers=1)
    controller.enqueue("k")
    controller.start()
    try:
        assert entered.wait(5)
        time.sleep(0.05)
        assert controller.queue_figures()["in_flight"] == 1
        assert sample("kube_offload_workqueue_longest_running_seconds", controller="test-stuck") > 0
        assert controller.problem(stuck_after=3600) is None
        problem = controller.problem(stuck_after=0.01)
        assert problem and "test-stuck" in problem and "running for" in problem
        verdict = health.evaluate([health.controllers_check(stuck_after=0.01)], endpoint="/healthz")
        assert not verdict.ok and "[-]controllers failed" in verdict.text
    finally:
        release.set()
        controller.stop()
    deadline = time.monotonic() + 5
    while controller.queue_figures()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert controller.problem(stuck_after=0.01) is None


# --- health verdicts ----------------------------------------------------------------------------
def test_evaluate_answers_ok_or_names_what_fails() -> None:
    passing = health.Check("informers", lambda: None)
    failing = health.Check("remote-cluster", lambda: "no answer")

    def broken() -> str | None:
        raise RuntimeError("boom")

    assert health.evaluate([passing], endpoint="/readyz") == health.Verdict(True, "ok")
    assert health.evaluate([passing], endpoint="/readyz", verbose=True) == health.Verdict(
        True, "[+]informers ok\nreadyz check passed")
    verdict = health.evaluate([passing, failing, health.Check("broken", broken)], endpoint="/readyz")
    assert not verdict.ok
    assert verdict.text.splitlines() == [
        "[+]informers ok",
        "[-]remote-cluster failed: no answer",
        "[-]broken failed: the check raised RuntimeError: boom",
        "readyz check failed",
    ]


def test_caches_check_lists_what_has_not_synced() -> None:
    class Cache:
        def __init__(self, name: str, synced: bool) -> None:
            self.name, self.synced = name, synced

        def has_synced(self) -> bool:
            return self.synced

    caches = [Cache("local-pods", True), Cache("remote-pods", False), Cache("remote-shadowpods", False)]
    check = health.caches_check(lambda: caches)
    assert check.run() == "not synced yet: remote-pods, remote-shadowpods"
    for cache in caches:
        cache.synced = True
    assert check.run() is None


# --- exported names -----------------------------------------------------------------------------
def test_exported_names_include_every_series_of_every_type() -> None:
    registry = CollectorRegistry()
    Counter("things", "d", ["a"], namespace="x", registry=registry)
    Histogram("wait_seconds", "d", namespace="x", registry=registry)
    Gauge("level", "d", namespace="x", registry=registry)
    assert rm.exported_names(registry) == {
        "x_things_total", "x_things_created",
        "x_wait_seconds_bucket", "x_wait_seconds_sum", "x_wait_seconds_count", "x_wait_seconds_created",
        "x_level",
    }


# --- the health port, over a real socket --------------------------------------------------------
def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_health_server_serves_probes_and_metrics() -> None:
    ready = {"value": False}
    registry = CollectorRegistry()
    Gauge("probe_test_level", "d", registry=registry).set(7)
    server = health.HealthServer(
        "127.0.0.1:0",
        live=[health.Check("loops", lambda: None)],
        ready=[health.Check("informers", lambda: None if ready["value"] else "not synced yet: local-pods")],
        registries=[rm.REGISTRY, registry],
    )
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{base}/healthz")[0::2] == (200, "ok\n")
        status, _, body = get(f"{base}/readyz")
        assert (status, body) == (503, "[-]informers failed: not synced yet: local-pods\nreadyz check failed\n")
        ready["value"] = True
        assert get(f"{base}/readyz")[0::2] == (200, "ok\n")
        assert get(f"{base}/readyz?verbose")[2] == "[+]informers ok\nreadyz check passed\n"
        status, content_type, body = get(f"{base}/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        assert "probe_test_level 7.0" in body
        assert "# TYPE kube_offload_reconciles_total counter" in body
        status, _, body = get(f"{base}/nope")
        assert status == 404 and "/healthz" in body
        request = urllib.request.Request(f"{base}/healthz", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405
    finally:
        server.stop()


def test_health_server_refuses_a_bad_or_taken_address_naming_the_flag() -> None:
    with pytest.raises(health.HealthSetupError, match="--health-bind: 'localhost' is not HOST:PORT"):
        health.HealthServer("localhost", live=[], ready=[])
    first = health.HealthServer("127.0.0.1:0", live=[], ready=[])
    try:
        with pytest.raises(health.HealthSetupError, match=f"--health-bind: cannot listen on 127.0.0.1:{first.port}"):
            health.HealthServer(f"127.0.0.1:{first.port}", live=[], ready=[])
    finally:
        first.stop()
