"""The real-node tier: a loopback cluster whose extra node is a real kubelet + containerd +
runc in a network namespace of its own (docs/real-nodes.md, docs/testing.md).

Environments made by the same code as `kube-offload cluster up --real-nodes true`:
``real_env`` a local cluster only (the claims of test_pod_network.py and test_real_node.py
are about one node), ``offload_real_env`` a local and a remote cluster joined by the fabric,
whose remote real node runs the offloaded pods (test_offloaded_pods.py and the modules that
run ordinary pods on it). Each is up once for all the modules that use it: their tests run
one after the other (pytest_collection_modifyitems), the owner's module last, whose last
test takes the environment down and checks that nothing is left; the fixture takes it
down otherwise (a failure, a run of some of the modules). Other modules make their own
(test_charts_as_pods, test_day2, test_gateway*). Needs root (namespaces, cgroups, mounts) and the
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


# A shared environment's fixture -> the module whose last test takes it down (and checks it).
SHARED = {"real_env": "test_real_node.py", "offload_real_env": "test_offloaded_pods.py"}
_up: dict[str, Iterator[Environment]] = {}  # a shared environment's generator while it is up
_last_user: dict[str, pytest.Item] = {}


def _shared_by(item: pytest.Item) -> str | None:
    names = getattr(item, "fixturenames", ())
    return next((name for name in SHARED if name in names), None)


def pytest_collection_modifyitems(items):
    """Mark the tier, and run the users of each shared environment one after the other,
    where its first user was, with its owner's module last."""
    slots = [index for index, item in enumerate(items) if "/tests/realnode/" in str(item.fspath)]
    for index in slots:
        items[index].add_marker(pytest.mark.realnode)
    tier = [items[index] for index in slots]
    first: dict[str, int] = {}
    for position, item in enumerate(tier):
        shared = _shared_by(item)
        if shared is not None:
            first.setdefault(shared, position)

    def order(pair: tuple[int, pytest.Item]) -> tuple[int, bool, int]:
        position, item = pair
        shared = _shared_by(item)
        if shared is None:
            return position, False, position
        return first[shared], item.path.name == SHARED[shared], position

    for index, (_, item) in zip(slots, sorted(enumerate(tier), key=order), strict=True):
        items[index] = item
    _last_user.clear()
    for item in items:
        shared = _shared_by(item)
        if shared is not None:
            _last_user[shared] = item


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for shared, last in list(_last_user.items()):
        if item is last:
            _down(shared)


def _shared(name: str, envs: Iterator[Environment]) -> Iterator[Environment]:
    """Yield the environment ``envs`` brings up, kept until its last user's teardown (or the
    session's end)."""
    _up[name] = envs
    try:
        yield next(envs)
    finally:
        _down(name)


def _down(name: str) -> None:
    envs = _up.pop(name, None)
    if envs is not None:
        envs.close()  # environment()'s finally: logs kept on failure, then down


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


@pytest.fixture(scope="session")
def real_env(tmp_path_factory, request) -> Iterator[Environment]:
    """The local cluster alone, its components as harness processes: the claims of
    test_pod_network.py and test_real_node.py are about the node."""
    topology = default_topology(prefix="rn", remotes=0, local_nodes=1)
    topology.chart_pods = False
    yield from _shared("real_env", environment(tmp_path_factory, request, topology))


@pytest.fixture(scope="session")
def offload_real_env(tmp_path_factory, request) -> Iterator[Environment]:
    """A local cluster and one remote, each with a real node, joined by the fabric, with
    our components wired as in the e2e tier (PEERING_HARNESS, harness processes). The remote
    has no kwok node and its real node is untainted: every offloaded pod runs there as a
    container (docs/real-nodes.md, "Offloaded pods on a remote's real node")."""
    topology = real_pods_topology(prefix="op")
    topology.chart_pods = False
    yield from _shared("offload_real_env", environment(tmp_path_factory, request, topology, "kube-offload-offload"))


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
