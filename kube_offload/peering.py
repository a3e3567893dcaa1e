"""What ``kube-offload peer`` and ``kube-offload unpeer`` speak of (pure): the options and
the state of the two clusters, the steps' actions, the names of what peering creates, the
checks of the user's input and the merges of the two releases' values. The plans
themselves (the list of steps from what both clusters hold now and what the user asked
for) are :mod:`kube_offload.peering_plans`', which read this vocabulary and nothing reads
back.

Everything here is pure: the CLI (:mod:`kube_offload.peer`) reads the two clusters into
a :class:`PeerState` / :class:`UnpeerState`, asks ``peering_plans.plan_peer`` /
``plan_unpeer`` for the steps, prints them (``--dry-run`` stops there) and carries them
out. Each step says in one line what it does, and whether it changes anything (waits and
checks do not), so a second run on a peered pair plans no change at all: a release is
upgraded only when its values or chart version differ, the kubeconfig Secret is written
only when its content differs, and so on.

Peering touches two Helm releases, and only through their values: the remote release
(chart kube-offload-remote) lists the consumers it admits in ``consumers``, the local
release (chart kube-offload-local) lists the remote clusters it uses in
``remoteClusters``. Both lists are merged by key (``name`` / ``id``): peering one pair
never drops another consumer or another remote cluster.

The pure half of the two commands is these two modules, the vocabulary here and the
plans beside it (one way: the plans import this, never the reverse); the I/O half is the
package :mod:`kube_offload.peer`, split by concern.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import fabric as fb
from kube_offload.provider_policy import POLICY, ProviderPolicyError, parse_policy
from kube_offload.resources import QuantityError, parse_quantity
from kube_offload.selector import label_key_problem, label_value_problem
from kube_offload.slice_requests import SliceError, SliceLeftovers, SliceRequest, chart_values, parse_slice_list

REMOTE_CHART = "kube-offload-remote"
LOCAL_CHART = "kube-offload-local"
DEFAULT_NAMESPACE = "kube-offload"
DEFAULT_RELEASE = "kube-offload"
# The long-lived token Secret of the consumer's ServiceAccount that the remote chart made
# before bound tokens (chart value createTokenSecret); `peer` deletes one it finds.
LEGACY_TOKEN_SECRET = "consumer-token"
# The ConfigMap every namespace gets from kube-controller-manager with the cluster's CA:
# the CA of the consumer's kubeconfig when the remote kubeconfig names none.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
# Key of the kubeconfig in the local Secret; the local chart's default kubeconfigKey.
KUBECONFIG_KEY = "kubeconfig"
# Set on the objects `peer` writes itself (not through Helm), so they say who made them.
PEER_MANAGER = "kube-offload-peer"
# The pod template annotation `kubectl rollout restart` sets; the same effect here.
RESTARTED_AT_ANNOTATION = "kubectl.kubernetes.io/restartedAt"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# --- actions --------------------------------------------------------------------------------
# peer
REMOTE_RELEASE = "remote-release"  # install/upgrade the remote chart (consumer added or removed)
DELETE_LEGACY_TOKEN = "delete-legacy-token"
REQUEST_TOKEN = "request-token"
KUBECONFIG_SECRET = "kubeconfig-secret"
LOCAL_RELEASE = "local-release"  # install/upgrade the local chart (remote added or removed)
RESTART_VKUBELET = "restart-vkubelet"
WAIT_NODE_READY = "wait-node-ready"
GATEWAY_OBJECTS = "gateway-objects"  # the gateways' ConfigMaps (CIDRs) and empty key Secrets, both sides
ROTATE_GATEWAY_KEYS = "rotate-gateway-keys"
GATEWAY_PEERS = "gateway-peers"  # each gateway told the other's public key and endpoint
# peer removing a slice, and unpeer (docs/slices.md "Removing a slice")
CORDON_SLICE_NODES = "cordon-slice-nodes"
WAIT_SLICE_VKUBELETS_GONE = "wait-slice-vkubelets-gone"
DELETE_SLICE_NODES = "delete-slice-nodes"
DELETE_SLICE_SHADOWPODS = "delete-slice-shadowpods"
DELETE_OFFLOAD_SLICES = "delete-offload-slices"
# unpeer
CORDON_NODE = "cordon-node"
EVICT_PODS = "evict-pods"
WAIT_VKUBELET_GONE = "wait-vkubelet-gone"
DELETE_KUBECONFIG_SECRET = "delete-kubeconfig-secret"
DELETE_NODE = "delete-node"
REVOKE_CONSUMER = "revoke-consumer"
DELETE_TWIN_REQUESTS = "delete-twin-requests"
DELETE_TWIN_NAMESPACES = "delete-twin-namespaces"
WAIT_TWINS_GONE = "wait-twins-gone"
DELETE_CONSUMER = "delete-consumer"
DELETE_GATEWAY_OBJECTS = "delete-gateway-objects"
WAIT_CONSUMER_GONE = "wait-consumer-gone"
NOTE = "note"


class PeeringError(ValueError):
    """Bad input or a state peering cannot go on from; the message names the fix."""


# --- inputs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """A Helm release as ``helm list`` and ``helm get values`` show it."""

    name: str
    namespace: str
    revision: int
    status: str  # deployed, failed, pending-install, ...
    chart: str  # <chart name>-<version>, e.g. kube-offload-remote-0.1.0
    values: Mapping[str, Any]  # the user-supplied values (helm get values, without --all)


@dataclass(frozen=True)
class ChartRef:
    name: str
    version: str
    path: str  # a chart directory, or an OCI reference (oci://HOST/PATH/<name>) installed at ``version``

    @property
    def label(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class GatewayOptions:
    """``peer --gateway``: kube-offload's own fabric for the pair (docs/networking.md)."""

    cidrs: fb.FabricCIDRs
    # HOST:PORT of the remote gateway as the local gateway reaches it, and the other way;
    # "": read from the gateway's Service (its load balancer, or its node and NodePort).
    remote_endpoint: str = ""
    local_endpoint: str = ""
    rotate_keys: bool = False


@dataclass(frozen=True)
class GatewaySide:
    """One gateway's objects as peer reads them."""

    config: Mapping[str, str] | None  # its ConfigMap's data; None: no ConfigMap
    key_secret_exists: bool


@dataclass(frozen=True)
class PeerOptions:
    local_cluster_id: str
    remote_cluster_id: str
    remote_server: str  # as reachable from the local cluster's pods
    remote_ca_pem: bytes | None  # from the remote kubeconfig; None: the tenant namespace's kube-root-ca.crt
    remote_chart: ChartRef
    local_chart: ChartRef
    namespace: str = DEFAULT_NAMESPACE
    local_release: str = DEFAULT_RELEASE
    remote_release: str = DEFAULT_RELEASE
    quota: Mapping[str, str] | None = None  # None: keep what the release has
    pod_security_level: str | None = None  # None: keep (chart default baseline)
    node_labels: Mapping[str, str] | None = None  # suggested by the provider; None: keep
    # The slices asked of this remote (--slice, docs/slices.md): one more virtual node and
    # vkubelet Deployment each (remoteClusters[].slices); None: keep what the release has.
    slices: tuple[SliceRequest, ...] | None = None
    # Consumer spec.policy from --policy-file (validated); None: keep what the release has.
    policy: Mapping[str, Any] | None = None
    # (section, key) -> the values of a --grant-* flag, set on top of ``policy`` (or of the
    # release's policy when no file is given); a key not given is kept.
    policy_grants: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    local_values: Mapping[str, Any] = field(default_factory=dict)  # from --local-values files
    remote_values: Mapping[str, Any] = field(default_factory=dict)  # from --remote-values files
    wait: bool = True
    # The lifetime asked of the consumer's bound token (TokenRequest); the API server may
    # shorten it. A stored token past renew_fraction of its lifetime is renewed.
    token_expiration_seconds: int = bt.DEFAULT_EXPIRATION_SECONDS
    renew_fraction: float = bt.DEFAULT_RENEW_FRACTION
    gateway: GatewayOptions | None = None  # None: leave the fabric as the releases have it


@dataclass(frozen=True)
class PeerState:
    remote_release: Release | None
    legacy_token_secret_exists: bool  # the long-lived consumer-token Secret of an older chart
    remote_ca_pem: bytes | None  # the tenant namespace's kube-root-ca.crt; None: not there (yet)
    kubeconfig_secret: Mapping[str, Any] | None  # the local Secret's kubeconfig, parsed; None: no Secret
    kubeconfig_secret_exists: bool
    local_release: Release | None
    vkubelet_deployed: bool  # the local release already runs a vkubelet for this remote
    node_ready: bool
    now: float = 0.0  # when the state was read (seconds since the epoch): token ages are measured to it
    # The consumer's ServiceAccount on the remote; gone (revoked by hand) while the release
    # still lists the consumer: the upgrade makes it again, with a new identity.
    consumer_service_account_exists: bool = True
    local_gateway: GatewaySide = GatewaySide(None, False)
    remote_gateway: GatewaySide = GatewaySide(None, False)
    slices: SliceLeftovers = SliceLeftovers()


@dataclass(frozen=True)
class UnpeerOptions:
    local_cluster_id: str
    remote_cluster_id: str
    # Helm upgrades need a chart: removing an entry re-renders the chart from here.
    remote_chart: ChartRef
    local_chart: ChartRef
    namespace: str = DEFAULT_NAMESPACE
    local_release: str = DEFAULT_RELEASE
    remote_release: str = DEFAULT_RELEASE


@dataclass(frozen=True)
class UnpeerState:
    node_exists: bool
    node_unschedulable: bool
    pods_on_node: Sequence[str]  # "namespace/name" of pods bound to the virtual node
    local_release: Release | None
    vkubelet_pods: Sequence[str]  # pods of this remote's vkubelet Deployment
    kubeconfig_secret_exists: bool
    twin_requests: Sequence[str]  # TwinNamespace names in the consumer's tenant namespace
    twin_namespaces: Sequence[str]  # namespaces the enforcer made for this consumer
    foreign_namespaces: Sequence[str]  # carry the consumer's origin label, not made by the enforcer
    remote_release: Release | None
    tenant_namespace_exists: bool
    consumer_exists: bool
    consumer_service_account_exists: bool = False  # its identity: deleting it revokes every token
    local_gateway_objects: Sequence[str] = ()  # "kind/name" of the gateway's ConfigMap and Secret
    remote_gateway_objects: Sequence[str] = ()
    slices: SliceLeftovers = SliceLeftovers()


@dataclass(frozen=True)
class Step:
    action: str
    description: str  # one line, prefixed with the side it acts on ("local:", "remote:")
    changes: bool = True
    data: Mapping[str, Any] = field(default_factory=dict)


# --- names ----------------------------------------------------------------------------------
# The virtual node of a remote cluster: the contract's name (kube_offload/constants.py).
node_name = c.virtual_node_name


def kubeconfig_secret_name(remote_cluster_id: str) -> str:
    return f"{remote_cluster_id}-kubeconfig"


def chart_fullname(release: str) -> str:
    """The charts' ``fullname`` helper: the release name if it says kube-offload, else
    ``<release>-kube-offload``, cut at 40 characters."""
    name = release if "kube-offload" in release else f"{release}-kube-offload"
    return name[:40].rstrip("-")


def vkubelet_deployment_name(local_release: str, remote_cluster_id: str) -> str:
    return f"{chart_fullname(local_release)}-vkubelet-{remote_cluster_id}"


def local_gateway_name(options: "PeerOptions | UnpeerOptions") -> str:
    """The consumer's gateway to the remote (its Deployment, Service, ConfigMap)."""
    return fb.gateway_name(chart_fullname(options.local_release), options.remote_cluster_id)


def remote_gateway_name(options: "PeerOptions | UnpeerOptions") -> str:
    """The provider's gateway to the consumer."""
    return fb.gateway_name(chart_fullname(options.remote_release), options.local_cluster_id)


def gateway_config_map(name: str, peer_id: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": PEER_MANAGER, fb.LABEL_GATEWAY_PEER: peer_id}},
            "data": dict(data)}


def gateway_key_secret(name: str, peer_id: str, namespace: str) -> dict[str, Any]:
    """Empty: the gateway makes its key into it (the private key never leaves its cluster)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": PEER_MANAGER, fb.LABEL_GATEWAY_PEER: peer_id}}}


def consumer_username(consumer_id: str) -> str:
    return f"system:serviceaccount:{c.tenant_namespace(consumer_id)}:{c.CONSUMER_SERVICE_ACCOUNT}"


# --- input checks ---------------------------------------------------------------------------
def cluster_id_problem(flag: str, value: str) -> str | None:
    if not value:
        return f"{flag} is required: a cluster id (a DNS-1123 label, e.g. local or remote-1)"
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        return f"{flag} {value!r} is not a DNS-1123 label: use lower-case letters, digits and '-' (at most 63)"
    return None


def parse_quota(text: str) -> dict[str, str]:
    """``cpu=8,memory=16Gi,pods=50`` -> ``{"cpu": "8", "memory": "16Gi", "pods": "50"}``."""
    quota: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        resource, eq, amount = part.partition("=")
        resource, amount = resource.strip(), amount.strip()
        if not eq or not resource or not amount:
            raise PeeringError(f"--quota: {part!r} is not resource=quantity (e.g. --quota cpu=8,memory=16Gi,pods=50)")
        problem = label_key_problem(resource)
        if problem:
            raise PeeringError(f"--quota: {resource!r} is not a resource name ({problem})")
        try:
            milli = parse_quantity(amount)
        except QuantityError as exc:
            raise PeeringError(f"--quota {resource}: {exc}") from None
        if milli < 0:
            raise PeeringError(f"--quota {resource}: {amount!r} is negative")
        quota[resource] = amount
    if not quota:
        raise PeeringError("--quota is empty; give resource=quantity pairs, e.g. --quota cpu=8,memory=16Gi,pods=50")
    return quota


# The --grant-* flags of `kube-offload peer`: the provider policy's most common grants,
# each one key of Consumer spec.policy (provider_policy.SCHEMA); every other key goes
# through --policy-file.
GRANT_FLAGS: dict[str, tuple[str, str]] = {
    "--grant-service-types": ("services", "types"),
    "--grant-priority-classes": ("pods", "priorityClasses"),
    "--grant-tolerations": ("pods", "tolerations"),
    "--grant-ingress-domains": ("ingress", "hostDomains"),
    "--grant-ingress-classes": ("ingress", "classes"),
    "--grant-storage-classes": ("storage", "classes"),
}


def parse_grant(text: str) -> tuple[str, ...]:
    """``a,b`` -> ("a", "b"); ``""`` grants none (clears what the release had)."""
    return tuple(dict.fromkeys(filter(None, (part.strip() for part in text.split(",")))))


def parse_policy_document(raw: Any, where: str) -> dict[str, Any]:
    """A Consumer ``spec.policy`` read from a file, as given, once it parses as the enforcer
    will read it; the error names the file and the key."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PeeringError(f"{where}: must hold a map, the Consumer's {POLICY} (docs/security.md, Provider policy)")
    try:
        parse_policy(raw)
    except ProviderPolicyError as exc:
        raise PeeringError(f"{where}: {exc}") from None
    return copy.deepcopy(dict(raw))


def policy_with_grants(base: Mapping[str, Any] | None, grants: Mapping[tuple[str, str], Sequence[str]], where: str) -> dict[str, Any]:
    """``base`` (a spec.policy) with each granted key set to its values, checked as the
    enforcer will read it."""
    policy = copy.deepcopy(dict(base or {}))
    for (section, key), values in grants.items():
        current = policy.get(section)
        policy[section] = {**(current if isinstance(current, Mapping) else {}), key: list(values)}
    try:
        parse_policy(policy)
    except ProviderPolicyError as exc:
        raise PeeringError(f"{where}: {exc}") from None
    return policy


def parse_node_labels(items: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise PeeringError(f"--node-label {item!r}: expected key=value, e.g. topology.kubernetes.io/region=eu-west")
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise PeeringError(f"--node-label {item!r}: {problem}")
        labels[key] = value
    return labels


def cluster_of_kubeconfig(kubeconfig: Mapping[str, Any], context: str | None = None) -> dict[str, Any]:
    """The ``cluster`` entry (server, certificate-authority[-data], ...) of ``context`` (or
    the current context) of a parsed kubeconfig."""
    contexts = {entry.get("name"): entry.get("context") or {} for entry in kubeconfig.get("contexts") or []}
    name = context or kubeconfig.get("current-context")
    if not name:
        raise PeeringError("the remote kubeconfig has no current-context; pass --remote-context")
    if name not in contexts:
        raise PeeringError(f"the remote kubeconfig has no context {name!r} (it has: {', '.join(map(str, contexts)) or 'none'})")
    clusters = {entry.get("name"): entry.get("cluster") or {} for entry in kubeconfig.get("clusters") or []}
    cluster_name = contexts[name].get("cluster")
    if cluster_name not in clusters:
        raise PeeringError(f"context {name!r} of the remote kubeconfig names cluster {cluster_name!r}, which it does not define")
    cluster = dict(clusters[cluster_name])
    if not cluster.get("server"):
        raise PeeringError(f"cluster {cluster_name!r} of the remote kubeconfig has no server")
    return cluster


# --- values ---------------------------------------------------------------------------------
def pod_reachable_server(flag_value: str, kubeconfig_server: str) -> str:
    """The remote API server URL to store for the virtual kubelet: ``--remote-server`` when
    given, else the remote kubeconfig's server unless that is a loopback address. The
    virtual kubelet runs in a pod of the local cluster, where 127.0.0.1 (or localhost) is
    the pod itself: a kubeconfig written for the user's machine (kind, k3d, minikube,
    kwokctl all write one) would leave the virtual node NotReady with only "connection
    refused" in the pod's log. A loopback URL given on purpose is taken as it is."""
    if flag_value:
        return flag_value
    host = (urlsplit(kubeconfig_server).hostname or "").lower()
    loopback = host == "localhost" or host.endswith(".localhost")
    try:
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if loopback:
        raise PeeringError(
            f"--remote-server is required: the remote kubeconfig names {kubeconfig_server}, a loopback address, "
            "but the virtual kubelet runs in a pod of the local cluster, where that address is the pod itself; "
            "pass --remote-server https://HOST:PORT as the local cluster's pods reach the remote API server "
            "(docs/install.md, \"Remote kubeconfig\")"
        )
    return kubeconfig_server


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of values files: maps merge key by key, anything else is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _upsert(entries: Sequence[Mapping[str, Any]], key: str, entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``entries`` with ``entry`` merged into the one of the same ``key`` (appended if none);
    every other entry kept as it was, in its place."""
    result = [dict(e) for e in entries]
    for index, existing in enumerate(result):
        if existing.get(key) == entry.get(key):
            result[index] = {**existing, **entry}
            return result
    result.append(dict(entry))
    return result


def _merge_list(current: Any, extra: Any, key: str, where: str) -> list[dict[str, Any]]:
    """Entries of ``extra`` (from a values file) upserted into ``current`` by ``key``."""
    entries = list(current or [])
    for entry in extra or []:
        if not isinstance(entry, Mapping) or not entry.get(key):
            raise PeeringError(f"{where}: every entry needs {key!r}, got {entry!r}")
        entries = _upsert(entries, key, entry)
    return entries


def remote_values_with_consumer(current: Mapping[str, Any], options: PeerOptions) -> dict[str, Any]:
    """The remote release's values admitting consumer ``options.local_cluster_id``:
    the release's current values, the --remote-values files on top, then this consumer
    upserted into ``consumers`` (other consumers kept, its own other fields kept), and the
    provider's own ``clusterId`` (``--remote-cluster-id``: what its consumers call it, so
    its enforcer refuses a pod whose offload chain already went through it, docs/multihop.md)."""
    rid = options.remote_cluster_id
    existing_id = current.get("clusterId")
    if existing_id and existing_id != rid:
        raise PeeringError(
            f"the remote release {options.remote_release!r} already has clusterId {existing_id!r} (another peering named "
            f"this cluster so); pass --remote-cluster-id {existing_id} (one cluster has one id)"
        )
    extra_id = options.remote_values.get("clusterId")
    if extra_id and extra_id != rid:
        raise PeeringError(f"--remote-values sets clusterId {extra_id!r} but --remote-cluster-id is {rid!r}")
    values = deep_merge(current, {k: v for k, v in options.remote_values.items() if k != "consumers"})
    values["clusterId"] = rid
    consumers = _merge_list(current.get("consumers"), options.remote_values.get("consumers"), "name", "--remote-values consumers")
    entry: dict[str, Any] = {"name": options.local_cluster_id}
    if options.pod_security_level is not None:
        entry["podSecurityLevel"] = options.pod_security_level
    if options.quota is not None:
        entry["quota"] = dict(options.quota)
    if options.node_labels is not None:
        entry["nodeLabels"] = dict(options.node_labels)
    if options.gateway is not None:
        entry["gateway"] = {"enabled": True}
    if options.policy is not None or options.policy_grants:
        # Like --quota: a file replaces the consumer's whole policy; without one, the
        # --grant-* flags change their keys of the policy the release has.
        base = options.policy
        if base is None:
            base = next((e.get("policy") for e in consumers if e.get("name") == options.local_cluster_id), None)
        entry["policy"] = policy_with_grants(base, options.policy_grants, f"consumer {options.local_cluster_id} {POLICY}")
    if options.gateway is not None:
        entry["policy"] = _with_gateway_endpoints(entry.get("policy", _policy_of(consumers, options.local_cluster_id)), options.gateway)
    values["consumers"] = _upsert(consumers, "name", entry)
    for admitted in values["consumers"]:
        if admitted.get("name") == options.local_cluster_id:
            # An older peer asked for a long-lived token Secret; the chart makes none now.
            admitted.pop("createTokenSecret", None)
            _check_token_fits(admitted.get("policy"), options)
            if not admitted.get("quota"):
                # No default fits every provider: the remote chart refuses a consumer without one.
                raise PeeringError(
                    f"--quota is required: consumer {options.local_cluster_id} has none on the remote release, and a "
                    "provider bounds what a consumer's pods hold (e.g. --quota cpu=8,memory=16Gi,pods=50; docs/security.md)"
                )
    return values


def _policy_of(consumers: Sequence[Mapping[str, Any]], name: str) -> Any:
    return next((e.get("policy") for e in consumers if e.get("name") == name), None)


def _with_gateway_endpoints(policy: Any, gateway: GatewayOptions) -> dict[str, Any]:
    """``policy`` admitting EndpointSlice addresses in the consumer's remapped pod CIDR: the
    addresses at which the provider's gateway reaches the consumer's pods, and nothing
    else, so a local Service the virtual kubelet reflects is served across the tunnel."""
    out = dict(policy) if isinstance(policy, Mapping) else {}
    endpoints = dict(out.get("endpoints") or {})
    cidrs = [str(c) for c in endpoints.get("cidrs") or []]
    remapped = str(gateway.cidrs.local_pod_cidr_remapped)
    endpoints["cidrs"] = cidrs if remapped in cidrs else [*cidrs, remapped]
    out["endpoints"] = endpoints
    return out


def _check_token_fits(policy: Any, options: PeerOptions) -> None:
    """The virtual kubelet renews its token for the lifetime peer gave it: a lifetime
    beyond the consumer's ``tokens.maxExpirationSeconds`` would have every renewal refused."""
    try:
        most = parse_policy(policy).tokens.max_expiration_seconds
    except ProviderPolicyError as exc:
        raise PeeringError(f"consumer {options.local_cluster_id} {POLICY}: {exc}") from None
    if options.token_expiration_seconds > most:
        raise PeeringError(
            f"--token-expiration {options.token_expiration_seconds}s is longer than consumer {options.local_cluster_id} may "
            f"renew its token for ({POLICY}.tokens.maxExpirationSeconds: {most}s): the virtual kubelet's renewals would be "
            f"refused; lower --token-expiration, or raise the key with --policy-file"
        )


def local_values_with_remote(current: Mapping[str, Any], options: PeerOptions) -> dict[str, Any]:
    """The local release's values using remote cluster ``options.remote_cluster_id``
    (other remote clusters kept; the entry's own labels, sharing percentage... kept)."""
    existing_id = current.get("localClusterId")
    if existing_id and existing_id != options.local_cluster_id:
        raise PeeringError(
            f"the local release {options.local_release!r} already has localClusterId {existing_id!r}; "
            f"pass --local-cluster-id {existing_id} (one cluster has one id)"
        )
    extra_id = options.local_values.get("localClusterId")
    if extra_id and extra_id != options.local_cluster_id:
        raise PeeringError(f"--local-values sets localClusterId {extra_id!r} but --local-cluster-id is {options.local_cluster_id!r}")
    values = deep_merge(current, {k: v for k, v in options.local_values.items() if k != "remoteClusters"})
    remotes = _merge_list(current.get("remoteClusters"), options.local_values.get("remoteClusters"), "id", "--local-values remoteClusters")
    values["localClusterId"] = options.local_cluster_id
    entry: dict[str, Any] = {"id": options.remote_cluster_id, "kubeconfigSecret": kubeconfig_secret_name(options.remote_cluster_id)}
    if options.slices is not None:
        entry["slices"] = chart_values(options.slices)
    if options.gateway is not None:
        # The vkubelet shows the translation the gateways make, from the same CIDRs.
        entry["gateway"] = {"enabled": True}
        entry.update(options.gateway.cidrs.vkubelet_values())
        vkubelet = values.get("vkubelet")
        values["vkubelet"] = {**(vkubelet if isinstance(vkubelet, Mapping) else {}),
                              "podCIDR": str(options.gateway.cidrs.local_pod_cidr)}
    values["remoteClusters"] = _upsert(remotes, "id", entry)
    return values


def parse_slice_flags(values: Sequence[str]) -> tuple[SliceRequest, ...] | None:
    """Every ``--slice`` of ``kube-offload peer`` (:func:`~kube_offload.slice_requests.parse_slice_list`);
    a bad one raises PeeringError naming the flag and the fix."""
    try:
        return parse_slice_list(list(values), flag="--slice")
    except SliceError as exc:
        raise PeeringError(str(exc)) from None


def remote_values_without_consumer(current: Mapping[str, Any], consumer_id: str) -> dict[str, Any]:
    values = copy.deepcopy(dict(current))
    values["consumers"] = [e for e in current.get("consumers") or [] if e.get("name") != consumer_id]
    return values


def local_values_without_remote(current: Mapping[str, Any], remote_cluster_id: str) -> dict[str, Any]:
    values = copy.deepcopy(dict(current))
    values["remoteClusters"] = [e for e in current.get("remoteClusters") or [] if e.get("id") != remote_cluster_id]
    return values


def has_consumer(release: Release | None, consumer_id: str) -> bool:
    return release is not None and any(e.get("name") == consumer_id for e in release.values.get("consumers") or [])


def has_remote(release: Release | None, remote_cluster_id: str) -> bool:
    return release is not None and any(e.get("id") == remote_cluster_id for e in release.values.get("remoteClusters") or [])
