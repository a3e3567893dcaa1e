"""Names the end-to-end tests, the demo and the benchmarks derive from the harness's
topology, computed by the contract's own functions (kube_offload.constants), so a test cannot
disagree with them about where an offloaded pod lands.
"""

from __future__ import annotations

import uuid

from kube_offload import constants as naming

# The local cluster's id in the harness's default topology (default_topology()).
LOCAL_CLUSTER_ID = "local"


def unique(prefix: str) -> str:
    """``prefix`` plus a short random suffix: a namespace or object name no earlier test
    (or an earlier run against the same clusters) used."""
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def virtual_node_name(remote_cluster_id: str) -> str:
    """The virtual node a vkubelet registers for the remote cluster ``remote_cluster_id``."""
    return naming.virtual_node_name(remote_cluster_id)


def twin_namespace(namespace: str, local_cluster_id: str = LOCAL_CLUSTER_ID) -> str:
    """The twin namespace on a provider that stands for the consumer's ``namespace``
    (default mapping)."""
    return naming.twin_namespace_name(namespace, local_cluster_id)
