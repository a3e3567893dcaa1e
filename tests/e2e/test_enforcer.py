"""The enforcer against a real control plane: kube-apiserver + etcd, kube-scheduler,
kube-controller-manager (its garbage collector deletes a ShadowPod's pod) and kwok
(marks pods Running on its simulated nodes), all started on loopback by kwokctl.

The cluster is this module's own, made with the harness's :class:`Cluster`, because the
test must be the only enforcer in it: the shared environment runs one per remote cluster,
which would recreate pods behind this test's back while its enforcer is killed. The
enforcer runs as the real ``kube-offload enforcer`` console script in a subprocess, is
killed with SIGKILL and stopped with SIGTERM by its PID, and installs the CRD itself
(``--install-crd=true``); everything else is driven with kubectl.

The tests run in file order and build on each other's state, like one scenario.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from kubernetes.client import CoreV1Api

from kube_offload_harness.cluster import Cluster
from support.clusters import bare_cluster
from kube_offload.constants import LABEL_MANAGED_BY, MANAGED_BY_ENFORCER
from kube_offload.runtime.kube import load_api_client

NAMESPACE = "enforcer-e2e"
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY_ENFORCER}"
# "At once": the enforcer reacts to the pod's DELETED watch event; kwok then needs a
# moment to schedule and mark the new pod Running. Generous for a loaded CI machine.
RECREATE_SECONDS = 15


class EnforcerProcess:
    """One ``kube-offload enforcer`` subprocess; only ever signalled by its own PID."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        script = Path(sys.executable).parent / "kube-offload"
        # The Lease in "default" (this bare cluster has no kube-offload namespace); a
        # restart after SIGKILL waits out the dead process's Lease (at most ~17 s).
        argv = [str(script), "enforcer", "--kubeconfig", str(self.kubeconfig), "--install-crd=true",
                "--resync-period", "60s", "--log-level", "DEBUG", "--leader-elect-namespace", "default"]
        env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PYTHONUNBUFFERED="1")
        with open(self.log, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} starting {' '.join(argv)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, then SIGKILL if it does not stop in time; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            return None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        except OSError:
            return ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with bare_cluster(tmp_path_factory, "enforcer", NAMESPACE, nodes=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def enforcer(cluster: Cluster, tmp_path_factory) -> Iterator[EnforcerProcess]:
    log = tmp_path_factory.mktemp("enforcer-log") / "enforcer.log"
    process = EnforcerProcess(cluster.kubeconfig, log)
    process.start()
    # The first test applies a ShadowPod at once: wait for the CRD the enforcer installs
    # (--install-crd) rather than race its start-up on a loaded machine.
    deadline = time.monotonic() + 60
    while cluster.kubectl("get", "crd", "shadowpods.kube-offload.io", check=False).returncode != 0:
        assert time.monotonic() < deadline and process.running(), f"no ShadowPod CRD from the enforcer:\n{process.tail()}"
        time.sleep(0.3)
    cluster.kubectl("wait", "--for=condition=Established", "crd/shadowpods.kube-offload.io", "--timeout=60s")
    try:
        yield process
    finally:
        code = process.stop()
        print(f"\nenforcer exit code {code}; last log lines:\n{process.tail()}")


# --- helpers -------------------------------------------------------------------------------------
def shadowpod_manifest(name: str, *, restart_policy: str = "Always", cpu: str = "100m") -> dict:
    return {
        "apiVersion": "kube-offload.io/v1alpha1",
        "kind": "ShadowPod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"pod": {
            "metadata": {"labels": {"app": name}, "annotations": {"example.com/note": "from e2e"}},
            "spec": {
                "restartPolicy": restart_policy,
                "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            },
        }},
    }


def apply(cluster: Cluster, *objects: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def managed_pods(cluster: Cluster) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]


def pods_of(cluster: Cluster, shadowpod: str) -> list[dict]:
    return [
        p for p in managed_pods(cluster)
        if any(ref.get("name") == shadowpod and ref.get("kind") == "ShadowPod"
               for ref in p["metadata"].get("ownerReferences") or [])
    ]


def get_shadowpod(cluster: Cluster, name: str) -> dict:
    return cluster.kubectl_json("get", "shadowpod", name, "-n", NAMESPACE)


def events_for(cluster: Cluster, name: str) -> list[dict]:
    items = cluster.kubectl_json(
        "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.kind=ShadowPod,involvedObject.name={name}"
    )["items"]
    return items


def running(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def the_running_pod(cluster: Cluster, shadowpod: str, *, not_uid: str | None = None) -> dict | None:
    pods = pods_of(cluster, shadowpod)
    if len(pods) == 1 and running(pods[0]) and pods[0]["metadata"]["uid"] != not_uid:
        return pods[0]
    return None


def enforcer_alive(enforcer: EnforcerProcess) -> None:
    assert enforcer.running(), f"the enforcer exited:\n{enforcer.tail()}"


# --- the scenario --------------------------------------------------------------------------------
def test_shadowpod_gets_exactly_one_owned_labelled_running_pod(cluster, enforcer, wait):
    apply(cluster, shadowpod_manifest("web"))
    pod = wait(lambda: the_running_pod(cluster, "web"), timeout=90, what="one Running pod for ShadowPod web")
    enforcer_alive(enforcer)
    shp = get_shadowpod(cluster, "web")

    meta = pod["metadata"]
    assert meta["name"] == "web"
    assert meta["labels"] == {"app": "web", LABEL_MANAGED_BY: MANAGED_BY_ENFORCER}
    assert meta["annotations"]["example.com/note"] == "from e2e"
    assert meta["ownerReferences"] == [{
        "apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": "web",
        "uid": shp["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }]
    assert pod["spec"]["containers"][0]["image"] == "registry.invalid/app:1"
    assert pod["spec"]["nodeName"].startswith("enforcer-node-"), "scheduled onto a kwok node"

    status = wait(lambda: (s := get_shadowpod(cluster, "web").get("status", {})).get("phase") == "Running" and s,
                  timeout=30, what="ShadowPod status to mirror the Running pod")
    assert status["podName"] == "web" and status["podUID"] == meta["uid"] and status["recreations"] == 0
    assert status["observedGeneration"] == shp["metadata"]["generation"]
    # The pod's conditions are the pod's (nobody reads them from the ShadowPod), and the
    # routine create is no Event: each cost a remote write per pod (docs/enforcer.md).
    assert "conditions" not in status
    assert events_for(cluster, "web") == []


def test_deleted_pod_is_recreated_at_once_and_counted(cluster, enforcer, wait):
    old_uid = pods_of(cluster, "web")[0]["metadata"]["uid"]
    started = time.monotonic()
    cluster.kubectl("delete", "pod", "web", "-n", NAMESPACE, "--wait=false")
    new = wait(lambda: the_running_pod(cluster, "web", not_uid=old_uid), timeout=RECREATE_SECONDS,
               interval=0.2, what="a new Running pod after `kubectl delete pod`")
    print(f"\npod web recreated and Running {time.monotonic() - started:.1f}s after kubectl delete")
    status = wait(lambda: (s := get_shadowpod(cluster, "web")["status"])["podUID"] == new["metadata"]["uid"] and s,
                  timeout=15, what="status to name the new pod")
    assert status["recreations"] == 1
    assert len(pods_of(cluster, "web")) == 1
    wait(lambda: "PodRecreated" in [e["reason"] for e in events_for(cluster, "web")], timeout=10,
         what="a PodRecreated Event")


def test_evicted_pod_is_replaced(cluster, enforcer, wait):
    # What the kubelet writes when it evicts a pod under node pressure.
    old_uid = pods_of(cluster, "web")[0]["metadata"]["uid"]
    cluster.kubectl("patch", "pod", "web", "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"phase": "Failed", "reason": "Evicted",
                                           "message": "The node was low on resource: memory."}}))
    new = wait(lambda: the_running_pod(cluster, "web", not_uid=old_uid), timeout=RECREATE_SECONDS, interval=0.2,
               what="a new Running pod after eviction")
    wait(lambda: get_shadowpod(cluster, "web")["status"]["podUID"] == new["metadata"]["uid"], timeout=15,
         what="status to name the new pod")
    assert get_shadowpod(cluster, "web")["status"]["recreations"] == 2
    messages = [e["message"] for e in events_for(cluster, "web") if e["reason"] == "PodRecreated"]
    assert any("Evicted" in m for m in messages), messages


def test_completed_run_is_mirrored_not_restarted(cluster, enforcer, wait):
    apply(cluster, shadowpod_manifest("job", restart_policy="Never"))
    pod = wait(lambda: the_running_pod(cluster, "job"), timeout=60, what="the job's pod Running")
    # The container exits non-zero on its own (what a kubelet would report).
    cluster.kubectl("patch", "pod", "job", "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"phase": "Failed"}}))
    wait(lambda: get_shadowpod(cluster, "job").get("status", {}).get("phase") == "Failed", timeout=15,
         what="ShadowPod phase Failed")
    time.sleep(3)
    pods = pods_of(cluster, "job")
    assert [p["metadata"]["uid"] for p in pods] == [pod["metadata"]["uid"]], "a finished run is not recreated"
    assert get_shadowpod(cluster, "job")["status"]["recreations"] == 0


def test_quota_rejection_is_reported_with_the_apiservers_message(cluster, enforcer, wait):
    cluster.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                   "metadata": {"name": "cpu", "namespace": NAMESPACE}, "spec": {"hard": {"requests.cpu": "1"}}})
    # The quota controller must have computed usage before it admits or rejects anything.
    wait(lambda: cluster.kubectl_json("get", "resourcequota", "cpu", "-n", NAMESPACE).get("status", {}).get("used"),
         timeout=30, what="ResourceQuota usage")
    apply(cluster, shadowpod_manifest("too-big", cpu="2"))
    event = wait(lambda: next((e for e in events_for(cluster, "too-big") if e["reason"] == "PodCreationFailed"), None),
                 timeout=30, what="a PodCreationFailed Event")
    assert event["type"] == "Warning" and "exceeded quota" in event["message"], event["message"]
    status = wait(lambda: get_shadowpod(cluster, "too-big").get("status"), timeout=15, what="status")
    assert status["phase"] == "Pending" and "exceeded quota" in status["message"]
    assert pods_of(cluster, "too-big") == []
    cluster.kubectl("delete", "shadowpod", "too-big", "-n", NAMESPACE)
    cluster.kubectl("delete", "resourcequota", "cpu", "-n", NAMESPACE)


def test_sigkill_and_restart_leave_exactly_one_pod_per_shadowpod(cluster, enforcer, wait):
    many = [f"burst-{i}" for i in range(60)]
    core = CoreV1Api(load_api_client(str(cluster.kubeconfig)))

    def burst_pods() -> int:
        listed = core.list_namespaced_pod(NAMESPACE, label_selector="app", _preload_content=False)
        return sum(1 for p in json.loads(listed.data)["items"] if p["metadata"]["name"].startswith("burst-"))

    # Kill it mid-burst: some pods created, some statuses written, some ShadowPods not
    # even seen. The ShadowPods are applied in the background and the pods polled
    # straight from the API, since kubectl is too slow to catch the burst under way.
    applying = subprocess.Popen(
        [str(cluster.bins.kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cluster.env(),
    )
    applying.stdin.write(yaml.safe_dump_all([shadowpod_manifest(name, cpu="10m") for name in many]))
    applying.stdin.close()
    wait(lambda: burst_pods() > 0, timeout=30, interval=0.005, what="the burst to start")
    enforcer.kill()
    killed_at = burst_pods()
    assert applying.wait(60) == 0, applying.stderr.read()
    print(f"\nSIGKILL with {killed_at} of {len(many)} burst pods created")
    # While it is down: a pod is deleted and a ShadowPod created.
    web_uid = pods_of(cluster, "web")[0]["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "web", "-n", NAMESPACE, "--wait=true")
    apply(cluster, shadowpod_manifest("while-down"))
    time.sleep(1)
    assert pods_of(cluster, "web") == [] and pods_of(cluster, "while-down") == [], "nobody else recreates pods"

    enforcer.start()
    expected = set(many) | {"web", "job", "while-down"}

    def converged() -> bool:
        pods = managed_pods(cluster)
        owners = [p["metadata"]["ownerReferences"][0]["name"] for p in pods]
        # "job" finished its run (Failed) in an earlier test; every other pod runs.
        return sorted(owners) == sorted(expected) and all(running(p) for p in pods if p["metadata"]["name"] != "job")

    wait(converged, timeout=90, what="one Running pod per ShadowPod after the restart")
    # ... and it stays that way (a duplicate would show up as a second pod).
    for _ in range(10):
        pods = managed_pods(cluster)
        assert len(pods) == len(expected), [p["metadata"]["name"] for p in pods]
        assert {p["metadata"]["name"] for p in pods} == expected, "every pod is named after its ShadowPod"
        time.sleep(0.3)
    enforcer_alive(enforcer)
    assert pods_of(cluster, "web")[0]["metadata"]["uid"] != web_uid
    wait(lambda: get_shadowpod(cluster, "web")["status"].get("recreations") == 3, timeout=15,
         what="the pod deleted while the enforcer was down to count as a recreation")

    def burst_statuses() -> list[dict]:
        items = cluster.kubectl_json("get", "shadowpods", "-n", NAMESPACE)["items"]
        return [i.get("status", {}) for i in items if i["metadata"]["name"].startswith("burst-")]

    wait(lambda: all(s.get("phase") == "Running" for s in burst_statuses()), timeout=30, what="burst statuses")
    assert all(s["recreations"] == 0 for s in burst_statuses()), "a crash of the enforcer is no recreation"


def test_sigterm_stops_cleanly_and_the_garbage_collector_deletes_the_pod(cluster, enforcer, wait):
    assert enforcer.stop() == 0, f"exit code on SIGTERM; log:\n{enforcer.tail()}"
    assert "enforcer stopped" in enforcer.tail()
    # With the enforcer down, only kube-controller-manager's garbage collector (following
    # the owner reference) can delete the pod.
    cluster.kubectl("delete", "shadowpod", "web", "-n", NAMESPACE, "--wait=false")
    wait(lambda: pods_of(cluster, "web") == [], timeout=60, what="the garbage collector to delete pod web")
    assert len(pods_of(cluster, "while-down")) == 1, "other ShadowPods keep their pods"
