"""Secrets local -> remote, except the local cluster's own credentials: legacy
service-account token Secrets (type kubernetes.io/service-account-token) stay home.
Names starting with names.TOKEN_SECRET_PREFIX are reserved for the per-pod token Secrets
of serviceaccounts.py."""


from __future__ import annotations

from typing import Any, Mapping

from kube_offload.runtime import kinds
from kube_offload.views import metadata as _meta
from vkubelet.reflection import forge as f
from vkubelet.shared import names as n
from vkubelet.reflection.forge import ForgeContext, Unreflectable, copy_fields, forge_metadata
from vkubelet.reflection.policy import never_reflected
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import SECRETS

# --- the forge (pure): the object to write, from the local one ------------------------------
def forge_secret(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    # The reflector never gets here with one (policy.decide); a second check costs
    # nothing and keeps a credential from leaking through any other caller.
    if never_reflected(local, "Secret") is not None:
        return None
    name = str(_meta(local).get("name") or "")
    if name.startswith(n.TOKEN_SECRET_PREFIX):
        raise Unreflectable(
            f"names starting with {n.TOKEN_SECRET_PREFIX} are reserved for the service-account tokens "
            "of offloaded pods: rename it"
        )
    desired = {"apiVersion": "v1", "kind": "Secret", "metadata": forge_metadata(local, ctx)}
    copy_fields(local, desired, ("type", "data", "immutable"))
    return desired


# --- the reflector ------------------------------------------------------------
class SecretReflector(Reflector):
    resource = SECRETS
    kind = "Secret"
    api_kind = kinds.SECRETS

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_secret(local, ctx)
