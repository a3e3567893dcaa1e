"""Ingresses local -> remote, spec as written: its backends name Services and its TLS
section Secrets of the same namespace, which are reflected under the same names.

The provider's policy for us decides which Ingresses it admits (policy_fit.fit_ingress):
an Ingress whose class it does not grant, with a host outside the domains it grants or
with no host (a catch-all) is not reflected; annotations it does not grant (controller
configuration) and a default backend beside host rules are dropped; each with a Warning
Event on the local Ingress."""


from __future__ import annotations

from typing import Any, Mapping

from kube_offload.provider_policy import ProviderPolicy
from kube_offload.runtime import kinds
from vkubelet.shared import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge import ForgeContext, copy_fields, forge_metadata
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import INGRESSES

# --- the forge (pure): the object to write, from the local one ------------------------------
def forge_ingress(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    desired = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": forge_metadata(local, ctx)}
    copy_fields(local, desired, ("spec",))
    return desired


# --- the reflector ------------------------------------------------------------
class IngressReflector(Reflector):
    resource = INGRESSES
    kind = "Ingress"
    api_kind = kinds.INGRESSES

    def fit(self, desired: dict[str, Any], policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_ingress(desired, policy)

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_ingress(local, ctx)
