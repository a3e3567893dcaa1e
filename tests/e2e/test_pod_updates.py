"""An offloaded pod behaves like a local one when it changes, and DaemonSets stay home, end
to end on the shared loopback environment (conftest.py).

* `kubectl label/annotate`, `kubectl set image`, activeDeadlineSeconds and an added
  toleration on an offloaded pod reach the running remote pod in place: through its
  ShadowPod (vkubelet) and a patch of the pod (enforcer), with the remote pod's and the
  ShadowPod's UIDs unchanged and kube-offload's own labels and annotations kept.
* A change the provider refuses for a running pod (here a ValidatingAdmissionPolicy on
  pod UPDATEs in the twin namespace) gets a Warning Event on the local pod with the
  provider's words; the remote pod runs on as it was.
* A DaemonSet whose pods tolerate every taint gets a pod on the virtual node, which is
  never offloaded: it stays Pending with reason DaemonSetNotOffloaded, `kubectl describe`
  says why, and it does not churn (one pod UID over 20 s, no deletions by the DaemonSet
  controller).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from support.clusters import offloaded_namespace

LOCAL_ID = "local"  # the harness's local cluster id
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
NEW_IMAGE = "registry.k8s.io/pause:3.9"
TIMEOUT = 60
FORBIDDEN = "e2e-forbidden.example"
POLICY = "e2e-refuse-image-updates"
PROVIDER_WORDS = f"images from {FORBIDDEN} may not be set on running pods here (e2e policy)"
OBSERVE_SECONDS = 20
REASON_DS = "DaemonSetNotOffloaded"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def _twin(namespace: str) -> str:
    return f"{namespace}-{LOCAL_ID}"


def _node(remote: Cluster) -> str:
    return f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"


def _get(cluster: Cluster, kind: str, name: str, namespace: str) -> dict | None:
    result = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _events(local: Cluster, namespace: str, name: str) -> list[dict]:
    return local.kubectl_json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]


def _offloaded_pod(local: Cluster, remote: Cluster, wait, ns: str, name: str) -> dict:
    local.apply({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns, "labels": {"app": name, "team": "a"},
                              "annotations": {"note": "1"}},
                 "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 1}})

    wait(lambda: ((_get(local, "pod", name, ns) or {}).get("spec") or {}).get("nodeName") == _node(remote),
         timeout=TIMEOUT, what=f"pod {ns}/{name} bound to the virtual node")

    def remote_running():
        pod = _get(remote, "pod", name, _twin(ns))
        return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

    pod = wait(remote_running, timeout=90, what=f"remote pod {_twin(ns)}/{name} Running")
    wait(lambda: ((_get(local, "pod", name, ns) or {}).get("status") or {}).get("phase") == "Running",
         timeout=TIMEOUT, what="the local pod Running")
    return pod


@pytest.fixture
def namespace(local):
    names: list[str] = []

    def make(prefix: str, placement: str = c.PLACEMENT_REMOTE) -> str:
        name = _unique(prefix)
        offloaded_namespace(local, name, placement)
        names.append(name)
        return name

    yield make
    for name in names:
        local.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


# --- changes of a running pod reach the remote pod in place --------------------------------------
def test_labels_annotations_image_deadline_and_tolerations_reach_the_remote_pod_in_place(local, remote, wait, namespace):
    ns = namespace("upd")
    twin, name = _twin(ns), "web"
    wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0, timeout=TIMEOUT, what="twin namespace")
    before = _offloaded_pod(local, remote, wait, ns, name)
    shadow_uid = _get(remote, "shadowpods.kube-offload.io", name, twin)["metadata"]["uid"]

    local.kubectl("label", "pod", name, "-n", ns, "tier=front", "team-")
    local.kubectl("annotate", "pod", name, "-n", ns, "--overwrite", "note=2", "owner=team-b")

    def metadata_arrived():
        pod = _get(remote, "pod", name, twin) or {}
        meta = pod.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        done = (labels.get("tier") == "front" and "team" not in labels
                and annotations.get("note") == "2" and annotations.get("owner") == "team-b")
        return pod if done else None

    after = wait(metadata_arrived, timeout=TIMEOUT, what="the new labels and annotations on the remote pod")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "updated in place, not recreated"
    # kube-offload's own keys are kept.
    labels, annotations = after["metadata"]["labels"], after["metadata"]["annotations"]
    assert labels[c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID
    assert labels[c.LABEL_MANAGED_BY] == c.MANAGED_BY_ENFORCER
    assert annotations[c.ANNOTATION_ORIGIN_NAME] == name and annotations[c.ANNOTATION_ORIGIN_NAMESPACE] == ns
    assert c.ANNOTATION_ORIGIN_UID in annotations

    # The spec fields a running pod may change.
    local.kubectl("set", "image", f"pod/{name}", "-n", ns, f"app={NEW_IMAGE}")
    local.kubectl("patch", "pod", name, "-n", ns, "--type", "json", "-p", json.dumps([
        {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 86400},
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "e2e.kube-offload.io/extra", "operator": "Exists", "effect": "NoSchedule"}},
    ]))

    def spec_arrived():
        pod = _get(remote, "pod", name, twin) or {}
        spec = pod.get("spec") or {}
        done = (spec.get("containers", [{}])[0].get("image") == NEW_IMAGE
                and spec.get("activeDeadlineSeconds") == 86400
                and any(t.get("key") == "e2e.kube-offload.io/extra" for t in spec.get("tolerations") or []))
        return pod if done else None

    after = wait(spec_arrived, timeout=TIMEOUT, what="image, activeDeadlineSeconds and toleration on the remote pod")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "updated in place, not recreated"
    # The provider's own default tolerations stay (a running pod cannot lose one).
    assert {t.get("key") for t in before["spec"].get("tolerations") or []} <= {t.get("key") for t in after["spec"]["tolerations"]}
    shadow = _get(remote, "shadowpods.kube-offload.io", name, twin)
    assert shadow["metadata"]["uid"] == shadow_uid
    assert int((shadow.get("status") or {}).get("recreations") or 0) == 0
    assert ((_get(local, "pod", name, ns) or {}).get("status") or {}).get("phase") == "Running"


# --- a change the provider refuses ---------------------------------------------------------------
def _policy(twin: str) -> list[dict]:
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]},
                "validations": [{
                    "expression": f"object.spec.containers.all(x, !x.image.startsWith('{FORBIDDEN}'))",
                    "message": PROVIDER_WORDS,
                    "reason": "Forbidden",
                }],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {
                "policyName": POLICY,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {c.LABEL_NAMESPACE_NAME: twin}}},
            },
        },
    ]


@pytest.fixture
def refusing_provider(remote):
    twins: list[str] = []
    yield twins.append
    remote.kubectl("delete", "validatingadmissionpolicybinding", POLICY, "--ignore-not-found", check=False)
    remote.kubectl("delete", "validatingadmissionpolicy", POLICY, "--ignore-not-found", check=False)


def test_a_change_the_provider_refuses_gets_an_event_and_the_pod_runs_on(local, remote, wait, namespace, refusing_provider):
    ns = namespace("refupd")
    twin, name = _twin(ns), "web"
    wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0, timeout=TIMEOUT, what="twin namespace")
    before = _offloaded_pod(local, remote, wait, ns, name)
    refusing_provider(twin)
    remote.apply(_policy(twin))

    def enforced() -> bool:  # policies load asynchronously: probe with a server-side dry run
        probe = json.dumps({"spec": {"containers": [{"name": "app", "image": f"{FORBIDDEN}/probe"}]}})
        result = remote.kubectl("patch", "pod", name, "-n", twin, "--dry-run=server", "-p", probe, check=False)
        return result.returncode != 0 and PROVIDER_WORDS in result.stderr

    wait(enforced, timeout=TIMEOUT, what="the remote apiserver to enforce the policy")

    local.kubectl("set", "image", f"pod/{name}", "-n", ns, f"app={FORBIDDEN}/app:1")

    def refused():
        return [e for e in _events(local, ns, name) if e.get("type") == "Warning" and PROVIDER_WORDS in (e.get("message") or "")]

    [event, *_] = wait(refused, timeout=TIMEOUT, what="a Warning Event with the provider's words on the local pod")
    assert event["reason"] in ("ProviderRefused", "PodUpdateRefused")
    assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["namespace"] == ns
    describe = local.kubectl("describe", "pod", name, "-n", ns).stdout
    assert PROVIDER_WORDS in describe

    # The remote pod runs on as it was: same pod, old image.
    time.sleep(3)
    current = _get(remote, "pod", name, twin)
    assert current["metadata"]["uid"] == before["metadata"]["uid"]
    assert current["spec"]["containers"][0]["image"] == IMAGE
    assert (current.get("status") or {}).get("phase") == "Running"
    assert ((_get(local, "pod", name, ns) or {}).get("status") or {}).get("phase") == "Running"


# --- DaemonSets stay home --------------------------------------------------------------------------
def _daemonset(ns: str, name: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    # Tolerates every taint, the virtual node's included (log collectors do).
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": IMAGE}],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    }


def test_daemonset_pods_stay_home_without_churn(local, remote, wait, namespace):
    ns = namespace("ds", c.PLACEMENT_LOCAL_AND_REMOTE)
    twin, name, node = _twin(ns), "agent", _node(remote)
    wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0, timeout=TIMEOUT, what="twin namespace")
    local.apply(_daemonset(ns, name))

    def on_virtual_node() -> list[dict]:
        return [p for p in local.kubectl_json("get", "pods", "-n", ns, "-l", f"app={name}")["items"]
                if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]

    def told():
        pods = on_virtual_node()
        return pods if pods and (pods[0].get("status") or {}).get("reason") == REASON_DS else None

    [pod] = wait(told, timeout=90, what="the DaemonSet pod on the virtual node to say it is not offloaded")
    pod_name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    assert pod["status"]["phase"] == "Pending"
    assert "--offload-daemonset-pods" in pod["status"]["message"]

    # No churn: the same pod for 20 s, nothing deleted by the DaemonSet controller, and
    # nothing of it in the remote cluster.
    uids = {uid}
    deadline = time.monotonic() + OBSERVE_SECONDS
    while time.monotonic() < deadline:
        uids |= {p["metadata"]["uid"] for p in on_virtual_node()}
        time.sleep(1)
    assert uids == {uid}, f"the DaemonSet pod on the virtual node churned: {uids}"
    ds_events = _events(local, ns, name)
    assert not [e for e in ds_events if e.get("reason") == "SuccessfulDelete"], ds_events
    creations = [e for e in ds_events if e.get("reason") == "SuccessfulCreate" and pod_name in (e.get("message") or "")]
    assert sum(int(e.get("count") or 1) for e in creations) <= 1
    assert remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", twin)["items"] == []
    assert remote.kubectl_json("get", "pods", "-n", twin)["items"] == []

    # `kubectl describe pod` says why: the status reason and message, and an Event.
    describe = local.kubectl("describe", "pod", pod_name, "-n", ns).stdout
    assert REASON_DS in describe and "--offload-daemonset-pods" in describe
    events = [e for e in _events(local, ns, pod_name) if e.get("reason") == REASON_DS]
    assert events, "an Event says why"
    # Said once (a cache lagging behind our own status write may repeat it once), not at
    # every reconcile or resync.
    assert sum(int(e.get("count") or 1) for e in events) <= 2, events
    # The DaemonSet's pods on physical nodes run as usual.
    others = [p for p in local.kubectl_json("get", "pods", "-n", ns, "-l", f"app={name}")["items"]
              if p["spec"].get("nodeName") != node]
    assert others and all((p.get("status") or {}).get("phase") == "Running" for p in others)
