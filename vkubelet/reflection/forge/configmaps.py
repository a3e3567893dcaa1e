"""The remote ConfigMap for a local one (pure); kube-root-ca.crt goes under another name."""

from __future__ import annotations

from typing import Mapping

from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n
from vkubelet.reflection.forge import ForgeContext, Unreflectable, copy_fields, forge_metadata


def forge_configmap(local: Mapping, ctx: ForgeContext) -> dict | None:
    name = str(_meta(local).get("name") or "")
    if name == n.REFLECTED_ROOT_CA_CONFIGMAP:
        raise Unreflectable(
            f"the name {name} is reserved for the reflected {n.ROOT_CA_CONFIGMAP} (the local cluster's CA): rename it"
        )
    remote_name = n.REFLECTED_ROOT_CA_CONFIGMAP if name == n.ROOT_CA_CONFIGMAP else name
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": forge_metadata(local, ctx, name=remote_name)}
    copy_fields(local, desired, ("data", "binaryData", "immutable"))
    return desired
