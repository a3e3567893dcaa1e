"""Run every component under the identity its Helm chart gives it, never an admin.

The loopback harness runs our components as local processes, not as the charts'
Deployments (kwok only pretends to run pods). So that the charts' RBAC is what the
components really run under, the harness renders each chart with real ``helm template``,
applies only its *identity* objects (CRDs, Namespaces, ServiceAccounts, Roles, bindings,
Consumers) and starts each component with a kubeconfig built from a TokenRequest token of
the ServiceAccount the chart made for it. A verb missing from a chart shows up as a
failing test; nothing is granted here that the chart does not grant.

The pure parts (which rendered objects are identities, the kubeconfig of a token) are
table-tested; the rest is thin I/O through helm and kubectl.
"""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from kube_offload.provider_policy import OBJECT_COUNT_KINDS

REPO = Path(__file__).resolve().parents[2]
LOCAL_CHART = REPO / "charts" / "kube-offload-local"
REMOTE_CHART = REPO / "charts" / "kube-offload-remote"

RELEASE = "kube-offload"
RELEASE_NAMESPACE = "kube-offload"

# What gives a component its identity and permissions. Workloads, Services, webhook
# registrations and hook Jobs are left out: the harness runs the processes itself and
# registers webhooks by URL on 127.0.0.1.
IDENTITY_KINDS = frozenset({
    "CustomResourceDefinition",
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Consumer",
    # Not an identity, but what the vkubelet's storage loops serve: the chart's virtual
    # StorageClass (docs/storage.md).
    "StorageClass",
    # Not identities either, but the provider's policy on what a consumer writes, checked
    # by the API server itself: installed exactly as the chart renders them, so the e2e
    # tests meet the same CEL a provider runs (templates/admission-policies.yaml).
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    # The fence of a consumer's relay (templates/home-api-relay.yaml): what a provider's
    # network plugin enforces, applied as rendered so the tests meet the stored policy.
    "NetworkPolicy",
})

# Tokens last as long as a demo environment may be left running; the apiserver caps them
# at --service-account-max-token-expiration where that is set.
TOKEN_DURATION = "48h"


class IdentityError(RuntimeError):
    """Rendering a chart or minting a token failed; the message says which and why."""


def identity_objects(documents: Iterable[Mapping[str, Any] | None]) -> list[dict]:
    """The identity objects of a rendered chart, CRDs and Namespaces first (what the rest
    needs to exist), hooks excluded (they live only during an install)."""
    order = {"CustomResourceDefinition": 0, "Namespace": 1}
    kept = []
    for doc in documents:
        if not doc or doc.get("kind") not in IDENTITY_KINDS:
            continue
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        if "helm.sh/hook" in annotations:
            continue
        kept.append(dict(doc))
    return sorted(kept, key=lambda d: order.get(d["kind"], 2))


def of_components(objects: Iterable[Mapping[str, Any]], components: Iterable[str]) -> list[dict]:
    """The objects labelled ``app.kubernetes.io/component`` with one of ``components``: the
    identities of the processes the harness runs itself when a Helm release (installed by
    ``kube-offload peer``) owns the rest of the chart, which Helm would refuse to share."""
    wanted = set(components)
    return [dict(o) for o in objects
            if ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") in wanted]


def token_kubeconfig(admin: Mapping[str, Any], token: str, user: str) -> dict:
    """A kubeconfig for ``token`` against the same server (and CA) as ``admin``'s
    current context: only the credentials change."""
    contexts = {c["name"]: c["context"] for c in admin.get("contexts") or []}
    current = admin.get("current-context") or next(iter(contexts), None)
    if current not in contexts:
        raise IdentityError("the admin kubeconfig has no current context")
    cluster_name = contexts[current]["cluster"]
    clusters = {c["name"]: c["cluster"] for c in admin.get("clusters") or []}
    if cluster_name not in clusters:
        raise IdentityError(f"the admin kubeconfig has no cluster {cluster_name!r}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": dict(clusters[cluster_name])}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": user,
    }


@dataclass(frozen=True)
class ServiceAccountRef:
    namespace: str
    name: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def render_chart(helm: Path, chart: Path, values: Mapping[str, Any], *, env: Mapping[str, str]) -> list[dict]:
    """``helm template`` of ``chart`` as release ``kube-offload`` in namespace
    ``kube-offload``, CRDs included."""
    argv = [
        str(helm), "template", RELEASE, str(chart),
        "--namespace", RELEASE_NAMESPACE, "--include-crds", "--values", "-",
    ]
    result = subprocess.run(
        argv, input=yaml.safe_dump(dict(values)), capture_output=True, text=True, timeout=120, env=dict(env)
    )
    if result.returncode != 0:
        raise IdentityError(f"`helm template {chart.name}` failed: {result.stderr.strip()[-2000:]}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def release_namespace() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}


def local_values(local_cluster_id: str, remote_ids: Iterable[str], *, serving_cert: Mapping[str, str] | None = None,
                 gateways: Iterable[str] = ()) -> dict:
    """The local chart's values for this topology (what docs/install.md shows a user);
    ``serving_cert``: the vkubelet's ``servingCert`` (its RBAC for the CSR API);
    ``gateways``: the remotes joined by kube-offload's gateway (its identity)."""
    with_gateway = set(gateways)
    values: dict[str, Any] = {
        "localClusterId": local_cluster_id,
        "remoteClusters": [{"id": rid, "kubeconfigSecret": f"{rid}-kubeconfig",
                            **({"gateway": {"enabled": True}} if rid in with_gateway else {})} for rid in remote_ids],
        # The real local class of the virtual storage class (harness/.../storage.py).
        "storage": {"localClass": "local-path"},
    }
    if serving_cert is not None:
        values["vkubelet"] = {"servingCert": dict(serving_cert)}
    return values


# The test consumer's provider policy (Consumer spec.policy): the safe defaults plus, by
# name, what existing e2e tests need (docs/testing.md). Everything else a test wants
# beyond the defaults it grants itself by patching the Consumer, and takes back
# (test_provider_policy_network.py narrows and widens it per module).
TOLERATION_GRANTED_IN_TESTS = "e2e.kube-offload.io/extra"  # test_pod_updates adds it to a running pod
E2E_INGRESS_CLASS = "e2e"  # test_reflection's Ingress
E2E_INGRESS_DOMAIN = "e2e.example.com"
E2E_STORAGE_CLASS = "local-path"  # the remote's real class (storage.py): test_stateful's claims
E2E_MAX_OBJECTS = 100000
E2E_POLICY: Mapping[str, Any] = {
    "pods": {"tolerations": [TOLERATION_GRANTED_IN_TESTS]},
    # The local pod range as the provider reaches it (cluster.LOCAL_POD_CIDR_REMAPPED):
    # reflected EndpointSlices of local pods. An environment whose remote pods run on a
    # real node has other addresses: cluster.up installs e2e_policy(...), this with the
    # environment's range.
    "endpoints": {"cidrs": ["10.200.0.0/16"]},
    "ingress": {"hostDomains": [E2E_INGRESS_DOMAIN], "classes": [E2E_INGRESS_CLASS]},
    "storage": {"classes": [E2E_STORAGE_CLASS]},
    # Far above what any test or benchmark keeps in one twin (bench/bench_scale.py: thousands
    # of pods, a token Secret each): the default bounds are tested with consumers of their own.
    "twinNamespaces": {"maxObjects": {kind: E2E_MAX_OBJECTS for kind in OBJECT_COUNT_KINDS}},
}


def e2e_policy(*, local_pods_remapped: Iterable[str]) -> dict:
    """E2E_POLICY with the EndpointSlice addresses of the environment: the local pods'
    remapped CIDR as this remote reaches them (cluster.local_pod_cidr_remapped; kwok's
    10.200.0.0/16, or the fabric's 172.30.<local slot>.0/24 when the remote's pods run on
    its real node)."""
    policy = copy.deepcopy(dict(E2E_POLICY))
    policy["endpoints"] = {"cidrs": list(local_pods_remapped)}
    return policy


# The test consumer's quota when a test names none: the chart admits no consumer without one
# (no default fits every provider, docs/security.md), and this one bounds only the pod count,
# far above what any test or benchmark runs, so the tests of everything else are not about it.
E2E_QUOTA: Mapping[str, str] = {"pods": "100000"}


def remote_values(consumer_id: str, *, node_labels: Mapping[str, str], quota: Mapping[str, str] | None = None,
                  policy: Mapping[str, Any] | None = E2E_POLICY, pools: list[dict] | None = None, gateway: bool = False) -> dict:
    """The remote chart's values admitting one consumer (what ``kube-offload peer`` does),
    with ``quota`` (None: E2E_QUOTA), the tests' provider policy (None: the chart's, i.e.
    the safe defaults) and the node pools it may ask slices of (docs/slices.md)."""
    consumer: dict[str, Any] = {"name": consumer_id, "createTokenSecret": False, "quota": dict(quota or E2E_QUOTA)}
    if pools:
        consumer["pools"] = copy.deepcopy(pools)
    if policy is not None:
        consumer["policy"] = copy.deepcopy(dict(policy))
    if gateway:
        consumer["gateway"] = {"enabled": True}
    return {"nodeLabels": dict(node_labels), "consumers": [consumer]}


# The ServiceAccounts the charts create for each component (release "kube-offload").
WEBHOOK_SA = ServiceAccountRef(RELEASE_NAMESPACE, f"{RELEASE}-webhook")
EXTENDER_SA = ServiceAccountRef(RELEASE_NAMESPACE, f"{RELEASE}-extender")
VKUBELET_SA = ServiceAccountRef(RELEASE_NAMESPACE, f"{RELEASE}-vkubelet")
ENFORCER_SA = ServiceAccountRef(RELEASE_NAMESPACE, f"{RELEASE}-enforcer")
CONSUMER_TWIN_ROLE = f"{RELEASE}-consumer-twin"


def consumer_sa(consumer_id: str) -> ServiceAccountRef:
    from kube_offload import constants as c

    return ServiceAccountRef(c.tenant_namespace(consumer_id), c.CONSUMER_SERVICE_ACCOUNT)
