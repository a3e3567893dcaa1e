"""``kubectl offload explain`` and ``kubectl offload status`` end to end, on the shared
loopback environment (conftest.py): the real kubectl runs the real ``kubectl-offload``
executable as a plugin (found on PATH, as kubectl finds plugins), against the real local
and remote control planes, with the components running as the harness starts them.

The remote cluster is reached with ``--remote-kubeconfig remote-1=<admin kubeconfig>``
(the harness runs no chart Deployments), except in the test that stores the consumer's
own kubeconfig in the Secret ``kube-offload peer`` writes, which the plugin must find by
itself and use with the consumer's least privilege.

Each test uses its own namespace and removes it; the tests that freeze the remote API
server or stop the virtual kubelet put them back in ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import offloaded_namespace

LOCAL_ID = "local"  # the harness's local cluster id (default_topology)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
PLUGIN = Path(sys.executable).parent / "kubectl-offload"


def vnode(remote: Cluster) -> str:
    return f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"


def plugin(local: Cluster, remote: Cluster | None, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """``kubectl offload ARGS`` as a user runs it: kubectl finds kubectl-offload on PATH."""
    assert PLUGIN.exists(), f"{PLUGIN} is not installed: pip install -e . (scripts/bootstrap.sh) creates it"
    env = local.env()
    env["PATH"] = os.pathsep.join([str(PLUGIN.parent), env["PATH"]])
    env.pop("KUBECONFIG", None)
    argv = [str(local.bins.kubectl), "offload", *args, "--kubeconfig", str(local.kubeconfig)]
    if remote is not None:
        argv += ["--remote-kubeconfig", f"{remote.spec.cluster_id}={remote.kubeconfig}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def plugin_json(local: Cluster, remote: Cluster | None, *args: str, expect: int = 0) -> dict:
    result = plugin(local, remote, *args, "-o", "json")
    assert result.returncode == expect, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def pod_manifest(ns: str, name: str, cpu: str = "10m", **spec) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}],
                 "terminationGracePeriodSeconds": 2, **spec},
    }


def phase(local: Cluster, ns: str, name: str) -> str:
    return local.kubectl_json("get", "pod", "-n", ns, name).get("status", {}).get("phase", "")


def unschedulable(local: Cluster, ns: str, name: str) -> bool:
    conditions = local.kubectl_json("get", "pod", "-n", ns, name).get("status", {}).get("conditions") or []
    return any(cd["type"] == "PodScheduled" and cd["status"] == "False" for cd in conditions)


def drop(local: Cluster, name: str) -> None:
    local.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def node_row(doc: dict, remote: Cluster) -> dict:
    return next(n for n in doc["nodes"] if n["name"] == vnode(remote))


# --- explain ---------------------------------------------------------------------------------
def test_explain_a_pod_that_runs_remotely(local, remote, wait):
    ns = unique("ex-remote")
    offloaded_namespace(local, ns)
    try:
        local.apply(pod_manifest(ns, "web"))
        wait(lambda: phase(local, ns, "web") == "Running", timeout=90, what="the offloaded pod Running")
        doc = plugin_json(local, remote, "explain", "pod", "web", "-n", ns)

        assert doc["pod"]["node"] == vnode(remote)
        assert doc["policy"]["state"] == "offloaded" and doc["policy"]["twinNamespace"] == f"{ns}-{LOCAL_ID}"
        assert doc["webhook"]["detail"] == "already applied: the pod carries everything the webhook adds"
        links = doc["chain"]["links"]
        assert [link["kind"] for link in links] == ["Pod (local)", "ShadowPod", "Pod (remote)", "Node (remote)"]
        assert [link["phase"] for link in links[:3]] == ["Running", "Running", "Running"]
        remote_pod = remote.kubectl_json("get", "pod", "-n", f"{ns}-{LOCAL_ID}", "web")
        assert links[3]["name"] == remote_pod["spec"]["nodeName"]
        assert doc["summary"].startswith(f"runs remotely on virtual node {vnode(remote)}")
        assert "Scheduled" in {e["reason"] for e in doc["events"]["remote"]}  # (the enforcer records no routine PodCreated)
        port = local.kubectl_json("get", "node", vnode(remote))["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        assert doc["logs"]["endpoint"] == f"https://127.0.0.1:{port}/containerLogs/{ns}/web/app"
        assert node_row(doc, remote)["bound"] is True

        # Text for a pipe: stable, no colour, no progress on stderr.
        text = plugin(local, remote, "explain", "pod", "web", "-n", ns)
        assert text.returncode == 0 and "\x1b" not in text.stdout and text.stderr == ""
        assert f"Offloaded to cluster {remote.spec.cluster_id} (twin namespace {ns}-{LOCAL_ID})" in text.stdout
    finally:
        drop(local, ns)


def test_explain_a_pod_pending_for_lack_of_remote_capacity(local, remote, wait):
    ns = unique("ex-big")
    offloaded_namespace(local, ns)
    try:
        # 5 cpu: within the virtual node's allocatable (90 % of 2 x 4 cpu), beyond every remote node.
        local.apply(pod_manifest(ns, "big", cpu="5"))
        wait(lambda: unschedulable(local, ns, "big"), timeout=60, what="the scheduler to give up on the pod")
        doc = plugin_json(local, remote, "explain", "pod", "big", "-n", ns)
        row = node_row(doc, remote)
        assert (row["fits"], row["check"]) == (False, "remote-capacity")
        assert "no remote node can fit the pod" in row["reason"] and "insufficient cpu: requested 5" in row["reason"]
        assert all(n["check"] == "placement" for n in doc["nodes"] if n["kind"] == "physical")
        assert doc["summary"].startswith("Pending: no node fits")
        assert "no remote node can fit the pod" in doc["pod"]["schedulerMessage"]  # the scheduler agrees
        assert doc["chain"] is None
    finally:
        drop(local, ns)


def test_explain_a_pod_refused_by_policy(local, remote, wait):
    ns = unique("ex-sel")
    offloaded_namespace(local, ns, selector="topology.kubernetes.io/region=mars")
    try:
        local.apply(pod_manifest(ns, "lost"))
        wait(lambda: unschedulable(local, ns, "lost"), timeout=60, what="the scheduler to give up on the pod")
        doc = plugin_json(local, remote, "explain", "pod", "lost", "-n", ns)
        row = node_row(doc, remote)
        assert (row["fits"], row["check"]) == (False, "placement")
        assert 'does not match the cluster selector "topology.kubernetes.io/region=mars"' in row["reason"]
        assert not any(n["fits"] for n in doc["nodes"])
        assert doc["policy"]["clusterSelector"] == "topology.kubernetes.io/region=mars"
    finally:
        drop(local, ns)


def test_explain_a_pod_the_provider_refused(local, remote, wait):
    ns = unique("ex-host")
    offloaded_namespace(local, ns)
    try:
        local.apply(pod_manifest(ns, "hostnet", hostNetwork=True))

        def refused():
            doc = plugin_json(local, remote, "explain", "pod", "hostnet", "-n", ns)
            return "ProviderRefused" in doc["summary"] and doc

        doc = wait(refused, timeout=60, interval=2, what="explain to report the provider's refusal")
        shadowpod = doc["chain"]["links"][1]
        assert (shadowpod["kind"], shadowpod["phase"]) == ("ShadowPod", "missing")
        assert "spec.pod.spec.hostNetwork" in doc["summary"]
    finally:
        drop(local, ns)


def test_explain_in_a_namespace_that_is_not_offloaded(local, remote, wait, tmp_path):
    ns = unique("ex-plain")
    local.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {}}})
    try:
        manifest = tmp_path / "pod.yaml"
        manifest.write_text(yaml.safe_dump(pod_manifest(ns, "home")))
        planned = plugin_json(local, remote, "explain", "-f", str(manifest))
        assert planned["pod"]["created"] is False
        assert planned["policy"]["state"] == "not-offloaded" and planned["webhook"]["patch"] == []
        row = node_row(planned, remote)
        assert (row["fits"], row["check"]) == (False, "taints")
        assert row["reason"] == f"untolerated taint {c.TAINT_KEY}={c.TAINT_VALUE}:{c.TAINT_EFFECT}"
        assert all(n["fits"] for n in planned["nodes"] if n["kind"] == "physical")

        local.apply(pod_manifest(ns, "home"))
        wait(lambda: phase(local, ns, "home") == "Running", timeout=60, what="the local pod Running")
        doc = plugin_json(local, remote, "explain", "pod", "home", "-n", ns)
        assert doc["summary"] == f"runs locally on node {doc['pod']['node']}" and doc["chain"] is None
    finally:
        drop(local, ns)


# --- status ----------------------------------------------------------------------------------
def _row(doc: dict, remote: Cluster) -> dict:
    return next(r for r in doc["remotes"] if r["cluster"] == remote.spec.cluster_id)


def test_status_of_a_healthy_remote(local, remote, wait):
    ns = unique("st-ok")
    offloaded_namespace(local, ns)
    try:
        local.apply(pod_manifest(ns, "one"))
        wait(lambda: phase(local, ns, "one") == "Running", timeout=90, what="the offloaded pod Running")
        doc = plugin_json(local, remote, "status")
        row = _row(doc, remote)
        assert doc["localClusterId"] == LOCAL_ID and doc["healthy"] is True
        assert (row["health"], row["problems"]) == ("healthy", [])
        assert row["ready"] == "True" and row["remoteApi"] == "reachable" and row["heartbeatAge"] < 40
        assert row["advertised"]["cpu"] and row["remoteFree"]["cpu"] and row["remoteFreeSource"] == "provider"
        assert row["pods"].get("Running", 0) >= 1
        assert {"name": f"{ns}-{LOCAL_ID}", "localNamespace": ns, "phase": "Ready"}.items() <= next(
            t for t in row["twins"] if t["name"] == f"{ns}-{LOCAL_ID}").items()
        assert row["reflected"] is not None and row["vkubeletMetrics"] == "n/a"

        text = plugin(local, remote, "status")
        assert text.returncode == 0 and "\x1b" not in text.stdout and text.stderr == ""
        assert text.stdout.splitlines()[-1] == "1 remote(s): all healthy"
    finally:
        drop(local, ns)


def test_status_finds_the_consumer_kubeconfig_secret_by_itself(offload_env: Environment, local, remote):
    """What `kube-offload peer` leaves in the local cluster, read with the consumer's own
    (least-privilege) identity: no --remote-kubeconfig, no --local-cluster-id."""
    kubeconfig = offload_env.identity_kubeconfig(remote, identities.consumer_sa(LOCAL_ID))
    secret = f"{remote.spec.cluster_id}-kubeconfig"
    local.kubectl("create", "secret", "generic", secret, "-n", identities.RELEASE_NAMESPACE,
                  f"--from-file=kubeconfig={kubeconfig}")
    try:
        doc = plugin_json(local, None, "status")
        row = _row(doc, remote)
        assert doc["localClusterId"] == LOCAL_ID  # from the consumer identity's own name
        assert row["remoteApi"] == "reachable" and row["health"] == "healthy", row
        # The consumer's rights are enough for everything status reads.
        assert row["reflected"] is not None and not [w for w in row["warnings"] if "not allowed" in w], row["warnings"]
    finally:
        local.kubectl("delete", "secret", secret, "-n", identities.RELEASE_NAMESPACE, "--ignore-not-found", check=False)


def _apiserver_pid(offload_env: Environment, remote: Cluster) -> int:
    path = offload_env.state_dir / "kwok" / "clusters" / remote.name / "pids" / "kube-apiserver.pid"
    return int(path.read_text().strip())


def test_status_with_a_frozen_remote_api_server(offload_env, local, remote):
    pid = _apiserver_pid(offload_env, remote)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        doc = plugin_json(local, remote, "status", "--request-timeout", "3s", expect=1)
        # A few bounded waits for the frozen provider (its identity, then /version, no
        # retried reads), not one per object: 3 s each.
        assert time.monotonic() - started < 20
    finally:
        os.kill(pid, signal.SIGCONT)
    row = _row(doc, remote)
    assert row["remoteApi"] == "unreachable" and row["health"] == "unhealthy"
    assert any(p.startswith(f"provider {remote.spec.cluster_id}: unreachable from here") for p in row["problems"]), row
    assert doc["healthy"] is False


def test_status_with_the_virtual_kubelet_stopped(offload_env: Environment, local, remote, wait):
    record = offload_env.processes.get(f"vkubelet-{remote.spec.cluster_id}")
    assert record is not None, "the harness did not start a vkubelet"
    os.kill(record.pid, signal.SIGTERM)
    try:
        wait(lambda: not record.running(), timeout=15, what="the vkubelet to exit")

        def unhealthy():
            result = plugin(local, remote, "status", "-o", "json")
            return result.returncode == 1 and json.loads(result.stdout)

        # The node's Ready condition is the last one the vkubelet wrote; its Lease ages.
        doc = wait(unhealthy, timeout=120, interval=3, what="status to report the stopped virtual kubelet")
        row = _row(doc, remote)
        assert row["health"] == "unhealthy"
        assert any("heartbeat is stale" in p or "is not Ready" in p for p in row["problems"]), row["problems"]
    finally:
        offload_env.start_vkubelet(offload_env.topology(), remote.spec)
    wait(lambda: plugin(local, remote, "status").returncode == 0, timeout=90, interval=2,
         what="status healthy again once the virtual kubelet is back")
