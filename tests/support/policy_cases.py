"""One table of cases for the rule book's agreement tests (kube_offload/rule_book.py).

Each case is an object a consumer could write, the consumer's terms (:data:`TERMS`: its
``spec.policy`` and ``spec.quota``) and the verdict the provider must give. The same table
runs through the Python check and the consumer's fit (tests/unit/kube_offload/test_rule_book.py)
and through the real API server with the remote chart's policies and the enforcer's webhooks,
as the consumer (tests/e2e/test_policy_agreement.py): any two that disagree fail.

``$TWIN`` in an object stands for the twin namespace the case is judged in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_offload.policy_rules import Kind

TWIN = "$TWIN"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it; the granted terms admit only registry.k8s.io
PRIORITY_CLASS = "agree-batch"  # the e2e creates it, so that the admitted case's pod dry-run finds it
RUNTIME_CLASS = "agree-sandbox"  # likewise
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # the unit check's stand-in for the API server's own

GRANTED: dict[str, Any] = {
    "services": {"types": ["NodePort"], "externalIPCIDRs": ["192.0.2.0/24"], "externalName": True},
    "endpoints": {"cidrs": ["10.200.0.0/16"]},
    "ingress": {"hostDomains": ["agree.example.com"], "classes": ["e2e"], "annotations": ["nginx.ingress.kubernetes.io/rewrite-target"]},
    "storage": {"classes": ["local-path"], "maxClaimSize": "1Gi"},
    "pods": {
        "priorityClasses": [PRIORITY_CLASS], "tolerations": ["agree.example.com/gpu"],
        "reservedNodeLabelKeys": ["pool.example.com/"], "volumeTypes": ["configMap", "secret", "emptyDir", "nfs", "ephemeral"],
        "runtimeClasses": [RUNTIME_CLASS], "deniedMetadataPrefixes": ["internal.example.com/"], "remoteAPIAccess": True,
        "maxTerminationGracePeriodSeconds": 60, "schedulerNames": ["agree-scheduler"], "imageRegistries": ["registry.k8s.io/"],
        "ephemeralContainers": True,
    },
    "tokens": {"maxExpirationSeconds": 7200, "audiences": ["vault.example.com"]},
    "twinNamespaces": {"sameNames": ["agree-shared"], "reserved": ["agree-secret-*"]},
}
# name -> (spec.policy, spec.quota): the terms of the consumer a case is judged for.
TERMS: dict[str, tuple[dict[str, Any], dict[str, str] | None]] = {
    "default": ({}, None),
    "granted": (GRANTED, None),
    "hard": ({"quotaMode": "hard"}, {"cpu": "4"}),
}


@dataclass(frozen=True)
class Case:
    id: str
    key: str  # the rule book row the case is about: a Consumer spec.policy key, or never.<name>
    kind: Kind
    obj: dict[str, Any]
    refused: bool  # the provider refuses it
    terms: str = "default"
    context: dict[str, Any] = field(default_factory=dict)  # more of the unit check's Context
    server: bool = True  # the e2e submits it to the API server (False: says why in ``why``)
    why: str = ""


def pod(*, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "app", "image": IMAGE}
    body: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 1, **spec}
    return {"metadata": {"labels": {"app": "agree", **(labels or {})}, "annotations": dict(annotations or {})}, "spec": body}


def service(**spec: Any) -> dict[str, Any]:
    body = {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "agree"}, **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "agree"}, "spec": body}


def endpoint_slice(*addresses: str, address_type: str = "IPv4") -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "agree"},
            "addressType": address_type, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}


def ingress(*hosts: str, class_name: str | None = "e2e", annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    backend = {"service": {"name": "agree", "port": {"number": 80}}}
    rules = [{**({"host": h} if h else {}), "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
             for h in hosts]
    body: dict[str, Any] = {"rules": rules, **spec}
    if class_name:
        body["ingressClassName"] = class_name
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "agree", "annotations": dict(annotations or {})}, "spec": body}


def claim(size: str = "1Gi", storage_class: str | None = "local-path", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec}
    if storage_class is not None:
        body["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "agree"}, "spec": body}


def token(seconds: int, *audiences: str) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds, "audiences": list(audiences)}}


def ephemeral(storage_class: str, size: str) -> dict[str, Any]:
    return {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "storageClassName": storage_class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}}}


def pod_affinity(**term: Any) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "agree"}}, "topologyKey": "topology.kubernetes.io/zone", **term}]}}


def node_affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(expressions)}]}}}


P, S, E, ING, C = Kind.POD, Kind.SERVICE, Kind.ENDPOINT_SLICE, Kind.INGRESS, Kind.CLAIM
G = "granted"
NFS = {"name": "share", "nfs": {"server": "192.0.2.10", "path": "/exports"}}
HARD = {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}
# What `kubectl debug --target=app` adds to a running pod (the ShadowPod's template carries it).
DEBUG = {"name": "debugger", "image": IMAGE, "targetContainerName": "app", "stdin": True, "tty": True}

CASES: tuple[Case, ...] = (
    # --- pods -------------------------------------------------------------------------------------
    Case("plain-pod", "pods.volumeTypes", P, pod(volumes=[{"name": "tmp", "emptyDir": {}}]), False),
    Case("priority-not-granted", "pods.priorityClasses", P, pod(priorityClassName=PRIORITY_CLASS), True),
    Case("priority-granted", "pods.priorityClasses", P, pod(priorityClassName=PRIORITY_CLASS), False, G),
    Case("priority-system", "pods.priorityClasses", P, pod(priorityClassName="system-node-critical"), True, G),
    Case("toleration-not-granted", "pods.tolerations", P,
         pod(tolerations=[{"key": "agree.example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]), True),
    Case("toleration-granted", "pods.tolerations", P,
         pod(tolerations=[{"key": "agree.example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]), False, G),
    Case("tolerate-all", "pods.tolerations", P, pod(tolerations=[{"operator": "Exists"}]), True, G),
    Case("toleration-lifecycle", "pods.tolerations", P, pod(tolerations=[
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]), False),
    Case("selector-hostname", "pods.reservedNodeLabelKeys", P, pod(nodeSelector={"kubernetes.io/hostname": "n1"}), True),
    Case("selector-reserved-by-provider", "pods.reservedNodeLabelKeys", P, pod(nodeSelector={"pool.example.com/tier": "a"}),
         True, G),
    Case("selector-ordinary", "pods.reservedNodeLabelKeys", P, pod(nodeSelector={"disktype": "ssd"}), False),
    Case("affinity-control-plane", "pods.reservedNodeLabelKeys", P, pod(affinity=node_affinity(
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        {"key": "disktype", "operator": "In", "values": ["ssd"]})), True),
    Case("affinity-only-reserved", "pods.reservedNodeLabelKeys", P, pod(affinity=node_affinity(
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]})), True),
    Case("spread-by-hostname", "pods.reservedNodeLabelKeys", P, pod(topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "agree"}}}]), False),
    Case("spread-by-node-role", "pods.reservedNodeLabelKeys", P, pod(topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "node-role.kubernetes.io/worker", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "agree"}}}]), True),
    Case("pod-affinity-other-namespace", "pods.reservedNodeLabelKeys", P, pod(affinity=pod_affinity(namespaces=["kube-system"])),
         True),
    Case("pod-affinity-own-namespace", "pods.reservedNodeLabelKeys", P, pod(affinity=pod_affinity(namespaces=[TWIN])), False),
    Case("volume-nfs", "pods.volumeTypes", P, pod(volumes=[NFS]), True),
    Case("volume-nfs-granted", "pods.volumeTypes", P, pod(volumes=[NFS]), False, G),
    Case("volume-hostpath", "pods.volumeTypes", P, pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}]), True, G),
    Case("projected-token", "pods.volumeTypes", P, pod(volumes=[{"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "vault"}}]}}]), True),
    Case("runtime-class-not-granted", "pods.runtimeClasses", P, pod(runtimeClassName=RUNTIME_CLASS), True),
    Case("runtime-class-granted", "pods.runtimeClasses", P, pod(runtimeClassName=RUNTIME_CLASS), False, G),
    Case("denied-label", "pods.deniedMetadataPrefixes", P, pod(labels={"internal.example.com/team": "a"}), True, G),
    Case("denied-annotation-always", "pods.deniedMetadataPrefixes", P,
         pod(annotations={"k8s.v1.cni.cncf.io/networks": "kube-system/macvlan"}), True),
    Case("ordinary-metadata", "pods.deniedMetadataPrefixes", P,
         pod(labels={"app.kubernetes.io/name": "agree"}, annotations={"kubectl.kubernetes.io/default-container": "app"}), False),
    Case("scheduler-not-granted", "pods.schedulerNames", P, pod(schedulerName="agree-scheduler"), True),
    Case("scheduler-granted", "pods.schedulerNames", P, pod(schedulerName="agree-scheduler"), False, G),
    Case("scheduler-default", "pods.schedulerNames", P, pod(schedulerName="default-scheduler"), False),
    Case("image-not-granted", "pods.imageRegistries", P,
         pod(containers=[{"name": "app", "image": "quay.io/provider/private:1"}]), True, G),
    Case("image-docker-hub-short-name", "pods.imageRegistries", P, pod(containers=[{"name": "app", "image": "busybox:1.37"}]),
         True, G),
    Case("image-granted", "pods.imageRegistries", P, pod(), False, G),
    Case("image-any-by-default", "pods.imageRegistries", P,
         pod(containers=[{"name": "app", "image": "quay.io/someone/app:1"}]), False),
    Case("remote-api-not-granted", "pods.remoteAPIAccess", P, pod(automountServiceAccountToken=True), False,
         why="the provider does not refuse it: it makes the pod without a token; the consumer does not send it"),
    Case("remote-api-granted", "pods.remoteAPIAccess", P, pod(automountServiceAccountToken=True), False, G),
    Case("debug-not-granted", "pods.ephemeralContainers", P, pod(ephemeralContainers=[DEBUG]), True),
    Case("debug-granted", "pods.ephemeralContainers", P, pod(ephemeralContainers=[DEBUG]), False, G),
    Case("debug-image-not-granted", "pods.imageRegistries", P,
         pod(ephemeralContainers=[{**DEBUG, "image": "busybox:1.36"}]), True, G),
    Case("grace-eight-days", "pods.maxTerminationGracePeriodSeconds", P, pod(terminationGracePeriodSeconds=8 * 24 * 3600),
         False, why="the provider does not refuse it: it cuts the grace; the consumer lowers it"),
    Case("ephemeral-class-not-granted", "storage.classes", P, pod(volumes=[ephemeral("local-path", "1Gi")]), True),
    Case("ephemeral-granted", "storage.classes", P, pod(volumes=[ephemeral("local-path", "1Gi")]), False, G),
    Case("ephemeral-too-big", "storage.maxClaimSize", P, pod(volumes=[ephemeral("local-path", "2Gi")]), True, G),
    Case("hard-without-limits", "quotaMode", P, pod(containers=[{"name": "app", "image": IMAGE,
                                                               "resources": {"requests": {"cpu": "100m"}}}]), True, "hard"),
    Case("hard-with-equal-limits", "quotaMode", P, pod(containers=[{"name": "app", "image": IMAGE, "resources": HARD}]),
         False, "hard"),
    # --- Services ---------------------------------------------------------------------------------
    Case("service-clusterip", "services.types", S, service(), False),
    Case("service-nodeport", "services.types", S, service(type="NodePort"), True),
    Case("service-nodeport-granted", "services.types", S, service(type="NodePort"), False, G),
    Case("service-loadbalancer", "services.types", S, service(type="LoadBalancer"), True, G),
    Case("service-externalname", "services.externalName", S, service(type="ExternalName", externalName="db.example.com",
                                                                       selector=None, ports=None), True),
    Case("service-externalname-granted", "services.externalName", S,
         service(type="ExternalName", externalName="db.example.com", selector=None, ports=None), False, G),
    Case("service-external-ip", "services.externalIPCIDRs", S, service(externalIPs=["192.0.2.10"]), True),
    Case("service-external-ip-outside-grant", "services.externalIPCIDRs", S, service(externalIPs=["198.51.100.7"]), True, G),
    Case("service-lb-source-ranges-on-clusterip", "never.serviceExternalFields", S,
         service(loadBalancerSourceRanges=["0.0.0.0/0"]), True),
    # --- EndpointSlices ---------------------------------------------------------------------------
    Case("slice-in-granted-range", "endpoints.cidrs", E, endpoint_slice("10.200.0.5"), False, G),
    Case("slice-outside-ranges", "endpoints.cidrs", E, endpoint_slice("10.9.9.9"), True, G),
    Case("slice-no-range-by-default", "endpoints.cidrs", E, endpoint_slice("10.200.0.5"), True),
    Case("slice-loopback", "endpoints.cidrs", E, endpoint_slice("127.0.0.1"), True, G),
    Case("slice-metadata", "endpoints.cidrs", E, endpoint_slice("169.254.169.254"), True, G),
    Case("slice-fqdn", "services.externalName", E, endpoint_slice("db.example.com", address_type="FQDN"), True),
    # --- Ingresses --------------------------------------------------------------------------------
    Case("ingress-granted", "ingress.hostDomains", ING, ingress("shop.agree.example.com"), False, G),
    Case("ingress-by-default", "ingress.classes", ING, ingress("shop.agree.example.com"), True),
    Case("ingress-other-class", "ingress.classes", ING, ingress("shop.agree.example.com", class_name="internal"), True, G),
    Case("ingress-host-outside", "ingress.hostDomains", ING, ingress("bank.example.org"), True, G),
    Case("ingress-tls-host-outside", "ingress.hostDomains", ING,
         ingress("shop.agree.example.com", tls=[{"hosts": ["bank.example.org"], "secretName": "tls"}]), True, G),
    Case("ingress-annotation-not-granted", "ingress.annotations", ING,
         ingress("shop.agree.example.com", annotations={"nginx.ingress.kubernetes.io/configuration-snippet": "x"}), True, G),
    Case("ingress-annotation-granted", "ingress.annotations", ING,
         ingress("shop.agree.example.com", annotations={"nginx.ingress.kubernetes.io/rewrite-target": "/"}), False, G),
    Case("ingress-catch-all-rule", "never.ingressCatchAll", ING, ingress(""), True, G),
    Case("ingress-default-backend", "never.ingressCatchAll", ING,
         ingress("shop.agree.example.com", defaultBackend={"service": {"name": "agree", "port": {"number": 80}}}), True, G),
    # --- claims and Secrets -----------------------------------------------------------------------
    Case("claim-granted", "storage.classes", C, claim(), False, G),
    Case("claim-no-class-granted", "storage.classes", C, claim(), True),
    Case("claim-other-class", "storage.classes", C, claim(storage_class="fast"), True, G),
    Case("claim-no-class-named", "storage.classes", C, claim(storage_class=None), False, G, server=False,
         why="the API server names its default class before the policy reads it: the consumer cannot know it"),
    Case("claim-exabyte", "storage.maxClaimSize", C, claim("1Ei"), True, G),
    Case("claim-default-bound", "storage.maxClaimSize", C, claim("200Gi"), True, G),
    Case("claim-named-volume", "never.claimSources", C, claim(volumeName="pv-someone-else"), True, G),
    # Both fields, as the API server stores a claim that sets one (it copies it to the other).
    Case("claim-foreign-source", "never.claimSources", C, claim(
        dataSource={"apiGroup": "backup.example.com", "kind": "Backup", "name": "db"},
        dataSourceRef={"apiGroup": "backup.example.com", "kind": "Backup", "name": "db"}), True, G),
    # (Another namespace's claim as a source: the API server drops dataSourceRef.namespace
    # unless its CrossNamespaceVolumeDataSource gate is on, so what the policy reads depends
    # on the provider's gates: the unit half only.)
    Case("claim-other-namespace", "never.claimSources", C, claim(dataSourceRef={
        "kind": "PersistentVolumeClaim", "name": "db", "namespace": "kube-system"}), True, G, server=False,
         why="the API server drops the field unless a feature gate is on"),
    Case("secret-sa-token", "never.serviceAccountTokenSecrets", Kind.SECRET, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "agree", "annotations": {
            "kubernetes.io/service-account.name": "default"}}, "type": "kubernetes.io/service-account-token"}, True),
    Case("secret-opaque", "never.serviceAccountTokenSecrets", Kind.SECRET,
         {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "agree"}, "type": "Opaque", "data": {}}, False),
    # --- tokens -----------------------------------------------------------------------------------
    Case("token-a-day", "tokens.maxExpirationSeconds", Kind.TOKEN_REQUEST, token(24 * 3600), False,
         context={"api_audiences": (API_AUDIENCE,)}),
    Case("token-eight-days", "tokens.maxExpirationSeconds", Kind.TOKEN_REQUEST, token(8 * 24 * 3600), True,
         context={"api_audiences": (API_AUDIENCE,)}),
    Case("token-over-the-grant", "tokens.maxExpirationSeconds", Kind.TOKEN_REQUEST, token(3 * 3600), True, G,
         context={"api_audiences": (API_AUDIENCE,)}),
    Case("token-foreign-audience", "tokens.audiences", Kind.TOKEN_REQUEST, token(3600, "sts.amazonaws.com"), True, G,
         context={"api_audiences": (API_AUDIENCE,)}),
    Case("token-granted-audience", "tokens.audiences", Kind.TOKEN_REQUEST, token(3600, "vault.example.com"), False, G,
         context={"api_audiences": (API_AUDIENCE,)}),
    # --- the tenant namespace: twin requests and what is held (the e2e has its own tests for these) --
    Case("twin-default-name", "twinNamespaces.sameNames", Kind.TWIN_REQUEST, {"metadata": {"name": "web-agree"}}, False,
         context={"consumer_id": "agree"}, server=False, why="tests/e2e/test_policy_agreement.py twin tests"),
    Case("twin-same-name", "twinNamespaces.sameNames", Kind.TWIN_REQUEST, {"metadata": {"name": "web"}}, True,
         context={"consumer_id": "agree"}, server=False, why="the twin tests"),
    Case("twin-same-name-granted", "twinNamespaces.sameNames", Kind.TWIN_REQUEST, {"metadata": {"name": "agree-shared"}}, False,
         G, context={"consumer_id": "agree"}, server=False, why="the twin tests"),
    Case("twin-reserved", "twinNamespaces.reserved", Kind.TWIN_REQUEST, {"metadata": {"name": "agree-secret-agree"}}, True, G,
         context={"consumer_id": "agree"}, server=False, why="the twin tests"),
    Case("twin-kube", "twinNamespaces.reserved", Kind.TWIN_REQUEST, {"metadata": {"name": "kube-agree"}}, True,
         context={"consumer_id": "agree"}, server=False, why="the twin tests"),
    Case("twin-id-clash", "never.consumerIdClash", Kind.TWIN_REQUEST, {"metadata": {"name": "web-x-agree"}}, True,
         context={"consumer_id": "x-agree", "older_consumers": ("agree",)}, server=False, why="the twin tests"),
    Case("twins-at-the-most", "twinNamespaces.maxCount", Kind.TENANT_COUNT,
         {"counted": "twinNamespaces.maxCount", "held": 50}, True, server=False, why="the count tests"),
    Case("twins-below-the-most", "twinNamespaces.maxCount", Kind.TENANT_COUNT,
         {"counted": "twinNamespaces.maxCount", "held": 49}, False, server=False, why="the count tests"),
    Case("requests-at-the-most", "twinNamespaces.maxRequests", Kind.TENANT_COUNT,
         {"counted": "twinNamespaces.maxRequests", "held": 100}, True, server=False, why="the count tests"),
    Case("slices-at-the-most", "slices.maxCount", Kind.TENANT_COUNT, {"counted": "slices.maxCount", "held": 20}, True,
         server=False, why="the count tests"),
    Case("configmaps-at-the-most", "twinNamespaces.maxObjects", Kind.TENANT_COUNT,
         {"counted": "twinNamespaces.maxObjects", "kind": "configmaps", "held": 200}, True, server=False, why="the count tests"),
    Case("shadowpods-below-the-most", "twinNamespaces.maxObjects", Kind.TENANT_COUNT,
         {"counted": "twinNamespaces.maxObjects", "kind": "shadowpods.kube-offload.io", "held": 499}, False, server=False,
         why="the count tests"),
    # --- custom resources -------------------------------------------------------------------------
    Case("custom-not-granted", "customResources", Kind.CUSTOM_RESOURCE,
         {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"size": 1}}, True,
         context={"group": "example.com", "resource": "widgets"}, server=False,
         why="tests/e2e/test_reflection_crd.py drives the custom-resource webhook with a CRD of its own"),
)


def substituted(obj: Any, twin: str) -> Any:
    """``obj`` with :data:`TWIN` replaced by ``twin``."""
    if isinstance(obj, dict):
        return {k: substituted(v, twin) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [substituted(v, twin) for v in obj]
    return twin if obj == TWIN else obj
