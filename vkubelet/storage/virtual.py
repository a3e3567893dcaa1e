"""Provisioner of the virtual storage class for ONE virtual node (a loop of its virtual
kubelet; docs/storage.md): the peering's own node, or one of its slices' (docs/slices.md).

A claim of the virtual class whose ``volume.kubernetes.io/selected-node`` is this
virtual node lives in this node's remote cluster:

* the PVC reflector (reflection/pvcs.py) reflects it there - and only there: a claim of
  the virtual class is reflected by the peering's own virtual kubelet when the claim was
  selected for one of the peering's nodes (its own or a slice's), with the storage-class
  mapping (the virtual class itself maps to the remote default class unless
  ``--reflect-storage-class`` says otherwise);
* once the remote cluster holds our copy, this loop creates the local stand-in
  PersistentVolume (forge.remote_standin), pre-bound to the claim; the PV controller
  binds them and the scheduler binds the pod to this node.

The stand-in is made as soon as the remote claim exists, not once it is Bound: a remote
class with ``WaitForFirstConsumer`` binding (local-path-provisioner's, most local-disk
classes) binds only when the remote pod exists, and that pod exists only after the local
pod is bound - which waits for the local claim. Waiting for the remote binding would
deadlock (Liqo's virtual storage class makes the same choice).

Afterwards: a remote claim that grew (expansion, where the remote class allows it) grows
the stand-in and the local claim's status; a stand-in whose claim is gone is deleted
(reclaim policy ``Delete``; the reflector deletes the remote claim, and the remote class's
reclaim policy decides about the remote volume) or kept (``Retain``).
"""

from __future__ import annotations

import logging
from typing import Any, TYPE_CHECKING

from kube_offload.runtime import kinds
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kube import ApiError, Kube, object_key, split_key, MERGE_PATCH
from kube_offload.reasons import REASON_PROVISIONED_REMOTELY as REASON_PROVISIONED
from kube_offload.reasons import REASON_PROVISIONING_FAILED as REASON_NOT_OFFLOADED
from kube_offload.reasons import REASON_WAITING_FOR_REMOTE_CLAIM as REASON_WAITING  # noqa: F401  (re-exported)
from vkubelet.reflection.caches import owned_selector, shared_informer
from vkubelet.reflection.scope import offloaded_namespaces
from vkubelet.reflection.settings import PERSISTENTVOLUMECLAIMS
from vkubelet.shared.claims import is_virtual_claim, selected_node
from vkubelet.storage import forge as f
from vkubelet.shared.origin import origin_key

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings
    from vkubelet.shared.informers import SharedInformers
    from vkubelet.shared.loops import LoopContext


log = logging.getLogger("kube_offload.vkubelet.storage")


def storage_classes(informers: "SharedInformers") -> Informer:
    """Every local StorageClass (few, cluster-scoped): the virtual class's reclaim policy."""
    kube = Kube(informers.local_client)
    name = "local-storageclasses"
    return informers.shared(name, lambda: Informer(
        name=name, list_func=kube.list_func(kinds.STORAGE_CLASSES), resync_seconds=informers.settings.resync_period))


def standin_volumes(informers: "SharedInformers", selector: str) -> Informer:
    """The local stand-in volumes ``selector`` picks (label-selected: only ours)."""
    kube = Kube(informers.local_client)
    name = f"local-persistentvolumes[{selector}]"
    return informers.shared(name, lambda: Informer(
        name=name, list_func=kube.list_func(kinds.PERSISTENT_VOLUMES), list_kwargs={"label_selector": selector},
        resync_seconds=informers.settings.resync_period))


def volume_for(volumes: Informer, key: str) -> dict[str, Any] | None:
    return next((v for v in volumes.list() if f.claim_ref_key(v) == key), None)


class VirtualNodeStorage:
    """The loop (a vkubelet.shared.loops.Runnable) provisioning claims selected for this virtual node."""

    def __init__(self, context: "LoopContext") -> None:
        self.name = "virtual-storage"
        settings = context.settings
        self._settings = settings
        self._class = settings.storage.virtual_class
        self._node = settings.node_name
        self._cluster_id = settings.cluster_id
        self._twins = context.twins
        self._recorder = context.recorder
        informers = context.informers
        self._kube = Kube(informers.local_client)
        self._scope = offloaded_namespaces(informers, context.twins)
        self.claims = self._scope.local_informer(PERSISTENTVOLUMECLAIMS, kinds.PERSISTENT_VOLUME_CLAIMS)
        self.remote = shared_informer(
            informers, "remote", PERSISTENTVOLUMECLAIMS, kinds.PERSISTENT_VOLUME_CLAIMS,
            label_selector=owned_selector(settings.local_cluster_id, PERSISTENTVOLUMECLAIMS),
        )
        self.volumes = standin_volumes(informers, f.standin_selector(self._cluster_id, settings.slice_name))
        self.classes = storage_classes(informers)
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=2, logger=log)
        self.controller.watch(self.claims)
        self.controller.watch(self.remote, lambda obj: origin_key(obj))
        self.controller.watch(self.volumes, f.claim_ref_key)

    # --- the Loop protocol ---------------------------------------------------------------------
    def informers(self) -> list[Any]:
        return [self._scope, self.claims, self.remote, self.volumes, self.classes, *self._twins.informers()]

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def resync_all(self) -> None:
        for key in {*self.claims.keys(), *(k for k in map(f.claim_ref_key, self.volumes.list()) if k)}:
            self.controller.enqueue(key)

    # --- reconcile -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        claim = self.claims.get(key)
        volume = volume_for(self.volumes, key)
        if volume is not None:
            namespace, _ = split_key(key)
            if claim is None and namespace and not self.claims.namespace_synced(namespace) and self._scope.is_offloaded(namespace):
                raise Requeue(1.0, f"namespace {namespace} not listed yet")
            if f.claim_is_gone(volume, claim) and f.claim_is_gone(volume, read_claim(self._kube, key)):
                self._release(volume)
            else:
                self._follow_remote(volume, claim)
            return
        if claim is None or f.is_terminating(claim) or not is_virtual_claim(claim, self._class):
            return
        if (claim.get("spec") or {}).get("volumeName") or selected_node(claim) != self._node:
            return
        namespace, name = split_key(key)
        twin, why = self._twins.twin_for(namespace or "")
        if twin is None:
            message = f"cannot provision on {self._node}: {why}"
            self._recorder.warning(claim, REASON_NOT_OFFLOADED, message)
            raise Requeue(10.0, message)
        remote = self.remote.get(f"{twin}/{name}")
        if remote is None:
            # The reflector creates it (same events); look again soon in any case.
            raise Requeue(1.0, f"waiting for the remote claim {twin}/{name} in cluster {self._cluster_id}")
        storage_class = self.classes.get(self._class)
        body = f.remote_standin(claim, remote, node_name=self._node, cluster_id=self._cluster_id, storage_class=storage_class,
                                slice_name=self._settings.slice_name)
        try:
            self._kube.create(kinds.PERSISTENT_VOLUMES, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise
            return
        log.info("[%s] created stand-in volume %s for remote claim %s/%s", key, body["metadata"]["name"], twin, name)
        self._recorder.normal(
            claim, REASON_PROVISIONED,
            f"volume {body['metadata']['name']} stands for claim {twin}/{name} in cluster {self._cluster_id}: "
            f"pods using this claim run on {self._node} only",
        )

    def _release(self, volume: dict[str, Any]) -> None:
        meta = volume.get("metadata") or {}
        if meta.get("deletionTimestamp") or f.reclaim_policy({"reclaimPolicy": (volume.get("spec") or {}).get(
                "persistentVolumeReclaimPolicy")}) != "Delete":
            return
        try:
            self._kube.delete(kinds.PERSISTENT_VOLUMES, meta["name"], uid=meta.get("uid"))
            log.info("deleted stand-in volume %s: its claim is gone", meta["name"])
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise

    def _follow_remote(self, volume: dict[str, Any], claim: dict[str, Any] | None) -> None:
        """Expansion done remotely: the stand-in and the local claim's status follow."""
        if claim is None:
            return
        namespace, name = split_key(object_key(claim))
        twin, _ = self._twins.twin_for(namespace or "")
        remote = self.remote.get(f"{twin}/{name}") if twin else None
        grown = f.capacity_update(volume, remote)
        if grown is None:
            return
        vname = volume["metadata"]["name"]
        self._kube.patch(kinds.PERSISTENT_VOLUMES, vname, {"spec": {"capacity": {f.STORAGE: grown}}},
                         content_type=MERGE_PATCH)
        if (claim.get("spec") or {}).get("volumeName") == vname:
            # What an external resizer does once the volume grew: the claim's capacity.
            self._kube.patch(kinds.PERSISTENT_VOLUME_CLAIMS, name, {"status": {"capacity": {f.STORAGE: grown}}},
                             namespace=namespace, subresource="status", content_type=MERGE_PATCH)
        log.info("[%s/%s] remote claim grew to %s: stand-in %s follows", namespace, name, grown, vname)


def storage_loops(settings: Settings) -> list[Any]:
    """Loop factories (vkubelet.shared.loops) for vkubelet.runner (nothing when the virtual class is off)."""
    from vkubelet.storage.physical import PhysicalDelegate

    loops: list[Any] = []
    if settings.storage.enabled:
        loops.append(VirtualNodeStorage)
    if settings.storage.physical_delegate:
        loops.append(PhysicalDelegate)
    return loops


def read_claim(kube: Kube, key: str) -> dict[str, Any] | None:
    """The claim as the API server has it (None once it is gone): the caches hold offloaded
    namespaces only, and a namespace that stops being offloaded, or a claim made again under
    the same name, must not cost a bound claim its volume."""
    namespace, name = split_key(key)
    return kube.get_or_none(kinds.PERSISTENT_VOLUME_CLAIMS, name, namespace=namespace)
