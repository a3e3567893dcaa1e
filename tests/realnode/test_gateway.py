"""kube-offload's own network fabric on real nodes (docs/networking.md): the gateways run as
pods of both charts, made by `kube-offload peer --gateway`, and carry every cross-cluster
call between two clusters that hand out the SAME pod CIDR; the harness joins nothing by
hand (its only part: a UDP relay on each node link's machine end, the stand-in for a UDP
load balancer in front of a gateway's Service).

One charts-as-pods environment for the module (the `cluster up --real-nodes true` shape).
Checked: the gateways' pods, identities and keys (each private key only in its own
cluster); a local pod calls an offloaded pod by Service name and by pod IP, and an
offloaded pod calls a local Service, by name; the gateway pods deleted (both sides): the
calls work again with nothing redone; the link between the clusters cut and healed; the
keys rotated by one run of peer; the route agent on every real node.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import time
from typing import Iterator

import pytest

from kube_offload import constants as C
from kube_offload import fabric as fb
from kube_offload import peering as p
from kube_offload_harness import chart_pods, fabric_gateways, netns, peer_driver
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.standin_recipe import BUSYBOX_IMAGE, PYTHON_IMAGE

from .conftest import charts_as_pods_topology, environment, local_and_remote
from support.waiting import wait_for

NAMESPACE = chart_pods.NAMESPACE
OFFLOADED = "fabric"
LOCAL_SERVICE_NS = "fabric-home"


@pytest.fixture(scope="module")
def env(tmp_path_factory, request) -> Iterator[Environment]:
    yield from environment(tmp_path_factory, request, charts_as_pods_topology("gw"))


def _gateway_pod(cluster: Cluster) -> dict | None:
    """The gateway's pod (None while there is not exactly one that is not being deleted)."""
    pods = [q for q in cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=gateway")["items"]
            if not q["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


def _ready_gateway(cluster: Cluster) -> dict | None:
    pod = _gateway_pod(cluster)
    if pod is None:
        return None
    statuses = pod["status"].get("containerStatuses") or []
    return pod if pod["status"].get("phase") == "Running" and statuses and all(s["ready"] for s in statuses) else None


def _config(cluster: Cluster, name: str) -> dict:
    return cluster.kubectl_json("get", "configmap", name, "-n", NAMESPACE).get("data") or {}


def _names(env: Environment) -> tuple[str, str]:
    topology = env.topology()
    fullname = p.chart_fullname(p.DEFAULT_RELEASE)
    return fb.gateway_name(fullname, topology.remotes[0].cluster_id), fb.gateway_name(fullname, topology.local.cluster_id)


@pytest.fixture(scope="module")
def workloads(env: Environment) -> dict[str, str]:
    """An offloaded HTTP server behind a local Service, a local HTTP server behind a local
    Service in an offloaded namespace (reflected to the remote), and a local client."""
    local, _ = local_and_remote(env)
    for namespace, placement in ((OFFLOADED, C.PLACEMENT_REMOTE), (LOCAL_SERVICE_NS, C.PLACEMENT_LOCAL)):
        local.kubectl("create", "namespace", namespace)
        local.kubectl("label", "namespace", namespace, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={placement}")
    serve = "mkdir -p /www; echo {text} > /www/index.html; exec httpd -f -v -p 8080 -h /www"
    offloaded = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "far", "namespace": OFFLOADED, "labels": {"app": "far"}},
                 "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                     "name": "main", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", serve.format(text="far-away")],
                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
    home = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "near", "namespace": LOCAL_SERVICE_NS, "labels": {"app": "near"}},
            "spec": {**chart_pods.real_node_placement(), "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "main", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", serve.format(text="at-home")]}]}}
    client = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": "default"},
              "spec": {**chart_pods.real_node_placement(), "terminationGracePeriodSeconds": 1,
                       "containers": [{"name": "main", "image": PYTHON_IMAGE,
                                       "command": ["python3", "-c", "import time; time.sleep(3600)"]}]}}
    services = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                 "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}
                for name, namespace in (("far", OFFLOADED), ("near", LOCAL_SERVICE_NS))]
    local.apply([offloaded, home, client, *services])
    for pod, namespace in (("far", OFFLOADED), ("near", LOCAL_SERVICE_NS), ("client", "default")):
        local.kubectl("wait", "--for=condition=Ready", f"pod/{pod}", "-n", namespace, "--timeout=180s", timeout=190)
    # The offloaded side's caller: a second container image would cost a pull; the offloaded
    # busybox has wget.
    return {"far_ip": local.kubectl_json("get", "pod", "far", "-n", OFFLOADED)["status"]["podIP"]}


CALL = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode(), end='')"


def _local_call(env: Environment, url: str, timeout: float = 5) -> str | None:
    local, _ = local_and_remote(env)
    result = local.kubectl("exec", "-n", "default", "client", "--", "python3", "-c", CALL, url, str(timeout), check=False,
                           timeout=timeout + 30)
    return result.stdout.strip() if result.returncode == 0 else None


def _offloaded_call(env: Environment, target: str, timeout: int = 5) -> str | None:
    """From the offloaded pod (busybox wget), through the local kubectl exec."""
    local, _ = local_and_remote(env)
    # busybox's `timeout`, not wget's -T: the stand-in busybox's wget dies of SIGSEGV with -T
    result = local.kubectl("exec", "-n", OFFLOADED, "far", "--", "timeout", str(timeout), "wget", "-q", "-O", "-", target,
                           check=False, timeout=timeout + 30)
    return result.stdout.strip() if result.returncode == 0 else None


def _twin_of_local_service_ns(env: Environment) -> str:
    """The local Service's namespace as the remote cluster names it (its twin, where the
    virtual kubelet reflects the Service): the name an offloaded pod calls it by."""
    return C.twin_namespace_name(LOCAL_SERVICE_NS, env.topology().local.cluster_id)


def _all_calls(env: Environment, far_ip: str) -> dict[str, str | None]:
    return {
        "local -> offloaded by Service name": _local_call(env, f"http://far.{OFFLOADED}.svc.{rc.CLUSTER_DOMAIN}"),
        "local -> offloaded by pod IP": _local_call(env, f"http://{far_ip}:8080"),
        "offloaded -> local Service by name": _offloaded_call(env, f"http://near.{_twin_of_local_service_ns(env)}"),
    }


EXPECTED = {"local -> offloaded by Service name": "far-away", "local -> offloaded by pod IP": "far-away",
            "offloaded -> local Service by name": "at-home"}


def _calls_work(env: Environment, far_ip: str, timeout: float = 120) -> None:
    last: dict[str, str | None] = {}

    def ok() -> bool:
        last.update(_all_calls(env, far_ip))
        return last == EXPECTED

    try:
        wait_for(ok, timeout=timeout, interval=2, what="every cross-cluster call answered")
    except pytest.fail.Exception:
        pytest.fail(f"not every cross-cluster call was answered in {timeout:g}s: last answers {last} (expected {EXPECTED})")


# --- the gateways ---------------------------------------------------------------------------------
def test_the_two_clusters_hand_out_the_same_pod_cidr(env: Environment) -> None:
    topology = env.topology()
    assert env.real_node(topology.local).plan.pod_cidr == env.real_node(topology.remotes[0]).plan.pod_cidr


def test_the_gateways_run_as_pods_with_net_admin_only_and_keep_their_keys_home(env: Environment) -> None:
    local, remote = local_and_remote(env)
    local_name, remote_name = _names(env)
    keys = {}
    for cluster, name, spec in ((local, local_name, env.topology().local), (remote, remote_name, env.topology().remotes[0])):
        pod = wait_for(lambda: _ready_gateway(cluster), timeout=120, interval=2,  # noqa: B023 (called in this iteration)
                       what=f"the gateway pod of {cluster.name} Ready")
        assert pod["spec"]["nodeName"] == env.real_node(spec).plan.node_name
        assert pod["spec"]["hostNetwork"] is True and pod["spec"]["serviceAccountName"] == name
        [container] = pod["spec"]["containers"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
        secret = cluster.kubectl_json("get", "secret", f"{name}-key", "-n", NAMESPACE)
        keys[cluster.name] = base64.b64decode(secret["data"][fb.PRIVATE_KEY]).decode()
    # each side holds the other's public key; no private key is anywhere in the other cluster
    local_config, remote_config = _config(local, local_name), _config(remote, remote_name)
    assert local_config[fb.PEER_PUBLIC_KEY] == remote_config[fb.PUBLIC_KEY]
    assert remote_config[fb.PEER_PUBLIC_KEY] == local_config[fb.PUBLIC_KEY]
    for cluster, other in ((local, remote), (remote, local)):
        everything = cluster.kubectl("get", "secrets,configmaps", "-A", "-o", "yaml").stdout
        private = keys[other.name]
        assert private not in everything and base64.b64encode(private.encode()).decode() not in everything
    # the endpoints are the relays on the harness's own node links
    remote_endpoint, local_endpoint = fabric_gateways.endpoints(env, env.topology(), env.topology().remotes[0])
    assert local_config[fb.PEER_ENDPOINT] == remote_endpoint and remote_config[fb.PEER_ENDPOINT] == local_endpoint
    assert remote_endpoint.startswith("172.31.250.") and local_endpoint.startswith("172.31.250.")


def _route_agent_ready(cluster: Cluster) -> bool:
    [daemonset] = cluster.kubectl_json("get", "daemonsets", "-n", NAMESPACE, "-l",
                                       "app.kubernetes.io/component=gateway-routes")["items"]
    status = daemonset["status"]
    return status.get("numberReady", 0) >= 1 and status["numberReady"] == status["desiredNumberScheduled"]


def test_the_route_agent_runs_on_every_real_node(env: Environment) -> None:
    for cluster in local_and_remote(env):
        wait_for(lambda: _route_agent_ready(cluster), timeout=120, interval=2,  # noqa: B023 (called in this iteration)
                 what=f"the route agent Ready on {cluster.name}")


# --- the calls ----------------------------------------------------------------------------------
def test_calls_cross_the_clusters_both_ways_through_the_gateways(env: Environment, workloads: dict[str, str]) -> None:
    spec = env.topology().remotes[0]
    remapped = ipaddress.ip_network(fabric_gateways.remapped_pod_cidr(env.real_node(spec).plan.slot))
    assert ipaddress.ip_address(workloads["far_ip"]) in remapped  # the address the local cluster shows
    _calls_work(env, workloads["far_ip"])
    # it went through the local gateway's WireGuard link: bytes came in on it (the kernel's
    # counters of the link the gateway pod made in the node's namespace)
    plan = env.real_node(env.topology().local).plan
    stats = netns.in_netns(plan.netns, ["ip", "-s", "-j", "link", "show", "dev", fb.interface_name(spec.cluster_id)]).stdout
    [link] = json.loads(stats)
    assert link["stats64"]["rx"]["bytes"] > 0 and link["stats64"]["tx"]["bytes"] > 0, link


def test_the_gateway_pods_restarted_and_the_calls_resume(env: Environment, workloads: dict[str, str]) -> None:
    for cluster in local_and_remote(env):
        old = wait_for(lambda: _ready_gateway(cluster), timeout=60, what="the gateway pod")  # noqa: B023
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=gateway", "--wait=true", timeout=120)
        wait_for(lambda: (_ready_gateway(cluster) or old)["metadata"]["uid"] != old["metadata"]["uid"],  # noqa: B023
                 timeout=120, what="a new gateway pod Ready")
    _calls_work(env, workloads["far_ip"], timeout=180)


def test_a_cut_link_stops_the_calls_and_healing_it_brings_them_back(env: Environment, workloads: dict[str, str]) -> None:
    topology = env.topology()
    local_plan = env.real_node(topology.local).plan
    remote_endpoint, local_endpoint = fabric_gateways.endpoints(env, topology, topology.remotes[0])
    host, port = remote_endpoint.rsplit(":", 1)
    local_port = local_endpoint.rsplit(":", 1)[1]
    # what the local node sends to the remote gateway, and what reaches it from the other side
    rules = [["OUTPUT", "-p", "udp", "-d", host, "--dport", port], ["INPUT", "-p", "udp", "--dport", local_port]]
    comment = ["-m", "comment", "--comment", "kube-offload-test-cut"]
    for rule in rules:
        netns.in_netns(local_plan.netns, ["iptables-nft", "-w", "-I", *rule, *comment, "-j", "DROP"])
    try:
        assert _local_call(env, f"http://{workloads['far_ip']}:8080", timeout=3) is None
        assert _offloaded_call(env, f"http://near.{_twin_of_local_service_ns(env)}", timeout=3) is None
    finally:
        for rule in rules:
            netns.in_netns(local_plan.netns, ["iptables-nft", "-w", "-D", *rule, *comment, "-j", "DROP"], check=False)
    started = time.monotonic()
    _calls_work(env, workloads["far_ip"], timeout=180)
    print(f"calls back {time.monotonic() - started:.1f}s after the link healed")


def test_rotating_the_keys_is_one_run_of_peer(env: Environment, workloads: dict[str, str]) -> None:
    local, remote = local_and_remote(env)
    local_name, remote_name = _names(env)
    before = (_config(local, local_name)[fb.PUBLIC_KEY], _config(remote, remote_name)[fb.PUBLIC_KEY])
    peer_driver.peer(env, env.topology(), env.topology().remotes[0], say=print, extra=("--rotate-gateway-keys",))
    after = (_config(local, local_name)[fb.PUBLIC_KEY], _config(remote, remote_name)[fb.PUBLIC_KEY])
    assert after[0] != before[0] and after[1] != before[1]
    assert _config(local, local_name)[fb.PEER_PUBLIC_KEY] == after[1]
    assert _config(remote, remote_name)[fb.PEER_PUBLIC_KEY] == after[0]
    _calls_work(env, workloads["far_ip"], timeout=120)
