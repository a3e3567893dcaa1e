"""``peer --gateway`` and ``unpeer``: the fabric's objects in both clusters
(docs/networking.md, "Keys and endpoints").

peer writes each gateway's ConfigMap (the CIDRs) and an empty key Secret before the
releases start the gateways; each gateway makes its own key into its Secret and publishes
the public key in its ConfigMap; peer then hands each public key and endpoint to the other
side. Private keys are never read here: only the ConfigMaps' public keys cross.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import fabric as fb
from kube_offload import peering as p
from kube_offload.peer.api import Cluster
from kube_offload.peer.session import Context, wait
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError


def observe_side(cluster: Cluster, namespace: str, name: str) -> p.GatewaySide:
    config_map = cluster.get(kinds.CONFIG_MAPS, name, namespace=namespace)
    secret = cluster.get(kinds.SECRETS, f"{name}-key", namespace=namespace)
    return p.GatewaySide(None if config_map is None else dict(config_map.get("data") or {}), secret is not None)


def objects_of(cluster: Cluster, namespace: str, name: str) -> list[str]:
    """What unpeer deletes of one gateway (only what peer made: its label)."""
    found = []
    for resource, object_name in ((kinds.CONFIG_MAPS, name), (kinds.SECRETS, f"{name}-key")):
        obj = cluster.get(resource, object_name, namespace=namespace)
        if obj is not None and ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/managed-by") == p.PEER_MANAGER:
            found.append(f"{resource.kind}/{object_name}")
    return found


def _ensure_namespace(cluster: Cluster, namespace: str) -> None:
    if cluster.get(kinds.NAMESPACES, namespace) is None:
        cluster.kube.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def write_objects(cluster: Cluster, namespace: str, name: str, peer_id: str, data: Mapping[str, str]) -> str:
    """The ConfigMap's CIDR keys (the rest kept: the public keys) and the key Secret if missing."""
    try:
        _ensure_namespace(cluster, namespace)
        existing = cluster.get(kinds.CONFIG_MAPS, name, namespace=namespace)
        if existing is None:
            cluster.kube.create(kinds.CONFIG_MAPS, p.gateway_config_map(name, peer_id, namespace, data), namespace=namespace)
        else:
            cluster.kube.patch(kinds.CONFIG_MAPS, name, {"data": dict(data)}, namespace=namespace)
        made = ""
        if cluster.get(kinds.SECRETS, f"{name}-key", namespace=namespace) is None:
            cluster.kube.create(kinds.SECRETS, p.gateway_key_secret(f"{name}-key", peer_id, namespace), namespace=namespace)
            made = " and key Secret"
    except ApiError as exc:
        raise cluster.error(exc) from None
    return f"{cluster.side} ConfigMap {name}{made}"


def drop_key(cluster: Cluster, namespace: str, name: str) -> None:
    """Rotation: empty the Secret (the gateway makes a new pair on its next pass) and forget
    the published public key."""
    try:
        secret = cluster.get(kinds.SECRETS, f"{name}-key", namespace=namespace)
        if secret is not None:
            secret.pop("data", None)
            cluster.kube.replace(kinds.SECRETS, secret, namespace=namespace)
        cluster.kube.patch(kinds.CONFIG_MAPS, name, {"data": {fb.PUBLIC_KEY: None}}, namespace=namespace)
    except ApiError as exc:
        raise cluster.error(exc) from None


def public_key(cluster: Cluster, namespace: str, name: str, previous: str = "") -> str:
    """The gateway's published public key once there (and not ``previous``, after a rotation)."""
    config_map = cluster.get(kinds.CONFIG_MAPS, name, namespace=namespace) or {}
    key = str((config_map.get("data") or {}).get(fb.PUBLIC_KEY) or "")
    return key if key and key != previous else ""


def service_endpoint(cluster: Cluster, namespace: str, name: str) -> str:
    """Where the peer reaches this gateway, from its Service: a load balancer's address and
    the port, else the NodePort on the node the gateway's pod runs on (its InternalIP)."""
    service = cluster.get(kinds.SERVICES, name, namespace=namespace)
    if service is None:
        return ""
    port = ((service.get("spec") or {}).get("ports") or [{}])[0]
    for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        host = ingress.get("ip") or ingress.get("hostname")
        if host:
            return f"{host}:{port.get('port')}"
    if not port.get("nodePort"):
        return ""
    pods = cluster.list_items(kinds.PODS, namespace=namespace, label_selector=f"{fb.LABEL_GATEWAY_PEER}={_peer_of(service)}")
    running = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running" and (pod.get("spec") or {}).get("nodeName")]
    if not running:
        return ""
    node = cluster.get(kinds.NODES, running[0]["spec"]["nodeName"]) or {}
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") in ("ExternalIP", "InternalIP"):
            return f"{address['address']}:{port['nodePort']}"
    return ""


def _peer_of(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(fb.LABEL_GATEWAY_PEER, ""))


def exchange(ctx: Context, options: p.PeerOptions, previous: Mapping[str, str]) -> str:
    """Wait for both public keys, then write each side's peer key and endpoint."""
    gateway = options.gateway
    assert gateway is not None
    return exchange_keys(ctx.local, ctx.remote, ctx.namespace, p.local_gateway_name(options), p.remote_gateway_name(options),
                         remote_endpoint=gateway.remote_endpoint, local_endpoint=gateway.local_endpoint,
                         timeout=ctx.timeout, previous=previous)


def exchange_keys(local: Cluster, remote: Cluster, ns: str, local_name: str, remote_name: str, *, remote_endpoint: str,
                  local_endpoint: str, timeout: float, previous: Mapping[str, str]) -> str:
    hint = "see `kubectl -n {ns} logs deploy/{name}` on the {side} cluster (is its pod scheduled? NET_ADMIN admitted?)"
    local_key = wait(lambda: public_key(local, ns, local_name, previous.get("local", "")), timeout=timeout,
                     what=f"for local gateway {local_name} to publish its key", hint=hint.format(ns=ns, name=local_name, side="local"))
    remote_key = wait(lambda: public_key(remote, ns, remote_name, previous.get("remote", "")), timeout=timeout,
                      what=f"for remote gateway {remote_name} to publish its key", hint=hint.format(ns=ns, name=remote_name, side="remote"))
    remote_endpoint = remote_endpoint or wait(
        lambda: service_endpoint(remote, ns, remote_name), timeout=timeout,
        what=f"for the address of Service {ns}/{remote_name} on the remote cluster",
        hint="pass --gateway-endpoint HOST:PORT (where the local cluster's nodes reach the remote gateway)")
    local_endpoint = local_endpoint or service_endpoint(local, ns, local_name)
    for cluster, name, data in ((local, local_name, {fb.PEER_PUBLIC_KEY: remote_key, fb.PEER_ENDPOINT: remote_endpoint}),
                                (remote, remote_name, {fb.PEER_PUBLIC_KEY: local_key, fb.PEER_ENDPOINT: local_endpoint})):
        try:
            cluster.kube.patch(kinds.CONFIG_MAPS, name, {"data": data}, namespace=ns)
        except ApiError as exc:
            raise cluster.error(exc) from None
    if not local_endpoint:
        return f"exchanged; the local gateway sends to {remote_endpoint}, the remote one answers where it hears from"
    return f"exchanged; the local gateway sends to {remote_endpoint}, the remote one to {local_endpoint}"


def delete_objects(cluster: Cluster, namespace: str, objects: list[str]) -> None:
    for item in objects:
        kind, name = item.split("/", 1)
        resource = kinds.CONFIG_MAPS if kind == kinds.CONFIG_MAPS.kind else kinds.SECRETS
        cluster.delete(resource, name, namespace=namespace)


def check_endpoint(text: str, flag: str) -> str:
    if text:
        try:
            fb.parse_endpoint(text, flag)
        except fb.FabricError as exc:
            raise p.PeeringError(str(exc)) from None
    return text

