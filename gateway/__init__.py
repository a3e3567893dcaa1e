"""The gateway of kube-offload's own network fabric (docs/networking.md): one process per
peering and side, on a node of its cluster, that joins the two clusters' pod networks over
WireGuard under remapped addresses, and the route agent that sends every other node's
traffic for the peer's pods to the gateway's node.

- :mod:`gateway.keys`: WireGuard keys (X25519), made in the gateway's own cluster;
- :mod:`gateway.dataplane`: what the kernel must hold (link, peer, route, NAT), pure;
- :mod:`gateway.engine`: makes the kernel hold it (ip, wg, iptables, wireguard-go);
- :mod:`gateway.controller`: the key Secret, the ConfigMap, the reconcile loop;
- :mod:`gateway.routes`: the route agent (every node to the gateway's node);
- :mod:`gateway.cli`: ``kube-offload gateway`` and ``kube-offload gateway-routes``.
"""
