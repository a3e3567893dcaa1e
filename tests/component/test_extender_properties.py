"""Property tests over real HTTP: whatever kube-scheduler (or anyone) posts, the extender
answers either a well-formed ExtenderFilterResult / HostPriorityList or a 400 with a
message; never a 5xx, never a dropped connection."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterator

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_offload import constants as c
from kube_offload.capacity import encode_remote_capacity

from extender.offline import running_server

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
NAMESPACES = [
    {"metadata": {"name": "demo", "labels": {c.LABEL_ENABLED: "true"},
                  "annotations": {c.ANNOTATION_CLUSTER_SELECTOR: "region in (eu,us)"}}},
    {"metadata": {"name": "remote", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Remote"}}},
    {"metadata": {"name": "local", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Local"}}},
    {"metadata": {"name": "broken", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Both"}}},
    {"metadata": {"name": "plain"}},
]
SNAPSHOT_NODES = [
    {"metadata": {"name": "worker-1", "labels": {}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "kube-offload-eu", "labels": {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, "region": "eu"}},
     "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
]

settings.register_profile(
    "extender-http",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("extender-properties") / "snapshot.json"
    path.write_text(json.dumps({"nodes": SNAPSHOT_NODES, "namespaces": NAMESPACES}))
    with running_server(str(path), extra_args=("--strategy", "most-free-remote")) as url:
        yield url


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


# --- strategies ------------------------------------------------------------------------------
json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
any_json = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
# Mostly valid quantities, some almost valid, some garbage.
quantities = st.one_of(
    st.sampled_from(["0", "1", "500m", "1.5", "2Gi", "128Mi", "1e3", "1E", "0.1m", "3Ki", "-1", "1e999999"]),
    st.from_regex(r"[+-]?[0-9]{0,4}(\.[0-9]{0,3})?(m|k|Ki|Mi|Gi|e[0-9]|E|[a-z])?", fullmatch=True),
    st.integers(-(10**30), 10**30),
    any_json,
)
resource_names = st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", ""])
resource_lists = st.dictionaries(resource_names, quantities, max_size=3) | any_json


def maybe(strategy: st.SearchStrategy, odds: int = 10) -> st.SearchStrategy:
    """Mostly the value; one time in ``odds`` null or any JSON at all, so that most
    requests reach the core and some break at each level."""
    return st.integers(1, odds).flatmap(lambda n: strategy if n > 1 else st.none() | any_json)


containers = st.fixed_dictionaries(
    {"name": st.text(max_size=5)},
    optional={
        "resources": maybe(st.fixed_dictionaries({}, optional={"requests": resource_lists})),
        "restartPolicy": st.sampled_from(["Always", "Never", None]),
    },
)
pods = st.fixed_dictionaries(
    {"metadata": maybe(st.fixed_dictionaries({"namespace": maybe(st.sampled_from([n["metadata"]["name"] for n in NAMESPACES] + ["other"]))},
                                             optional={"name": maybe(st.text(max_size=8))}))},
    optional={
        "spec": maybe(st.fixed_dictionaries({}, optional={
            "containers": maybe(st.lists(maybe(containers), max_size=3)),
            "initContainers": maybe(st.lists(maybe(containers), max_size=3)),
            "overhead": resource_lists,
            "resources": maybe(st.fixed_dictionaries({}, optional={"requests": resource_lists})),
        })),
    },
)
good_capacity = st.builds(
    lambda cpu, age: encode_remote_capacity(
        {"r": {"cpu": cpu, "pods": 10_000}}, updated=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=age)
    ),
    st.integers(0, 10**6),
    st.integers(0, 1000),
)
capacity_texts = st.one_of(good_capacity, st.text(max_size=30), any_json.map(json.dumps))
labels = st.dictionaries(
    st.sampled_from([c.LABEL_TYPE, c.LABEL_CLUSTER_ID, "region", "x"]),
    st.sampled_from([c.TYPE_VIRTUAL_NODE, "eu", "us", ""]) | json_scalars,
    max_size=3,
)
nodes = st.fixed_dictionaries(
    {"metadata": maybe(st.fixed_dictionaries(
        {"name": maybe(st.sampled_from(["worker-1", "kube-offload-eu", "n1", "n2", ""]))},
        optional={"labels": maybe(labels),
                  "annotations": maybe(st.dictionaries(st.just(c.ANNOTATION_REMOTE_CAPACITY), capacity_texts | json_scalars, max_size=1))},
    ))},
    optional={"status": maybe(st.fixed_dictionaries({}, optional={
        "conditions": maybe(st.lists(maybe(st.fixed_dictionaries({"type": maybe(st.just("Ready")),
                                                                   "status": maybe(st.sampled_from(["True", "False"]))})),
                                     max_size=2)),
        "allocatable": resource_lists,
    }))},
)
node_lists = st.fixed_dictionaries(
    {"metadata": st.just({})}, optional={"items": maybe(st.lists(maybe(nodes, odds=30), min_size=1, max_size=4))}
)
node_names = st.lists(maybe(st.sampled_from(["worker-1", "kube-offload-eu", "ghost"]), odds=30), min_size=1, max_size=4)
extender_args = st.one_of(
    # as kube-scheduler sends them, in either mode...
    st.fixed_dictionaries({"Pod": maybe(pods), "Nodes": maybe(node_lists), "NodeNames": st.none()}),
    st.fixed_dictionaries({"Pod": maybe(pods), "Nodes": st.none(), "NodeNames": maybe(node_names)}),
    # ...and any combination of the keys.
    st.fixed_dictionaries({}, optional={"Pod": maybe(pods), "Nodes": maybe(node_lists), "NodeNames": maybe(node_names)}),
)
# Well-formed ExtenderArgs with random content: these must all be answered with a 200.
valid_quantities = st.sampled_from(["0", "1", "250m", "1.5", "2Gi", "128Mi", "1e3", "3Ki", "100"])
valid_requests = st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]), valid_quantities, max_size=3)
valid_containers = st.lists(
    st.fixed_dictionaries({"name": st.just("c"), "resources": st.fixed_dictionaries({"requests": valid_requests})},
                          optional={"restartPolicy": st.just("Always")}),
    max_size=2,
)
valid_pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.just("p"),
                                       "namespace": st.sampled_from([n["metadata"]["name"] for n in NAMESPACES] + ["other"])}),
    "spec": st.fixed_dictionaries({"containers": valid_containers}, optional={"initContainers": valid_containers}),
})
valid_nodes = st.builds(
    lambda name, virtual, region, ready, capacity: {
        "metadata": {
            "name": name,
            "labels": {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, "region": region} if virtual else {"region": region},
            "annotations": {} if capacity is None else {c.ANNOTATION_REMOTE_CAPACITY: capacity},
        },
        "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {"cpu": "2", "memory": "1Gi"}},
    },
    st.sampled_from(["worker-1", "kube-offload-eu", "n1", "n2", "n3"]),
    st.booleans(),
    st.sampled_from(["eu", "us", "ap"]),
    st.sampled_from(["True", "False", "Unknown"]),
    st.none() | capacity_texts.filter(lambda t: isinstance(t, str)),
)
valid_args = st.one_of(
    st.builds(lambda pod, items: {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None},
              valid_pods, st.lists(valid_nodes, max_size=6, unique_by=lambda n: n["metadata"]["name"])),
    st.builds(lambda pod, names: {"Pod": pod, "Nodes": None, "NodeNames": names},
              valid_pods, st.lists(st.sampled_from(["worker-1", "kube-offload-eu", "ghost"]), max_size=3, unique=True)),
)

bodies = st.one_of(
    extender_args.map(lambda d: json.dumps(d).encode()),
    any_json.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
)


# --- checks ----------------------------------------------------------------------------------
def check_answer(verb: str, answer: requests.Response) -> None:
    assert answer.status_code in (200, 400), (answer.status_code, answer.text[:500])
    body: Any = answer.json()
    if answer.status_code == 400:
        assert isinstance(body, dict) and isinstance(body.get("Error"), str) and body["Error"]
        return
    if verb == "filter":
        assert set(body) == FILTER_KEYS
        assert body["Error"] == ""
        assert (body["Nodes"] is None) != (body["NodeNames"] is None)
        for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
            assert all(isinstance(k, str) and isinstance(v, str) and v for k, v in body[key].items())
    else:
        assert isinstance(body, list)
        for entry in body:
            assert set(entry) == {"Host", "Score"}
            assert isinstance(entry["Host"], str) and isinstance(entry["Score"], int)
            assert 0 <= entry["Score"] <= 10


def check_filter_partition(request: dict, answer: dict) -> None:
    """Every candidate is either kept or failed, exactly once."""
    if request.get("NodeNames") is not None:
        candidates = request["NodeNames"]
        kept = answer["NodeNames"]
    else:
        candidates = [n["metadata"]["name"] for n in request["Nodes"].get("items") or []]
        kept = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    failed = set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"])
    assert not (set(kept) & failed)
    assert set(kept) | failed == set(candidates)


# --- properties ------------------------------------------------------------------------------
@settings(settings.get_profile("extender-http"))
@given(body=bodies, verb=st.sampled_from(["filter", "prioritize"]))
def test_never_a_5xx(server: str, session: requests.Session, body: bytes, verb: str) -> None:
    answer = session.post(f"{server}/{verb}", data=body, headers={"Content-Type": "application/json"}, timeout=10)
    check_answer(verb, answer)


@settings(settings.get_profile("extender-http"))
@given(args=extender_args)
def test_filter_answers_are_consistent(server: str, session: requests.Session, args: dict) -> None:
    answer = session.post(f"{server}/filter", data=json.dumps(args), timeout=10)
    check_answer("filter", answer)
    if answer.status_code == 200:
        check_filter_partition(args, answer.json())


@settings(settings.get_profile("extender-http"))
@given(args=valid_args, verb=st.sampled_from(["filter", "prioritize"]))
def test_well_formed_args_are_always_answered(server: str, session: requests.Session, args: dict, verb: str) -> None:
    answer = session.post(f"{server}/{verb}", data=json.dumps(args), timeout=10)
    assert answer.status_code == 200, answer.text[:500]
    check_answer(verb, answer)
    candidates = args["NodeNames"] if args["NodeNames"] is not None else [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    if verb == "filter":
        check_filter_partition(args, answer.json())
    else:
        assert [entry["Host"] for entry in answer.json()] == candidates
