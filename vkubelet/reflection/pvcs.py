"""PersistentVolumeClaims local -> remote: the claim, not the data. The remote cluster
provisions a volume of its own for the reflected claim; a pod's data lives where the
pod runs (docs/reflection.md, "Storage").

A claim's spec is immutable once created except its requests, so an update carries only
the metadata and the requests (expansion), and an update the remote API refuses is never
"fixed" by deleting and recreating the claim: that would lose the remote volume's data.
"""

from __future__ import annotations

from typing import Mapping

from kubernetes import client

from vkubelet.reflection import forge as f
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import PERSISTENTVOLUMECLAIMS


class PersistentVolumeClaimReflector(Reflector):
    resource = PERSISTENTVOLUMECLAIMS
    kind = "PersistentVolumeClaim"
    api_class = client.CoreV1Api
    suffix = "persistent_volume_claim"
    recreate_on_invalid = False

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return f.forge_pvc(local, ctx)

    def is_up_to_date(self, desired: Mapping, current: Mapping) -> bool:
        return f.pvc_is_up_to_date(desired, current)

    def update_body(self, desired: Mapping, current: Mapping) -> dict:
        return f.pvc_update_body(desired, current)
