"""The extender's wire format with typed decoding (extender/wire.py): kept Node objects go
back byte for byte, the failed-node maps are the stdlib's encoding, a malformed field gets
a 400 message naming it, and input Go's encoding/json never writes is refused, wherever
in the body it sits (msgspec skips the fields the extender does not read)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_offload import constants as c
from kube_offload.capacity import encode_remote_capacity
from kube_offload.policy import policy_from_namespace
from kube_offload.resources import parse_quantity as q

from extender import wire
from kube_offload import node_filter as core

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
ROOMY = encode_remote_capacity({"r1": {"cpu": q("8"), "memory": q("32Gi"), "pods": q("110")}}, updated=NOW)
TIGHT = encode_remote_capacity({"r1": {"cpu": q("250m"), "memory": q("1Gi"), "pods": q("110")}}, updated=NOW)


def go_json(document: object) -> bytes:
    """What Go's json.Marshal writes: compact, non-ASCII as UTF-8, and <, >, &, U+2028,
    U+2029 escaped (they only occur inside strings, so replacing them in the text is safe)."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text.encode()


def stdlib(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def node(name: str, *, virtual: bool = False, ready: bool = True, capacity: str | None = None, region: str = "eu") -> dict:
    """A Node as a kubelet writes it, with the fields the extender never reads too."""
    labels = {c.LABEL_HOSTNAME: name, "region": region, "team": "a&b <ops>"}
    annotations = {"note": "caf\u00e9 \u2028 \U0001F600", "json": '{"k":[1,2]}'}
    if virtual:
        labels.update({c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: name.removeprefix(c.VIRTUAL_NODE_PREFIX)})
        if capacity:
            annotations[c.ANNOTATION_REMOTE_CAPACITY] = capacity
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "18446744073709551617",
                     "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": "10.244.1.0/24", "unschedulable": False,
                 "taints": [{"key": c.TAINT_KEY, "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}] if virtual else None},
        "status": {
            "capacity": {"cpu": 4, "memory": "16Gi"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                           {"type": "Ready", "status": "True" if ready else "False",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "message": "kubelet is posting ready status"}],
            "images": [{"names": ["registry.example/app@sha256:00"], "sizeBytes": 123456789012345678901234567890}],
            "nodeInfo": {"machineID": "m", "bootID": "", "score": 1.50, "ratio": -0.0, "big": 1e300},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


NODES = [
    node("worker-1"),
    node("kube-offload-eu1", virtual=True, capacity=ROOMY),
    node("kube-offload-eu2", virtual=True, ready=False, capacity=ROOMY),
    node("kube-offload-eu\u00e9", virtual=True, capacity=TIGHT),
    node("kube-offload-us1", virtual=True, capacity=ROOMY, region="us"),
    node("worker-2"),
]


def pod(namespace: str = "demo", cpu: str = "500m") -> dict:
    return {"metadata": {"name": "web-0", "namespace": namespace},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}}


def namespace(placement: str) -> dict:
    return {"metadata": {"name": "demo", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: placement},
                         "annotations": {c.ANNOTATION_CLUSTER_SELECTOR: "region=eu"}}}


def nodes_body(items: list, pod_: dict | None = None) -> bytes:
    # The envelope as Go writes ExtenderArgs (field order Pod, Nodes, NodeNames).
    return (b'{"Pod":' + go_json(pod_ or pod()) + b',"Nodes":{"metadata":{},"items":[' + b",".join(items)
            + b']},"NodeNames":null}')


def run(body: bytes | str, policy: core.PolicyLookup) -> tuple[wire.ExtenderArgs, core.FilterResult, bytes]:
    args = wire.parse_extender_args(body)
    result = core.filter_nodes(args.pod, args.candidates, policy, lambda name: None, now=NOW)
    return args, result, wire.dumps(wire.filter_result(args, result))


# --- the answer's bytes ------------------------------------------------------------------------
@pytest.mark.parametrize("placement", [c.PLACEMENT_LOCAL, c.PLACEMENT_REMOTE, c.PLACEMENT_LOCAL_AND_REMOTE])
def test_kept_nodes_are_echoed_byte_for_byte_and_the_rest_is_the_stdlib_encoding(placement: str) -> None:
    sent = [go_json(n) for n in NODES]
    _, result, body = run(nodes_body(sent), policy_from_namespace(namespace(placement)))
    kept = [sent[i] for i, n in enumerate(NODES) if n["metadata"]["name"] in result.passed]
    assert kept, "every placement keeps some node"
    expected = (b'{"Nodes":{"metadata":{},"items":[' + b",".join(kept) + b']},"NodeNames":null,'
                b'"FailedNodes":' + stdlib(result.failed_nodes)
                + b',"FailedAndUnresolvableNodes":' + stdlib(result.unresolvable_nodes) + b',"Error":""}')
    assert body == expected
    # Go's escapes, the 2^64+1 resourceVersion, the 30-digit size and 1.5 written "1.5"
    # all survive because the kept nodes are never decoded into Python objects.
    assert b"a\\u0026b \\u003cops\\u003e" in body and b"18446744073709551617" in body
    assert b"123456789012345678901234567890" in body


def test_failed_node_maps() -> None:
    _, result, body = run(nodes_body([go_json(n) for n in NODES]), policy_from_namespace(namespace(c.PLACEMENT_REMOTE)))
    answer = json.loads(body)
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["kube-offload-eu1"]
    assert answer["Nodes"]["items"] == [NODES[1]]
    assert list(answer["FailedNodes"]) == ["kube-offload-eu\u00e9"]
    assert answer["FailedNodes"]["kube-offload-eu\u00e9"].startswith(
        "virtual node kube-offload-eu\u00e9 (cluster eu\u00e9): no remote node can fit the pod")
    assert "insufficient cpu: requested 500m, free 250m" in answer["FailedNodes"]["kube-offload-eu\u00e9"]
    assert b'"kube-offload-eu\xc3\xa9":' in body, "non-ASCII as UTF-8, as Go writes it"
    not_virtual = "namespace demo has kube-offload.io/pod-placement=Remote: not a virtual node"
    assert answer["FailedAndUnresolvableNodes"] == {
        "worker-1": not_virtual,
        "kube-offload-eu2": "virtual node kube-offload-eu2 (cluster eu2) is not Ready: its remote cluster is unreachable",
        "kube-offload-us1": answer["FailedAndUnresolvableNodes"]["kube-offload-us1"],
        "worker-2": not_virtual,
    }
    assert "does not match the cluster selector" in answer["FailedAndUnresolvableNodes"]["kube-offload-us1"]
    assert list(answer) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


def test_names_mode_answer_bytes() -> None:
    names = [n["metadata"]["name"] for n in NODES]
    args = wire.parse_extender_args(b'{"Pod":' + go_json(pod()) + b',"Nodes":null,"NodeNames":' + go_json(names) + b"}")
    lookup = {n["metadata"]["name"]: n for n in NODES}.get
    result = core.filter_nodes(args.pod, args.candidates, policy_from_namespace(namespace(c.PLACEMENT_REMOTE)), lookup, now=NOW)
    body = wire.dumps(wire.filter_result(args, result))
    assert body == stdlib({"Nodes": None, "NodeNames": ["kube-offload-eu1"], "FailedNodes": result.failed_nodes,
                           "FailedAndUnresolvableNodes": result.unresolvable_nodes, "Error": ""})


def test_pretty_printed_nodes_come_back_as_sent() -> None:
    # Not what kube-scheduler sends, but valid JSON: the node's own spacing is kept.
    sent = [json.dumps(n, indent=2).encode() for n in NODES[:2]]
    _, _, body = run(nodes_body(sent), None)
    assert body.startswith(b'{"Nodes":{"metadata":{},"items":[' + sent[0] + b"," + sent[1] + b"]}")
    assert json.loads(body)["Nodes"]["items"] == NODES[:2]


def test_answers_without_parsed_nodes_and_other_shapes_encode() -> None:
    # filter_result on ExtenderArgs built by hand (no raw bytes): the views are sent.
    args = wire.ExtenderArgs(pod=pod(), nodes=[{"metadata": {"name": "n"}}], node_names=None)
    result = core.filter_nodes(args.pod, args.candidates, None, lambda name: None)
    assert wire.dumps(wire.filter_result(args, result)).startswith(b'{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n"}}]}')
    assert wire.dumps(wire.host_priority_list([("a\u00e9", 10)])) == '[{"Host":"a\u00e9","Score":10}]'.encode()
    assert wire.dumps(wire.bad_request('bad "x"\n')) == b'{"Error":"bad \\"x\\"\\n"}'


# --- what the core reads ---------------------------------------------------------------------
def test_the_core_gets_views_of_the_fields_it_reads() -> None:
    args = wire.parse_extender_args(nodes_body([go_json(NODES[1])]))
    full = NODES[1]
    assert args.candidates == [{
        "metadata": {"name": full["metadata"]["name"], "labels": full["metadata"]["labels"],
                     "annotations": full["metadata"]["annotations"]},
        "status": {"allocatable": full["status"]["allocatable"],
                   "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]},
    }]
    assert bytes(args.raw_nodes[0]) == go_json(full)


@pytest.mark.parametrize("placement", [c.PLACEMENT_LOCAL, c.PLACEMENT_REMOTE, c.PLACEMENT_LOCAL_AND_REMOTE, None])
def test_decisions_from_views_equal_decisions_from_whole_nodes(placement: str | None) -> None:
    policy = policy_from_namespace(namespace(placement)) if placement else None
    args = wire.parse_extender_args(nodes_body([go_json(n) for n in NODES]))
    on_views = core.filter_nodes(args.pod, args.candidates, policy, lambda name: None, now=NOW)
    on_nodes = core.filter_nodes(pod(), NODES, policy, lambda name: None, now=NOW)
    assert on_views.passed == on_nodes.passed
    assert on_views.failures == on_nodes.failures
    assert on_views.capacity_unknown == on_nodes.capacity_unknown
    for strategy in core.STRATEGIES:
        assert (core.prioritize(args.pod, args.candidates, policy, strategy, now=NOW)
                == core.prioritize(pod(), NODES, policy, strategy, now=NOW))


# --- malformed typed fields: a 400 message naming the field ------------------------------------
@pytest.mark.parametrize(
    "bad_node, message",
    [
        ({"metadata": {"name": "n2", "labels": {"a": 1}}}, "ExtenderArgs.Nodes.items[1].metadata.labels values must be strings (node n2)"),
        ({"metadata": {"name": "n2", "annotations": ["x"]}}, "ExtenderArgs.Nodes.items[1].metadata.annotations must be an object (node n2)"),
        ({"metadata": {"name": ""}}, "ExtenderArgs.Nodes.items[1].metadata.name must be a non-empty string"),
        ({"metadata": {"name": 7}}, "ExtenderArgs.Nodes.items[1].metadata.name must be a non-empty string"),
        ({"metadata": None}, "ExtenderArgs.Nodes.items[1].metadata must be an object"),
        ({"metadata": {"name": "n2"}, "status": {"conditions": {"type": "Ready"}}},
         "ExtenderArgs.Nodes.items[1].status.conditions must be a list of objects (node n2)"),
        ({"metadata": {"name": "n2"}, "status": {"conditions": ["Ready"]}},
         "ExtenderArgs.Nodes.items[1].status.conditions must be a list of objects (node n2)"),
        ({"metadata": {"name": "n2"}, "status": {"allocatable": "4"}}, "ExtenderArgs.Nodes.items[1].status.allocatable must be an object (node n2)"),
        ({"metadata": {"name": "n2"}, "status": []}, "ExtenderArgs.Nodes.items[1].status must be an object (node n2)"),
        ("n2", "ExtenderArgs.Nodes.items[1] must be a Node object, got a string"),
    ],
)
def test_malformed_typed_fields_are_named(bad_node: object, message: str) -> None:
    with pytest.raises(wire.WireError) as excinfo:
        wire.parse_extender_args(nodes_body([go_json(NODES[0]), go_json(bad_node)]))
    assert str(excinfo.value) == message


def test_fields_the_extender_never_reads_are_not_checked() -> None:
    odd = {"metadata": {"name": "n", "uid": 1, "ownerReferences": "x"}, "spec": [1, 2], "status": {"images": {"a": None}}}
    args = wire.parse_extender_args(nodes_body([go_json(odd)]))
    assert args.candidates == [{"metadata": {"name": "n"}, "status": {}}]


def test_a_refusal_the_explanation_does_not_share_still_names_the_field() -> None:
    # Duplicate keys (Go never writes them): the typed decoder checks each occurrence, the
    # plain-JSON explanation sees only the last one, so the typed decoder's words are used.
    body = nodes_body([b'{"metadata":{"name":7,"name":"n"}}'])
    with pytest.raises(wire.WireError) as excinfo:
        wire.parse_extender_args(body)
    assert str(excinfo.value) == "Expected `str`, got `int` - at `ExtenderArgs.Nodes.items[0].metadata.name`"


# --- refusals of input Go never writes, wherever it is --------------------------------------------
# Go's encoding/json writes no NaN/Infinity, no lone surrogate, only valid UTF-8.
BAD_VALUES = {
    "NaN": b"NaN",
    "Infinity": b"Infinity",
    "-Infinity": b"-Infinity",
    "lone high surrogate": b'"\\ud800"',
    "lone high surrogate, then text": b'"\\ud800abcdefgh"',
    "lone low surrogate": b'"\\udc00"',
    "reversed pair": b'"\\udc00\\ud800"',
    "invalid UTF-8": b'"\xff"',
    "UTF-8 of a surrogate": b'"\xed\xa0\x80"',
    "truncated UTF-8": b'"\xc3"',
    "raw control character": b'"a\x01b"',
    "bad escape": b'"\\x"',
}
# Where: in the Pod (decoded whole), in a field of a node the extender reads, in one it
# skips, and in a node it keeps and would send back unparsed.
PLACES = {
    "pod": lambda value: nodes_body([go_json(NODES[0])], pod_=None).replace(b'"spec":{', b'"spec":{"x":' + value + b",", 1),
    "read field": lambda value: nodes_body([b'{"metadata":{"name":"n","annotations":{"a":' + value + b"}}}"]),
    "skipped field": lambda value: nodes_body([b'{"metadata":{"name":"n"},"status":{"images":[' + value + b"]}}"]),
    "skipped key": lambda value: nodes_body([b'{"metadata":{"name":"n"},"spec":{' + (value if value.startswith(b'"') else b'"k"') + b":" + value + b"}}"]),
}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("what", list(BAD_VALUES))
def test_refuses_what_go_never_writes_wherever_it_is(what: str, place: str) -> None:
    body = PLACES[place](BAD_VALUES[what])
    assert BAD_VALUES[what] in body
    with pytest.raises(wire.WireError) as excinfo:
        wire.parse_extender_args(body)
    assert "not JSON" in str(excinfo.value)


@pytest.mark.parametrize("depth", [1100, 100_000])
@pytest.mark.parametrize("place", ["pod", "skipped field", "kept node"])
def test_refuses_deep_nesting_wherever_it_is(depth: int, place: str) -> None:
    deep = b"[" * depth + b"]" * depth
    body = {
        "pod": b'{"Pod":{"metadata":{"namespace":"d"},"x":' + deep + b'},"NodeNames":["a"]}',
        "skipped field": nodes_body([b'{"metadata":{"name":"n"},"spec":{"x":' + deep + b"}}"]),
        "kept node": nodes_body([b'{"metadata":{"name":"n"},"x":' + deep + b"}"]),
    }[place]
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.parse_extender_args(body)


def test_refuses_a_str_body_that_is_not_unicode() -> None:
    body = nodes_body([go_json(NODES[0])]).decode() + "\ud800"
    with pytest.raises(wire.WireError, match="not valid UTF-8"):
        wire.parse_extender_args(body)


def test_valid_non_ascii_bodies_are_accepted() -> None:
    args = wire.parse_extender_args(nodes_body([go_json(NODES[3])]))
    assert args.candidates[0]["metadata"]["name"] == "kube-offload-eu\u00e9"
    assert wire.parse_extender_args(nodes_body([go_json(NODES[3])]).decode()).candidates == args.candidates


# --- the typed decoder and the explanation agree -----------------------------------------------
json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
any_json = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                        max_leaves=10)


BASE_NODE = {
    "metadata": {"name": "n", "labels": {"a": "x", c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE}, "annotations": {"a": "x"}, "uid": "u"},
    "spec": {"taints": []},
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "1"}, "images": []},
}
# Every field the typed decoder reads, its containers, and some it skips.
PATHS = [(), ("metadata",), ("metadata", "name"), ("metadata", "labels"), ("metadata", "labels", "a"),
         ("metadata", "annotations"), ("metadata", "annotations", "a"), ("metadata", "uid"), ("spec",), ("status",),
         ("status", "conditions"), ("status", "conditions", 0), ("status", "conditions", 0, "type"),
         ("status", "conditions", 0, "status"), ("status", "allocatable"), ("status", "allocatable", "cpu"),
         ("status", "images")]
DELETE = object()


def mutated(mutations: list) -> object:
    """BASE_NODE with each (path, value) applied in turn: value set (or the key deleted)."""
    node: object = json.loads(json.dumps(BASE_NODE))
    for path, value in mutations:
        value = value if value is DELETE else copy.deepcopy(value)  # sampled values are shared
        if not path:
            node = {} if value is DELETE else value
            continue
        parent = node
        for key in path[:-1]:
            if not isinstance(parent, (dict, list)) or (isinstance(parent, dict) and key not in parent) \
                    or (isinstance(parent, list) and (not isinstance(key, int) or key >= len(parent))):
                break
            parent = parent[key]
        else:
            last = path[-1]
            if isinstance(parent, dict) and isinstance(last, str):
                if value is DELETE:
                    parent.pop(last, None)
                else:
                    parent[last] = value
            elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
                parent[last] = None if value is DELETE else value
    return node


# The edge values of each JSON type often, any JSON value otherwise.
values = st.sampled_from(["", "x", 0, 1.5, True, None, [], {}, [{}], {"a": 1}, DELETE]) | any_json
nodeish = st.lists(st.tuples(st.sampled_from(PATHS), values), max_size=2).map(mutated)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(nodeish, max_size=3))
def test_typed_decoder_and_explanation_agree(nodes: list) -> None:
    """Any node the typed decoder refuses gets the explanation's message, and any it
    accepts the explanation accepts too (so the core never sees what the old validation,
    now the explanation, would refuse)."""
    body = nodes_body([go_json(n) for n in nodes])
    try:
        wire._decode(body)
        typed_ok = True
    except (msgspec.ValidationError, wire._Refused, wire.WireError):
        typed_ok = False
    try:
        wire._explain(body)
        explained_ok = True
    except wire.WireError:
        explained_ok = False
    assert typed_ok == explained_ok
