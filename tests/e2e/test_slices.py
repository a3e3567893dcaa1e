"""Issue 24 item 1 end to end: one consumer, two slices of one provider, two virtual nodes.

An environment of this module's own (the session's remote has no node pools): a local
cluster and one remote whose kwok nodes make two pools, ``gpu`` (one node with
nvidia.com/gpu: 4) and ``general`` (one node), beside one node in no pool. The Consumer
(admitted through the remote chart, as ``kube-offload peer`` does) may ask slices of both
pools under a quota of 6 cpu. The local cluster asks for two slices, each served by its
own ``kube-offload vkubelet --slice`` process (the harness's, under the chart's identity):

* ``gpu``     = pool gpu:     cpu=2, memory=4Gi, nvidia.com/gpu=2 -> Accepted;
* ``general`` = pool general: cpu=8, memory=8Gi                   -> PartiallyAccepted:
  the quota leaves 6 - 2 = 4 cpu (the pool's node has 8);
* ``fpga``    = pool fpga (the provider has none): cpu=1           -> Refused (UnknownPool).

Proven here: the provider's answers, the two virtual nodes (named, labelled and sized from
what was accepted; the refused one tainted and offering nothing), pods that land on the
right pool's provider node (the remote pod's nodeName) through the pool's patch, which the
consumer never wrote, and an Event per decision on both sides (issue 41); by-use reflection
counting a slice's pods (the peering's own vkubelet exports what they use and withdraws it
when they go); a claim of the virtual storage class whose pod goes to a slice's node
(reflected by the peering's vkubelet, its stand-in made by the slice's, pinned to that node).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kube_offload import constants as c
from kube_offload.resources import parse_quantity
from kube_offload_harness.cluster import Cluster, ClusterSpec, Environment, NodePool, SliceSpec, default_topology
from kube_offload_harness.naming import unique
from support.clusters import delete_namespace, find, keep_logs, offloaded_namespace
from support.waiting import wait_for
from vkubelet.shared import names as reflection_names

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".artifacts" / "e2e-logs"
LOCAL_ID = "local"
REMOTE_ID = "remote-1"
BASE_NODE = f"{c.VIRTUAL_NODE_PREFIX}{REMOTE_ID}"
GPU = "nvidia.com/gpu"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
GPU_SLICE = SliceSpec("gpu=gpu:cpu=2,memory=4Gi,nvidia.com/gpu=2")
GENERAL_SLICE = SliceSpec("general=general:cpu=8,memory=8Gi")
REFUSED_SLICE = SliceSpec("fpga=fpga:cpu=1")


def slices_topology() -> Any:
    topology = default_topology(prefix="e2e-slices", remotes=1, local_nodes=1, remote_nodes=1, node_cpu="8", node_memory="32Gi")
    remote: ClusterSpec = topology.remotes[0]
    remote.pools = [
        NodePool("gpu", nodes=1, resources={GPU: "4"}, node_labels={"accelerator": "a100"}),
        NodePool("general", nodes=1),
    ]
    remote.quota = {"cpu": "6"}
    remote.slices = [GPU_SLICE, GENERAL_SLICE, REFUSED_SLICE]
    return topology


@pytest.fixture(scope="module")
def slices_env(tmp_path_factory, request) -> Iterator[Environment]:
    env = Environment(tmp_path_factory.mktemp("kube-offload-slices"), say=lambda line: print(line, flush=True))
    failed_before = request.session.testsfailed
    try:
        env.up(slices_topology())
        yield env
    finally:
        if request.session.testsfailed > failed_before or os.environ.get("KUBE_OFFLOAD_KEEP_LOGS"):
            print(f"\nkube-offload e2e: logs kept in {keep_logs(env, ARTIFACTS, control_planes=True)}")
        env.down()


@pytest.fixture(scope="module")
def local(slices_env: Environment) -> Cluster:
    return slices_env.cluster(slices_env.topology().local)


@pytest.fixture(scope="module")
def remote(slices_env: Environment) -> Cluster:
    return slices_env.cluster(slices_env.topology().remotes[0])


def slice_node(name: str) -> str:
    return c.slice_node_name(BASE_NODE, name)


def offload_slice(remote: Cluster, name: str) -> dict[str, Any] | None:
    return find(remote, f"{c.SLICE_PLURAL}.{c.DOMAIN}", name, "-n", c.tenant_namespace(LOCAL_ID))


def decided(remote: Cluster, name: str) -> dict[str, Any]:
    def answer() -> dict[str, Any] | None:
        obj = offload_slice(remote, name)
        status = (obj or {}).get("status") or {}
        return obj if status.get("phase") not in (None, "", c.SLICE_PHASE_PENDING) else None

    return wait_for(answer, what=f"the provider's answer to slice {name}", timeout=60)


def amount(node: dict[str, Any], resource: str) -> int:
    return parse_quantity(node["status"]["allocatable"].get(resource, "0"))


def test_the_provider_accepts_one_slice_and_partly_accepts_the_one_over_quota(remote: Cluster) -> None:
    gpu = decided(remote, "gpu")
    assert gpu["spec"] == {"pool": "gpu", "resources": {"cpu": "2", "memory": "4Gi", GPU: "2"}}
    assert gpu["status"]["phase"] == c.SLICE_PHASE_ACCEPTED, gpu["status"]
    assert {k: parse_quantity(v) for k, v in gpu["status"]["accepted"].items()} == {
        "cpu": 2000, "memory": parse_quantity("4Gi"), GPU: 2000,
    }
    assert gpu["status"]["nodeLabels"] == {"accelerator": "a100"}

    general = decided(remote, "general")
    assert general["status"]["phase"] == c.SLICE_PHASE_PARTIAL, general["status"]
    accepted = {k: parse_quantity(v) for k, v in general["status"]["accepted"].items()}
    assert accepted["cpu"] == 4000, general["status"]  # the quota's 6 less the gpu slice's 2
    assert accepted["memory"] == parse_quantity("8Gi")
    message = general["status"].get("message") or ""
    assert "cpu" in message, f"the message names the resource cut: {message!r}"


def test_each_slice_is_a_virtual_node_sized_and_labelled_from_its_answer(local: Cluster, remote: Cluster) -> None:
    for name in ("gpu", "general"):
        decided(remote, name)

    def node_when_sized(name: str, resource: str, expected: int):
        def check() -> dict[str, Any] | None:
            node = find(local, "node", slice_node(name))
            return node if node and amount(node, resource) == expected else None

        return wait_for(check, what=f"node {slice_node(name)} with {resource}={expected}", timeout=60)

    gpu = node_when_sized("gpu", GPU, 2000)
    assert amount(gpu, "cpu") == 2000 and amount(gpu, "memory") == parse_quantity("4Gi")
    labels = gpu["metadata"]["labels"]
    assert labels[c.LABEL_SLICE] == "gpu"
    assert labels[c.LABEL_CLUSTER_ID] == REMOTE_ID and labels[c.LABEL_TYPE] == c.TYPE_VIRTUAL_NODE
    assert labels["accelerator"] == "a100"  # the pool's suggested label, from the slice's status
    taints = {t["key"] for t in gpu["spec"].get("taints") or []}
    assert c.TAINT_KEY in taints and c.TAINT_SLICE_NOT_ACCEPTED_KEY not in taints

    # Partly accepted: the node offers what was accepted, not what was asked.
    general = node_when_sized("general", "cpu", 4000)
    assert amount(general, "memory") == parse_quantity("8Gi")
    assert amount(general, GPU) == 0
    assert general["metadata"]["labels"][c.LABEL_SLICE] == "general"
    # The peering's own node is still there, and is not a slice.
    base = find(local, "node", BASE_NODE)
    assert base is not None and c.LABEL_SLICE not in base["metadata"]["labels"]


def _pod(name: str, namespace: str, slice_name: str, requests: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": dict(requests)}
    if GPU in requests:
        resources["limits"] = {GPU: requests[GPU]}  # extended resources: limits = requests
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {c.LABEL_SLICE: slice_name},
            "containers": [{"name": "app", "image": IMAGE, "resources": resources}],
        },
    }


def _bound(local: Cluster, namespace: str, name: str) -> str:
    """The node local pod ``name`` is bound to; on a timeout the failure shows the pod as
    ``kubectl describe`` does (the scheduler's message, the Events)."""
    try:
        node: str = wait_for(lambda: (find(local, "pod", name, "-n", namespace) or {}).get("spec", {}).get("nodeName"),
                             what=f"local pod {name} bound", timeout=60)
        return node
    except BaseException:
        described = local.kubectl("describe", "pod", name, "-n", namespace, check=False)
        nodes = local.kubectl("get", "nodes", "-o", "wide", "--show-labels", check=False)
        pytest.fail(f"local pod {name} not bound:\n{described.stdout}{described.stderr}\n{nodes.stdout}")


def _remote_pod(remote: Cluster, twin: str, name: str) -> dict[str, Any] | None:
    pod = find(remote, "pod", name, "-n", twin)
    return pod if pod and (pod.get("spec") or {}).get("nodeName") else None


def test_pods_land_on_their_slice_pool(local: Cluster, remote: Cluster) -> None:
    for name in ("gpu", "general"):
        decided(remote, name)
    namespace = unique("slices")
    offloaded_namespace(local, namespace)
    twin = f"{namespace}-{LOCAL_ID}"
    try:
        local.apply(_pod("trainer", namespace, "gpu", {"cpu": "500m", "memory": "1Gi", GPU: "1"}))
        local.apply(_pod("web", namespace, "general", {"cpu": "1", "memory": "1Gi"}))

        for name, slice_name in (("trainer", "gpu"), ("web", "general")):
            assert _bound(local, namespace, name) == slice_node(slice_name)

        trainer = wait_for(lambda: _remote_pod(remote, twin, "trainer"), what="remote pod trainer scheduled", timeout=90)
        web = wait_for(lambda: _remote_pod(remote, twin, "web"), what="remote pod web scheduled", timeout=90)
        assert trainer["spec"]["nodeName"] == f"{REMOTE_ID}-gpu-node-0"
        assert web["spec"]["nodeName"] == f"{REMOTE_ID}-general-node-0"
        # The pool's patch, added by the provider: the consumer sent no node selector
        # (the slice label was the local scheduler's business, stripped in translation).
        assert trainer["spec"].get("nodeSelector", {}).get("pool") == "gpu"
        assert trainer["metadata"]["labels"][c.LABEL_SLICE] == "gpu"
        shadowpod = find(remote, f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}", "trainer", "-n", twin) or {}
        sent = ((shadowpod.get("spec") or {}).get("pod") or {}).get("spec") or {}
        assert "pool" not in (sent.get("nodeSelector") or {}), json.dumps(sent.get("nodeSelector"))
        assert shadowpod["metadata"]["labels"][c.LABEL_SLICE] == "gpu"

        # Each pod's local status comes from its own slice's vkubelet.
        for name in ("trainer", "web"):
            wait_for(lambda n=name: (find(local, "pod", n, "-n", namespace) or {}).get("status", {}).get("phase") == "Running",
                     what=f"local pod {name} Running", timeout=90)

        # Each slice's vkubelet reflects its own pods' service-account tokens, labelled
        # with the slice, and selects only its own: neither (nor the peering's own
        # vkubelet) deletes the other's as an orphan (docs/slices.md).
        def token_secrets() -> dict[str, str]:
            found = {}
            for name in ("trainer", "web"):
                secret = find(remote, "secret", reflection_names.token_secret_name(name), "-n", twin)
                if secret:
                    found[name] = secret["metadata"]["labels"].get(c.LABEL_SLICE, "")
            return found

        expected = {"trainer": "gpu", "web": "general"}
        wait_for(lambda: token_secrets() == expected, what="the token Secrets of both slices' pods", timeout=60)
        time.sleep(5)  # a deletion by another process would follow its watch event at once
        assert token_secrets() == expected
    finally:
        delete_namespace(local, namespace)


def test_a_refused_slices_node_is_tainted_and_offers_nothing(local: Cluster, remote: Cluster) -> None:
    fpga = decided(remote, "fpga")
    assert fpga["status"]["phase"] == c.SLICE_PHASE_REFUSED and fpga["status"]["reason"] == "UnknownPool", fpga["status"]

    def tainted() -> dict[str, Any] | None:
        node = find(local, "node", slice_node("fpga"))
        taints = {(t["key"], t["effect"]) for t in ((node or {}).get("spec") or {}).get("taints") or []}
        return node if (c.TAINT_SLICE_NOT_ACCEPTED_KEY, c.TAINT_SLICE_NOT_ACCEPTED_EFFECT) in taints else None

    node = wait_for(tainted, what=f"node {slice_node('fpga')} tainted {c.TAINT_SLICE_NOT_ACCEPTED_KEY}", timeout=60)
    assert amount(node, "pods") == 0 and amount(node, "cpu") == 0, node["status"]["allocatable"]
    assert node["metadata"]["labels"][c.LABEL_SLICE] == "fpga"


# (slice, Event reason, Event type) for each decision of this module's provider.
DECISIONS = [("gpu", "SliceAccepted", "Normal"), ("general", "SlicePartiallyAccepted", "Warning"),
             ("fpga", "SliceRefused", "Warning")]


def _events(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.kind={kind},involvedObject.name={name}")["items"]
    return items


@pytest.mark.parametrize("slice_name, reason, event_type", DECISIONS)
def test_each_slice_decision_is_an_event_on_the_offloadslice_and_on_its_node(
        local: Cluster, remote: Cluster, slice_name: str, reason: str, event_type: str) -> None:
    """Issue 41: a slice's decision wrote no Event. The enforcer writes one on the
    OffloadSlice (provider), the slice's vkubelet one on its node (consumer), both where
    ``kubectl describe`` shows them."""
    decided(remote, slice_name)
    tenant = c.tenant_namespace(LOCAL_ID)
    node = slice_node(slice_name)

    def event(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        return next((e for e in _events(cluster, namespace, kind, name) if e["reason"] == reason), None)

    provider = wait_for(lambda: event(remote, tenant, c.SLICE_KIND, slice_name),
                        what=f"a {reason} Event on OffloadSlice {slice_name}", timeout=60)
    consumer = wait_for(lambda: event(local, "default", "Node", node), what=f"a {reason} Event on node {node}", timeout=60)
    for seen in (provider, consumer):
        assert seen["type"] == event_type, seen
        assert seen["message"].startswith(f"slice {slice_name} (pool "), seen["message"]
    if slice_name == "general":
        assert "cpu: asked 8, accepted 4" in provider["message"] and "cpu: asked 8, accepted 4" in consumer["message"]
    # One per decision: the slice was decided once, whatever the passes since.
    assert [e["reason"] for e in _events(remote, tenant, c.SLICE_KIND, slice_name)].count(reason) == 1
    assert provider.get("count", 1) == 1, provider
    # Where users look: `kubectl describe` finds them by the object's uid.
    described = remote.kubectl("describe", f"{c.SLICE_PLURAL}.{c.DOMAIN}", slice_name, "-n", tenant).stdout
    assert reason in described, described
    described = local.kubectl("describe", "node", node).stdout
    assert reason in described, described


def _restart_peering_vkubelet(env: Environment, local: Cluster, extra_args: list[str]) -> None:
    """The peering's own vkubelet again, with ``extra_args`` (its slices' keep running)."""
    topology = env.topology()
    spec = topology.remotes[0]
    env.processes.stop(f"vkubelet-{spec.cluster_id}")
    env.start_vkubelet(topology, spec, extra_args)
    env.wait_virtual_node_ready(local, spec)


def _ours(obj: dict[str, Any] | None) -> bool:
    return bool(obj) and (obj or {}).get("metadata", {}).get("labels", {}).get(c.LABEL_ORIGIN_CLUSTER_ID) == LOCAL_ID


def test_by_use_reflection_exports_what_a_slice_pod_uses(slices_env: Environment, local: Cluster, remote: Cluster) -> None:
    """ConfigMaps are the peering's, reflected by its own vkubelet only: under by-use it
    exports what the pods of its slices' nodes use too, and withdraws it when they go."""
    decided(remote, "general")
    namespace = unique("slices-by-use")
    offloaded_namespace(local, namespace)
    twin = f"{namespace}-{LOCAL_ID}"
    try:
        _restart_peering_vkubelet(slices_env, local, ["--reflect-configmaps-policy", "by-use"])
        for name in ("slice-used", "unused"):
            local.kubectl("create", "configmap", name, "-n", namespace, f"--from-literal=k={name}")
        pod = _pod("reader", namespace, "general", {"cpu": "100m", "memory": "64Mi"})
        pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "slice-used"}}]
        local.apply(pod)
        assert _bound(local, namespace, "reader") == slice_node("general")

        copy = wait_for(lambda: (cm := find(remote, "configmap", "slice-used", "-n", twin)) and _ours(cm) and cm,
                        what="the ConfigMap a slice's pod uses, exported", timeout=90)
        assert copy["data"] == {"k": "slice-used"}
        assert find(remote, "configmap", "unused", "-n", twin) is None, "no pod uses it: not exported under by-use"
        wait_for(lambda: (find(local, "pod", "reader", "-n", namespace) or {}).get("status", {}).get("phase") == "Running",
                 what="the slice's pod Running", timeout=90)

        # The slice's pod goes: what only it used is withdrawn.
        local.kubectl("delete", "pod", "reader", "-n", namespace, "--wait=false")
        wait_for(lambda: find(remote, "configmap", "slice-used", "-n", twin) is None,
                 what="the ConfigMap withdrawn once no pod uses it", timeout=90)
    finally:
        _restart_peering_vkubelet(slices_env, local, [])  # as the harness started it
        delete_namespace(local, namespace)


def test_a_claim_of_the_virtual_storage_class_follows_its_pod_to_a_slice(local: Cluster, remote: Cluster) -> None:
    """The virtual storage class on a slice's node: the peering's own vkubelet reflects the
    claim selected for the slice's node, the slice's vkubelet makes its stand-in, pinned to
    that node, and the pod runs there with its remote claim."""
    decided(remote, "general")
    namespace = unique("slices-storage")
    offloaded_namespace(local, namespace)
    twin = f"{namespace}-{LOCAL_ID}"
    node = slice_node("general")
    try:
        local.apply({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": namespace},
            "spec": {"storageClassName": c.DEFAULT_VIRTUAL_STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        })
        pod = _pod("db", namespace, "general", {"cpu": "100m", "memory": "64Mi"})
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        local.apply(pod)

        claim = wait_for(lambda: (pvc := find(local, "pvc", "data", "-n", namespace)) and pvc.get("status", {}).get("phase") == "Bound"
                         and pvc, what="the local claim Bound to a stand-in", timeout=120)
        volume = find(local, "pv", claim["spec"]["volumeName"]) or {}
        labels = volume["metadata"]["labels"]
        assert labels[c.LABEL_VOLUME_LOCATION] == c.VOLUME_LOCATION_REMOTE and labels[c.LABEL_SLICE] == "general", labels
        assert volume["metadata"]["annotations"][c.ANNOTATION_REMOTE_CLAIM] == f"{twin}/data"
        [term] = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]} in term["matchExpressions"]
        assert _ours(find(remote, "pvc", "data", "-n", twin)), "the claim is reflected by the peering's own vkubelet"
        assert _bound(local, namespace, "db") == node
        wait_for(lambda: (find(local, "pod", "db", "-n", namespace) or {}).get("status", {}).get("phase") == "Running",
                 what="the slice's pod Running with its remote claim", timeout=120)
        remote_pod = wait_for(lambda: _remote_pod(remote, twin, "db"), what="remote pod db scheduled", timeout=30)
        assert remote_pod["spec"]["nodeName"] == f"{REMOTE_ID}-general-node-0"
    finally:
        delete_namespace(local, namespace)
