"""Benchmark: the CPU of one reconcile of the vkubelet's pod loop for a running offloaded pod
with nothing to do (a remote pod event, an echo, a resync), with the template sync's
answer remembered (today) against translated again each time (before issue 39), in the
same run. No cluster: the loop's own informers fed by hand and the tests' recording API
layer (tests/support), which a reconcile with nothing to do never calls.

    .venv/bin/python bench/bench_pod_reconcile.py [--reconciles 3000]

The pod is the one bench_offloading.py's Deployment makes, as the local API server's
admission leaves it (the kube-api-access projected volume, the default tolerations):
what the translation works on. Prints ms per reconcile, each way, and the ratio.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from kubernetes import client  # noqa: E402

from kube_offload import constants as c  # noqa: E402
from kube_offload.runtime.informer import ADDED, MODIFIED  # noqa: E402
from kube_offload.runtime.kinds import PODS, SHADOWPODS  # noqa: E402
from support import builders  # noqa: E402
from support.informers import listed  # noqa: E402
from support.recording_kube import RecordingKube  # noqa: E402
from vkubelet.home_api import HomeAPIEndpoint  # noqa: E402
from vkubelet.pods.reconcile import PodOffloader  # noqa: E402
from vkubelet.settings import Settings  # noqa: E402
from vkubelet.shared.events import EventRecorder  # noqa: E402
from vkubelet.shared.informers import SharedInformers  # noqa: E402
from vkubelet.twins.namespaces import TwinNamespaces  # noqa: E402

TWIN = "ns-local"
KEY = "ns/bench-1"


def admitted_pod() -> dict:
    """The bench Deployment's pod as the local API server stores it, bound to the virtual node."""
    pod = builders.pod("bench-1", uid="u-1", resourceVersion="10", creationTimestamp="2026-01-01T00:00:00Z",
                       containers=[{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
                                    "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                                    "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "Always"}],
                       spec={"nodeName": "kube-offload-remote", "serviceAccountName": "default", "restartPolicy": "Always",
                             "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                                 {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                                 {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                 {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                                               "fieldPath": "metadata.namespace"}}]}}]}}],
                             "tolerations": [
                                 {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                                 {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                                 {"key": c.TAINT_KEY, "operator": "Exists", "effect": c.TAINT_EFFECT}]},
                       phase="Pending", labels={"app": "bench", "pod-template-hash": "55bd58b946"})
    return pod


def running_loop() -> PodOffloader:
    settings = Settings(cluster_id="remote", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    local, remote = RecordingKube(), RecordingKube()
    recorder = EventRecorder(local, host="bench")
    relay = HomeAPIEndpoint(ip="10.96.12.34", port=443)
    pods = PodOffloader(settings, informers, TwinNamespaces(settings, informers, recorder), recorder, home_api=lambda: relay)
    pods.kube, pods.local.kube = remote, local
    pods.twins.local_namespaces.apply(ADDED, builders.namespace(
        "ns", labels={c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}))
    pods.twins.requests.apply(ADDED, builders.twin_request(TWIN, settings.tenant_namespace))
    informers.set_twin_namespaces([TWIN])
    listed(pods.shadowpods, TWIN)
    listed(pods.remote_pods, TWIN)
    remote.feed(SHADOWPODS, pods.shadowpods)
    pod = admitted_pod()
    local.hold(PODS, pod)
    pods.local_pods.apply(ADDED, pod)
    pods.reconcile(KEY)  # the ShadowPod
    shp = remote.stored(SHADOWPODS, "bench-1", TWIN)
    meta = shp["metadata"]
    pods.remote_pods.apply(ADDED, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": TWIN, "uid": "remote-uid", "resourceVersion": "50",
                     "labels": dict(meta["labels"]), "annotations": dict(meta["annotations"]),
                     "ownerReferences": [{"apiVersion": shp["apiVersion"], "kind": c.SHADOWPOD_KIND, "name": meta["name"],
                                          "uid": meta["uid"], "controller": True}]},
        "status": {"phase": "Running", "podIP": "10.20.0.7", "podIPs": [{"ip": "10.20.0.7"}],
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
                   "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "busybox",
                                          "state": {"running": {"startedAt": "2026-01-01T00:00:05Z"}}}]}})
    pods.reconcile(KEY)  # the status written
    pods.local_pods.apply(MODIFIED, local.stored(PODS, "bench-1", "ns"))  # and its echo
    pods.reconcile(KEY)
    recorder.stop(1.0)
    writes = len(local.writes) + len(remote.writes)
    pods.reconcile(KEY)
    assert len(local.writes) + len(remote.writes) == writes, "a reconcile with nothing to do wrote something"
    return pods


def per_reconcile_ms(pods: PodOffloader, n: int, *, remembered: bool) -> float:
    started = time.process_time()
    for _ in range(n):
        if not remembered:
            pods._templates_in_sync.clear()  # as before: translated at every reconcile
        pods.reconcile(KEY)
    return (time.process_time() - started) / n * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reconciles", type=int, default=3000, help="reconciles per way, per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (the best of each way is printed)")
    args = parser.parse_args()
    pods = running_loop()
    before, after = [], []
    for _ in range(args.rounds):
        before.append(per_reconcile_ms(pods, args.reconciles, remembered=False))
        after.append(per_reconcile_ms(pods, args.reconciles, remembered=True))
    print(f"python {platform.python_version()}, {platform.machine()}; {args.rounds} rounds of {args.reconciles} reconciles "
          "each way (CPU time of this process; best round)")
    print(f"  translated at every reconcile (before): {min(before):.3f} ms per reconcile")
    print(f"  template sync remembered (now):         {min(after):.3f} ms per reconcile")
    print(f"  ratio now/before:                       {min(after) / min(before):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
