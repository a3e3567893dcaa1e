"""Names the virtual kubelet gives things in the remote cluster (pure).

Names must be deterministic: after a restart the vkubelet finds what it created before
by computing the same names again, which is what makes it restart-safe.
"""

from __future__ import annotations

import hashlib

from kube_offload import constants as c

# Namespace names are DNS-1123 labels.
NAMESPACE_NAME_MAX = 63
_HASH_LENGTH = 8


def virtual_node_name(cluster_id: str) -> str:
    return f"{c.VIRTUAL_NODE_PREFIX}{cluster_id}"


def twin_namespace_name(namespace: str, local_cluster_id: str, mapping: str = c.DEFAULT_MAPPING) -> str:
    """The remote namespace that twins local ``namespace``.

    ``EnforceSameName`` keeps the name. ``DefaultName`` appends the local cluster id, so
    two consumer clusters offloading a namespace of the same name to one provider do
    not collide: ``demo`` from cluster ``alpha`` -> ``demo-alpha``.

    A result longer than 63 characters is shortened by cutting the namespace part and
    inserting a hash of the full name, keeping the cluster id visible at the end
    (``<ns prefix>-<hash8>-<local id>``): different long names still get different twins.
    """
    if mapping == c.MAPPING_ENFORCE_SAME_NAME:
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
