"""Pods on the real node and their control plane reach each other, and pods resolve
Service names, as in any cluster.

What a pod of the charts needs (docs/real-nodes.md, "Addresses"): the `kubernetes`
Service (10.0.0.1:443) leads to the apiserver, whose certificate in-cluster clients verify
against the ServiceAccount's ca.crt; the apiserver reaches a pod IP (webhooks, the kubelet
API of a virtual kubelet pod, `pods/<p>:<port>/proxy`); CoreDNS, a pod itself, answers
for the cluster's names (docs/real-nodes.md, "Cluster DNS").
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import tempfile

import yaml

from kube_offload_harness import cluster_dns, oci_image
from kube_offload_harness.standin_recipe import BUSYBOX_IMAGE
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.real_node import apiserver_port

from support.waiting import wait_for


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
                "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", command],
            }],
        },
    }


def _local(real_env: Environment) -> tuple[Cluster, rc.NodePlan]:
    topology = real_env.topology()
    return real_env.cluster(topology.local), real_env.real_node(topology.local).plan


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
    # stdin held open: busybox nc may exit at its EOF before the answer arrives
    request = f'(printf "GET / HTTP/1.0\\r\\n\\r\\n"; sleep 2) | nc -w 5 {rc.KUBERNETES_SERVICE_IP} 443'
    answer = wait_for(lambda: cluster.kubectl("exec", "api-client", "--", "sh", "-c", request, check=False).stdout,
                      what="an answer from 10.0.0.1:443")
    assert "Client sent an HTTP request to an HTTPS server" in answer


def test_the_apiserver_reaches_a_pod_ip(real_env: Environment):
    """`kubectl get --raw .../pods/<pod>:<port>/proxy/`: the apiserver dials the pod's IP
    itself (the route to the node's pod range on the machine end of the link)."""
    cluster, plan = _local(real_env)
    cluster.apply(_pod("pod-web", "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"))
    cluster.kubectl("wait", "--for=condition=Ready", "pod/pod-web", "--timeout=120s", timeout=130)
    answer = wait_for(
        lambda: cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/pod-web:8080/proxy/", check=False).stdout,
        what="the pod's page through the apiserver's proxy")
    assert answer.strip() == "served-by-pod-web"
    pod_ip = cluster.kubectl_json("get", "pod", "pod-web")["status"]["podIP"]
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(plan.pod_cidr)


def test_cluster_dns_answers_from_the_api_it_reads_in_cluster(real_env: Environment):
    """CoreDNS runs as a pod of the real node and is Ready: its kubernetes plugin listed
    Services and EndpointSlices through 10.0.0.1:443 with its ServiceAccount's token,
    verifying the apiserver against the ServiceAccount's ca.crt (client-go in-cluster)."""
    cluster, plan = _local(real_env)
    [pod] = cluster.kubectl_json("get", "pods", "-n", cluster_dns.NAMESPACE, "-l", "k8s-app=kube-dns")["items"]
    assert pod["spec"]["nodeName"] == plan.node_name
    assert pod["spec"]["containers"][0]["image"] == oci_image.COREDNS_IMAGE
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    service = cluster.kubectl_json("get", "service", "-n", cluster_dns.NAMESPACE, cluster_dns.SERVICE)
    assert service["spec"]["clusterIP"] == rc.CLUSTER_DNS_IP
    log = cluster.kubectl("logs", "-n", cluster_dns.NAMESPACE, pod["metadata"]["name"]).stdout
    assert "CoreDNS-" in log and "x509" not in log


def test_a_pod_resolves_the_kubernetes_service_and_a_service_of_its_own_namespace(real_env: Environment):
    cluster, _ = _local(real_env)
    cluster.apply([
        _pod("dns-client", "exec sleep 3600"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "named-web", "namespace": "default"},
         "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]}},
    ])
    cluster.kubectl("wait", "--for=condition=Ready", "pod/dns-client", "--timeout=120s", timeout=130)
    resolv = cluster.kubectl("exec", "dns-client", "--", "cat", "/etc/resolv.conf").stdout
    assert f"nameserver {rc.CLUSTER_DNS_IP}" in resolv
    assert f"search default.svc.{rc.CLUSTER_DOMAIN} svc.{rc.CLUSTER_DOMAIN} {rc.CLUSTER_DOMAIN}" in resolv

    def lookup(name: str) -> str:
        result = cluster.kubectl("exec", "dns-client", "--", "nslookup", name, check=False)
        return result.stdout + result.stderr

    def answered(name: str, address: str) -> str | None:
        answer = lookup(name)
        return answer if f"Address: {address}" in answer.split("Name:", 1)[-1] else None

    wait_for(lambda: answered(f"kubernetes.default.svc.{rc.CLUSTER_DOMAIN}", rc.KUBERNETES_SERVICE_IP),
             what="kubernetes.default.svc.cluster.local resolved to 10.0.0.1")
    cluster_ip = cluster.kubectl_json("get", "service", "named-web")["spec"]["clusterIP"]
    # the short name, through the pod's search path (the kubelet's clusterDomain)
    wait_for(lambda: answered("named-web", cluster_ip), what=f"named-web resolved to {cluster_ip}")
    # no upstream resolver: a name outside the cluster's zones is not answered
    outside = lookup("example.com")
    assert "Address: " not in outside.split("Name:", 1)[-1], outside
