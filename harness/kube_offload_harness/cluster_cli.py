"""``kube-offload cluster up | down | status``: loopback clusters with our components."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kube_offload_harness.binaries import BuildError
from kube_offload_harness import metrics_server
from kube_offload_harness.cluster import ClusterError, Environment, Topology, default_state_dir, default_topology, reap_orphans
from kube_offload.runtime.flags import add_flag

COMPONENT = "cluster"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="start/stop a local and N remote loopback clusters with kube-offload running",
        description=(
            "Real kube-apiserver, etcd, kube-scheduler and kube-controller-manager per cluster, started by "
            "kwokctl --runtime binary on 127.0.0.1, with kwok simulating physical nodes; our webhook, "
            "extender, virtual kubelets and enforcers run as local processes, or with --real-nodes true as pods "
            "of the charts on a real node per cluster. Binaries are built on first use."
        ),
    )
    actions = parser.add_subparsers(dest="cluster_action", metavar="ACTION")

    up = actions.add_parser("up", help="create the clusters and start our components")
    _add_state_dir(up)
    add_flag(up, COMPONENT, "--remotes", default=1, type=int, help="number of remote clusters")
    add_flag(up, COMPONENT, "--prefix", default="ko", help="prefix of the kwokctl cluster names")
    add_flag(up, COMPONENT, "--local-nodes", default=2, type=int, help="kwok physical nodes in the local cluster")
    add_flag(up, COMPONENT, "--remote-nodes", default=None, type=int,
             help="kwok physical nodes in each remote cluster; unset: 2, or 0 with --real-nodes true, where each "
                  "remote's real node is then untainted and runs every offloaded pod as a container, with the "
                  "local real node's pod CIDR, its pod network joined to the local one's under remapped addresses "
                  "(docs/real-nodes.md)")
    add_flag(up, COMPONENT, "--node-cpu", default="4", help="CPU capacity of each kwok node")
    add_flag(up, COMPONENT, "--node-memory", default="16Gi", help="memory capacity of each kwok node")
    add_flag(up, COMPONENT, "--node-pods", default=110, type=int, help="pod capacity of each kwok node")
    add_flag(up, COMPONENT, "--virtual-kubelets", default=True, type=bool,
             help="start one virtual kubelet per remote cluster (false: no virtual nodes)")
    add_flag(up, COMPONENT, "--real-nodes", default=False, type=bool,
             help="add one real node (kubelet + containerd + runc in its own network namespace, as root) "
                  "to every cluster, beside kwok's; see docs/real-nodes.md")
    add_flag(up, COMPONENT, "--metrics-server", default=True, type=bool,
             help="run metrics-server in every cluster, so that `kubectl top` answers (docs/metrics.md); "
                  "false: save its CPU when no one asks for metrics")
    add_flag(up, COMPONENT, "--chart-pods", default="", choices=("", "true", "false"),
             help="run the charts' webhook, extender, scheduler, virtual kubelets and enforcers as pods on the "
                  "real nodes, installed with Helm (true needs --real-nodes true); unset: as --real-nodes says")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop our processes and delete the clusters")
    _add_state_dir(down)
    down.set_defaults(func=_down)
    reap = actions.add_parser(
        "reap", help="tear down every environment whose state directory vanished",
        description=("Each environment keeps the records of what it started (PIDs, real-node slots, its topology) "
                     "outside its state directory, in a run directory of its own (as root under "
                     "/run/kube-offload/environments/; KUBE_OFFLOAD_RUNS_DIR overrides). An environment whose state "
                     "directory was deleted (by hand, or a pytest basetemp rotated away) is torn down from those "
                     "records alone: its real nodes, registry, processes and control planes. Every `cluster up` does "
                     "this first; this command does only that."))
    reap.set_defaults(func=_reap)
    status = actions.add_parser("status", help="say what runs where")
    _add_state_dir(status)
    status.set_defaults(func=_status)
    _add_state_dir(parser)
    parser.set_defaults(func=_status)


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    # On every action, so `kube-offload cluster down --state-dir X` reads naturally.
    add_flag(parser, COMPONENT, "--state-dir", default=str(default_state_dir()),
             help="where kubeconfigs, certificates, logs and PIDs are kept")


def _env(args: argparse.Namespace) -> Environment:
    return Environment(Path(args.state_dir))


DEFAULT_REMOTE_NODES = 2


def up_topology(args: argparse.Namespace) -> Topology:
    """The topology ``cluster up`` makes from its flags. With real nodes and no kwok node
    in the remotes (the default then), each remote's real node is untainted: offloaded
    pods run there as containers, what ``kube-offload demo`` shows (validate_topology)."""
    remote_nodes = args.remote_nodes
    if remote_nodes is None:
        remote_nodes = 0 if args.real_nodes else DEFAULT_REMOTE_NODES
    topology = default_topology(
        prefix=args.prefix, remotes=args.remotes, local_nodes=args.local_nodes, remote_nodes=remote_nodes,
        node_cpu=args.node_cpu, node_memory=args.node_memory, node_pods=args.node_pods,
    )
    topology.virtual_kubelets = args.virtual_kubelets
    topology.real_nodes = args.real_nodes
    topology.chart_pods = args.real_nodes if args.chart_pods == "" else args.chart_pods == "true"
    if args.real_nodes and remote_nodes == 0:
        for spec in topology.remotes:
            spec.real_node_tainted = False
        topology.overlapping_pod_cidrs = True  # as clusters built alike: the fabric remaps
    return topology


def _up(args: argparse.Namespace) -> int:
    env = _env(args)
    topology = up_topology(args)
    try:
        env.up(topology)
        if args.metrics_server:
            _start_metrics_servers(env, topology)
    except (ClusterError, BuildError) as exc:
        print(f"kube-offload: {exc}", file=sys.stderr)
        print("kube-offload: leaving what was started in place for inspection; "
              "`kube-offload cluster down` removes it", file=sys.stderr)
        return 1
    for line in env.status():
        print(line)
    return 0


def _start_metrics_servers(env: Environment, topology: Topology) -> None:
    """What the demo's `kubectl top` step needs, there as soon as the clusters are: a user
    who runs `kubectl top` after `cluster up` gets figures, not "Metrics API not available"."""
    for spec in topology.clusters():
        metrics_server.ensure_running(env, env.cluster(spec))


def _down(args: argparse.Namespace) -> int:
    _env(args).down()
    return 0


def _reap(args: argparse.Namespace) -> int:
    from kube_offload_harness import run_records

    reaped = reap_orphans()
    print(f"{len(reaped)} orphaned environment(s) torn down" if reaped else "no orphaned environment to tear down")
    left = run_records.orphans()
    for records in left:
        print(f"kube-offload: environment {records.env_id} (state dir {records.state_dir}) could not be torn down "
              f"completely; its records are in {records.directory}", file=sys.stderr)
    return 1 if left else 0


def _status(args: argparse.Namespace) -> int:
    for line in _env(args).status():
        print(line)
    return 0
