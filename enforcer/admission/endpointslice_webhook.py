"""The EndpointSlice validating webhook, apart from HTTP: the facts the decision needs
(the provider's node, Service-range and API server addresses; the pods the enforcer made
in the slice's twin namespace), gathered from informers, and the decision itself
(:mod:`enforcer.admission.endpointslice_policy`, pure).

Served by the enforcer (its managed-pods informer knows which pod IP is whose) next to
the ShadowPod webhook, with ``failurePolicy: Fail``: while the enforcer is down, a
consumer's EndpointSlice writes wait (the chart's ValidatingAdmissionPolicy still holds
the stateless rules, and existing slices keep working).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kubernetes import client

from enforcer.admission import endpointslice_policy as policy
from enforcer.admission.caches import LIVE_GET_TIMEOUT, ProviderCaches
from enforcer.consumers.quota import twin_owner
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import ENDPOINT_SLICES, NODES, PODS, SERVICE_CIDRS
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY

log = logging.getLogger("kube_offload.enforcer.webhook")

BY_POD_IP = "by-namespace-pod-ip"
API_SERVER_NAMESPACE = "default"
API_SERVER_SERVICE = "kubernetes"


class PodCache(Protocol):
    def by_index(self, name: str, value: str) -> list[dict[str, Any]]: ...

    def add_indexer(self, name: str, func: Any) -> None: ...

    def has_synced(self) -> bool: ...


class ListCache(Protocol):
    def list(self) -> list[dict[str, Any]]: ...

    def has_synced(self) -> bool: ...


class EndpointSliceValidator:
    def __init__(
        self,
        *,
        caches: ProviderCaches,
        pods: PodCache,
        nodes: ListCache,
        service_cidrs: ListCache,
        api_server_slices: ListCache,
        live_pod_ip: Any = None,
    ) -> None:
        self._caches = caches
        self._pods = pods
        pods.add_indexer(BY_POD_IP, policy.pod_ip_keys)
        self._nodes = nodes
        self._service_cidrs = service_cidrs
        self._api_server_slices = api_server_slices
        # (namespace, ip) -> pod name or None: one GET on a cache miss (a pod whose IP
        # the watch has not delivered yet).
        self._live_pod_ip = live_pod_ip or (lambda _namespace, _ip: None)

    def informers(self) -> list[Any]:
        return [self._pods, self._nodes, self._service_cidrs, self._api_server_slices]

    def ready(self) -> bool:
        return self._caches.has_synced() and all(i.has_synced() for i in self.informers())

    def provider_addresses(self) -> policy.ProviderAddresses:
        return policy.ProviderAddresses(
            nodes=policy.node_addresses(self._nodes.list()),
            service_cidrs=policy.service_cidrs(self._service_cidrs.list()),
            api_servers=policy.api_server_addresses(self._api_server_slices.list()),
        )

    def pod_at(self, namespace: str, ip: str) -> str | None:
        found = self._pods.by_index(BY_POD_IP, f"{namespace}/{ip}")
        if found:
            return str((found[0].get("metadata") or {}).get("name") or "")
        return self._live_pod_ip(namespace, ip)

    def review(self, request: AdmissionRequest) -> Decision:
        kind = request.kind
        if kind.group != "discovery.k8s.io" or kind.kind != "EndpointSlice":
            return Decision.allow(warnings=[f"the EndpointSlice webhook does not validate {kind}; check its registration"])
        if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
            return Decision.allow()
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable", "could not verify the EndpointSlice: the enforcer's caches are not synced yet; retry later")
        namespace = self._caches.namespace(request.namespace) if request.namespace else None
        owner = twin_owner(namespace)
        consumer = self._caches.consumer(owner) if owner else None
        return policy.decide(request, namespace=namespace, consumer=consumer, provider=self.provider_addresses(), pod_at=self.pod_at)


def for_cluster(api_client: client.ApiClient, *, caches: ProviderCaches, pods: PodCache, nodes: ListCache | None,
                resync_seconds: float = 300.0) -> tuple[EndpointSliceValidator, list[Informer]]:
    """The validator on the enforcer's informers, and the informers it owns (to start and
    stop): the ServiceCIDRs, the API server's EndpointSlices and, when no other loop of
    the process watches nodes, the nodes."""
    owned: list[Informer] = []
    lists = Kube(api_client)
    service_cidrs = Informer(name="service-cidrs", list_func=lists.list_func(SERVICE_CIDRS), resync_seconds=resync_seconds,
                             transform=_spec_only)
    api_server_slices = Informer(
        name="api-server-endpointslices",
        list_func=lists.list_func(ENDPOINT_SLICES, namespace=API_SERVER_NAMESPACE),
        list_kwargs={"label_selector": f"kubernetes.io/service-name={API_SERVER_SERVICE}"},
        resync_seconds=resync_seconds,
        transform=_addresses_only,
    )
    owned += [service_cidrs, api_server_slices]
    if nodes is None:
        from enforcer.consumers.trim import trim_node

        nodes = Informer(name="endpointslice-nodes", list_func=lists.list_func(NODES), resync_seconds=resync_seconds, transform=trim_node)
        owned.append(nodes)

    kube = Kube(api_client, timeout=LIVE_GET_TIMEOUT, retry=NO_RETRY)  # inside an admission: one short try

    def live_pod_ip(namespace: str, ip: str) -> str | None:
        try:
            found = kube.list(PODS, namespace=namespace, label_selector=f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY_ENFORCER}",
                              field_selector=f"status.podIP={ip}")
        except ApiError as exc:
            log.warning("listing the managed pods of %s with IP %s failed: %s", namespace, ip, exc)
            return None
        items = (found or {}).get("items") or []
        return str((items[0].get("metadata") or {}).get("name") or "") if items else None

    validator = EndpointSliceValidator(caches=caches, pods=pods, nodes=nodes, service_cidrs=service_cidrs,
                                       api_server_slices=api_server_slices, live_pod_ip=live_pod_ip)
    return validator, owned


def _spec_only(obj: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k in ("name", "resourceVersion", "uid")},
            "spec": obj.get("spec") or {}}


def _addresses_only(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion", "uid") if k in meta},
            "endpoints": [{"addresses": e.get("addresses") or []} for e in obj.get("endpoints") or []]}
