"""The provider's policy for one consumer: what that consumer may write (pure).

A provider admits a consumer on its own terms. ``Consumer.spec.policy`` says, kind by
kind, what the consumer's identity may put into its twin namespaces; everything not
granted here is refused at admission (ValidatingAdmissionPolicies for the stateless
rules, the enforcer's webhooks for what needs state), and the consumer's virtual kubelet
reads the same object to drop what would be refused before sending it (and tells the
local user with an Event).

Every key has a safe default: a consumer gets ordinary, namespaced workloads and nothing
that reaches the provider's network, nodes, control plane or other tenants. Widening a key
is a grant by name (docs/security.md "Provider policy" lists each key, its default and
what widening it means). This module is the one place for those keys and defaults: the
CRD schema (kube_offload/manifests/consumer-crd.yaml), the chart's values, the
``kube-offload peer`` flags and the admission rules all follow it (tests/unit pins them).

Objects are plain dicts in the API's JSON shape (camelCase), as everywhere in kube-offload.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.resources import QuantityError, parse_quantity

# --- keys (the field paths under Consumer.spec.policy) -----------------------------------
POLICY = "spec.policy"

# Service types a consumer may always write (a headless Service is a ClusterIP one).
ALWAYS_SERVICE_TYPES: tuple[str, ...] = ("ClusterIP",)
GRANTABLE_SERVICE_TYPES: tuple[str, ...] = ("NodePort", "LoadBalancer")

# The volume kinds that touch nothing but the pod's own namespace: the default grant.
NAMESPACED_VOLUME_TYPES: tuple[str, ...] = (
    "configMap",
    "secret",
    "downwardAPI",
    "emptyDir",
    "projected",
    "persistentVolumeClaim",
    "ephemeral",
)
# Volume kinds that mount with the node's identity or reach the node: never grantable
# (hostPath is also a Pod Security baseline rule; the rest bypass the provider's storage).
NEVER_VOLUME_TYPES: tuple[str, ...] = ("hostPath",)

# Node label keys a consumer may never select, tolerate or spread on, whatever the
# provider grants: the hostname pins a pod (what the nodeName refusal stops) and the
# control-plane role puts consumer pods beside the provider's API server.
ALWAYS_RESERVED_NODE_KEYS: tuple[str, ...] = (
    "kubernetes.io/hostname",
    "node-role.kubernetes.io/",  # a prefix: every role
    "node.kubernetes.io/",  # the node lifecycle taints (not-ready, unschedulable, ...)
)
# As a topologyKey (topology spread, pod (anti-)affinity) a key every node carries selects
# no node: spreading replicas or keeping them apart per node is an ordinary workload's
# business. Nodes lacking a topologyKey are filtered out, so any other reserved key is
# node selection in disguise and refused. In nodeSelector / nodeAffinity the hostname
# stays reserved: there it pins a pod.
UNIVERSAL_TOPOLOGY_KEYS: tuple[str, ...] = ("kubernetes.io/hostname",)
# The node lifecycle taints every pod tolerates for a while (the DefaultTolerationSeconds
# admission plugin adds them with effect NoExecute on the consumer's side too): they only
# say how long a pod stays on a failed node, so they pass despite ALWAYS_RESERVED_NODE_KEYS.
# The other node.kubernetes.io taints (unschedulable, *-pressure, network-unavailable)
# would let a pod onto a cordoned or failing node and stay refused.
LIFECYCLE_TOLERATION_KEYS: tuple[str, ...] = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
LIFECYCLE_TOLERATION_EFFECT = "NoExecute"
# Pod label and annotation prefixes a consumer may never set: they configure the
# provider's own controllers (Multus attachments, autoscaler scale-down, CNI bandwidth
# and the like under kubernetes.io/, kube-offload's own keys, which only the enforcer
# writes). Matched as plain prefixes: app.kubernetes.io/, kubectl.kubernetes.io/,
# batch.kubernetes.io/ ... (what ordinary workloads carry) do not start with any of them.
ALWAYS_DENIED_METADATA_PREFIXES: tuple[str, ...] = (
    "k8s.v1.cni.cncf.io/",
    "cluster-autoscaler.kubernetes.io/",
    "karpenter.sh/",
    "kubernetes.io/",
    "k8s.io/",
    f"{c.DOMAIN}/",
)
# The kube-offload.io keys the consumer's virtual kubelet itself writes into every pod
# template (the origin of the pod: kube_offload/constants.py); the ShadowPod webhook
# checks the cluster id against the namespace's owner.
CONSUMER_METADATA_KEYS: tuple[str, ...] = (
    c.LABEL_ORIGIN_CLUSTER_ID,
    # A slice's pods carry their slice (docs/slices.md), so each vkubelet of a peering
    # selects its own remote pods; only with the ShadowPod's own value
    # (enforcer/admission/slice_rules.py template_label).
    c.LABEL_SLICE,
    c.ANNOTATION_ORIGIN_NAMESPACE,
    c.ANNOTATION_ORIGIN_NAME,
    c.ANNOTATION_ORIGIN_UID,
    # the clusters the pod went through (kube_offload/offload_chain.py): the webhook checks
    # that it ends with the consumer and holds no loop back to this provider.
    c.ANNOTATION_OFFLOAD_CHAIN,
)
# The sources a projected volume may combine: namespaced objects and the pod's own
# fields. Never serviceAccountToken (a token of the provider's ServiceAccount: the pod
# the enforcer makes has no provider identity), nor clusterTrustBundle / podCertificate
# (cluster-scoped trust material and node-issued certificates).
PROJECTED_SOURCES: tuple[str, ...] = ("configMap", "secret", "downwardAPI")
# The imagePullPolicy of every container the enforcer makes: a cached private image is
# never run without the pull credentials that would fetch it (docs/security.md).
ENFORCED_IMAGE_PULL_POLICY = "Always"
# Cloud metadata services an EndpointSlice may never name, beyond the link-local range
# (169.254.169.254 and fe80::/10 are refused as link-local): AWS's IPv6 one and Alibaba's.
# The chart's EndpointSlice ValidatingAdmissionPolicy lists the same (tests/unit pins it).
METADATA_ADDRESSES: tuple[str, ...] = ("fd00:ec2::254/128", "100.100.100.200/32")
# Priority class prefix the provider's system pods use: never grantable.
SYSTEM_PRIORITY_PREFIX = "system-"
# The scheduler every pod has unless it names another (the API server's default): always
# allowed; any other schedulerName only when granted (pods.schedulerNames).
DEFAULT_SCHEDULER = "default-scheduler"
# pods.imageRegistries: the entry that admits every registry, and the default. The provider's
# nodes pull a consumer's images with their own credentials (kubelet credential providers,
# a node-level pull secret, the cloud's node identity): imagePullPolicy Always does not stop
# that, only a registry the consumer's images may not come from does (docs/security.md
# "Images and the nodes' credentials").
ANY_REGISTRY = "*"
# Twin namespace names the provider always keeps for itself.
ALWAYS_RESERVED_NAMESPACES: tuple[str, ...] = ("default", "kube-*", "kube-offload-*")

DEFAULT_MAX_TWIN_NAMESPACES = 50
# What a consumer may keep in each of its twin namespaces, kind by kind (twinNamespaces.maxObjects,
# keys as a ResourceQuota's count/<resource> names them): each object is etcd storage and work
# for the provider's controllers, so none is unbounded by default. The built-in kinds are
# bounded by a ResourceQuota the enforcer keeps in each twin (the API server checks it on every
# create, whoever writes); ShadowPods, a custom kind, by the enforcer's ShadowPod webhook
# (a ResourceQuota on a custom kind refuses every create until the quota controller's next
# full resync). Secrets outnumber pods: each offloaded pod's token is one.
SHADOWPOD_COUNT_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"
DEFAULT_MAX_OBJECTS: tuple[tuple[str, int], ...] = (
    ("configmaps", 200),
    ("secrets", 600),
    ("services", 100),
    ("endpointslices.discovery.k8s.io", 300),
    ("persistentvolumeclaims", 50),
    ("serviceaccounts", 100),
    ("ingresses.networking.k8s.io", 50),
    (SHADOWPOD_COUNT_KIND, 500),
)
OBJECT_COUNT_KINDS: tuple[str, ...] = tuple(kind for kind, _ in DEFAULT_MAX_OBJECTS)
# What a consumer may keep in its tenant namespace, whatever it is served: TwinNamespace
# requests (those past twinNamespaces.maxCount are kept, Refused, until a place frees) and
# OffloadSlices. Each is etcd storage and enforcer work: never unbounded.
DEFAULT_MAX_TWIN_REQUESTS = 100
DEFAULT_MAX_SLICES = 20
# No bound is unlimited by default (docs/security.md "Provider policy"): a consumer admitted
# with the defaults holds a provider's node at most this long after its pod is told to stop
# (the pod's terminationGracePeriodSeconds, and every deletion's grace, are cut to it), and
# claims at most this much storage in one claim (a PVC, or a pod's generic ephemeral volume).
DEFAULT_MAX_TERMINATION_GRACE_SECONDS = 300
DEFAULT_MAX_CLAIM_SIZE = "100Gi"
# The consumer's own tokens (TokenRequest on its ServiceAccount in its tenant namespace, what
# its virtual kubelet renews its identity with): at most this long (kube-offload peer's
# default --token-expiration), and never shorter than the TokenRequest API's minimum.
DEFAULT_MAX_TOKEN_EXPIRATION_SECONDS = 24 * 3600
MIN_TOKEN_EXPIRATION_SECONDS = 600
# What a plain spec.quota key (``cpu``) bounds of each container: its requests (as
# ResourceQuota reads it), its limits, or both; ``hard`` counts as ``both`` and admits only
# pods whose containers set limits equal to requests for every resource the quota counts
# (nothing may burst beyond what is counted; docs/security.md "Quota").
QUOTA_MODE_HARD = "hard"
QUOTA_MODES: tuple[str, ...] = ("requests", "limits", "both", QUOTA_MODE_HARD)
# API groups whose kinds are never granted as custom resources, whatever a provider writes:
# the Kubernetes groups (pods, RBAC, webhooks... have their own rules or none at all) and
# kube-offload's own (a consumer writing ShadowPods or Consumers through this door would
# skip the enforcer's webhook). Matched as the group itself or a suffix after a dot.
NEVER_GRANTED_GROUPS: tuple[str, ...] = ("k8s.io", "kubernetes.io", c.DOMAIN)
# What a custom resource grant may name under spec: top-level field names, as the CRD
# spells them (a dotted path would grant half a field, which admission cannot tell apart).
_FIELD_NAME = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")


class ProviderPolicyError(ValueError):
    """The policy on a Consumer does not parse: names the key (the provider's mistake)."""


@dataclass(frozen=True)
class ServicePolicy:
    # Types beyond ClusterIP (and headless) the consumer may write: NodePort, LoadBalancer.
    types: tuple[str, ...] = ()
    # CIDRs ``spec.externalIPs`` may come from; empty: no externalIPs at all.
    external_ip_cidrs: tuple[str, ...] = ()
    # ExternalName Services (a DNS alias the provider's pods would follow).
    external_name: bool = False


@dataclass(frozen=True)
class EndpointPolicy:
    # Address ranges EndpointSlices may name besides the consumer's own pods in that twin:
    # the consumer's remapped local pod CIDR, typically. Never loopback, link-local,
    # metadata, provider nodes, Services or API server, whatever is granted (the chart's
    # EndpointSlice ValidatingAdmissionPolicy and enforcer/admission/endpointslice_policy.py).
    cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class IngressPolicy:
    # DNS suffixes the consumer's Ingress hosts must fall under; empty: no host at all
    # (and an Ingress without hosts is a catch-all, never admitted).
    host_domains: tuple[str, ...] = ()
    # ingressClassName values allowed; empty: none (no Ingress can be admitted).
    classes: tuple[str, ...] = ()
    # Annotation keys (exact, or prefixes ending in "/") an Ingress may carry.
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoragePolicy:
    # storageClassName values a PVC (or a generic ephemeral volume) may name; empty: none,
    # i.e. no claims at all. volumeName is never admitted. A claim naming no class gets
    # the provider's default class (the API server fills it in before validation), so the
    # default class is granted by its name like any other; with no default class, no class
    # at all would bind pre-provisioned volumes, and is refused.
    classes: tuple[str, ...] = ()
    # The largest storage request of one claim (a PVC or a generic ephemeral volume's
    # template); "" when read is the default: no consumer claims without a bound.
    max_claim_size: str = DEFAULT_MAX_CLAIM_SIZE


@dataclass(frozen=True)
class PodPolicy:
    # priorityClassName values allowed (never system-*); empty: none.
    priority_classes: tuple[str, ...] = ()
    # Toleration keys allowed (exact); a toleration with no key (tolerate-all) never is.
    tolerations: tuple[str, ...] = ()
    # Node label keys the provider reserves beyond ALWAYS_RESERVED_NODE_KEYS (exact keys,
    # or prefixes ending in "/").
    reserved_node_label_keys: tuple[str, ...] = ()
    # Volume kinds allowed (PodSpec.volumes[] field names).
    volume_types: tuple[str, ...] = NAMESPACED_VOLUME_TYPES
    # runtimeClassName values allowed; empty: none (the provider's default runtime only).
    runtime_classes: tuple[str, ...] = ()
    # Pod label/annotation prefixes denied beyond ALWAYS_DENIED_METADATA_PREFIXES.
    denied_metadata_prefixes: tuple[str, ...] = ()
    # Pods may ask for a token of the twin namespace's ServiceAccount
    # (automountServiceAccountToken true: the provider's API server, as that account,
    # with the provider's RBAC in the twin deciding; the consumer's ``remote`` API
    # server mode, docs/home-api.md). Off: a consumer's pods have no provider identity.
    remote_api_access: bool = False
    # The longest terminationGracePeriodSeconds of a pod the enforcer makes (a longer one is
    # cut to it, none is this): how long a stopped pod may keep a provider's node; drain and
    # unpeer take the resources back within it.
    max_termination_grace_seconds: int = DEFAULT_MAX_TERMINATION_GRACE_SECONDS
    # schedulerName values allowed besides the default scheduler; empty: that one only.
    scheduler_names: tuple[str, ...] = ()
    # Where the consumer's images may come from: registries ("registry.example.com",
    # "docker.io"), or name prefixes ending in "/" ("docker.io/library/"); "*": anywhere.
    image_registries: tuple[str, ...] = (ANY_REGISTRY,)
    # Ephemeral containers (``kubectl debug``) may be added to the consumer's running pods:
    # a process of the consumer's choice, with the consumer's image, inside the pod's
    # namespaces (the target container's processes with ``--target``). Judged like any
    # container (images, security context, volumes); off: a consumer's pods run only the
    # containers they were made with.
    ephemeral_containers: bool = False


@dataclass(frozen=True)
class TokenPolicy:
    # The longest token the consumer may ask for its own ServiceAccount (TokenRequest
    # expirationSeconds, in its tenant namespace): a leaked token lives at most this long.
    max_expiration_seconds: int = DEFAULT_MAX_TOKEN_EXPIRATION_SECONDS
    # Audiences such a token may name besides the provider API server's own (the default a
    # request naming none gets); empty: only those. Another audience is a token for another
    # service that trusts this cluster's issuer (a cloud's workload identity, a vault).
    audiences: tuple[str, ...] = ()


@dataclass(frozen=True)
class TwinNamespacePolicy:
    # Names (exact, or prefixes ending in "*") the consumer may take with EnforceSameName;
    # empty: none (every twin must end in "-<consumer id>").
    same_names: tuple[str, ...] = ()
    # Names (exact, or prefixes ending in "*") reserved beyond ALWAYS_RESERVED_NAMESPACES.
    reserved: tuple[str, ...] = ()
    max_count: int = DEFAULT_MAX_TWIN_NAMESPACES
    # TwinNamespace requests the consumer may hold in its tenant namespace, served or not.
    max_requests: int = DEFAULT_MAX_TWIN_REQUESTS
    # The most objects of each kind (OBJECT_COUNT_KINDS) in one twin: (kind, count) pairs.
    max_objects_counts: tuple[tuple[str, int], ...] = DEFAULT_MAX_OBJECTS

    @property
    def max_objects(self) -> dict[str, int]:
        return dict(self.max_objects_counts)


@dataclass(frozen=True)
class SlicePolicy:
    # OffloadSlices the consumer may hold in its tenant namespace, accepted or not.
    max_count: int = DEFAULT_MAX_SLICES


@dataclass(frozen=True)
class CustomResourceGrant:
    """One custom resource kind the consumer may write into its twin namespaces
    (``spec.policy.customResources[]``): the enforcer binds RBAC for it there and its
    webhook refuses a ``spec`` field not in ``spec_fields`` (and any top-level field but
    apiVersion, kind, metadata and spec: status is the provider's controllers' to write)."""

    group: str
    resource: str  # the plural, as in the CRD's spec.names.plural
    # Top-level spec fields the consumer may set; empty: none (an object with an empty spec).
    spec_fields: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``<resource>.<group>``: the CRD's name, how messages and RBAC name the kind."""
        return f"{self.resource}.{self.group}"


@dataclass(frozen=True)
class ProviderPolicy:
    services: ServicePolicy = field(default_factory=ServicePolicy)
    endpoints: EndpointPolicy = field(default_factory=EndpointPolicy)
    ingress: IngressPolicy = field(default_factory=IngressPolicy)
    storage: StoragePolicy = field(default_factory=StoragePolicy)
    pods: PodPolicy = field(default_factory=PodPolicy)
    twin_namespaces: TwinNamespacePolicy = field(default_factory=TwinNamespacePolicy)
    tokens: TokenPolicy = field(default_factory=TokenPolicy)
    slices: SlicePolicy = field(default_factory=SlicePolicy)
    # What the quota counts of each container: requests, limits, both, or hard (both, and
    # limits must equal requests).
    quota_mode: str = "requests"
    # Custom resource kinds granted (none by default: a kind no rule says is safe is refused).
    custom_resources: tuple[CustomResourceGrant, ...] = ()

    def custom_resource(self, group: str, resource: str) -> CustomResourceGrant | None:
        """The grant of ``resource.group``, or None: not granted."""
        return next((g for g in self.custom_resources if g.group == group and g.resource == resource), None)


DEFAULT_POLICY = ProviderPolicy()

# The schema: section -> (camelCase key -> (dataclass attribute, kind)). One table for the
# parser, the serializer and the tests that pin the CRD and the chart to this module.
_LIST, _BOOL, _STR, _INT, _COUNTS = "list", "bool", "string", "int", "counts"
SCHEMA: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "services": ("services", {
        "types": ("types", _LIST),
        "externalIPCIDRs": ("external_ip_cidrs", _LIST),
        "externalName": ("external_name", _BOOL),
    }),
    "endpoints": ("endpoints", {
        "cidrs": ("cidrs", _LIST),
    }),
    "ingress": ("ingress", {
        "hostDomains": ("host_domains", _LIST),
        "classes": ("classes", _LIST),
        "annotations": ("annotations", _LIST),
    }),
    "storage": ("storage", {
        "classes": ("classes", _LIST),
        "maxClaimSize": ("max_claim_size", _STR),
    }),
    "pods": ("pods", {
        "priorityClasses": ("priority_classes", _LIST),
        "tolerations": ("tolerations", _LIST),
        "reservedNodeLabelKeys": ("reserved_node_label_keys", _LIST),
        "volumeTypes": ("volume_types", _LIST),
        "runtimeClasses": ("runtime_classes", _LIST),
        "deniedMetadataPrefixes": ("denied_metadata_prefixes", _LIST),
        "remoteAPIAccess": ("remote_api_access", _BOOL),
        "maxTerminationGracePeriodSeconds": ("max_termination_grace_seconds", _INT),
        "schedulerNames": ("scheduler_names", _LIST),
        "imageRegistries": ("image_registries", _LIST),
        "ephemeralContainers": ("ephemeral_containers", _BOOL),
    }),
    "twinNamespaces": ("twin_namespaces", {
        "sameNames": ("same_names", _LIST),
        "reserved": ("reserved", _LIST),
        "maxCount": ("max_count", _INT),
        "maxRequests": ("max_requests", _INT),
        "maxObjects": ("max_objects_counts", _COUNTS),
    }),
    "slices": ("slices", {
        "maxCount": ("max_count", _INT),
    }),
    "tokens": ("tokens", {
        "maxExpirationSeconds": ("max_expiration_seconds", _INT),
        "audiences": ("audiences", _LIST),
    }),
}
QUOTA_MODE_KEY = "quotaMode"
CUSTOM_RESOURCES_KEY = "customResources"
# The keys of one spec.policy.customResources[] entry.
CUSTOM_RESOURCE_KEYS: tuple[str, ...] = ("group", "resource", "specFields")


def _key(section: str, name: str) -> str:
    return f"{POLICY}.{section}.{name}"


def _read(section: str, name: str, kind: str, raw: Any, default: Any) -> Any:
    where = _key(section, name)
    if raw is None or (kind == _STR and raw == "" and default):
        # A string key written empty reads as its default (storage.maxClaimSize: a Consumer
        # stored when "" meant "no limit" gets the bound, never unlimited).
        return default
    if kind == _LIST:
        if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
            raise ProviderPolicyError(f"{where}: must be a list of non-empty strings")
        return tuple(raw)
    if kind == _BOOL:
        if not isinstance(raw, bool):
            raise ProviderPolicyError(f"{where}: must be true or false")
        return raw
    if kind == _INT:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ProviderPolicyError(f"{where}: must be a whole number >= 0")
        return raw
    if kind == _COUNTS:
        # Kinds not written keep their default: a provider raising one bound keeps the others.
        if not isinstance(raw, Mapping):
            raise ProviderPolicyError(f"{where}: must be an object of kind -> count, e.g. {{secrets: 1000}}")
        counts = dict(default)
        for name, count in raw.items():
            if name not in OBJECT_COUNT_KINDS:
                raise ProviderPolicyError(f"{where}.{name}: not a kind bounded per twin namespace; known: "
                                          f"{', '.join(OBJECT_COUNT_KINDS)}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ProviderPolicyError(f"{where}.{name}: must be a whole number >= 0")
            counts[name] = count
        return tuple((name, counts[name]) for name in OBJECT_COUNT_KINDS)
    if not isinstance(raw, str):
        raise ProviderPolicyError(f"{where}: must be a string")
    return raw


def parse_policy(raw: Mapping[str, Any] | None) -> ProviderPolicy:
    """``Consumer.spec.policy`` (None or absent keys: the defaults) as a ProviderPolicy.

    Raises ProviderPolicyError naming the key for a value of the wrong shape, a CIDR that
    does not parse, a system priority class, a never-grantable volume type or Service type.
    """
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ProviderPolicyError(f"{POLICY}: must be an object")
    sections: dict[str, Any] = {}
    for key, (attr, fields) in SCHEMA.items():
        section = raw.get(key)
        section = {} if section is None else section
        if not isinstance(section, Mapping):
            raise ProviderPolicyError(f"{POLICY}.{key}: must be an object")
        unknown = sorted(set(section) - set(fields))
        if unknown:
            raise ProviderPolicyError(f"{POLICY}.{key}: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
        default = getattr(DEFAULT_POLICY, attr)
        values = {
            field_attr: _read(key, name, kind, section.get(name), getattr(default, field_attr))
            for name, (field_attr, kind) in fields.items()
        }
        sections[attr] = type(default)(**values)
    unknown = sorted(set(raw) - set(SCHEMA) - {QUOTA_MODE_KEY, CUSTOM_RESOURCES_KEY})
    if unknown:
        known = ", ".join([*SCHEMA, QUOTA_MODE_KEY, CUSTOM_RESOURCES_KEY])
        raise ProviderPolicyError(f"{POLICY}: unknown key(s) {', '.join(unknown)}; known: {known}")
    quota_mode = raw.get(QUOTA_MODE_KEY) or DEFAULT_POLICY.quota_mode
    if quota_mode not in QUOTA_MODES:
        raise ProviderPolicyError(f"{POLICY}.{QUOTA_MODE_KEY}: {quota_mode!r} is not one of {', '.join(QUOTA_MODES)}")
    policy = ProviderPolicy(**sections, quota_mode=quota_mode,
                            custom_resources=parse_custom_resources(raw.get(CUSTOM_RESOURCES_KEY)))
    _check(policy)
    return policy


def never_granted_group(group: str) -> bool:
    return any(group == g or group.endswith(f".{g}") for g in NEVER_GRANTED_GROUPS)


def parse_custom_resources(raw: Any) -> tuple[CustomResourceGrant, ...]:
    """``spec.policy.customResources`` (None: no kind granted). Raises ProviderPolicyError
    naming the entry and key of what does not parse, a Kubernetes or kube-offload group,
    or a kind granted twice."""
    where = f"{POLICY}.{CUSTOM_RESOURCES_KEY}"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProviderPolicyError(f"{where}: must be a list of {{group, resource, specFields}}")
    grants: list[CustomResourceGrant] = []
    for index, entry in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(entry, Mapping):
            raise ProviderPolicyError(f"{at}: must be an object with group, resource and specFields")
        unknown = sorted(set(entry) - set(CUSTOM_RESOURCE_KEYS))
        if unknown:
            raise ProviderPolicyError(f"{at}: unknown key(s) {', '.join(unknown)}; known: {', '.join(CUSTOM_RESOURCE_KEYS)}")
        group, resource = entry.get("group"), entry.get("resource")
        if not isinstance(group, str) or not _DNS_SUBDOMAIN.match(group):
            raise ProviderPolicyError(f"{at}.group: {group!r} is not a custom resource's API group such as example.com")
        if never_granted_group(group):
            raise ProviderPolicyError(
                f"{at}.group: {group} cannot be granted: Kubernetes' and kube-offload's own kinds "
                f"({', '.join(NEVER_GRANTED_GROUPS)}) have their own rules"
            )
        if not isinstance(resource, str) or not _DNS_LABEL.match(resource):
            raise ProviderPolicyError(f"{at}.resource: {resource!r} is not a resource (plural) name such as widgets")
        fields = entry.get("specFields")
        fields = [] if fields is None else fields
        if not isinstance(fields, list) or not all(isinstance(f, str) and _FIELD_NAME.match(f) for f in fields):
            raise ProviderPolicyError(f"{at}.specFields: must be a list of top-level spec field names such as size")
        grant = CustomResourceGrant(group=group, resource=resource, spec_fields=tuple(dict.fromkeys(fields)))
        if any(g.name == grant.name for g in grants):
            raise ProviderPolicyError(f"{at}: {grant.name} is granted twice; merge the entries")
        grants.append(grant)
    return tuple(grants)


def _check(policy: ProviderPolicy) -> None:
    for name, cidrs in (
        (_key("services", "externalIPCIDRs"), policy.services.external_ip_cidrs),
        (_key("endpoints", "cidrs"), policy.endpoints.cidrs),
    ):
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ProviderPolicyError(f"{name}: {cidr!r} is not a CIDR such as 10.200.0.0/16") from None
    for service_type in policy.services.types:
        if service_type not in GRANTABLE_SERVICE_TYPES:
            raise ProviderPolicyError(
                f"{_key('services', 'types')}: {service_type!r} cannot be granted; grantable: "
                f"{', '.join(GRANTABLE_SERVICE_TYPES)} (ClusterIP and headless are always allowed; "
                "ExternalName is services.externalName)"
            )
    for name in policy.pods.priority_classes:
        if name.startswith(SYSTEM_PRIORITY_PREFIX):
            raise ProviderPolicyError(
                f"{_key('pods', 'priorityClasses')}: {name!r} cannot be granted: system-* classes "
                "preempt the provider's own components"
            )
    if not policy.pods.image_registries:
        raise ProviderPolicyError(
            f"{_key('pods', 'imageRegistries')}: [] admits no image, so every pod of the consumer would be refused; list "
            f"the registries its images may come from (e.g. docker.io/library/, registry.example.com), or {ANY_REGISTRY!r}"
        )
    for entry in policy.pods.image_registries:
        if entry != ANY_REGISTRY and (ANY_REGISTRY in entry or entry.startswith("/") or " " in entry):
            raise ProviderPolicyError(
                f"{_key('pods', 'imageRegistries')}: {entry!r} is not a registry (registry.example.com), an image name "
                f"prefix ending in / (docker.io/library/) or {ANY_REGISTRY!r} (every registry)"
            )
    for volume in policy.pods.volume_types:
        if volume in NEVER_VOLUME_TYPES:
            raise ProviderPolicyError(f"{_key('pods', 'volumeTypes')}: {volume!r} mounts the node's files and cannot be granted")
    try:
        claim = parse_quantity(policy.storage.max_claim_size)
    except QuantityError as exc:
        raise ProviderPolicyError(f"{_key('storage', 'maxClaimSize')}: {exc}") from None
    if claim <= 0:
        raise ProviderPolicyError(f"{_key('storage', 'maxClaimSize')}: {policy.storage.max_claim_size!r} admits no claim; "
                                  f"give the largest claim, such as {DEFAULT_MAX_CLAIM_SIZE}")
    if policy.tokens.max_expiration_seconds < MIN_TOKEN_EXPIRATION_SECONDS:
        raise ProviderPolicyError(
            f"{_key('tokens', 'maxExpirationSeconds')}: {policy.tokens.max_expiration_seconds} is below the TokenRequest "
            f"API's minimum of {MIN_TOKEN_EXPIRATION_SECONDS} s, so the consumer could never renew its identity; "
            f"give at least {MIN_TOKEN_EXPIRATION_SECONDS} (default {DEFAULT_MAX_TOKEN_EXPIRATION_SECONDS})"
        )


def policy_to_spec(policy: ProviderPolicy) -> dict[str, Any]:
    """The policy as ``Consumer.spec.policy`` JSON, every key written (the inverse of
    :func:`parse_policy`; what ``kube-offload peer`` and the tests write)."""
    out: dict[str, Any] = {}
    for key, (attr, fields) in SCHEMA.items():
        section = getattr(policy, attr)
        out[key] = {
            name: dict(value) if kind == _COUNTS else list(value) if isinstance(value, tuple) else value
            for name, (field_attr, kind) in fields.items()
            for value in (getattr(section, field_attr),)
        }
    out[QUOTA_MODE_KEY] = policy.quota_mode
    out[CUSTOM_RESOURCES_KEY] = [
        {"group": g.group, "resource": g.resource, "specFields": list(g.spec_fields)} for g in policy.custom_resources
    ]
    return out
