"""``kube-offload demo``: the main job, end to end, on loopback clusters.

Brings up (or reuses) one local and one remote cluster, connects them with `kube-offload
peer` as a user would, then walks through what a platform engineer would do, printing each
command and its output: the virtual node, a rejected bad policy label, a namespace opted
in, a Deployment offloaded to the remote cluster, the same pods seen from both sides, the
containers' own logs and exec, a call from a local pod to the offloaded pods through a
local Service, what `kubectl offload explain` and `kubectl offload status` say about them,
`kubectl top` with the remote figures, and the virtual node going NotReady and back with
its pods when the network between the clusters is cut and healed.

With --real-nodes true (the default as root) every cluster has a real node (kubelet,
containerd, runc, CNI) and everything runs for real: kube-offload's charts are pods pulled
from a local registry, the offloaded pods are containers on the remote's real node, and
the two pod networks are joined by kube-offload's WireGuard gateways (docs/networking.md),
which the Service call across the clusters goes through; kwok simulates only one spare local
node. With --real-nodes false the nodes are kwok's and so are the pods: their log lines
are kwok's and exec runs on this machine (kube-offload's components then run as processes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Protocol

from kube_offload import constants as C
from kube_offload_harness.binaries import BuildError
from kube_offload_harness import chart_pods, fabric_gateways, metrics_server, peer_driver
from kube_offload_harness.naming import virtual_node_name
from kube_offload_harness.partition import vkubelet_behind_link, vkubelet_pod_partition
from kube_offload_harness.cluster import (
    PEERING_CLI, PROVIDER_LABEL, REGION_LABEL, Cluster, ClusterError, Environment, Topology, default_state_dir,
    default_topology, real_pods_topology,
)
from kube_offload.runtime.flags import add_flag

COMPONENT = "demo"
SERVICE = "hello"
CLIENT, CLIENT_NAMESPACE = "demo-client", "default"  # a pod of the local cluster, not offloaded
# docker.io's names: containerd pulls them through the environment's registry, which
# serves stand-ins made from Debian packages (standin_recipe.py).
BUSYBOX, PYTHON = "busybox:1.36", "python:3.11-slim"
CALL = "import urllib.request as u; print(u.urlopen('http://{url}', timeout=5).read().decode(), end='')"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="show offloading end to end on loopback clusters (builds what it needs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(parser, COMPONENT, "--state-dir", default=str(default_state_dir() / "demo"),
             help="where the demo environment keeps kubeconfigs, logs and PIDs")
    add_flag(parser, COMPONENT, "--replicas", default=3, type=int, help="replicas of the offloaded Deployment")
    add_flag(parser, COMPONENT, "--real-nodes", default=os.geteuid() == 0, type=bool,
             help="a real node (kubelet, containerd, runc) in every cluster, the charts as pods and the offloaded "
                  "pods as real containers (needs root; docs/real-nodes.md); false: kwok's simulated nodes only; "
                  "default: true as root")
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
    """``arg`` as a shell would need it, so a printed command can be pasted."""
    if not any(ch in arg for ch in " {}[]?*()'\"<>|;&$`\\"):
        return arg
    # in double quotes a backslash stays itself unless it escapes $ ` " \ or a newline
    if "'" in arg and not any(ch in arg for ch in '"$`') and not re.search(r"\\[\\\n]", arg):
        return f'"{arg}"'
    return shlex.quote(arg)


def _healthy(env: Environment) -> bool:
    topology = env.topology()
    if topology is None:
        return False
    for spec in topology.clusters():
        if env.cluster(spec).kubectl("get", "--raw", "/readyz", check=False, timeout=5).returncode != 0:
            return False
    return all(record.running() for record in env.processes.load())


def demo_topology(real_nodes: bool) -> Topology:
    """What the demo runs on: with real nodes, `kube-offload cluster up --real-nodes true`'s
    shape (the charts as pods, each remote's pods on its untainted real node, the pod
    networks joined); without, kwok nodes and our components as processes."""
    if real_nodes:
        topology = real_pods_topology(prefix="demo")
        topology.chart_pods = True
    else:
        topology = default_topology(prefix="demo", remotes=1)
    topology.peering = PEERING_CLI  # connected below by `kube-offload peer`
    return topology


def _what_is_real(topology: Topology) -> str:
    if topology.real_nodes:
        return ("real here: kube-apiserver, etcd, kube-scheduler, kube-controller-manager; one node per cluster with "
                "kubelet, kube-proxy, containerd, runc and CNI; kube-offload's charts running as pods from its image; "
                "the offloaded containers; the pod networks, joined by kube-offload's WireGuard gateways (pods of both charts); "
                "CoreDNS. Simulated by kwok: one spare local node.")
    return ("real here: the control planes; simulated by kwok: every node and every pod (log lines, exec on this "
            "machine); kube-offload's components run as processes. `kube-offload demo --real-nodes true` (as root) "
            "runs it all for real (docs/real-nodes.md).")


def run(args: argparse.Namespace) -> int:
    env = Environment(Path(args.state_dir))
    try:
        if not args.real_nodes and os.geteuid() != 0:
            print("(not root: no real node can run here, so this is the walkthrough on kwok's simulated nodes; "
                  "as root, `make demo` runs real containers: docs/real-nodes.md)")
        wanted = demo_topology(args.real_nodes)
        _step("Loopback clusters: real kube-apiserver/etcd/scheduler/controller-manager, "
              + ("a real node (kubelet, containerd, runc) in each" if wanted.real_nodes else "kwok nodes"))
        topology = env.topology()
        if topology is not None and topology.peering == PEERING_CLI and topology.real_nodes == wanted.real_nodes \
                and topology.chart_pods == wanted.chart_pods and _healthy(env):
            print(f"reusing the running environment in {env.state_dir}")
        else:
            env.down()
            topology = wanted
            env.up(topology)
        print(_what_is_real(topology))
        for spec in topology.clusters():  # `kubectl top` at the end needs a few scrapes
            metrics_server.ensure_running(env, env.cluster(spec))
        local = env.cluster(topology.local)
        remote = env.cluster(topology.remotes[0])
        twin = f"{args.namespace}-{topology.local.cluster_id}"
        print(f"LOCAL={local.kubeconfig}")
        print(f"REMOTE={remote.kubeconfig}")

        _step("Connect them: `kube-offload peer` admits the local cluster as a consumer of the remote one "
              "(remote chart), stores its kubeconfig and runs a virtual kubelet (local chart)")
        peer_driver.peer(env, topology, topology.remotes[0], say=lambda line: print(line, flush=True))
        _walkthrough(env, topology, local, remote, args.namespace, twin, args.replicas)
    except (ClusterError, BuildError, TimeoutError) as exc:  # TimeoutError: a process never ready
        print(f"\nkube-offload demo: {exc}", file=sys.stderr)
        if "real nodes need" in str(exc):
            print("kube-offload demo: `kube-offload demo --real-nodes false` runs the demo on kwok's simulated nodes",
                  file=sys.stderr)
        print(f"logs: {env.state_dir / 'logs'}; remove everything with: kube-offload cluster down --state-dir {env.state_dir}",
              file=sys.stderr)
        return 1
    if args.down:
        _banner("Tearing down")
        env.down()
    else:
        _banner("Explore it yourself")
        print(_what_is_real(topology))
        print(f"export KUBECONFIG={local.kubeconfig}        # the local cluster")
        print(f"kubectl --kubeconfig {remote.kubeconfig} get pods -A   # the remote cluster")
        print(f"kube-offload cluster status --state-dir {env.state_dir}")
        print(f"kube-offload cluster down --state-dir {env.state_dir}   # stop everything")
    return 0


def _walkthrough(env: Environment, topology: Topology, local: Cluster, remote: Cluster, namespace: str, twin: str,
                 replicas: int) -> None:
    real = topology.real_nodes
    print("\n(the virtual node, labelled with the region and provider the remote cluster suggested:)")
    _show(local, "get", "nodes", "-L", f"{C.LABEL_TYPE},{C.LABEL_CLUSTER_ID},{REGION_LABEL},{PROVIDER_LABEL}")
    if topology.chart_pods:
        print("\n(kube-offload itself: the charts' Deployments, running as pods on each cluster's real node)")
        _show(local, "get", "pods", "-n", chart_pods.NAMESPACE, "-o", "wide")
        _show(remote, "get", "pods", "-n", chart_pods.NAMESPACE, "-o", "wide")

    _step("Opt a namespace in (a bad value is refused by our validating webhook)")
    local.kubectl("create", "namespace", namespace, check=False)
    _show(local, "label", "namespace", namespace, f"{C.LABEL_POD_PLACEMENT}=Everywhere", check=False)
    _show(local, "label", "--overwrite", "namespace", namespace,
          f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")

    _step(f"A Deployment of {replicas} pods in '{namespace}' and its Service: the webhook adds toleration + "
          "affinity, the scheduler (asking our extender) picks the virtual node")
    local.apply([_deployment(namespace, replicas, real=real), _service(namespace)])
    _wait_running(local, namespace, replicas, timeout=240 if real else 120)
    _show(local, "get", "pods", "-n", namespace, "-o", "wide")
    first = local.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[0].metadata.name}").stdout
    print(f"\n(the toleration and node affinity the webhook added to {first}:)")
    _show(local, "get", "pod", "-n", namespace, first, "-o",
          "jsonpath={.spec.tolerations[?(@.key=='" + C.TAINT_KEY + "')]}{'\\n'}{.spec.affinity.nodeAffinity}{'\\n'}")

    _step(f"The same pods in the remote cluster (twin namespace '{twin}'), kept there by ShadowPods")
    _show(remote, "get", "shadowpods", "-n", twin)
    if real:
        local_cidr = env.real_node(topology.local).plan.pod_cidr
        remote_plan = env.real_node(remote.spec).plan
        shared = (f"both clusters hand out {local_cidr}, as clusters built alike do; " if remote_plan.pod_cidr == local_cidr
                  else "")
        print(f"(on the remote's real node, at their own addresses: {shared}the local cluster shows them as "
              f"{fabric_gateways.remapped_pod_cidr(remote_plan.slot)}, under which kube-offload's WireGuard gateways (kube-offload peer --gateway) "
              "carry them: docs/networking.md)")
    _show(remote, "get", "pods", "-n", twin, "-o", "wide")

    _step("Delete a remote pod behind the local cluster's back: the enforcer recreates it, the local pod stays")
    remote_pod = remote.kubectl("get", "pods", "-n", twin, "-o", "jsonpath={.items[0].metadata.name}").stdout
    uid = remote.kubectl("get", "pod", "-n", twin, remote_pod, "-o", "jsonpath={.metadata.uid}").stdout
    _show(remote, "delete", "pod", "-n", twin, remote_pod, "--wait=false")
    time.sleep(3)
    _show(remote, "get", "pods", "-n", twin, remote_pod, "-o", "wide", check=False)  # gone, or back already
    _show(local, "get", "pod", "-n", namespace, remote_pod, "-o", "wide")
    if real:
        _wait_recreated(remote, twin, remote_pod, uid)
        _show(remote, "get", "pods", "-n", twin, remote_pod, "-o", "wide")

    _step("Troubleshoot as usual: logs, exec and events of an offloaded pod come from the remote cluster")
    if real:
        print("(what the container printed on the remote's real node, and a command run inside it: its hostname is "
              "the pod's name)")
    else:
        # Say what is simulated: a user must not take kwok's lines for a container's.
        print("(the remote pods here run on kwok's simulated nodes: the log lines are kwok's and exec runs on this "
              "machine; `kube-offload demo --real-nodes true` shows real containers: docs/real-nodes.md)")
    _show(local, "logs", "-n", namespace, remote_pod, "--tail=3")
    _show(local, "exec", "-n", namespace, remote_pod, "--", "hostname")
    described = local.kubectl("describe", "pod", "-n", namespace, remote_pod).stdout
    print(f"$ kubectl --kubeconfig $LOCAL describe pod -n {namespace} {remote_pod}   (Events section)")
    print(described[described.find("Events:"):].rstrip())

    if real:
        _service_call(local, remote, namespace)

    _step("Ask kube-offload: `kubectl offload explain` says where a pod can run and why, "
          "`kubectl offload status` how every peering is doing")
    _show_plugin(local, remote, "explain", "pod", remote_pod, "-n", namespace)
    _show_plugin(local, remote, "status")

    _step("Stateful pods: claims of the virtual StorageClass 'kube-offload' follow their pods (provisioned by "
          "the remote cluster's own provisioner, the local claim pinned to the virtual node; docs/storage.md)")
    _show(local, "get", "storageclass")

    _top(env, local, remote, namespace, twin, real=real)
    if topology.chart_pods:
        _readiness_round_trip_pods(env, local, remote, namespace)
    else:
        _readiness_round_trip(env, local, remote, namespace)


def _service_call(local: Cluster, remote: Cluster, namespace: str) -> None:
    """A pod on the LOCAL real node calls the offloaded pods through the local Service's
    name: local DNS, the local kube-proxy, then kube-offload's WireGuard gateways to the
    remote node; each answer is written by the remote container that served it, which logs
    the request. The gateways' byte counters, read before and after, show the calls went
    through their tunnel."""
    _step(f"A Service call across the clusters: a local pod calls http://{SERVICE}.{namespace} and offloaded "
          "containers in the remote cluster answer, through kube-offload's gateways (docs/networking.md)")
    for cluster in (local, remote):
        _show(cluster, "get", "pods", "-n", chart_pods.NAMESPACE, "-l", GATEWAY_SELECTOR, "-o", "wide")
    before = _gateway_bytes(local)
    # (a client left by an earlier run may be another pod: a pod's command cannot change)
    local.kubectl("delete", "pod", "-n", CLIENT_NAMESPACE, CLIENT, "--ignore-not-found", "--wait=true", timeout=60)
    local.apply(_client_pod())
    local.kubectl("wait", "-n", CLIENT_NAMESPACE, "--for=condition=Ready", f"pod/{CLIENT}", "--timeout=120s", timeout=130)
    _show(local, "get", "pod", "-n", CLIENT_NAMESPACE, CLIENT, "-o", "wide")
    _show(local, "get", "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={SERVICE}")
    url = f"{SERVICE}.{namespace}"
    for _ in range(3):
        out = _show(local, "exec", "-n", CLIENT_NAMESPACE, CLIENT, "--", "python3", "-c", CALL.format(url=url), check=False)
        if "hello from" not in out:
            raise ClusterError(f"{CLIENT} -> http://{url}: no answer from an offloaded container ({out.strip()})")
    print("\n(and the container logged the requests, seen from the local cluster:)")
    _show(local, "logs", "-n", namespace, "-l", "app=hello", "--tail=2", "--prefix")
    after = _gateway_bytes(local)
    print(f"\n(the local gateway's WireGuard link: received {after[0] - before[0]} and sent {after[1] - before[1]} "
          "bytes during the calls)")
    if after[0] <= before[0] or after[1] <= before[1]:
        raise ClusterError("the calls were answered but the local gateway's link carried nothing: "
                           "they did not cross kube-offload's gateway")


GATEWAY_SELECTOR = "app.kubernetes.io/component=gateway"


def _gateway_bytes(cluster: Cluster) -> tuple[int, int]:
    """(received, sent) bytes of every WireGuard peer of the cluster's gateway pod(s), as
    `wg show all transfer` in the gateway container prints them."""
    pods = cluster.kubectl("get", "pods", "-n", chart_pods.NAMESPACE, "-l", GATEWAY_SELECTOR,
                           "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    if not pods:
        raise ClusterError(f"no gateway pod in {chart_pods.NAMESPACE} ({GATEWAY_SELECTOR})")
    received = sent = 0
    for pod in pods:
        out = _show(cluster, "exec", "-n", chart_pods.NAMESPACE, pod, "--", "wg", "show", "all", "transfer")
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 4 and fields[2].isdigit() and fields[3].isdigit():
                received, sent = received + int(fields[2]), sent + int(fields[3])
    return received, sent


def _top(env: Environment, local: Cluster, remote: Cluster, namespace: str, twin: str, *, real: bool,
         timeout: float = 240) -> None:
    """``kubectl top`` in the local cluster shows the remote figures: metrics-server runs in
    both clusters (scraping the real kubelet, or kwok's usage simulated from the pods'
    annotations), the virtual kubelet serves /metrics/resource built from the remote
    metrics.k8s.io (docs/metrics.md)."""
    _step("Metrics: `kubectl top` on offloaded pods and on the virtual node shows what the remote cluster measures")
    for cluster in (remote, local):
        metrics_server.ensure_running(env, cluster)
    node = virtual_node_name(remote.spec.cluster_id)
    print("(waiting for the first samples: metrics-server on each side resolves every 15 s; "
          + ("the remote one scrapes the real kubelet" if real else "kwok simulates the usage") + ")", flush=True)
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
    print("(the virtual kubelet is restarted to reach its remote API server through a link on 127.0.0.1 "
          "that the demo cuts; --ping-timeout 5s instead of 20s)")
    with vkubelet_behind_link(env, remote.spec, ["--ping-interval", "1s", "--ping-timeout", "5s"]) as link:
        _cut_and_heal(local, remote, namespace, link, cut="link cut: the remote API server no longer answers the "
                      "virtual kubelet", healed="link healed", timeouts=(60, 60, 60, 60))


def _readiness_round_trip_pods(env: Environment, local: Cluster, remote: Cluster, namespace: str) -> None:
    """The same round trip when the vkubelet is a pod: the path from the local real node's
    pods to the remote API server is cut in the node's network namespace (partition.py),
    and the vkubelet notices within its chart's ping timeout."""
    _step("Cut the network between the virtual kubelet's pod and the remote cluster: the node turns NotReady and "
          "its pods not Ready (Services stop sending them traffic); heal it: Ready again, as the remote pods say")
    with vkubelet_pod_partition(env, remote.spec) as partition:
        _cut_and_heal(local, remote, namespace, partition,
                      cut=f"cut: in the local node's network namespace, {partition.netns}, packets of its pods to the "
                          "remote API server are refused (iptables FORWARD); the vkubelet's pings fail for its ping "
                          "timeout (20s)",
                      healed="healed", timeouts=(120, 60, 120, 120))


class _Cuttable(Protocol):
    def cut(self) -> None: ...
    def heal(self) -> None: ...


def _cut_and_heal(local: Cluster, remote: Cluster, namespace: str, path: _Cuttable, *, cut: str, healed: str,
                  timeouts: tuple[float, float, float, float]) -> None:
    """Cut ``path``, wait for the virtual node and then its pods to turn not Ready, show
    them; heal it, wait for both to be Ready again, show them. ``timeouts``: the four waits."""
    node = virtual_node_name(remote.spec.cluster_id)
    node_down, pods_down, node_up, pods_up = timeouts
    path.cut()
    print(f"$ # {cut}")
    _wait_until(lambda: _node_ready(local, node) == "False", "the virtual node NotReady", timeout=node_down)
    _wait_until(lambda: _pods_readiness(local, namespace) == {"False"}, "the pods not Ready", timeout=pods_down)
    _show(local, "get", "node", node)
    _show(local, "get", "pods", "-n", namespace, "-o", PODS_READY)
    path.heal()
    print(f"$ # {healed}")
    _wait_until(lambda: _node_ready(local, node) == "True", "the virtual node Ready again", timeout=node_up)
    _wait_until(lambda: _pods_readiness(local, namespace) == {"True"}, "the pods Ready again", timeout=pods_up)
    _show(local, "get", "node", node)
    _show(local, "get", "pods", "-n", namespace, "-o", PODS_READY)


PODS_READY = ("jsonpath={range .items[*]}{.metadata.name}{'\\t'}Ready={.status.conditions[?(@.type=='Ready')].status}"
              "{'\\t'}{.status.conditions[?(@.type=='Ready')].reason}{'\\n'}{end}")


def _node_ready(local: Cluster, node: str) -> str:
    return local.kubectl("get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                         check=False).stdout.strip()


def _pods_readiness(local: Cluster, namespace: str) -> set[str]:
    out = local.kubectl("get", "pods", "-n", namespace, "-o",
                        "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}", check=False).stdout
    return set(out.split())


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1)


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


def _deployment(namespace: str, replicas: int, *, real: bool) -> dict:
    if real:
        # A web server from busybox: its page names the container that serves it, and -v
        # logs each request, so a call through the Service shows up in `kubectl logs`.
        container = {
            "name": "hello", "image": BUSYBOX,
            "command": ["sh", "-c",
                        'mkdir -p /www; echo "hello from $(hostname), a container in the remote cluster" > /www/index.html; '
                        'echo "$(hostname): serving http on :8080"; exec httpd -f -v -p 8080 -h /www'],
            "ports": [{"containerPort": 8080}],
            # a TCP probe: httpd logs no request for it, so its log shows the Service calls
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }
        annotations: dict[str, str] = {}
    else:
        container = {
            "name": "hello",
            "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
            "args": ["serve-hostname"],
            "ports": [{"containerPort": 8080}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }
        # kwok simulates this usage in the remote cluster (kubectl top, step "Metrics")
        annotations = {metrics_server.USAGE_CPU_ANNOTATION: "30m", metrics_server.USAGE_MEMORY_ANNOTATION: "40Mi"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": {
                "metadata": {"labels": {"app": "hello"}, "annotations": annotations},
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [container]},
            },
        },
    }


def _service(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"selector": {"app": "hello"}, "ports": [{"port": 80, "targetPort": 8080}]}}


def _client_pod() -> dict:
    """A pod of the local cluster, on its real node (which it tolerates), not offloaded."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": CLIENT, "namespace": CLIENT_NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            **chart_pods.real_node_placement(),
            "containers": [{"name": "client", "image": PYTHON,
                            "command": ["python3", "-c", "import time; time.sleep(86400)"]}],
        },
    }


def _wait_recreated(remote: Cluster, namespace: str, name: str, old_uid: str, timeout: float = 120) -> None:
    """Until the enforcer's new copy of ``name`` (another UID) runs and is Ready."""
    def recreated() -> bool:
        result = remote.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
        if result.returncode != 0:
            return False
        pod = json.loads(result.stdout)
        return pod["metadata"]["uid"] != old_uid and not pod["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])

    print(f"  (waiting for the enforcer's new {name} to run)", flush=True)
    _wait_until(recreated, f"the enforcer to recreate {namespace}/{name}", timeout=timeout)


def _wait_running(cluster: Cluster, namespace: str, count: int, timeout: float = 120) -> None:
    """Until ``count`` pods of ``namespace`` are Running and Ready."""
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace).get("items") or []
        ready = sum(1 for pod in pods if pod["status"].get("phase") == "Running" and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []))
        print(f"\r  {ready}/{count} pods Running and Ready", end="", flush=True)
        if ready >= count:
            print()
            return
        time.sleep(1)
    print()
    raise ClusterError(f"only {ready}/{count} pods Running and Ready in {namespace} after {timeout:.0f}s")
