"""The remote Secret for a local one (pure); the local cluster's credentials never."""

from __future__ import annotations

from typing import Mapping

from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n
from vkubelet.reflection.forge import ForgeContext, Unreflectable, copy_fields, forge_metadata
from vkubelet.reflection.policy import never_reflected


def forge_secret(local: Mapping, ctx: ForgeContext) -> dict | None:
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
