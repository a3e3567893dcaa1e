"""Which addresses a consumer's EndpointSlice may name (pure).

A selector-less Service plus an EndpointSlice is a route from every provider pod (and
from the provider's ingress controllers) to whatever address the slice names: a node's
kubelet (:10250), the API server, a cloud metadata service, another tenant's pod. So a
consumer's slice may name only

- a pod of that very twin namespace (one the enforcer made for the consumer), or
- an address inside a range the provider granted (Consumer
  ``spec.policy.endpoints.cidrs``: typically the consumer's remapped local pod range),

and never, whatever is granted, a provider node, the Service range, the API server, nor
a loopback, link-local (cloud metadata), unspecified or multicast address. The stateless
part of this is also the chart's EndpointSlice ValidatingAdmissionPolicy (it holds while
the enforcer is down); what needs the cluster's state is only here. The facts come from
the webhook's caches (:mod:`enforcer.admission.endpointslice_webhook`); this module only decides.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from enforcer.consumers.quota import twin_owner
from kube_offload.consumers import service_account_username
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.provider_policy import METADATA_ADDRESSES, ProviderPolicyError, parse_policy

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CIDRS_KEY = "spec.policy.endpoints.cidrs"
_METADATA_NETWORKS: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in METADATA_ADDRESSES)


@dataclass(frozen=True)
class ProviderAddresses:
    """The provider's own addresses, which no consumer route may lead to."""

    # address -> node name (InternalIP, ExternalIP... of every node)
    nodes: Mapping[str, str] = field(default_factory=dict)
    # the cluster's Service ranges (ServiceCIDR objects)
    service_cidrs: tuple[Network, ...] = ()
    # the API server's own addresses (the endpoints of Service default/kubernetes)
    api_servers: frozenset[str] = frozenset()


PodAt = Callable[[str, str], "str | None"]
"""(namespace, address) -> the name of an enforcer-made pod there with that IP, or None."""


def never_reason(address: Address, provider: ProviderAddresses) -> str | None:
    """Why ``address`` can never be an endpoint of a consumer's Service, or None."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if any(address in network for network in _METADATA_NETWORKS):
        return "a cloud metadata address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    text = str(address)
    if text in provider.api_servers:
        return "an address of the provider's API server"
    node = provider.nodes.get(text)
    if node is not None:
        return f"an address of provider node {node}"
    for network in provider.service_cidrs:
        if address.version == network.version and address in network:
            return f"inside the provider's Service range {network}"
    return None


def check_address(
    text: str,
    *,
    namespace: str,
    granted: tuple[Network, ...],
    provider: ProviderAddresses,
    pod_at: PodAt,
) -> str | None:
    """Why address ``text`` is refused in a slice of twin ``namespace``, or None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return "not an IP address"
    reason = never_reason(address, provider)
    if reason is not None:
        return f"{reason}: never admitted, whatever Consumer {CIDRS_KEY} grants"
    if any(address.version == network.version and address in network for network in granted):
        return None
    if pod_at(namespace, str(address)) is not None:
        return None
    return (
        f"neither a pod of namespace {namespace} nor inside a range granted to the consumer; "
        f"the provider grants ranges with Consumer {CIDRS_KEY}"
    )


def slice_addresses(endpoint_slice: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for endpoint in endpoint_slice.get("endpoints") or []:
        if isinstance(endpoint, Mapping):
            out.extend(str(a) for a in endpoint.get("addresses") or [])
    return out


def decide(
    request: AdmissionRequest,
    *,
    namespace: Mapping[str, Any] | None,
    consumer: Mapping[str, Any] | None,
    provider: ProviderAddresses,
    pod_at: PodAt,
) -> Decision:
    """The verdict on one EndpointSlice CREATE/UPDATE.

    Only the consumer's own writes in its twin namespaces are judged: the provider's
    controllers and admins write slices there too (and the webhook's registration
    already leaves the EndpointSlice controllers out).
    """
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return Decision.allow()
    owner = twin_owner(namespace)
    if owner is None:
        return Decision.allow()
    if consumer is None:
        return Decision.deny(
            403, "Forbidden",
            f"namespace {request.namespace} is a twin of consumer {owner!r}, which has no Consumer object here: "
            "its EndpointSlices are refused until the provider admits it again",
        )
    if request.user_info.username != service_account_username(consumer):
        return Decision.allow()
    endpoint_slice = request.object or {}
    if endpoint_slice.get("addressType") == "FQDN":
        return Decision.allow()  # names, not addresses: the ValidatingAdmissionPolicy's (services.externalName)
    try:
        policy = parse_policy((consumer.get("spec") or {}).get("policy"))
    except ProviderPolicyError as exc:
        return Decision.deny(403, "Forbidden", f"Consumer {owner} has an invalid policy, so nothing is granted: {exc}")
    granted = tuple(ipaddress.ip_network(cidr, strict=False) for cidr in policy.endpoints.cidrs)
    refused = _refusals(slice_addresses(endpoint_slice), request.namespace, granted, provider, pod_at)
    if not refused:
        return Decision.allow()
    listed = "; ".join(f"{address} is {why}" for address, why in refused)
    return Decision.deny(403, "Forbidden", f'endpoints[].addresses of consumer "{owner}": {listed}')


def _refusals(
    addresses: Iterable[str], namespace: str, granted: tuple[Network, ...], provider: ProviderAddresses, pod_at: PodAt
) -> list[tuple[str, str]]:
    refused: list[tuple[str, str]] = []
    seen: set[str] = set()
    for text in addresses:
        if text in seen:
            continue
        seen.add(text)
        why = check_address(text, namespace=namespace, granted=granted, provider=provider, pod_at=pod_at)
        if why is not None:
            refused.append((text, why))
    return refused


# --- the facts, from the objects the webhook caches ---------------------------------------
def node_addresses(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """address -> node name, over every address type a node reports."""
    out: dict[str, str] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        for entry in (node.get("status") or {}).get("addresses") or []:
            address = (entry or {}).get("address") if isinstance(entry, Mapping) else None
            if address:
                out[_canonical(str(address))] = name
    return out


def service_cidrs(objects: Iterable[Mapping[str, Any]]) -> tuple[Network, ...]:
    """The ranges of the cluster's ServiceCIDR objects (networking.k8s.io/v1)."""
    out: list[Network] = []
    for obj in objects:
        for cidr in (obj.get("spec") or {}).get("cidrs") or []:
            try:
                out.append(ipaddress.ip_network(str(cidr), strict=False))
            except ValueError:
                continue
    return tuple(out)


def api_server_addresses(endpoint_slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The addresses of Service default/kubernetes: the API servers themselves."""
    return frozenset(_canonical(a) for s in endpoint_slices for a in slice_addresses(s))


def pod_ip_keys(pod: Mapping[str, Any]) -> list[str]:
    """Index function for the managed-pods informer: ``<namespace>/<ip>`` of each pod IP."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    status = pod.get("status") or {}
    ips = {str(entry.get("ip")) for entry in status.get("podIPs") or [] if isinstance(entry, Mapping) and entry.get("ip")}
    if status.get("podIP"):
        ips.add(str(status["podIP"]))
    return sorted(f"{namespace}/{_canonical(ip)}" for ip in ips)


def _canonical(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text
