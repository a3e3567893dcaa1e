"""The route agent: every node sends the peers' remapped pod CIDRs to the gateway's node
(docs/networking.md, "Routes from every node").

One per node (a DaemonSet, hostNetwork). For each gateway of its release (the ConfigMaps
labelled ``kube-offload.io/gateway-peer``: the peer's remapped CIDR) whose pod runs on
*another* node, it keeps ``ip route replace <peer remapped CIDR> via <that node's IP>`` in
its node's main table, marked with its own routing protocol number (:data:`PROTO`) so that
it finds its routes again and removes those no gateway needs any more; on the gateway's
own node the gateway routes into its link itself. This needs the nodes to reach each other
directly by their addresses (one L2 segment, or routed without source/destination checks);
where they do not, the network plugin must carry the range instead (docs/networking.md).
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kube_offload import fabric as f
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError, Kube

log = logging.getLogger("kube_offload.gateway.routes")

# Routing protocol number of the agent's routes (/etc/iproute2/rt_protos: 0-4 are the
# kernel's, 8-99 taken by routing daemons; 0x4b is ours).
PROTO = "75"


@dataclass(frozen=True)
class GatewayPlace:
    peer_id: str
    peer_cidr_remapped: str
    node_ip: str  # where the gateway's pod runs (its hostIP); "" when it runs nowhere now


def desired_routes(places: Iterable[GatewayPlace], own_ips: set[str]) -> dict[str, str]:
    """CIDR -> next hop for this node: every gateway that runs on another node."""
    routes: dict[str, str] = {}
    for place in sorted(places, key=lambda p: p.peer_id):
        if place.node_ip and place.node_ip not in own_ips:
            routes[place.peer_cidr_remapped] = place.node_ip
    return routes


def parse_routes(output: str) -> dict[str, str]:
    """``ip -4 route show proto 75`` -> CIDR -> next hop."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "via":
            cidr = parts[0] if "/" in parts[0] else f"{parts[0]}/32"
            found[str(ipaddress.ip_network(cidr, strict=False))] = parts[2]
    return found


def route_commands(current: Mapping[str, str], desired: Mapping[str, str]) -> list[list[str]]:
    """What turns ``current`` (the agent's routes now) into ``desired``."""
    commands = [["ip", "route", "replace", cidr, "via", via, "proto", PROTO]
                for cidr, via in sorted(desired.items()) if current.get(cidr) != via]
    commands += [["ip", "route", "delete", cidr, "proto", PROTO] for cidr in sorted(current) if cidr not in desired]
    return commands


def places_from(config_maps: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[GatewayPlace]:
    """Each gateway ConfigMap's peer range, and the node its Running pod is on."""
    running: dict[str, str] = {}
    for pod in pods:
        peer = ((pod.get("metadata") or {}).get("labels") or {}).get(f.LABEL_GATEWAY_PEER)
        status = pod.get("status") or {}
        if peer and status.get("phase") == "Running" and status.get("hostIP"):
            running[peer] = status["hostIP"]
    places = []
    for config_map in config_maps:
        peer = ((config_map.get("metadata") or {}).get("labels") or {}).get(f.LABEL_GATEWAY_PEER)
        cidr = (config_map.get("data") or {}).get(f.PEER_POD_CIDR_REMAPPED)
        if peer and cidr:
            places.append(GatewayPlace(peer, cidr, running.get(peer, "")))
    return places


class RouteAgent:
    def __init__(self, kube: Kube, namespace: str, node_ip: str, resync: float, ip: str = "ip") -> None:
        self.kube, self.namespace, self.node_ip, self.resync, self.ip = kube, namespace, node_ip, resync, ip
        self.problem: str | None = "not reconciled yet"

    def _run(self, argv: list[str]) -> str:
        result = subprocess.run([self.ip, *argv[1:]], capture_output=True, text=True, check=False, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
        return result.stdout

    def reconcile(self) -> None:
        selector = f.LABEL_GATEWAY_PEER
        config_maps = self.kube.list(kinds.CONFIG_MAPS, namespace=self.namespace, label_selector=selector).get("items") or []
        pods = self.kube.list(kinds.PODS, namespace=self.namespace, label_selector=selector).get("items") or []
        desired = desired_routes(places_from(config_maps, pods), {self.node_ip})
        current = parse_routes(self._run(["ip", "-4", "route", "show", "proto", PROTO]))
        for argv in route_commands(current, desired):
            self._run(argv)
            log.info("%s", " ".join(argv))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.reconcile()
                self.problem = None
            except (ApiError, RuntimeError) as exc:
                if str(exc) != self.problem:
                    log.warning("%s", exc)
                self.problem = str(exc)
            stop.wait(self.resync)
