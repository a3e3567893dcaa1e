"""Services local -> remote, with the remote cluster allocating its own cluster IPs and
node ports (forge_service below). Reflection never applies those fields, so the remote
API server keeps the allocations of the existing Service.

The provider's policy for us decides what of a Service's reach outside the cluster it
admits (policy_fit.fit_service): a NodePort or LoadBalancer type it does not grant is
reflected as ClusterIP, external IPs outside the CIDRs it grants are dropped, an
ExternalName Service it does not grant is not reflected; each with a Warning Event on
the local Service."""


from __future__ import annotations

import copy
from typing import Any, Mapping

from kube_offload.provider_policy import ProviderPolicy
from kube_offload.runtime import kinds
from vkubelet.shared import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge import ForgeContext, forge_metadata
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import SERVICES

# --- the forge (pure): the object to write, from the local one ------------------------------
def without_allocations(spec: Mapping[str, Any]) -> dict[str, Any]:
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


def forge_service(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    """Cluster IPs, node ports and the health-check node port are the local cluster's
    allocations: cleared so the remote cluster allocates its own. The selector is kept:
    remote pods with the same labels (the offloaded ones) back the remote Service."""
    spec = without_allocations(local.get("spec") or {})
    return {"apiVersion": "v1", "kind": "Service", "metadata": forge_metadata(local, ctx), "spec": spec}


# --- the reflector ------------------------------------------------------------
class ServiceReflector(Reflector):
    resource = SERVICES
    kind = "Service"
    api_kind = kinds.SERVICES

    def fit(self, desired: dict[str, Any], policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_service(desired, policy)

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_service(local, ctx)
