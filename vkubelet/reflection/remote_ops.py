"""Apply / read / delete of the remote objects reflection writes, through the API layer
(kube_offload/runtime/kube.py), every write counted (metrics.py).

Every write is a server-side apply as this virtual kubelet's field manager
(names.field_manager), forced: the local object is the only source of truth for the
fields reflection sets, and the fields it does not set (what the provider's admission
defaults, its controllers add) stay whoever's they are."""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube
from vkubelet.reflection import metrics


class RemoteOps:
    """Apply / read / delete of one namespaced ``kind`` through the API layer as
    ``field_manager``; every write is counted for ``resource``
    (vkubelet/reflection/metrics.py)."""

    def __init__(self, kube: Kube, kind: Resource, *, resource: str, field_manager: str) -> None:
        self._kube = kube
        self._kind = kind
        self._resource = resource
        self.field_manager = field_manager

    def apply(self, namespace: str, body: Mapping[str, Any], *, creates: bool, force: bool = True) -> dict[str, Any]:
        """Server-side apply of ``body`` (forced unless ``force`` is False: then a field
        another manager holds with another value is a 409); ``creates``: no object of that
        name was known (counted as a create, else as an update)."""
        applied = self._kube.apply(self._kind, dict(body), namespace=namespace, force=force, field_manager=self.field_manager)
        metrics.wrote(self._resource, metrics.OPERATION_CREATE if creates else metrics.OPERATION_UPDATE)
        return applied

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if there is none of that name."""
        return self._kube.get_or_none(self._kind, name, namespace=namespace)

    def delete(self, namespace: str, name: str, uid: str | None) -> bool:
        """Delete if it is still the object with ``uid``; False if already gone or replaced."""
        try:
            self._kube.delete(self._kind, name, namespace=namespace, uid=uid or None)
            metrics.wrote(self._resource, metrics.OPERATION_DELETE)
            return True
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
