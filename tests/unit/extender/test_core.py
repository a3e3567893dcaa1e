"""The extender's decisions (core), its wire format and its scheduler registration, as tables."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload import handed_back as handback
from kube_offload.capacity import encode_remote_capacity
from kube_offload.policy import policy_from_namespace
from kube_offload.resources import parse_quantity as q

from extender import registration, wire
from kube_offload import node_filter as core
from extender.caches import StaticCaches, evaluate_policy

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
FRESH = NOW - timedelta(seconds=30)
STALE = NOW - timedelta(seconds=core.DEFAULT_CAPACITY_MAX_AGE + 1)

BIG = encode_remote_capacity(
    {"r1": {"cpu": q("8"), "memory": q("32Gi"), "pods": q("110")}, "r2": {"cpu": q("2"), "memory": q("4Gi"), "pods": q("110")}},
    updated=FRESH,
)
SMALL = encode_remote_capacity({"tiny": {"cpu": q("500m"), "memory": q("512Mi"), "pods": q("10")}}, updated=FRESH)
OLD = encode_remote_capacity({"tiny": {"cpu": q("500m"), "pods": q("10")}}, updated=STALE)


def node(name: str, *, virtual: bool = False, ready: bool = True, region: str = "eu-west", capacity: str | None = None,
         allocatable: dict | None = None) -> dict:
    labels = {c.LABEL_HOSTNAME: name, "kubernetes.io/os": "linux"}
    annotations = {"node.alpha.kubernetes.io/ttl": "0"}
    if virtual:
        labels.update({c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: name.removeprefix(c.VIRTUAL_NODE_PREFIX),
                       "topology.kubernetes.io/region": region})
        if capacity is not None:
            annotations[c.ANNOTATION_REMOTE_CAPACITY] = capacity
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations, "resourceVersion": "1"},
        "spec": {"taints": [{"key": c.TAINT_KEY, "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}]} if virtual else {},
        "status": {
            "allocatable": allocatable or {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "Unknown"},
            ],
        },
    }


NODES = {
    "physical": node("worker-1"),
    "virtual": node("kube-offload-eu1", virtual=True, capacity=BIG),
    "not-ready": node("kube-offload-eu2", virtual=True, ready=False, capacity=BIG),
    "selector-mismatch": node("kube-offload-us1", virtual=True, region="us-east", capacity=BIG),
    "no-fit": node("kube-offload-eu3", virtual=True, capacity=SMALL),
    "missing-annotation": node("kube-offload-eu4", virtual=True),
    "stale-annotation": node("kube-offload-eu5", virtual=True, capacity=OLD),
    "invalid-annotation": node("kube-offload-eu6", virtual=True, capacity='{"v":1}'),
}


def namespace(name: str = "demo", *, enabled: bool = True, placement: str | None = None,
              selector: str | None = "topology.kubernetes.io/region=eu-west") -> dict:
    labels = {"kubernetes.io/metadata.name": name}
    if enabled:
        labels[c.LABEL_ENABLED] = c.ENABLED_VALUE
    if placement:
        labels[c.LABEL_POD_PLACEMENT] = placement
    annotations = {c.ANNOTATION_CLUSTER_SELECTOR: selector} if selector else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations, "resourceVersion": "7"}}


def pod(cpu: str = "1", memory: str = "1Gi", namespace_name: str = "demo") -> dict:
    return {
        "metadata": {"name": "web-0", "namespace": namespace_name, "uid": "u-1"},
        "spec": {
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            "tolerations": [{"key": c.TAINT_KEY, "operator": "Exists", "effect": c.TAINT_EFFECT}],
        },
        "status": {"phase": "Pending"},
    }


PASS = "pass"
# (node case) -> expected outcome per placement: PASS, or the failure reason.
TABLE = {
    "physical": {c.PLACEMENT_LOCAL: PASS, c.PLACEMENT_REMOTE: core.REASON_PLACEMENT, c.PLACEMENT_LOCAL_AND_REMOTE: PASS},
    "virtual": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: PASS, c.PLACEMENT_LOCAL_AND_REMOTE: PASS},
    "not-ready": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: core.REASON_NOT_READY,
                  c.PLACEMENT_LOCAL_AND_REMOTE: core.REASON_NOT_READY},
    "selector-mismatch": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: core.REASON_PLACEMENT,
                          c.PLACEMENT_LOCAL_AND_REMOTE: core.REASON_PLACEMENT},
    "no-fit": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: core.REASON_CAPACITY,
               c.PLACEMENT_LOCAL_AND_REMOTE: core.REASON_CAPACITY},
    "missing-annotation": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: PASS, c.PLACEMENT_LOCAL_AND_REMOTE: PASS},
    "stale-annotation": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: PASS, c.PLACEMENT_LOCAL_AND_REMOTE: PASS},
    "invalid-annotation": {c.PLACEMENT_LOCAL: core.REASON_PLACEMENT, c.PLACEMENT_REMOTE: PASS, c.PLACEMENT_LOCAL_AND_REMOTE: PASS},
}
UNCHECKED = {"missing-annotation": core.CAPACITY_MISSING, "stale-annotation": core.CAPACITY_STALE,
             "invalid-annotation": core.CAPACITY_INVALID}
RESOLVABLE = {core.REASON_CAPACITY, core.REASON_UNKNOWN_NODE}

CASES = [(case, placement, expected) for case, row in TABLE.items() for placement, expected in row.items()]


def lookup(name: str) -> dict | None:
    return next((n for n in NODES.values() if n["metadata"]["name"] == name), None)


# What a node cache keeps besides the nodes (ExtenderCaches.virtual_node_names).
VIRTUAL_NAMES = StaticCaches(nodes=NODES.values()).virtual_node_names()


def run_filter(nodes_or_names: list, policy: core.PolicyLookup, p: dict | None = None, **kwargs) -> core.FilterResult:
    return core.filter_nodes(p or pod(), nodes_or_names, policy, lookup, now=NOW, **kwargs)


@pytest.mark.parametrize("case, placement, expected", CASES)
@pytest.mark.parametrize("mode", ["nodes", "names", "names, cache's virtual names"])
def test_filter_table(case: str, placement: str, expected: str, mode: str) -> None:
    candidate = NODES[case]
    name = candidate["metadata"]["name"]
    policy = policy_from_namespace(namespace(placement=placement))
    indexed = {"virtual_names": VIRTUAL_NAMES} if mode.endswith("virtual names") else {}
    result = run_filter([candidate if mode == "nodes" else name], policy, **indexed)
    if expected == PASS:
        assert result.passed == [name]
        assert result.failures == {}
        assert result.passed_nodes == ([candidate] if mode == "nodes" else [])
        assert result.capacity_unknown == ({name: UNCHECKED[case]} if case in UNCHECKED else {})
    else:
        assert result.passed == []
        failure = result.failures[name]
        assert failure.reason == expected
        assert failure.unresolvable is (expected not in RESOLVABLE)
        assert (name in failure.message) is (case != "physical")
        assert (name in result.failed_nodes) is (expected in RESOLVABLE)
        assert (name in result.unresolvable_nodes) is (expected not in RESOLVABLE)
    assert not result.passthrough


@pytest.mark.parametrize("case, placement, expected", CASES)
def test_filter_table_through_the_wire(case: str, placement: str, expected: str) -> None:
    """The same table, from ExtenderArgs JSON to ExtenderFilterResult JSON, in both modes."""
    candidate = NODES[case]
    name = candidate["metadata"]["name"]
    policy = policy_from_namespace(namespace(placement=placement))
    for body in (
        {"Pod": pod(), "Nodes": {"metadata": {}, "items": [NODES["physical"], candidate]}, "NodeNames": None},
        {"Pod": pod(), "Nodes": None, "NodeNames": ["worker-1", name]},
    ):
        args = wire.parse_extender_args(json.dumps(body).encode())
        result = core.filter_nodes(args.pod, args.candidates, policy, lookup, now=NOW)
        answer = json.loads(wire.dumps(wire.filter_result(args, result)))
        assert set(answer) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
        assert answer["Error"] == ""
        kept = answer["NodeNames"] if args.node_cache_mode else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
        if args.node_cache_mode:
            assert answer["Nodes"] is None
        else:
            assert answer["NodeNames"] is None
            assert all(n in body["Nodes"]["items"] for n in answer["Nodes"]["items"]), "node objects returned unchanged"
        failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
        assert (name in kept) is (expected == PASS)
        assert (name in failed) is (expected != PASS)
        if expected != PASS:
            target = "FailedNodes" if expected in RESOLVABLE else "FailedAndUnresolvableNodes"
            assert name in answer[target]


def test_failure_messages_are_for_humans() -> None:
    policy = policy_from_namespace(namespace(placement=c.PLACEMENT_REMOTE))
    result = run_filter(list(NODES.values()), policy)
    messages = {name: f.message for name, f in result.failures.items()}
    # No node name for physical nodes, so kube-scheduler aggregates "N node(s) ...".
    assert messages["worker-1"] == "namespace demo has kube-offload.io/pod-placement=Remote: not a virtual node"
    assert messages["kube-offload-eu2"] == (
        "virtual node kube-offload-eu2 (cluster eu2) is not Ready: its remote cluster is unreachable"
    )
    assert "does not match the cluster selector" in messages["kube-offload-us1"]
    assert messages["kube-offload-eu3"].startswith("virtual node kube-offload-eu3 (cluster eu3): no remote node can fit the pod")
    assert "insufficient cpu: requested 1, free 500m" in messages["kube-offload-eu3"]


def test_filter_keeps_input_order() -> None:
    policy = policy_from_namespace(namespace())
    names = ["kube-offload-eu4", "worker-1", "kube-offload-eu1"]
    assert run_filter(names, policy).passed == names


def test_no_fit_depends_on_the_pod() -> None:
    policy = policy_from_namespace(namespace())
    small_pod = pod(cpu="100m", memory="64Mi")
    assert run_filter([NODES["no-fit"]], policy, small_pod).passed == ["kube-offload-eu3"]
    huge_pod = pod(cpu="9", memory="1Gi")
    assert run_filter([NODES["virtual"]], policy, huge_pod).failures["kube-offload-eu1"].reason == core.REASON_CAPACITY


def test_stale_limit_can_be_disabled() -> None:
    policy = policy_from_namespace(namespace())
    result = core.filter_nodes(pod(), [NODES["stale-annotation"]], policy, lookup, now=NOW, capacity_max_age=None)
    assert result.failures["kube-offload-eu5"].reason == core.REASON_CAPACITY  # old data now trusted: 1 cpu > 500m


@pytest.mark.parametrize("policy", [None, policy_from_namespace(namespace(enabled=False))], ids=["unknown", "not-offloaded"])
@pytest.mark.parametrize("mode", ["nodes", "names"])
def test_pods_of_namespaces_not_offloaded_pass_untouched(policy: core.PolicyLookup, mode: str) -> None:
    candidates = list(NODES.values()) if mode == "nodes" else [n["metadata"]["name"] for n in NODES.values()] + ["ghost"]
    result = run_filter(candidates, policy, pod(cpu="500"))
    assert result.passthrough
    assert result.failures == {}
    assert result.passed == [x if isinstance(x, str) else x["metadata"]["name"] for x in candidates]
    assert result.passed_nodes == (candidates if mode == "nodes" else [])


def test_invalid_policy_refuses_virtual_nodes_only() -> None:
    policy = evaluate_policy({"metadata": {"name": "demo", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "remote"}}})
    assert isinstance(policy, core.InvalidPolicy)
    result = run_filter(list(NODES.values()), policy)
    assert result.passed == ["worker-1"]
    assert {f.reason for f in result.failures.values()} == {core.REASON_INVALID_POLICY}
    assert all(f.unresolvable for f in result.failures.values())
    assert "did you mean Remote?" in result.failures["kube-offload-eu1"].message


def test_unknown_node_name_is_a_resolvable_failure() -> None:
    result = run_filter(["ghost", "worker-1"], policy_from_namespace(namespace()))
    assert result.passed == ["worker-1"]
    assert result.failed_nodes == {"ghost": "node not (yet) in the scheduler extender's node cache"}


def test_pod_with_bad_quantity_raises_quantity_error() -> None:
    from kube_offload.resources import QuantityError

    with pytest.raises(QuantityError):
        run_filter([NODES["physical"]], policy_from_namespace(namespace()), pod(cpu="a lot"))


def test_capacity_reader_decodes_each_string_once() -> None:
    reader = core.CapacityReader(max_entries=2)
    first = reader.read(BIG)
    assert reader.read(BIG) is first
    assert isinstance(reader.read("nonsense"), core.cap.CapacityError)
    reader.read(SMALL)  # memo full: cleared, then holds SMALL only
    assert reader.read(BIG) is not first
    assert reader.read(BIG).shapes == first.shapes


# --- prioritize ----------------------------------------------------------------------------
PRIORITY_NODES = [NODES["physical"], NODES["virtual"], NODES["missing-annotation"]]


@pytest.mark.parametrize(
    "strategy, expected",
    [
        (core.STRATEGY_PREFER_LOCAL, [10, 0, 0]),
        (core.STRATEGY_PREFER_REMOTE, [0, 10, 10]),
    ],
)
@pytest.mark.parametrize("mode", ["nodes", "names"])
def test_prioritize_preferences(strategy: str, expected: list[int], mode: str) -> None:
    candidates = PRIORITY_NODES if mode == "nodes" else [n["metadata"]["name"] for n in PRIORITY_NODES]
    scores = core.prioritize(pod(), candidates, policy_from_namespace(namespace()), strategy, node_lookup=lookup, now=NOW)
    assert scores == list(zip(["worker-1", "kube-offload-eu1", "kube-offload-eu4"], expected, strict=True))


def test_most_free_remote_ranks_virtual_nodes_by_remote_free() -> None:
    candidates = [
        NODES["physical"],
        NODES["virtual"],  # total free: 10 cpu, 36Gi
        NODES["no-fit"],  # 500m, 512Mi
        node("kube-offload-x", virtual=True, allocatable={"cpu": "5", "memory": "18Gi"}),  # no annotation: allocatable
        NODES["stale-annotation"],  # stale: allocatable 4 cpu 16Gi
    ]
    scores = dict(core.prioritize(pod(), candidates, policy_from_namespace(namespace()), core.STRATEGY_MOST_FREE_REMOTE, now=NOW))
    assert scores["worker-1"] == 0
    assert scores["kube-offload-eu1"] == 10
    assert scores["kube-offload-x"] == 1 + int(9 * 0.5)
    assert scores["kube-offload-eu5"] == 1 + int(9 * (0.4 + 16 / 36) / 2)
    assert scores["kube-offload-eu3"] == 1
    assert all(0 <= s <= core.MAX_EXTENDER_PRIORITY for s in scores.values())


def test_most_free_remote_without_any_free_data_still_prefers_virtual() -> None:
    bare = node("kube-offload-bare", virtual=True, allocatable={})
    bare["status"].pop("allocatable")
    scores = core.prioritize(pod(), [NODES["physical"], bare], policy_from_namespace(namespace()), core.STRATEGY_MOST_FREE_REMOTE)
    assert scores == [("worker-1", 0), ("kube-offload-bare", 1)]


@pytest.mark.parametrize("strategy", core.STRATEGIES)
@pytest.mark.parametrize(
    "policy",
    [None, policy_from_namespace(namespace(enabled=False)), core.InvalidPolicy("demo", "bad")],
    ids=["unknown", "not-offloaded", "invalid"],
)
def test_prioritize_is_neutral_outside_offloaded_namespaces(strategy: str, policy: core.PolicyLookup) -> None:
    scores = core.prioritize(pod(), PRIORITY_NODES, policy, strategy)
    assert scores == [(n["metadata"]["name"], 0) for n in PRIORITY_NODES]


def test_prioritize_unknown_names_score_zero_and_unknown_strategy_fails() -> None:
    policy = policy_from_namespace(namespace())
    assert core.prioritize(pod(), ["ghost"], policy, core.STRATEGY_PREFER_LOCAL, node_lookup=lookup) == [("ghost", 0)]
    with pytest.raises(ValueError, match="unknown strategy"):
        core.prioritize(pod(), [], policy, "random")


# --- caches ------------------------------------------------------------------------------
def test_static_caches() -> None:
    caches = StaticCaches(nodes=NODES.values(), namespaces=[namespace(), namespace("off", enabled=False)])
    assert caches.synced() and caches.has_node_cache
    assert caches.node("worker-1") is NODES["physical"]
    assert caches.node("ghost") is None
    assert caches.namespace_policy("demo").placement == c.PLACEMENT_LOCAL_AND_REMOTE
    assert caches.namespace_policy("off").enabled is False
    assert caches.namespace_policy("nowhere") is None
    assert set(NODES) - {"physical"} == {k for k, n in NODES.items() if n["metadata"]["name"] in caches.virtual_node_names()}
    assert StaticCaches(nodes=NODES.values(), node_cache=False).virtual_node_names() is None


# --- wire --------------------------------------------------------------------------------
def test_parse_nodes_mode_exactly_as_kube_scheduler_sends_it() -> None:
    body = json.dumps({"Pod": pod(), "Nodes": {"metadata": {}, "items": [NODES["physical"]]}, "NodeNames": None})
    args = wire.parse_extender_args(body.encode())
    assert not args.node_cache_mode
    # The core gets a view with the fields it reads; the Node itself is kept as sent.
    physical = NODES["physical"]
    assert args.candidates == [{
        "metadata": {key: physical["metadata"][key] for key in ("name", "labels", "annotations")},
        "status": {"allocatable": physical["status"]["allocatable"],
                   "conditions": [{"type": c["type"], "status": c["status"]} for c in physical["status"]["conditions"]]},
    }]
    assert [json.loads(bytes(raw)) for raw in args.raw_nodes] == [physical]
    assert args.namespace == "demo"
    assert args.pod_key == "demo/web-0"


def test_parse_names_mode_and_empty_lists() -> None:
    args = wire.parse_extender_args(json.dumps({"Pod": pod(), "Nodes": None, "NodeNames": ["a", "b"]}))
    assert args.node_cache_mode and args.candidates == ["a", "b"]
    assert wire.parse_extender_args(json.dumps({"Pod": pod(), "NodeNames": []})).candidates == []
    assert wire.parse_extender_args(json.dumps({"Pod": pod(), "Nodes": {"metadata": {}, "items": None}})).candidates == []


VALID_NODE = {"metadata": {"name": "n"}}


@pytest.mark.parametrize(
    "body, message",
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
        (b"[" * 1100 + b"]" * 1100, "nested too deeply"),  # orjson's limit is 1,024 levels
        (b'{"Pod": NaN}', "not JSON"),  # Go's encoding/json never writes NaN
        (b'{"Pod": "\\ud800"}', "not JSON"),  # nor a lone surrogate
        (b"[]", "must be a JSON object, got a list"),
        (json.dumps({"pod": pod(), "nodeNames": ["a"]}), "ExtenderArgs.Pod must be a Pod object, got null"),
        (json.dumps({"Pod": "x", "NodeNames": ["a"]}), "Pod must be a Pod object, got a string"),
        (json.dumps({"Pod": {}, "NodeNames": ["a"]}), "Pod.metadata must be an object"),
        (json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a"]}), "namespace must be a non-empty string"),
        (json.dumps({"Pod": {"metadata": {"namespace": "d", "name": 3}}, "NodeNames": ["a"]}), "metadata.name must be a string"),
        (json.dumps({"Pod": {"metadata": {"namespace": "d"}, "spec": []}, "NodeNames": ["a"]}), "Pod.spec must be an object"),
        (json.dumps({"Pod": pod(cpu="1.2.3"), "NodeNames": ["a"]}), "invalid resource requests"),
        (json.dumps({"Pod": pod()}), "neither Nodes nor NodeNames"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": []}, "NodeNames": []}), "both Nodes and NodeNames"),
        (json.dumps({"Pod": pod(), "NodeNames": "a"}), "NodeNames must be a list"),
        (json.dumps({"Pod": pod(), "NodeNames": ["a", 1]}), "NodeNames must be a list of non-empty node names"),
        (json.dumps({"Pod": pod(), "NodeNames": [""]}), "non-empty node names"),
        (json.dumps({"Pod": pod(), "Nodes": []}), "Nodes must be a NodeList object, got a list"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": {}}}), "items must be a list"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [1]}}), r"items[0] must be a Node object, got a number"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [VALID_NODE, {}]}}), "items[1].metadata must be an object"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {}}]}}), "metadata.name must be a non-empty string"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "labels": []}}]}}), "labels must be an object"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}}), "labels values must be strings"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "annotations": {"a": None}}}]}}), "annotations values"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n"}, "status": 1}]}}), "status must be an object"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n"}, "status": {"conditions": [1]}}]}}), "conditions must be a list of objects"),
        (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n"}, "status": {"allocatable": []}}]}}), "allocatable must be an object"),
    ],
)
def test_parse_rejects_malformed_args(body: bytes | str, message: str) -> None:
    with pytest.raises(wire.WireError) as excinfo:
        wire.parse_extender_args(body)
    assert message in str(excinfo.value)


def test_answer_is_compact_json_that_go_reads_like_the_stdlib_encoding() -> None:
    # Kept Node objects are sent back as the request's own bytes; the rest of the answer is
    # the stdlib's compact encoding with UTF-8 instead of \u escapes (Go reads both alike).
    # tests/unit/extender/test_wire.py pins the bytes of Go-encoded requests too.
    node = {"metadata": {"name": "n\u00e9", "labels": {"z": "1", "a": "2"}}, "status": {"images": [{"sizeBytes": 2**63}]}}
    sent = json.dumps(node, separators=(",", ":")).encode()
    body_in = json.dumps({"Pod": pod(), "Nodes": {"metadata": {}, "items": [node]}}, separators=(",", ":")).encode()
    assert sent in body_in
    args = wire.parse_extender_args(body_in)
    result = core.filter_nodes(args.pod, args.candidates, None, lookup)
    body = wire.dumps(wire.filter_result(args, result))
    stdlib = json.dumps({"Nodes": {"metadata": {}, "items": ["@node@"]}, "NodeNames": None, "FailedNodes": {},
                         "FailedAndUnresolvableNodes": {}, "Error": ""}, separators=(",", ":"), ensure_ascii=False)
    assert body == stdlib.encode().replace(b'"@node@"', sent)  # the node's \u00e9 stays as sent
    assert json.loads(body)["Nodes"]["items"] == [node]
    assert list(json.loads(body)["Nodes"]["items"][0]["metadata"]["labels"]) == ["z", "a"]


def test_filter_error_and_priority_list_shapes() -> None:
    assert wire.filter_error("boom") == {
        "Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": "boom",
    }
    assert wire.host_priority_list([("a", 10), ("b", 0)]) == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}]


# --- registration ------------------------------------------------------------------------
def test_scheduler_configuration_http() -> None:
    config = registration.scheduler_configuration(registration.ExtenderRegistration(url="http://127.0.0.1:8080/"))
    assert config == {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"}],
        "extenders": [
            {
                "urlPrefix": "http://127.0.0.1:8080",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "enableHTTPS": False,
                "httpTimeout": "5s",
                "nodeCacheCapable": False,
                "ignorable": False,
            }
        ],
    }


def test_scheduler_configuration_https_with_ca() -> None:
    config = registration.scheduler_configuration(
        registration.ExtenderRegistration(
            url="https://extender.kube-offload.svc:8443", weight=5, http_timeout="2s", node_cache_capable=True,
            ignorable=True, ca_data=b"-----BEGIN CERTIFICATE-----\n", server_name="extender", scheduler_name="offload",
        )
    )
    extender = config["extenders"][0]
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "insecure": False, "serverName": "extender",
        "caData": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(),
    }
    assert (extender["weight"], extender["httpTimeout"], extender["nodeCacheCapable"], extender["ignorable"]) == (5, "2s", True, True)
    assert config["profiles"] == [{"schedulerName": "offload"}]
    text = registration.scheduler_configuration_yaml(registration.ExtenderRegistration(url="https://x:1", ca_file="/ca.pem"))
    assert "caFile: /ca.pem" in text and text.startswith("apiVersion: kubescheduler.config.k8s.io/v1\n")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"url": "127.0.0.1:8080"}, "must be http(s)"),
        ({"url": "ftp://x"}, "must be http(s)"),
        ({"url": "http://x", "weight": 0}, "weight must be a positive integer"),
        ({"url": "http://x", "http_timeout": "5"}, "Go duration"),
    ],
)
def test_scheduler_configuration_rejects(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        registration.scheduler_configuration(registration.ExtenderRegistration(**kwargs))
    assert message in str(excinfo.value)


def test_informer_caches_follow_namespace_events() -> None:
    """The event handler alone (no API server): policies follow ADDED/MODIFIED/DELETED."""
    from kubernetes import client

    from extender.caches import InformerCaches

    caches = InformerCaches(client.ApiClient(), node_cache=False)
    assert not caches.has_node_cache and caches.node("worker-1") is None
    assert not caches.synced(), "not synced before the informers have listed"
    ns = namespace(placement=c.PLACEMENT_REMOTE)
    deliver = caches._namespaces._dispatch  # what the informer calls on each event
    deliver("ADDED", None, ns)
    assert caches.namespace_policy("demo").placement == c.PLACEMENT_REMOTE
    broken = json.loads(json.dumps(ns))
    broken["metadata"]["labels"][c.LABEL_POD_PLACEMENT] = "Anywhere"
    broken["metadata"]["resourceVersion"] = "8"
    deliver("MODIFIED", ns, broken)
    assert isinstance(caches.namespace_policy("demo"), core.InvalidPolicy)
    deliver("MODIFIED", broken, broken)  # resync: same resourceVersion
    assert isinstance(caches.namespace_policy("demo"), core.InvalidPolicy)
    deliver("DELETED", broken, broken)
    assert caches.namespace_policy("demo") is None


def test_informer_caches_keep_the_virtual_node_names() -> None:
    from kubernetes import client

    from extender.caches import InformerCaches

    caches = InformerCaches(client.ApiClient(), node_cache=True)
    deliver = caches._nodes._dispatch
    physical, virtual = NODES["physical"], NODES["virtual"]
    deliver("ADDED", None, physical)
    deliver("ADDED", None, virtual)
    assert set(caches.virtual_node_names()) == {"kube-offload-eu1"}
    relabelled = json.loads(json.dumps(virtual))
    del relabelled["metadata"]["labels"][c.LABEL_TYPE]
    deliver("MODIFIED", virtual, relabelled)
    assert set(caches.virtual_node_names()) == set()
    deliver("MODIFIED", relabelled, virtual)
    deliver("DELETED", virtual, virtual)
    assert set(caches.virtual_node_names()) == set()
    assert InformerCaches(client.ApiClient(), node_cache=False).virtual_node_names() is None


# --- handed-back workloads (kube_offload/handed_back.py) --------------------------------------------
def handed_back(base: dict, records: dict) -> dict:
    copy = json.loads(json.dumps(base))
    copy["metadata"]["annotations"][c.ANNOTATION_HANDED_BACK] = handback.encode(records)
    return copy


def owned_pod(controller_uid: str) -> dict:
    p = pod()
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8", "uid": controller_uid, "controller": True}
    ]
    return p


@pytest.mark.parametrize("mode", ["nodes", "names"])
def test_a_virtual_node_that_handed_back_the_workload_is_refused_until_its_record_expires(mode: str) -> None:
    records = handback.with_handback({}, "rs-1", "p-0", "RemoteUnschedulable", NOW - timedelta(seconds=60))
    virtual = handed_back(NODES["virtual"], records)
    name = virtual["metadata"]["name"]
    candidates = [virtual, NODES["physical"]] if mode == "nodes" else [name, "worker-1"]

    def lookup_here(n: str) -> dict | None:
        return virtual if n == name else lookup(n)

    policy = policy_from_namespace(namespace(placement=c.PLACEMENT_LOCAL_AND_REMOTE))

    def run(p: dict, now: datetime) -> core.FilterResult:
        return core.filter_nodes(p, candidates, policy, lookup_here, now=now)

    result = run(owned_pod("rs-1"), NOW)
    assert result.passed == ["worker-1"]
    failure = result.failures[name]
    assert failure.reason == core.REASON_HANDED_BACK and failure.unresolvable
    assert "RemoteUnschedulable" in failure.message and name in failure.message
    # Another workload, a pod without a controller, and the same one once the record expired: kept.
    assert run(owned_pod("rs-2"), NOW).passed == [name, "worker-1"]
    assert run(pod(), NOW).passed == [name, "worker-1"]
    assert run(owned_pod("rs-1"), records["rs-1"].until).passed == [name, "worker-1"]


def test_a_handed_back_workload_passes_untouched_where_the_namespace_is_not_offloaded() -> None:
    records = handback.with_handback({}, "rs-1", "p-0", "RemoteRefused", NOW)
    virtual = handed_back(NODES["virtual"], records)
    result = core.filter_nodes(owned_pod("rs-1"), [virtual], policy_from_namespace(namespace(enabled=False)), lookup, now=NOW)
    assert result.passthrough and result.passed == [virtual["metadata"]["name"]]
