"""Pods on the real node and their control plane reach each other, as in any cluster.

What a pod of the charts needs (docs/real-nodes.md, "Addresses"): the `kubernetes`
Service (10.0.0.1:443) leads to the apiserver, whose certificate in-cluster clients verify
against the ServiceAccount's ca.crt; the apiserver reaches a pod IP (webhooks, the kubelet
API of a virtual kubelet pod, `pods/<p>:<port>/proxy`).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import tempfile
import time

import yaml

from kube_offload_harness import oci_image
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.real_node import apiserver_port


def _pod(name: str, command: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "nodeSelector": {rc.REAL_NODE_KEY: "true"},
            "tolerations": [{"key": rc.REAL_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": oci_image.BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", command],
            }],
        },
    }


def _local(real_env: Environment) -> tuple[Cluster, rc.NodePlan]:
    topology = real_env.topology()
    return real_env.cluster(topology.local), real_env.real_node(topology.local).plan


def _until(predicate, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(1)
    raise AssertionError(f"{what} not within {timeout}s (last: {last!r})")


def test_the_kubernetes_service_leads_to_the_advertised_address(real_env: Environment):
    cluster, plan = _local(real_env)
    port = apiserver_port(yaml.safe_load(cluster.kubeconfig.read_text()))
    service = cluster.kubectl_json("get", "service", "kubernetes")
    assert service["spec"]["clusterIP"] == rc.KUBERNETES_SERVICE_IP
    [endpoints] = cluster.kubectl_json("get", "endpointslices", "-l", "kubernetes.io/service-name=kubernetes")["items"]
    assert [e["addresses"] for e in endpoints["endpoints"]] == [[plan.host_ip]]
    assert [p["port"] for p in endpoints["ports"]] == [port]


def test_the_apiserver_certificate_verifies_for_in_cluster_names(real_env: Environment):
    """Through the machine-end forwarder, with the CA a pod's ServiceAccount volume holds
    (the kube-root-ca.crt ConfigMap), under every name an in-cluster client uses."""
    cluster, plan = _local(real_env)
    port = apiserver_port(yaml.safe_load(cluster.kubeconfig.read_text()))
    ca = cluster.kubectl_json("get", "configmap", "kube-root-ca.crt")["data"]["ca.crt"]
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as ca_file:
        ca_file.write(ca)
        ca_file.flush()
        context = ssl.create_default_context(cafile=ca_file.name)
        for name in (rc.KUBERNETES_SERVICE_IP, "kubernetes.default.svc", f"kubernetes.default.svc.{rc.CLUSTER_DOMAIN}", plan.host_ip):
            with socket.create_connection((plan.host_ip, port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.version()


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(real_env: Environment):
    """From inside a pod, 10.0.0.1:443 (kube-proxy's DNAT in the node's namespace, the route
    to the machine end, the forwarder) answers as a Go TLS server does a plain request."""
    cluster, _ = _local(real_env)
    cluster.apply(_pod("api-client", "exec sleep 3600"))
    cluster.kubectl("wait", "--for=condition=Ready", "pod/api-client", "--timeout=120s", timeout=130)
    env = cluster.kubectl("exec", "api-client", "--", "env").stdout
    assert f"KUBERNETES_SERVICE_HOST={rc.KUBERNETES_SERVICE_IP}" in env and "KUBERNETES_SERVICE_PORT=443" in env
    request = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 5 {rc.KUBERNETES_SERVICE_IP} 443'
    answer = _until(lambda: cluster.kubectl("exec", "api-client", "--", "sh", "-c", request, check=False).stdout,
                    "an answer from 10.0.0.1:443")
    assert "Client sent an HTTP request to an HTTPS server" in answer


def test_the_apiserver_reaches_a_pod_ip(real_env: Environment):
    """`kubectl get --raw .../pods/<pod>:<port>/proxy/`: the apiserver dials the pod's IP
    itself (the route to the node's pod range on the machine end of the link)."""
    cluster, plan = _local(real_env)
    cluster.apply(_pod("pod-web", "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"))
    cluster.kubectl("wait", "--for=condition=Ready", "pod/pod-web", "--timeout=120s", timeout=130)
    answer = _until(
        lambda: cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/pod-web:8080/proxy/", check=False).stdout,
        "the pod's page through the apiserver's proxy")
    assert answer.strip() == "served-by-pod-web"
    pod_ip = cluster.kubectl_json("get", "pod", "pod-web")["status"]["podIP"]
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(plan.pod_cidr)
