"""High availability of the vkubelet (docs/high-availability.md) on the shared loopback
environment: a second vkubelet for the same remote cluster (same flags, its own kubelet
and health ports) waits as a standby while the harness's one holds the Lease
kube-offload-vkubelet-<cluster-id>; killing the leader with SIGKILL in the middle of a
burst hands over within the lease duration, with no pod lost or duplicated and the
virtual node's kubelet endpoint written by the leader only.

The environment is shared by the whole session: the test stops its standby and brings the
harness's vkubelet back (leading again) in ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid

from kube_offload import constants as c
from kube_offload.runtime import leader_election as le
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment, free_port
from kube_offload_harness.identities import RELEASE_NAMESPACE

LOCAL_ID = "local"
IMAGE = "registry.k8s.io/pause:3.10"
BURST = 40


def node_name(remote: Cluster) -> str:
    return f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"


def lease_name(remote: Cluster) -> str:
    return f"{c.VKUBELET_LEADER_LEASE_PREFIX}{remote.spec.cluster_id}"


def lease(local: Cluster, remote: Cluster) -> dict:
    return local.kubectl_json("get", "lease", "-n", RELEASE_NAMESPACE, lease_name(remote))


def enforcer_lease(remote: Cluster) -> dict:
    return remote.kubectl_json("get", "lease", "-n", RELEASE_NAMESPACE, c.ENFORCER_LEADER_LEASE)


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?verbose", timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def kubelet_port_of_node(local: Cluster, remote: Cluster) -> int:
    node = local.kubectl_json("get", "node", node_name(remote))
    return node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]


def running(items: list[dict], node: str | None = None) -> list[dict]:
    return [p for p in items if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp") and (node is None or p["spec"].get("nodeName") == node)]


def pods(cluster: Cluster, namespace: str) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", namespace)["items"]


def shadowpods(remote: Cluster, namespace: str) -> list[dict]:
    return remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", namespace)["items"]


def test_killing_the_leader_vkubelet_hands_over_without_lost_or_duplicated_pods(
    offload_env: Environment, local: Cluster, remote: Cluster, wait
):
    topology = offload_env.topology()
    spec = remote.spec
    leader_name = f"vkubelet-{spec.cluster_id}"
    standby_name = f"{leader_name}-standby"
    standby_kubelet_port, standby_health_port = free_port(), free_port()
    ns = f"vk-ha-{uuid.uuid4().hex[:5]}"
    twin = f"{ns}-{LOCAL_ID}"
    try:
        # The harness's vkubelet leads (it started long before).
        wait(lambda: readyz(spec.vkubelet_health_port)[0] == 200, timeout=60, what="the harness's vkubelet ready")
        before = lease(local, remote)["spec"]
        assert before["holderIdentity"]
        argv = offload_env.vkubelet_argv(topology, spec) + [
            "--kubelet-port", str(standby_kubelet_port), "--health-bind", f"127.0.0.1:{standby_health_port}",
        ]
        offload_env.processes.start(standby_name, argv, log=offload_env.log_path(standby_name), env=offload_env._process_env())

        # Exactly one leads: the standby is live but not ready, and says who holds the Lease.
        def standby_waiting():
            code, text = readyz(standby_health_port)
            return code == 503 and "standby" in text and before["holderIdentity"] in text
        wait(standby_waiting, timeout=30, what="the second vkubelet to report itself a standby")
        with urllib.request.urlopen(f"http://127.0.0.1:{standby_health_port}/healthz", timeout=3) as response:
            assert response.status == 200
        time.sleep(le.RETRY_PERIOD * 2)  # a few election rounds: the standby must not take over
        assert readyz(spec.vkubelet_health_port)[0] == 200
        assert lease(local, remote)["spec"]["holderIdentity"] == before["holderIdentity"]
        # The standby wrote nothing to the node: its kubelet endpoint is the leader's.
        assert kubelet_port_of_node(local, remote) == spec.kubelet_port

        # A burst; kill -9 the leader while it is creating ShadowPods.
        local.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
            c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}}})
        local.apply({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "burst", "namespace": ns},
            "spec": {"replicas": BURST, "selector": {"matchLabels": {"app": "burst"}}, "template": {
                "metadata": {"labels": {"app": "burst"}},
                "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                         "terminationGracePeriodSeconds": 5}}},
        })
        wait(lambda: len(shadowpods(remote, twin)) >= 2, timeout=90, interval=0.2, what="the burst to start")
        record = offload_env.processes.get(leader_name)
        assert record is not None and record.running()
        os.kill(record.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait(lambda: not record.running(), timeout=10, what="the leader to die")
        assert len(shadowpods(remote, twin)) < BURST, "the burst finished before the kill; the test proved nothing"

        # The standby takes the Lease within the lease duration (plus one retry period of
        # observation lag and the poll's own latency).
        def taken():
            spec_now = lease(local, remote)["spec"]
            return spec_now["holderIdentity"] != before["holderIdentity"] and spec_now
        after = wait(taken, timeout=le.LEASE_DURATION + le.RETRY_PERIOD + 5, interval=0.5, what="the standby to take the Lease")
        assert time.monotonic() - killed_at <= le.LEASE_DURATION + le.RETRY_PERIOD + 5
        assert after["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
        wait(lambda: readyz(standby_health_port)[0] == 200, timeout=60, what="the new leader ready")
        # The new leader points the node at its own kubelet API, once.
        wait(lambda: kubelet_port_of_node(local, remote) == standby_kubelet_port, timeout=30, what="the node's kubelet endpoint")

        node = node_name(remote)

        def converged():
            local_pods = running(pods(local, ns), node)
            remote_pods = running(pods(remote, twin))
            shps = shadowpods(remote, twin)
            return len(local_pods) == BURST and len(remote_pods) == BURST and len(shps) == BURST and (local_pods, remote_pods, shps)

        local_pods, remote_pods, shps = wait(converged, timeout=240, interval=2, what=f"{BURST} local = remote = ShadowPods")
        local_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in local_pods}
        # Nothing lost, nothing duplicated: one ShadowPod and one remote pod per local pod.
        assert {s["metadata"]["name"]: s["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] for s in shps} == local_uids
        assert sorted(p["metadata"]["name"] for p in remote_pods) == sorted(local_uids)
        # The node never pointed back at the dead leader's port after the takeover.
        assert kubelet_port_of_node(local, remote) == standby_kubelet_port
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        # Back to the harness's single vkubelet: the standby (now leader) releases the
        # Lease on SIGTERM, so the restarted one takes it at once.
        offload_env.processes.stop(standby_name)
        record = offload_env.processes.get(leader_name)
        if record is None or not record.running():
            offload_env.start_vkubelet(topology, spec)
        wait(lambda: readyz(spec.vkubelet_health_port)[0] == 200, timeout=90, what="the harness's vkubelet leading again")
        wait(lambda: kubelet_port_of_node(local, remote) == spec.kubelet_port, timeout=30, what="the node's kubelet endpoint restored")
        offload_env.wait_virtual_node_ready(local, spec)


def test_lease_is_apart_from_the_node_heartbeat(local: Cluster, remote: Cluster):
    # The election Lease lives in the release namespace; the node's own Lease stays in
    # kube-node-lease, named after the node.
    election = lease(local, remote)
    assert election["metadata"]["namespace"] == RELEASE_NAMESPACE
    heartbeat = local.kubectl_json("get", "lease", "-n", "kube-node-lease", node_name(remote))
    assert heartbeat["spec"]["holderIdentity"] != election["spec"]["holderIdentity"]
    assert json.dumps(election["spec"]["leaseDurationSeconds"]) == str(int(le.LEASE_DURATION))


def test_killing_the_leader_enforcer_hands_over_to_the_standby(offload_env: Environment, local: Cluster, remote: Cluster, wait):
    spec = remote.spec
    leader_name = f"enforcer-{spec.cluster_id}"
    standby_name = f"{leader_name}-standby"
    standby_health_port = free_port()
    ns = f"enf-ha-{uuid.uuid4().hex[:5]}"
    twin = f"{ns}-{LOCAL_ID}"
    try:
        wait(lambda: readyz(spec.enforcer_health_port)[0] == 200, timeout=60, what="the harness's enforcer ready")
        before = enforcer_lease(remote)["spec"]
        assert before["holderIdentity"]
        # One offloaded pod, created while the leader serves the ShadowPod webhook (the
        # harness registers it on the leader's port).
        local.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
            c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}}})
        local.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "namespace": ns},
                     "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 0}})
        [first] = wait(lambda: running(pods(remote, twin)), timeout=90, what="the remote pod Running")

        argv = offload_env._component_argv(
            "enforcer", "--kubeconfig", str(offload_env.component_kubeconfig(remote, identities.ENFORCER_SA)),
            "--consumer-twin-role", identities.CONSUMER_TWIN_ROLE,
            "--webhook-bind", f"127.0.0.1:{free_port()}",
            "--webhook-tls-cert", str(offload_env.pki_dir / "tls.crt"), "--webhook-tls-key", str(offload_env.pki_dir / "tls.key"),
            "--health-bind", f"127.0.0.1:{standby_health_port}",
        )
        offload_env.processes.start(standby_name, argv, log=offload_env.log_path(standby_name), env=offload_env._process_env())

        def standby_waiting():
            code, text = readyz(standby_health_port)
            return code == 503 and "standby" in text and before["holderIdentity"] in text
        wait(standby_waiting, timeout=30, what="the second enforcer to report itself a standby")
        time.sleep(le.RETRY_PERIOD * 2)
        assert enforcer_lease(remote)["spec"]["holderIdentity"] == before["holderIdentity"]
        assert readyz(spec.enforcer_health_port)[0] == 200

        record = offload_env.processes.get(leader_name)
        assert record is not None and record.running()
        os.kill(record.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait(lambda: not record.running(), timeout=10, what="the leader enforcer to die")

        def taken():
            now = enforcer_lease(remote)["spec"]
            return now["holderIdentity"] != before["holderIdentity"] and now
        after = wait(taken, timeout=le.LEASE_DURATION + le.RETRY_PERIOD + 5, interval=0.5, what="the standby to take the Lease")
        assert time.monotonic() - killed_at <= le.LEASE_DURATION + le.RETRY_PERIOD + 5
        assert after["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
        wait(lambda: readyz(standby_health_port)[0] == 200, timeout=60, what="the new leader enforcer ready")

        # The new leader runs the ShadowPod controller: a deleted remote pod comes back,
        # once, under the same ShadowPod.
        remote.kubectl("delete", "pod", first["metadata"]["name"], "-n", twin, "--wait=false")

        def recreated():
            live = running(pods(remote, twin))
            return len(live) == 1 and live[0]["metadata"]["uid"] != first["metadata"]["uid"] and live
        wait(recreated, timeout=90, what="the remote pod recreated by the new leader")
        assert len(shadowpods(remote, twin)) == 1
        assert len([p for p in pods(remote, twin) if not p["metadata"].get("deletionTimestamp")]) == 1
    finally:
        offload_env.processes.stop(standby_name)  # releases the Lease if it leads
        record = offload_env.processes.get(leader_name)
        if record is None or not record.running():
            offload_env.start_enforcer(spec)
        wait(lambda: readyz(spec.enforcer_health_port)[0] == 200, timeout=90, what="the harness's enforcer leading again")
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
