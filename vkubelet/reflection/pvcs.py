"""PersistentVolumeClaims local -> remote: the claim, not the data. The remote cluster
provisions a volume of its own for the reflected claim; a pod's data lives where the
pod runs (docs/reflection.md, "Storage").

A claim's spec is immutable once created except its requests, so an apply over an
existing claim carries the remote claim's own values for the rest
(pvc_apply_body): only the metadata and the requests (expansion) follow the local claim,
and a write the remote API refuses is never "fixed" by deleting and recreating the
claim: that would lose the remote volume's data.

Claims of the virtual storage class (docs/storage.md) live in one cluster only: they are
reflected by the peering whose node (its own, or a slice's: docs/slices.md) the scheduler
selected for them (``volume.kubernetes.io/selected-node``), never by the others, and their
class maps to the remote default class unless ``--reflect-storage-class`` names it.

A claim whose (mapped) class the provider's policy does not grant, or larger than the
largest claim it grants, is not reflected (policy_fit.fit_pvc), with a Warning Event on
the local claim; a claim reflected before the policy tightened is left as it is.
"""


from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Container, Mapping

from kube_offload.provider_policy import ProviderPolicy
from kube_offload.runtime import kinds
from kube_offload.runtime.informer import ADDED, DELETED
from kube_offload.views import metadata as _meta
from vkubelet.shared import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge import ForgeContext, forge_metadata
from vkubelet.reflection.policy import Decision
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import PERSISTENTVOLUMECLAIMS, ANY_STORAGE_CLASS
from vkubelet.shared.claims import is_virtual_claim, selected_node
from vkubelet.shared.peering_nodes import PeeringNodes

if TYPE_CHECKING:
    from kube_offload.runtime.cache import Cache
    from vkubelet.shared.loops import LoopContext

# --- the forge (pure): the object to write, from the local one ------------------------------
# Annotations the PersistentVolume controller and the scheduler write on claims: they
# describe one cluster's binding and provisioning, so they are neither copied from the
# local claim nor taken away from the remote one.
PVC_CONTROLLER_ANNOTATION_PREFIXES = ("pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/")
# Claim fields that name objects of the local cluster (a volume, a snapshot, a class of
# volume attributes, volumes chosen by label): meaningless remotely.
PVC_LOCAL_FIELDS = ("volumeName", "selector", "dataSource", "dataSourceRef", "volumeAttributesClassName")


def is_pvc_controller_annotation(key: str) -> bool:
    return key.startswith(PVC_CONTROLLER_ANNOTATION_PREFIXES)


def map_storage_class(name: str | None, mapping: Mapping[str, str]) -> str | None:
    """The remote StorageClass for local class ``name`` (None: the remote default)."""
    if not name:
        return None
    if name in mapping:
        return mapping[name] or None
    if "*" in mapping:
        return mapping["*"] or None
    return name


def forge_pvc(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    """The claim as the user wrote it, for the remote cluster to provision its own
    volume: nothing that names a local volume or snapshot, the class mapped."""
    spec = copy.deepcopy(dict(local.get("spec") or {}))
    legacy_class = (_meta(local).get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class")
    storage_class = map_storage_class(spec.get("storageClassName") or legacy_class, ctx.storage_classes)
    for key in (*PVC_LOCAL_FIELDS, "storageClassName"):
        spec.pop(key, None)
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": forge_metadata(local, ctx, drop_annotation=is_pvc_controller_annotation),
        "spec": spec,
    }


def pvc_requests(pvc: Mapping[str, Any]) -> dict[str, Any]:
    return dict(((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {})


def pvc_apply_body(desired: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """What to apply for claim ``desired`` over the remote claim ``current`` (None: none
    yet). A claim's spec is immutable but for its requests (expansion): once the claim
    exists, every other spec field is applied as the remote claim has it (the same value
    changes nothing, another would be refused and, for a claim, never "fixed" by
    recreating it), the requests and the metadata follow the local claim. What the
    remote cluster set itself (a bound volume, a defaulted class, the PV controller's
    annotations) is never in what we apply, so it is left alone."""
    body = copy.deepcopy(dict(desired))
    if current is None:
        return body
    current_spec = current.get("spec") or {}
    spec = dict(body.get("spec") or {})
    for key in list(spec):
        if key != "resources" and key in current_spec:
            spec[key] = copy.deepcopy(current_spec[key])
    resources = {k: copy.deepcopy(v) for k, v in (current_spec.get("resources") or {}).items() if k != "requests"}
    requests = pvc_requests(desired)
    if requests:
        resources["requests"] = requests
    if resources:
        spec["resources"] = resources
    body["spec"] = spec
    return body


# --- the reflector ------------------------------------------------------------
def virtual_claim_selection(local: Mapping[str, Any], *, virtual_class: str, nodes: Container[str]) -> Decision | None:
    """For a claim of the virtual class: reflected only when selected for one of ``nodes``
    (the peering's: its own and its slices'); None for every other claim (the ordinary
    policy decides)."""
    if not is_virtual_claim(local, virtual_class):
        return None
    selected = selected_node(local)
    if selected and selected in nodes:
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

    def __init__(self, context: "LoopContext") -> None:
        super().__init__(context)
        # Claims are the peering's (this process is its own node's): one selected for a
        # slice's node is reflected here too, and that slice's process makes its stand-in.
        self._nodes = PeeringNodes(context.informers)
        self._nodes.nodes.add_handler(self._on_slice_node)

    def _on_slice_node(self, event: str, _old: dict[str, Any] | None, _new: dict[str, Any]) -> None:
        # A slice node that comes or goes may change where a claim of it is reflected;
        # its heartbeats (MODIFIED) change nothing of that.
        if event in (ADDED, DELETED):
            self.resync_all()

    def extra_informers(self) -> list[Cache]:
        return [self._nodes.nodes]

    def selection(self, local: Mapping[str, Any]) -> Decision:
        storage_settings = self.settings.storage
        virtual = virtual_claim_selection(local, virtual_class=storage_settings.virtual_class, nodes=self._nodes)
        return virtual if virtual is not None else super().selection(local)

    def forge_context(self, twin: str) -> f.ForgeContext:
        ctx = super().forge_context(twin)
        mapping = storage_class_mapping(ctx.storage_classes, self.settings.storage.virtual_class)
        return dataclasses.replace(ctx, storage_classes=mapping)

    def fit(self, desired: dict[str, Any], policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_pvc(desired, policy)

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_pvc(local, ctx)

    def apply_body(self, desired: dict[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
        return pvc_apply_body(desired, current)
