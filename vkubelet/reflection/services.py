"""Services local -> remote, with the remote cluster allocating its own cluster IPs and
node ports (forge/services.py). Reflection never applies those fields, so the remote
API server keeps the allocations of the existing Service.

The provider's policy for us decides what of a Service's reach outside the cluster it
admits (policy_fit.fit_service): a NodePort or LoadBalancer type it does not grant is
reflected as ClusterIP, external IPs outside the CIDRs it grants are dropped, an
ExternalName Service it does not grant is not reflected; each with a Warning Event on
the local Service."""

from __future__ import annotations

from typing import Mapping

from kube_offload.runtime import kinds
from kube_offload.provider_policy import ProviderPolicy
from vkubelet import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge.services import forge_service
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import SERVICES


class ServiceReflector(Reflector):
    resource = SERVICES
    kind = "Service"
    api_kind = kinds.SERVICES

    def fit(self, desired: dict, policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_service(desired, policy)

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return forge_service(local, ctx)
