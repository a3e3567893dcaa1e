"""The shape of an environment whose offloaded pods run on the remote's real node: which
node is tainted, which pod IP remapping the virtual kubelet is told, and which endpoint
range the provider policy admits (all pure, from the topology)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_offload.provider_policy import parse_policy
from kube_offload_harness import cluster, fabric, identities
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import (
    LOCAL_POD_CIDR_REMAPPED, ClusterError, Environment, default_topology, local_pod_cidr_remapped,
    pod_ip_remapping_args, pods_on_real_node, validate_topology,
)


def real_pods_topology(local_slot: int = 4, remote_slot: int = 7):
    topology = cluster.real_pods_topology(prefix="t")
    topology.local.real_node_slot, topology.remotes[0].real_node_slot = local_slot, remote_slot
    return topology


def test_a_remote_with_an_untainted_real_node_and_no_kwok_node_is_valid():
    topology = real_pods_topology()
    validate_topology(topology)
    assert pods_on_real_node(topology, topology.remotes[0])
    assert not pods_on_real_node(topology, topology.local)


@pytest.mark.parametrize("change, field", [
    (lambda t: setattr(t, "real_nodes", False), "real_nodes=True"),
    (lambda t: setattr(t.remotes[0], "nodes", 2), "nodes=0"),
    (lambda t: setattr(t.local, "real_node_tainted", False), "remote cluster only"),
])
def test_other_shapes_with_an_untainted_real_node_are_refused_naming_the_field(change, field):
    topology = real_pods_topology()
    change(topology)
    with pytest.raises(ClusterError, match=field):
        validate_topology(topology)


def test_the_default_topology_is_unchanged_kwok_remapping_and_tainted_nodes():
    topology = default_topology(remotes=2)
    validate_topology(topology)
    for spec in topology.remotes:
        assert spec.real_node_tainted and not pods_on_real_node(topology, spec)
        assert local_pod_cidr_remapped(topology, spec) == LOCAL_POD_CIDR_REMAPPED
    # kwok tiers: the same policy as before
    assert identities.e2e_policy(local_pods_remapped=[LOCAL_POD_CIDR_REMAPPED]) == identities.E2E_POLICY


def test_the_vkubelet_is_told_the_fabric_translation_and_the_policy_admits_the_local_remapped_range(tmp_path: Path):
    topology = real_pods_topology(local_slot=4, remote_slot=7)
    remote = topology.remotes[0]
    env = Environment(tmp_path, say=lambda line: None, bins=object())  # paths only: nothing is built or run
    args = env.remapping_args(topology, remote)
    assert args == ["--remote-pod-cidr", "172.31.7.0/24", "--remote-pod-cidr-remapped", "172.30.7.0/24",
                    "--local-pod-cidr", "172.31.4.0/24", "--local-pod-cidr-remapped", "172.30.4.0/24"]
    assert args != pod_ip_remapping_args(topology, remote)
    assert local_pod_cidr_remapped(topology, remote) == fabric.remapped_pod_cidr(4) == args[-1]
    policy = parse_policy(identities.e2e_policy(local_pods_remapped=[local_pod_cidr_remapped(topology, remote)]))
    assert policy.endpoints.cidrs == ("172.30.4.0/24",)
    # everything else granted as in the kwok tiers
    assert policy.pods.tolerations == (identities.TOLERATION_GRANTED_IN_TESTS,)


def test_only_the_untainted_remote_node_registers_without_the_taint(tmp_path: Path):
    topology = real_pods_topology()
    env = Environment(tmp_path, say=lambda line: None, bins=object())
    local_plan, remote_plan = env.real_node(topology.local).plan, env.real_node(topology.remotes[0]).plan
    ca = Path("/ca.crt")
    assert rc.kubelet_configuration(local_plan, client_ca_file=ca)["registerWithTaints"] == [
        {"key": rc.REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}]
    assert rc.kubelet_configuration(remote_plan, client_ca_file=ca)["registerWithTaints"] == []
    # the label stays on both: a node is found as real by it
    assert f"--node-labels={rc.REAL_NODE_KEY}=true" in rc.kubelet_args(remote_plan, kubelet=Path("/k"))
