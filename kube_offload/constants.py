"""The user-facing contract of kube-offload: every label, annotation, taint, API group and
default written once, and the names derived from them (virtual node, twin namespace,
tenant namespace). Components import from here; docs/architecture.md mirrors this file.
The rest of the contract: Event reasons (below), times and durations
(:mod:`kube_offload.times`), typed views of the objects read (:mod:`kube_offload.views`).
"""

from __future__ import annotations

import hashlib
from typing import Final

DOMAIN: Final = "kube-offload.io"

# --- Namespace policy (kubectl label / annotate namespace) --------------------------------
LABEL_ENABLED: Final = f"{DOMAIN}/enabled"
LABEL_POD_PLACEMENT: Final = f"{DOMAIN}/pod-placement"
LABEL_NAMESPACE_MAPPING: Final = f"{DOMAIN}/namespace-mapping"
ANNOTATION_CLUSTER_SELECTOR: Final = f"{DOMAIN}/cluster-selector"

ENABLED_VALUE: Final = "true"

PLACEMENT_LOCAL: Final = "Local"
PLACEMENT_REMOTE: Final = "Remote"
PLACEMENT_LOCAL_AND_REMOTE: Final = "LocalAndRemote"
PLACEMENTS: Final = (PLACEMENT_LOCAL, PLACEMENT_REMOTE, PLACEMENT_LOCAL_AND_REMOTE)
DEFAULT_PLACEMENT: Final = PLACEMENT_LOCAL_AND_REMOTE

MAPPING_DEFAULT_NAME: Final = "DefaultName"
MAPPING_ENFORCE_SAME_NAME: Final = "EnforceSameName"
MAPPINGS: Final = (MAPPING_DEFAULT_NAME, MAPPING_ENFORCE_SAME_NAME)
DEFAULT_MAPPING: Final = MAPPING_DEFAULT_NAME

# Per-pod opt-in (docs/webhook.md, "Per-pod opt-in"): a pod whose spec.runtimeClassName is
# this RuntimeClass (installed by the local chart) is offloaded whatever its namespace's
# labels say: Remote placement, its namespace extended to the chosen cluster on demand. The
# class's handler is a name no real node's container runtime has, so a pod that somehow
# reached a real kubelet fails to start instead of running locally by accident; the class's
# scheduling section keeps it off real nodes even if the webhook is not called. The
# vkubelet strips the class from the ShadowPod: it means nothing to the provider.
RUNTIME_CLASS_OPT_IN: Final = "kube-offload"
RUNTIME_CLASS_OPT_IN_HANDLER: Final = "kube-offload-virtual-node"

# --- Kubernetes' own well-known keys we rely on ---------------------------------------------
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
LABEL_NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"

# --- Virtual node --------------------------------------------------------------------------
LABEL_TYPE: Final = f"{DOMAIN}/type"
TYPE_VIRTUAL_NODE: Final = "virtual-node"
LABEL_CLUSTER_ID: Final = f"{DOMAIN}/cluster-id"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
VIRTUAL_NODE_PREFIX: Final = "kube-offload-"
# Leader election (docs/high-availability.md): the Lease of the vkubelets of one remote
# cluster (<prefix><cluster-id>, in the vkubelet's namespace of the local cluster; not the
# node heartbeat Lease in kube-node-lease) and the enforcer's (its namespace, provider side).
VKUBELET_LEADER_LEASE_PREFIX: Final = "kube-offload-vkubelet-"
# Where every node's heartbeat Lease is, a kubelet's as a virtual kubelet's (named as its node).
NODE_LEASE_NAMESPACE: Final = "kube-node-lease"
ENFORCER_LEADER_LEASE: Final = "kube-offload-enforcer"
# The ShadowPod webhook's cache of Pod dry-run verdicts per template (enforcer/admission/
# verdict_cache.py): how long a verdict serves, and how many templates are kept.
VERDICT_CACHE_TTL_SECONDS: Final = 10.0
VERDICT_CACHE_ENTRIES: Final = 1024

TAINT_KEY: Final = f"{DOMAIN}/virtual-node"
TAINT_VALUE: Final = "true"
TAINT_EFFECT: Final = "NoExecute"
# On a virtual node while the provider cordons this consumer (Consumer spec.cordoned): the
# scheduler sends it no new pod (the provider would refuse its ShadowPod), and the pods
# already there keep running (NoSchedule, not NoExecute), as the provider's do. Our
# webhook never tolerates it; the vkubelet adds and removes it (never `kubectl cordon`'s
# spec.unschedulable, which is the local admin's).
TAINT_PROVIDER_CORDONED_KEY: Final = f"{DOMAIN}/provider-cordoned"
TAINT_PROVIDER_CORDONED_EFFECT: Final = "NoSchedule"
# On a virtual node while the provider drains this consumer (Consumer spec.drain,
# `kube-offload drain`): NoExecute, so the local taint manager evicts the offloaded pods and
# their controllers recreate them on local nodes; the provider deletes what is left once
# the drain's grace period is over. Our webhook never tolerates it (a key-less `Exists`
# toleration a pod carries itself would: such a pod stays until the grace ends).
TAINT_PROVIDER_DRAINING_KEY: Final = f"{DOMAIN}/provider-draining"
TAINT_PROVIDER_DRAINING_EFFECT: Final = "NoExecute"
# `kube-offload drain`'s grace period when --grace is not given: long enough for the
# taint manager's evictions and the pods' own termination grace (30s by default).
DEFAULT_DRAIN_GRACE_SECONDS: Final = 300

# Published by the virtual kubelet on its Node, read by the scheduler extender: the remote
# cluster's free capacity per remote node (format in docs/capacity-annotation.md).
ANNOTATION_REMOTE_CAPACITY: Final = f"{DOMAIN}/remote-capacity"
# Set by the virtual kubelet on its Node: the keys of the labels it applied because the
# provider suggested them (Consumer.spec.nodeLabels), so it can remove one the provider
# withdraws without touching labels others put on the node.
ANNOTATION_PROVIDER_LABELS: Final = f"{DOMAIN}/provider-labels"
# Set by the virtual kubelet on its Node, read by the scheduler extender: the workloads
# (controller UIDs) whose pods this node's remote cluster could not run and handed back,
# each refused here until a time that grows on repeats (kube_offload/handed_back.py).
ANNOTATION_HANDED_BACK: Final = f"{DOMAIN}/handed-back"
# On a namespace, "true": its pods without a controller may be handed back too (evicted,
# so gone for good unless something recreates them). Unset: only controlled pods are.
ANNOTATION_HANDBACK_UNCONTROLLED: Final = f"{DOMAIN}/handback-uncontrolled"

DEFAULT_SHARING_PERCENTAGE: Final = 90

# --- Remote objects ------------------------------------------------------------------------
LABEL_ORIGIN_CLUSTER_ID: Final = f"{DOMAIN}/origin-cluster-id"
LABEL_MANAGED_BY: Final = f"{DOMAIN}/managed-by"
MANAGED_BY_ENFORCER: Final = "enforcer"
# Set on a remote ShadowPod / pod: namespace, name and UID of the local pod it stands for.
ANNOTATION_ORIGIN_NAMESPACE: Final = f"{DOMAIN}/origin-namespace"
ANNOTATION_ORIGIN_NAME: Final = f"{DOMAIN}/origin-name"
ANNOTATION_ORIGIN_UID: Final = f"{DOMAIN}/origin-uid"
# Set on a remote Namespace: the local namespace it twins.
ANNOTATION_TWIN_OF: Final = f"{DOMAIN}/twin-of"
# Set by the virtual kubelet on a ShadowPod whose local pod is being deleted: the local
# pod's deletion grace period (seconds). The enforcer then deletes the pod with it and
# creates none; the vkubelet deletes the ShadowPod once that pod is gone. (A custom
# resource's own delete drops gracePeriodSeconds, hence an annotation.)
ANNOTATION_DELETION_GRACE: Final = f"{DOMAIN}/deletion-grace-period-seconds"
# Set by the enforcer on the pods it makes: the label and annotation keys it set from the
# ShadowPod template and a digest of what it applied (kube_offload/pod_updates.py), so an
# update removes only keys it set and never fights the provider's own admission.
# The field manager prefix of reflection's server-side applies on the provider
# (vkubelet/reflection/names.field_manager adds the virtual node's name): the fields a
# consumer's virtual kubelet owns in a reflected object's managedFields, apart from the
# fields the provider's own controllers and admission set, which reflection never
# touches (docs/reflection.md "The rules").
REFLECTION_FIELD_MANAGER_PREFIX: Final = "kube-offload/"
ANNOTATION_APPLIED_TEMPLATE: Final = f"{DOMAIN}/applied-template"
# On a pod the enforcer made to replace one that vanished: the names of the template's
# ephemeral containers (kubectl debug) that ran, or were meant to run, in an earlier pod,
# comma-separated. An ephemeral container runs once and is never restarted (as on any
# node): the enforcer does not add these to the new pod (kube_offload/ephemeral_containers.py).
ANNOTATION_EPHEMERAL_NOT_RUN: Final = f"{DOMAIN}/ephemeral-containers-not-run"
# Offloading over several hops (docs/multihop.md): on a ShadowPod and in its pod template,
# so on the pod the enforcer makes, the cluster ids the pod went through, oldest first,
# comma-separated ("a,b": made in a, offloaded from a to b, now from b to here). Each
# virtual kubelet appends its own cluster's id when it sends a pod on; a cluster that finds
# itself in the chain refuses the pod, naming the chain (a -> b -> a), so a loop of
# peerings never sends a pod round and round. The enforcer checks that the chain ends with
# the consumer sending it (nobody can hide who it came from) and that it is not in it.
ANNOTATION_OFFLOAD_CHAIN: Final = f"{DOMAIN}/offload-chain"
# The longest chain a cluster accepts (the original cluster included): far more hops than
# any sane topology, and a bound on the annotation and on the latency of logs through it.
MAX_OFFLOAD_HOPS: Final = 8

# --- Reflection ----------------------------------------------------------------------------
# The type of the Secrets the vkubelet reflects ServiceAccount tokens as: never
# kubernetes.io/service-account-token, which the provider refuses from a consumer (a token
# of the provider's own would be minted into it; charts/kube-offload-remote admission-policies).
REFLECTED_TOKEN_SECRET_TYPE: Final = f"{DOMAIN}/service-account-token"
# On every object a reflector writes, besides the origin label: the reflector's resource
# name. The remote EndpointSlice controller copies a Service's labels (origin included)
# onto slices it owns, so the origin label alone does not prove an object is ours.
LABEL_REFLECTOR: Final = f"{DOMAIN}/reflector"
ANNOTATION_SKIP_REFLECTION: Final = f"{DOMAIN}/skip-reflection"
ANNOTATION_ALLOW_REFLECTION: Final = f"{DOMAIN}/allow-reflection"

# --- API server access of offloaded pods (docs/home-api.md) ----------------------------------
# On a pod, or on its namespace (the pod's wins): which API server the offloaded pod's
# in-cluster configuration reaches. "home" (the default): the local API server, as the
# pod's own ServiceAccount, through the consumer's relay on the provider; "remote": the
# provider's API server as the twin namespace's default account (only where the provider's
# policy allows it); "disabled": no token and no address are given to the pod.
ANNOTATION_API_SERVER: Final = f"{DOMAIN}/api-server"
API_SERVER_HOME: Final = "home"
API_SERVER_REMOTE: Final = "remote"
API_SERVER_DISABLED: Final = "disabled"
API_SERVER_MODES: Final = (API_SERVER_HOME, API_SERVER_REMOTE, API_SERVER_DISABLED)
# Per consumer, in its tenant namespace on the provider: the Service in front of the relay
# pods that offloaded pods connect to (port HOME_API_SERVICE_PORT). The relay listens for
# pods on HOME_API_RELAY_SERVE_PORT and, on 127.0.0.1 only, for the consumer's uplinks
# (port-forwards through the provider's API server) on HOME_API_RELAY_UPLINK_PORT.
HOME_API_SERVICE: Final = "kube-offload-home-api"
HOME_API_SERVICE_PORT: Final = 443
HOME_API_RELAY_SERVE_PORT: Final = 6443
HOME_API_RELAY_UPLINK_PORT: Final = 6444
# The relay pods' app.kubernetes.io/component label (remote chart): the vkubelet finds the
# pods to hold uplinks to by it, in its tenant namespace.
HOME_API_RELAY_COMPONENT: Final = "home-api-relay"
HOME_API_RELAY_SELECTOR: Final = f"app.kubernetes.io/name=kube-offload,app.kubernetes.io/component={HOME_API_RELAY_COMPONENT}"
# The names the offloaded pod's in-cluster configuration uses for the home API server:
# every API server's serving certificate carries them, so TLS verifies end to end.
HOME_API_HOSTNAMES: Final = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")

# --- Virtual storage class (docs/storage.md) --------------------------------------------------
# One StorageClass for both placements: claims whose first pod is scheduled to a virtual
# node get a remote claim and a local stand-in volume; on a physical node, a volume of a
# real local class. The provisioner name is what the class names and what the stand-in
# volumes record in pv.kubernetes.io/provisioned-by.
STORAGE_PROVISIONER: Final = f"{DOMAIN}/virtual-storage"
DEFAULT_VIRTUAL_STORAGE_CLASS: Final = "kube-offload"
# The CSI driver named by a stand-in for a remote volume: no node has it, so no real
# kubelet can ever mount the stand-in (the data is in the other cluster).
REMOTE_VOLUME_CSI_DRIVER: Final = f"remote-volume.{DOMAIN}"
# On every stand-in volume: "remote" (its data is a claim in cluster <cluster-id label>)
# or "local" (a volume of the real local class, named by ANNOTATION_REAL_CLAIM).
LABEL_VOLUME_LOCATION: Final = f"{DOMAIN}/volume-location"
VOLUME_LOCATION_REMOTE: Final = "remote"
VOLUME_LOCATION_LOCAL: Final = "local"
ANNOTATION_REMOTE_CLAIM: Final = f"{DOMAIN}/remote-claim"
ANNOTATION_REAL_CLAIM: Final = f"{DOMAIN}/real-claim"

# --- ShadowPod CRD -------------------------------------------------------------------------
SHADOWPOD_GROUP: Final = DOMAIN
SHADOWPOD_VERSION: Final = "v1alpha1"
SHADOWPOD_KIND: Final = "ShadowPod"
SHADOWPOD_PLURAL: Final = "shadowpods"
SHADOWPOD_SHORT_NAME: Final = "shp"

# --- Provider side: consumers, tenants, twin namespaces (docs/security.md) ------------------
# A consumer cluster admitted by a provider: cluster-scoped, named after the consumer's
# local cluster id. Spec (provider-owned): identity, Pod Security level, quota, cordon,
# suggested virtual-node labels. Status (enforcer-owned): usage and the capacity summary
# the consumer's virtual kubelet reads instead of listing the provider's pods.
# apiVersion of every kube-offload custom resource (ShadowPod, Consumer, TwinNamespace).
API_VERSION: Final = f"{SHADOWPOD_GROUP}/{SHADOWPOD_VERSION}"
CONSUMER_KIND: Final = "Consumer"
CONSUMER_PLURAL: Final = "consumers"
# A consumer's request for one twin namespace, in its tenant namespace; named after the
# namespace it asks for. The enforcer creates that namespace; the consumer cannot.
TWIN_NAMESPACE_KIND: Final = "TwinNamespace"
TWIN_NAMESPACE_PLURAL: Final = "twinnamespaces"
TWIN_NAMESPACE_FINALIZER: Final = f"{DOMAIN}/twin-namespace"
TWIN_PHASE_PENDING: Final = "Pending"
TWIN_PHASE_READY: Final = "Ready"
TWIN_PHASE_REFUSED: Final = "Refused"
TWIN_PHASE_TERMINATING: Final = "Terminating"
# Set by the consumer on a Refused TwinNamespace (an RFC 3339 time): "look again". Any
# change to the request is an update event the provider's controller reconciles, so a
# refusal whose cause went away (the Consumer now exists, the name is free) is retried
# without deleting and recreating the request.
ANNOTATION_TWIN_RETRY: Final = f"{DOMAIN}/retry-requested"

# The provider namespace of one consumer: its identity and its TwinNamespace requests.
TENANT_NAMESPACE_PREFIX: Final = "kube-offload-tenant-"
LABEL_TENANT: Final = f"{DOMAIN}/tenant"
# The ServiceAccount (in the tenant namespace) a consumer's virtual kubelet runs as.
CONSUMER_SERVICE_ACCOUNT: Final = "consumer"
# When the bound tokens (TokenRequest) in a Secret were issued and when the first of them
# expires (RFC 3339): on the local kubeconfig Secret of a remote cluster, written by
# `kube-offload peer` and by the virtual kubelet that renews it (kube_offload/bound_tokens.py,
# docs/security.md); on the service-account token Secrets the vkubelet reflects, so that it
# refreshes them before they expire without asking the API server
# (vkubelet/reflection/serviceaccounts.py).
ANNOTATION_TOKEN_ISSUED_AT: Final = f"{DOMAIN}/token-issued-at"
ANNOTATION_TOKEN_EXPIRES_AT: Final = f"{DOMAIN}/token-expires-at"
# RoleBinding the enforcer writes into each twin namespace, binding the consumer's
# namespaced ClusterRole (chart: <release>-consumer-twin) to the consumer's identity.
TWIN_ROLEBINDING_NAME: Final = "kube-offload-consumer"
DEFAULT_CONSUMER_TWIN_ROLE: Final = "kube-offload-consumer-twin"
# ResourceQuota the enforcer keeps in each twin namespace: the object-count and storage
# keys of the Consumer's spec.quota (enforcer/consumers/quota.py twin_object_quota), per twin.
TWIN_RESOURCEQUOTA_NAME: Final = "kube-offload-consumer"
# Role and RoleBinding the enforcer keeps in each twin namespace for the custom resource
# kinds the Consumer's spec.policy.customResources grants (none granted: neither exists).
# A Role of its own, not the shared twin ClusterRole: grants differ per consumer.
TWIN_CUSTOM_RESOURCES_NAME: Final = "kube-offload-custom-resources"
# Set on a twin namespace: the TwinNamespace request (<tenant ns>/<name>) it answers.
ANNOTATION_TWIN_REQUEST: Final = f"{DOMAIN}/twin-request"

# --- Resource slices (issue 24 item 1; docs/slices.md) ---------------------------------
# A consumer asks for a share of one provider pool with an OffloadSlice in its tenant
# namespace (written by the consumer's identity, as a TwinNamespace is). The pools are the
# provider's: Consumer spec.pools, each a name, the provider nodes it covers (a node
# selector over the provider's own labels) and the offloading patch the enforcer adds to
# every pod of a slice of that pool (node selector, tolerations, runtime class). The
# consumer names a pool, never writes the patch. The enforcer answers in the slice's
# status: Accepted, PartiallyAccepted (less than asked: the Consumer's quota or the pool's
# allocatable left) or Refused, with the amounts accepted and why. Each slice is one
# virtual node in the consumer cluster, sized from status.accepted.
SLICE_KIND: Final = "OffloadSlice"
SLICE_PLURAL: Final = "offloadslices"
SLICE_SHORT_NAME: Final = "kos"
# A pool's name ends the slice's virtual node name (slice_node_name) and is a label value:
# a DNS label, kept short so <virtual node>-<slice> stays within a node name's 63.
POOL_NAME_MAX: Final = 20
SLICE_PHASE_PENDING: Final = "Pending"
SLICE_PHASE_ACCEPTED: Final = "Accepted"
SLICE_PHASE_PARTIAL: Final = "PartiallyAccepted"
SLICE_PHASE_REFUSED: Final = "Refused"
# On a ShadowPod: the slice (OffloadSlice name in the consumer's tenant namespace) its pod
# belongs to; the enforcer applies that slice's pool patch and counts it against the
# slice. On a virtual node: the slice the node stands for.
LABEL_SLICE: Final = f"{DOMAIN}/slice"
# On a pod the enforcer made for a resource slice's ShadowPod: the pool whose patch it got.
# The ShadowPod's status records it (status.slicePool) from its first pod, and every later
# pod is made on that pool, never on the one the slice names by then (docs/slices.md).
ANNOTATION_SLICE_POOL: Final = f"{DOMAIN}/slice-pool"
# On a slice's virtual node while its OffloadSlice is not (or no longer, or not yet for its
# current request) Accepted or PartiallyAccepted: NoSchedule, so no new pod is bound to a
# node the provider would refuse pods for; pods already there keep running (a slice shrunk
# or refused later is the provider's business: its admission counts them).
# On the pods of a slice's vkubelet Deployment (local chart): the virtual node it serves.
# Its selector uses it instead of the cluster-id label, so the peering's own Deployment's
# selector (component + cluster-id) never matches a slice's pods.
LABEL_SLICE_NODE: Final = f"{DOMAIN}/slice-node"
TAINT_SLICE_NOT_ACCEPTED_KEY: Final = f"{DOMAIN}/slice-not-accepted"
TAINT_SLICE_NOT_ACCEPTED_EFFECT: Final = "NoSchedule"


def slice_node_name(base_node_name: str, slice_name: str) -> str:
    """The virtual node of slice ``slice_name`` of the peering whose node is ``base_node_name``."""
    return f"{base_node_name}-{slice_name}"


def vkubelet_leader_lease_name(cluster_id: str, slice_name: str | None = None) -> str:
    """The leader-election Lease of the vkubelets of one remote cluster (of one of its
    slices), in their namespace: only its holder runs the loops."""
    return f"{VKUBELET_LEADER_LEASE_PREFIX}{cluster_id}" + (f"-{slice_name}" if slice_name else "")


# Pod Security admission (upstream keys); level per consumer, default baseline.
LABEL_PSA_ENFORCE: Final = "pod-security.kubernetes.io/enforce"
LABEL_PSA_ENFORCE_VERSION: Final = "pod-security.kubernetes.io/enforce-version"
PSA_LEVELS: Final = ("privileged", "baseline", "restricted")
DEFAULT_PSA_LEVEL: Final = "baseline"

# ShadowPod validating webhook served by the enforcer.
SHADOWPOD_WEBHOOK_NAME: Final = "shadowpods.enforcer.kube-offload.io"
SHADOWPOD_WEBHOOK_CONFIGURATION: Final = "kube-offload-enforcer"
SHADOWPOD_WEBHOOK_PATH: Final = "/validate-shadowpods"
# Its second webhook, in the same configuration: the addresses of consumers' EndpointSlices.
ENDPOINTSLICE_WEBHOOK_NAME: Final = "endpointslices.enforcer.kube-offload.io"
ENDPOINTSLICE_WEBHOOK_PATH: Final = "/validate-endpointslices"
# The enforcer's third webhook: custom resource objects consumers write into their twin
# namespaces, judged against Consumer spec.policy.customResources (enforcer/admission/
# custom_resource_policy.py). One registration for every custom kind (groups with a dot,
# not Kubernetes' nor ours): a kind the provider installs later is judged without a new one.
CUSTOM_RESOURCE_WEBHOOK_NAME: Final = "customresources.enforcer.kube-offload.io"
CUSTOM_RESOURCE_WEBHOOK_PATH: Final = "/validate-custom-resources"
# The fourth: the TokenRequests a consumer's identity makes in its tenant namespace
# (serviceaccounts/token), bounded by Consumer spec.policy.tokens (enforcer/admission/token_policy.py).
TOKEN_WEBHOOK_NAME: Final = "tokenrequests.enforcer.kube-offload.io"
TOKEN_WEBHOOK_PATH: Final = "/validate-tokenrequests"
# The fifth: how many TwinNamespace requests and OffloadSlices a consumer keeps in its tenant
# namespace (Consumer spec.policy twinNamespaces.maxRequests, slices.maxCount;
# enforcer/admission/tenant_objects.py).
TENANT_OBJECTS_WEBHOOK_NAME: Final = "tenantobjects.enforcer.kube-offload.io"
TENANT_OBJECTS_WEBHOOK_PATH: Final = "/validate-tenant-objects"

# --- Service continuity (issue 25 item 4; docs/reflection.md "Service continuity") ----------
# The consumer's heartbeat a provider can see: a Lease in the consumer's tenant namespace
# that its virtual kubelet renews (vkubelet/node/heartbeat.py). The provider cannot ask a
# consumer anything (it holds no credentials there), so silence on this Lease is how it
# learns a consumer is unreachable; a consumer that never wrote one (older vkubelet) is
# left alone rather than guessed dead.
CONSUMER_HEARTBEAT_LEASE: Final = "kube-offload-consumer-heartbeat"
# Set by the enforcer on a consumer's reflected EndpointSlice whose endpoints it turned not
# ready because the consumer is unreachable: JSON {"<addresses>": {"ready": .., "serving": ..}}
# of the conditions it overwrote (null: absent), so the return restores exactly those and
# nothing the consumer itself had marked not ready (enforcer/consumers/continuity.py).
ANNOTATION_HELD_NOT_READY: Final = f"{DOMAIN}/held-not-ready"
# The LABEL_REFLECTOR value of the EndpointSlices a consumer reflects (the vkubelet's
# reflector resource name): the slices whose endpoints are that consumer's pods.
REFLECTOR_ENDPOINTSLICES: Final = "endpointslices"


def virtual_node_name(cluster_id: str) -> str:
    """The virtual node that stands for remote cluster ``cluster_id`` (its default name:
    ``kube-offload vkubelet --node-name`` may set another)."""
    return f"{VIRTUAL_NODE_PREFIX}{cluster_id}"


def tenant_namespace(consumer_id: str) -> str:
    """The provider namespace that holds consumer ``consumer_id``'s identity and requests."""
    return f"{TENANT_NAMESPACE_PREFIX}{consumer_id}"


# Twin namespace names are Namespace names: DNS-1123 labels. Deterministic, so that after a
# restart the vkubelet finds what it created before by computing the same names again.
NAMESPACE_NAME_MAX: Final = 63
_HASH_LENGTH: Final = 8


def twin_namespace_name(namespace: str, local_cluster_id: str, mapping: str = DEFAULT_MAPPING) -> str:
    """The remote namespace that twins local ``namespace``.

    ``EnforceSameName`` keeps the name. ``DefaultName`` appends the local cluster id, so
    two consumer clusters offloading a namespace of the same name to one provider do
    not collide: ``demo`` from cluster ``alpha`` -> ``demo-alpha``.

    A result longer than 63 characters is shortened by cutting the namespace part and
    inserting a hash of the full name, keeping the cluster id visible at the end
    (``<ns prefix>-<hash8>-<local id>``): different long names still get different twins.
    """
    if mapping == MAPPING_ENFORCE_SAME_NAME:
        return namespace
    full = f"{namespace}-{local_cluster_id}"
    if len(full) <= NAMESPACE_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_LENGTH]
    room = NAMESPACE_NAME_MAX - len(local_cluster_id) - _HASH_LENGTH - 2  # two dashes
    if room >= 1:
        head = namespace[:room].rstrip("-")
        if head:
            return f"{head}-{digest}-{local_cluster_id}"
    # A cluster id too long to keep whole: the hash alone must then tell names apart.
    return f"{full[: NAMESPACE_NAME_MAX - _HASH_LENGTH - 1].rstrip('-')}-{digest}"
