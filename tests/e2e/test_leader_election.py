"""High availability of the vkubelet and the enforcer (docs/high-availability.md) on the
shared loopback environment. A second replica (same flags, ports of its own: see
kube_offload_harness.standby) waits as a standby while the harness's own holds the Lease;
killing the leader with SIGKILL in the middle of a burst hands over within the lease
duration, and every pod still ends 1:1 (local pod <-> ShadowPod <-> remote pod, by UIDs
and owner references): none lost, none duplicated.

The environment is shared by the whole session: each test stops its standby and brings
the harness's process back (leading again, and for the enforcer the ShadowPod webhook
registered at its port again) in ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter

from kube_offload import constants as c
from kube_offload.runtime import leader_election as le
from kube_offload_harness import standby as ha
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.identities import RELEASE_NAMESPACE
from kube_offload_harness.standby import readyz
from support.clusters import offloaded_namespace

LOCAL_ID = "local"
IMAGE = "registry.k8s.io/pause:3.10"
BURST = 40


def start_burst(local: Cluster, ns: str) -> None:
    """An offloaded namespace ``ns`` and a Deployment of BURST pods in it, applied at once."""
    offloaded_namespace(local, ns)
    local.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "burst", "namespace": ns},
        "spec": {"replicas": BURST, "selector": {"matchLabels": {"app": "burst"}}, "template": {
            "metadata": {"labels": {"app": "burst"}},
            "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                     "terminationGracePeriodSeconds": 5}}},
    })


def node_name(remote: Cluster) -> str:
    return f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"


def lease_name(remote: Cluster) -> str:
    return f"{c.VKUBELET_LEADER_LEASE_PREFIX}{remote.spec.cluster_id}"


def lease(local: Cluster, remote: Cluster) -> dict:
    return local.kubectl_json("get", "lease", "-n", RELEASE_NAMESPACE, lease_name(remote))


def enforcer_lease(remote: Cluster) -> dict:
    return remote.kubectl_json("get", "lease", "-n", RELEASE_NAMESPACE, c.ENFORCER_LEADER_LEASE)


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
    leader_name = ha.vkubelet_name(spec)
    standby_name = f"{leader_name}-standby"
    ns = f"vk-ha-{uuid.uuid4().hex[:5]}"
    twin = f"{ns}-{LOCAL_ID}"
    try:
        # The harness's vkubelet leads (it started long before).
        wait(lambda: readyz(spec.vkubelet_health_port)[0] == 200, timeout=60, what="the harness's vkubelet ready")
        before = lease(local, remote)["spec"]
        assert before["holderIdentity"]
        second = ha.start_vkubelet_standby(offload_env, topology, spec)
        assert second.name == standby_name
        standby_kubelet_port, standby_health_port = second.kubelet_port, second.health_port

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
        start_burst(local, ns)
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


def webhook_answers(offload_env: Environment, port: int) -> bool:
    """True if an HTTPS request to the enforcer's webhook port gets any answer in time. A
    standby binds that port but serves nothing on it (its quota ledger is not the
    leader's): the TLS handshake then waits in the backlog and times out."""
    context = ssl.create_default_context(cafile=str(offload_env.pki_dir / "ca.crt"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=context) as response:
            return response.status > 0
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def owner_uid(pod: dict) -> str | None:
    refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return refs[0]["uid"] if len(refs) == 1 and refs[0].get("kind") == "ShadowPod" else None


def test_killing_the_leader_enforcer_during_a_burst_loses_and_duplicates_nothing(
    offload_env: Environment, local: Cluster, remote: Cluster, wait
):
    spec = remote.spec
    leader_name = ha.enforcer_name(spec)
    standby_name = f"{leader_name}-standby"
    ns = f"enf-ha-{uuid.uuid4().hex[:5]}"
    twin = f"{ns}-{LOCAL_ID}"
    try:
        wait(lambda: readyz(spec.enforcer_health_port)[0] == 200, timeout=60, what="the harness's enforcer ready")
        before = enforcer_lease(remote)["spec"]
        assert before["holderIdentity"]
        second = ha.start_enforcer_standby(offload_env, spec)
        assert second.name == standby_name

        def standby_waiting():
            code, text = readyz(second.health_port)
            return code == 503 and "standby" in text and before["holderIdentity"] in text
        wait(standby_waiting, timeout=30, what="the second enforcer to report itself a standby")
        time.sleep(le.RETRY_PERIOD * 2)
        assert enforcer_lease(remote)["spec"]["holderIdentity"] == before["holderIdentity"]
        assert readyz(spec.enforcer_health_port)[0] == 200
        # Only the leader serves the ShadowPod webhook (one quota ledger).
        assert webhook_answers(offload_env, spec.enforcer_webhook_port)
        assert not webhook_answers(offload_env, second.webhook_port)

        # A burst; kill -9 the leader while it is turning ShadowPods into pods.
        start_burst(local, ns)
        wait(lambda: len(pods(remote, twin)) >= 2, timeout=90, interval=0.2, what="the enforcer to start making pods")
        record = offload_env.processes.get(leader_name)
        assert record is not None and record.running()
        os.kill(record.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait(lambda: not record.running(), timeout=10, what="the leader enforcer to die")
        assert len(pods(remote, twin)) < BURST, "the burst finished before the kill; the test proved nothing"

        def taken():
            now = enforcer_lease(remote)["spec"]
            return now["holderIdentity"] != before["holderIdentity"] and now
        after = wait(taken, timeout=le.LEASE_DURATION + le.RETRY_PERIOD + 5, interval=0.5, what="the standby to take the Lease")
        assert time.monotonic() - killed_at <= le.LEASE_DURATION + le.RETRY_PERIOD + 5
        assert after["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
        wait(lambda: readyz(second.health_port)[0] == 200, timeout=60, what="the new leader enforcer ready")
        # Ready means leading with its caches listed: it answers on its webhook port now,
        # and the Service (here: the registration by URL) sends the webhook's calls there.
        assert webhook_answers(offload_env, second.webhook_port)
        ha.route_shadowpod_webhook(offload_env, spec, second.webhook_port)

        node = node_name(remote)

        def converged():
            local_pods = running(pods(local, ns), node)
            remote_pods = [p for p in pods(remote, twin) if not p["metadata"].get("deletionTimestamp")]
            shps = shadowpods(remote, twin)
            return (len(local_pods) == BURST and len(running(remote_pods)) == BURST and len(shps) == BURST
                    and (local_pods, remote_pods, shps))

        local_pods, remote_pods, shps = wait(converged, timeout=240, interval=2, what=f"{BURST} local = remote = ShadowPods")
        # Nothing lost, nothing duplicated: one ShadowPod per local pod (its origin UID) and
        # one remote pod per ShadowPod (its controller ownerReference), none without one.
        local_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in local_pods}
        assert {s["metadata"]["name"]: s["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] for s in shps} == local_uids
        shp_uids = {s["metadata"]["uid"]: s["metadata"]["name"] for s in shps}
        owners = Counter(owner_uid(p) for p in remote_pods)
        assert owners == Counter(dict.fromkeys(shp_uids, 1)), f"remote pods per ShadowPod: {owners}"
        assert all(p["metadata"]["name"] == shp_uids[owner_uid(p)] for p in remote_pods)

        # The new leader runs the ShadowPod controller: a deleted remote pod comes back,
        # once, under the same ShadowPod.
        victim = remote_pods[0]
        remote.kubectl("delete", "pod", victim["metadata"]["name"], "-n", twin, "--wait=false")

        def recreated():
            live = [p for p in running(pods(remote, twin)) if p["metadata"]["name"] == victim["metadata"]["name"]]
            return len(live) == 1 and live[0]["metadata"]["uid"] != victim["metadata"]["uid"] and live[0]
        again = wait(recreated, timeout=90, what="the remote pod recreated by the new leader")
        assert owner_uid(again) == owner_uid(victim)
        assert len(shadowpods(remote, twin)) == BURST
        live = [p for p in pods(remote, twin) if not p["metadata"].get("deletionTimestamp")]
        assert Counter(owner_uid(p) for p in live) == Counter(dict.fromkeys(shp_uids, 1))
    finally:
        offload_env.processes.stop(standby_name)  # releases the Lease if it leads
        record = offload_env.processes.get(leader_name)
        if record is None or not record.running():
            offload_env.start_enforcer(spec)
        wait(lambda: readyz(spec.enforcer_health_port)[0] == 200, timeout=90, what="the harness's enforcer leading again")
        ha.route_shadowpod_webhook(offload_env, spec, spec.enforcer_webhook_port)
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
