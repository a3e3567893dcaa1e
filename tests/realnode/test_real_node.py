"""A pod really runs on the real node, and `down` leaves nothing of the node behind.

What kwok cannot fake: the container's own output reaches `kubectl logs` through the
kubelet's API, `kubectl exec` runs in the container's UTS namespace (its hostname is the
pod's name, not the machine's), the pod's IP comes from the node's CNI bridge, images are
pulled (imagePullPolicy: Always) through containerd's mirrors from the environment's own
registry, which also serves the charts, and the processes, mounts, cgroups and network
objects the node and the registry made are all gone after down.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import time
from pathlib import Path

from kube_offload_harness import netns, oci_image, real_node
from kube_offload_harness import real_node_config as rc
from kube_offload_harness import registry as reg
from kube_offload_harness.cluster import Environment
from kube_offload_harness.standin_recipe import BUSYBOX_IMAGE

POD = "hello-real"
GREETING = "kube-offload real container says hello"


def _pod(node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "nodeSelector": {rc.REAL_NODE_KEY: "true"},
            "tolerations": [{"key": rc.REAL_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",  # short name: containerd makes it docker.io/library/busybox:1.36
                "imagePullPolicy": "Always",
                # printed by the container itself: its own hostname and the cgroup it runs in
                "command": ["sh", "-c", f'echo "{GREETING} from $(hostname)"; cat /proc/self/cgroup | grep memory; exec sleep 3600'],
            }],
        },
    }


def test_a_pod_runs_on_the_real_node_and_logs_and_exec_reach_it(real_env: Environment):
    topology = real_env.topology()
    cluster = real_env.cluster(topology.local)
    plan = real_env.real_node(topology.local).plan
    node = cluster.kubectl_json("get", "node", plan.node_name)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
    assert {"type": "InternalIP", "address": plan.node_ip} in node["status"]["addresses"]

    cluster.apply(_pod(plan.node_name))
    cluster.kubectl("wait", "--for=condition=Ready", f"pod/{POD}", "--timeout=120s", timeout=130)
    pod = cluster.kubectl_json("get", "pod", POD)
    assert pod["spec"]["nodeName"] == plan.node_name
    assert pod["status"]["hostIP"] == plan.node_ip
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(plan.pod_cidr)

    deadline = time.monotonic() + 30
    logs = ""
    while GREETING not in logs and time.monotonic() < deadline:
        logs = cluster.kubectl("logs", POD, check=False).stdout
        time.sleep(0.5)
    assert f"{GREETING} from {POD}" in logs
    assert f"{plan.cgroup_root}/kubepods" in logs  # the node's own cgroup tree, not the machine's

    hostname = cluster.kubectl("exec", POD, "--", "hostname").stdout.strip()
    assert hostname == POD
    assert hostname != socket.gethostname()


def test_a_service_reaches_a_pod_on_the_real_node_through_kube_proxy(real_env: Environment):
    """A client pod calls a Service's ClusterIP; the node's kube-proxy rules (in its own
    namespace) send it to the server pod, which answers with its own hostname."""
    topology = real_env.topology()
    cluster = real_env.cluster(topology.local)
    plan = real_env.real_node(topology.local).plan
    web = _pod(plan.node_name)
    web["metadata"] = {"name": "web", "namespace": "default", "labels": {"app": "web"}}
    # busybox httpd serves a page naming the pod it runs in
    web["spec"]["containers"][0]["command"] = [
        "sh", "-c", "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"]
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    cluster.apply([web, service])
    cluster.kubectl("wait", "--for=condition=Ready", "pod/web", f"pod/{POD}", "--timeout=120s", timeout=130)
    cluster_ip = cluster.kubectl_json("get", "service", "web")["spec"]["clusterIP"]
    # by address, with nc: the kube-proxy path alone (name resolution: test_standin_images.py)
    request = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 5 {cluster_ip} 80'
    deadline = time.monotonic() + 30
    answer = ""
    while "served-by-web" not in answer and time.monotonic() < deadline:
        answer = cluster.kubectl("exec", POD, "--", "sh", "-c", request, check=False).stdout
        time.sleep(1)
    assert "200 OK" in answer and "served-by-web" in answer


def _registry_log(env: Environment) -> str:
    return env.log_path(reg.PROCESS_NAME).read_text(errors="replace")


def test_images_are_pulled_through_the_mirror_from_the_local_registry(real_env: Environment):
    """`busybox:1.36` with imagePullPolicy: Always (the first test's pod) and the sandbox
    image came from the environment's registry: containerd asked it for the manifests
    under the upstream's prefix, as a mirror of docker.io and registry.k8s.io (`ns=`), and
    the node lists the images under their public names."""
    topology = real_env.topology()
    log = _registry_log(real_env)
    for repository, tag, upstream in (("docker.io/library/busybox", "1.36", "docker.io"),
                                      ("registry.k8s.io/pause", "3.10.2", "registry.k8s.io")):
        pulls = [line for line in log.splitlines()
                 if f"/v2/{repository}/manifests/{tag}?ns={upstream}" in line and "containerd" in line]
        assert pulls, f"no pull of {repository}:{tag} by containerd in {real_env.log_path(reg.PROCESS_NAME)}"
    # containerd's own list (the CRI's namespace), under the names the manifests use
    listed = real_env.real_node(topology.local).ctr("images", "list", "--quiet")
    assert listed.returncode == 0, listed.stderr
    assert {BUSYBOX_IMAGE, oci_image.PAUSE_IMAGE} <= set(listed.stdout.split())


def test_python_slim_runs_python3(real_env: Environment):
    """python:3.11-slim (Debian's Python 3.11, built here) pulled with Always runs
    `python3 -c` and its output reaches `kubectl logs`."""
    topology = real_env.topology()
    cluster = real_env.cluster(topology.local)
    plan = real_env.real_node(topology.local).plan
    pod = _pod(plan.node_name)
    pod["metadata"] = {"name": "python", "namespace": "default"}
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0].update(
        image="python:3.11-slim", command=["python3", "-c", "import sys; print('python says', sys.version_info[:2])"])
    cluster.apply(pod)
    cluster.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/python", "--timeout=120s", timeout=130)
    assert "python says (3, 11)" in cluster.kubectl("logs", "python").stdout
    assert "/v2/docker.io/library/python/manifests/3.11-slim?ns=docker.io" in _registry_log(real_env)


def test_the_charts_are_pulled_from_the_registry(real_env: Environment, tmp_path: Path):
    """`helm push`ed at up; `helm show chart` and `helm pull` get them back by their oci://
    reference, as a user would install them."""
    helm = str(real_env.bins.helm)
    env = reg._helm_env(tmp_path)
    for chart in reg.CHARTS:
        reference = real_env.chart_reference(chart)
        version = reg.chart_version(reg.REPO / "charts" / chart)
        shown = subprocess.run([helm, "show", "chart", reference, "--version", version, "--plain-http"],
                               capture_output=True, text=True, env=env, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"name: {chart}" in shown.stdout
        pulled = subprocess.run([helm, "pull", reference, "--version", version, "--plain-http", "-d", str(tmp_path)],
                                capture_output=True, text=True, env=env, timeout=60)
        assert pulled.returncode == 0, pulled.stderr
        assert (tmp_path / f"{chart}-{version}.tgz").exists()


def test_down_removes_every_namespace_link_mount_cgroup_and_process(real_env: Environment):
    topology = real_env.topology()
    plan = real_env.real_node(topology.local).plan
    registry = real_env.registry(topology)
    assert real_node.leftovers(plan), "the node should exist before down"
    assert registry.leftovers(), "the registry should exist before down"
    forwarders = netns.pids_with_arg(str(netns.netns_path(plan.netns)))
    assert len(forwarders) == 2, "one forwarder for the apiserver, one for the registry"
    real_env.down()
    assert real_node.leftovers(plan) == []
    assert registry.leftovers() == []
    assert not registry.client().ping()
    # the same, as a person would look
    assert plan.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert plan.veth_host not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert str(plan.state_dir) not in Path("/proc/mounts").read_text()
    assert not any((h / plan.cgroup_root.strip("/")).exists() for h in netns.v1_hierarchies())
    # the kernel settings the kubelet required are the machine's own again
    assert {key: (Path("/proc/sys") / key).read_text() for key in rc.KERNEL_TUNABLES} == real_env.kernel_tunables_before
