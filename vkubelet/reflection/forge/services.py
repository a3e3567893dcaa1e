"""The remote Service for a local one (pure): the same, but for what the local cluster
allocated for it. What the remote cluster allocates is never in what reflection applies,
so server-side apply leaves it alone (no view of the remote object to compare with).
"""

from __future__ import annotations

import copy
from typing import Mapping

from vkubelet.reflection.forge import ForgeContext, forge_metadata


def without_allocations(spec: Mapping) -> dict:
    """A Service spec without what a cluster allocates for it: cluster IPs and their
    families, node ports, the health-check node port. A headless Service (clusterIP
    None) keeps saying so."""
    kept = copy.deepcopy(dict(spec or {}))
    headless = kept.get("clusterIP") == "None"
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "healthCheckNodePort"):
        kept.pop(key, None)
    if headless:
        kept["clusterIP"] = "None"
        kept["clusterIPs"] = ["None"]
    for port in kept.get("ports") or []:
        port.pop("nodePort", None)
    return kept


def forge_service(local: Mapping, ctx: ForgeContext) -> dict | None:
    """Cluster IPs, node ports and the health-check node port are the local cluster's
    allocations: cleared so the remote cluster allocates its own. The selector is kept:
    remote pods with the same labels (the offloaded ones) back the remote Service."""
    spec = without_allocations(local.get("spec") or {})
    return {"apiVersion": "v1", "kind": "Service", "metadata": forge_metadata(local, ctx), "spec": spec}
