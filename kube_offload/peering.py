"""Planning ``kube-offload peer`` and ``kube-offload unpeer``: from what both clusters hold
now and what the user asked for, the list of steps to take.

Everything here is pure: the CLI (:mod:`kube_offload.peer`) reads the two clusters into
a :class:`PeerState` / :class:`UnpeerState`, asks :func:`plan_peer` / :func:`plan_unpeer`
for the steps, prints them (``--dry-run`` stops there) and carries them out. Each step
says in one line what it does, and whether it changes anything (waits and checks do not),
so a second run on a peered pair plans no change at all: a release is upgraded only when
its values or chart version differ, the kubeconfig Secret is written only when its
content differs, and so on.

Peering touches two Helm releases, and only through their values: the remote release
(chart kube-offload-remote) lists the consumers it admits in ``consumers``, the local
release (chart kube-offload-local) lists the remote clusters it uses in
``remoteClusters``. Both lists are merged by key (``name`` / ``id``): peering one pair
never drops another consumer or another remote cluster.

Over 400 lines on purpose: one concern, the pure half of the two commands. Its parts (the
option and state types, the names of what peering creates, the checks of the user's input,
the merges of the two releases' values, the plans) share one vocabulary that the plans read
whole, and only :mod:`kube_offload.peer` reads them besides, as that one vocabulary
(``peering as p``). Split, every piece would import the types of the others, and each
command the pieces of all. The I/O half is the package, split by concern.
"""

from __future__ import annotations

import base64
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
from kube_offload.slice_requests import SliceError, SliceRequest, parse_slices

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
    values["consumers"] = _upsert(consumers, "name", entry)
    for admitted in values["consumers"]:
        if admitted.get("name") == options.local_cluster_id:
            # An older peer asked for a long-lived token Secret; the chart makes none now.
            admitted.pop("createTokenSecret", None)
            _check_token_fits(admitted.get("policy"), options)
    return values


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
        entry["slices"] = slice_values(options.slices)
    if options.gateway is not None:
        # The vkubelet shows the translation the gateways make, from the same CIDRs.
        entry["gateway"] = {"enabled": True}
        entry.update(options.gateway.cidrs.vkubelet_values())
        vkubelet = values.get("vkubelet")
        values["vkubelet"] = {**(vkubelet if isinstance(vkubelet, Mapping) else {}),
                              "podCIDR": str(options.gateway.cidrs.local_pod_cidr)}
    values["remoteClusters"] = _upsert(remotes, "id", entry)
    return values


def slice_values(slices: Sequence[SliceRequest]) -> list[dict[str, Any]]:
    """The local chart's remoteClusters[].slices for ``slices``."""
    return [{"name": s.name, "pool": s.pool, "resources": s.resource_strings()} for s in slices]


def parse_slice_flags(values: Sequence[str]) -> tuple[SliceRequest, ...] | None:
    """Every ``--slice`` of ``kube-offload peer`` (None when none is given: keep the
    release's); a bad one raises PeeringError naming the flag and the fix."""
    if not values:
        return None
    try:
        return tuple(parse_slices(list(values), flag="--slice"))
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


def _entry(values: Mapping[str, Any], list_key: str, key: str, wanted: str) -> dict[str, Any]:
    return next((dict(e) for e in values.get(list_key) or [] if e.get(key) == wanted), {})


def _release_is_current(release: Release | None, chart: ChartRef, values: Mapping[str, Any]) -> bool:
    return (
        release is not None
        and release.status == "deployed"
        and release.chart == chart.label
        and _normalized(release.values) == _normalized(values)
    )


def _normalized(values: Mapping[str, Any]) -> Any:
    """Values compared as Helm sees them: an empty map or list equals an absent key."""
    if isinstance(values, Mapping):
        return {k: _normalized(v) for k, v in values.items() if v not in (None, {}, [])}
    if isinstance(values, list):
        return [_normalized(v) for v in values]
    return values


def _release_verb(release: Release | None, chart: ChartRef, namespace: str, name: str) -> str:
    if release is None:
        return f"install chart {chart.label} as release {name} in namespace {namespace}"
    why = []
    if release.status != "deployed":
        why.append(f"it is {release.status}")
    if release.chart != chart.label:
        why.append(f"from {release.chart}")
    suffix = f" ({'; '.join(why)})" if why else ""
    return f"upgrade release {namespace}/{name} (revision {release.revision}) to {chart.label}{suffix}"


def _describe_consumer(entry: Mapping[str, Any]) -> str:
    parts = [f"pod security {entry.get('podSecurityLevel') or c.DEFAULT_PSA_LEVEL}"]
    quota = entry.get("quota") or {}
    parts.append("quota " + (", ".join(f"{k}={v}" for k, v in sorted(quota.items())) if quota else "none (unlimited)"))
    labels = entry.get("nodeLabels") or {}
    if labels:
        parts.append("node labels " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    grants = _policy_grants(entry.get("policy"))
    if grants:
        parts.append("policy " + ", ".join(grants))
    return "; ".join(parts)


def _policy_grants(policy: Any) -> list[str]:
    """The keys of a spec.policy that are set, as ``section.key=value`` (what differs from
    nothing: the defaults apply to the rest)."""
    if not isinstance(policy, Mapping):
        return []
    out = []
    for section, fields in sorted(policy.items()):
        if isinstance(fields, Mapping):
            for key, value in sorted(fields.items()):
                shown = "+".join(map(str, value)) if isinstance(value, list) else str(value)
                out.append(f"{section}.{key}={shown or 'none'}")
        else:
            out.append(f"{section}={fields}")
    return out


def _names(entries: Any, key: str) -> str:
    return ", ".join(str(e.get(key)) for e in entries or []) or "none"


# --- the consumer's kubeconfig --------------------------------------------------------------
def consumer_kubeconfig(*, server: str, ca_pem: bytes, token: str, remote_cluster_id: str, local_cluster_id: str) -> dict[str, Any]:
    """The kubeconfig a virtual kubelet uses in the remote cluster: its server and CA,
    the consumer ServiceAccount's token, nothing else."""
    user = f"{c.CONSUMER_SERVICE_ACCOUNT}-{local_cluster_id}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": remote_cluster_id, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": remote_cluster_id, "context": {"cluster": remote_cluster_id, "user": user}}],
        "current-context": remote_cluster_id,
    }


def desired_kubeconfig(options: PeerOptions, token: str, ca_pem: bytes) -> dict[str, Any]:
    return consumer_kubeconfig(
        server=options.remote_server,
        ca_pem=options.remote_ca_pem or ca_pem,
        token=token,
        remote_cluster_id=options.remote_cluster_id,
        local_cluster_id=options.local_cluster_id,
    )


def token_renewal_reason(kubeconfig: Mapping[str, Any] | None, now: float, fraction: float) -> str | None:
    """Why the stored kubeconfig needs a new token, or None while its token is good. The
    virtual kubelet renews its own token at ``fraction`` of its lifetime; one found past
    that point here was not renewed (the virtual kubelet was down, or is failing)."""
    token = bt.kubeconfig_token(kubeconfig)
    if token is None:
        return "it holds no token"
    lifetime = bt.lifetime(token)
    if lifetime is None:
        return "it holds a token that never expires (a long-lived token Secret's)"
    if lifetime.expired(now):
        return f"its token expired at {bt.rfc3339(lifetime.expires)}"
    if now >= lifetime.renew_at(fraction):
        return f"its token is due for renewal (expires {bt.rfc3339(lifetime.expires)})"
    return None


def _kubeconfig_differs(state: PeerState, options: PeerOptions) -> bool:
    """Whether the stored kubeconfig differs from the desired one in anything but the
    token (server, CA, names): then the virtual kubelet must restart to use it."""
    current = state.kubeconfig_secret
    ca_pem = options.remote_ca_pem or state.remote_ca_pem
    if current is None or ca_pem is None or bt.kubeconfig_token(current) is None:
        return True
    return bt.with_token(desired_kubeconfig(options, "", ca_pem), "") != bt.with_token(current, "")


# --- peer -----------------------------------------------------------------------------------
def plan_peer(state: PeerState, options: PeerOptions) -> list[Step]:
    """The steps that take the pair from ``state`` to peered as ``options`` say."""
    steps: list[Step] = []
    consumer_id, rid, ns = options.local_cluster_id, options.remote_cluster_id, options.namespace
    tenant = c.tenant_namespace(consumer_id)

    gateway = options.gateway
    if gateway is not None:
        # Before the releases: a gateway reads them as it starts.
        local_data, remote_data = gateway.cidrs.local_gateway(), gateway.cidrs.remote_gateway()
        if _gateway_objects_differ(state.local_gateway, local_data) or _gateway_objects_differ(state.remote_gateway, remote_data):
            steps.append(Step(
                GATEWAY_OBJECTS,
                f"local+remote: write the gateways' ConfigMaps {ns}/{local_gateway_name(options)} (pods "
                f"{gateway.cidrs.local_pod_cidr} seen remotely as {gateway.cidrs.local_pod_cidr_remapped}) and "
                f"{ns}/{remote_gateway_name(options)} (pods {gateway.cidrs.remote_pod_cidr} seen locally as "
                f"{gateway.cidrs.remote_pod_cidr_remapped}), and their key Secrets if missing (each gateway makes its own key)",
                data={"local": local_data, "remote": remote_data},
            ))

    remote_values = remote_values_with_consumer(state.remote_release.values if state.remote_release else {}, options)
    current = _release_is_current(state.remote_release, options.remote_chart, remote_values)
    # A long-lived token Secret left by an older chart: the upgrade removes it (and
    # brings the RBAC by which the virtual kubelet renews its bound token).
    legacy = state.legacy_token_secret_exists
    revoked = state.remote_release is not None and not state.consumer_service_account_exists
    if not current or legacy or revoked:
        admitted = "admit" if not has_consumer(state.remote_release, consumer_id) else "update"
        entry = _entry(remote_values, "consumers", "name", consumer_id)
        why = ""
        if current and legacy:
            why = "; replaces the long-lived token Secret by bound tokens"
        elif current:
            why = f"; recreates ServiceAccount {tenant}/{c.CONSUMER_SERVICE_ACCOUNT} (revoked: a new identity)"
        steps.append(Step(
            REMOTE_RELEASE,
            f"remote: {_release_verb(state.remote_release, options.remote_chart, ns, options.remote_release)}{why}; "
            f"{admitted} consumer {consumer_id} ({_describe_consumer(entry)}); consumers: {_names(remote_values['consumers'], 'name')}",
            data={"values": remote_values, "release": options.remote_release, "chart": options.remote_chart.path, "version": options.remote_chart.version},
        ))
    if legacy:
        steps.append(Step(
            DELETE_LEGACY_TOKEN,
            f"remote: delete Secret {tenant}/{LEGACY_TOKEN_SECRET} if still there: a token that never expires "
            "(the virtual kubelet uses a bound token from now on)",
            data={"name": LEGACY_TOKEN_SECRET},
        ))

    secret = kubeconfig_secret_name(rid)
    differs = _kubeconfig_differs(state, options)
    why_token = token_renewal_reason(state.kubeconfig_secret, state.now, options.renew_fraction)
    if revoked:
        why_token = "its token's ServiceAccount was deleted (revoked)"
    if differs or why_token:
        hours = options.token_expiration_seconds / 3600
        steps.append(Step(
            REQUEST_TOKEN,
            f"remote: request a bound token for {consumer_username(consumer_id)} valid {hours:g}h "
            "(TokenRequest; the API server may shorten it)",
            data={"expiration_seconds": options.token_expiration_seconds},
        ))
        how = "create" if not state.kubeconfig_secret_exists else "update"
        reason = "" if not state.kubeconfig_secret_exists else f" ({why_token})" if why_token and not differs else ""
        steps.append(Step(
            KUBECONFIG_SECRET,
            f"local: {how} Secret {ns}/{secret}: a kubeconfig for {options.remote_server} as {consumer_username(consumer_id)}{reason}",
            data={"name": secret},
        ))

    local_values = local_values_with_remote(state.local_release.values if state.local_release else {}, options)
    if not _release_is_current(state.local_release, options.local_chart, local_values):
        added = "add" if not has_remote(state.local_release, rid) else "keep"
        steps.append(Step(
            LOCAL_RELEASE,
            f"local: {_release_verb(state.local_release, options.local_chart, ns, options.local_release)}; "
            f"{added} remote cluster {rid} (a virtual kubelet for node {node_name(rid)}); "
            f"remoteClusters: {_names(local_values['remoteClusters'], 'id')}",
            data={"values": local_values, "release": options.local_release, "chart": options.local_chart.path, "version": options.local_chart.version},
        ))

    if (differs or legacy) and state.kubeconfig_secret_exists and state.vkubelet_deployed:
        # The virtual kubelet follows a new token in its Secret as it runs; a new server
        # or CA it reads only at start-up, and one of a version before bound tokens reads
        # nothing after start-up (its long-lived token dies with the legacy Secret).
        deployment = vkubelet_deployment_name(options.local_release, rid)
        steps.append(Step(
            RESTART_VKUBELET,
            f"local: restart Deployment {ns}/{deployment}, so the virtual kubelet reads its new kubeconfig",
            data={"name": deployment},
        ))

    if gateway is not None:
        if gateway.rotate_keys:
            steps.append(Step(
                ROTATE_GATEWAY_KEYS,
                f"local+remote: drop the keys of gateways {local_gateway_name(options)} and {remote_gateway_name(options)}: "
                "each makes a new pair in its own cluster",
            ))
        if gateway.rotate_keys or not _gateways_peered(state, gateway):
            steps.append(Step(
                GATEWAY_PEERS,
                "local+remote: wait for both gateways' public keys, then give each the other's key and endpoint "
                f"(remote gateway at {gateway.remote_endpoint or 'its Service'}, local gateway at "
                f"{gateway.local_endpoint or 'its Service'})",
                data={"previous": {"local": (state.local_gateway.config or {}).get(fb.PUBLIC_KEY, ""),
                                   "remote": (state.remote_gateway.config or {}).get(fb.PUBLIC_KEY, "")}},
            ))

    if options.wait:
        steps.append(Step(WAIT_NODE_READY, f"local: wait until node {node_name(rid)} is Ready", changes=False))
    return steps


def _gateway_objects_differ(side: GatewaySide, data: Mapping[str, str]) -> bool:
    return side.config is None or not side.key_secret_exists or any(side.config.get(k) != v for k, v in data.items())


def _gateways_peered(state: PeerState, gateway: GatewayOptions) -> bool:
    """Whether each gateway already holds the other's current public key and the endpoint
    asked for (an endpoint read from a Service is kept once written)."""
    local, remote = state.local_gateway.config or {}, state.remote_gateway.config or {}
    local_key, remote_key = local.get(fb.PUBLIC_KEY), remote.get(fb.PUBLIC_KEY)
    if not local_key or not remote_key:
        return False
    if local.get(fb.PEER_PUBLIC_KEY) != remote_key or remote.get(fb.PEER_PUBLIC_KEY) != local_key:
        return False
    if not local.get(fb.PEER_ENDPOINT) or (gateway.remote_endpoint and local.get(fb.PEER_ENDPOINT) != gateway.remote_endpoint):
        return False
    return not (gateway.local_endpoint and remote.get(fb.PEER_ENDPOINT) != gateway.local_endpoint)


# --- unpeer ---------------------------------------------------------------------------------
def plan_unpeer(state: UnpeerState, options: UnpeerOptions) -> list[Step]:
    """The steps that leave nothing of the pair: the local side first (no new pods, pods
    back to their controllers, no more virtual kubelet), then the remote side (twin
    namespaces with everything in them, then the consumer's identity)."""
    steps: list[Step] = []
    consumer_id, rid, ns = options.local_cluster_id, options.remote_cluster_id, options.namespace
    node = node_name(rid)
    tenant = c.tenant_namespace(consumer_id)

    if state.node_exists and not state.node_unschedulable:
        steps.append(Step(CORDON_NODE, f"local: cordon node {node} (no new pods are scheduled there)"))
    if state.pods_on_node:
        shown = ", ".join(list(state.pods_on_node)[:5]) + (" ..." if len(state.pods_on_node) > 5 else "")
        steps.append(Step(
            EVICT_PODS,
            f"local: evict the {len(state.pods_on_node)} pod(s) on {node} and wait until they are gone "
            f"(their controllers recreate them elsewhere): {shown}",
            data={"pods": list(state.pods_on_node)},
        ))
    deployment = vkubelet_deployment_name(options.local_release, rid)
    if has_remote(state.local_release, rid):
        assert state.local_release is not None
        values = local_values_without_remote(state.local_release.values, rid)
        steps.append(Step(
            LOCAL_RELEASE,
            f"local: {_release_verb(state.local_release, options.local_chart, ns, options.local_release)} without remote "
            f"cluster {rid} (removes Deployment {deployment}); remoteClusters left: {_names(values['remoteClusters'], 'id')}",
            data={"values": values, "release": options.local_release, "chart": options.local_chart.path, "version": options.local_chart.version},
        ))
    if has_remote(state.local_release, rid) or state.vkubelet_pods:
        steps.append(Step(
            WAIT_VKUBELET_GONE,
            f"local: wait until the virtual kubelet of {rid} has stopped (pods of Deployment {ns}/{deployment})",
            changes=False,
            data={"name": deployment},
        ))
    if state.kubeconfig_secret_exists:
        steps.append(Step(DELETE_KUBECONFIG_SECRET, f"local: delete Secret {ns}/{kubeconfig_secret_name(rid)}",
                          data={"name": kubeconfig_secret_name(rid)}))
    if state.node_exists:
        steps.append(Step(DELETE_NODE, f"local: delete node {node} (its Lease goes with it)", data={"name": node}))
    if state.local_gateway_objects or state.remote_gateway_objects:
        # After the local release stopped the local gateway; the remote one stops with the
        # consumer's removal below and takes its link and rules with it either way.
        steps.append(Step(
            DELETE_GATEWAY_OBJECTS,
            f"local+remote: delete the gateways' objects (their keys go with them): "
            f"{', '.join([*(f'local {o}' for o in state.local_gateway_objects), *(f'remote {o}' for o in state.remote_gateway_objects)])}",
            data={"local": list(state.local_gateway_objects), "remote": list(state.remote_gateway_objects)},
        ))

    if state.consumer_service_account_exists:
        # Explicit, not left to the release upgrade below: the identity goes first, so
        # nothing holding one of its tokens (a copy of the kubeconfig) acts any more.
        steps.append(Step(
            REVOKE_CONSUMER,
            f"remote: revoke the consumer's identity: delete ServiceAccount {tenant}/{c.CONSUMER_SERVICE_ACCOUNT} "
            f"(every token issued to {consumer_username(consumer_id)} is refused from then on)",
            data={"namespace": tenant, "name": c.CONSUMER_SERVICE_ACCOUNT},
        ))
    if state.twin_requests:
        steps.append(Step(
            DELETE_TWIN_REQUESTS,
            f"remote: delete the {len(state.twin_requests)} TwinNamespace request(s) in {tenant} "
            f"(the enforcer deletes each twin namespace with its ShadowPods, pods and reflected objects): "
            f"{', '.join(state.twin_requests)}",
            data={"names": list(state.twin_requests)},
        ))
    orphans = sorted(set(state.twin_namespaces) - set(state.twin_requests))
    if orphans:
        steps.append(Step(
            DELETE_TWIN_NAMESPACES,
            f"remote: delete twin namespace(s) of {consumer_id} whose request is already gone: {', '.join(orphans)}",
            data={"names": orphans},
        ))
    if state.twin_requests or state.twin_namespaces:
        steps.append(Step(
            WAIT_TWINS_GONE,
            f"remote: wait until the twin namespaces of {consumer_id} and their requests are gone",
            changes=False,
        ))
    for name in state.foreign_namespaces:
        steps.append(Step(
            NOTE,
            f"remote: namespace {name} carries {c.LABEL_ORIGIN_CLUSTER_ID}={consumer_id} but the enforcer did not make it; "
            "left alone (delete it yourself if it is this consumer's)",
            changes=False,
        ))

    if has_consumer(state.remote_release, consumer_id):
        assert state.remote_release is not None
        values = remote_values_without_consumer(state.remote_release.values, consumer_id)
        steps.append(Step(
            REMOTE_RELEASE,
            f"remote: {_release_verb(state.remote_release, options.remote_chart, ns, options.remote_release)} without "
            f"consumer {consumer_id} (removes Consumer {consumer_id}, namespace {tenant}, its ServiceAccount and RBAC); "
            f"consumers left: {_names(values['consumers'], 'name')}",
            data={"values": values, "release": options.remote_release, "chart": options.remote_chart.path, "version": options.remote_chart.version},
        ))
    elif state.consumer_exists or state.tenant_namespace_exists:
        # Admitted by hand (not through this release's values): remove what is there.
        what = []
        if state.consumer_exists:
            what.append(f"Consumer {consumer_id}")
        if state.tenant_namespace_exists:
            what.append(f"namespace {tenant}")
        steps.append(Step(
            DELETE_CONSUMER,
            f"remote: delete {' and '.join(what)} (not managed by release {ns}/{options.remote_release})",
            data={"consumer": state.consumer_exists, "namespace": state.tenant_namespace_exists},
        ))
    if has_consumer(state.remote_release, consumer_id) or state.consumer_exists or state.tenant_namespace_exists:
        steps.append(Step(
            WAIT_CONSUMER_GONE,
            f"remote: wait until Consumer {consumer_id} and namespace {tenant} are gone",
            changes=False,
        ))
    return steps


def changes(steps: Sequence[Step]) -> list[Step]:
    return [step for step in steps if step.changes]


def render_plan(steps: Sequence[Step], *, title: str) -> str:
    """The plan as printed: one numbered line per step, waits and notes marked."""
    changing = changes(steps)
    if not changing:
        head = f"{title}: nothing to change"
    else:
        head = f"{title}: {len(changing)} change(s)"
    lines = [head]
    for index, step in enumerate(steps, 1):
        marker = "" if step.changes else ("(note) " if step.action == NOTE else "(check) ")
        lines.append(f"  {index}. {marker}{step.description}")
    return "\n".join(lines)
