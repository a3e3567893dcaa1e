"""An environment whose state directory vanished is torn down, not orphaned
(docs/testing.md, "When the state directory vanishes").

A real-node environment (one cluster, its real node, the registry, our processes) has its
state directory deleted the way pytest's basetemp rotation deletes it, with everything
running; the next ``up`` on the machine reaps it (``cluster.reap_orphans``, what every
``up`` does first) from the records kept outside the state directory alone: nothing of
the node, of the registry, of our processes or of the cluster's control plane is left.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from kube_offload_harness import real_node, real_node_config as rc, run_records
from kube_offload_harness.cluster import Environment, default_topology, reap_orphans
from kube_offload_harness.processes import ProcessTable

from .conftest import environment


@pytest.fixture(scope="module")
def env(tmp_path_factory, request) -> Iterator[Environment]:
    topology = default_topology(prefix="vs", remotes=0, local_nodes=1)
    topology.chart_pods = False
    yield from environment(tmp_path_factory, request, topology, "kube-offload-vanish")


def test_a_deleted_state_dir_is_reaped_from_the_records_outside_it(env: Environment):
    topology = env.topology()
    records = env.records
    assert not records.legacy and not records.directory.is_relative_to(env.state_dir)
    plan = env.real_node(topology.local).plan
    registry = env.registry(topology)
    ours = [r for r in env.processes.load() if r.running()]
    control_plane = [r for r in ProcessTable(records.control_planes).load() if r.running()]
    assert real_node.leftovers(plan) and registry.leftovers()
    assert {r.name.split("/", 1)[1] for r in control_plane} >= {"etcd", "kube-apiserver", "kube-controller-manager",
                                                                 "kube-scheduler"}, control_plane
    assert any(r.name == real_node.process_names(plan)["kubelet"] for r in ours), [r.name for r in ours]

    shutil.rmtree(env.state_dir)  # what pytest's rotation does (pathlib rm_rf: shutil.rmtree)
    assert records.env_id in {r.env_id for r in run_records.orphans()}
    said: list[str] = []
    assert str(env.state_dir) in reap_orphans(say=said.append)
    print("\n".join(said))
    assert real_node.leftovers(plan) == []
    assert registry.leftovers() == []
    assert [r.name for r in ours if r.running()] == []
    assert [r.name for r in control_plane if r.running()] == []
    assert not records.directory.exists()
    assert {key: (Path("/proc/sys") / key).read_text() for key in rc.KERNEL_TUNABLES} == env.kernel_tunables_before
