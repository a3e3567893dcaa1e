"""The running vkubelet's and enforcer's health port (docs/observability.md), on the shared
loopback environment (conftest.py): the harness starts both with ``--health-bind`` on a
free 127.0.0.1 port, and these tests read that port off the process's own command line
(whoever restarted it last), scrape ``/metrics`` and call ``/healthz`` and ``/readyz``.

The figures must move with what happens: after a pod is offloaded the vkubelet's and the
enforcer's reconcile counts rise, the pod shows as Running on the vkubelet and its
ShadowPod on the enforcer, API calls to both clusters are counted, remote reachability is
1, and reflecting a ConfigMap counts a create; when the pod is gone, the count falls back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import offloaded_namespace
from support.metrics import Samples, get, health_url, scrape, value

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "charts" / "kube-offload-local" / "dashboards" / "kube-offload.json"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


# --- helpers ---------------------------------------------------------------------------------
def exported(types: dict[str, str]) -> set[str]:
    return {name + suffix for name, kind in types.items() for suffix in SUFFIXES.get(kind, ("",))}


@pytest.fixture(scope="module")
def urls(offload_env: Environment, remote: Cluster) -> dict[str, str]:
    cluster_id = remote.spec.cluster_id
    return {
        "vkubelet": health_url(offload_env, f"vkubelet-{cluster_id}"),
        "enforcer": health_url(offload_env, f"enforcer-{cluster_id}"),
    }


# --- tests -----------------------------------------------------------------------------------
def test_probes_answer_ok_with_each_check_named(urls: dict[str, str], wait: Callable) -> None:
    for component, base in urls.items():
        assert get(f"{base}/healthz") == (200, "ok\n"), component
        wait(lambda: get(f"{base}/readyz")[0] == 200, timeout=60, what=f"{component} /readyz 200")  # noqa: B023 (called in this iteration)
        assert get(f"{base}/readyz") == (200, "ok\n"), component
    status, text = get(f"{urls['vkubelet']}/readyz?verbose")
    assert status == 200 and text.splitlines() == ["[+]leader-election ok", "[+]informers ok", "[+]remote-cluster ok", "readyz check passed"]
    status, text = get(f"{urls['vkubelet']}/healthz?verbose")
    assert status == 200 and text.splitlines() == ["[+]leader-election ok", "[+]node-loops ok", "[+]controllers ok", "healthz check passed"]
    status, text = get(f"{urls['enforcer']}/readyz?verbose")
    assert status == 200 and text.splitlines() == ["[+]leader-election ok", "[+]informers ok", "readyz check passed"]
    assert get(f"{urls['enforcer']}/nothing-here")[0] == 404


def test_every_metric_the_dashboard_names_is_exported_by_the_running_components(urls: dict[str, str]) -> None:
    names = exported(scrape(urls["vkubelet"])[1]) | exported(scrape(urls["enforcer"])[1])
    wanted = set(re.findall(r"kube_offload_[a-z0-9_]+", DASHBOARD.read_text()))
    assert len(wanted) >= 10
    assert wanted <= names, f"the dashboard names series no running component exports: {sorted(wanted - names)}"


def test_figures_move_when_a_pod_is_offloaded_and_removed(
    urls: dict[str, str], local: Cluster, remote: Cluster, wait: Callable
) -> None:
    cluster_id = remote.spec.cluster_id
    node = f"{c.VIRTUAL_NODE_PREFIX}{cluster_id}"
    vk_before, _ = scrape(urls["vkubelet"])
    enf_before, _ = scrape(urls["enforcer"])
    running_before = value(vk_before, "kube_offload_vkubelet_pods", cluster_id=cluster_id, phase="Running")

    namespace = unique("observe")
    offloaded_namespace(local, namespace)
    try:
        local.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
                     "data": {"mode": "observed"}})
        local.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker", "namespace": namespace},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
        })

        def pod_running() -> bool:
            pod = local.kubectl_json("get", "pod", "worker", "-n", namespace)
            return pod["spec"].get("nodeName") == node and (pod.get("status") or {}).get("phase") == "Running"

        wait(pod_running, timeout=120, what=f"pod {namespace}/worker Running on {node}")

        def vkubelet_shows_it() -> Samples | None:
            samples, _ = scrape(urls["vkubelet"])
            if value(samples, "kube_offload_vkubelet_pods", cluster_id=cluster_id, phase="Running") < running_before + 1:
                return None
            if value(samples, "kube_offload_reflection_operations_total", resource="configmaps", operation="create") <= value(
                    vk_before, "kube_offload_reflection_operations_total", resource="configmaps", operation="create"):
                return None
            return samples

        vk = wait(vkubelet_shows_it, timeout=60, what="the vkubelet's figures to show the pod and the reflected ConfigMap")
        assert value(vk, "kube_offload_vkubelet_remote_reachable", cluster_id=cluster_id) == 1
        assert value(vk, "kube_offload_vkubelet_info", cluster_id=cluster_id, node=node) == 1
        for controller in ("pods", "twin-namespaces", "reflect-configmaps"):
            assert value(vk, "kube_offload_reconciles_total", controller=controller, outcome="success") > value(
                vk_before, "kube_offload_reconciles_total", controller=controller, outcome="success"), controller
        assert value(vk, "kube_offload_reconcile_duration_seconds_count", controller="pods") > value(
            vk_before, "kube_offload_reconcile_duration_seconds_count", controller="pods")
        # The ShadowPod (and the ConfigMap) created remotely; the pod's status patched locally.
        assert value(vk, "kube_offload_api_requests_total", cluster="remote", verb="CREATE", code="201") >= value(
            vk_before, "kube_offload_api_requests_total", cluster="remote", verb="CREATE", code="201") + 2
        assert value(vk, "kube_offload_api_requests_total", cluster="local", verb="PATCH", code="200") > value(
            vk_before, "kube_offload_api_requests_total", cluster="local", verb="PATCH", code="200")
        assert value(vk, "kube_offload_api_request_duration_seconds_count", cluster="remote", verb="LIST") > 0
        assert ("kube_offload_workqueue_depth", (("controller", "pods"),)) in vk

        def enforcer_shows_it() -> Samples | None:
            samples, _ = scrape(urls["enforcer"])
            return samples if value(samples, "kube_offload_enforcer_shadowpods", phase="Running") >= 1 else None

        enf = wait(enforcer_shows_it, timeout=60, what="the enforcer's figures to show a Running ShadowPod")
        assert value(enf, "kube_offload_reconciles_total", controller="enforcer", outcome="success") > value(
            enf_before, "kube_offload_reconciles_total", controller="enforcer", outcome="success")
        assert value(enf, "kube_offload_api_requests_total", cluster="remote", verb="CREATE", code="201") > value(
            enf_before, "kube_offload_api_requests_total", cluster="remote", verb="CREATE", code="201")
        assert value(enf, "kube_offload_api_requests_total", cluster="local") == 0  # the enforcer talks to its own cluster only
    finally:
        local.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)

    def pod_gone_from_the_figures() -> bool:
        samples, _ = scrape(urls["vkubelet"])
        return value(samples, "kube_offload_vkubelet_pods", cluster_id=cluster_id, phase="Running") <= running_before

    wait(pod_gone_from_the_figures, timeout=120, what="the vkubelet's Running count to fall back once the pod is deleted")
