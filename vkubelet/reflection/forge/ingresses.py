"""The remote Ingress for a local one (pure): the spec as written."""

from __future__ import annotations

from typing import Mapping

from vkubelet.reflection.forge import ForgeContext, copy_fields, forge_metadata


def forge_ingress(local: Mapping, ctx: ForgeContext) -> dict | None:
    desired = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": forge_metadata(local, ctx)}
    copy_fields(local, desired, ("spec",))
    return desired
