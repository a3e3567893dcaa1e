"""The pod loop's writes to the local pod: its status (and the echoes of those writes, so
their watch events are not reconciled again), the final delete that confirms a pod's
end, and the orphan check that asks the API server before ShadowPods are deleted."""

from __future__ import annotations

from typing import Any

import logging

from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kinds import PODS
from kube_offload.runtime.kube import MERGE_PATCH, ApiError, Kube, split_key
from kube_offload.runtime.predicates import WriteEchoes, only_status_changed
from vkubelet.shared.origin import origin_uid


class LocalPods:
    def __init__(self, kube: Kube, node_name: str) -> None:
        self.kube = kube
        self._node_name = node_name
        # The resourceVersions our own pods/status patches produced (their echoes).
        self.status_echoes = WriteEchoes()

    def own_status_write(self, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
        """Whether a local pod update is only the echo of our own pods/status patch."""
        return only_status_changed(old, new) and self.status_echoes.is_echo(new)

    def patch_status(self, local: dict[str, Any], patch: dict[str, Any]) -> None:
        meta = local["metadata"]
        try:
            written = self.kube.patch(
                PODS, meta["name"], patch, namespace=meta["namespace"], subresource="status", content_type=MERGE_PATCH
            )
        except ApiError as exc:
            if exc.not_found:
                return
            if exc.conflict:
                raise Requeue(0.2, "local pod changed meanwhile") from exc
            raise
        # Its watch event may come before this line (then it is reconciled, harmlessly).
        self.status_echoes.wrote(written)

    def delete(self, local: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger], done: str) -> None:
        """The final delete (grace 0, this pod's UID), as a kubelet confirms a pod's end."""
        meta = local["metadata"]
        try:
            self.kube.delete(PODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"], grace_period_seconds=0)
            logger.info("%s", done)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return
            raise

    def still_exists_elsewhere(self, key: str, shadows: list[dict[str, Any]], logger: logging.LoggerAdapter[logging.Logger]) -> bool:
        """Before deleting ShadowPods as orphans, ask the API server itself: a cache
        that lags behind, or a pod bound to another virtual node of this same remote
        cluster (two vkubelets of one local cluster sharing a provider), must not cost
        a running pod. True when the local pod exists after all."""
        namespace, name = split_key(key)
        pod = self.kube.get_or_none(PODS, name, namespace=namespace)
        if pod is None:
            return False
        uids = {origin_uid(shp) for shp in shadows}
        if pod.get("metadata", {}).get("uid") not in uids:
            return False  # another pod of the same name: the ShadowPods are orphans
        if (pod.get("spec") or {}).get("nodeName") == self._node_name:
            raise Requeue(2.0, "the local pod exists; waiting for the cache to show it")
        logger.warning(
            "ShadowPods of this pod exist but it is bound to node %s, not %s: left alone",
            (pod.get("spec") or {}).get("nodeName"),
            self._node_name,
        )
        return True
