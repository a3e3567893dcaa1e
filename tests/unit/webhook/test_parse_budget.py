"""The parse memory budget (kube_offload/runtime/body_limit.py, ParseBudget): what a request
reserves, waiting for room, the 503 when none comes, the 413s, and how the webhook's WSGI
app answers each (through its WSGI interface, no socket: the HTTP tier is in
tests/component/test_webhook_http.py)."""

from __future__ import annotations

import threading
import time

import orjson
import pytest
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.test import Client

from kube_offload.admission import build_review
from kube_offload.cli import build_parser
from kube_offload.runtime.body_limit import (
    PARSE_AMPLIFICATION,
    OverParseBudget,
    ParseBudget,
    ParseBudgetBusy,
    body_length,
    budget_too_small,
)
from webhook.app import create_app
from webhook.namespace_cache import StaticNamespaceSource
from webhook.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET, WebhookSettings

KIB = 1024
MIB = 1024 * KIB


def budget(capacity: int = 1000, *, max_body: int = 100, wait: float = 5.0) -> ParseBudget:
    # Amplification 1 keeps the arithmetic readable; the default is PARSE_AMPLIFICATION.
    return ParseBudget(component="webhook", capacity=capacity, max_body=max_body, wait_seconds=wait, amplification=1)


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


# --- reserving ----------------------------------------------------------------------------
def test_a_request_reserves_its_length_times_the_amplification_and_gives_it_back() -> None:
    parse = ParseBudget(component="webhook", capacity=10 * MIB, max_body=MIB, wait_seconds=1)
    assert parse.amplification == PARSE_AMPLIFICATION
    with parse.reserve(3 * KIB) as amount:
        assert amount == 3 * KIB * PARSE_AMPLIFICATION == parse.in_use
        with parse.reserve(10 * KIB):
            assert parse.in_use == 13 * KIB * PARSE_AMPLIFICATION
        assert parse.in_use == 3 * KIB * PARSE_AMPLIFICATION
    assert parse.in_use == 0


def test_the_reservation_is_given_back_when_the_request_fails() -> None:
    parse = budget()
    with pytest.raises(ValueError):
        with parse.reserve(60):
            raise ValueError("the parse failed")
    assert parse.in_use == 0


def test_a_chunked_body_reserves_the_hard_cap() -> None:
    parse = budget(max_body=100)
    with parse.reserve(None) as amount:
        assert amount == 100 == parse.in_use


def test_requests_that_fit_together_do_not_wait() -> None:
    parse = budget(1000, wait=0)  # any wait would be a 503 at once
    with parse.reserve(100), parse.reserve(100):
        held = [parse.reserve(100) for _ in range(8)]
        for reservation in held:
            reservation.__enter__()
        assert parse.in_use == 1000
        for reservation in held:
            reservation.__exit__(None, None, None)
    assert parse.in_use == 0


def test_a_request_waits_for_room_and_proceeds_once_it_is_released() -> None:
    parse = budget(100)
    first = parse.reserve(80)
    first.__enter__()
    done = threading.Event()
    seen: list[int] = []

    def second() -> None:
        with parse.reserve(50):
            seen.append(parse.in_use)
        done.set()

    thread = threading.Thread(target=second)
    thread.start()
    _until(lambda: parse._waiters == 1)  # blocked: 80 + 50 > 100
    assert not done.is_set() and parse.in_use == 80
    first.__exit__(None, None, None)
    thread.join(5)
    assert done.is_set() and seen == [50] and parse.in_use == 0


def test_a_request_that_finds_no_room_in_time_is_busy_with_a_message() -> None:
    parse = budget(100, wait=0.05)
    with parse.reserve(80):
        with pytest.raises(ParseBudgetBusy) as busy:
            with parse.reserve(50):
                pytest.fail("reserved beyond the budget")
        assert parse.in_use == 80 and parse._waiters == 0
    message = str(busy.value)
    assert "of 50 bytes" in message and "80 of 100 bytes in use" in message and "0.05s" in message
    assert "retry" in message and "--parse-memory-budget" in message and "webhook.parseMemoryBudget" in message


# --- the 413s -----------------------------------------------------------------------------
def test_a_length_over_the_hard_cap_is_too_large_without_reserving() -> None:
    parse = budget(10_000, max_body=100)
    with pytest.raises(RequestEntityTooLarge):
        with parse.reserve(101):
            pytest.fail("reserved a body over the hard cap")
    assert parse.in_use == 0


def test_a_body_bigger_than_the_whole_budget_is_refused_at_once() -> None:
    parse = ParseBudget(component="webhook", capacity=10 * MIB, max_body=MIB, wait_seconds=60)
    started = time.monotonic()
    with pytest.raises(OverParseBudget) as over:
        with parse.reserve(MIB):  # 37 MiB of parsing: it would never fit, do not wait for it
            pytest.fail("reserved beyond the budget")
    assert time.monotonic() - started < 5
    message = str(over.value)
    assert f"of {MIB} bytes" in message and f"{MIB * PARSE_AMPLIFICATION} bytes" in message
    assert f"budget of {10 * MIB} bytes per worker" in message and "--parse-memory-budget" in message
    with pytest.raises(OverParseBudget, match=r"\(chunked\)"):
        with budget(10, max_body=100).reserve(None):  # reserves the hard cap: 100 > 10
            pytest.fail("reserved beyond the budget")


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"CONTENT_LENGTH": "3072"}, 3072),
        ({"CONTENT_LENGTH": "0"}, 0),
        ({"wsgi.input_terminated": True}, None),  # chunked
        ({}, 0),  # no length and an unterminated stream: no body
    ],
)
def test_body_length_reads_what_the_request_announces(environ: dict, expected: int | None) -> None:
    assert body_length(environ) == expected


def test_budget_too_small_names_both_flags() -> None:
    assert budget_too_small(component="webhook", budget=DEFAULT_PARSE_MEMORY_BUDGET, max_body=DEFAULT_MAX_BODY_BYTES) is None
    problem = budget_too_small(component="webhook", budget=64 * MIB, max_body=3 * MIB)
    assert problem and "--parse-memory-budget" in problem and "--max-body-bytes" in problem
    assert str(3 * MIB * PARSE_AMPLIFICATION) in problem


def test_the_cli_refuses_a_budget_that_cannot_parse_the_largest_body(tmp_path) -> None:
    args = build_parser().parse_args(
        ["webhook", "--parse-memory-budget", "64Mi", "--tls-cert", str(tmp_path / "none"), "--tls-key", "x"]
    )
    assert args.parse_memory_budget == 64 * MIB and args.max_body_bytes == DEFAULT_MAX_BODY_BYTES
    with pytest.raises(SystemExit) as exit_info:
        args.func(args)
    assert "--parse-memory-budget 67108864 bytes is less than" in str(exit_info.value.code)


# --- the webhook's answers ----------------------------------------------------------------
def _app(**settings):
    return create_app(WebhookSettings(**settings), namespace_source=StaticNamespaceSource(
        [{"metadata": {"name": "remote", "labels": {"kube-offload.io/enabled": "true",
                                                    "kube-offload.io/pod-placement": "Remote"}}}]))


def _review(uid: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "remote"},
           "spec": {"containers": [{"name": "app", "image": "nginx"}]}}
    return orjson.dumps(build_review(pod, uid=uid))


def test_the_webhook_answers_503_with_retry_after_while_its_budget_is_taken() -> None:
    app = _app(parse_budget_wait_seconds=0.05)
    parse: ParseBudget = app.parse_budget
    client = Client(app)
    with parse.reserve(DEFAULT_MAX_BODY_BYTES):  # one AdmissionReview at the hard cap in flight
        # ... leaves room for small ones,
        assert client.post("/mutate/pods", data=_review("small")).status_code == 200
        # ... not for a second large one.
        large = _review("large") + b" " * (2 * MIB)
        response = client.post("/mutate/pods", data=large)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    status = response.get_json()
    assert status["code"] == 503 and status["reason"] == "ServiceUnavailable"
    assert f"of {len(large)} bytes" in status["message"] and "retry" in status["message"]
    assert parse.in_use == 0
    # Once the budget is free, the same body is admitted.
    answer = client.post("/mutate/pods", data=large).get_json()
    assert answer["response"]["uid"] == "large" and answer["response"]["allowed"] is True


def test_the_webhook_answers_413_for_a_body_its_whole_budget_cannot_parse() -> None:
    client = Client(_app(parse_memory_budget=MIB))
    body = _review("over") + b" " * (64 * KIB)  # 64 KiB x 37 > 1 MiB
    response = client.post("/mutate/pods", data=body)
    assert response.status_code == 413
    status = response.get_json()
    assert status["reason"] == "RequestEntityTooLarge" and "--parse-memory-budget" in status["message"]
    assert client.post("/mutate/pods", data=_review("fits")).status_code == 200


def test_the_wait_ends_well_before_the_apiserver_gives_up_on_the_webhook() -> None:
    """The 503 must reach the apiserver: a wait as long as the registration's timeout would
    turn it into a timeout with no message."""
    from webhook.registration import DEFAULT_TIMEOUT_SECONDS
    from webhook.settings import DEFAULT_PARSE_BUDGET_WAIT_SECONDS

    assert 0 < DEFAULT_PARSE_BUDGET_WAIT_SECONDS <= DEFAULT_TIMEOUT_SECONDS / 2
