"""Two real nodes with the same pod CIDR on one machine (harness pod_cidr_overlap.py): which
routes, rules and marks let the remote's apiserver reach its own pods while the machine's
main table keeps sending the shared CIDR to the local node (all pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_offload_harness import cluster, fabric_gateways
from kube_offload_harness import pod_cidr_overlap as po
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import ClusterError, Environment, validate_topology


def _plan(slot: int, pod_cidr_slot: int = -1) -> rc.NodePlan:
    return rc.NodePlan(cluster=f"c{slot}", node_name=f"n{slot}", slot=slot, state_dir=Path("/s"),
                       pod_cidr_slot=pod_cidr_slot)


def test_a_node_with_its_own_cidr_keeps_the_main_table_route():
    plan = _plan(3)
    assert plan.overlap is None and plan.pod_cidr == "172.31.3.0/24"
    assert rc.machine_routes(plan) == [["172.31.3.0/24", "via", plan.node_ip, "dev", plan.veth_host]]


def test_a_node_sharing_the_local_cidr_routes_it_in_a_table_of_its_own_only():
    local, remote = _plan(0), _plan(1, pod_cidr_slot=0)
    assert remote.pod_cidr == local.pod_cidr == "172.31.0.0/24"
    # never in the main table: the local node's route there must stay
    assert rc.machine_routes(remote) == []
    overlap = remote.overlap
    assert po.route(overlap) == ["172.31.0.0/24", "via", remote.node_ip, "dev", remote.veth_host,
                                 "table", str(po.TABLE_BASE + 1)]
    assert po.rule(overlap)[:4] == ["fwmark", hex(po.MARK_BASE + 1), "lookup", str(po.TABLE_BASE + 1)]
    # the gateways still tell them apart: each node's remapped CIDR is its slot's
    assert fabric_gateways.remapped_pod_cidr(local.slot) != fabric_gateways.remapped_pod_cidr(remote.slot)


def test_what_the_remote_apiserver_opens_and_what_arrives_from_its_node_are_marked():
    overlap = _plan(2, pod_cidr_slot=0).overlap
    rules = po.mangle_rules(overlap)
    by_cgroup = [r for chain, r in rules if chain == "OUTPUT" and "cgroup" in r]
    assert by_cgroup and by_cgroup[0][by_cgroup[0].index("--path") + 1] == overlap.cgroup
    [arriving] = [r for chain, r in rules if chain == "PREROUTING"]
    assert arriving[:2] == ["-i", overlap.link] and "CONNMARK" in arriving
    answers = [r for chain, r in rules if chain == "OUTPUT" and "connmark" in r]
    assert answers and answers[0][answers[0].index("--mark") + 1] == overlap.mark
    for _, r in rules:
        assert r[r.index("--comment") + 1] == f"{po.COMMENT} 2"  # found again by it, never by position


def test_disconnect_undoes_exactly_what_connect_made():
    overlap = _plan(5, pod_cidr_slot=0).overlap
    made, undone = po.connect_commands(overlap), po.disconnect_commands(overlap)
    assert len(made) == len(undone)
    flip = {"-A": "-D", "add": "delete", "replace": "delete"}
    assert sorted(tuple(flip.get(a, a) for a in argv) for argv in made) == sorted(tuple(argv) for argv in undone)


def test_only_remotes_whose_pods_run_on_their_real_node_share_the_local_cidr(tmp_path: Path):
    topology = cluster.real_pods_topology(prefix="t")
    assert topology.overlapping_pod_cidrs
    validate_topology(topology)
    topology.local.real_node_slot, topology.remotes[0].real_node_slot = 4, 7
    topology.remotes[0].real_node_pod_cidr_slot = 4  # what up assigns (_assign_real_node_slots)
    env = Environment(tmp_path, say=lambda line: None, bins=object())
    remote = topology.remotes[0]
    assert env.real_node(remote).plan.pod_cidr == env.real_node(topology.local).plan.pod_cidr
    args = env.remapping_args(topology, remote)
    assert args == ["--remote-pod-cidr", "172.31.4.0/24", "--remote-pod-cidr-remapped", "172.30.7.0/24",
                    "--local-pod-cidr", "172.31.4.0/24", "--local-pod-cidr-remapped", "172.30.4.0/24"]
    # a remote whose pods run on kwok nodes has nothing to remap on a real data plane
    topology.remotes[0].nodes, topology.remotes[0].real_node_tainted = 2, True
    with pytest.raises(ClusterError, match="overlapping_pod_cidrs"):
        validate_topology(topology)
