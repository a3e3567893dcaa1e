"""EndpointSlices local -> remote: the endpoints of local pods, so that remote pods
reaching a reflected Service by name also reach its backends in the local cluster
(forge_endpointslice below says which addresses; docs/reflection.md the network limits).

Users cannot annotate the slices a controller writes, so the policy is read on the
slice's Service (label kubernetes.io/service-name): annotate the Service and its slices
follow. A skip annotation on the slice itself is honoured as well.

The provider admits only addresses inside the ranges its policy grants us
(``endpoints.cidrs``, typically the remapped local pod range): others are left out
(policy_fit.fit_endpointslice), a slice with none left is not reflected; a Warning Event
on the local slice says so, once.
"""


from __future__ import annotations

import copy
import ipaddress
import threading
from typing import Mapping, Any

from kube_offload.provider_policy import ProviderPolicy
from kube_offload.runtime import kinds
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.kube import object_key
from kube_offload.views import metadata as _meta
from vkubelet.shared import policy_fit
from vkubelet.reflection import forge as f
from vkubelet.shared import names as n
from vkubelet.reflection.forge import ForgeContext, copy_fields, forge_metadata
from vkubelet.reflection.policy import Decision, Policy, decide
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import ENDPOINTSLICES, SERVICES
from vkubelet.shared.loops import LoopContext

# Local slices by the key (namespace/name) of their Service (label kubernetes.io/service-name),
# kept by the informer: a Service event finds its slices without scanning every cached
# slice. The scan made each Service event cost O(slices) in the informer's own thread, and
# a resync of N Services O(N^2) under the informer's dispatch lock: at 5,000 Services
# (bench/bench_reflection.py) the resync held that lock for minutes, and new Services
# waited behind it, unreflected.
BY_SERVICE = "by-service"


def slice_service_key(obj: dict[str, Any]) -> list[str]:
    """Index function of :data:`BY_SERVICE`: the slice's Service key, if it names one."""
    service = service_name_of_slice(obj)
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [f"{namespace}/{service}"] if service and namespace else []


# --- the forge (pure): the object to write, from the local one ------------------------------
def routable_address(address: str) -> bool:
    """An endpoint address that can mean the same host from another cluster: not
    loopback, link-local, unspecified or multicast (those name "this machine" or "this
    link" wherever they are read)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True  # FQDN endpoints
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def forge_endpointslice(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    """The local endpoints of a Service that remote pods should reach as well.

    Endpoints of pods bound to the virtual node are left out: those pods run in the
    remote cluster, whose own EndpointSlice controller already lists them. What is left
    are the addresses of pods running locally, as the remote cluster reaches them: as
    the local cluster reports them, or translated into ``--local-pod-cidr-remapped``
    when a remapping is configured (an address outside ``--local-pod-cidr`` is kept as
    it is). Node names, zones, hints and pod references are the local cluster's and are
    dropped. A slice with nothing left is not reflected.
    """
    endpoints = []
    for endpoint in local.get("endpoints") or []:
        if ctx.virtual_node_name and endpoint.get("nodeName") == ctx.virtual_node_name:
            continue
        addresses = [
            ctx.endpoint_addresses.translate(str(a)) for a in endpoint.get("addresses") or [] if routable_address(str(a))
        ]
        if not addresses:
            continue
        kept: dict[str, Any] = {"addresses": addresses}
        for key in ("conditions", "hostname"):
            if key in endpoint:
                kept[key] = copy.deepcopy(endpoint[key])
        endpoints.append(kept)
    if not endpoints:
        return None
    metadata = forge_metadata(local, ctx)
    # The remote EndpointSlice controller deletes slices labelled as its own.
    metadata["labels"][n.ENDPOINTSLICE_MANAGED_BY_LABEL] = n.ENDPOINTSLICE_MANAGER
    desired = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": local.get("addressType") or "IPv4",
        "endpoints": endpoints,
    }
    copy_fields(local, desired, ("ports",))
    return desired


def unremapped_endpoint_addresses(local: Mapping[str, Any], ctx: ForgeContext) -> list[str]:
    """The addresses :func:`forge_endpointslice` reflects as they are although a remapping
    is configured (outside ``--local-pod-cidr``: a host-network pod's node address, a pod
    offloaded to a third cluster); the remote cluster may not reach them."""
    addresses = [
        str(a)
        for endpoint in local.get("endpoints") or []
        if not (ctx.virtual_node_name and endpoint.get("nodeName") == ctx.virtual_node_name)
        for a in endpoint.get("addresses") or []
        if routable_address(str(a))
    ]
    return ctx.endpoint_addresses.outside(addresses)


def service_name_of_slice(slice_: Mapping[str, Any]) -> str | None:
    return (_meta(slice_).get("labels") or {}).get(n.SERVICE_NAME_LABEL)


# --- the reflector ------------------------------------------------------------
class EndpointSliceReflector(Reflector):
    resource = ENDPOINTSLICES
    kind = "EndpointSlice"
    api_kind = kinds.ENDPOINT_SLICES

    def __init__(self, context: LoopContext) -> None:
        super().__init__(context)
        self.local.add_indexer(BY_SERVICE, slice_service_key)
        self.services = self.scope.local_informer(SERVICES, kinds.SERVICES)
        self.controller.watch(self.services, self._slices_of_service)
        # Per slice, the addresses last logged as not remapped: said once, not per resync.
        self._unremapped: dict[str, tuple[str, ...]] = {}
        self._unremapped_lock = threading.Lock()

    def extra_informers(self) -> list[Cache]:
        return [self.services]

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        outside = tuple(unremapped_endpoint_addresses(local, ctx))
        key = object_key(dict(local))
        with self._unremapped_lock:
            changed = self._unremapped.get(key, ()) != outside
            if outside:
                self._unremapped[key] = outside
            else:
                self._unremapped.pop(key, None)
        if changed and outside:
            self.log.info(
                "EndpointSlice %s: %s outside --local-pod-cidr, reflected as is (not remapped)", key, ", ".join(outside)
            )
        return forge_endpointslice(local, ctx)

    def fit(self, desired: dict[str, Any], policy: ProviderPolicy) -> policy_fit.Fit:
        return policy_fit.fit_endpointslice(desired, policy)

    def selection(self, local: Mapping[str, Any]) -> Decision:
        own = decide(local, Policy.DENY_LIST, kind=self.kind)
        if not own.reflect:
            return own
        service_name = service_name_of_slice(local)
        namespace = (local.get("metadata") or {}).get("namespace")
        service = self.services.get(f"{namespace}/{service_name}") if service_name else None
        if service is None:
            return decide(local, self.policy, kind=self.kind)
        decision = decide(service, self.policy, kind="Service")
        return Decision(decision.reflect, f"its Service {service_name}: {decision.why}")

    def _slices_of_service(self, service: dict[str, Any]) -> list[str]:
        return sorted(self.local.index_keys(BY_SERVICE, object_key(service)))
