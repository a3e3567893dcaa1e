"""The enforcer's informer transforms keep what their readers use, and nothing else."""

from __future__ import annotations

import copy
import json

import pytest

from enforcer.consumers.trim import content_changed, trim_namespace, trim_node, trim_pod
from kube_offload import constants as c
from kube_offload.remote_resources import summarize
from kube_offload.resources import pod_requests


def full_pod(name: str, node: str, *, origin: str | None = None, phase: str = "Running", **spec_extra) -> dict:
    labels = {"app": "web", "pod-template-hash": "abc"}
    if origin:
        labels[c.LABEL_ORIGIN_CLUSTER_ID] = origin
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": labels,
            "annotations": {"big": "x" * 500},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "env": [{"name": "A", "value": "b" * 200}],
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1"}},
                }
            ],
            "initContainers": [
                {"name": "sidecar", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "init", "image": "y", "resources": {"requests": {"cpu": "2"}}},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
            **spec_extra,
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"},
    }


def full_node(name: str, *, ready: str = "True", virtual: bool = False, unschedulable: bool = False) -> dict:
    labels = {"kubernetes.io/hostname": name, "zone": "a"}
    if virtual:
        labels[c.LABEL_TYPE] = c.TYPE_VIRTUAL_NODE
    return {
        "metadata": {"name": name, "resourceVersion": "3", "labels": labels, "managedFields": [{}]},
        "spec": {"unschedulable": unschedulable, "podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-01-01T00:00:00Z", "message": "ok"},
                {"type": "MemoryPressure", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
            ],
            "images": [{"names": ["nginx"], "sizeBytes": 1}],
        },
    }


PODS = [
    full_pod("a", "n1"),
    full_pod("b", "n1", origin="local"),
    full_pod("c", "n2", phase="Succeeded"),
    full_pod("d", "n2", overhead={"cpu": "50m"}, resources={"requests": {"memory": "1Gi"}}),
    full_pod("e", "n3"),
    full_pod("bad", "n1", containers=[{"name": "x", "resources": {"requests": {"cpu": "lots"}}}]),
]
NODES = [full_node("n1"), full_node("n2"), full_node("n3", ready="False"), full_node("v", virtual=True),
         full_node("cordoned", unschedulable=True)]


@pytest.mark.parametrize("pod", PODS[:-1], ids=lambda p: p["metadata"]["name"])
def test_trimmed_pod_has_the_same_requests(pod):
    assert pod_requests(trim_pod(copy.deepcopy(pod))) == pod_requests(pod)


@pytest.mark.parametrize("consumer", ["local", "other"])
def test_summary_of_trimmed_objects_is_the_summary_of_full_ones(consumer):
    trimmed_nodes = [trim_node(copy.deepcopy(n)) for n in NODES]
    trimmed_pods = [trim_pod(copy.deepcopy(p)) for p in PODS]
    assert summarize(trimmed_nodes, trimmed_pods, consumer) == summarize(NODES, PODS, consumer)


def test_trimmed_objects_are_much_smaller():
    # Real objects shrink far more (managedFields, env, images); these fixtures are small.
    # A node keeps its labels (the pools of resource slices select on them): in this small
    # fixture they are a third of it, on a real node (images, nodeInfo, managedFields) little.
    for full, trim, ratio in ((PODS[0], trim_pod, 2.0), (NODES[0], trim_node, 1.9)):
        assert len(json.dumps(trim(copy.deepcopy(full)))) * ratio < len(json.dumps(full))


def test_trimmed_pod_keeps_exactly_what_the_summary_reads():
    trimmed = trim_pod(copy.deepcopy(full_pod("b", "n1", origin="local")))
    assert trimmed["metadata"] == {
        "name": "b", "namespace": "ns", "uid": "uid-b", "resourceVersion": "7",
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
    }
    assert trimmed["status"] == {"phase": "Running"}
    assert trimmed["spec"]["containers"] == [{"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]
    assert trimmed["spec"]["initContainers"][0] == {
        "name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}


def test_trimmed_node_drops_heartbeats():
    trimmed = trim_node(copy.deepcopy(NODES[0]))
    assert trimmed["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "True"}]
    # Every label: the virtual-node type, and what the pools of resource slices select on.
    assert trimmed["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert trim_node(copy.deepcopy(NODES[3]))["metadata"]["labels"][c.LABEL_TYPE] == c.TYPE_VIRTUAL_NODE


def test_trimmed_namespace_keeps_labels_and_our_annotations():
    ns = {
        "metadata": {
            "name": "demo-local", "uid": "u", "resourceVersion": "1",
            "labels": {c.LABEL_MANAGED_BY: "enforcer", "x": "y"},
            "annotations": {c.ANNOTATION_TWIN_REQUEST: "t/demo-local", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{}],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Terminating"},
    }
    assert trim_namespace(ns) == {
        "metadata": {
            "name": "demo-local", "uid": "u", "resourceVersion": "1", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {c.LABEL_MANAGED_BY: "enforcer", "x": "y"},
            "annotations": {c.ANNOTATION_TWIN_REQUEST: "t/demo-local"},
        },
        "status": {"phase": "Terminating"},
    }


def test_content_changed_ignores_resource_version_only():
    old = trim_node(copy.deepcopy(NODES[0]))
    heartbeat = copy.deepcopy(NODES[0])
    heartbeat["metadata"]["resourceVersion"] = "4"
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:01:00Z"
    assert not content_changed(old, trim_node(heartbeat))
    cordoned = copy.deepcopy(heartbeat)
    cordoned["spec"]["unschedulable"] = True
    assert content_changed(old, trim_node(cordoned))
    assert content_changed(None, old)
