"""Names, labels and annotations that reflection gives remote objects, written once.

Deterministic names are what make reflection restart-safe: after a restart the same
local object maps to the same remote name, and a second create meets AlreadyExists.
"""

from __future__ import annotations

import hashlib
from typing import Final

from kube_offload import constants as c

# Every object a reflector writes carries the origin label (the contract) and this one,
# valued with the reflector's resource name: two reflectors writing the same kind (Secrets
# and service-account token Secrets) then never mistake each other's objects for orphans.
LABEL_REFLECTOR: Final = c.LABEL_REFLECTOR

# The local cluster's CA bundle, published by kube-controller-manager in every namespace
# as kube-root-ca.crt, is reflected under this name: the remote cluster publishes its
# own kube-root-ca.crt in the twin namespace and would overwrite ours.
ROOT_CA_CONFIGMAP: Final = "kube-root-ca.crt"
REFLECTED_ROOT_CA_CONFIGMAP: Final = "kube-offload-root-ca.crt"
ROOT_CA_KEY: Final = "ca.crt"

# The field manager of every remote write of one virtual kubelet's reflection
# (server-side apply): its prefix is the contract (constants.py), the node name tells two
# virtual kubelets of one consumer apart in the remote objects' managedFields.
FIELD_MANAGER_MAX_LENGTH: Final = 128  # the API server refuses longer ones


def field_manager(node_name: str) -> str:
    """``kube-offload/<virtual node name>``, cut to the API's limit."""
    return f"{c.REFLECTION_FIELD_MANAGER_PREFIX}{node_name}"[:FIELD_MANAGER_MAX_LENGTH]


# Service-account token Secrets (one per offloaded pod that mounts a token).
TOKEN_SECRET_PREFIX: Final = "kube-offload-token-"
TOKEN_KEY: Final = "token"
NAMESPACE_KEY: Final = "namespace"
# When the tokens in a token Secret were issued and when the first of them expires: the
# contract's c.ANNOTATION_TOKEN_ISSUED_AT / c.ANNOTATION_TOKEN_EXPIRES_AT.
# Where the kubelet mounts a pod's service-account credentials.
SERVICE_ACCOUNT_MOUNT_PATH: Final = "/var/run/secrets/kubernetes.io/serviceaccount"

# The EndpointSlice manager value of slices we write (a label value: no "/"): the remote
# EndpointSlice controller deletes slices that claim to be its own but that it did not
# compute.
ENDPOINTSLICE_MANAGED_BY_LABEL: Final = "endpointslice.kubernetes.io/managed-by"
ENDPOINTSLICE_MANAGER: Final = "vkubelet.kube-offload.io"
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"

# Annotation on a local Event copied from the remote cluster: the remote component
# that reported it (the local Event's source is the virtual kubelet).
ANNOTATION_REMOTE_SOURCE: Final = f"{c.DOMAIN}/remote-source"

_DNS_SUBDOMAIN_MAX = 253
_HASH = 10


def _digest(text: str, length: int = _HASH) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _bounded(prefix: str, name: str, suffix: str = "") -> str:
    """``prefix + name + suffix``, the name part cut and a hash of it inserted when the
    whole would exceed a DNS subdomain's 253 characters."""
    full = f"{prefix}{name}{suffix}"
    if len(full) <= _DNS_SUBDOMAIN_MAX:
        return full
    room = _DNS_SUBDOMAIN_MAX - len(prefix) - len(suffix) - _HASH - 1
    head = name[:room].rstrip("-.")
    return f"{prefix}{head}-{_digest(name)}{suffix}"


def token_secret_name(pod_name: str) -> str:
    """The remote Secret holding the service-account token of local pod ``pod_name``
    (one per pod: the token is bound to the pod)."""
    return _bounded(TOKEN_SECRET_PREFIX, pod_name)


def token_key(audience: str | None) -> str:
    """The key of a token Secret that holds the token for ``audience`` (None: the API
    server's own audience, the one of the standard service-account volume)."""
    return TOKEN_KEY if not audience else f"{TOKEN_KEY}-{_digest(audience)}"


def local_event_name(pod_name: str, remote_event_uid: str) -> str:
    """The local copy of a remote Event: a function of the remote Event's UID only, so a
    restart (or a resync) finds the copy it made instead of making another."""
    return _bounded("", pod_name, f".ko{_digest(remote_event_uid, 16)}")
