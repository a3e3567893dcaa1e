"""An offloaded pod's lifecycle as a pod on an ordinary node lives it, end to end on the
shared loopback environment (conftest.py): readiness follows the virtual node through a
network partition, the standard taint-based eviction works, and a graceful deletion's
grace period reaches the remote pod.

The partition is narrow (kube_offload_harness.partition): for the test, the session's
vkubelet runs through a TCP link that the test cuts and heals, with a short ping timeout
and deletion margin so that the scenario fits in about a minute and a half; the remote
control plane and its pods keep running, as a provider's would. However the test ends, the
link is healed and the ordinary vkubelet is put back (the session is shared).

Each test uses its own namespace and removes it.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.partition import vkubelet_behind_link
from kube_offload_harness.naming import twin_namespace as twin, unique, virtual_node_name
from support.clusters import delete_namespace, offloaded_namespace

IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
PING_TIMEOUT = 5  # seconds, for the vkubelet behind the link
MARGIN = 5  # --unreachable-deletion-margin, seconds
GRACE = 5  # terminationGracePeriodSeconds of the test pods
TOLERATION_SECONDS = 30
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
# Holds a remote pod in Terminating (kwok would end it at once).
HOLD_FINALIZER = "example.com/hold"


# --- helpers ---------------------------------------------------------------------------------
def partition_tolerations(seconds: int | None) -> list[dict]:
    tolerations = []
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        toleration = {"key": key, "operator": "Exists", "effect": "NoExecute"}
        if seconds is not None:
            toleration["tolerationSeconds"] = seconds
        tolerations.append(toleration)
    return tolerations


def deployment(name: str, ns: str, tolerations: list[dict]) -> dict:
    """One replica that prefers the virtual node (the namespace allows physical nodes too,
    so a replacement can go elsewhere while the virtual node is tainted)."""
    prefer_virtual = {"preference": {"matchExpressions": [
        {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}]}, "weight": 100}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": IMAGE,
                                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                    "terminationGracePeriodSeconds": GRACE,
                    "tolerations": tolerations,
                    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [prefer_virtual]}},
                },
            },
        },
    }


def pods(cluster: Cluster, ns: str, selector: str | None = None) -> list[dict]:
    args = ["get", "pods", "-n", ns] + (["-l", selector] if selector else [])
    return cluster.kubectl_json(*args)["items"]


def shadowpods(remote: Cluster, ns: str) -> list[dict]:
    return remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", ns)["items"]


def condition(pod: dict, kind: str) -> dict:
    return next((cond for cond in (pod.get("status") or {}).get("conditions") or [] if cond["type"] == kind), {})


def ready(pod: dict) -> str | None:
    return condition(pod, "Ready").get("status")


def node_ready(local: Cluster, remote: Cluster) -> str | None:
    node = local.kubectl_json("get", "node", virtual_node_name(remote.spec.cluster_id))
    return next((cond["status"] for cond in node["status"]["conditions"] if cond["type"] == "Ready"), None)


def one(items: list[dict]) -> dict | None:
    return items[0] if len(items) == 1 else None


def events_of(local: Cluster, ns: str, uid: str) -> list[dict]:
    return local.kubectl_json("get", "events", "-n", ns, "--field-selector", f"involvedObject.uid={uid}")["items"]


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def endpoint_ready(local: Cluster, ns: str, service: str) -> list[bool]:
    slices = local.kubectl_json("get", "endpointslices", "-n", ns, "-l", f"kubernetes.io/service-name={service}")["items"]
    return [bool((e.get("conditions") or {}).get("ready")) for s in slices for e in s.get("endpoints") or []]


def set_remote_pod_readiness(remote: Cluster, ns: str, name: str, is_ready: bool, restarts: int) -> None:
    """As the provider's own kubelet would report it (admin on the remote cluster)."""
    pod = remote.kubectl_json("get", "pod", name, "-n", ns)
    status = pod["status"]
    value = "True" if is_ready else "False"
    for cond in status["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond.update(status=value, reason=None if is_ready else "ContainersNotReady")
    for container in status["containerStatuses"]:
        container.update(ready=is_ready, restartCount=restarts)
    patch = {"status": {"conditions": status["conditions"], "containerStatuses": status["containerStatuses"]}}
    remote.kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


# --- 1. node NotReady reaches the pods -------------------------------------------------------------
def test_partition_turns_pods_not_ready_evicts_per_toleration_and_heals_from_the_remote_truth(
    offload_env, local, remote, wait
):
    ns = unique("lc-partition")
    offloaded_namespace(local, ns, c.PLACEMENT_LOCAL_AND_REMOTE)
    vnode = virtual_node_name(remote.spec.cluster_id)
    extra = ["--ping-interval", "1s", "--ping-timeout", f"{PING_TIMEOUT}s", "--unreachable-deletion-margin", f"{MARGIN}s"]
    try:
        with vkubelet_behind_link(offload_env, remote.spec, extra) as link:
            local.apply([
                deployment("patient", ns, partition_tolerations(None)),
                deployment("impatient", ns, partition_tolerations(TOLERATION_SECONDS)),
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "patient", "namespace": ns},
                 "spec": {"selector": {"app": "patient"}, "ports": [{"port": 80}]}},
            ])

            def both_ready_on_the_virtual_node():
                found = {p["metadata"]["labels"]["app"]: p for p in pods(local, ns)}
                return len(found) == 2 and all(
                    p["spec"].get("nodeName") == vnode and ready(p) == "True" for p in found.values()
                ) and found

            found = wait(both_ready_on_the_virtual_node, timeout=90, what="both pods Ready on the virtual node")
            patient, impatient = found["patient"], found["impatient"]
            # Our webhook adds only the virtual-node toleration; the pods' own partition
            # tolerations are kept as written (DefaultTolerationSeconds adds 300 s ones
            # only to pods that have none).
            keys = {(t.get("key"), t.get("tolerationSeconds")) for t in impatient["spec"]["tolerations"]}
            assert (c.TAINT_KEY, None) in keys and (NOT_READY_TAINT, TOLERATION_SECONDS) in keys
            wait(lambda: endpoint_ready(local, ns, "patient") == [True], timeout=30, what="the Service endpoint ready")
            remote_patient = wait(lambda: one(pods(remote, twin(ns), "app=patient")), timeout=30, what="the remote pod")
            shadow_uid = next(s["metadata"]["uid"] for s in shadowpods(remote, twin(ns)) if s["metadata"]["name"] == patient["metadata"]["name"])

            cut_at = time.monotonic()
            link.cut()
            wait(lambda: node_ready(local, remote) == "False", timeout=PING_TIMEOUT + 10, interval=0.5,
                 what="the virtual node NotReady")

            def not_ready(name: str):
                pod = local.kubectl_json("get", "pod", name, "-n", ns)
                return ready(pod) == "False" and pod

            for pod in (patient, impatient):
                marked = wait(lambda: not_ready(pod["metadata"]["name"]), timeout=10, interval=0.5,  # noqa: B023 (called in this iteration)
                              what=f"pod {pod['metadata']['name']} Ready=False")
                assert condition(marked, "Ready")["reason"] == "RemoteClusterUnreachable"
                assert condition(marked, "ContainersReady")["status"] == "False"
                assert [s["ready"] for s in marked["status"]["containerStatuses"]] == [False]
            # Within the ping timeout (plus the probe interval and a status write).
            assert time.monotonic() - cut_at <= PING_TIMEOUT + 10
            wait(lambda: endpoint_ready(local, ns, "patient") == [False], timeout=30,
                 what="the Service endpoint not ready (no traffic to a pod nobody can see)")

            # The node lifecycle controller taints a node whose kubelet reports NotReady
            # with not-ready (NoSchedule and NoExecute); unreachable is for a silent
            # kubelet, and the vkubelet keeps the Lease renewed.
            def taints():
                node = local.kubectl_json("get", "node", vnode)
                return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}

            wait(lambda: {(NOT_READY_TAINT, "NoExecute"), (NOT_READY_TAINT, "NoSchedule")} <= taints(), timeout=60,
                 what="the not-ready taints on the virtual node")
            assert (c.TAINT_KEY, c.TAINT_EFFECT) in taints() and (UNREACHABLE_TAINT, "NoExecute") not in taints()

            # Meanwhile the provider's truth changes: the pod restarted and is not ready.
            set_remote_pod_readiness(remote, twin(ns), remote_patient["metadata"]["name"], False, restarts=4)

            # tolerationSeconds 30: the taint manager evicts the impatient pod; the
            # vkubelet, unable to confirm its end, removes it after grace + margin.
            def terminating():
                pod = local.kubectl_json("get", "pod", impatient["metadata"]["name"], "-n", ns)
                return pod["metadata"].get("deletionTimestamp") and pod

            evicted = wait(terminating, timeout=TOLERATION_SECONDS + 30, interval=1, what="the impatient pod evicted")
            assert condition(evicted, "DisruptionTarget").get("reason") == "DeletionByTaintManager"
            deadline = parse_time(evicted["metadata"]["deletionTimestamp"]).timestamp() + MARGIN
            wait(lambda: impatient["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods(local, ns, "app=impatient")},
                 timeout=GRACE + MARGIN + 20, interval=0.5, what="the evicted pod removed locally")
            assert time.time() >= deadline - 1.5, "removed before its grace period and the margin had passed"
            reasons = [e["reason"] for e in events_of(local, ns, impatient["metadata"]["uid"])]
            assert "RemoteTerminationUnconfirmed" in reasons and "NodeNotReady" in reasons, reasons
            # Its controller replaced it elsewhere: the virtual node is tainted not-ready.
            replacement = wait(lambda: one([p for p in pods(local, ns, "app=impatient")
                                            if (p.get("status") or {}).get("phase") == "Running"]),
                               timeout=60, what="the replacement Running")
            assert replacement["spec"]["nodeName"] != vnode

            # No tolerationSeconds: the patient pod stays, bound and not ready.
            still = local.kubectl_json("get", "pod", patient["metadata"]["name"], "-n", ns)
            assert still["metadata"]["uid"] == patient["metadata"]["uid"] and not still["metadata"].get("deletionTimestamp")
            assert still["spec"]["nodeName"] == vnode and ready(still) == "False"

            link.heal()
            wait(lambda: node_ready(local, remote) == "True", timeout=30, interval=0.5, what="the virtual node Ready again")

            # Back from the remote truth, not from the last picture: still not ready (the
            # provider says so), with its restarts, and our unreachable mark gone.
            def follows_remote():
                pod = local.kubectl_json("get", "pod", patient["metadata"]["name"], "-n", ns)
                cond = condition(pod, "Ready")
                restarts = [s.get("restartCount") for s in pod["status"].get("containerStatuses") or []]
                return cond.get("reason") != "RemoteClusterUnreachable" and restarts == [4] and pod

            healed = wait(follows_remote, timeout=30, what="the pod's status taken again from the remote pod")
            assert ready(healed) == "False"
            set_remote_pod_readiness(remote, twin(ns), remote_patient["metadata"]["name"], True, restarts=4)
            wait(lambda: ready(local.kubectl_json("get", "pod", patient["metadata"]["name"], "-n", ns)) == "True",
                 timeout=30, what="the pod Ready again, as its remote pod")
            wait(lambda: endpoint_ready(local, ns, "patient") == [True], timeout=30, what="the Service endpoint ready again")

            # Nothing duplicated: the evicted pod's ShadowPod and remote pod are gone; the
            # patient's are the very same objects as before the partition.
            def remote_is_exactly_the_patient():
                shadows = shadowpods(remote, twin(ns))
                remote_pods = [p for p in pods(remote, twin(ns)) if not p["metadata"].get("deletionTimestamp")]
                return [s["metadata"]["uid"] for s in shadows] == [shadow_uid] and [
                    p["metadata"]["uid"] for p in remote_pods] == [remote_patient["metadata"]["uid"]]

            wait(remote_is_exactly_the_patient, timeout=60, what="only the patient's ShadowPod and pod remotely")
    finally:
        delete_namespace(local, ns)


# --- 5. graceful deletion end to end --------------------------------------------------------------
class Watch:
    """``kubectl get --watch`` in the background: every state an object went through,
    even one that lasted milliseconds (kwok deletes a terminating pod at once)."""

    def __init__(self, cluster: Cluster, *args: str) -> None:
        argv = [str(cluster.bins.kubectl), "--kubeconfig", str(cluster.kubeconfig), "get", *args,
                "--watch", "--output-watch-events", "-o", "json"]
        self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         env=cluster.env())

    def stop(self) -> list[dict]:
        self._process.terminate()
        out, _ = self._process.communicate(timeout=10)
        decoder, events, at = json.JSONDecoder(), [], 0
        while True:
            while at < len(out) and out[at].isspace():
                at += 1
            if at >= len(out):
                return events
            event, at = decoder.raw_decode(out, at)
            events.append(event)


def test_deletion_grace_period_reaches_the_remote_pod_and_the_local_pod_goes_after_it(local, remote, wait):
    ns = unique("lc-grace")
    offloaded_namespace(local, ns, c.PLACEMENT_REMOTE)
    watch = None
    try:
        local.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow", "namespace": ns},
            "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 60},
        })
        wait(lambda: ready(local.kubectl_json("get", "pod", "slow", "-n", ns)) == "True", timeout=90,
             what="the pod Ready, running remotely")
        remote_pod = one(pods(remote, twin(ns)))
        # kwok ends a terminating pod at once; a finalizer stands for containers that take
        # their time to stop (the test removes it: "the containers stopped").
        remote.kubectl("patch", "pod", remote_pod["metadata"]["name"], "-n", twin(ns), "--type=merge",
                       "-p", json.dumps({"metadata": {"finalizers": [HOLD_FINALIZER]}}))
        watch = Watch(remote, "pods", "-n", twin(ns))
        time.sleep(1)  # the watch's initial list is in

        local.kubectl("delete", "pod", "slow", "-n", ns, "--grace-period=12", "--wait=false")

        def remote_terminating():
            pod = one(pods(remote, twin(ns)))
            return pod and pod["metadata"].get("deletionTimestamp") and pod

        wait(remote_terminating, timeout=15, interval=0.5, what="the remote pod terminating")
        shadow = one(shadowpods(remote, twin(ns)))
        assert shadow["metadata"]["annotations"][c.ANNOTATION_DELETION_GRACE] == "12"

        # While the remote pod terminates, the local pod waits for it.
        time.sleep(5)
        local_pod = one(pods(local, ns))
        assert local_pod is not None and local_pod["metadata"].get("deletionTimestamp"), "the local pod went first"

        remote.kubectl("patch", "pod", remote_pod["metadata"]["name"], "-n", twin(ns), "--type=json",
                       "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
        wait(lambda: not pods(local, ns), timeout=30, interval=0.5, what="the local pod gone once its remote pod is")
        # Gone locally means gone remotely.
        assert not pods(remote, twin(ns)) and not shadowpods(remote, twin(ns))

        # The remote pod was deleted with the local deletion's grace period, not its spec's 60 s.
        events = watch.stop()
        watch = None
        deleting = [e["object"] for e in events
                    if e["object"]["metadata"]["uid"] == remote_pod["metadata"]["uid"]
                    and e["object"]["metadata"].get("deletionTimestamp")]
        assert deleting, events
        assert deleting[0]["metadata"]["deletionGracePeriodSeconds"] == 12
    finally:
        if watch is not None:
            watch.stop()
        remote.kubectl("patch", "pod", "slow", "-n", twin(ns), "--type=json",
                       "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False)
        delete_namespace(local, ns)
