"""The cluster tiers' helpers: offloaded namespaces in a real local cluster, and a bare
control plane of a module's own (one kwokctl cluster, no nodes, none of kube-offload)
for tests of the runtime library against a real apiserver."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kube_offload import constants as c
from kube_offload_harness.binaries import ensure_binaries
from kube_offload_harness.cluster import Cluster, ClusterSpec, Environment
from support.waiting import wait_for


def offloaded_namespace_manifest(name: str, placement: str = c.PLACEMENT_REMOTE, *, selector: str | None = None,
                                 **extra_labels: str) -> dict[str, Any]:
    """A Namespace that kube-offload serves: enabled, with ``placement`` and, if given,
    the cluster selector annotation; ``extra_labels`` beside (e.g. the mapping label)."""
    meta: dict[str, Any] = {"name": name, "labels": {c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: placement, **extra_labels}}
    if selector is not None:
        meta["annotations"] = {c.ANNOTATION_CLUSTER_SELECTOR: selector}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def offloaded_namespace(cluster: Cluster, name: str, placement: str = c.PLACEMENT_REMOTE, *,
                        selector: str | None = None, **extra_labels: str) -> None:
    """Apply :func:`offloaded_namespace_manifest` to ``cluster`` (the local one)."""
    cluster.apply(offloaded_namespace_manifest(name, placement, selector=selector, **extra_labels))


def delete_namespace(cluster: Cluster, name: str) -> None:
    """Delete without waiting (kwok's pods go at once, the namespace soon after)."""
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@contextlib.contextmanager
def bare_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_id: str, *namespaces: str,
                 nodes: int = 0) -> Iterator[Cluster]:
    """A control plane of the module's own, named ``e2e-<cluster_id>``, with ``nodes``
    kwok-simulated physical nodes and ``namespaces`` created; deleted on exit whatever
    happened."""
    state_dir = tmp_path_factory.mktemp(f"{cluster_id}-e2e")
    spec = ClusterSpec(name=f"e2e-{cluster_id}", cluster_id=cluster_id, role="remote", nodes=nodes)
    cluster = Cluster(spec, state_dir=state_dir, bins=ensure_binaries())
    try:
        cluster.create()
        if nodes:
            cluster.add_physical_nodes()
        for namespace in namespaces:
            cluster.kubectl("create", "namespace", namespace)
        yield cluster
    finally:
        cluster.delete()


def running_on(cluster: Cluster, namespace: str, name: str, node: str) -> bool:
    """Whether pod ``namespace/name`` is bound to ``node`` and Running."""
    pod = cluster.kubectl_json("get", "pod", "-n", namespace, name)
    return bool(pod["spec"].get("nodeName") == node and pod.get("status", {}).get("phase") == "Running")


# kwok never pulls it: any image name would do, this one is real.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def deployment(cluster: Cluster, namespace: str, name: str, replicas: int, image: str = PAUSE_IMAGE) -> None:
    """A Deployment of ``replicas`` small pods labelled ``app=<name>`` (10m CPU, 16Mi each;
    5 s to terminate), applied to ``cluster``."""
    cluster.apply({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": image, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                    "terminationGracePeriodSeconds": 5,
                },
            },
        },
    })


def get_or_none(cluster: Cluster, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """``kubectl get`` of one object (``namespace`` empty for a cluster-scoped kind); None
    when it is not found, any other failure fails the test."""
    scope = ["-n", namespace] if namespace else []
    result = cluster.kubectl("get", kind, name, *scope, "-o", "json", check=False)
    if result.returncode != 0:
        if "NotFound" in result.stderr or "not found" in result.stderr:
            return None
        raise AssertionError(f"kubectl get {kind} {namespace}/{name}: {result.stderr}")
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


def keep_logs(env: Environment, artifacts: Path, *, control_planes: bool) -> Path:
    """Copy the logs of ``env``'s components (and, with ``control_planes``, of every
    kwokctl control-plane process) to a new ``artifacts/<timestamp>/``; return it."""
    target = artifacts / time.strftime("%Y%m%d-%H%M%S")
    target.mkdir(parents=True, exist_ok=True)
    logs = env.state_dir / "logs"
    if logs.exists():
        shutil.copytree(logs, target / "components", dirs_exist_ok=True)
    kwok = env.state_dir / "kwok" / "clusters"
    if control_planes and kwok.exists():
        for cluster_dir in kwok.iterdir():
            if (cluster_dir / "logs").exists():
                shutil.copytree(cluster_dir / "logs", target / cluster_dir.name, dirs_exist_ok=True)
    return target


# --- the provider's side: objects in the remote cluster -------------------------------------------
def find(cluster: Cluster, *args: str) -> dict[str, Any] | None:
    """``kubectl get <args> --ignore-not-found``: the object, or None when there is none
    (or kubectl failed: a poll asks again)."""
    result = cluster.kubectl("get", *args, "-o", "json", "--ignore-not-found", check=False)
    if result.returncode != 0 or not result.stdout.strip():
        return None
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


def patch_consumer(remote: Cluster, consumer: str, spec: dict[str, Any]) -> None:
    """Merge ``spec`` into Consumer ``consumer``'s spec, as the provider's admin would; but
    ``quota``, which replaces the consumer's quota whole (a merge would keep the keys it does
    not name, and a Consumer cannot be without one: the CRD refuses)."""
    spec = dict(spec)
    kind = f"{c.CONSUMER_PLURAL}.{c.DOMAIN}"
    if "quota" in spec:
        quota = spec.pop("quota")
        assert quota, "a Consumer cannot be without a quota (the CRD refuses): give the tests' default"
        remote.kubectl("patch", kind, consumer, "--type=json", "-p",
                       json.dumps([{"op": "add", "path": "/spec/quota", "value": quota}]))
    if spec:
        remote.kubectl("patch", kind, consumer, "--type=merge", "-p", json.dumps({"spec": spec}))


def twin_status(remote: Cluster, consumer: str, name: str) -> dict[str, Any]:
    """The status of ``consumer``'s TwinNamespace ``name`` (empty while it has none)."""
    twin = find(remote, f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}", name, "-n", c.tenant_namespace(consumer)) or {}
    status: dict[str, Any] = twin.get("status") or {}
    return status


def twin_request(consumer: str, name: str) -> dict[str, Any]:
    """A TwinNamespace of ``consumer`` asking for twin ``name`` (of a local namespace so named)."""
    return {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.TWIN_NAMESPACE_KIND,
            "metadata": {"name": name, "namespace": c.tenant_namespace(consumer)}, "spec": {"localNamespace": name}}


def ask_twin(remote: Cluster, kubeconfig: Path, consumer: str, name: str) -> subprocess.CompletedProcess:
    """Create :func:`twin_request` as the consumer (``kubeconfig``, its chart-made identity)."""
    return remote.kubectl_as(kubeconfig, "create", "-f", "-", input=json.dumps(twin_request(consumer, name)))


def serve_twin(remote: Cluster, kubeconfig: Path, consumer: str, name: str, *, timeout: float = 90) -> None:
    """Ask for twin ``name`` as the consumer and wait until it is Ready and pods can be made in
    it (the ServiceAccount admission refuses pods until the namespace's default account exists)."""
    made = ask_twin(remote, kubeconfig, consumer, name)
    assert made.returncode == 0, made.stderr
    wait_for(lambda: twin_status(remote, consumer, name).get("phase") == c.TWIN_PHASE_READY, timeout=timeout,
             what=f"twin {name} Ready")
    wait_for(lambda: find(remote, "serviceaccount", "default", "-n", name), timeout=60, what=f"ServiceAccount {name}/default")


def report_container_resources(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """Write into a kwok pod's status the container ``resources`` a kubelet of 1.33+ reports
    (what it actuated: here, the spec's), which kwok does not: without them the API server
    refuses to resize the pod ("Pod running on node without support for resize",
    isPodResizeRequestSupported). The pod as written, or None while it has no running
    container to report on (ask again)."""
    pod = find(cluster, "pod", name, "-n", namespace)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    if not pod or not any((s.get("state") or {}).get("running") for s in statuses):
        return None
    resources = {cont["name"]: cont.get("resources") or {} for cont in pod["spec"]["containers"]}
    reported = [{**s, "resources": resources.get(s["name"], {})} for s in statuses]
    result = cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource", "status", "--type=merge",
                             "-p", json.dumps({"status": {"containerStatuses": reported}}), check=False)
    return pod if result.returncode == 0 else None
