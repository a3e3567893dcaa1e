"""Handback end to end (docs/virtual-kubelet.md#handback): a Deployment's pod that the
provider refuses for good, or that the remote scheduler cannot place past
``--handback-after``, is evicted from the virtual node, its replacement is kept off that
node by the extender and runs on a local node, and no duplicate remains anywhere.

The refusal is a ResourceQuota in the twin namespace that the pod alone exceeds
(``requested`` above ``limited``), which the provider's ShadowPod webhook meets when it
dry-runs the pod: the ShadowPod create is refused with the quota's words. The scheduler's only choice is made the virtual node by
cordoning the local nodes until the pod was handed back; its replacement, refused the
virtual node by the extender, waits for them.
"""

from __future__ import annotations

import time

from kube_offload import constants as c
from kube_offload import handed_back as handback
from kube_offload.reasons import REASON_HANDED_BACK
from kube_offload_harness.naming import twin_namespace as twin, unique, virtual_node_name
from support.clusters import PAUSE_IMAGE, delete_namespace, offloaded_namespace


def _pods(cluster, namespace: str) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "app=big")["items"]


def _local_nodes(local) -> list[str]:
    nodes = local.kubectl_json("get", "nodes", "-l", f"{c.LABEL_TYPE}!={c.TYPE_VIRTUAL_NODE}")["items"]
    return [n["metadata"]["name"] for n in nodes]


def test_a_pod_the_provider_refuses_for_good_is_handed_back_and_runs_locally(local, remote, wait):
    ns = unique("handback")
    node = virtual_node_name(remote.spec.cluster_id)
    physical = _local_nodes(local)
    assert physical, "the environment has no local node to run the pod"
    offloaded_namespace(local, ns, c.PLACEMENT_LOCAL_AND_REMOTE)
    try:
        wait(lambda: remote.kubectl("get", "namespace", twin(ns), check=False).returncode == 0, timeout=60,
             what="the twin namespace")
        remote.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "small", "namespace": twin(ns)},
                      "spec": {"hard": {"requests.cpu": "100m"}}})
        wait(lambda: remote.kubectl_json("get", "resourcequota", "small", "-n", twin(ns)).get("status", {}).get("used"),
             timeout=30, what="the quota's usage computed")
        for name in physical:
            local.kubectl("cordon", name)
        try:
            # Local nodes cordoned: the virtual node is the scheduler's only choice.
            local.apply({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "big"}},
                    "template": {"metadata": {"labels": {"app": "big"}}, "spec": {
                        "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "500m"}}}],
                        "terminationGracePeriodSeconds": 1,
                    }},
                },
            })

            # The first pod is evicted (within a second of its refusal) with a Warning Event
            # naming the provider's refusal...
            def handed_back_event():
                events = local.kubectl_json("get", "events", "-n", ns)["items"]
                return next((e for e in events if e["reason"] == REASON_HANDED_BACK), None)

            event = wait(handed_back_event, timeout=90, what="the HandedBack Event")
            assert event["type"] == "Warning" and "exceeded quota" in event["message"], event["message"]
            assert node in event["message"]
            evicted = event["involvedObject"]["uid"]
            # ...the workload (its ReplicaSet) is recorded on the virtual node...
            # ...so its replacement is not placed there again, while no local node is open.
            _recorded_and_kept_off(local, ns, node, evicted=evicted, reason="RemoteRefused", wait=wait)
        finally:
            for name in physical:
                local.kubectl("uncordon", name)

        # ...and its replacement runs on a local node; the first pod, its ShadowPod and any remote pod are gone.
        _only_the_replacement_runs_locally(local, remote, ns, evicted=evicted, physical=physical, node=node, wait=wait)
    finally:
        delete_namespace(local, ns)


def _recorded_and_kept_off(local, ns: str, node: str, *, evicted: str, reason: str, wait) -> None:
    """The workload (its ReplicaSet) is recorded on the virtual node with ``reason``, and
    its replacement is not placed there again while no local node is open."""
    [replicaset] = local.kubectl_json("get", "replicasets", "-n", ns)["items"]
    recorded = handback.records_of(local.kubectl_json("get", "node", node))
    assert recorded[replicaset["metadata"]["uid"]].reason == reason, recorded
    replacement = wait(lambda: next((p for p in _pods(local, ns) if p["metadata"]["uid"] != evicted), None),
                       timeout=60, what="the ReplicaSet's replacement pod")
    time.sleep(5)
    current = local.kubectl_json("get", "pod", "-n", ns, replacement["metadata"]["name"])
    assert current["spec"].get("nodeName") != node, "the replacement went back to the virtual node"


def _only_the_replacement_runs_locally(local, remote, ns: str, *, evicted: str, physical: list[str], node: str, wait) -> None:
    """One pod left, the replacement (not the evicted UID), Running on a local node; no
    ShadowPod or pod left in the twin namespace: nothing duplicated, nothing left."""
    def settled():
        items = _pods(local, ns)
        if len(items) != 1 or items[0]["metadata"]["uid"] == evicted:
            return None
        pod = items[0]
        running = pod["spec"].get("nodeName") in physical and pod.get("status", {}).get("phase") == "Running"
        return pod if running else None

    replacement = wait(settled, timeout=120, what="one pod, the replacement, Running on a local node")
    assert replacement["spec"]["nodeName"] != node
    wait(lambda: remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", twin(ns))["items"] == []
         and remote.kubectl_json("get", "pods", "-n", twin(ns))["items"] == [],
         timeout=60, what="no ShadowPod or pod left in the twin namespace")


def _restart_vkubelet(env, local, extra_args=()) -> None:
    """Restart the harness's vkubelet (SIGTERM, then the same argv plus ``extra_args``) and
    wait for its node to be Ready again."""
    topology = env.topology()
    spec = topology.remotes[0]
    env.processes.stop(f"vkubelet-{spec.cluster_id}")
    env.start_vkubelet(topology, spec, extra_args)
    env.wait_virtual_node_ready(local, spec)


def _remote_nodes(remote) -> list[str]:
    return [n["metadata"]["name"] for n in remote.kubectl_json("get", "nodes")["items"]]


def test_a_pod_the_remote_scheduler_cannot_place_is_handed_back_after_the_time_and_runs_locally(
    offload_env, local, remote, wait
):
    """The Unschedulable path (#24 item 3): the remote scheduler cannot place the pod (its
    own node affinity ``<key> DoesNotExist`` holds for the virtual node and the local nodes,
    but every remote node carries ``<key>`` for the test), it stays PodScheduled=False there
    past ``--handback-after`` (5 s here, restarted with it), and is handed back: evicted with
    an Event naming the remote reason, kept off the virtual node, its replacement runs
    locally, and no duplicate remains on either side."""
    ns = unique("handback-unsched")
    key = f"e2e-{ns}"  # a label key only this test uses
    node = virtual_node_name(remote.spec.cluster_id)
    physical = _local_nodes(local)
    assert physical, "the environment has no local node to run the pod"
    remote_nodes = _remote_nodes(remote)
    _restart_vkubelet(offload_env, local, ["--handback-after", "5s"])
    offloaded_namespace(local, ns, c.PLACEMENT_LOCAL_AND_REMOTE)
    try:
        wait(lambda: remote.kubectl("get", "namespace", twin(ns), check=False).returncode == 0, timeout=60,
             what="the twin namespace")
        for name in remote_nodes:
            remote.kubectl("label", "node", name, f"{key}=yes", "--overwrite")
        for name in physical:
            local.kubectl("cordon", name)
        try:
            local.apply({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "big"}},
                    "template": {"metadata": {"labels": {"app": "big"}}, "spec": {
                        "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "10m"}}}],
                        "terminationGracePeriodSeconds": 1,
                        # Kept by translation (the virtual node has no such key), so it is the remote
                        # scheduler's to meet: no remote node can.
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "DoesNotExist"}]}]}}},
                    }},
                },
            })

            # The remote pod exists and is Unschedulable there...
            def remote_unschedulable():
                for pod in remote.kubectl_json("get", "pods", "-n", twin(ns))["items"]:
                    for cond in (pod.get("status") or {}).get("conditions") or []:
                        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                            return pod
                return None

            wait(remote_unschedulable, timeout=90, what="the remote pod Unschedulable in the remote cluster")

            # ...and past --handback-after the local pod is evicted with an Event naming the remote reason.
            def handed_back_event():
                events = local.kubectl_json("get", "events", "-n", ns)["items"]
                return next((e for e in events if e["reason"] == REASON_HANDED_BACK), None)

            event = wait(handed_back_event, timeout=90, what="the HandedBack Event")
            assert event["type"] == "Warning" and node in event["message"], event["message"]
            # The remote scheduler's own words ("0/2 nodes are available: ... node affinity/selector").
            assert f"cluster {remote.spec.cluster_id} could not schedule it" in event["message"], event["message"]
            assert "affinity" in event["message"], event["message"]
            evicted = event["involvedObject"]["uid"]
            _recorded_and_kept_off(local, ns, node, evicted=evicted, reason="RemoteUnschedulable", wait=wait)
        finally:
            for name in physical:
                local.kubectl("uncordon", name)
            for name in remote_nodes:
                remote.kubectl("label", "node", name, f"{key}-", check=False)

        _only_the_replacement_runs_locally(local, remote, ns, evicted=evicted, physical=physical, node=node, wait=wait)
    finally:
        delete_namespace(local, ns)
        _restart_vkubelet(offload_env, local)  # back to the session's default settings
