"""In-place resize of an offloaded pod (issue 41, item 2), end to end on the shared loopback
environment (conftest.py), the remote pods on kwok nodes: what reaches the provider and what
it refuses. kwok reports no container resources, so the tests write them into the remote
pod's status as a kubelet would (without them no API server resizes a pod, and the local
pod, mirroring the remote one, is refused its resize too: as for a remote kubelet older
than 1.33). (What a real kubelet does with a resize, cgroups and all, is the real-node
tier's: tests/realnode/test_offloaded_pods.py.)

* `kubectl patch pod --subresource resize` on an offloaded pod reaches its ShadowPod's
  template and, through the provider's pods/resize, the running remote pod: the same pod
  (UID), the new cpu figures in its spec.
* The provider judges a resize against our quota: one that other pods' usage leaves no
  room for is refused (403) and the local pod says so as a kubelet does,
  PodResizePending/Deferred with the provider's words; when the provider raises the
  quota it goes through without anything else done.
* One the pod alone could never have under the quota (here limits.cpu) is not even sent:
  PodResizePending/Infeasible naming the quota and the fix.

The session consumer's quota is changed for the test and put back after it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from kube_offload import constants as c
from kube_offload.resources import format_quantity, parse_quantity
from kube_offload_harness.cluster import Cluster
from support.clusters import delete_namespace, find, offloaded_namespace, patch_consumer, report_container_resources

LOCAL_ID = "local"  # the harness's local cluster id (the session consumer)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
TIMEOUT = 90
CONSUMER_KIND = f"{c.CONSUMER_PLURAL}.{c.DOMAIN}"
SHADOWPOD_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"


def _pod(ns: str, name: str, cpu: str = "100m") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": IMAGE,
                "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}, "limits": {"cpu": "400m", "memory": "32Mi"}}}]}}


def _resize(local: Cluster, ns: str, name: str, **resources: dict) -> None:
    body = {"spec": {"containers": [{"name": "app", "resources": resources}]}}
    local.kubectl("patch", "pod", name, "-n", ns, "--subresource", "resize", "-p", json.dumps(body))


def _cpu(obj: dict | None, kind: str = "requests") -> str | None:
    containers = ((obj or {}).get("spec") or {}).get("containers") or [{}]
    return ((containers[0].get("resources") or {}).get(kind) or {}).get("cpu")


def _condition(local: Cluster, ns: str, name: str, kind: str) -> dict | None:
    pod = find(local, "pod", name, "-n", ns) or {}
    return next((cond for cond in (pod.get("status") or {}).get("conditions") or [] if cond.get("type") == kind), None)


def _running(local: Cluster, remote: Cluster, wait, ns: str, name: str) -> dict:
    """The remote pod, Running, with the container resources a kubelet reports (which kwok
    does not: report_container_resources), and the local pod showing them: without them
    neither API server resizes the pod ("Pod running on node without support for resize")."""
    twin = f"{ns}-{LOCAL_ID}"
    pod = wait(lambda: report_container_resources(remote, twin, name), timeout=TIMEOUT,
               what=f"remote pod {twin}/{name} running, its resources reported")
    wait(lambda: (((find(local, "pod", name, "-n", ns) or {}).get("status") or {}).get("containerStatuses") or [{}])[0]
         .get("resources"), timeout=TIMEOUT, what=f"the local pod {ns}/{name} showing its container's resources")
    return pod


@pytest.fixture
def ns(local: Cluster, remote: Cluster, wait):
    name = f"resize-{uuid.uuid4().hex[:5]}"
    offloaded_namespace(local, name)
    wait(lambda: remote.kubectl("get", "namespace", f"{name}-{LOCAL_ID}", check=False).returncode == 0,
         timeout=TIMEOUT, what="twin namespace")
    yield name
    delete_namespace(local, name)


@pytest.fixture
def quota_restored(remote: Cluster):
    before = find(remote, CONSUMER_KIND, LOCAL_ID)["spec"]["quota"]
    yield before
    patch_consumer(remote, LOCAL_ID, {"quota": before})


def test_a_resize_reaches_the_running_remote_pod_in_place(local: Cluster, remote: Cluster, wait, ns: str) -> None:
    local.apply(_pod(ns, "web"))
    before = _running(local, remote, wait, ns, "web")
    _resize(local, ns, "web", requests={"cpu": "150m"}, limits={"cpu": "300m"})
    twin = f"{ns}-{LOCAL_ID}"
    after = wait(lambda: (lambda p: p if _cpu(p) == "150m" and _cpu(p, "limits") == "300m" else None)(
        find(remote, "pod", "web", "-n", twin)), timeout=TIMEOUT, what="the remote pod resized")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "resized in place, not recreated"
    template = find(remote, SHADOWPOD_KIND, "web", "-n", twin)["spec"]["pod"]
    assert _cpu(template) == "150m" and _cpu(template, "limits") == "300m"
    assert _condition(local, ns, "web", "PodResizePending") is None


def test_the_provider_defers_a_resize_over_its_quota_and_an_impossible_one_is_not_sent(
        local: Cluster, remote: Cluster, wait, ns: str, quota_restored: dict) -> None:
    for name in ("a", "b"):
        local.apply(_pod(ns, name))
    for name in ("a", "b"):
        _running(local, remote, wait, ns, name)
    # Room for what runs and 50m more: a resize of a by 100m does not fit, by 50m it would.
    wait(lambda: parse_quantity(find(remote, CONSUMER_KIND, LOCAL_ID).get("status", {}).get("used", {}).get("cpu", "0")) >= 200,
         timeout=TIMEOUT, what="the provider counting both pods")
    used = parse_quantity(find(remote, CONSUMER_KIND, LOCAL_ID)["status"]["used"]["cpu"])
    patch_consumer(remote, LOCAL_ID, {"quota": {**quota_restored, "cpu": format_quantity(used + 50)}})

    _resize(local, ns, "a", requests={"cpu": "200m"})
    pending = wait(lambda: (lambda cond: cond if cond and cond.get("reason") == "Deferred" else None)(
        _condition(local, ns, "a", "PodResizePending")), timeout=TIMEOUT, what="PodResizePending Deferred on the local pod")
    assert pending["status"] == "True"
    assert "exceeded quota" in pending["message"] and "raise Consumer spec.quota" in pending["message"], pending["message"]
    twin = f"{ns}-{LOCAL_ID}"
    assert _cpu(find(remote, "pod", "a", "-n", twin)) == "100m", "the remote pod runs on as it was"

    # The provider raises the quota: the deferred resize goes through, nothing else done.
    patch_consumer(remote, LOCAL_ID, {"quota": {**quota_restored, "cpu": format_quantity(used + 1000)}})
    wait(lambda: _cpu(find(remote, "pod", "a", "-n", twin)) == "200m", timeout=TIMEOUT, what="the deferred resize applied")
    wait(lambda: _condition(local, ns, "a", "PodResizePending") is None, timeout=TIMEOUT, what="PodResizePending gone")

    # A quota on limits the pod alone would exceed: decided by the virtual kubelet with the
    # provider's own quota rule, not sent.
    patch_consumer(remote, LOCAL_ID, {"quota": {**quota_restored, "limits.cpu": "2"}})
    wait(lambda: find(remote, CONSUMER_KIND, LOCAL_ID)["spec"]["quota"].get("limits.cpu") == "2", timeout=TIMEOUT,
         what="the limits quota")
    _resize(local, ns, "b", limits={"cpu": "3"})
    infeasible = wait(lambda: (lambda cond: cond if cond and cond.get("reason") == "Infeasible" else None)(
        _condition(local, ns, "b", "PodResizePending")), timeout=TIMEOUT, what="PodResizePending Infeasible on the local pod")
    assert "limits.cpu: requested 3" in infeasible["message"] and "quota 2" in infeasible["message"], infeasible["message"]
    assert _cpu(find(remote, SHADOWPOD_KIND, "b", "-n", twin)["spec"]["pod"], "limits") == "400m", "not sent"
