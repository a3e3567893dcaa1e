"""The provider's policy on what a consumer writes besides ShadowPods (issue 21), end to end.

Acting as the consumer identity the remote chart creates (the token kubeconfig of its
ServiceAccount, what a consumer's virtual kubelet holds), each write that would reach the
provider's network, nodes, control plane or other tenants is refused by the real API
server, with a message naming the field and the Consumer spec.policy key a provider would
change: the chart's ValidatingAdmissionPolicies (CEL, templates/admission-policies.yaml)
for the stateless rules, the enforcer's EndpointSlice webhook for the addresses that need
the cluster's state (nodes, Service range, API server, pods of the twin). Then the
provider grants NodePort by patching Consumer spec.policy and the same write is admitted.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import offloaded_namespace

LOCAL_ID = "local"
TIMEOUT = 90
MAX_CLAIM = "5Gi"
WEBHOOK_DENIED = f'admission webhook "{c.ENDPOINTSLICE_WEBHOOK_NAME}" denied the request'



@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(LOCAL_ID))


def set_policy(remote: Cluster, policy: dict) -> None:
    patch = [{"op": "add", "path": "/spec/policy", "value": policy}]
    remote.kubectl("patch", "consumers.kube-offload.io", LOCAL_ID, "--type=json", "-p", json.dumps(patch))


@pytest.fixture(scope="module")
def policy(remote: Cluster) -> Iterator[dict]:
    """The harness's grant without NodePort and with a largest claim: what the refusals
    below are checked against; put back as it was afterwards."""
    before = remote.kubectl_json("get", "consumers.kube-offload.io", LOCAL_ID)["spec"].get("policy") or {}
    module_policy = copy.deepcopy(before)
    module_policy.setdefault("services", {})["types"] = []
    module_policy.setdefault("storage", {})["maxClaimSize"] = MAX_CLAIM
    # NODE_ADDRESS's range, so that only the node rule can refuse it, and the domain of
    # the Ingresses below (the session's grants are narrower: identities.E2E_POLICY).
    cidrs = module_policy.setdefault("endpoints", {}).setdefault("cidrs", [])
    cidrs.append(NODE_RANGE)
    module_policy.setdefault("ingress", {})["hostDomains"] = ["example.com"]
    set_policy(remote, module_policy)
    try:
        yield module_policy
    finally:
        set_policy(remote, before)


@pytest.fixture(scope="module")
def twin(local: Cluster, remote: Cluster, policy: dict, wait) -> Iterator[str]:
    """A twin namespace of the consumer (the vkubelet asks for it as a local namespace is
    offloaded); the objects below are written into it directly, as the consumer."""
    ns = unique("policy-net")
    offloaded_namespace(local, ns)
    name = f"{ns}-{LOCAL_ID}"
    wait(lambda: remote.kubectl("get", "namespace", name, check=False).returncode == 0, timeout=TIMEOUT, what=f"twin namespace {name}")
    try:
        yield name
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def create(remote: Cluster, consumer: Path, twin: str, obj: dict) -> subprocess.CompletedProcess:
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("name", unique(obj["kind"].lower()))
    obj["metadata"]["namespace"] = twin
    return remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(obj))


def refused(remote: Cluster, consumer: Path, twin: str, obj: dict, *expected: str) -> str:
    result = create(remote, consumer, twin, obj)
    assert result.returncode != 0, f"admitted, but the policy should refuse it: {json.dumps(obj)}"
    for text in expected:
        assert text in result.stderr, f"{text!r} not in the refusal: {result.stderr}"
    assert "Traceback" not in result.stderr and "InternalError" not in result.stderr
    return result.stderr


def admitted(remote: Cluster, consumer: Path, twin: str, obj: dict) -> None:
    result = create(remote, consumer, twin, obj)
    assert result.returncode == 0, result.stderr


def service(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 8080}], **spec}}


def endpoint_slice(service_name: str, *addresses: str) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"labels": {"kubernetes.io/service-name": service_name, "endpointslice.kubernetes.io/managed-by": "e2e"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"port": 10250, "protocol": "TCP"}],
    }


def ingress(*, host: str | None = "shop.example.com", class_name: str | None = identities.E2E_INGRESS_CLASS, **extra) -> dict:
    rule: dict = {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}
    if host is not None:
        rule["host"] = host
    spec: dict = {"rules": [rule], **extra.pop("spec", {})}
    if class_name is not None:
        spec["ingressClassName"] = class_name
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": extra.pop("metadata", {}), "spec": spec}


def claim(**spec) -> dict:
    base = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": identities.E2E_STORAGE_CLASS}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": {**base, **spec}}


# --- Services -----------------------------------------------------------------------------------
def test_service_vectors_are_refused_naming_the_field_and_key(remote: Cluster, consumer: Path, twin: str) -> None:
    admitted(remote, consumer, twin, service(selector={"app": "web"}))  # ClusterIP: always
    admitted(remote, consumer, twin, service(clusterIP="None", selector={"app": "web"}))  # headless: always
    refused(remote, consumer, twin, service(externalIPs=["203.0.113.10"]),
            "spec.externalIPs: 203.0.113.10", "spec.policy.services.externalIPCIDRs")
    refused(remote, consumer, twin, service(type="NodePort"), "spec.type: NodePort", "spec.policy.services.types")
    refused(remote, consumer, twin, service(type="LoadBalancer"), "spec.type: LoadBalancer", "spec.policy.services.types")
    refused(remote, consumer, twin, {"apiVersion": "v1", "kind": "Service", "spec": {"type": "ExternalName", "externalName": "db.example.org"}},
            "spec.type: ExternalName", "spec.policy.services.externalName")


def test_a_granted_service_type_is_admitted(remote: Cluster, consumer: Path, twin: str, policy: dict, wait) -> None:
    node_port = service(type="NodePort", selector={"app": "web"})
    refused(remote, consumer, twin, node_port, "spec.type: NodePort")
    granted = copy.deepcopy(policy)
    granted["services"]["types"] = ["NodePort"]
    set_policy(remote, granted)
    try:
        # The API server reads the Consumer through its informer: admitted within moments.
        wait(lambda: create(remote, consumer, twin, node_port).returncode == 0, timeout=30, what="the NodePort Service admitted once granted")
        # Still not LoadBalancer: a grant is by name.
        refused(remote, consumer, twin, service(type="LoadBalancer"), "spec.type: LoadBalancer")
    finally:
        set_policy(remote, policy)


# --- EndpointSlices -------------------------------------------------------------------------------
# Inside a range the module's policy grants (NODE_RANGE), so that only the node rule can
# refuse it. Data only: nothing ever connects to it.
NODE_RANGE = "10.244.0.0/16"
NODE_ADDRESS = "10.244.0.9"


@pytest.fixture(scope="module")
def node_address(remote: Cluster) -> Iterator[str]:
    """An address of a provider node. kwok's nodes report none, so the provider admin
    adds a Node that does (never Ready: nothing is scheduled there); a real cluster's
    nodes all have their InternalIP."""
    for node in remote.kubectl_json("get", "nodes")["items"]:
        for address in node["status"].get("addresses") or []:
            if address["type"] in ("InternalIP", "ExternalIP"):
                yield address["address"]
                return
    name = unique("policy-net-node")
    remote.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    status = {"status": {"addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}]}}
    remote.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    try:
        yield NODE_ADDRESS
    finally:
        remote.kubectl("delete", "node", name, "--wait=false", check=False)


def _api_server_address(remote: Cluster) -> str:
    slices = remote.kubectl_json("get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes")["items"]
    return slices[0]["endpoints"][0]["addresses"][0]


def test_endpointslice_vectors_are_refused_naming_the_field_and_key(remote: Cluster, consumer: Path, twin: str, node_address: str,
                                                                   wait) -> None:
    admitted(remote, consumer, twin, service() | {"metadata": {"name": "db"}})  # selector-less: its endpoints are the consumer's
    # The consumer's own remapped pod range (granted by the harness): admitted.
    admitted(remote, consumer, twin, endpoint_slice("db", "10.200.1.7"))
    for address in ("127.0.0.1", "169.254.169.254"):
        # The API server's own validation refuses loopback and link-local (the metadata
        # address) before any admission: the policy repeats it for whatever it misses.
        refused(remote, consumer, twin, endpoint_slice("db", address), address, "addresses")
    for address in ("100.100.100.200", "239.1.1.1"):  # cloud metadata, multicast: the ValidatingAdmissionPolicy
        refused(remote, consumer, twin, endpoint_slice("db", address),
                f"endpoints[].addresses: {address}", "spec.policy.endpoints.cidrs", "ValidatingAdmissionPolicy")
    # A node's address (its kubelet on :10250), even inside a granted range: the webhook.
    wait(lambda: "provider node" in create(remote, consumer, twin, endpoint_slice("db", node_address)).stderr,
         timeout=30, what="the EndpointSlice webhook's node cache")
    refused(remote, consumer, twin, endpoint_slice("db", node_address), WEBHOOK_DENIED,
            f"{node_address} is an address of provider node", "spec.policy.endpoints.cidrs")
    api_server = _api_server_address(remote)
    message = refused(remote, consumer, twin, endpoint_slice("db", api_server), api_server)
    if not ipaddress.ip_address(api_server).is_loopback:  # loopback: the API's own validation refused it above
        assert "is an address of the provider's API server" in message and "spec.policy.endpoints.cidrs" in message, message
    # An address of the Service range (the first one is Service default/kubernetes's ClusterIP).
    cluster_ip = remote.kubectl_json("get", "service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    refused(remote, consumer, twin, endpoint_slice("db", cluster_ip), WEBHOOK_DENIED, f"{cluster_ip} is inside the provider's Service range")
    refused(remote, consumer, twin, endpoint_slice("db", "10.9.9.9"), WEBHOOK_DENIED,
            "10.9.9.9 is neither a pod of namespace", "spec.policy.endpoints.cidrs")
    fqdn = endpoint_slice("db") | {"addressType": "FQDN", "endpoints": [{"addresses": ["metadata.google.internal"]}]}
    refused(remote, consumer, twin, fqdn, "addressType: FQDN", "spec.policy.services.externalName")


# --- Ingresses -------------------------------------------------------------------------------------
def test_ingress_vectors_are_refused_naming_the_field_and_key(remote: Cluster, consumer: Path, twin: str) -> None:
    admitted(remote, consumer, twin, ingress())  # granted class, host under the granted domain
    refused(remote, consumer, twin, ingress(host="login.provider.test"),
            "spec.rules[].host: login.provider.test", "spec.policy.ingress.hostDomains")
    refused(remote, consumer, twin, ingress(host="example.com.evil.test"), "spec.rules[].host", "spec.policy.ingress.hostDomains")
    refused(remote, consumer, twin, ingress(host=None), "spec.rules[].host: a rule without a host is a catch-all")
    refused(remote, consumer, twin, ingress(spec={"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}),
            "spec.defaultBackend")
    snippet = {"annotations": {"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers 'X: y';"}}
    refused(remote, consumer, twin, ingress(metadata=snippet),
            "metadata.annotations: nginx.ingress.kubernetes.io/configuration-snippet", "spec.policy.ingress.annotations")
    refused(remote, consumer, twin, ingress(class_name="nginx-internal"),
            'spec.ingressClassName: "nginx-internal"', "spec.policy.ingress.classes")
    refused(remote, consumer, twin, ingress(class_name=None), "spec.ingressClassName", "spec.policy.ingress.classes")
    refused(remote, consumer, twin, ingress(spec={"tls": [{"hosts": ["api.provider.test"], "secretName": "cert"}]}),
            "spec.tls[].hosts: api.provider.test", "spec.policy.ingress.hostDomains")


# --- PersistentVolumeClaims -------------------------------------------------------------------------
def test_pvc_vectors_are_refused_naming_the_field_and_key(remote: Cluster, consumer: Path, twin: str) -> None:
    admitted(remote, consumer, twin, claim())
    refused(remote, consumer, twin, claim(volumeName="someone-elses-pv"), "spec.volumeName", "spec.policy.storage.classes")
    refused(remote, consumer, twin, claim(storageClassName="premium-ssd"),
            'spec.storageClassName: "premium-ssd"', "spec.policy.storage.classes")
    refused(remote, consumer, twin, claim(resources={"requests": {"storage": "20Gi"}}),
            "spec.resources.requests.storage: 20Gi", MAX_CLAIM, "spec.policy.storage.maxClaimSize")
    # A volume populator of any kind reads what it likes: only claims and snapshots of this namespace.
    refused(remote, consumer, twin, claim(dataSourceRef={"apiGroup": "populators.example.com", "kind": "Anything", "name": "x"}),
            "spec.dataSource", "only a PersistentVolumeClaim or VolumeSnapshot of the same namespace")


def test_the_providers_own_writers_are_not_held_to_the_consumers_policy(remote: Cluster, twin: str) -> None:
    # The provider's admin (and its controllers) write what they like in a twin.
    obj = service(type="NodePort", selector={"app": "admin"}) | {"metadata": {"name": unique("admin-svc"), "namespace": twin}}
    remote.apply(obj)


# --- Secrets ---------------------------------------------------------------------------------------
def test_a_service_account_token_secret_is_refused_but_an_ordinary_secret_is_not(remote: Cluster, consumer: Path, twin: str) -> None:
    # The token controller would mint a token of the twin's ServiceAccount into it: a
    # provider identity a consumer pod could mount as a plain secret volume.
    token = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
             "metadata": {"annotations": {"kubernetes.io/service-account.name": "default"}}}
    refused(remote, consumer, twin, token, "type: kubernetes.io/service-account-token", "no policy key widens this")
    admitted(remote, consumer, twin, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": {"k": "v"}})
