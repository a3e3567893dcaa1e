"""Both charts installed by real Helm into the real API servers of the session's loopback
clusters: the local chart into the local cluster, the remote chart into the remote one.
kwok pretends to run every pod (the image is never pulled, so the chart's default image is
kept), and it completes the certificate hook Jobs, so ``helm install`` runs its hooks as in
production. Every object of the release (``helm get manifest``) must then exist in the API
server as Helm's, and after ``helm uninstall`` nothing labelled with the release may be
left (hooks included).

Why the shared session clusters are safe to use: each install is a release of its own
(a fresh namespace and release name, so every cluster-scoped name differs from the
harness's and from the chart-identity objects), the webhook registrations the charts make
(the local pod and namespace webhooks, the remote ShadowPod webhook) point at Services whose
pods kwok only pretends to run, so they are installed with ``failurePolicy: Ignore`` and a
1 s timeout: while the release exists, a call the apiserver makes to them is skipped, never
refused, and the other e2e tests (which run after this one, never concurrently, and only
register their own webhooks by URL) cannot be broken even if the uninstall failed. The
pod webhook only matches offloaded namespaces and nothing is created in one meanwhile. The
test uninstalls in ``finally`` and removes what Helm by design leaves behind: the release
namespace it made and any CRD the remote chart's ``crds/`` added (CRDs that existed before,
such as ShadowPod, are left alone). A dedicated cluster pair would cost another minute of
control-plane start-up on a 2-core machine for no extra safety.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_offload import constants as c
from kube_offload.opt_in import runtime_class
from kube_offload_harness.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
LOCAL_CHART = REPO / "charts" / "kube-offload-local"
REMOTE_CHART = REPO / "charts" / "kube-offload-remote"
INSTANCE_LABEL = "app.kubernetes.io/instance"
# Every kind either chart renders (hooks included), to prove the uninstall left none.
RELEASE_KINDS = (
    "deployments,services,serviceaccounts,configmaps,secrets,jobs,cronjobs,pods,roles,rolebindings,"
    "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,validatingwebhookconfigurations,namespaces"
)
TIMEOUT = 120


class HelmRun:
    """helm against one loopback cluster, with a private helm home."""

    def __init__(self, cluster: Cluster, home: Path) -> None:
        self.cluster = cluster
        self.env = dict(
            cluster.env(),
            HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"), HELM_DATA_HOME=str(home / "data"),
        )

    def __call__(self, *args: str, values: dict[str, Any] | None = None, check: bool = True,
                 timeout: float = 300) -> subprocess.CompletedProcess:
        argv = [str(self.cluster.bins.helm), "--kubeconfig", str(self.cluster.kubeconfig), *args]
        if values is not None:
            argv += ["--values", "-"]
        result = subprocess.run(argv, input=yaml.safe_dump(values) if values is not None else None,
                                capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and result.returncode != 0:
            pytest.fail(f"`helm {' '.join(args)}` on {self.cluster.name} failed (exit {result.returncode}):\n"
                        f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return result


def _crd_names(cluster: Cluster) -> set[str]:
    return {item["metadata"]["name"] for item in cluster.kubectl_json("get", "crd")["items"]}


def _manifest_objects(helm: HelmRun, release: str, namespace: str) -> list[dict[str, Any]]:
    text = helm("get", "manifest", release, "--namespace", namespace).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _get_all(cluster: Cluster, objects: list[dict[str, Any]], namespace: str, *, missing_ok: bool) -> list[dict]:
    """The live copies of ``objects`` (kubectl resolves each apiVersion/kind itself).
    Objects without a namespace are looked up in the release namespace, where Helm put the
    namespaced ones (kubectl ignores it for cluster-scoped kinds); --namespace itself would
    make kubectl refuse the chart's objects in kube-system and kube-node-lease."""
    located = [
        {**o, "metadata": {**o["metadata"], "namespace": o["metadata"].get("namespace") or namespace}} for o in objects
    ]
    args = ["get", "-f", "-", "-o", "json"]
    if missing_ok:
        args.append("--ignore-not-found")
    result = cluster.kubectl(*args, input=yaml.safe_dump_all(located), check=False)
    assert result.returncode == 0, f"kubectl get of the release's objects on {cluster.name}: {result.stderr.strip()}"
    if not result.stdout.strip():
        return []
    parsed = json.loads(result.stdout)
    return parsed["items"] if parsed.get("kind") == "List" else [parsed]


def _leftovers(cluster: Cluster, release: str) -> list[str]:
    result = cluster.kubectl("get", RELEASE_KINDS, "--all-namespaces", "-l", f"{INSTANCE_LABEL}={release}",
                             "-o", "json", check=False)
    assert result.returncode == 0, result.stderr
    return [f"{i['kind']}/{i['metadata'].get('namespace', '')}/{i['metadata']['name']}"
            for i in json.loads(result.stdout)["items"]]


def _install_check_uninstall(cluster: Cluster, chart: Path, values: dict[str, Any], release: str,
                             tmp_path: Path) -> list[dict[str, Any]]:
    helm = HelmRun(cluster, tmp_path / "helm-home")
    crds_before = _crd_names(cluster)
    cluster.kubectl("create", "namespace", release)
    objects: list[dict[str, Any]] = []
    try:
        helm("install", release, str(chart), "--namespace", release, "--timeout", f"{TIMEOUT}s", values=values)
        status = json.loads(helm("status", release, "--namespace", release, "-o", "json").stdout)
        assert status["info"]["status"] == "deployed", status["info"]

        objects = _manifest_objects(helm, release, release)
        assert objects, "helm get manifest printed nothing"
        live = _get_all(cluster, objects, release, missing_ok=False)
        expected = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
        assert sorted((o["kind"], o["metadata"]["name"]) for o in live) == expected
        for obj in live:
            annotations = obj["metadata"].get("annotations") or {}
            where = f"{obj['kind']}/{obj['metadata']['name']}"
            assert annotations.get("meta.helm.sh/release-name") == release, f"{where} is not the release's"
            assert annotations.get("meta.helm.sh/release-namespace") == release, where
            assert obj["metadata"]["labels"][INSTANCE_LABEL] == release, where
        # The hooks ran and cleaned up after themselves (hook-succeeded).
        hooks = [d for d in yaml.safe_load_all(helm("get", "hooks", release, "--namespace", release).stdout) if d]
        assert {h["kind"] for h in hooks} >= {"Job"}, "the chart's certificate hooks are missing from the release"
        assert not _get_all(cluster, hooks, release, missing_ok=True), "hook objects survived their hook"
    finally:
        helm("uninstall", release, "--namespace", release, "--wait", "--timeout", f"{TIMEOUT}s", check=False)
        try:
            deadline = time.monotonic() + TIMEOUT
            while (left := _leftovers(cluster, release)) and time.monotonic() < deadline:
                time.sleep(2)
            assert not left, f"left behind by helm uninstall {release}: {left}"
            if objects:
                assert not _get_all(cluster, objects, release, missing_ok=True)
            assert helm("status", release, "--namespace", release, check=False).returncode != 0
        finally:
            cluster.kubectl("delete", "namespace", release, "--ignore-not-found", "--wait=true", "--timeout=120s",
                            check=False, timeout=150)
            added = sorted(_crd_names(cluster) - crds_before)
            if added:  # Helm never deletes CRDs; put the shared cluster back as it was
                cluster.kubectl("delete", "crd", *added, "--wait=true", "--timeout=120s", check=False, timeout=150)
    return objects


def _release(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_local_chart_installs_into_the_local_cluster(local: Cluster, tmp_path: Path) -> None:
    release = _release("helm-local")
    values = {
        "localClusterId": "helm-e2e",
        # A vkubelet Deployment and its RBAC too; the kubeconfig Secret is never read
        # because kwok runs nothing.
        "remoteClusters": [{"id": "helm-e2e-remote", "kubeconfigSecret": "helm-e2e-remote-kubeconfig",
                            "labels": {"topology.kubernetes.io/region": "eu-west"}}],
        "image": {"pullPolicy": "Never"},
        "webhook": {"failurePolicy": "Ignore", "namespaceFailurePolicy": "Ignore", "timeoutSeconds": 1},
        # A virtual StorageClass of its own: the session's class "kube-offload" belongs to
        # no release and would be left alone (storageclass.yaml).
        "storage": {"virtualClass": {"name": f"{release}-class"}},
    }
    # The per-pod opt-in RuntimeClass has a fixed name (pods name it: kube_offload/opt_in.py),
    # so one local chart per cluster holds it; the session's is the harness's, made as the
    # chart makes it. It is lent to the release for the test and put back after, whatever
    # happened (no other e2e test runs meanwhile: the session runs them one by one).
    local.kubectl("delete", "runtimeclass", c.RUNTIME_CLASS_OPT_IN, "--ignore-not-found")
    try:
        objects = _install_check_uninstall(local, LOCAL_CHART, values, release, tmp_path)
    finally:
        local.apply([runtime_class()])
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
            "ConfigMap", "CronJob", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
            "StorageClass", "RuntimeClass"} <= kinds
    deployments = {o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"}
    fullname = f"{release}-kube-offload"
    assert {f"{fullname}-webhook", f"{fullname}-extender", f"{fullname}-scheduler",
            f"{fullname}-vkubelet-helm-e2e-remote"} <= deployments


def test_remote_chart_installs_into_the_remote_cluster(remote: Cluster, tmp_path: Path) -> None:
    release = _release("helm-remote")
    consumer = release  # cluster-scoped names (tenant namespace, Consumer) are per consumer
    values = {
        "consumers": [{"name": consumer, "quota": {"pods": "10"}}],
        "image": {"pullPolicy": "Never"},
        "enforcer": {"webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 1}},
    }
    objects = _install_check_uninstall(remote, REMOTE_CHART, values, release, tmp_path)
    # Kinds and names only: the consumer's grants belong to the trust-boundary tests.
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Deployment", f"{release}-kube-offload-enforcer") in names
    assert ("Namespace", c.tenant_namespace(consumer)) in names
    assert (c.CONSUMER_KIND, consumer) in names
    assert ("ServiceAccount", c.CONSUMER_SERVICE_ACCOUNT) in names
    assert {"ValidatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding"} <= {k for k, _ in names}


@pytest.fixture(autouse=True)
def _helm_is_built(local: Cluster) -> None:
    # The session's ensure_binaries builds helm with the rest; a stale cache would not.
    assert os.access(local.bins.helm, os.X_OK), f"helm is missing: {local.bins.helm} (kube-offload binaries build)"
