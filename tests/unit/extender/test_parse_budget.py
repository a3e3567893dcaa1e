"""The extender's parse memory budget (ParseBudget, kube_offload/runtime/body_limit.py) as
its app and CLI use it: a retryable 503 while the budget is taken, a 413 naming the flag
for a body the whole budget cannot parse, a CLI that refuses a budget smaller than one
body at the cap, and a wait that ends before kube-scheduler's httpTimeout."""

from __future__ import annotations

import orjson
import pytest
from werkzeug.test import Client

from extender.app import create_app
from extender.caches import StaticCaches
from extender.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET, ExtenderSettings
from kube_offload import constants as c
from kube_offload.cli import build_parser
from kube_offload.runtime.body_limit import PARSE_AMPLIFICATION, ParseBudget, budget_too_small

KIB = 1024
MIB = 1024 * 1024
VIRTUAL = f"{c.VIRTUAL_NODE_PREFIX}r1"
NAMESPACE = {"metadata": {"name": "remote", "labels": {"kube-offload.io/enabled": "true",
                                                      "kube-offload.io/pod-placement": "Remote"}}}


def _app(**settings):
    return create_app(StaticCaches(namespaces=[NAMESPACE], node_cache=False), ExtenderSettings(**settings))


def _node(name: str, virtual: bool = False) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if virtual:
        labels.update({c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: "r1"})
    return {"metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def _args(padding: int = 0) -> bytes:
    pod = {"metadata": {"name": "p", "namespace": "remote", "uid": "u"},
           "spec": {"containers": [{"name": "app", "image": "nginx"}]}}
    body = orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": [_node("worker-1"), _node(VIRTUAL, virtual=True)]}, "NodeNames": None})
    return body + b" " * padding  # trailing whitespace: valid JSON, counted by Content-Length


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_the_extender_answers_503_with_retry_after_while_its_budget_is_taken(verb: str) -> None:
    app = _app(parse_budget_wait_seconds=0.05)
    budget: ParseBudget = app.parse_budget
    client = Client(app)
    with budget.reserve(DEFAULT_MAX_BODY_BYTES - 2 * MIB):  # a large call in flight ...
        # ... leaves room for small ones,
        assert client.post(f"/{verb}", data=_args()).status_code == 200
        # ... not for a second large one.
        large = _args(4 * MIB)
        response = client.post(f"/{verb}", data=large)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    message = response.get_json()["Error"]
    assert f"of {len(large)} bytes" in message and "retry" in message and "--parse-memory-budget" in message
    assert budget.in_use == 0
    metrics = client.get("/metrics").get_data(as_text=True)
    assert f'kube_offload_extender_requests_total{{endpoint="{verb}",outcome="unavailable"}} 1.0' in metrics
    # Once the budget is free, the same body is answered.
    answer = client.post(f"/{verb}", data=large)
    assert answer.status_code == 200, answer.get_data(as_text=True)


def test_filter_keeps_the_node_of_a_large_body_once_it_fits() -> None:
    client = Client(_app())
    answer = client.post("/filter", data=_args(DEFAULT_MAX_BODY_BYTES - 64 * KIB)).get_json()
    assert answer["Error"] == "" and [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == [VIRTUAL]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["worker-1"]  # the namespace is Remote


def test_the_extender_answers_413_for_a_body_its_whole_budget_cannot_parse() -> None:
    client = Client(_app(parse_memory_budget=MIB))
    response = client.post("/filter", data=_args(64 * KIB))  # 64 KiB x 37 > 1 MiB
    assert response.status_code == 413
    message = response.get_json()["Error"]
    assert "--parse-memory-budget" in message and "extender.parseMemoryBudget" in message
    assert client.post("/filter", data=_args()).status_code == 200


def test_a_body_over_the_cap_is_413_naming_max_body_bytes() -> None:
    client = Client(_app(max_body_bytes=64 * KIB))
    response = client.post("/filter", data=_args(64 * KIB))
    assert response.status_code == 413
    message = response.get_json()["Error"]
    assert "--max-body-bytes" in message and "extender.maxBodyBytes" in message
    assert _app().parse_budget.in_use == 0


def test_budget_too_small_for_the_extender_cap() -> None:
    assert budget_too_small(component="extender", budget=DEFAULT_PARSE_MEMORY_BUDGET, max_body=DEFAULT_MAX_BODY_BYTES) is None
    problem = budget_too_small(component="extender", budget=DEFAULT_PARSE_MEMORY_BUDGET, max_body=DEFAULT_MAX_BODY_BYTES + MIB)
    assert problem and "extender.parseMemoryBudget" in problem
    assert str((DEFAULT_MAX_BODY_BYTES + MIB) * PARSE_AMPLIFICATION) in problem


def test_the_cli_refuses_a_budget_that_cannot_parse_the_largest_body() -> None:
    args = build_parser().parse_args(["extender", "--parse-memory-budget", "64Mi"])
    assert args.parse_memory_budget == 64 * MIB and args.max_body_bytes == DEFAULT_MAX_BODY_BYTES
    with pytest.raises(SystemExit) as exit_info:
        args.func(args)
    assert "kube-offload extender: --parse-memory-budget 67108864 bytes is less than" in str(exit_info.value.code)


def test_the_wait_ends_well_before_kube_scheduler_gives_up_on_the_extender() -> None:
    """The 503 must reach kube-scheduler: a wait as long as its httpTimeout would turn it
    into a timeout."""
    from extender.registration import ExtenderRegistration
    from extender.settings import DEFAULT_PARSE_BUDGET_WAIT_SECONDS

    timeout = ExtenderRegistration(url="http://127.0.0.1:1").http_timeout
    assert timeout == "5s" and 0 < DEFAULT_PARSE_BUDGET_WAIT_SECONDS <= 5 / 2
