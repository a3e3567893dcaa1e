"""The real-node tier: a loopback cluster whose extra node is a real kubelet + containerd +
runc in a network namespace of its own (docs/real-nodes.md, docs/testing.md).

One environment per module, made by the same code as `kube-offload cluster up --real-nodes
true`: ``real_env`` a local cluster only (the claims of test_real_node.py are about one
node), ``offload_real_env`` a local and a remote cluster joined by the fabric, whose
remote real node runs the offloaded pods (test_offloaded_pods.py). Torn down by the
module's last test or, on failure, by the fixture. Needs root (namespaces, cgroups, mounts) and the
real-node binaries (scripts/bootstrap.sh builds them); with CI=true anything missing fails
instead of skipping.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from kube_offload_harness import chart_pods, real_node, real_node_config
from kube_offload_harness.binaries import node_binaries
from kube_offload_harness.cluster import PEERING_HARNESS, Cluster, Environment, Topology, default_topology, real_pods_topology
from support.clusters import keep_logs

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".artifacts" / "realnode-logs"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/realnode/" in str(item.fspath):
            item.add_marker(pytest.mark.realnode)


def _unmet() -> list[str]:
    unmet = real_node.preflight()
    missing = node_binaries().missing()
    if missing:
        unmet.append(f"the real-node binaries ({', '.join(missing)}: `kube-offload binaries build --real-node`)")
    return unmet


def environment(tmp_path_factory, request, topology: Topology,
                name: str = "kube-offload-realnode") -> Iterator[Environment]:
    """Up ``topology`` (real nodes) for one module, down at its end, logs kept on failure."""
    unmet = _unmet()
    if unmet:
        message = "the real-node tier needs " + "; ".join(unmet)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = Environment(tmp_path_factory.mktemp(name), say=lambda line: print(line, flush=True))
    # what the machine had before: down must put back what the harness changed
    env.kernel_tunables_before = {key: (Path("/proc/sys") / key).read_text() for key in real_node_config.KERNEL_TUNABLES}
    topology.real_nodes = True
    try:
        env.up(topology)
        yield env
    finally:
        if request.session.testsfailed and topology.chart_pods:
            print_chart_pods(env)
        if request.session.testsfailed or os.environ.get("KUBE_OFFLOAD_KEEP_LOGS"):
            _keep_logs(env)
        env.down()


@pytest.fixture(scope="module")
def real_env(tmp_path_factory, request) -> Iterator[Environment]:
    """The local cluster alone, its components as harness processes: the claims of
    test_real_node.py are about the node."""
    topology = default_topology(prefix="rn", remotes=0, local_nodes=1)
    topology.chart_pods = False
    yield from environment(tmp_path_factory, request, topology)


@pytest.fixture(scope="module")
def offload_real_env(tmp_path_factory, request) -> Iterator[Environment]:
    """A local cluster and one remote, each with a real node, joined by the fabric, with
    our components wired as in the e2e tier (PEERING_HARNESS, harness processes). The remote
    has no kwok node and its real node is untainted: every offloaded pod runs there as a
    container (docs/real-nodes.md, "Offloaded pods on a remote's real node")."""
    topology = real_pods_topology(prefix="op")
    topology.chart_pods = False
    yield from environment(tmp_path_factory, request, topology, "kube-offload-offload")


def charts_as_pods_topology(prefix: str) -> Topology:
    """`cluster up --real-nodes true`'s shape, the demo's (cluster_cli.up_topology): the
    charts as pods, the remote's only node its real node, untainted, joined to the local one
    by the fabric, with the local node's pod CIDR; `up` runs `kube-offload peer`."""
    topology = default_topology(prefix=prefix, remotes=1, local_nodes=1, remote_nodes=0)
    topology.chart_pods = True
    topology.remotes[0].real_node_tainted = False
    topology.overlapping_pod_cidrs = True  # both real nodes hand out the same pod addresses
    topology.peering = PEERING_HARNESS
    return topology


def local_and_remote(env: Environment) -> tuple[Cluster, Cluster]:
    """The local cluster and the (first) remote of ``env``."""
    topology = env.topology()
    return env.cluster(topology.local), env.cluster(topology.remotes[0])


def print_chart_pods(env: Environment) -> None:
    """What a person looks at when a test of the charts' pods failed: each cluster's pods,
    Leases and logs of the release namespace."""
    topology = env.topology()
    if topology is None:
        return
    for spec in topology.clusters():
        cluster = env.cluster(spec)
        if cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=5).returncode == 0:
            print(f"\n--- {cluster.name}: pods of {chart_pods.NAMESPACE}\n{chart_pods.describe_pods(cluster)}")
            leases = cluster.kubectl("get", "leases", "-n", chart_pods.NAMESPACE, "-o", "wide", check=False).stdout
            print(f"--- leases:\n{leases}")
            for pod in chart_pods.pods(cluster):
                logs = cluster.kubectl("logs", "-n", chart_pods.NAMESPACE, pod["metadata"]["name"], "--all-containers",
                                       "--tail=30", check=False)
                print(f"--- logs of {pod['metadata']['name']}:\n{logs.stdout}{logs.stderr}")


def _keep_logs(env: Environment) -> None:
    target = keep_logs(env, ARTIFACTS, control_planes=False)
    print(f"\nkube-offload real-node tier: logs kept in {target}")
