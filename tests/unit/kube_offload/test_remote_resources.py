"""Consumer.status.capacity: the enforcer encodes a summary, the vkubelet decodes it."""

from __future__ import annotations

import pytest

from kube_offload.remote_resources import (
    CapacityStatusError,
    RemoteResources,
    anonymous,
    decode_capacity_status,
    encode_capacity_status,
    summarize,
)

GI = 1024**3 * 1000

SUMMARIES = [
    RemoteResources(shareable={}, free_by_node={}),
    RemoteResources(
        shareable={"cpu": 7500, "memory": 30 * GI, "pods": 220_000, "nvidia.com/gpu": 2000},
        free_by_node={
            "n1": {"cpu": 3500, "memory": 14 * GI + 512 * 1024 * 1024 * 1000, "pods": 108_000},
            # Overcommitted nodes have negative free room; the sign must survive.
            "n2": {"cpu": -250, "memory": -GI, "pods": 0, "nvidia.com/gpu": 2000},
        },
        pressure={"MemoryPressure": ["n2"], "DiskPressure": [], "PIDPressure": []},
        schedulable_nodes=2,
        total_nodes=3,
    ),
    RemoteResources(shareable={"cpu": 1, "memory": 1, "ephemeral-storage": 1500}, free_by_node={"x": {"cpu": 1}}),
]


@pytest.mark.parametrize("summary", SUMMARIES)
def test_round_trip_gives_the_anonymous_summary(summary):
    decoded = decode_capacity_status(encode_capacity_status(summary))
    assert decoded == anonymous(summary)
    # The consumer keeps what its checks need: every node's free room (as a multiset)
    # and how many nodes report each pressure.
    key = lambda shapes: sorted(sorted(s.items()) for s in shapes)  # noqa: E731
    assert key(decoded.free_by_node.values()) == key(summary.free_by_node.values())
    assert {k: len(v) for k, v in decoded.pressure.items()} == {k: len(v) for k, v in summary.pressure.items()}
    assert decode_capacity_status(encode_capacity_status(decoded)) == decoded


def test_encoded_shape_is_the_documented_one_and_names_no_node():
    encoded = encode_capacity_status(SUMMARIES[1])
    assert encoded == {
        "shareable": {"cpu": "7500m", "memory": "30Gi", "pods": "220", "nvidia.com/gpu": "2"},
        "freeShapes": [
            {"cpu": "-250m", "memory": "-1Gi", "pods": "0", "nvidia.com/gpu": "2"},
            {"cpu": "3500m", "memory": "14848Mi", "pods": "108"},
        ],
        "pressure": {"DiskPressure": 0, "MemoryPressure": 1, "PIDPressure": 0},
        "schedulableNodes": 2,
        "totalNodes": 3,
    }
    assert "n1" not in repr(encoded) and "n2" not in repr(encoded)


def test_the_order_of_shapes_does_not_depend_on_node_names():
    a = RemoteResources(shareable={}, free_by_node={"zz": {"cpu": 1000}, "aa": {"cpu": 2000}})
    b = RemoteResources(shareable={}, free_by_node={"aa": {"cpu": 1000}, "zz": {"cpu": 2000}})
    assert encode_capacity_status(a) == encode_capacity_status(b)


def test_an_older_enforcers_status_by_node_name_is_still_read():
    old = {"shareable": {"cpu": "1"}, "freeByNode": {"n1": {"cpu": "1"}}, "pressure": {"MemoryPressure": ["n1"]}}
    decoded = decode_capacity_status(old)
    assert decoded.free_by_node == {"n1": {"cpu": 1000}} and decoded.pressure == {"MemoryPressure": ["n1"]}


def test_round_trip_of_a_real_summary():
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    pod = {
        "metadata": {"name": "p", "namespace": "x"},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "100m"}}}]},
    }
    summary = summarize([node], [pod], "local")
    assert decode_capacity_status(encode_capacity_status(summary)) == anonymous(summary)


def test_absent_status_is_an_empty_summary():
    assert decode_capacity_status(None) == RemoteResources(shareable={}, free_by_node={}, pressure={})
    assert decode_capacity_status({}) == RemoteResources(shareable={}, free_by_node={}, pressure={})


@pytest.mark.parametrize(
    "raw, field",
    [
        ("nope", "status.capacity must be an object"),
        ({"shareable": {"cpu": "lots"}}, "status.capacity.shareable"),
        ({"shareable": ["cpu"]}, "status.capacity.shareable"),
        ({"freeByNode": ["n1"]}, "status.capacity.freeByNode"),
        ({"freeByNode": {"n1": {"memory": "1Qi"}}}, "status.capacity.freeByNode[n1]"),
        ({"pressure": {"MemoryPressure": "n1"}}, "status.capacity.pressure[MemoryPressure]"),
        ({"pressure": {"MemoryPressure": -1}}, "status.capacity.pressure[MemoryPressure]"),
        ({"freeShapes": {"n1": {}}}, "status.capacity.freeShapes"),
        ({"freeShapes": [{"cpu": "1"}, {"memory": "1Qi"}]}, "status.capacity.freeShapes[1]"),
        ({"pressure": ["MemoryPressure"]}, "status.capacity.pressure"),
        ({"schedulableNodes": -1}, "status.capacity.schedulableNodes"),
        ({"totalNodes": "3"}, "status.capacity.totalNodes"),
        ({"totalNodes": True}, "status.capacity.totalNodes"),
    ],
)
def test_malformed_status_names_the_field(raw, field):
    with pytest.raises(CapacityStatusError, match=field.replace("[", r"\[").replace("]", r"\]")):
        decode_capacity_status(raw)


def test_summarize_many_equals_one_summary_per_consumer():
    from kube_offload import constants as c
    from kube_offload.remote_resources import summarize_many

    def node(name, cpu, ready="True", pressure=False):
        conditions = [{"type": "Ready", "status": ready}]
        if pressure:
            conditions.append({"type": "MemoryPressure", "status": "True"})
        return {"metadata": {"name": name},
                "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "10", "example.com/gpu": "1"},
                           "conditions": conditions}}

    def pod(name, node_name, cpu, origin=None, phase="Running"):
        labels = {c.LABEL_ORIGIN_CLUSTER_ID: origin} if origin else {}
        return {"metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
                "status": {"phase": phase}}

    nodes = [node("n1", "2"), node("n2", "1", pressure=True), node("down", "8", ready="False")]
    pods = [pod("a1", "n1", "500m", "a"), pod("a2", "n2", "1500m", "a"), pod("b1", "n1", "1", "b"),
            pod("x", "n1", "250m"), pod("c-done", "n2", "1", "c", phase="Succeeded"), pod("other", "n2", "100m", "zz"),
            pod("nowhere", "down", "4", "b")]
    together = summarize_many(nodes, pods, ["a", "b", "c", "a"])
    assert set(together) == {"a", "b", "c"}
    for cid in ("a", "b", "c"):
        assert together[cid] == summarize_many(nodes, pods, [cid])[cid]
    # Each consumer's own pods stay in its shareable figure (n2 is overcommitted by a's pod).
    assert together["a"].shareable["cpu"] == 2000 - 1250 + 1000 - 100
    assert together["b"].shareable["cpu"] == 2000 - 750 + 0
    assert together["a"].free_by_node == together["b"].free_by_node


def _pod(name, cpu, node_name="n1"):
    return {"metadata": {"name": name, "labels": {}},
            "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def test_pod_requests_memo_parses_a_pod_object_once_across_passes():
    from kube_offload import resources
    from kube_offload.remote_resources import PodRequestsMemo, summarize_many

    asked = []

    def counting(pod):
        asked.append(pod["metadata"]["name"])
        return resources.pod_requests(pod)

    memo = PodRequestsMemo(counting)
    nodes = [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "pods": "10"},
                                                     "conditions": [{"type": "Ready", "status": "True"}]}}]
    a, b = _pod("a", "500m"), _pod("b", "1")
    first = summarize_many(nodes, [a, b], ["x"], requests_of=memo)
    memo.next_pass()
    assert asked == ["a", "b"] and memo.parsed == 2
    # The same objects: nothing parsed; the same figures as without the memo.
    again = summarize_many(nodes, [a, b], ["x"], requests_of=memo)
    memo.next_pass()
    assert asked == ["a", "b"] and again == first == summarize_many(nodes, [a, b], ["x"])
    # b replaced by the informer (an equal-looking object with other requests): parsed again.
    b2 = _pod("b", "2")
    changed = summarize_many(nodes, [a, b2], ["x"], requests_of=memo)
    memo.next_pass()
    assert asked == ["a", "b", "b"]
    assert changed == summarize_many(nodes, [a, b2], ["x"])
    assert changed["x"].shareable["cpu"] == 4000 - 500 - 2000  # neither pod is x's: both foreign


def test_pod_requests_memo_forgets_what_a_pass_did_not_ask_for():
    from kube_offload.remote_resources import PodRequestsMemo

    memo = PodRequestsMemo()
    a, b = _pod("a", "1"), _pod("b", "2")
    assert memo(a) == {"cpu": 1000, "pods": 1000} and memo(b)["cpu"] == 2000
    memo.next_pass()
    memo(a)
    memo.next_pass()  # b not asked in that pass: dropped, not held any longer
    assert memo.parsed == 2
    memo(b)
    assert memo.parsed == 3
    # A malformed pod is not kept: raised each time it is asked.
    bad = _pod("bad", "lots")
    for _ in range(2):
        with pytest.raises(resources_error()):
            memo(bad)
    assert memo.parsed == 3


def resources_error():
    from kube_offload.resources import QuantityError

    return QuantityError


def test_pod_requests_memo_allocates_no_container_for_an_unchanged_pod():
    import gc

    from kube_offload.remote_resources import PodRequestsMemo

    memo = PodRequestsMemo()
    pods = [_pod(f"p{i}", "1") for i in range(2000)]
    for pod in pods:
        memo(pod)
    memo.next_pass()
    assert len(memo) == 2000
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for pod in pods:
            memo(pod)
        memo.next_pass()
        allocated = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert memo.parsed == 2000 and len(memo) == 2000
    assert allocated < 50  # not one per pod
