"""kube-offload's own gateways between the loopback clusters' real nodes
(docs/real-nodes.md, "The gateways between the clusters"; the product: gateway/,
docs/networking.md).

The harness no longer joins pod networks itself. It only says what a user says to
``kube-offload peer --gateway`` and stands in for what a cloud gives:

- the four CIDRs: each real node's pod CIDR as its CNI assigns it (the same CIDR in both
  clusters with ``Topology.overlapping_pod_cidrs``), and :func:`remapped_pod_cidr` of its
  slot as the other cluster reaches it;
- the endpoints: the machine never forwards, so a node cannot reach another node's
  address; each gateway's endpoint is the machine end of its node's link, where a UDP
  relay (udp_relay.py, the stand-in for a UDP load balancer) passes datagrams to the
  gateway's port on the node. Every address is on the harness's own links.

With the charts as pods, peer runs the gateways as the charts' Deployments and does the
exchange (:func:`peer_flags`). With the components as processes (PEERING_HARNESS without
chart pods) the harness runs ``kube-offload gateway`` as a process in each node's
namespace, under the ServiceAccount the chart gives it, and calls the same functions peer
calls to write the objects and exchange the keys (:func:`start_processes`).
"""

from __future__ import annotations

import ipaddress
import sys
from typing import TYPE_CHECKING

from kube_offload import fabric as f
from kube_offload import peering as p

if TYPE_CHECKING:  # cluster.py imports this module lazily
    from kube_offload_harness.cluster import ClusterSpec, Environment, Topology

REMAPPED_NETWORK = ipaddress.IPv4Network("172.30.0.0/16")  # one /24 per node slot
NAMESPACE = p.DEFAULT_NAMESPACE
FULLNAME = p.chart_fullname(p.DEFAULT_RELEASE)


def remapped_pod_cidr(slot: int) -> str:
    """Where the pods of the real node in ``slot`` appear to every other cluster."""
    if not 0 <= slot < 256:
        raise ValueError(f"slot {slot} outside 0..255")
    return f"{REMAPPED_NETWORK.network_address + 256 * slot}/24"


def cidrs(env: "Environment", topology: "Topology", spec: "ClusterSpec") -> f.FabricCIDRs:
    local, remote = env.real_node(topology.local).plan, env.real_node(spec).plan
    return f.FabricCIDRs.parse(local=local.pod_cidr, local_remapped=remapped_pod_cidr(local.slot),
                               remote=remote.pod_cidr, remote_remapped=remapped_pod_cidr(remote.slot))


def listen_ports(topology: "Topology", spec: "ClusterSpec") -> tuple[int, int]:
    """(local gateway's, remote gateway's) UDP ports: the charts' defaults, the local one by
    the remote's place in the local release's remoteClusters, the remote one by the
    consumer's (the only one) in the remote release's consumers."""
    index = [s.cluster_id for s in topology.remotes].index(spec.cluster_id)
    return f.LOCAL_LISTEN_PORT + index, f.REMOTE_LISTEN_PORT


def endpoints(env: "Environment", topology: "Topology", spec: "ClusterSpec") -> tuple[str, str]:
    """(the remote gateway as the local node reaches it, the local gateway as the remote
    node reaches it): the relays on the machine ends of the node links."""
    local_port, remote_port = listen_ports(topology, spec)
    local, remote = env.real_node(topology.local).plan, env.real_node(spec).plan
    return f"{remote.host_ip}:{remote_port}", f"{local.host_ip}:{local_port}"


def start_relays(env: "Environment", topology: "Topology", spec: "ClusterSpec") -> None:
    local_port, remote_port = listen_ports(topology, spec)
    for side, port in ((topology.local, local_port), (spec, remote_port)):
        plan = env.real_node(side).plan
        name = f"gateway-relay-{side.name}-{port}"
        argv = [sys.executable, "-m", "kube_offload_harness.udp_relay", "--listen", f"{plan.host_ip}:{port}",
                "--to", f"{plan.node_ip}:{port}"]
        env.processes.start(name, argv, log=env.log_path(name), env=env._process_env())
        env.say(f"- {side.name}: UDP relay {plan.host_ip}:{port} -> gateway {plan.node_ip}:{port} (a load balancer's stand-in)")


def peer_flags(env: "Environment", topology: "Topology", spec: "ClusterSpec") -> list[tuple[str, str]]:
    """``kube-offload peer --gateway`` for ``spec``, as a user would give it."""
    c = cidrs(env, topology, spec)
    remote_endpoint, local_endpoint = endpoints(env, topology, spec)
    return [("--gateway", ""), ("--local-pod-cidr", str(c.local_pod_cidr)),
            ("--local-pod-cidr-remapped", str(c.local_pod_cidr_remapped)),
            ("--remote-pod-cidr", str(c.remote_pod_cidr)), ("--remote-pod-cidr-remapped", str(c.remote_pod_cidr_remapped)),
            ("--gateway-endpoint", remote_endpoint), ("--local-gateway-endpoint", local_endpoint)]


def remapping_args(c: f.FabricCIDRs) -> list[str]:
    """The virtual kubelet process's flags for the gateways' translation (the chart's
    remoteClusters entry, as peer sets it: FabricCIDRs.vkubelet_values)."""
    return ["--remote-pod-cidr", str(c.remote_pod_cidr), "--remote-pod-cidr-remapped", str(c.remote_pod_cidr_remapped),
            "--local-pod-cidr", str(c.local_pod_cidr), "--local-pod-cidr-remapped", str(c.local_pod_cidr_remapped)]


# --- components as processes ---------------------------------------------------------------------
def start_processes(env: "Environment", topology: "Topology", spec: "ClusterSpec") -> None:
    """Both gateways of the pair as processes in their nodes' namespaces, under the charts'
    gateway ServiceAccounts, their objects written and their keys exchanged as peer does."""
    from kube_offload.peer import gateway as gw
    from kube_offload.peer.api import Cluster as PeerCluster
    from kube_offload_harness import binaries, identities, netns

    c = cidrs(env, topology, spec)
    local_port, remote_port = listen_ports(topology, spec)
    local_name, remote_name = f.gateway_name(FULLNAME, spec.cluster_id), f.gateway_name(FULLNAME, topology.local.cluster_id)
    local_api = PeerCluster(env.cluster(topology.local).kubeconfig, None, "local")
    remote_api = PeerCluster(env.cluster(spec).kubeconfig, None, "remote")
    gw.write_objects(local_api, NAMESPACE, local_name, spec.cluster_id, c.local_gateway())
    gw.write_objects(remote_api, NAMESPACE, remote_name, topology.local.cluster_id, c.remote_gateway())
    start_relays(env, topology, spec)
    for side, name, peer_id, port in ((topology.local, local_name, spec.cluster_id, local_port),
                                      (spec, remote_name, topology.local.cluster_id, remote_port)):
        cluster, plan = env.cluster(side), env.real_node(side).plan
        kubeconfig = env.component_kubeconfig(cluster, identities.ServiceAccountRef(NAMESPACE, name))
        # wireguard-go's control socket is named after the link in the machine's one
        # /var/run/wireguard: the link's name must be unique on the machine, not only per node
        interface = f.interface_name(f"{plan.netns}-{peer_id}")
        argv = env._component_argv("gateway", "--kubeconfig", str(kubeconfig), "--peer-id", peer_id, "--namespace", NAMESPACE,
                                   "--config-map", name, "--key-secret", f"{name}-key", "--interface", interface,
                                   "--listen-port", str(port), "--wireguard-go", str(binaries.wireguard_go_path()))
        process = f"gateway-{side.name}"
        env.processes.start(process, argv, log=env.log_path(process), env=env._process_env(),
                            netns=netns.netns_path(plan.netns))
    remote_endpoint, local_endpoint = endpoints(env, topology, spec)
    outcome = gw.exchange_keys(local_api, remote_api, NAMESPACE, local_name, remote_name, remote_endpoint=remote_endpoint,
                               local_endpoint=local_endpoint, timeout=120, previous={})
    env.say(f"- gateways {local_name} / {remote_name}: {outcome}; pods reach each other as "
            f"{c.local_pod_cidr_remapped} / {c.remote_pod_cidr_remapped} (WireGuard, NETMAP; docs/networking.md)")
