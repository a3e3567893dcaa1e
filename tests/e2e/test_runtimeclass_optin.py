"""Per-pod opt-in end to end (issue #24 item 2; docs/webhook.md, "Per-pod opt-in"): in a
namespace without any kube-offload label, a pod that names the ``kube-offload``
RuntimeClass runs in the remote cluster (its namespace extended there on demand, the class
stripped from what the provider receives), a pod that does not stays on a local node, and
the twin is withdrawn once no opted-in pod is left. In a namespace labelled
``pod-placement=Local``, the opt-in still sends the pod remote, while the namespace's other
pods stay home.

Everything is real: the local apiserver's RuntimeClass admission applies the class's
scheduling, it calls our webhook through the opt-in entry's CEL match condition, the
scheduler calls our extender, the vkubelet and the provider's enforcer run under their
chart identities.
"""

from __future__ import annotations

from kube_offload import constants as c
from kube_offload_harness.naming import twin_namespace as twin, unique, virtual_node_name
from support.clusters import PAUSE_IMAGE, delete_namespace, get_or_none, offloaded_namespace, running_on


def _pod(namespace: str, name: str, *, opt_in: bool) -> dict:
    spec: dict = {
        "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
        "terminationGracePeriodSeconds": 1,
    }
    if opt_in:
        spec["runtimeClassName"] = c.RUNTIME_CLASS_OPT_IN
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _physical_nodes(local) -> set[str]:
    nodes = local.kubectl_json("get", "nodes", "-l", f"{c.LABEL_TYPE}!={c.TYPE_VIRTUAL_NODE}")["items"]
    return {n["metadata"]["name"] for n in nodes}


def _running_locally(local, namespace: str, name: str, physical: set[str]) -> bool:
    pod = local.kubectl_json("get", "pod", "-n", namespace, name)
    return pod["spec"].get("nodeName") in physical and pod.get("status", {}).get("phase") == "Running"


def test_an_opted_in_pod_of_an_unlabelled_namespace_runs_remotely_the_others_stay_local(local, remote, wait):
    ns = unique("optin")
    node = virtual_node_name(remote.spec.cluster_id)
    physical = _physical_nodes(local)
    assert physical, "the environment has no local node"
    local.kubectl("create", "namespace", ns)
    try:
        local.apply([_pod(ns, "opted", opt_in=True), _pod(ns, "plain", opt_in=False)])

        # What admission made of the opted-in pod: the class's scheduling (RuntimeClass
        # admission) and the webhook's Remote placement, in a namespace it never watched before.
        admitted = local.kubectl_json("get", "pod", "-n", ns, "opted")
        assert admitted["spec"]["nodeSelector"] == {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE}
        terms = admitted["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [
            {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}]}], terms
        assert any(t.get("key") == c.TAINT_KEY for t in admitted["spec"]["tolerations"])

        wait(lambda: running_on(local, ns, "opted", node), timeout=120, what="the opted-in pod Running on the virtual node")
        wait(lambda: _running_locally(local, ns, "plain", physical), timeout=60, what="the other pod Running on a local node")

        # The namespace was extended on demand: its twin, the ShadowPod and the remote pod,
        # none of them carrying our class (the provider has no such class).
        twin_ns = twin(ns)
        shadowpod = get_or_none(remote, "shadowpods.kube-offload.io", twin_ns, "opted")
        assert shadowpod is not None, f"no ShadowPod opted in {twin_ns}"
        assert "runtimeClassName" not in shadowpod["spec"]["pod"]["spec"]
        [remote_pod] = [p for p in remote.kubectl_json("get", "pods", "-n", twin_ns)["items"]
                        if p["metadata"]["annotations"].get(c.ANNOTATION_ORIGIN_NAME) == "opted"]
        assert "runtimeClassName" not in remote_pod["spec"]
        assert remote_pod["status"]["phase"] == "Running"
        # Only the opted-in pod went: nothing stands for the local one.
        assert get_or_none(remote, "shadowpods.kube-offload.io", twin_ns, "plain") is None

        # The last opted-in pod gone, the namespace is no longer extended: the request is
        # withdrawn and the provider deletes the twin.
        local.kubectl("delete", "pod", "-n", ns, "opted", "--wait=false")
        wait(lambda: get_or_none(remote, "namespace", "", twin_ns) is None
             or bool(remote.kubectl_json("get", "namespace", twin_ns)["metadata"].get("deletionTimestamp")),
             timeout=90, what="the twin namespace withdrawn once no opted-in pod is left")
        assert _running_locally(local, ns, "plain", physical)
    finally:
        delete_namespace(local, ns)


def test_opt_in_overrides_local_placement_for_that_pod_only(local, remote, wait):
    ns = unique("optin-local")
    node = virtual_node_name(remote.spec.cluster_id)
    physical = _physical_nodes(local)
    offloaded_namespace(local, ns, c.PLACEMENT_LOCAL)
    try:
        local.apply([_pod(ns, "opted", opt_in=True), _pod(ns, "plain", opt_in=False)])
        wait(lambda: running_on(local, ns, "opted", node), timeout=120, what="the opted-in pod Running on the virtual node")
        wait(lambda: _running_locally(local, ns, "plain", physical), timeout=60, what="the other pod Running on a local node")
        assert get_or_none(remote, "shadowpods.kube-offload.io", twin(ns), "opted") is not None
    finally:
        delete_namespace(local, ns)
