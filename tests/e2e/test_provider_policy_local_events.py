"""The honest side of the provider's policy, end to end (issue #21, item 6): the virtual
kubelet drops what the provider's policy for it (``Consumer.spec.policy``) would refuse
before sending it, and tells the local user on the LOCAL object with a Warning Event
naming the field, what was dropped and the policy key (vkubelet/shared/policy_fit.py).

On the shared loopback environment (conftest.py): a real local control plane and a
real remote one (every Kubernetes cluster has the system-node-critical PriorityClass
built in); the harness's Consumer grants no priority class, no NodePort and no external
IP (harness identities.E2E_POLICY), as a provider's defaults do.
"""

from __future__ import annotations

import json
import time

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.naming import twin_namespace as twin, unique
from support.clusters import offloaded_namespace

IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
TIMEOUT = 90  # seconds; generous for a loaded 2-core machine
REASON = "ProviderPolicyAdjusted"
# A documentation address (RFC 5737), only ever data in an object here, never a target.
EXTERNAL_IP = "192.0.2.10"


def events_about(cluster: Cluster, namespace: str, kind: str, name: str, reason: str) -> list[dict]:
    items = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    return [
        e for e in items
        if e["reason"] == reason and e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name
    ]


def get(cluster: Cluster, kind: str, namespace: str, name: str) -> dict | None:
    result = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def test_a_system_node_critical_pod_runs_remotely_without_the_class_and_the_local_pod_says_why(local, remote, wait):
    ns = unique("pol-prio")
    offloaded_namespace(local, ns)
    try:
        local.apply({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "critical", "namespace": ns},
            "spec": {
                # Built into every cluster, the provider's too: before, the remote pod
                # kept it and could preempt the provider's own components.
                "priorityClassName": "system-node-critical",
                "containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                "terminationGracePeriodSeconds": 5,
            },
        })
        local_pod = local.kubectl_json("get", "pod", "critical", "-n", ns)
        assert local_pod["spec"]["priorityClassName"] == "system-node-critical"

        def remote_running():
            pod = get(remote, "pod", twin(ns), "critical")
            return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

        remote_pod = wait(remote_running, timeout=TIMEOUT, what="the offloaded pod Running remotely")
        assert "priorityClassName" not in remote_pod["spec"]
        assert not remote_pod["spec"].get("priority")  # the provider's default, not 2000001000
        shadow = get(remote, "shadowpods.kube-offload.io", twin(ns), "critical")
        assert "priorityClassName" not in shadow["spec"]["pod"]["spec"]

        events = wait(lambda: events_about(local, ns, "Pod", "critical", REASON), timeout=TIMEOUT,
                      what=f"a {REASON} Event on the local pod")
        [event] = events
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == local_pod["metadata"]["uid"]
        assert event["message"].startswith("spec.priorityClassName dropped: 'system-node-critical' is a system priority class")
        assert "never granted" in event["message"]
        # The local object is the user's: left as written.
        assert local.kubectl_json("get", "pod", "critical", "-n", ns)["spec"]["priorityClassName"] == "system-node-critical"

        # Told once: reconciles that follow (status mirroring, a label change carried to
        # the running pod) add no Event and no count.
        local.kubectl("label", "pod", "critical", "-n", ns, "touched=yes")
        wait(lambda: (get(remote, "pod", twin(ns), "critical") or {}).get("metadata", {}).get("labels", {}).get("touched") == "yes",
             timeout=TIMEOUT, what="the label on the remote pod")
        time.sleep(3)
        [again] = events_about(local, ns, "Pod", "critical", REASON)
        assert again["count"] == 1 and again["metadata"]["name"] == event["metadata"]["name"]
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def test_a_nodeport_service_with_external_ips_is_reflected_as_clusterip_and_the_local_service_says_why(local, remote, wait):
    ns = unique("pol-svc")
    offloaded_namespace(local, ns)
    try:
        local.apply({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "type": "NodePort",
                "externalIPs": [EXTERNAL_IP],
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        })
        local_svc = local.kubectl_json("get", "service", "web", "-n", ns)
        assert local_svc["spec"]["type"] == "NodePort" and local_svc["spec"]["externalIPs"] == [EXTERNAL_IP]

        def reflected():
            svc = get(remote, "service", twin(ns), "web")
            labels = ((svc or {}).get("metadata") or {}).get("labels") or {}
            return svc if labels.get(c.LABEL_ORIGIN_CLUSTER_ID) else None

        svc = wait(reflected, timeout=TIMEOUT, what="the Service reflected into the twin namespace")
        assert svc["spec"]["type"] == "ClusterIP"
        assert not svc["spec"].get("externalIPs")
        assert all("nodePort" not in port for port in svc["spec"]["ports"])
        assert svc["spec"]["selector"] == {"app": "web"} and svc["spec"]["ports"][0]["port"] == 80

        def both_told():
            events = events_about(local, ns, "Service", "web", REASON)
            return events if len(events) == 2 else None

        events = wait(both_told, timeout=TIMEOUT, what=f"two {REASON} Events on the local Service")
        messages = sorted(e["message"] for e in events)
        assert all(e["type"] == "Warning" and e["involvedObject"]["uid"] == local_svc["metadata"]["uid"] for e in events)
        # The provider's own words for the refusal (kube_offload/rule_book.py), what was done first.
        assert messages[0] == (
            f"spec.externalIPs[0] dropped: {EXTERNAL_IP} is not inside a range granted to this consumer (granted: none): an "
            "external IP captures that address for every pod of the provider; the provider grants it with Consumer "
            "spec.policy.services.externalIPCIDRs"
        )
        assert messages[1] == (
            "spec.type NodePort changed to ClusterIP: NodePort is not granted to this consumer (granted: none); the provider "
            "grants it with Consumer spec.policy.services.types"
        )

        # A change of the Service is reflected again; what was told is not told again.
        local.kubectl("label", "service", "web", "-n", ns, "touched=yes")
        wait(lambda: ((get(remote, "service", twin(ns), "web") or {}).get("metadata") or {}).get("labels", {}).get("touched") == "yes",
             timeout=TIMEOUT, what="the label on the reflected Service")
        time.sleep(3)
        again = events_about(local, ns, "Service", "web", REASON)
        assert sorted((e["metadata"]["name"], e["count"]) for e in again) == sorted((e["metadata"]["name"], 1) for e in events)
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
