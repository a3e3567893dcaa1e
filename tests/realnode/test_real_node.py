"""A pod really runs on the real node, and `down` leaves nothing of the node behind.

What kwok cannot fake: the container's own output reaches `kubectl logs` through the
kubelet's API, `kubectl exec` runs in the container's UTS namespace (its hostname is the
pod's name, not the machine's), the pod's IP comes from the node's CNI bridge, and the
processes, mounts, cgroups and network objects the node made are all gone after down.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import time
from pathlib import Path

from kube_offload_harness import netns, oci_image, real_node
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Environment

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
                "image": oci_image.BUSYBOX_IMAGE,
                "imagePullPolicy": "IfNotPresent",
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
    # (busybox-static's wget crashes without NSS modules; nc speaks HTTP/1.0 well enough)
    request = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 5 {cluster_ip} 80'
    deadline = time.monotonic() + 30
    answer = ""
    while "served-by-web" not in answer and time.monotonic() < deadline:
        answer = cluster.kubectl("exec", POD, "--", "sh", "-c", request, check=False).stdout
        time.sleep(1)
    assert "200 OK" in answer and "served-by-web" in answer


def test_down_removes_every_namespace_link_mount_cgroup_and_process(real_env: Environment):
    topology = real_env.topology()
    plan = real_env.real_node(topology.local).plan
    assert real_node.leftovers(plan), "the node should exist before down"
    real_env.down()
    assert real_node.leftovers(plan) == []
    # the same, as a person would look
    assert plan.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert plan.veth_host not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert str(plan.state_dir) not in Path("/proc/mounts").read_text()
    assert not any((h / plan.cgroup_root.strip("/")).exists() for h in netns.v1_hierarchies())
    # the kernel settings the kubelet required are the machine's own again
    assert {key: (Path("/proc/sys") / key).read_text() for key in rc.KERNEL_TUNABLES} == real_env.kernel_tunables_before
