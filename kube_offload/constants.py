"""The user-facing contract of kube-offload: every label, annotation, taint, API group and
default written once. Components import from here; docs/contract.md mirrors this file.
"""

from __future__ import annotations

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

# --- Kubernetes' own well-known keys we rely on ---------------------------------------------
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
LABEL_NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"

# --- Virtual node --------------------------------------------------------------------------
LABEL_TYPE: Final = f"{DOMAIN}/type"
TYPE_VIRTUAL_NODE: Final = "virtual-node"
LABEL_CLUSTER_ID: Final = f"{DOMAIN}/cluster-id"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
VIRTUAL_NODE_PREFIX: Final = "kube-offload-"

TAINT_KEY: Final = f"{DOMAIN}/virtual-node"
TAINT_VALUE: Final = "true"
TAINT_EFFECT: Final = "NoExecute"

# Published by the virtual kubelet on its Node, read by the scheduler extender: the remote
# cluster's free capacity per remote node (format in docs/capacity-annotation.md).
ANNOTATION_REMOTE_CAPACITY: Final = f"{DOMAIN}/remote-capacity"

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

# --- Reflection ----------------------------------------------------------------------------
ANNOTATION_SKIP_REFLECTION: Final = f"{DOMAIN}/skip-reflection"
ANNOTATION_ALLOW_REFLECTION: Final = f"{DOMAIN}/allow-reflection"

# --- ShadowPod CRD -------------------------------------------------------------------------
SHADOWPOD_GROUP: Final = DOMAIN
SHADOWPOD_VERSION: Final = "v1alpha1"
SHADOWPOD_KIND: Final = "ShadowPod"
SHADOWPOD_PLURAL: Final = "shadowpods"
SHADOWPOD_SHORT_NAME: Final = "shp"
