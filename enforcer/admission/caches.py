"""The provider-side caches beyond ShadowPods and managed pods: Namespaces, Consumers
and the ServiceAccounts consumers reflected. One list+watch each per enforcer process,
read by the ShadowPod webhook and meant to be shared by every loop that needs the same
objects (the TwinNamespace controller, the Consumer status loop): a second informer on
the same kind would be a second watch and a second copy in memory.

On a cache miss, :meth:`ProviderCaches.namespace` and friends ask the API server once:
an object created a moment ago (a twin namespace, a freshly reflected ServiceAccount)
may not have reached the watch yet, and refusing it for that would only cost the
consumer a retry.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import (
    CONSUMERS, LIMIT_RANGES, NAMESPACES, OFFLOAD_SLICES, RESOURCE_QUOTAS, SERVICE_ACCOUNTS, Resource,
)
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY

log = logging.getLogger("kube_offload.enforcer.caches")

# A cache miss is answered by one GET inside an admission: keep it short.
LIVE_GET_TIMEOUT: tuple[float, float] = (1.0, 2.0)
NAMESPACE_INDEX = "namespace"


class ProviderCaches:
    """``namespaces`` and ``consumers`` may be informers another loop already runs (the
    ConsumerLoops' own): then they are read, not started or stopped, here."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespaces: Informer | None = None,
        consumers: Informer | None = None,
        slices: Informer | None = None,
        resync_seconds: float = 300.0,
        admission_inputs: bool = False,
    ) -> None:
        """``admission_inputs``: also cache the LimitRanges and ResourceQuotas, what the
        dry run's verdict cache keys on (enforcer/admission/verdict_cache.py)."""
        # A miss is one short GET inside an admission: no retry, the webhook's time is short.
        self._kube = Kube(api_client, timeout=LIVE_GET_TIMEOUT, retry=NO_RETRY)
        kube = Kube(api_client)
        self._owned: list[Informer] = []
        self.namespaces = namespaces or self._own(
            Informer(name="namespaces", list_func=kube.list_func(NAMESPACES), resync_seconds=resync_seconds)
        )
        self.consumers = consumers or self._own(
            Informer(
                name="consumers",
                list_func=kube.list_func(CONSUMERS),
                resync_seconds=resync_seconds,
            )
        )
        # Only ServiceAccounts carrying an origin label: the ones consumers reflected, the
        # only ones a ShadowPod may name besides "default". Metadata is all that is read.
        self.service_accounts = self._own(
            Informer(
                name="reflected-serviceaccounts",
                list_func=kube.list_func(SERVICE_ACCOUNTS),
                list_kwargs={"label_selector": c.LABEL_ORIGIN_CLUSTER_ID},
                resync_seconds=resync_seconds,
                transform=_metadata_only,
            )
        )

        # Every consumer's OffloadSlices (the consumer loops' informer; None: a live GET
        # each time). Not a readiness cache: only a slice's ShadowPods read it, and a miss
        # is asked of the API server.
        self.slices = slices

        self.limit_ranges: Informer | None = None
        self.resource_quotas: Informer | None = None
        if admission_inputs:
            # Metadata and spec.hard only (what the key reads), indexed by namespace.
            self.limit_ranges = self._own(
                Informer(name="limitranges", list_func=kube.list_func(LIMIT_RANGES), resync_seconds=resync_seconds,
                         transform=_metadata_only, indexers={NAMESPACE_INDEX: _namespace_of})
            )
            self.resource_quotas = self._own(
                Informer(name="resourcequotas", list_func=kube.list_func(RESOURCE_QUOTAS), resync_seconds=resync_seconds,
                         transform=_quota_hard, indexers={NAMESPACE_INDEX: _namespace_of})
            )

    def _own(self, informer: Informer) -> Informer:
        self._owned.append(informer)
        return informer

    def informers(self) -> list[Informer]:
        extra = [i for i in (self.limit_ranges, self.resource_quotas) if i is not None]
        return [self.namespaces, self.consumers, self.service_accounts, *extra]

    def start(self) -> None:
        for informer in self._owned:
            informer.start()

    def stop(self) -> None:
        for informer in self._owned:
            informer.stop()

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers())

    # --- reads, with one live GET on a miss -------------------------------------------------
    def namespace(self, name: str) -> dict[str, Any] | None:
        return self.namespaces.get(name) or self._live(NAMESPACES, None, name)

    def consumer(self, name: str) -> dict[str, Any] | None:
        return self.consumers.get(name) or self._live(CONSUMERS, None, name)

    def offload_slice(self, namespace: str, name: str) -> dict[str, Any] | None:
        cached = self.slices.get(f"{namespace}/{name}") if self.slices is not None else None
        return cached or self._live(OFFLOAD_SLICES, namespace, name)

    def service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.service_accounts.get(f"{namespace}/{name}") or self._live(SERVICE_ACCOUNTS, namespace, name)

    def in_namespace(self, informer: Informer | None, namespace: str) -> list[dict[str, Any]]:
        return informer.by_index(NAMESPACE_INDEX, namespace) if informer is not None else []

    def _live(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._kube.get(resource, name, namespace=namespace)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("GET %s failed: %s", resource.path(namespace=namespace, name=name), exc)
            return None


def _metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp")
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": {k: meta[k] for k in keep if k in meta}}



def _namespace_of(obj: dict[str, Any]) -> list[str]:
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


def _quota_hard(obj: dict[str, Any]) -> dict[str, Any]:
    return {**_metadata_only(obj), "spec": {"hard": dict(((obj.get("spec") or {}).get("hard") or {}))}}
