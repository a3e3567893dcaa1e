"""``kube-offload demo``: the main job, end to end, on loopback clusters.

Brings up (or reuses) one local and one remote cluster, the local one with kube-offload's
webhook and extender running, connects them with `kube-offload peer` as a user would,
then walks through what a platform engineer would do, printing each command and its
output: the virtual node, a rejected bad policy label, a namespace opted in, a Deployment
offloaded to the remote cluster, the same pods seen from both sides, what
`kubectl offload explain` and `kubectl offload status` say about them, `kubectl top` with
the remote figures, and the virtual node going NotReady and back with its pods.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from kube_offload import constants as C
from kube_offload_harness.binaries import BuildError
from kube_offload_harness import metrics_server, peer_driver
from kube_offload_harness.naming import virtual_node_name
from kube_offload_harness.partition import vkubelet_behind_link
from kube_offload_harness.cluster import (
    PEERING_CLI, PROVIDER_LABEL, REGION_LABEL, Cluster, ClusterError, Environment, default_state_dir, default_topology,
)
from kube_offload.runtime.flags import add_flag

COMPONENT = "demo"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="show offloading end to end on loopback clusters (builds what it needs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(parser, COMPONENT, "--state-dir", default=str(default_state_dir() / "demo"),
             help="where the demo environment keeps kubeconfigs, logs and PIDs")
    add_flag(parser, COMPONENT, "--replicas", default=6, type=int, help="replicas of the offloaded Deployment")
    add_flag(parser, COMPONENT, "--namespace", default="demo", help="the namespace to offload")
    add_flag(parser, COMPONENT, "--down", default=False, type=bool,
             help="tear everything down at the end instead of leaving it up to explore")
    parser.set_defaults(func=run)


_steps = itertools.count(1)


def _banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def _step(text: str) -> None:
    """A numbered step of the walkthrough (numbered as they run, so steps can be added)."""
    _banner(f"{next(_steps)}. {text}")


def _show(cluster: Cluster, *args: str, check: bool = True) -> str:
    # $LOCAL / $REMOTE are the kubeconfig paths printed at the start (see run)
    alias = "$LOCAL" if cluster.spec.role == "local" else "$REMOTE"
    print(f"$ kubectl --kubeconfig {alias} {' '.join(_quote(a) for a in args)}", flush=True)
    result = cluster.kubectl(*args, check=False)
    output = (result.stdout + result.stderr).rstrip()
    print(output, flush=True)
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return output


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in " {}[]?*()'\"") else arg


def _healthy(env: Environment) -> bool:
    topology = env.topology()
    if topology is None:
        return False
    for spec in topology.clusters():
        if env.cluster(spec).kubectl("get", "--raw", "/readyz", check=False, timeout=5).returncode != 0:
            return False
    return all(record.running() for record in env.processes.load())


def run(args: argparse.Namespace) -> int:
    env = Environment(Path(args.state_dir))
    try:
        _step("Loopback clusters: real kube-apiserver/etcd/scheduler/controller-manager, kwok nodes")
        topology = env.topology()
        if topology is not None and topology.peering == PEERING_CLI and _healthy(env):
            print(f"reusing the running environment in {env.state_dir}")
        else:
            env.down()
            topology = default_topology(prefix="demo", remotes=1)
            topology.peering = PEERING_CLI  # connected below by `kube-offload peer`
            env.up(topology)
        local = env.cluster(topology.local)
        remote = env.cluster(topology.remotes[0])
        twin = f"{args.namespace}-{topology.local.cluster_id}"
        print(f"LOCAL={local.kubeconfig}")
        print(f"REMOTE={remote.kubeconfig}")

        _step("Connect them: `kube-offload peer` admits the local cluster as a consumer of the remote one "
              "(remote chart), stores its kubeconfig and runs a virtual kubelet (local chart)")
        peer_driver.peer(env, topology, topology.remotes[0], say=lambda line: print(line, flush=True))
        _walkthrough(env, local, remote, args.namespace, twin, args.replicas)
    except (ClusterError, BuildError, TimeoutError) as exc:  # TimeoutError: a process never ready
        print(f"\nkube-offload demo: {exc}", file=sys.stderr)
        print(f"logs: {env.state_dir / 'logs'}; remove everything with: kube-offload cluster down --state-dir {env.state_dir}",
              file=sys.stderr)
        return 1
    if args.down:
        _banner("Tearing down")
        env.down()
    else:
        _banner("Explore it yourself")
        print(f"export KUBECONFIG={local.kubeconfig}        # the local cluster")
        print(f"kubectl --kubeconfig {remote.kubeconfig} get pods -A   # the remote cluster")
        print(f"kube-offload cluster status --state-dir {env.state_dir}")
        print(f"kube-offload cluster down --state-dir {env.state_dir}   # stop everything")
    return 0


def _walkthrough(env: Environment, local: Cluster, remote: Cluster, namespace: str, twin: str, replicas: int) -> None:
    print("\n(the virtual node, labelled with the region and provider the remote cluster suggested:)")
    _show(local, "get", "nodes", "-L", f"{C.LABEL_TYPE},{C.LABEL_CLUSTER_ID},{REGION_LABEL},{PROVIDER_LABEL}")

    _step("Opt a namespace in (a bad value is refused by our validating webhook)")
    local.kubectl("create", "namespace", namespace, check=False)
    _show(local, "label", "namespace", namespace, f"{C.LABEL_POD_PLACEMENT}=Everywhere", check=False)
    _show(local, "label", "--overwrite", "namespace", namespace,
          f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")

    _step(f"A Deployment of {replicas} pods in '{namespace}': the webhook adds toleration + affinity, "
          "the scheduler (asking our extender) picks the virtual node")
    local.apply(_deployment(namespace, replicas))
    _wait_running(local, namespace, replicas)
    _show(local, "get", "pods", "-n", namespace, "-o", "wide")
    first = local.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[0].metadata.name}").stdout
    print(f"\n(the toleration and node affinity the webhook added to {first}:)")
    _show(local, "get", "pod", "-n", namespace, first, "-o",
          "jsonpath={.spec.tolerations[?(@.key=='" + C.TAINT_KEY + "')]}{'\\n'}{.spec.affinity.nodeAffinity}{'\\n'}")

    _step(f"The same pods in the remote cluster (twin namespace '{twin}'), kept there by ShadowPods")
    _show(remote, "get", "shadowpods", "-n", twin)
    _show(remote, "get", "pods", "-n", twin, "-o", "wide")

    _step("Delete a remote pod behind the local cluster's back: the enforcer recreates it, the local pod stays")
    remote_pod = remote.kubectl("get", "pods", "-n", twin, "-o", "jsonpath={.items[0].metadata.name}").stdout
    _show(remote, "delete", "pod", "-n", twin, remote_pod, "--wait=false")
    time.sleep(3)
    _show(remote, "get", "pods", "-n", twin, remote_pod, "-o", "wide")
    _show(local, "get", "pod", "-n", namespace, remote_pod, "-o", "wide")

    _step("Troubleshoot as usual: logs, exec and events of an offloaded pod come from the remote cluster")
    # Say what is simulated: a user must not take kwok's lines for a container's.
    print("(the remote pods here run on kwok's simulated nodes: the log lines are kwok's and exec runs on this "
          "machine; for real containers, with real logs, exec, cp, port-forward and a Service call between the "
          "clusters, run `make test-realnode` or see docs/real-nodes.md)")
    _show(local, "logs", "-n", namespace, remote_pod, "--tail=3")
    _show(local, "exec", "-n", namespace, remote_pod, "--", "hostname")
    described = local.kubectl("describe", "pod", "-n", namespace, remote_pod).stdout
    print(f"$ kubectl --kubeconfig $LOCAL describe pod -n {namespace} {remote_pod}   (Events section)")
    print(described[described.find("Events:"):].rstrip())

    _step("Ask kube-offload: `kubectl offload explain` says where a pod can run and why, "
          "`kubectl offload status` how every peering is doing")
    _show_plugin(local, remote, "explain", "pod", remote_pod, "-n", namespace)
    _show_plugin(local, remote, "status")

    _step("Stateful pods: claims of the virtual StorageClass 'kube-offload' follow their pods (provisioned by "
          "the remote cluster's own provisioner, the local claim pinned to the virtual node; docs/storage.md)")
    _show(local, "get", "storageclass")

    _top(env, local, remote, namespace, twin)
    _readiness_round_trip(env, local, remote, namespace)


def _top(env: Environment, local: Cluster, remote: Cluster, namespace: str, twin: str, timeout: float = 240) -> None:
    """``kubectl top`` in the local cluster shows the remote figures: metrics-server runs in
    both clusters (kwok simulates the pods' usage from their annotations), the virtual
    kubelet serves /metrics/resource built from the remote metrics.k8s.io (docs/metrics.md)."""
    _step("Metrics: `kubectl top` on offloaded pods and on the virtual node shows what the remote cluster measures")
    for cluster in (remote, local):
        metrics_server.ensure_running(env, cluster)
    node = virtual_node_name(remote.spec.cluster_id)
    print("(waiting for the first samples: metrics-server on each side resolves every 15 s)", flush=True)
    deadline = time.monotonic() + timeout
    while True:
        pods = local.kubectl("top", "pod", "-n", namespace, "--no-headers", check=False)
        nodes = local.kubectl("top", "node", node, "--no-headers", check=False)
        if pods.returncode == 0 and nodes.returncode == 0 and pods.stdout.strip():
            break
        if time.monotonic() > deadline:
            raise ClusterError(f"no kubectl top figures after {timeout:.0f}s: {(pods.stderr or nodes.stderr).strip()}")
        time.sleep(5)
    _show(remote, "top", "pod", "-n", twin)
    _show(local, "top", "pod", "-n", namespace)
    _show(local, "top", "node", node)


def _readiness_round_trip(env: Environment, local: Cluster, remote: Cluster, namespace: str) -> None:
    """NotReady -> pods NotReady -> Ready: the link between the virtual kubelet and the
    remote API server is cut, then healed (kube_offload_harness.partition), with a short
    ping timeout so the demo does not wait 20 s each way."""
    _step("Cut the network between the virtual kubelet and the remote cluster: the node turns NotReady and its "
          "pods not Ready (Services stop sending them traffic); heal it: Ready again, as the remote pods say")
    node = virtual_node_name(remote.spec.cluster_id)
    pods_ready = ("jsonpath={range .items[*]}{.metadata.name}{'\\t'}Ready={.status.conditions[?(@.type=='Ready')].status}"
                  "{'\\t'}{.status.conditions[?(@.type=='Ready')].reason}{'\\n'}{end}")

    def node_ready() -> str:
        return local.kubectl("get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                             check=False).stdout.strip()

    def pods_readiness() -> set[str]:
        out = local.kubectl("get", "pods", "-n", namespace, "-o",
                            "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}", check=False).stdout
        return set(out.split())

    def wait_until(predicate, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(1)

    print("(the virtual kubelet is restarted to reach its remote API server through a link on 127.0.0.1 "
          "that the demo cuts; --ping-timeout 5s instead of 20s)")
    with vkubelet_behind_link(env, remote.spec, ["--ping-interval", "1s", "--ping-timeout", "5s"]) as link:
        link.cut()
        print("$ # link cut: the remote API server no longer answers the virtual kubelet")
        wait_until(lambda: node_ready() == "False", "the virtual node NotReady")
        wait_until(lambda: pods_readiness() == {"False"}, "the pods not Ready")
        _show(local, "get", "node", node)
        _show(local, "get", "pods", "-n", namespace, "-o", pods_ready)
        link.heal()
        print("$ # link healed")
        wait_until(lambda: node_ready() == "True", "the virtual node Ready again")
        wait_until(lambda: pods_readiness() == {"True"}, "the pods Ready again")
        _show(local, "get", "node", node)
        _show(local, "get", "pods", "-n", namespace, "-o", pods_ready)


def _show_plugin(local: Cluster, remote: Cluster, *args: str) -> None:
    """``kubectl offload ...``: kubectl runs the kubectl-offload executable installed beside
    this Python (flags go after the plugin name; kubectl refuses them before it)."""
    cluster_id = remote.spec.cluster_id
    print(f"$ kubectl offload {' '.join(args)} --kubeconfig $LOCAL --remote-kubeconfig {cluster_id}=$REMOTE", flush=True)
    env = local.env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    argv = [str(local.bins.kubectl), "offload", *args, "--kubeconfig", str(local.kubeconfig),
            "--remote-kubeconfig", f"{cluster_id}={remote.kubeconfig}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    print((result.stdout + result.stderr).rstrip(), flush=True)


def _deployment(namespace: str, replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": {
                # kwok simulates this usage in the remote cluster (kubectl top, step "Metrics")
                "metadata": {"labels": {"app": "hello"}, "annotations": {
                    metrics_server.USAGE_CPU_ANNOTATION: "30m", metrics_server.USAGE_MEMORY_ANNOTATION: "40Mi"}},
                "spec": {
                    "containers": [{
                        "name": "hello",
                        "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                        "args": ["serve-hostname"],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    }]
                },
            },
        },
    }


def _wait_running(cluster: Cluster, namespace: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    running = 0
    while time.monotonic() < deadline:
        phases = cluster.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].status.phase}").stdout.split()
        running = phases.count("Running")
        print(f"\r  {running}/{count} pods Running", end="", flush=True)
        if running >= count:
            print()
            return
        time.sleep(1)
    print()
    raise ClusterError(f"only {running}/{count} pods Running in {namespace} after {timeout}s")
