"""Issue 21, quota and twin plan, end to end under the consumer identity the remote chart
creates: the quota counts what runs (a ShadowPod counts until its pod is gone, lowered
requests other than a resize's and consumer finalizers are refused, a pod orphaned by ``--cascade=orphan`` is
deleted by the enforcer, limits are counted when the provider says so, and under quota mode
hard must equal requests while what ran before keeps running), twin names follow
the provider's plan (``-<consumer id>``, reserved names, a maximum), and Consumer.status
names no provider node.

A consumer of its own (``e2e-quota``) is admitted through the chart, as test_trust_boundary
admits its intruder, so the session consumer's quota and twins are left alone; its policy
is set by patching its Consumer, as a provider's admin would. It asks for a twin with a
TwinNamespace (without the virtual kubelet's origin label, so no virtual kubelet touches
it) and writes ShadowPods there with its own token. Tests run in file order.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import find, patch_consumer, report_container_resources, twin_status

CONSUMER = "e2e-quota"
TENANT = c.tenant_namespace(CONSUMER)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
HOLD = "e2e.kube-offload.io/hold"  # a finalizer the provider's admin puts on a pod
CONSUMER_KIND = f"{c.CONSUMER_PLURAL}.{c.DOMAIN}"
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
SHADOWPOD_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"
SERVE_SECONDS = 90



def twin_request(name: str) -> dict:
    return {
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}",
        "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"localNamespace": name},
    }


def shadowpod(name: str, *, cpu: str = "100m", limits: dict | None = None, finalizers: list[str] | None = None) -> dict:
    resources: dict = {"requests": {"cpu": cpu, "memory": "16Mi"}}
    if limits:
        resources["limits"] = limits
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}
    metadata: dict = {"name": name, "labels": origin}
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": metadata,
        "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}},
                         "spec": {"containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "Always",
                                                  "resources": resources}],
                                  "terminationGracePeriodSeconds": 1}}},
    }


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The chart-made identity of consumer e2e-quota (its own Consumer, tenant, token)."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(CONSUMER, node_labels={}))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(CONSUMER))


@pytest.fixture(scope="module")
def twin(remote: Cluster, consumer: Path, wait) -> str:
    """A twin of e2e-quota, asked for by the consumer itself and made by the enforcer."""
    name = f"{unique('q')}-{CONSUMER}"
    made = remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(twin_request(name)))
    assert made.returncode == 0, made.stderr
    wait(lambda: twin_status(remote, CONSUMER, name).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS,
         what=f"twin {name} Ready")
    yield name
    remote.kubectl("delete", TWIN_KIND, "--all", "-n", TENANT, "--wait=true", "--timeout=120s", check=False, timeout=150)
    patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA), "policy": None})


def create(remote: Cluster, consumer: Path, twin: str, obj: dict, *, dry: bool = False) -> subprocess.CompletedProcess:
    """As the consumer; ``dry``: a server-side dry run (the webhook judges it, nothing is
    stored), to probe for a Consumer change the webhook's cache may not show yet."""
    extra = ("--dry-run=server",) if dry else ()
    return remote.kubectl_as(consumer, "create", "-n", twin, *extra, "-f", "-", input=json.dumps(obj))


def pod_of(remote: Cluster, twin: str, name: str) -> dict | None:
    return find(remote, "pod", name, "-n", twin)


def delete_shadowpod(remote: Cluster, consumer: Path, twin: str, name: str, *extra: str) -> None:
    result = remote.kubectl_as(consumer, "delete", SHADOWPOD_KIND, name, "-n", twin, "--wait=false", *extra)
    assert result.returncode == 0, result.stderr


# --- the quota counts what runs --------------------------------------------------------------------
def test_an_update_removing_a_limit_is_refused_naming_the_field_and_a_resize_is_not(
        remote: Cluster, consumer: Path, twin: str, wait) -> None:
    made = create(remote, consumer, twin, shadowpod("lower", cpu="200m", limits={"cpu": "400m"}))
    assert made.returncode == 0, made.stderr
    try:
        removed = remote.kubectl_as(consumer, "patch", SHADOWPOD_KIND, "lower", "-n", twin, "--type=json", "-p", json.dumps(
            [{"op": "remove", "path": "/spec/pod/spec/containers/0/resources/limits"}]))
        assert removed.returncode != 0, "an update removing a limit was admitted"
        assert DENIED in removed.stderr
        assert "spec.pod.spec.containers[0].resources.limits.cpu: removed (was 400m)" in removed.stderr
        assert "the running pod keeps its old limits" in removed.stderr
        # Lowering a container's cpu is a resize: the enforcer resizes the running pod to it
        # (pods/resize), and its status counts the old figure until the kubelet applied it.
        # kwok reports no container resources, without which no API server resizes a pod
        # (and the webhook's dry run of the resize would say so): reported as a kubelet does.
        wait(lambda: report_container_resources(remote, twin, "lower"), timeout=90, what="the pod running, its resources reported")
        lowered = remote.kubectl_as(consumer, "patch", SHADOWPOD_KIND, "lower", "-n", twin, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/pod/spec/containers/0/resources/requests/cpu", "value": "100m"}]))
        assert lowered.returncode == 0, lowered.stderr
        # Raising stays possible (the higher figure counts), and so does any other change.
        raised = remote.kubectl_as(consumer, "patch", SHADOWPOD_KIND, "lower", "-n", twin, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/pod/spec/containers/0/resources/requests/cpu", "value": "300m"}]))
        assert raised.returncode == 0, raised.stderr
    finally:
        delete_shadowpod(remote, consumer, twin, "lower")


def test_a_consumer_finalizer_is_refused_on_create_and_update(remote: Cluster, consumer: Path, twin: str) -> None:
    held = create(remote, consumer, twin, shadowpod("held", finalizers=["example.com/keep"]))
    assert held.returncode != 0 and DENIED in held.stderr
    assert "metadata.finalizers" in held.stderr and "example.com/keep" in held.stderr

    made = create(remote, consumer, twin, shadowpod("plain"))
    assert made.returncode == 0, made.stderr
    try:
        added = remote.kubectl_as(consumer, "patch", SHADOWPOD_KIND, "plain", "-n", twin, "--type=merge",
                           "-p", json.dumps({"metadata": {"finalizers": ["example.com/keep"]}}))
        assert added.returncode != 0 and DENIED in added.stderr and "metadata.finalizers" in added.stderr
        # Other metadata stays the consumer's to change.
        labelled = remote.kubectl_as(consumer, "label", SHADOWPOD_KIND, "plain", "-n", twin, "tier=web")
        assert labelled.returncode == 0, labelled.stderr
    finally:
        delete_shadowpod(remote, consumer, twin, "plain")


def test_a_pod_orphaned_by_cascade_orphan_is_deleted_by_the_enforcer(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    made = create(remote, consumer, twin, shadowpod("orphan"))
    assert made.returncode == 0, made.stderr
    pod = wait(lambda: pod_of(remote, twin, "orphan"), timeout=SERVE_SECONDS, what="the enforcer's pod")
    uid = pod["metadata"]["uid"]
    assert pod["metadata"]["labels"][c.LABEL_MANAGED_BY] == c.MANAGED_BY_ENFORCER

    delete_shadowpod(remote, consumer, twin, "orphan", "--cascade=orphan")
    wait(lambda: find(remote, SHADOWPOD_KIND, "orphan", "-n", twin) is None, timeout=SERVE_SECONDS,
         what="the ShadowPod gone (the garbage collector orphaned its pod)")
    wait(lambda: (pod_of(remote, twin, "orphan") or {}).get("metadata", {}).get("uid") != uid, timeout=SERVE_SECONDS,
         what="the orphaned pod deleted by the enforcer")


def test_a_deleted_shadowpod_counts_until_its_pod_is_gone(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    patch_consumer(remote, CONSUMER, {"quota": {"pods": "1"}})
    made = create(remote, consumer, twin, shadowpod("first"))
    assert made.returncode == 0, made.stderr
    pod = wait(lambda: pod_of(remote, twin, "first"), timeout=SERVE_SECONDS, what="its pod")
    # The provider's admin holds the pod in Terminating (as a slow shutdown would).
    remote.kubectl("patch", "pod", "first", "-n", twin, "--type=merge", "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))
    try:
        # The webhook reads the Consumer from its cache: probe (dry runs) until the quota holds.
        wait(lambda: "exceeded quota" in create(remote, consumer, twin, shadowpod("probe"), dry=True).stderr or None,
             timeout=SERVE_SECONDS, what="the quota of one pod taken")
        delete_shadowpod(remote, consumer, twin, "first")
        wait(lambda: find(remote, SHADOWPOD_KIND, "first", "-n", twin) is None, timeout=SERVE_SECONDS, what="ShadowPod gone")
        wait(lambda: (pod_of(remote, twin, "first") or {}).get("metadata", {}).get("deletionTimestamp"),
             timeout=SERVE_SECONDS, what="its pod terminating")

        refused = create(remote, consumer, twin, shadowpod("second"))
        assert refused.returncode != 0, "admitted while the deleted ShadowPod's pod still runs"
        assert DENIED in refused.stderr and "exceeded quota" in refused.stderr and "pods: requested 1, used 1" in refused.stderr
        assert pod_of(remote, twin, "first")["metadata"]["uid"] == pod["metadata"]["uid"]
    finally:
        remote.kubectl("patch", "pod", "first", "-n", twin, "--type=json",
                       "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False)
    wait(lambda: pod_of(remote, twin, "first") is None, timeout=SERVE_SECONDS, what="the pod gone")
    wait(lambda: create(remote, consumer, twin, shadowpod("second")).returncode == 0 or None, timeout=SERVE_SECONDS,
         what="the second ShadowPod admitted once the first pod is gone")
    delete_shadowpod(remote, consumer, twin, "second")
    patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA)})


def test_quota_mode_limits_counts_limits_and_requires_them(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    patch_consumer(remote, CONSUMER, {"quota": {"cpu": "1"}, "policy": {"quotaMode": "limits"}})
    try:
        unbounded = wait(lambda: (r := create(remote, consumer, twin, shadowpod("nolimit"), dry=True)).returncode != 0 and r or None,
                         timeout=SERVE_SECONDS, what="the limits quota in force")
        assert "spec.pod.spec.containers[0].resources.limits.cpu: must be set" in unbounded.stderr
        assert "spec.policy.quotaMode" in unbounded.stderr
        over = create(remote, consumer, twin, shadowpod("big", limits={"cpu": "2"}))
        assert over.returncode != 0 and "exceeded quota" in over.stderr and "limits.cpu: requested 2" in over.stderr
        fits = create(remote, consumer, twin, shadowpod("fits", cpu="100m", limits={"cpu": "500m"}))
        assert fits.returncode == 0, fits.stderr
        used = wait(lambda: ((find(remote, CONSUMER_KIND, CONSUMER) or {}).get("status") or {}).get("used", {}).get("limits.cpu"),
                    timeout=SERVE_SECONDS, what="status.used[limits.cpu]")
        assert used == "500m"
        delete_shadowpod(remote, consumer, twin, "fits")
    finally:
        patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA), "policy": None})


def test_quota_mode_hard_admits_only_limits_equal_to_requests_and_keeps_what_ran_before(
    remote: Cluster, consumer: Path, twin: str, wait
) -> None:
    patch_consumer(remote, CONSUMER, {"quota": {"cpu": "2"}})
    try:
        # Admitted under the default mode, bursting above its request; then the provider goes hard.
        before = create(remote, consumer, twin, shadowpod("before", cpu="100m", limits={"cpu": "300m"}))
        assert before.returncode == 0, before.stderr
        pod_uid = wait(lambda: (pod_of(remote, twin, "before") or {}).get("metadata", {}).get("uid"),
                       timeout=SERVE_SECONDS, what="the pod of the ShadowPod admitted before")
        patch_consumer(remote, CONSUMER, {"policy": {"quotaMode": "hard"}})
        burst = shadowpod("burst", cpu="100m", limits={"cpu": "200m"})
        refused = wait(lambda: (r := create(remote, consumer, twin, burst, dry=True)).returncode != 0 and r or None,
                       timeout=SERVE_SECONDS, what="quota mode hard in force")
        assert DENIED in refused.stderr
        assert ('spec.pod.spec.containers[0].resources.limits.cpu (container "app"): must equal requests.cpu '
                "(limit 200m, request 100m)") in refused.stderr, refused.stderr
        assert "quota mode hard (Consumer spec.policy.quotaMode)" in refused.stderr
        assert "set limits.cpu and requests.cpu to the same amount" in refused.stderr
        unbounded = create(remote, consumer, twin, shadowpod("unbounded", cpu="100m"))
        assert unbounded.returncode != 0 and 'limits.cpu (container "app"): must be set' in unbounded.stderr
        equal = create(remote, consumer, twin, shadowpod("equal", cpu="200m", limits={"cpu": "200m"}))
        assert equal.returncode == 0, equal.stderr
        # What ran before keeps running, and counts: requests 100m + 200m, limits 300m + 200m.
        used = wait(lambda: (u := ((find(remote, CONSUMER_KIND, CONSUMER) or {}).get("status") or {}).get("used") or {})
                    .get("limits.cpu") == "500m" and u.get("cpu") == "300m" and u or None,
                    timeout=SERVE_SECONDS, what="status.used counting both ShadowPods' requests and limits")
        assert used["limits.cpu"] == "500m"
        assert (pod_of(remote, twin, "before") or {}).get("metadata", {}).get("uid") == pod_uid
        assert find(remote, SHADOWPOD_KIND, "before", "-n", twin) is not None
    finally:
        for name in ("before", "equal"):
            remote.kubectl_as(consumer, "delete", SHADOWPOD_KIND, name, "-n", twin, "--wait=false", "--ignore-not-found")
        patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA), "policy": None})


# --- twin names and count follow the provider's plan --------------------------------------------
def test_twin_names_outside_the_plan_are_refused_where_the_consumer_looks(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    cases = {
        "ingress-nginx": "spec.policy.twinNamespaces.sameNames",  # not -<consumer id>, not granted
        f"kube-x-{CONSUMER}": "reserved by the provider for itself",
    }
    for name in cases:
        made = remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(twin_request(name)))
        assert made.returncode == 0, made.stderr
    for name, fragment in cases.items():
        status = wait(lambda n=name: twin_status(remote, CONSUMER, n) if twin_status(remote, CONSUMER, n).get("phase") else None,
                      timeout=SERVE_SECONDS, what=f"TwinNamespace {name} answered")
        assert status["phase"] == c.TWIN_PHASE_REFUSED and fragment in status["message"], status
        made_for_us = ((find(remote, "namespace", name) or {}).get("metadata") or {}).get("labels", {})
        assert made_for_us.get(c.LABEL_ORIGIN_CLUSTER_ID) != CONSUMER, f"namespace {name} was made for the consumer"
        remote.kubectl_as(consumer, "delete", TWIN_KIND, name, "-n", TENANT, "--wait=false")


def test_the_maximum_of_twins_is_held(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    patch_consumer(remote, CONSUMER, {"policy": {"twinNamespaces": {"maxCount": 2}}})
    second, third = f"{unique('q2')}-{CONSUMER}", f"{unique('q3')}-{CONSUMER}"
    try:
        assert remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(twin_request(second))).returncode == 0
        wait(lambda: twin_status(remote, CONSUMER, second).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS,
             what="the second twin Ready")
        assert remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(twin_request(third))).returncode == 0
        status = wait(lambda: twin_status(remote, CONSUMER, third) if twin_status(remote, CONSUMER, third).get("phase") == c.TWIN_PHASE_REFUSED
                      else None, timeout=SERVE_SECONDS, what="the third twin refused")
        assert "maximum of 2 twin namespaces" in status["message"] and "spec.policy.twinNamespaces.maxCount" in status["message"]
        assert find(remote, "namespace", third) is None
        # A place freed is given to the waiting request.
        remote.kubectl_as(consumer, "delete", TWIN_KIND, second, "-n", TENANT, "--wait=false")
        wait(lambda: twin_status(remote, CONSUMER, third).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS * 2,
             what="the third twin served once the second is gone")
    finally:
        for name in (second, third):
            remote.kubectl_as(consumer, "delete", TWIN_KIND, name, "-n", TENANT, "--wait=false")
        patch_consumer(remote, CONSUMER, {"policy": None})


# --- Consumer.status says less --------------------------------------------------------------------
def test_consumer_status_has_capacity_shapes_and_no_node_names(remote: Cluster, consumer: Path, wait) -> None:
    def published() -> dict | None:
        result = remote.kubectl_as(consumer, "get", CONSUMER_KIND, CONSUMER, "-o", "json")
        assert result.returncode == 0, result.stderr
        status = json.loads(result.stdout).get("status") or {}
        return status if (status.get("capacity") or {}).get("freeShapes") else None

    status = wait(published, timeout=SERVE_SECONDS, what="Consumer.status.capacity.freeShapes")
    capacity = status["capacity"]
    assert "freeByNode" not in capacity
    assert len(capacity["freeShapes"]) == capacity["schedulableNodes"]
    assert all(isinstance(n, int) for n in capacity["pressure"].values())
    text = json.dumps(status)
    nodes = remote.kubectl_json("get", "nodes")["items"]
    assert nodes
    for node in nodes:
        assert f'"{node["metadata"]["name"]}"' not in text, f"Consumer.status names node {node['metadata']['name']}"
        for address in (node.get("status") or {}).get("addresses") or []:
            assert address["address"] not in text, f"Consumer.status carries address {address['address']}"
