"""A provider drains its consumer, end to end on the shared loopback environment
(conftest.py): ``kube-offload drain`` against the provider's API server sets Consumer
spec.drain; the consumer's vkubelet taints its virtual node NoExecute, the consumer's own
taint manager evicts the Deployment's offloaded pod and the ReplicaSet recreates it on a
local node; nothing of the consumer is left on the provider (no ShadowPod, no pod) and the
command reports ``Drained``. ``kube-offload undrain`` lifts it all: the taint goes and a new
pod is offloaded again. A drained consumer that is over quota too is refused for the drain.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.naming import twin_namespace as twin, unique, virtual_node_name
from support.clusters import delete_namespace, deployment, offloaded_namespace, patch_consumer

TIMEOUT = 90
GRACE = "45s"


def _kube_offload(remote: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kube_offload.cli", *args, "--kubeconfig", str(remote.kubeconfig)],
        capture_output=True, text=True, timeout=300, check=False,
    )


def _taint_keys(local: Cluster, node: str) -> set[str]:
    return {t.get("key") for t in local.kubectl_json("get", "node", node).get("spec", {}).get("taints") or []}


def _pods(cluster: Cluster, ns: str, selector: str = "") -> list[dict]:
    args = ["get", "pods", "-n", ns] + (["-l", selector] if selector else [])
    return [p for p in cluster.kubectl_json(*args)["items"] if not p["metadata"].get("deletionTimestamp")]


def _items(cluster: Cluster, kind: str, ns: str) -> list[dict]:
    result = cluster.kubectl("get", kind, "-n", ns, "-o", "json", check=False)
    if result.returncode != 0:
        return []  # the twin namespace itself may be gone
    items: list[dict] = json.loads(result.stdout)["items"]
    return items


def test_a_drained_consumer_comes_home_and_undrain_lets_it_offload_again(offload_env, local, remote, wait):
    consumer = offload_env.topology().local.cluster_id
    vnode = virtual_node_name(remote.spec.cluster_id)
    home = unique("drain-home")  # LocalAndRemote: its pod may run on either side
    away = unique("drain-away")  # Remote only: proves offloading works again after undrain
    unknown = _kube_offload(remote, "drain", "nobody-here")
    assert unknown.returncode == 2 and "no Consumer 'nobody-here'" in unknown.stderr and consumer in unknown.stderr, unknown.stderr
    offloaded_namespace(local, home, c.PLACEMENT_LOCAL_AND_REMOTE)
    offloaded_namespace(local, away, c.PLACEMENT_REMOTE)
    try:
        # The local nodes cordoned for a moment, so the Deployment's first pod goes remote.
        local_nodes = [n["metadata"]["name"] for n in local.kubectl_json("get", "nodes")["items"]
                       if n["metadata"]["name"] != vnode
                       and (n["metadata"].get("labels") or {}).get(c.LABEL_TYPE) != c.TYPE_VIRTUAL_NODE]
        assert local_nodes, "the shared environment has local nodes"
        for node in local_nodes:
            local.kubectl("cordon", node)
        try:
            deployment(local, home, "web", 1)
            wait(lambda: [p for p in _pods(local, home, "app=web") if p["spec"].get("nodeName") == vnode
                          and p.get("status", {}).get("phase") == "Running"],
                 timeout=TIMEOUT, what="the Deployment's pod Running on the virtual node")
            wait(lambda: _pods(remote, twin(home)), timeout=TIMEOUT, what="its remote pod")
        finally:
            for node in local_nodes:
                local.kubectl("uncordon", node)

        result = _kube_offload(remote, "drain", consumer, "--grace", GRACE)
        assert result.returncode == 0, result.stderr
        assert "spec.drain set" in result.stdout and "Drained" in result.stdout, result.stdout
        assert c.TAINT_PROVIDER_DRAINING_KEY in _taint_keys(local, vnode)
        consumer_obj = remote.kubectl_json("get", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", consumer)
        assert consumer_obj["status"]["drain"]["phase"] == "Drained"

        # Nothing of the consumer is left on the provider; its pod runs at home.
        wait(lambda: not _items(remote, "shadowpods", twin(home)) and not _items(remote, "pods", twin(home)),
             timeout=TIMEOUT, what="no ShadowPod or pod of the consumer left on the provider")
        back = wait(lambda: [p for p in _pods(local, home, "app=web") if p["spec"].get("nodeName") in local_nodes
                             and p.get("status", {}).get("phase") == "Running"],
                    timeout=TIMEOUT, what="the Deployment's pod Running on a local node")
        assert len(back) == 1

        # A new pod for the provider is refused while drained: it waits (untolerated taint).
        local.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after", "namespace": away},
                     "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                              "terminationGracePeriodSeconds": 1}})

        def unschedulable():
            pod = local.kubectl_json("get", "pod", "after", "-n", away)
            return [cond for cond in (pod.get("status") or {}).get("conditions") or []
                    if cond["type"] == "PodScheduled" and cond["status"] == "False"]

        wait(unschedulable, timeout=TIMEOUT, what="a new pod held back while the consumer is drained")

        result = _kube_offload(remote, "undrain", consumer)
        assert result.returncode == 0, result.stderr
        assert "spec.drain removed" in result.stdout, result.stdout
        wait(lambda: c.TAINT_PROVIDER_DRAINING_KEY not in _taint_keys(local, vnode), timeout=TIMEOUT,
             what=f"the drain taint gone from {vnode}")
        wait(lambda: [p for p in _pods(local, away) if p["spec"].get("nodeName") == vnode
                      and p.get("status", {}).get("phase") == "Running"],
             timeout=TIMEOUT, what="a new pod offloaded and Running once undrained")
        assert _pods(remote, twin(away)), "its remote pod runs on the provider"
    finally:
        _kube_offload(remote, "undrain", consumer)
        delete_namespace(local, home)
        delete_namespace(local, away)


def _a_drained_consumer_over_quota_is_told_about_the_drain(offload_env, remote: Cluster, consumer: str, twin_ns: str) -> None:
    """Over quota as well (it asks 2 cpu of a quota of 1, whatever else runs): the provider's
    refusal names the drain, which freeing quota would not end (docs/enforcer.md, rule 10
    before 11)."""
    body = shadowpod.build_shadowpod(
        name="one-more", namespace=twin_ns, pod_metadata={"labels": {"app": "one-more"}},
        pod_spec={"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                  "resources": {"requests": {"cpu": "2"}}}]},
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: consumer},
        origin_annotations={c.ANNOTATION_ORIGIN_NAMESPACE: "x", c.ANNOTATION_ORIGIN_NAME: "one-more", c.ANNOTATION_ORIGIN_UID: "u"},
    )
    as_consumer = offload_env.identity_kubeconfig(remote, identities.consumer_sa(consumer))
    patch_consumer(remote, consumer, {"quota": {**identities.E2E_QUOTA, "cpu": "1"}})
    try:
        time.sleep(3)  # the webhook's Consumer cache takes the new quota (a watch event away)
        result = remote.kubectl_as(as_consumer, "create", "-f", "-", input=json.dumps(body))
    finally:
        patch_consumer(remote, consumer, {"quota": dict(identities.E2E_QUOTA)})
    assert result.returncode != 0, result.stdout
    assert f'consumer "{consumer}" is drained by the provider: no new ShadowPods are admitted' in result.stderr, result.stderr
    assert "exceeded quota" not in result.stderr, result.stderr


def test_a_pod_that_will_not_leave_is_deleted_on_the_provider_when_the_grace_ends(offload_env, local, remote, wait):
    # A consumer that does not cooperate: its pod tolerates the drain taint (the toleration
    # is the user's own; the vkubelet never sends it to the provider), so its own cluster
    # never evicts it. The provider's enforcer deletes the ShadowPod once the grace ends.
    consumer = offload_env.topology().local.cluster_id
    vnode = virtual_node_name(remote.spec.cluster_id)
    ns = unique("drain-stay")
    offloaded_namespace(local, ns, c.PLACEMENT_REMOTE)
    try:
        local.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stubborn", "namespace": ns},
                     "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                              "terminationGracePeriodSeconds": 1,
                              "tolerations": [{"key": c.TAINT_PROVIDER_DRAINING_KEY, "operator": "Exists", "effect": "NoExecute"}]}})
        wait(lambda: [p for p in _pods(local, ns) if p["spec"].get("nodeName") == vnode
                      and p.get("status", {}).get("phase") == "Running"],
             timeout=TIMEOUT, what="the pod Running on the virtual node")
        wait(lambda: _items(remote, "shadowpods", twin(ns)), timeout=TIMEOUT, what="its ShadowPod")

        result = _kube_offload(remote, "drain", consumer, "--grace", "20s", "--no-wait")
        assert result.returncode == 0, result.stderr
        # Within the grace the pod stays where it is (its toleration), and so does its ShadowPod.
        wait(lambda: c.TAINT_PROVIDER_DRAINING_KEY in _taint_keys(local, vnode), timeout=TIMEOUT, what="the drain taint")
        phase = wait(lambda: (remote.kubectl_json("get", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", consumer)
                              .get("status", {}).get("drain") or {}).get("phase"), timeout=TIMEOUT, what="the drain's phase")
        assert phase == "Draining"
        assert _items(remote, "shadowpods", twin(ns))
        _a_drained_consumer_over_quota_is_told_about_the_drain(offload_env, remote, consumer, twin(ns))

        wait(lambda: not _items(remote, "shadowpods", twin(ns)) and not _items(remote, "pods", twin(ns)),
             timeout=TIMEOUT, what="its ShadowPod and pod deleted by the provider after the grace")
        wait(lambda: (remote.kubectl_json("get", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", consumer)
                      .get("status", {}).get("drain") or {}).get("phase") == "Drained", timeout=TIMEOUT, what="Drained")
        events = remote.kubectl_json("get", "events", "-n", "default",
                                     "--field-selector", f"involvedObject.name={consumer},reason=DrainGraceExpired")["items"]
        assert any("stubborn" in e.get("message", "") for e in events), events
    finally:
        _kube_offload(remote, "undrain", consumer)
        delete_namespace(local, ns)
