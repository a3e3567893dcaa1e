"""The remote EndpointSlice for a local one (pure): the endpoints of pods running locally,
as the remote cluster reaches them.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any, Mapping

from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n
from vkubelet.reflection.forge import ForgeContext, copy_fields, forge_metadata


def routable_address(address: str) -> bool:
    """An endpoint address that can mean the same host from another cluster: not
    loopback, link-local, unspecified or multicast (those name "this machine" or "this
    link" wherever they are read)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True  # FQDN endpoints
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def forge_endpointslice(local: Mapping, ctx: ForgeContext) -> dict | None:
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


def unremapped_endpoint_addresses(local: Mapping, ctx: ForgeContext) -> list[str]:
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


def service_name_of_slice(slice_: Mapping) -> str | None:
    return (_meta(slice_).get("labels") or {}).get(n.SERVICE_NAME_LABEL)
