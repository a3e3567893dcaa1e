"""Provider-created twin namespaces and Consumer status, against the real loopback remote
cluster of the session (kube-apiserver, etcd, kube-controller-manager whose namespace
controller empties deleted namespaces, kwok) and the enforcer the harness runs there.

The test admits a consumer of its own (``e2e-twins``: tenant namespace, ServiceAccount,
Consumer) with kubectl as a provider's admin would, so nothing here depends on the
session's own consumer. Requests are created with the admin kubeconfig; ShadowPods are
created *as the consumer* (impersonating its ServiceAccount), which only works through
the RoleBinding the enforcer wrote. The tests run in file order and build on each other.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from support.clusters import find

CONSUMER = "e2e-twins"
TENANT = c.tenant_namespace(CONSUMER)
CONSUMER_USER = f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"
TWIN = "a-e2e-twins"  # a DefaultName twin: ends in -<consumer id> (enforcer/consumers/twin_names.py)
FOREIGN = "foreign-e2e-twins"
MANIFESTS = ("consumer-crd.yaml", "twinnamespace-crd.yaml")
# The enforcer's informers may still be backing off from CRDs that appeared after it
# started (up to 10 s), and the machine is shared: generous, never a sleep.
SERVE_SECONDS = 90

# A copy of the consumer twin ClusterRole rules of docs/security.md (TRUST_DESIGN), used
# only when the chart's rendered role cannot be had (no helm in the binary cache).
TWIN_ROLE_RULES = [
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods/status"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["get", "create"]},
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["configmaps", "secrets", "services", "persistentvolumeclaims", "serviceaccounts"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


def request(remote: Cluster, name: str, namespace: str = TENANT) -> dict | None:
    return find(remote, f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}", name, "-n", namespace)


def phase(remote: Cluster, name: str, namespace: str = TENANT) -> str | None:
    obj = request(remote, name, namespace)
    return ((obj or {}).get("status") or {}).get("phase")


def ask_for(remote: Cluster, name: str, local_namespace: str, namespace: str = TENANT) -> None:
    remote.apply({
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}",
        "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"localNamespace": local_namespace},
    })


def consumer_status(remote: Cluster) -> dict:
    return ((find(remote, f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER) or {}).get("status")) or {}


def twin_role_object(offload_env, remote: Cluster) -> dict:
    """The chart's consumer twin ClusterRole as helm renders it, else the documented copy."""
    try:
        from kube_offload_harness import identities

        rendered = identities.render_chart(
            offload_env.bins.helm, identities.REMOTE_CHART,
            identities.remote_values(CONSUMER, node_labels={}), env=remote.env(),
        )
        for doc in rendered:
            if doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == c.DEFAULT_CONSUMER_TWIN_ROLE:
                return doc
    except Exception as exc:  # no helm yet, or the chart mid-rewrite: the copy will do
        print(f"twin role: using the documented copy ({type(exc).__name__}: {exc})")
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": c.DEFAULT_CONSUMER_TWIN_ROLE}, "rules": TWIN_ROLE_RULES}


@pytest.fixture(scope="module", autouse=True)
def admitted_consumer(offload_env, remote: Cluster, wait):
    """CRDs (if the harness did not install them), the twin role, and consumer e2e-twins."""
    from kube_offload_harness.cluster import SHADOWPOD_CRD

    manifests = SHADOWPOD_CRD.parent
    for name in MANIFESTS:
        remote.kubectl("apply", "-f", str(manifests / name))
    remote.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   f"crd/{c.CONSUMER_PLURAL}.{c.DOMAIN}", f"crd/{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}")
    if find(remote, "clusterrole", c.DEFAULT_CONSUMER_TWIN_ROLE) is None:
        remote.apply(twin_role_object(offload_env, remote))
    remote.apply([
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": TENANT, "labels": {c.LABEL_TENANT: CONSUMER}}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": c.CONSUMER_SERVICE_ACCOUNT, "namespace": TENANT}},
        {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.CONSUMER_KIND,
         "metadata": {"name": CONSUMER},
         "spec": {"serviceAccount": {"namespace": TENANT, "name": c.CONSUMER_SERVICE_ACCOUNT},
                  "podSecurityLevel": "baseline", "quota": {"pods": "10"}}},
    ])
    yield
    # Requests first (the enforcer removes their namespaces), then the consumer.
    remote.kubectl("delete", f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}", "--all", "-n", TENANT,
                   "--wait=true", "--timeout=120s", check=False, timeout=150)
    remote.kubectl("delete", "namespace", FOREIGN, TENANT, "--ignore-not-found", "--wait=false", check=False)
    remote.kubectl("delete", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER, "--ignore-not-found", check=False)


def test_requested_namespace_is_created_labelled_bound_and_ready(remote: Cluster, wait):
    ask_for(remote, TWIN, "a")
    wait(lambda: phase(remote, TWIN) == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS, what=f"TwinNamespace {TWIN} Ready")

    req = request(remote, TWIN)
    assert req["status"]["namespace"] == TWIN
    assert req["status"]["observedGeneration"] == req["metadata"]["generation"]
    assert c.TWIN_NAMESPACE_FINALIZER in req["metadata"]["finalizers"]

    ns = find(remote, "namespace", TWIN)
    labels, annotations = ns["metadata"]["labels"], ns["metadata"]["annotations"]
    assert labels[c.LABEL_ORIGIN_CLUSTER_ID] == CONSUMER
    assert labels[c.LABEL_MANAGED_BY] == c.MANAGED_BY_ENFORCER
    assert labels[c.LABEL_PSA_ENFORCE] == "baseline"
    assert labels[c.LABEL_PSA_ENFORCE_VERSION] == "latest"
    assert annotations[c.ANNOTATION_TWIN_OF] == "a"
    assert annotations[c.ANNOTATION_TWIN_REQUEST] == f"{TENANT}/{TWIN}"

    binding = find(remote, "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", TWIN)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": c.DEFAULT_CONSUMER_TWIN_ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": c.CONSUMER_SERVICE_ACCOUNT, "namespace": TENANT}]
    # The binding works: the consumer may write ShadowPods there, and not next door.
    can = remote.kubectl("auth", "can-i", "create", "shadowpods.kube-offload.io", "-n", TWIN, "--as", CONSUMER_USER,
                         check=False)
    assert can.stdout.strip() == "yes", can.stdout + can.stderr
    cannot = remote.kubectl("auth", "can-i", "create", "shadowpods.kube-offload.io", "-n", "default",
                            "--as", CONSUMER_USER, check=False)
    assert cannot.stdout.strip() == "no"


def test_existing_foreign_namespace_is_refused_and_left_untouched(remote: Cluster, wait):
    remote.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FOREIGN, "labels": {"team": "payments"}}})
    before = find(remote, "namespace", FOREIGN)
    ask_for(remote, FOREIGN, "b")
    wait(lambda: phase(remote, FOREIGN) == c.TWIN_PHASE_REFUSED, timeout=SERVE_SECONDS, what=f"{FOREIGN} Refused")
    assert "exists and is not yours" in request(remote, FOREIGN)["status"]["message"]

    after = find(remote, "namespace", FOREIGN)
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert find(remote, "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", FOREIGN) is None
    assert c.TWIN_NAMESPACE_FINALIZER not in (request(remote, FOREIGN)["metadata"].get("finalizers") or [])

    # Withdrawing the request leaves the namespace alone.
    remote.kubectl("delete", f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}", FOREIGN, "-n", TENANT, "--timeout=60s")
    time.sleep(2)  # give a wrongly-acting enforcer the chance to touch it
    still = find(remote, "namespace", FOREIGN)
    assert still is not None and not still["metadata"].get("deletionTimestamp")
    assert still["metadata"]["uid"] == before["metadata"]["uid"]


def test_request_from_a_namespace_of_no_consumer_is_refused(remote: Cluster, wait):
    stranger = "twins-e2e-stranger"
    remote.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stranger}})
    try:
        ask_for(remote, "twins-e2e-wanted", "c", namespace=stranger)
        wait(lambda: phase(remote, "twins-e2e-wanted", stranger) == c.TWIN_PHASE_REFUSED, timeout=SERVE_SECONDS,
             what="request outside a tenant namespace Refused")
        assert "is not a tenant namespace" in request(remote, "twins-e2e-wanted", stranger)["status"]["message"]
        assert find(remote, "namespace", "twins-e2e-wanted") is None
    finally:
        remote.kubectl("delete", "namespace", stranger, "--wait=false", check=False)


def test_changing_the_pod_security_level_relabels_the_twins(remote: Cluster, wait):
    def level() -> str | None:
        return (find(remote, "namespace", TWIN) or {}).get("metadata", {}).get("labels", {}).get(c.LABEL_PSA_ENFORCE)

    remote.kubectl("patch", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER, "--type=merge",
                   "-p", json.dumps({"spec": {"podSecurityLevel": "restricted"}}))
    wait(lambda: level() == "restricted", timeout=SERVE_SECONDS, what="twin relabelled restricted")
    wait(lambda: phase(remote, TWIN) == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS, what="Ready again")
    remote.kubectl("patch", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER, "--type=merge",
                   "-p", json.dumps({"spec": {"podSecurityLevel": "baseline"}}))
    wait(lambda: level() == "baseline", timeout=SERVE_SECONDS, what="twin relabelled baseline")


def shadowpod(name: str, cpu: str) -> dict:
    # Restricted-compliant, so any level (and the ShadowPod webhook's dry run) accepts it.
    return {
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "namespace": TWIN, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}},
        "spec": {"pod": {
            "metadata": {"labels": {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER, "app": name}},
            "spec": {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "app", "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        }},
    }


def cpu_milli(quantity: str | None) -> int:
    from kube_offload.resources import parse_quantity

    return parse_quantity(quantity or "0")


def test_consumer_status_reports_usage_and_capacity_and_follows_shadowpods(remote: Cluster, wait):
    def settled() -> dict | None:
        status = consumer_status(remote)
        capacity = status.get("capacity") or {}
        if status.get("used", {}).get("pods") == "0" and TWIN in status.get("twinNamespaces", []) and capacity.get("totalNodes"):
            return status
        return None

    before = wait(settled, timeout=SERVE_SECONDS, what="Consumer status with usage, twins and capacity")
    assert before["shadowPods"] == 0
    assert before["capacity"]["schedulableNodes"] >= 1
    assert cpu_milli(before["capacity"]["shareable"].get("cpu")) > 0
    assert set(before["capacity"]["pressure"]) >= {"MemoryPressure", "DiskPressure", "PIDPressure"}
    assert before.get("updated")

    # The consumer writes the ShadowPod itself, through the RoleBinding the enforcer made.
    remote.kubectl("create", "--as", CONSUMER_USER, "-f", "-", input=yaml.safe_dump(shadowpod("usage-probe", "250m")))
    wait(lambda: consumer_status(remote).get("used", {}).get("cpu") == "250m", timeout=SERVE_SECONDS,
         what="used.cpu = 250m")
    after = consumer_status(remote)
    assert after["used"]["pods"] == "1" and after["used"]["memory"] == "64Mi" and after["shadowPods"] == 1

    # Once its pod is bound, the node it runs on has 250m less free; the pod is the
    # consumer's own, so what is shareable with the consumer does not shrink.
    def bound_node() -> str | None:
        pod = find(remote, "pod", "usage-probe", "-n", TWIN)
        return ((pod or {}).get("spec") or {}).get("nodeName")

    node = wait(bound_node, timeout=SERVE_SECONDS, what="the probe's pod bound to a node")

    # Other tests' pods come and go on the same nodes, so the reference is the node as the
    # apiserver sees it now: allocatable minus the requests of every live pod bound there,
    # the probe's included.
    def node_free_now() -> int:
        from kube_offload import resources

        allocatable = resources.node_allocatable(find(remote, "node", node) or {}).get("cpu", 0)
        bound = remote.kubectl_json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
        live = [p for p in bound if not resources.pod_is_terminated(p)]
        assert any(p["metadata"]["name"] == "usage-probe" for p in live)
        return allocatable - sum(resources.pod_requests(p).get("cpu", 0) for p in live)

    # The status names no node (docs/security.md "Say less"): the node's free room is one
    # of the anonymous shapes.
    def shapes_cpu() -> list[int]:
        return [cpu_milli(shape.get("cpu")) for shape in consumer_status(remote)["capacity"]["freeShapes"]]

    wait(lambda: node_free_now() in shapes_cpu(), timeout=SERVE_SECONDS,
         what=f"a capacity.freeShapes entry = {node}'s allocatable minus every live pod's requests, the probe's included")
    published = json.dumps(consumer_status(remote))
    for name in (n["metadata"]["name"] for n in remote.kubectl_json("get", "nodes")["items"]):
        assert f'"{name}"' not in published, f"Consumer.status names provider node {name}"

    remote.kubectl("delete", "--as", CONSUMER_USER, f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}", "usage-probe", "-n", TWIN,
                   "--wait=false")
    wait(lambda: consumer_status(remote).get("used", {}).get("pods") == "0", timeout=SERVE_SECONDS,
         what="usage back to zero after the ShadowPod is deleted")


def test_deleting_the_request_deletes_the_namespace_with_its_contents_then_the_request(remote: Cluster, wait):
    remote.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left-behind", "namespace": TWIN},
                  "data": {"k": "v"}})
    remote.kubectl("delete", f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}", TWIN, "-n", TENANT, "--wait=false")
    seen_orders: list[tuple[bool, bool]] = []

    def both_gone() -> bool:
        # The request is read first: a namespace seen after its request was already gone
        # is a real violation, not the namespace finishing between the two reads.
        req_exists = request(remote, TWIN) is not None
        ns_exists = find(remote, "namespace", TWIN) is not None
        seen_orders.append((ns_exists, req_exists))
        return not ns_exists and not req_exists

    wait(both_gone, timeout=180, interval=0.5, what=f"namespace {TWIN} and its request gone")
    # The request never went before its namespace did.
    assert (True, False) not in seen_orders, seen_orders
    assert find(remote, "configmap", "left-behind", "-n", TWIN) is None
    wait(lambda: TWIN not in consumer_status(remote).get("twinNamespaces", [TWIN]), timeout=30,
         what="the twin dropped from Consumer status.twinNamespaces")
