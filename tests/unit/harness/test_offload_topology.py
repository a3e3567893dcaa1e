"""The shape of an environment whose offloaded pods run on the remote's real node: which
node is tainted, which pod IP remapping the virtual kubelet is told, and which endpoint
range the provider policy admits (all pure, from the topology)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_offload.provider_policy import parse_policy
from kube_offload_harness import cluster, fabric_gateways, identities
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
    assert local_pod_cidr_remapped(topology, remote) == fabric_gateways.remapped_pod_cidr(4) == args[-1]
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


def _up_args(**overrides):
    import argparse

    values = dict(prefix="t", remotes=1, local_nodes=2, remote_nodes=None, node_cpu="4", node_memory="16Gi",
                  node_pods=110, virtual_kubelets=True, real_nodes=False, chart_pods="")
    values.update(overrides)
    return argparse.Namespace(**values)


def test_cluster_up_with_real_nodes_runs_each_remotes_pods_on_its_real_node():
    """`kube-offload cluster up --real-nodes true` makes the demo's shape: no kwok node in
    the remotes, their real nodes untainted, the charts as pods."""
    from kube_offload_harness.cluster_cli import up_topology

    topology = up_topology(_up_args(real_nodes=True, remotes=2))
    validate_topology(topology)
    assert topology.chart_pods
    for spec in topology.remotes:
        assert spec.nodes == 0 and pods_on_real_node(topology, spec)
    # kwok nodes asked for: the remote real node stays tainted (kwok and real addresses would mix)
    topology = up_topology(_up_args(real_nodes=True, remote_nodes=2))
    validate_topology(topology)
    assert all(spec.nodes == 2 and spec.real_node_tainted for spec in topology.remotes)
    # without real nodes: today's kwok shape
    topology = up_topology(_up_args())
    assert not topology.chart_pods and all(spec.nodes == 2 for spec in topology.remotes)


def test_the_demo_runs_the_shape_cluster_up_makes_with_real_nodes():
    from kube_offload_harness.cluster_cli import up_topology
    from kube_offload_harness.demo import demo_topology

    demo = demo_topology(real_nodes=True)
    up = up_topology(_up_args(real_nodes=True, local_nodes=1))
    assert demo.chart_pods and demo.real_nodes and demo.peering == cluster.PEERING_CLI
    assert [(s.role, s.nodes, s.real_node_tainted) for s in demo.clusters()] == \
        [(s.role, s.nodes, s.real_node_tainted) for s in up.clusters()]
    assert not demo_topology(real_nodes=False).real_nodes


def test_peer_gets_the_gateway_flags_of_the_same_translation(tmp_path: Path):
    """With the charts as pods, ``peer --gateway`` is given the four CIDRs the vkubelet
    process would get as flags (Environment.remapping_args), and the relays' addresses on
    the harness's own node links as the gateways' endpoints."""
    from kube_offload_harness import chart_pods

    topology = real_pods_topology(local_slot=4, remote_slot=7)
    topology.chart_pods = True
    remote = topology.remotes[0]
    env = Environment(tmp_path, say=lambda line: None, bins=object())
    flags = dict(fabric_gateways.peer_flags(env, topology, remote))
    assert flags == {"--gateway": "", "--local-pod-cidr": "172.31.4.0/24", "--local-pod-cidr-remapped": "172.30.4.0/24",
                     "--remote-pod-cidr": "172.31.7.0/24", "--remote-pod-cidr-remapped": "172.30.7.0/24",
                     "--gateway-endpoint": "172.31.250.29:51920", "--local-gateway-endpoint": "172.31.250.17:51820"}
    assert fabric_gateways.remapping_args(fabric_gateways.cidrs(env, topology, remote)) == env.remapping_args(topology, remote)
    # the gateways and the route agent run on the real node too
    values = chart_pods.local_values("local")
    assert values["gateway"]["nodeSelector"] == chart_pods.real_node_placement()["nodeSelector"]
    assert values["gateway"]["routeAgent"]["tolerations"] == chart_pods.real_node_placement()["tolerations"]
    assert chart_pods.remote_values()["gateway"]["nodeSelector"] == chart_pods.real_node_placement()["nodeSelector"]


@pytest.mark.parametrize("arg", [
    "get", "jsonpath={.items[*].metadata.name}", "import u; print(u.urlopen('http://hello.demo'))",
    "a\"b'c", "{'\\t'}Ready={.status.conditions[?(@.type=='Ready')].status}{'\\n'}", "$HOME `x` \\",
])
def test_the_commands_the_demo_prints_paste_back_as_the_same_arguments(arg):
    import shlex

    from kube_offload_harness.demo import _quote

    assert shlex.split(_quote(arg)) == [arg]


def test_down_goes_on_past_a_step_that_fails_and_says_so(tmp_path: Path, monkeypatch):
    """A real node that cannot be removed must not leave the rest running: every other
    step still runs, the failure is raised at the end, and the topology is kept so that
    `down` can be run again."""
    topology = real_pods_topology()
    env = Environment(tmp_path, say=lambda line: None, bins=object())
    env.state_dir.mkdir(parents=True, exist_ok=True)
    env.topology_path.write_text(topology.to_json())
    ran = []

    def broken(_topology):
        raise RuntimeError("a mount is busy")

    monkeypatch.setattr(env, "stop_real_nodes", broken)
    monkeypatch.setattr(env.processes, "stop_all", lambda: ran.append("processes") or [])
    with pytest.raises(ClusterError, match="a mount is busy"):
        env.down()
    assert ran == ["processes"]
    assert env.topology_path.exists()


# --- a chain of three clusters (docs/multihop.md) ----------------------------------------------
def test_a_chain_topology_round_trips_and_names_its_middle():
    topology = cluster.chain_topology(prefix="t")
    validate_topology(topology)
    assert [s.cluster_id for s in topology.clusters()] == ["a", "b", "c"]
    assert topology.middle is topology.remotes[0]
    assert topology.further[0].role == "remote"
    again = cluster.Topology.from_json(topology.to_json())
    assert [s.cluster_id for s in again.further] == ["c"] and again.middle is not None
    # without further clusters there is no middle
    assert default_topology(prefix="t").middle is None


def test_a_further_cluster_gets_a_pod_range_of_its_own():
    topology = cluster.chain_topology(prefix="t")
    ranges = {cluster.remote_pod_cidr_remapped(topology, s) for s in (*topology.remotes, *topology.further)}
    assert ranges == {"10.100.0.0/16", "10.150.0.0/16"}


@pytest.mark.parametrize("change", [
    lambda t: setattr(t, "real_nodes", True),
    lambda t: setattr(t, "peering", cluster.PEERING_CLI),
    lambda t: setattr(t, "virtual_kubelets", False),
])
def test_a_chain_is_wired_by_the_harness_on_kwok_nodes_only(change):
    topology = cluster.chain_topology(prefix="t")
    change(topology)
    with pytest.raises(ClusterError, match="chain"):
        validate_topology(topology)
