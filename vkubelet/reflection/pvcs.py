"""PersistentVolumeClaims local -> remote: the claim, not the data. The remote cluster
provisions a volume of its own for the reflected claim; a pod's data lives where the
pod runs (docs/reflection.md, "Storage").

A claim's spec is immutable once created except its requests, so an apply over an
existing claim carries the remote claim's own values for the rest (forge/pvcs.py
pvc_apply_body): only the metadata and the requests (expansion) follow the local claim,
and a write the remote API refuses is never "fixed" by deleting and recreating the
claim: that would lose the remote volume's data.

Claims of the virtual storage class (docs/storage.md) live in one cluster only: they are
reflected by the virtual kubelet whose node the scheduler selected for them
(``volume.kubernetes.io/selected-node``), never by the others, and their class maps to
the remote default class unless ``--reflect-storage-class`` names it.

A claim whose (mapped) class the provider's policy does not grant, or larger than the
largest claim it grants, is not reflected (policy_fit.fit_pvc), with a Warning Event on
the local claim; a claim reflected before the policy tightened is left as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from kube_offload.runtime import kinds
from kube_offload.provider_policy import ProviderPolicy
from vkubelet import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge.pvcs import forge_pvc, pvc_apply_body
from vkubelet.reflection.policy import Decision
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import PERSISTENTVOLUMECLAIMS, ANY_STORAGE_CLASS
from vkubelet.storage import forge as storage


def virtual_claim_selection(local: Mapping, *, virtual_class: str, node_name: str) -> Decision | None:
    """For a claim of the virtual class: reflected only when selected for ``node_name``;
    None for every other claim (the ordinary policy decides)."""
    if not storage.is_virtual_claim(local, virtual_class):
        return None
    selected = storage.selected_node(local)
    if selected == node_name:
        return None
    where = f"node {selected}" if selected else "no node yet"
    return Decision(False, f"a claim of the virtual storage class {virtual_class} lives where its first pod was scheduled ({where})")


def storage_class_mapping(mapping: Mapping[str, str], virtual_class: str) -> dict[str, str]:
    """``mapping`` with the virtual class mapped to the remote default class (or to the
    class every unlisted one maps to), unless it is named: no remote cluster has it."""
    result = dict(mapping)
    if virtual_class and virtual_class not in result:
        result[virtual_class] = result.get(ANY_STORAGE_CLASS, "")
    return result


class PersistentVolumeClaimReflector(Reflector):
    resource = PERSISTENTVOLUMECLAIMS
    kind = "PersistentVolumeClaim"
    api_kind = kinds.PERSISTENT_VOLUME_CLAIMS
    recreate_on_invalid = False

    def selection(self, local: Mapping) -> Decision:
        storage_settings = self.settings.storage
        virtual = virtual_claim_selection(local, virtual_class=storage_settings.virtual_class, node_name=self.settings.node_name)
        return virtual if virtual is not None else super().selection(local)

    def forge_context(self, twin: str) -> f.ForgeContext:
        ctx = super().forge_context(twin)
        mapping = storage_class_mapping(ctx.storage_classes, self.settings.storage.virtual_class)
        return dataclasses.replace(ctx, storage_classes=mapping)

    def fit(self, desired: dict, policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_pvc(desired, policy)

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return forge_pvc(local, ctx)

    def apply_body(self, desired: dict, current: Mapping | None) -> dict:
        return pvc_apply_body(desired, current)
