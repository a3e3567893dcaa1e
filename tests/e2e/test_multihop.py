"""Issue 24 item 4: offloading over several hops (docs/multihop.md), on three real control
planes in a chain: ``a`` (local) offloads to ``b``, which offloads to ``c``
(harness ``chain_topology``; b runs an enforcer for a and, as a consumer of c, its own
webhook, scheduler extender and virtual kubelet). This module builds that environment for
itself and tears it down at the end.

Proven here, in this order (the setting is off first, then turned on):

* a Consumer without ``spec.furtherOffloading`` keeps its pods in b (twin pod on a kwok
  node of b, nothing in c), and its twin namespace carries no offloading label;
* with it, a pod created in a runs in c through b's virtual node, with the chain a,b;
* ``kubectl logs`` and ``kubectl exec`` from a reach the container in c (kwok's simulated
  logs and exec, through both virtual kubelets), and so does ``kubectl port-forward`` (each
  hop's vkubelet forwards the stream to the next cluster, kwok in c to an echo served here);
* ``kubectl top pod`` in a shows c's figures (metrics-server in each cluster; each hop's
  vkubelet serves the next cluster's pod metrics as its node's resource metrics);
* loops are refused naming the chain: c's enforcer refuses a ShadowPod whose chain already
  went through c (c -> b -> c), and b's virtual kubelet does not send on a pod whose chain
  holds c (c -> a -> b -> c); the shortest loop, a -> b -> a, seen from each side of the
  a-b peering: a's virtual kubelet does not send back to b a pod that came from b, and b's
  enforcer refuses a's ShadowPod that says so (b -> a -> b). (A second peering b -> a would
  add nothing the chain check does not see here: it reads only the chain and its own id.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload.reasons import REASON_OFFLOADING_LOOP
from kube_offload.resources import parse_quantity
from kube_offload_harness import identities, kwok_sim, metrics_server
from kube_offload_harness.cluster import Cluster, Environment, chain_topology
from support.clusters import delete_namespace, keep_logs, offloaded_namespace, running_on
from support.port_forward import FORWARDING, EchoServer, round_trip
from support.top import close, top
from support.top import metrics_servers as running_metrics_servers
from support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".artifacts" / "e2e-logs"
CONTAINER = "app"
NODE_OF_B = c.virtual_node_name("b")  # in a
NODE_OF_C = c.virtual_node_name("c")  # in b


@pytest.fixture(scope="module")
def chain(tmp_path_factory, request) -> Iterator[Environment]:
    env = Environment(tmp_path_factory.mktemp("multihop-e2e"), say=lambda line: print(line, flush=True))
    failed_before = request.session.testsfailed
    try:
        env.up(chain_topology(prefix="mh"))
        yield env
    finally:
        if request.session.testsfailed > failed_before or os.environ.get("KUBE_OFFLOAD_KEEP_LOGS"):
            print(f"\nkube-offload e2e: logs kept in {keep_logs(env, ARTIFACTS, control_planes=False)}")
        env.down()


@pytest.fixture(scope="module")
def a(chain) -> Cluster:
    return chain.cluster(chain.topology().local)


@pytest.fixture(scope="module")
def b(chain) -> Cluster:
    return chain.cluster(chain.topology().remotes[0])


@pytest.fixture(scope="module")
def c_(chain) -> Cluster:
    return chain.cluster(chain.topology().further[0])


def pod_manifest(namespace: str, name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    metadata: dict = {"name": name, "namespace": namespace, "labels": {"app": name, **(labels or {})}}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": CONTAINER, "image": "busybox",
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    }


def pod_or_none(cluster: Cluster, namespace: str, name: str) -> dict | None:
    result = cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def further_offloading(b: Cluster, enabled: bool) -> None:
    """B's admin sets (or clears) spec.furtherOffloading on its Consumer a."""
    value = {"enabled": True, "podPlacement": c.PLACEMENT_REMOTE} if enabled else None
    b.kubectl("patch", c.CONSUMER_KIND.lower(), "a", "--type=merge", "-p", json.dumps({"spec": {"furtherOffloading": value}}))


def twin_labels(b: Cluster, twin: str) -> dict:
    result = b.kubectl("get", "namespace", twin, "-o", "json", check=False)
    return json.loads(result.stdout)["metadata"].get("labels") or {} if result.returncode == 0 else {}


@pytest.fixture(scope="module")
def namespace(a) -> Iterator[str]:
    name = f"mh-{uuid.uuid4().hex[:6]}"
    offloaded_namespace(a, name)  # placement Remote: every pod goes to b's virtual node
    yield name
    delete_namespace(a, name)


# --- off by default ----------------------------------------------------------------------------
def test_a_consumer_without_the_setting_keeps_its_pods_in_b(a, b, c_, namespace):
    a.apply(pod_manifest(namespace, "stays"))
    wait_for(lambda: running_on(a, namespace, "stays", NODE_OF_B), timeout=120, what="pod Running on b's virtual node")
    twin = f"{namespace}-a"
    twin_pod = wait_for(lambda: pod_or_none(b, twin, "stays"), timeout=30, what=f"twin pod in b/{twin}")
    assert twin_pod["spec"]["nodeName"].startswith("b-node-"), twin_pod["spec"].get("nodeName")
    assert c.LABEL_ENABLED not in twin_labels(b, twin)
    # nothing of b's runs in c
    assert not c_.kubectl("get", "pods", "-A", "-l", f"{c.LABEL_ORIGIN_CLUSTER_ID}=b", "-o", "name").stdout.strip()


# --- a -> b -> c -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def far_pod(a, b, c_, namespace) -> tuple[str, str]:
    """With further offloading on: a pod made in a, Running on b's virtual node in a and on
    c's virtual node in b. Yields (b's twin, c's twin)."""
    further_offloading(b, True)
    twin = f"{namespace}-a"
    wait_for(lambda: twin_labels(b, twin).get(c.LABEL_POD_PLACEMENT) == c.PLACEMENT_REMOTE, timeout=30,
             what=f"b's enforcer to label twin {twin} for further offloading")
    a.apply(pod_manifest(namespace, "far"))
    wait_for(lambda: running_on(a, namespace, "far", NODE_OF_B), timeout=180, what="pod Running in a on b's virtual node")
    wait_for(lambda: running_on(b, twin, "far", NODE_OF_C), timeout=30, what="b's twin pod Running on c's virtual node")
    return twin, f"{twin}-b"


def test_a_pod_made_in_a_runs_in_c(c_, far_pod):
    _, far_twin = far_pod
    remote = wait_for(lambda: pod_or_none(c_, far_twin, "far"), timeout=30, what="the pod in c")
    assert remote["status"]["phase"] == "Running"
    assert remote["spec"]["nodeName"].startswith("c-node-"), remote["spec"].get("nodeName")
    annotations = remote["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_OFFLOAD_CHAIN] == "a,b"
    # this hop's origin: b's pod, not a's
    assert remote["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == "b"
    assert annotations[c.ANNOTATION_ORIGIN_NAMESPACE] == far_pod[0]


def test_logs_from_a_are_the_containers_in_c(a, c_, namespace, far_pod):
    _, far_twin = far_pod
    through = a.kubectl("logs", "-n", namespace, "far", "-c", CONTAINER, check=False)
    assert through.returncode == 0, through.stderr
    direct = c_.kubectl("logs", "-n", far_twin, "far", "-c", CONTAINER)
    assert through.stdout == direct.stdout
    assert kwok_sim.CURRENT_LINES[0] in through.stdout


def test_exec_from_a_runs_in_c(a, namespace, far_pod):
    result = a.kubectl("exec", "-n", namespace, "far", "-c", CONTAINER, "--",
                       "sh", "-c", f"echo out-$((6*7)) ${kwok_sim.EXEC_ENV_NAME}", check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"out-42 {kwok_sim.EXEC_ENV_VALUE}\n"


def test_port_forward_from_a_reaches_the_port_in_c(chain, a, namespace, far_pod):
    """kubectl port-forward in a: a's vkubelet asks b's API server, which asks b's virtual
    node (b's vkubelet), which asks c's API server, whose kwok forwards the pod's port to
    the echo served here."""
    echo = EchoServer(kwok_sim.port_forward_target(chain.state_dir))
    process = subprocess.Popen(
        [str(a.bins.kubectl), "--kubeconfig", str(a.kubeconfig), "port-forward", "-n", namespace, "pod/far", ":8080"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=a.env(),
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        match = FORWARDING.search(line)
        assert match, f"kubectl port-forward printed {line!r}; stderr: {process.stderr.read() if process.poll() is not None and process.stderr else ''}"
        payload = os.urandom(256 * 1024)
        assert round_trip(int(match.group(1)), payload) == payload, "port-forwarded data came back altered"
        assert echo.connections == 1
    finally:
        process.terminate()
        process.communicate(timeout=30)
        echo.close()
    # Each hop's vkubelet forwarded it to the next cluster: a's to b, b's to c.
    twin, _ = far_pod
    for process_name, pod_key, cluster_id in (("vkubelet-b", f"{namespace}/far", "b"), ("vkubelet-c", f"{twin}/far", "c")):
        log = chain.log_path(process_name).read_text(errors="replace")
        assert re.search(rf"portForward {re.escape(pod_key)} -> {cluster_id}:\S+: started", log), \
            f"{process_name} did not forward {pod_key} to cluster {cluster_id}"


@pytest.fixture(scope="module")
def metrics_servers(chain, a, b, c_) -> Iterator[None]:
    """metrics-server in each cluster of the chain, c first: each hop's vkubelet reads the
    pod metrics of the cluster after it (docs/metrics.md)."""
    with running_metrics_servers(chain, c_, b, a):
        yield


MEASURED_CPU, MEASURED_MEMORY = "120m", "40Mi"
METRICS_SETTLE = 240  # three metrics-servers and two vkubelets, each sampling on its own period


def test_kubectl_top_in_a_shows_the_figures_of_c(a, b, c_, namespace, far_pod, metrics_servers):
    twin, far_twin = far_pod
    annotations = {metrics_server.USAGE_CPU_ANNOTATION: MEASURED_CPU, metrics_server.USAGE_MEMORY_ANNOTATION: MEASURED_MEMORY}
    a.apply(pod_manifest(namespace, "measured", annotations=annotations))
    wait_for(lambda: running_on(a, namespace, "measured", NODE_OF_B), timeout=180, what="pod measured Running in a")
    wait_for(lambda: running_on(b, twin, "measured", NODE_OF_C), timeout=60, what="its twin Running on c's virtual node")

    def row(cluster, ns):
        return lambda: (rows := top(cluster, "pod", "-n", ns)) and rows.get("measured")

    in_c = wait_for(row(c_, far_twin), timeout=METRICS_SETTLE, what="kubectl top pod in c")
    in_b = wait_for(row(b, twin), timeout=METRICS_SETTLE, what="kubectl top pod in b (c's figures, one hop)")
    in_a = wait_for(row(a, namespace), timeout=METRICS_SETTLE, what="kubectl top pod in a (c's figures, two hops)")
    assert close(in_c[0], parse_quantity(MEASURED_CPU)), in_c  # kwok in c simulates what the pod asked
    assert close(in_b[0], in_c[0], tolerance=0.1) and close(in_a[0], in_c[0], tolerance=0.1), (in_a, in_b, in_c)
    assert in_a[1] == in_b[1] == in_c[1] == parse_quantity(MEASURED_MEMORY) // 1000, (in_a, in_b, in_c)


# --- loops -----------------------------------------------------------------------------------------
def test_cs_enforcer_refuses_a_chain_that_went_through_c(chain, c_, far_pod):
    """b (c's consumer, with its own identity) writes a ShadowPod that says it came from c."""
    _, far_twin = far_pod
    body = shadowpod.build_shadowpod(
        name="loop", namespace=far_twin,
        pod_metadata={"labels": {"app": "loop"}, "annotations": {c.ANNOTATION_OFFLOAD_CHAIN: "c,b"}},
        pod_spec={"containers": [{"name": CONTAINER, "image": "busybox"}]},
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: "b"},
        origin_annotations={c.ANNOTATION_ORIGIN_NAMESPACE: "x", c.ANNOTATION_ORIGIN_NAME: "loop", c.ANNOTATION_ORIGIN_UID: "u"},
    )
    consumer_b = chain.identity_kubeconfig(c_, identities.consumer_sa("b"))
    result = c_.kubectl_as(consumer_b, "create", "-f", "-", input=yaml.safe_dump(body))
    assert result.returncode != 0
    assert "c -> b -> c" in result.stderr, result.stderr
    # ... while the same ShadowPod with an honest chain is admitted (dry run: nothing made)
    honest = json.loads(json.dumps(body))
    honest["spec"]["pod"]["metadata"]["annotations"][c.ANNOTATION_OFFLOAD_CHAIN] = "a,b"
    ok = c_.kubectl_as(consumer_b, "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(honest))
    assert ok.returncode == 0, ok.stderr


def test_bs_virtual_kubelet_does_not_send_a_pod_back_to_a_cluster_it_came_through(a, b, c_, namespace, far_pod):
    """A pod in a that says it came from c (labelled as an enforcer's pod, with chain c):
    a sends it to b (a is not in c,a), b's enforcer admits it (the chain ends with a), and
    b's virtual kubelet refuses to send it to c: c -> a -> b -> c."""
    twin, far_twin = far_pod
    a.apply(pod_manifest(namespace, "looping", labels={c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER},
                         annotations={c.ANNOTATION_OFFLOAD_CHAIN: "c"}))
    middle = wait_for(lambda: pod_or_none(b, twin, "looping"), timeout=120, what="the pod's twin in b")
    assert middle["metadata"]["annotations"][c.ANNOTATION_OFFLOAD_CHAIN] == "c,a"

    def loop_event() -> str:
        events = b.kubectl_json("get", "events", "-n", twin, "--field-selector", "involvedObject.name=looping")
        return next((e["message"] for e in events["items"] if e.get("reason") == REASON_OFFLOADING_LOOP), "")

    message = wait_for(loop_event, timeout=120, what="an OffloadingLoop Event on b's pod")
    assert "c -> a -> b -> c" in message
    assert pod_or_none(c_, far_twin, "looping") is None
    assert not c_.kubectl("get", "shadowpods", "-n", far_twin, "looping", check=False).stdout.strip()
    status = b.kubectl_json("get", "pod", "-n", twin, "looping")["status"]
    assert status.get("phase") == "Pending" and "c -> a -> b -> c" in (status.get("message") or "")


def test_turning_the_setting_off_takes_the_labels_off(b, namespace, far_pod):
    twin, _ = far_pod
    further_offloading(b, False)
    wait_for(lambda: c.LABEL_ENABLED not in twin_labels(b, twin), timeout=30, what="the offloading labels gone from b's twin")
    assert c.LABEL_POD_PLACEMENT not in twin_labels(b, twin)


# --- the shortest loop, a -> b -> a, at both places that refuse it ----------------------------
def test_a_does_not_send_back_to_b_a_pod_that_came_from_b(a, namespace):
    """A pod in a that came from b (an enforcer's pod with chain b) is not sent to b again:
    a's virtual kubelet names b -> a -> b and the pod waits."""
    a.apply(pod_manifest(namespace, "back", labels={c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER},
                         annotations={c.ANNOTATION_OFFLOAD_CHAIN: "b"}))

    def loop_event() -> str:
        events = a.kubectl_json("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=back")
        return next((e["message"] for e in events["items"] if e.get("reason") == REASON_OFFLOADING_LOOP), "")

    assert "b -> a -> b" in wait_for(loop_event, timeout=120, what="an OffloadingLoop Event on a's pod")


def test_bs_enforcer_refuses_a_pod_of_a_that_came_from_b(chain, b, far_pod):
    """a (b's consumer) writes a ShadowPod saying the pod came from b: b's enforcer refuses
    the loop b -> a -> b."""
    twin, _ = far_pod
    body = shadowpod.build_shadowpod(
        name="back", namespace=twin,
        pod_metadata={"labels": {"app": "back"}, "annotations": {c.ANNOTATION_OFFLOAD_CHAIN: "b,a"}},
        pod_spec={"containers": [{"name": CONTAINER, "image": "busybox"}]},
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: "a"},
        origin_annotations={c.ANNOTATION_ORIGIN_NAMESPACE: "x", c.ANNOTATION_ORIGIN_NAME: "back", c.ANNOTATION_ORIGIN_UID: "u"},
    )
    result = b.kubectl_as(chain.identity_kubeconfig(b, identities.consumer_sa("a")), "create", "-f", "-", input=yaml.safe_dump(body))
    assert result.returncode != 0
    assert "b -> a -> b" in result.stderr, result.stderr
