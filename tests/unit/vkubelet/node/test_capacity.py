"""What the virtual node offers: remote free resources, the double-count rule, rounding."""

import json
from datetime import datetime, timedelta, timezone

from kube_offload import capacity as cap
from kube_offload import constants as c
from kube_offload.resources import parse_quantity
from vkubelet.node.forge import annotation_due
from kube_offload.remote_resources import node_is_schedulable, summarize, virtual_node_capacity

LOCAL_ID = "local"


def _node(name, cpu="4", memory="16Gi", pods="110", ready="True", unschedulable=False, labels=None, conditions=(), **extra):
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **extra}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready}, *conditions],
        },
    }


def _pod(node, cpu="1", memory="1Gi", phase="Running", ours=False, name="p"):
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID} if ours else {}
    return {
        "metadata": {"name": name, "namespace": "x", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": phase},
    }


def milli(q):
    return parse_quantity(q)


def test_free_is_allocatable_minus_requests_summed_over_nodes():
    remote = summarize([_node("a"), _node("b")], [_pod("a", cpu="1500m", memory="2Gi")], LOCAL_ID)
    assert remote.shareable["cpu"] == milli("6500m")
    assert remote.shareable["memory"] == milli("30Gi")
    assert remote.shareable["pods"] == milli("219")


def test_our_own_offloaded_pods_are_not_subtracted_from_the_shareable_amount():
    pods = [_pod("a", cpu="2", ours=True), _pod("a", cpu="1", name="theirs")]
    remote = summarize([_node("a")], pods, LOCAL_ID)
    # The local scheduler already counts the 2 cpu against the virtual node: only the
    # other tenant's 1 cpu leaves the remote cluster.
    assert remote.shareable["cpu"] == milli("3")
    # ...but the per-node view (what fits on a node right now) sees both.
    assert remote.free_by_node["a"]["cpu"] == milli("1")
    assert remote.free_by_node["a"]["pods"] == milli("108")


def test_pods_of_another_consumer_cluster_are_subtracted():
    pod = _pod("a", cpu="2")
    pod["metadata"]["labels"] = {c.LABEL_ORIGIN_CLUSTER_ID: "someone-else"}
    assert summarize([_node("a")], [pod], LOCAL_ID).shareable["cpu"] == milli("2")


def test_terminated_and_unbound_pods_hold_nothing():
    pods = [_pod("a", phase="Succeeded"), _pod("a", phase="Failed"), _pod(None), _pod("elsewhere")]
    assert summarize([_node("a")], pods, LOCAL_ID).shareable["cpu"] == milli("4")


def test_not_ready_cordoned_and_virtual_remote_nodes_are_excluded_but_resources_stay_listed():
    nodes = [
        _node("ready"),
        _node("down", ready="False"),
        _node("unknown", ready="Unknown"),
        _node("cordoned", unschedulable=True),
        _node("virtual", labels={c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE}),
        _node("gpu-down", ready="False", **{"nvidia.com/gpu": "4"}),
    ]
    remote = summarize(nodes, [], LOCAL_ID)
    assert remote.shareable["cpu"] == milli("4")
    assert list(remote.free_by_node) == ["ready"]
    assert remote.schedulable_nodes == 1 and remote.total_nodes == 6
    # The GPU is only on a NotReady node: reported, at zero.
    assert remote.shareable["nvidia.com/gpu"] == 0
    assert not node_is_schedulable(nodes[1])


def test_overcommitted_node_does_not_eat_the_free_room_of_others():
    pods = [_pod("a", cpu="6")]
    remote = summarize([_node("a"), _node("b")], pods, LOCAL_ID)
    assert remote.shareable["cpu"] == milli("4")
    assert remote.free_by_node["a"]["cpu"] == milli("-2")  # clamped later by the annotation


def test_requests_of_resources_the_node_does_not_report_are_ignored():
    pod = _pod("a")
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "3"
    remote = summarize([_node("a")], [pod], LOCAL_ID)
    assert "example.com/foo" not in remote.shareable
    assert "example.com/foo" not in remote.free_by_node["a"]


def test_pressure_conditions_name_the_nodes():
    nodes = [
        _node("a", conditions=[{"type": "MemoryPressure", "status": "True"}]),
        _node("b", conditions=[{"type": "DiskPressure", "status": "False"}]),
    ]
    remote = summarize(nodes, [], LOCAL_ID)
    assert remote.pressure == {"MemoryPressure": ["a"], "DiskPressure": [], "PIDPressure": []}


def test_sharing_percentage_rounds_down():
    shareable = {"cpu": milli("3"), "memory": milli("1001"), "pods": milli("105"), "nvidia.com/gpu": milli("5")}
    scaled = virtual_node_capacity(shareable, 90)
    assert scaled["cpu"] == milli("2700m")  # cpu keeps milli precision
    assert scaled["pods"] == milli("94")  # 94.5 -> 94
    assert scaled["nvidia.com/gpu"] == milli("4")  # 4.5 GPUs -> 4
    assert scaled["memory"] == milli("900")  # 900.9 bytes -> 900


def test_memory_is_rounded_down_to_whole_kibibytes():
    scaled = virtual_node_capacity({"memory": milli("32Gi"), "ephemeral-storage": milli("10Gi")}, 90)
    assert scaled["memory"] % milli("1Ki") == 0
    assert scaled["memory"] <= milli("32Gi") * 9 // 10
    assert milli("32Gi") * 9 // 10 - scaled["memory"] < milli("1Ki")


def test_negative_shareable_is_published_as_zero():
    assert virtual_node_capacity({"cpu": -milli("1")}, 90) == {"cpu": 0}


# --- the capacity annotation ---------------------------------------------------------------
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def _annotation(free, when=NOW):
    return cap.encode_remote_capacity({"a": free}, updated=when)


def test_annotation_rewritten_when_content_changes():
    assert annotation_due(_annotation({"cpu": 1000}), _annotation({"cpu": 2000}), NOW, 60)


def test_annotation_not_rewritten_for_a_new_timestamp_alone():
    old = _annotation({"cpu": 1000}, NOW - timedelta(seconds=10))
    assert not annotation_due(old, _annotation({"cpu": 1000}), NOW, 60)


def test_annotation_restamped_when_old():
    old = _annotation({"cpu": 1000}, NOW - timedelta(seconds=61))
    assert annotation_due(old, _annotation({"cpu": 1000}), NOW, 60)


def test_missing_or_garbage_annotation_is_rewritten():
    assert annotation_due(None, _annotation({"cpu": 1}), NOW, 60)
    assert annotation_due("not json", _annotation({"cpu": 1}), NOW, 60)
    assert json.loads(_annotation({"cpu": 1000}))["v"] == 1
