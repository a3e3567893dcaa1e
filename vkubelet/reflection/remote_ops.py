"""Create / read / replace / delete of the remote objects reflection writes, through the
API layer (kube_offload/runtime/kube.py), every write counted (metrics.py)."""

from __future__ import annotations

from typing import Mapping

from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube
from vkubelet.reflection import metrics


class RemoteOps:
    """Create / read / replace / delete of one namespaced ``kind`` through the API layer;
    every write is counted for ``resource`` (vkubelet/reflection/metrics.py)."""

    def __init__(self, kube: Kube, kind: Resource, *, resource: str) -> None:
        self._kube = kube
        self._kind = kind
        self._resource = resource

    def create(self, namespace: str, body: Mapping) -> dict:
        created = self._kube.create(self._kind, dict(body), namespace=namespace)
        metrics.wrote(self._resource, metrics.OPERATION_CREATE)
        return created

    def read(self, namespace: str, name: str) -> dict:
        return self._kube.get(self._kind, name, namespace=namespace)

    def replace(self, namespace: str, name: str, body: Mapping) -> dict:
        replaced = self._kube.replace(self._kind, {**body, "metadata": {**(body.get("metadata") or {}), "name": name}},
                                      namespace=namespace)
        metrics.wrote(self._resource, metrics.OPERATION_UPDATE)
        return replaced

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
