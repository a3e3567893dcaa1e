"""A virtual node the local apiserver's node proxy reaches, for the length of a test.

The kwok tier's virtual kubelets publish 127.0.0.1 as their node address, and
kube-apiserver refuses to proxy ``nodes/<node>/proxy/...`` to a loopback address
(``address not allowed``: pkg/registry/core/node/strategy.go ResourceLocation checks the
node's address with IsProxyableHostname). ``kubectl logs`` and ``exec`` are unaffected (they
take another path), but a client of the node proxy, such as virtual-kubelet's own e2e
suite, gets a 400.

:func:`proxyable_virtual_node` gives the node an address the harness owns and the
apiserver accepts: it claims a real-node slot (the same ``kon-<slot>`` namespaces and
``172.31.250.0/24`` links, so no environment takes the slot meanwhile), makes that slot's
link (a veth pair between the machine and the slot's namespace, netns.py), and restarts the
vkubelet with the machine end of the link as ``--node-address`` and
``--kubelet-bind-address``. The apiserver dials it in the machine's namespace: nothing
leaves the machine and no address but the harness's own is involved. On exit the
vkubelet gets its session flags back and the link and namespace are deleted. Needs root
(``ip netns``), like the real-node tier.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from kube_offload_harness import netns, real_node_config
from kube_offload_harness.cluster import Cluster, ClusterError, ClusterSpec, Environment
from kube_offload_harness.naming import virtual_node_name


def unmet() -> str:
    """What this machine lacks to make the link ("" when nothing)."""
    if os.geteuid() != 0:
        return "a node address the apiserver's node proxy accepts is made on a network link of the harness: run as root"
    return ""


def _claim_slot(state_dir: Path) -> real_node_config.NodePlan:
    """A free slot, taken by making its namespace (two environments never get the same)."""
    used = netns.list_netns()
    while True:
        slot = real_node_config.free_slot(used)
        used.append(f"{real_node_config.NETNS_PREFIX}{slot}")
        # Only the slot's names and addresses are used: no node is made on it.
        plan = real_node_config.NodePlan(cluster="", node_name="", slot=slot, state_dir=state_dir)
        if netns.reserve_netns(plan.netns):
            return plan


def _node_address(local: Cluster, node: str) -> str:
    result = local.kubectl("get", "node", node, "-o", "jsonpath={.status.addresses[?(@.type=='InternalIP')].address}", check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def _restart_vkubelet(env: Environment, local: Cluster, spec: ClusterSpec, extra_args: list[str], address: str,
                      timeout: float = 90) -> None:
    """Restart remote ``spec``'s vkubelet with ``extra_args`` until its node is Ready at ``address``."""
    topology = env.topology()
    assert topology is not None
    env.processes.stop(f"vkubelet-{spec.cluster_id}")
    env.start_vkubelet(topology, spec, extra_args)
    env.wait_virtual_node_ready(local, spec, timeout=timeout)
    node = virtual_node_name(spec.cluster_id)
    deadline = time.monotonic() + timeout
    while _node_address(local, node) != address:
        if time.monotonic() > deadline:
            raise ClusterError(f"virtual node {node} does not show address {address} after {timeout}s")
        time.sleep(0.5)


@contextlib.contextmanager
def proxyable_virtual_node(env: Environment, local: Cluster, spec: ClusterSpec, *,
                           say: Callable[[str], None]) -> Iterator[str]:
    """Within the block, remote ``spec``'s virtual node is at a harness-made, non-loopback
    address (yielded) that the local apiserver's node proxy accepts. Needs what
    :func:`unmet` checks."""
    node = virtual_node_name(spec.cluster_id)
    session_address = _node_address(local, node)
    plan = _claim_slot(env.state_dir / "node-proxy-link")
    address = plan.host_ip
    started = time.monotonic()
    try:
        say(f"- {node}: moving to node address {address} on link {plan.veth_host} (slot {plan.slot}), "
            "where the apiserver's node proxy may reach it")
        netns.create_node_network(plan.netns, plan.veth_host, plan.veth_node,
                                  f"{plan.host_ip}/{plan.link.prefixlen}", f"{plan.node_ip}/{plan.link.prefixlen}")
        _restart_vkubelet(env, local, spec, ["--node-address", address, "--kubelet-bind-address", address], address)
        say(f"- {node}: Ready at {address} after {time.monotonic() - started:.0f}s")
        yield address
    finally:
        started = time.monotonic()
        try:
            _restart_vkubelet(env, local, spec, [], session_address)
        finally:
            netns.delete_node_network(plan.netns, plan.veth_host)
            say(f"- {node}: back at {session_address} with its session flags after {time.monotonic() - started:.0f}s; "
                f"link {plan.veth_host} removed")
