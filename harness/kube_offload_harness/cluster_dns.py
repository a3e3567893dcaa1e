"""Cluster DNS for a loopback cluster with a real node: CoreDNS as a Deployment in
kube-system on that node, behind the `kube-dns` Service at the address the kubelet's
``clusterDNS`` names (docs/real-nodes.md, "Cluster DNS").

The objects are the ones upstream's deployment manifest makes (ServiceAccount, ClusterRole
and binding, the Corefile ConfigMap, the Deployment, the Service), with what this harness
needs: the pod tolerates and selects the real node (the only node that runs containers),
and the Corefile has no ``forward``: there is no upstream resolver the harness may send to,
so CoreDNS answers for the cluster's zones and nothing else.

:func:`objects` is pure; :func:`install` applies them and waits for CoreDNS to be Ready.
Ready means its ``kubernetes`` plugin listed Services and EndpointSlices through
``10.0.0.1:443`` with the ServiceAccount's token and CA, as any in-cluster client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kube_offload_harness import oci_image
from kube_offload_harness import real_node_config as rc

if TYPE_CHECKING:
    from kube_offload_harness.cluster import Cluster

NAMESPACE = "kube-system"
NAME = "coredns"
SERVICE = "kube-dns"  # the name kubeadm and upstream give it, which tools look for
APP_LABEL = {"k8s-app": "kube-dns"}
HEALTH_PORT = 8080  # the health plugin's default: liveness
READY_PORT = 8181  # the ready plugin's default: readiness, once the kubernetes plugin synced


def corefile(domain: str = rc.CLUSTER_DOMAIN) -> str:
    """Upstream's Corefile without ``forward`` and ``loop`` (which only guards forwarding):
    names outside the cluster's zones get no answer rather than the machine's resolver's."""
    return f""".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    loadbalance
}}
"""


def objects(*, cluster_ip: str = rc.CLUSTER_DNS_IP, domain: str = rc.CLUSTER_DOMAIN,
            image: str = oci_image.COREDNS_IMAGE) -> list[dict]:
    labels = dict(APP_LABEL)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"system:{NAME}"},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"system:{NAME}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"system:{NAME}"},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }
    config = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NAMESPACE},
        "data": {"Corefile": corefile(domain)},
    }
    container = {
        "name": NAME,
        "image": image,
        # Imported into the node's containerd, not pulled (oci_image.py).
        "imagePullPolicy": "IfNotPresent",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": HEALTH_PORT, "scheme": "HTTP"},
            "initialDelaySeconds": 60, "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 5,
        },
        "readinessProbe": {"httpGet": {"path": "/ready", "port": READY_PORT, "scheme": "HTTP"}, "periodSeconds": 2},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-cluster-critical",
                    # Its own resolv.conf is the node's (empty): it resolves nothing upstream.
                    "dnsPolicy": "Default",
                    "nodeSelector": {rc.REAL_NODE_KEY: "true", "kubernetes.io/os": "linux"},
                    "tolerations": [
                        {"key": rc.REAL_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    ],
                    "containers": [container],
                    "volumes": [{"name": "config-volume", "configMap": {
                        "name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": {**labels, "kubernetes.io/name": "CoreDNS"}},
        "spec": {
            "selector": labels,
            "clusterIP": cluster_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }
    return [account, role, binding, config, deployment, service]


class ClusterDNSError(RuntimeError):
    """CoreDNS did not become Ready; the message has its pod's state and its log."""


def install(cluster: "Cluster", *, timeout: float = 180) -> None:
    """Apply the objects and wait until the Deployment is available (CoreDNS Ready)."""
    cluster.apply(objects())
    rollout = cluster.kubectl("rollout", "status", f"deployment/{NAME}", "-n", NAMESPACE, f"--timeout={int(timeout)}s",
                              check=False, timeout=timeout + 10)
    if rollout.returncode == 0:
        return
    selector = ",".join(f"{k}={v}" for k, v in APP_LABEL.items())
    pods = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "wide", check=False).stdout
    log = cluster.kubectl("logs", "-n", NAMESPACE, f"deployment/{NAME}", "--tail=30", check=False)
    raise ClusterDNSError(
        f"CoreDNS not Ready after {timeout}s ({rollout.stderr.strip() or rollout.stdout.strip()}):\n{pods}\n"
        f"its log:\n{log.stdout or log.stderr}")
