"""The provider's trust boundary, end to end (issue 9), with every component running under
the identity its chart gives it (harness/kube_offload_harness/identities.py):

- the consumer identity the remote chart creates cannot read Secrets outside its twin
  namespaces, create pods or exec in kube-system, or create a namespace;
- offloaded pods whose spec the provider forbids are refused with a message naming the
  field, and the local pod's Events say why;
- the provider's quota refuses what would exceed it, and admits it once room is made;
- a second consumer cannot touch the first one's namespaces or ShadowPods.

Everything is driven with kubectl, as each party would: the provider admin with the remote
cluster's admin kubeconfig, the consumer with the token kubeconfig the harness minted for
its ServiceAccount.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import offloaded_namespace

LOCAL_ID = "local"
IMAGE = "registry.k8s.io/pause:3.10"



@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The kubeconfig the local cluster's virtual kubelet uses on the provider."""
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(LOCAL_ID))


@pytest.fixture(scope="module")
def intruder(offload_env: Environment, remote: Cluster) -> Path:
    """A second consumer admitted by the same provider (same chart, another entry)."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values("intruder", node_labels={}))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa("intruder"))


def pod(name: str, namespace: str, **spec_extra: object) -> dict:
    container = {"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    container.update(spec_extra.pop("container", {}))  # type: ignore[arg-type]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 1, **spec_extra},
    }


def events_of(local: Cluster, namespace: str, name: str) -> list[dict]:
    return local.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]


def refused_message(local: Cluster, namespace: str, name: str) -> str:
    """The provider's refusal as the local pod tells it: ProviderRefused (the provider
    said no), or ProviderPolicyRefused (the vkubelet did not send what the provider's
    policy refuses, e.g. a hostPath volume: vkubelet/shared/policy_fit.py)."""
    for event in events_of(local, namespace, name):
        if event.get("reason") in ("ProviderRefused", "ProviderPolicyRefused"):
            return event.get("message") or ""
    return ""


# --- what the consumer identity may do ---------------------------------------------------------
def test_consumer_cannot_reach_outside_its_namespaces(remote: Cluster, consumer: Path) -> None:
    for args in (
        ("auth", "can-i", "get", "secrets", "-n", "kube-system"),
        ("auth", "can-i", "list", "secrets", "--all-namespaces"),
        ("auth", "can-i", "create", "pods", "-n", "kube-system"),
        ("auth", "can-i", "create", "pods/exec", "-n", "kube-system"),
        ("auth", "can-i", "create", "namespaces"),
        ("auth", "can-i", "delete", "namespaces"),
        ("auth", "can-i", "list", "pods", "--all-namespaces"),
        ("auth", "can-i", "list", "nodes"),
        ("auth", "can-i", "create", "shadowpods.kube-offload.io", "-n", "default"),
    ):
        result = remote.kubectl_as(consumer, *args)
        assert result.stdout.strip() == "no", f"consumer can {' '.join(args[2:])}: {result.stdout}{result.stderr}"

    # Not only what RBAC says: the real requests are refused.
    read = remote.kubectl_as(consumer, "get", "secrets", "-n", "kube-system")
    assert read.returncode != 0 and "forbidden" in read.stderr.lower()
    made = remote.kubectl_as(consumer, "create", "namespace", unique("sneaky"))
    assert made.returncode != 0 and "forbidden" in made.stderr.lower()
    run = remote.kubectl_as(consumer, "run", unique("x"), "-n", "kube-system", f"--image={IMAGE}")
    assert run.returncode != 0 and "forbidden" in run.stderr.lower()

    # What it may do: request twins in its tenant namespace, read its own Consumer.
    tenant = c.tenant_namespace(LOCAL_ID)
    assert remote.kubectl_as(consumer, "auth", "can-i", "create", "twinnamespaces.kube-offload.io", "-n", tenant).stdout.strip() == "yes"
    own = remote.kubectl_as(consumer, "get", "consumers.kube-offload.io", LOCAL_ID, "-o", "json")
    assert own.returncode == 0, own.stderr
    other = remote.kubectl_as(consumer, "get", "consumers.kube-offload.io")
    assert other.returncode != 0, "a consumer must not list every Consumer"


def test_offloading_works_and_twin_is_the_providers(local: Cluster, remote: Cluster, consumer: Path, wait) -> None:
    ns = unique("tb-ok")
    offloaded_namespace(local, ns)
    try:
        local.apply(pod("web", ns))
        wait(lambda: local.kubectl("get", "pod", "web", "-n", ns, "-o", "jsonpath={.status.phase}", check=False).stdout == "Running",
             timeout=90, what="the offloaded pod Running")
        twin_ns = remote.kubectl_json("get", "namespace", f"{ns}-{LOCAL_ID}")
        labels = twin_ns["metadata"]["labels"]
        assert labels[c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID
        assert labels[c.LABEL_MANAGED_BY] == c.MANAGED_BY_ENFORCER
        assert labels[c.LABEL_PSA_ENFORCE] == c.DEFAULT_PSA_LEVEL
        # The consumer works inside its twin, and only there.
        twin_name = f"{ns}-{LOCAL_ID}"
        assert remote.kubectl_as(consumer, "auth", "can-i", "list", "secrets", "-n", twin_name).stdout.strip() == "yes"
        assert remote.kubectl_as(consumer, "auth", "can-i", "create", "pods", "-n", twin_name).stdout.strip() == "no"
        assert remote.kubectl_as(consumer, "auth", "can-i", "patch", f"namespaces/{twin_name}").stdout.strip() == "no"
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize(
    ("case", "spec_extra", "field"),
    [
        ("hostnet", {"hostNetwork": True}, "hostNetwork"),
        ("hostpid", {"hostPID": True}, "hostPID"),
        ("priv", {"container": {"securityContext": {"privileged": True}}}, "privileged"),
        ("sysadmin", {"container": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}}, "capabilities"),
        ("hostpath", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath"),
    ],
)
def test_forbidden_pod_specs_are_refused_and_the_local_pod_says_why(
    local: Cluster, remote: Cluster, wait, case: str, spec_extra: dict, field: str
) -> None:
    ns = unique(f"tb-{case}")
    offloaded_namespace(local, ns)
    try:
        local.apply(pod("bad", ns, **spec_extra))
        message = wait(lambda: refused_message(local, ns, "bad"), timeout=90, what=f"a ProviderRefused Event naming {field}")
        assert field in message, message
        phase = local.kubectl("get", "pod", "bad", "-n", ns, "-o", "jsonpath={.status.phase}").stdout
        assert phase == "Pending"
        assert remote.kubectl_json("get", "shadowpods", "-n", f"{ns}-{LOCAL_ID}")["items"] == []
        assert remote.kubectl_json("get", "pods", "-n", f"{ns}-{LOCAL_ID}")["items"] == []
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_quota_refuses_then_admits_after_a_pod_goes(local: Cluster, remote: Cluster, wait) -> None:
    ns = unique("tb-quota")
    offloaded_namespace(local, ns)
    twin_name = f"{ns}-{LOCAL_ID}"
    try:
        local.apply(pod("first", ns))
        wait(lambda: local.kubectl("get", "pod", "first", "-n", ns, "-o", "jsonpath={.status.phase}", check=False).stdout == "Running",
             timeout=90, what="the first pod Running")

        # Other tests' namespaces may still be terminating: wait until this consumer's only
        # live ShadowPod is ours and the enforcer's usage says so, so the quota below is exact.
        def settled() -> bool:
            everywhere = remote.kubectl_json("get", "shadowpods", "-A", "-l", f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_ID}")["items"]
            status = remote.kubectl_json("get", "consumer", LOCAL_ID).get("status") or {}
            return [s["metadata"]["namespace"] for s in everywhere] == [twin_name] and status.get("shadowPods") == 1

        wait(settled, timeout=120, what="the consumer's usage down to the one pod of this test")
        # The provider lowers the quota to what is in use: the next pod is over it. The
        # virtual node shrinks too, but a pod already bound must meet the provider's refusal.
        in_use = 1
        remote.kubectl("patch", "consumer", LOCAL_ID, "--type=merge", "-p", json.dumps({"spec": {"quota": {"pods": str(in_use)}}}))
        second = pod("second", ns)
        second["spec"]["nodeName"] = f"{c.VIRTUAL_NODE_PREFIX}{remote.spec.cluster_id}"
        second["spec"]["tolerations"] = [{"key": c.TAINT_KEY, "operator": "Exists"}]
        local.apply(second)
        message = wait(lambda: refused_message(local, ns, "second"), timeout=90, what="a ProviderRefused Event for the quota")
        assert "quota" in message and "pods" in message, message
        local.kubectl("delete", "pod", "first", "-n", ns, "--wait=true", "--timeout=60s")
        wait(lambda: local.kubectl("get", "pod", "second", "-n", ns, "-o", "jsonpath={.status.phase}", check=False).stdout == "Running",
             timeout=360, what="the second pod admitted once the first is gone (retried with backoff)")
    finally:
        remote.kubectl("patch", "consumer", LOCAL_ID, "--type=json", "-p", '[{"op":"remove","path":"/spec/quota"}]', check=False)
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_second_consumer_cannot_touch_the_first(local: Cluster, remote: Cluster, intruder: Path, wait) -> None:
    ns = unique("tb-mine")
    offloaded_namespace(local, ns)
    twin_name = f"{ns}-{LOCAL_ID}"
    try:
        local.apply(pod("web", ns))
        wait(lambda: remote.kubectl_json("get", "shadowpods", "-n", twin_name)["items"] if
             remote.kubectl("get", "namespace", twin_name, check=False).returncode == 0 else None,
             timeout=90, what="the first consumer's ShadowPod")
        for args in (
            ("get", "shadowpods", "-n", twin_name),
            ("get", "secrets", "-n", twin_name),
            ("delete", "shadowpods", "--all", "-n", twin_name),
            ("get", "twinnamespaces", "-n", c.tenant_namespace(LOCAL_ID)),
            ("get", "consumer", LOCAL_ID),
        ):
            result = remote.kubectl_as(intruder, *args)
            assert result.returncode != 0 and "forbidden" in result.stderr.lower(), f"intruder could {args}: {result.stdout}"

        # Asking the provider for the first consumer's namespace is refused, never adopted.
        request = {
            "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
            "kind": c.TWIN_NAMESPACE_KIND,
            "metadata": {"name": twin_name, "namespace": c.tenant_namespace("intruder")},
            "spec": {"localNamespace": ns},
        }
        made = remote.kubectl_as(intruder, "apply", "-f", "-", input=json.dumps(request))
        assert made.returncode == 0, made.stderr
        phase = wait(lambda: remote.kubectl_as(intruder, "get", "twinnamespace", twin_name, "-n", c.tenant_namespace("intruder"),
                                        "-o", "jsonpath={.status.phase}").stdout or None, timeout=60, what="the intruder's request answered")
        assert phase == c.TWIN_PHASE_REFUSED
        labels = remote.kubectl_json("get", "namespace", twin_name)["metadata"]["labels"]
        assert labels[c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID
        # Withdrawing its refused request must not take the first consumer's namespace along.
        remote.kubectl_as(intruder, "delete", "twinnamespace", twin_name, "-n", c.tenant_namespace("intruder"), "--wait=true")
        assert remote.kubectl("get", "namespace", twin_name, check=False).returncode == 0, "the intruder's delete removed the first consumer's namespace"
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)
