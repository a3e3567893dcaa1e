"""The physical delegate of the virtual storage class (docs/storage.md): claims of the
virtual class whose first pod the scheduler put on a PHYSICAL node are provisioned
through a real local StorageClass, so one class serves both placements (Liqo's virtual
storage class does the same).

For such a claim it creates a claim of the real class in the storage namespace (named
by the user claim's UID, with the selected node), waits for the real provisioner to bind
it, and creates the stand-in volume bound to the user's claim: the real volume's source
(so the real kubelet mounts the real storage) and node affinity, ANDed with "not a
virtual node". When the user's claim is gone and the virtual class says ``Delete``, the
real claim goes (its own class's reclaim policy then applies to the real volume) and the
stand-in with it.

Runs in ONE virtual kubelet per cluster (``--virtual-storage-local-class``; the chart
gives it to the first remote cluster's). Its writes are deterministic and idempotent, so
two processes running it by mistake converge on the same objects.
"""

from __future__ import annotations

import logging
from typing import Any, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import NODES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from kube_offload.runtime.kube import ApiError, Kube
from kube_offload.reasons import REASON_PROVISIONED_LOCALLY as REASON_PROVISIONED
from vkubelet.shared.claims import is_virtual_claim, selected_node
from vkubelet.storage import forge as f
from vkubelet.storage.virtual import read_claim, standin_volumes, storage_classes, volume_for

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

log = logging.getLogger("kube_offload.vkubelet.storage.physical")


class PhysicalDelegate:
    """The Loop provisioning claims of the virtual class selected for physical nodes."""

    def __init__(self, context: "LoopContext") -> None:
        self.name = "virtual-storage-physical"
        settings = context.settings.storage
        self._class = settings.virtual_class
        self._local_class = settings.local_class
        self._namespace = settings.namespace
        self._recorder = context.recorder
        informers = context.informers
        self._kube = Kube(informers.local_client)
        name = "local-persistentvolumeclaims-all"
        # Every claim: a claim of the virtual class may be in any namespace, offloaded or
        # not (a Local namespace uses the class too); the real claims are in it as well.
        self.claims = informers.shared(name, lambda: Informer(
            name=name, list_func=self._kube.list_func(PERSISTENT_VOLUME_CLAIMS),
            resync_seconds=informers.settings.resync_period))
        self.volumes = standin_volumes(informers, f"{c.LABEL_VOLUME_LOCATION}={c.VOLUME_LOCATION_LOCAL}")
        self.classes = storage_classes(informers)
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=2, logger=log)
        self.controller.watch(self.claims, self._key)
        self.controller.watch(self.volumes, f.claim_ref_key)

    def _key(self, claim: dict[str, Any]) -> str | None:
        meta = claim.get("metadata") or {}
        if meta.get("namespace") == self._namespace and f.real_claim_origin(claim):
            return f.real_claim_origin(claim)
        return f.claim_key(claim) if is_virtual_claim(claim, self._class) else None

    # --- the Loop protocol ---------------------------------------------------------------------
    def informers(self) -> list[Any]:
        return [self.claims, self.volumes, self.classes]

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def resync_all(self) -> None:
        keys = {self._key(claim) for claim in self.claims.list()}
        keys |= {f.claim_ref_key(volume) for volume in self.volumes.list()}
        for key in keys - {None}:
            self.controller.enqueue(key)  # type: ignore[arg-type]

    # --- reconcile -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        claim = self.claims.get(key)
        volume = volume_for(self.volumes, key)
        if volume is not None:
            if f.claim_is_gone(volume, claim) and f.claim_is_gone(volume, read_claim(self._kube, key)):
                self._release(volume)
            return
        self._collect_orphans(key, claim)
        if claim is None or f.is_terminating(claim) or not is_virtual_claim(claim, self._class):
            return
        node_name = selected_node(claim)
        if (claim.get("spec") or {}).get("volumeName") or not node_name or not self._is_physical(node_name):
            return
        uid = (claim.get("metadata") or {}).get("uid")
        real = self.claims.get(f"{self._namespace}/{uid}")
        if real is None:
            body = f.real_claim(claim, local_class=self._local_class, namespace=self._namespace, node_name=node_name)
            try:
                self._kube.create(PERSISTENT_VOLUME_CLAIMS, body, namespace=self._namespace)
                log.info("[%s] created claim %s/%s of class %s on node %s", key, self._namespace, uid, self._local_class, node_name)
            except ApiError as exc:
                if not exc.already_exists:
                    raise
            return
        real_volume_name = (real.get("spec") or {}).get("volumeName")
        if not real_volume_name or (real.get("status") or {}).get("phase") != "Bound":
            raise Requeue(5.0, f"waiting for class {self._local_class} to bind {self._namespace}/{uid}")
        real_volume = self._kube.get(PERSISTENT_VOLUMES, real_volume_name)
        body = f.local_standin(claim, real, real_volume, storage_class=self.classes.get(self._class))
        try:
            self._kube.create(PERSISTENT_VOLUMES, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise
            return
        log.info("[%s] created stand-in volume %s for %s", key, body["metadata"]["name"], real_volume_name)
        self._recorder.normal(
            claim, REASON_PROVISIONED,
            f"volume {body['metadata']['name']} mounts {real_volume_name} of class {self._local_class} "
            f"(claim {self._namespace}/{uid}) on node {node_name}",
        )

    def _is_physical(self, node_name: str) -> bool:
        try:
            node = self._kube.get(NODES, node_name)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return ((node.get("metadata") or {}).get("labels") or {}).get(c.LABEL_TYPE) != c.TYPE_VIRTUAL_NODE

    def _collect_orphans(self, key: str, claim: dict[str, Any] | None) -> None:
        """Real claims made for a claim of this name that is gone (or was made again)
        before any stand-in was bound: nothing uses them."""
        uid = ((claim or {}).get("metadata") or {}).get("uid")
        for real in self.claims.list():
            meta = real.get("metadata") or {}
            if meta.get("namespace") != self._namespace or f.real_claim_origin(real) != key:
                continue
            if (meta.get("annotations") or {}).get(c.ANNOTATION_ORIGIN_UID) == uid:
                continue
            self._delete_claim(self._namespace, meta["name"], meta.get("uid"))

    def _release(self, volume: dict[str, Any]) -> None:
        meta = volume.get("metadata") or {}
        if meta.get("deletionTimestamp") or (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") != "Delete":
            return
        real = f.real_claim_key_of(volume)
        if real:
            self._delete_claim(real[0], real[1], None)
        try:
            self._kube.delete(PERSISTENT_VOLUMES, meta["name"], uid=meta.get("uid"))
            log.info("deleted stand-in volume %s and its real claim %s: its claim is gone", meta["name"], real)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise

    def _delete_claim(self, namespace: str, name: str, uid: str | None) -> None:
        try:
            self._kube.delete(PERSISTENT_VOLUME_CLAIMS, name, namespace=namespace, uid=uid or None)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise
