"""Issue 12, item 4: ``kubectl top`` on offloaded pods and on the virtual node shows the
remote cluster's figures.

The chain under test, all real processes on loopback: kwok in the remote cluster simulates
the pods' usage (their ``kwok.x-k8s.io/usage-*`` annotations) and serves it as kubelet
resource metrics; the remote metrics-server scrapes it and serves ``metrics.k8s.io``; the
virtual kubelet lists the PodMetrics of its twin namespaces as the consumer (the chart's
twin role), integrates them into cumulative counters and serves ``/metrics/resource`` and
``/stats/summary``; the local metrics-server scrapes the virtual node there with its own
ServiceAccount token (TokenReview + SubjectAccessReview ``get nodes/metrics`` on the local
apiserver) and ``kubectl top`` reads the local ``metrics.k8s.io``.

metrics-server runs for this module only (harness/kube_offload_harness/metrics_server.py):
it is unregistered before it stops, so no other test meets an unavailable APIService.
"""

from __future__ import annotations

import http.client
import json
import ssl
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_offload import constants as C
from kube_offload.resources import parse_quantity
from kube_offload_harness import metrics_server
from vkubelet.twins.naming import twin_namespace_name
from support.clusters import offloaded_namespace
from support.top import close, top
from support.top import metrics_servers as running_metrics_servers

VIRTUAL_NODE = f"{C.VIRTUAL_NODE_PREFIX}remote-1"
# name -> (containers, cpu and memory each container uses): kwok applies the annotations
# to every container of the pod.
PODS = {
    "worker": (("app", "sidecar"), "250m", "64Mi"),
    "light": (("app",), "100m", "32Mi"),
}
FOREIGN_USAGE = ("2", "1Gi")  # large enough to show up in any sum it leaked into
SETTLE = 150  # two metrics-server resolutions at each end, plus sampling, on a shared machine


def pod_manifest(name: str, namespace: str, containers, cpu: str, memory: str, **meta) -> dict:
    annotations = {metrics_server.USAGE_CPU_ANNOTATION: cpu, metrics_server.USAGE_MEMORY_ANNOTATION: memory}
    annotations.update(meta.pop("annotations", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations, **meta},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
    }


@pytest.fixture(scope="module")
def metrics_servers(offload_env, local, remote):
    with running_metrics_servers(offload_env, remote, local):
        yield


@pytest.fixture(scope="module")
def offloaded(local, remote, offload_env, wait, metrics_servers):
    """Two offloaded pods Running on the virtual node, a pod of another namespace of the
    remote cluster, and a pod in the twin namespace that forges our origin label and
    annotations without being our ShadowPod's. Yields (local ns, twin ns, foreign ns)."""
    namespace = f"top-{uuid.uuid4().hex[:8]}"
    offloaded_namespace(local, namespace)
    local.apply([pod_manifest(name, namespace, *spec) for name, spec in PODS.items()])

    def all_running():
        pods = local.kubectl_json("get", "pods", "-n", namespace)["items"]
        return len(pods) == len(PODS) and all(
            p["spec"].get("nodeName") == VIRTUAL_NODE and p.get("status", {}).get("phase") == "Running" for p in pods
        )

    wait(all_running, timeout=120, what=f"pods of {namespace} Running on {VIRTUAL_NODE}")
    twin = twin_namespace_name(namespace, offload_env.topology().local.cluster_id)
    foreign = f"foreign-{uuid.uuid4().hex[:8]}"
    remote.kubectl("create", "namespace", foreign)
    worker = local.kubectl_json("get", "pod", "-n", namespace, "worker")["metadata"]
    remote.apply([
        pod_manifest("foreign", foreign, ("app",), *FOREIGN_USAGE),
        # Everything an outsider can copy: our origin label and the annotations naming the
        # local pod (UID included). Only the ShadowPod ownership is missing.
        pod_manifest("intruder", twin, ("app",), *FOREIGN_USAGE,
                     labels={C.LABEL_ORIGIN_CLUSTER_ID: offload_env.topology().local.cluster_id},
                     annotations={C.ANNOTATION_ORIGIN_NAMESPACE: namespace, C.ANNOTATION_ORIGIN_NAME: "worker",
                                  C.ANNOTATION_ORIGIN_UID: worker["uid"]}),
    ])
    yield namespace, twin, foreign
    remote.kubectl("delete", "namespace", foreign, "--wait=false", check=False)
    remote.kubectl("delete", "pod", "-n", twin, "intruder", "--wait=false", check=False)
    local.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def expected_pod(name: str) -> tuple[int, int]:
    containers, cpu, memory = PODS[name]
    return len(containers) * parse_quantity(cpu), len(containers) * parse_quantity(memory) // 1000


@pytest.fixture(scope="module")
def kubelet(offload_env, local, metrics_servers):
    """GET on the virtual node's kubelet API, straight to its port (the apiserver's node
    proxy refuses loopback node addresses), verified against the harness CA: /metrics/...
    with metrics-server's own token (its RBAC grants get nodes/metrics), /stats/... with the
    apiserver's kubelet client certificate (system:kubelet-api-admin)."""
    port = offload_env.topology().remotes[0].kubelet_port
    pki = offload_env.pki_dir
    token = local.kubectl("create", "token", metrics_server.NAME, "-n", metrics_server.NAMESPACE).stdout.strip()

    def get(path: str) -> str:
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        headers = {}
        if path.startswith("/metrics/"):
            headers["Authorization"] = f"Bearer {token}"
        else:
            context.load_cert_chain(pki / "apiserver-kubelet-client.crt", pki / "apiserver-kubelet-client.key")
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        assert response.status == 200, (path, response.status, body)
        return body

    return get


def test_kubectl_top_pod_shows_the_remote_metrics_servers_figures(local, remote, offloaded, wait):
    namespace, twin, _ = offloaded
    remote_rows = wait(lambda: (rows := top(remote, "pod", "-n", twin)) and set(PODS) <= set(rows) and rows,
                       timeout=SETTLE, what=f"kubectl top pod -n {twin} in the remote cluster")
    local_rows = wait(lambda: (rows := top(local, "pod", "-n", namespace)) and set(rows) == set(PODS) and rows,
                      timeout=SETTLE, what=f"kubectl top pod -n {namespace} in the local cluster")
    for name in PODS:
        assert close(remote_rows[name][0], expected_pod(name)[0]), (name, remote_rows)  # kwok simulates what we asked
        assert close(local_rows[name][0], remote_rows[name][0]), (name, local_rows, remote_rows)
        assert local_rows[name][1] == remote_rows[name][1] == expected_pod(name)[1]


def test_kubectl_top_pod_containers(local, offloaded, wait):
    namespace, _, _ = offloaded
    rows = wait(lambda: (found := top(local, "pod", "-n", namespace, "--containers")) and len(found) == 3 and found,
                timeout=SETTLE, what="kubectl top pod --containers")
    for name, (containers, cpu, memory) in PODS.items():
        for container in containers:
            assert close(rows[f"{name}/{container}"][0], parse_quantity(cpu)), rows
            assert rows[f"{name}/{container}"][1] == parse_quantity(memory) // 1000


def test_kubectl_top_node_of_the_virtual_node_is_the_sum_of_its_pods(local, offloaded, wait, kubelet):
    node = wait(lambda: (rows := top(local, "node", VIRTUAL_NODE)) and rows.get(VIRTUAL_NODE),
                timeout=SETTLE, what=f"kubectl top node {VIRTUAL_NODE}")
    ours_cpu = sum(expected_pod(name)[0] for name in PODS)
    ours_memory = sum(expected_pod(name)[1] for name in PODS)
    # Other tests' offloaded pods may share the node (kwok gives them 1m / 1Mi a container).
    assert node[0] >= ours_cpu - 5 and node[1] >= ours_memory
    summary = json.loads(kubelet("/stats/summary"))
    pods_cpu = sum(p["cpu"]["usageNanoCores"] for p in summary["pods"]) // 1_000_000
    pods_memory = sum(p["memory"]["workingSetBytes"] for p in summary["pods"])
    assert summary["node"]["nodeName"] == VIRTUAL_NODE
    assert summary["node"]["memory"]["workingSetBytes"] == pods_memory
    assert close(summary["node"]["cpu"]["usageNanoCores"] // 1_000_000, pods_cpu)
    assert close(node[0], pods_cpu, slack=5) and node[1] == pods_memory


def test_nothing_but_the_offloaded_pods_is_exposed(local, remote, offloaded, wait, kubelet):
    namespace, twin, foreign = offloaded
    # The remote metrics-server does measure the foreign and the forged pods: the data to
    # leak exists.
    wait(lambda: (rows := top(remote, "pod", "-n", foreign)) and "foreign" in rows, timeout=SETTLE,
         what="the foreign pod in the remote metrics API")
    wait(lambda: (rows := top(remote, "pod", "-n", twin)) and "intruder" in rows, timeout=SETTLE,
         what="the forged pod in the remote metrics API")
    wait(lambda: (rows := top(local, "pod", "-n", namespace)) and set(rows) == set(PODS), timeout=SETTLE,
         what="the offloaded pods in the local metrics API")
    text = kubelet("/metrics/resource")
    exported = {
        (s.labels.get("namespace"), s.labels.get("pod"))
        for family in text_string_to_metric_families(text) for s in family.samples if "pod" in s.labels
    }
    assert {(namespace, name) for name in PODS} <= exported
    assert all(ns != foreign and ns != twin for ns, _ in exported), exported
    assert not {pod for _, pod in exported} & {"foreign", "intruder"}
    summary = json.loads(kubelet("/stats/summary"))
    assert not {p["podRef"]["name"] for p in summary["pods"]} & {"foreign", "intruder"}
    worker = [p for p in summary["pods"] if p["podRef"] == {
        "namespace": namespace, "name": "worker", "uid": local.kubectl_json("get", "pod", "-n", namespace, "worker")["metadata"]["uid"]}]
    assert len(worker) == 1 and close(worker[0]["cpu"]["usageNanoCores"] // 1_000_000, expected_pod("worker")[0])
    everything = json.loads(local.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods").stdout)
    assert not {i["metadata"]["name"] for i in everything["items"]} & {"foreign", "intruder"}


def counters(kubelet) -> dict[tuple, float]:
    found = {}
    for family in text_string_to_metric_families(kubelet("/metrics/resource")):
        if family.name in ("node_cpu_usage_seconds", "container_cpu_usage_seconds"):
            for s in family.samples:
                found[(family.name, s.labels.get("namespace"), s.labels.get("pod"), s.labels.get("container"))] = s.value
    return found


def test_cpu_counters_grow_and_the_node_counter_survives_a_pod_leaving(local, offloaded, wait, kubelet):
    namespace, _, _ = offloaded
    worker_app = ("container_cpu_usage_seconds", namespace, "worker", "app")
    node_key = ("node_cpu_usage_seconds", None, None, None)
    first = wait(lambda: (c := counters(kubelet)) and worker_app in c and c, timeout=SETTLE, what="worker's counter")
    second = wait(lambda: (c := counters(kubelet)) and c.get(worker_app, 0) > first[worker_app] and c,
                  timeout=60, what="worker's counter to grow")
    assert second[node_key] >= first[node_key]
    local.kubectl("delete", "pod", "-n", namespace, "light", "--wait=true", "--timeout=90s")
    third = wait(lambda: (c := counters(kubelet)) and not any(k[2] == "light" for k in c) and c,
                 timeout=90, what="light gone from /metrics/resource")
    assert third[node_key] >= second[node_key]
