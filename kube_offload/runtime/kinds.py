"""Every kind of object kube-offload reads or writes, as one value each: group, version,
kind, plural and scope, from which :mod:`kube_offload.runtime.kube` builds every path.

One place for each fact: the kube-offload custom resources take their group, version,
kind and plural from :mod:`kube_offload.constants` (which the CRDs in
kube_offload/manifests and charts/kube-offload-remote/crds spell out the same way;
tests/unit/kube_offload/runtime/test_kinds.py checks the three agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from kube_offload import constants as c


@dataclass(frozen=True)
class Resource:
    """One kind of the API. ``group`` is "" for the core group (``/api/v1``)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``apiVersion`` of its objects: ``v1`` or ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of a collection (no ``name``) or of one object (and its
        ``subresource``). A namespaced kind without ``namespace`` is the collection across
        all namespaces (a list or watch only); a cluster-scoped kind takes no namespace."""
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped: pass no namespace (got {namespace!r})")
        if name is not None and self.namespaced and namespace is None:
            raise ValueError(f"{self.kind} {name!r} is namespaced: pass namespace=")
        if name is not None and not name:
            raise ValueError(f"{self.kind}: an empty name; pass the object's metadata.name")
        if subresource and name is None:
            raise ValueError(f"{self.kind}: subresource {subresource!r} needs a name")
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [prefix]
        if namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


def _segment(value: str) -> str:
    # A name is one path segment: "/" and "?" must not reach the server as structure.
    return quote(value, safe="")


# --- core (/api/v1) ------------------------------------------------------------------------
PODS: Final = Resource("", "v1", "Pod", "pods", True)
NAMESPACES: Final = Resource("", "v1", "Namespace", "namespaces", False)
NODES: Final = Resource("", "v1", "Node", "nodes", False)
EVENTS: Final = Resource("", "v1", "Event", "events", True)
SERVICE_ACCOUNTS: Final = Resource("", "v1", "ServiceAccount", "serviceaccounts", True)
SECRETS: Final = Resource("", "v1", "Secret", "secrets", True)
CONFIG_MAPS: Final = Resource("", "v1", "ConfigMap", "configmaps", True)
SERVICES: Final = Resource("", "v1", "Service", "services", True)
RESOURCE_QUOTAS: Final = Resource("", "v1", "ResourceQuota", "resourcequotas", True)
LIMIT_RANGES: Final = Resource("", "v1", "LimitRange", "limitranges", True)
PERSISTENT_VOLUME_CLAIMS: Final = Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True)
PERSISTENT_VOLUMES: Final = Resource("", "v1", "PersistentVolume", "persistentvolumes", False)

# --- built-in groups -------------------------------------------------------------------------
DEPLOYMENTS: Final = Resource("apps", "v1", "Deployment", "deployments", True)
REPLICA_SETS: Final = Resource("apps", "v1", "ReplicaSet", "replicasets", True)
LEASES: Final = Resource("coordination.k8s.io", "v1", "Lease", "leases", True)
ENDPOINT_SLICES: Final = Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True)
INGRESSES: Final = Resource("networking.k8s.io", "v1", "Ingress", "ingresses", True)
SERVICE_CIDRS: Final = Resource("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", False)
ROLE_BINDINGS: Final = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True)
ROLES: Final = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", True)
STORAGE_CLASSES: Final = Resource("storage.k8s.io", "v1", "StorageClass", "storageclasses", False)
PRIORITY_CLASSES: Final = Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False)
CUSTOM_RESOURCE_DEFINITIONS: Final = Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
POD_METRICS: Final = Resource("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", True)  # metrics-server's
MUTATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False
)
VALIDATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False
)
SELF_SUBJECT_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False)
# Create-only: the answer is in the created object's status, nothing is stored.
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False
)
# The vkubelet's serving certificate (vkubelet/kubeletapi/serving_cert.py).
CERTIFICATE_SIGNING_REQUESTS: Final = Resource(
    "certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False
)

# --- kube-offload's custom resources (kube_offload/manifests/*-crd.yaml) ---------------------
SHADOWPODS: Final = Resource(c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.SHADOWPOD_KIND, c.SHADOWPOD_PLURAL, True)
CONSUMERS: Final = Resource(c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.CONSUMER_KIND, c.CONSUMER_PLURAL, False)
TWIN_NAMESPACES: Final = Resource(
    c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.TWIN_NAMESPACE_KIND, c.TWIN_NAMESPACE_PLURAL, True
)
OFFLOAD_SLICES: Final = Resource(c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.SLICE_KIND, c.SLICE_PLURAL, True)

ALL: Final[tuple[Resource, ...]] = (
    PODS, NAMESPACES, NODES, EVENTS, SERVICE_ACCOUNTS, SECRETS, CONFIG_MAPS, SERVICES, RESOURCE_QUOTAS, LIMIT_RANGES,
    PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, DEPLOYMENTS, REPLICA_SETS, LEASES, ENDPOINT_SLICES, INGRESSES, SERVICE_CIDRS,
    ROLE_BINDINGS, ROLES, STORAGE_CLASSES, PRIORITY_CLASSES, CUSTOM_RESOURCE_DEFINITIONS, POD_METRICS, SELF_SUBJECT_REVIEWS,
    TOKEN_REVIEWS, SUBJECT_ACCESS_REVIEWS, CERTIFICATE_SIGNING_REQUESTS,
    SHADOWPODS, CONSUMERS, TWIN_NAMESPACES, OFFLOAD_SLICES, MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS,
)
