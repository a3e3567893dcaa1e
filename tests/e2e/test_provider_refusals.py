"""A provider refusing a ShadowPod, end to end on the shared loopback environment
(conftest.py). The refusal is the remote apiserver's own: a ValidatingAdmissionPolicy
that denies ShadowPods whose pod carries a given label, answered as HTTP 403 with the
policy's message, exactly as the provider's ShadowPod webhook answers. The local pod
must get a Warning Event ``ProviderRefused`` with the provider's words (no apiserver
boilerplate), stay Pending with a status that says why, never get a ShadowPod, and be
retried with backoff - a handful of attempts in 20 s, not a hot loop. Once the pod no
longer carries the label, it is offloaded.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
import yaml

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from support.clusters import offloaded_namespace

LOCAL_ID = "local"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
TIMEOUT = 60
REFUSE_LABEL = "e2e.kube-offload.io/refuse"
POLICY = "e2e-refuse-labelled-shadowpods"
PROVIDER_WORDS = f"pods labelled {REFUSE_LABEL} are not accepted by this provider (e2e policy)"
OBSERVE_SECONDS = 20


def _policy() -> list[dict]:
    labels = "object.spec.pod.metadata.labels"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [{
                        "apiGroups": [c.SHADOWPOD_GROUP],
                        "apiVersions": [c.SHADOWPOD_VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [c.SHADOWPOD_PLURAL],
                    }]
                },
                "validations": [{
                    "expression": (
                        f"!has(object.spec.pod.metadata) || !has({labels}) || !('{REFUSE_LABEL}' in {labels})"
                    ),
                    "message": PROVIDER_WORDS,
                    "reason": "Forbidden",
                }],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    ]


def _shadowpod(namespace: str, name: str, labels: dict) -> dict:
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pod": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": IMAGE}]}}},
    }


def _policy_enforced(remote: Cluster, namespace: str) -> bool:
    """The apiserver loads policies asynchronously: probe with a server-side dry run."""
    probe = _shadowpod(namespace, "policy-probe", {REFUSE_LABEL: "true"})
    result = remote.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False)
    return result.returncode != 0 and PROVIDER_WORDS in result.stderr


def _events(local: Cluster, namespace: str, pod: str, reason: str) -> list[dict]:
    items = local.kubectl_json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}")["items"]
    return [e for e in items if e.get("reason") == reason]


def _refusal_lines(env, remote: Cluster, twin: str, pod: str) -> int:
    path = env.log_path(f"vkubelet-{remote.spec.cluster_id}")
    text = path.read_text(errors="replace") if path.exists() else ""
    return len(re.findall(rf"refused create ShadowPod {re.escape(twin)}/{re.escape(pod)} ", text))


@pytest.fixture
def refusing_provider(remote):
    remote.apply(_policy())
    yield
    remote.kubectl("delete", "validatingadmissionpolicybinding", POLICY, "--ignore-not-found", check=False)
    remote.kubectl("delete", "validatingadmissionpolicy", POLICY, "--ignore-not-found", check=False)


def test_refused_pod_gets_the_providers_words_backoff_and_no_shadowpod(offload_env, local, remote, wait, refusing_provider):
    ns = f"refused-{uuid.uuid4().hex[:6]}"
    twin = f"{ns}-{LOCAL_ID}"
    pod = "web"
    offloaded_namespace(local, ns)
    try:
        wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0, timeout=TIMEOUT,
             what=f"twin namespace {twin}")
        wait(lambda: _policy_enforced(remote, twin), timeout=TIMEOUT, what="the remote apiserver to enforce the policy")

        # No API server access asked: the pod's one offload Event is then the Normal
        # Offloaded, whatever relay the harness runs (in mode home with no relay the
        # HomeAPIUnavailable Warning stands in for it: tests/unit/vkubelet/pods/test_shadowpods.py).
        local.apply({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod, "namespace": ns, "labels": {"app": "web", REFUSE_LABEL: "true"},
                                  "annotations": {c.ANNOTATION_API_SERVER: c.API_SERVER_DISABLED}},
                     "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 1}})

        refused = wait(lambda: _events(local, ns, pod, "ProviderRefused"), timeout=TIMEOUT, what="a ProviderRefused Event")
        event = refused[0]
        assert event["type"] == "Warning"
        # The provider's words, without "... is forbidden: ValidatingAdmissionPolicy ... denied request: ".
        assert event["message"] == PROVIDER_WORDS
        assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["name"] == pod

        # What `kubectl get/describe pod` show: Pending, ProviderRefused, scheduled on the virtual node.
        def waiting():
            current = local.kubectl_json("get", "pod", pod, "-n", ns)
            return current if (current.get("status") or {}).get("reason") == "ProviderRefused" else None

        current = wait(waiting, timeout=TIMEOUT, what="the pod's status to say it waits for the provider")
        status = current["status"]
        assert status["phase"] == "Pending"
        assert PROVIDER_WORDS in status["message"] and remote.spec.cluster_id in status["message"]
        assert current["spec"]["nodeName"] == f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"
        scheduled = [cond for cond in status.get("conditions") or [] if cond["type"] == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "True"
        describe = local.kubectl("describe", "pod", pod, "-n", ns).stdout
        assert "ProviderRefused" in describe and PROVIDER_WORDS in describe

        # Backoff, not a hot loop: over 20 s a handful of attempts (2 s, 4 s, 8 s, 16 s
        # apart), each one log line, and the Events folded into at most a couple.
        before = _refusal_lines(offload_env, remote, twin, pod)
        time.sleep(OBSERVE_SECONDS)
        attempts = _refusal_lines(offload_env, remote, twin, pod) - before
        assert 1 <= attempts <= 6, f"{attempts} refused creates in {OBSERVE_SECONDS}s"
        events = _events(local, ns, pod, "ProviderRefused")
        assert len(events) <= 2, events
        assert sum(int(e.get("count") or 1) for e in events) <= _refusal_lines(offload_env, remote, twin, pod)
        # Never a ShadowPod (nor a duplicate).
        assert remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", twin)["items"] == []

        # The pod changed (label gone): its backoff starts over, it is accepted and offloaded.
        local.kubectl("label", "pod", pod, "-n", ns, f"{REFUSE_LABEL}-")
        wait(lambda: len(remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", twin)["items"]) == 1,
             timeout=TIMEOUT, what="the ShadowPod created once the pod is acceptable")

        def running():
            current = local.kubectl_json("get", "pod", pod, "-n", ns)
            return current if (current.get("status") or {}).get("phase") == "Running" else None

        current = wait(running, timeout=90, what="the offloaded pod Running")
        assert (current["status"].get("reason") or "") != "ProviderRefused"
        # What `kubectl describe pod` keeps of where it went (written by the recorder's
        # thread, after the pod worker moved on: docs/runtime.md, Event recorder).
        offloaded = wait(lambda: _events(local, ns, pod, "Offloaded"), timeout=TIMEOUT, what="an Offloaded Event")
        assert offloaded[0]["type"] == "Normal"
        assert offloaded[0]["message"] == f"running in cluster {remote.spec.cluster_id} as {twin}/{pod}"
        assert len(remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", twin)["items"]) == 1
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def _taint_keys(local: Cluster, node: str) -> list[str]:
    return [t.get("key") for t in (local.kubectl_json("get", "node", node).get("spec") or {}).get("taints") or []]


def _phase(local: Cluster, ns: str, pod: str) -> str | None:
    return (local.kubectl_json("get", "pod", pod, "-n", ns).get("status") or {}).get("phase")


def _pod(local: Cluster, ns: str, name: str) -> None:
    local.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                 "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 1}})


def test_a_provider_cordon_shows_on_the_virtual_node_and_holds_new_pods_back(offload_env, local, remote, wait):
    # The provider cordons this consumer (Consumer spec.cordoned): its ShadowPod webhook
    # refuses every new ShadowPod. The virtual node says so with a NoSchedule taint, so
    # the scheduler sends it no new pod (instead of binding pods that would only be
    # refused there); the pods it runs keep running; lifting the cordon lifts the taint.
    ns = f"cordon-{uuid.uuid4().hex[:6]}"
    node = f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"
    consumer = offload_env.topology().local.cluster_id

    def cordon(value: bool) -> None:
        remote.kubectl("patch", "consumers.kube-offload.io", consumer, "--type=merge",
                       "-p", f'{{"spec":{{"cordoned":{str(value).lower()}}}}}')

    offloaded_namespace(local, ns)
    try:
        _pod(local, ns, "before")
        wait(lambda: _phase(local, ns, "before") == "Running", timeout=90, what=f"{ns}/before Running")
        assert c.TAINT_PROVIDER_CORDONED_KEY not in _taint_keys(local, node)

        cordon(True)
        wait(lambda: c.TAINT_PROVIDER_CORDONED_KEY in _taint_keys(local, node), timeout=TIMEOUT,
             what=f"the provider-cordon taint on {node}")
        _pod(local, ns, "after")

        def unschedulable():
            current = local.kubectl_json("get", "pod", "after", "-n", ns)
            conditions = (current.get("status") or {}).get("conditions") or []
            return [cond for cond in conditions if cond["type"] == "PodScheduled" and cond["status"] == "False"]

        condition = wait(unschedulable, timeout=TIMEOUT, what="the new pod reported unschedulable")[0]
        assert "untolerated taint" in condition.get("message", ""), condition  # kube-scheduler names no key
        assert not local.kubectl_json("get", "pod", "after", "-n", ns)["spec"].get("nodeName")
        assert _phase(local, ns, "before") == "Running"  # NoSchedule: what runs stays

        cordon(False)
        wait(lambda: c.TAINT_PROVIDER_CORDONED_KEY not in _taint_keys(local, node), timeout=TIMEOUT,
             what=f"the provider-cordon taint gone from {node}")
        wait(lambda: _phase(local, ns, "after") == "Running", timeout=90, what=f"{ns}/after Running once uncordoned")
    finally:
        cordon(False)
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
