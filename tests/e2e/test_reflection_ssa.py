"""Reflection writes by server-side apply (issue 25 item 1), end to end on the shared
loopback environment of conftest.py: the harness's vkubelet reflects into the real
remote control plane as its own field manager (``kube-offload/<virtual node>``), the
local object the only source of truth for the fields it sets. The test plays the
provider's controller with kubectl under another field manager and shows:

* the provider's fields (an annotation, a label, a data key another manager set) are
  left alone, through local changes, and nobody fights over them (the remote object's
  resourceVersion stays put once both sides are done);
* a local change still wins, and the provider changing one of OUR fields is taken back;
* a field removed locally disappears remotely, while the provider's stay;
* a Service keeps the cluster IP its remote cluster allocated through local updates.
"""

from __future__ import annotations

import json
import time

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.naming import virtual_node_name
from support.clusters import get_or_none, offloaded_namespace
from support.reflection_twin import TIMEOUT, Twin
from vkubelet.shared.names import field_manager

PROVIDER = "provider-controller"  # the field manager the test plays the provider's controller as
PROVIDER_ANNOTATION = "provider.example/audited"
PROVIDER_LABEL = "provider.example/zone"


def _patch(cluster: Cluster, kind: str, namespace: str, name: str, patch: dict, *, manager: str | None = None) -> None:
    args = ["patch", kind, name, "-n", namespace, "--type", "merge", "-p", json.dumps(patch)]
    if manager:
        args += ["--field-manager", manager]
    cluster.kubectl(*args)


def _meta(obj: dict | None, key: str) -> dict:
    return ((obj or {}).get("metadata") or {}).get(key) or {}


def _managers(obj: dict) -> dict[str, str]:
    """Field manager -> operation (Apply / Update) of ``obj``'s managedFields."""
    return {entry["manager"]: entry["operation"] for entry in obj["metadata"].get("managedFields") or []}


@pytest.fixture(scope="module")
def t(local, remote, wait):
    twin = Twin(local, remote, wait, prefix="ssa")
    offloaded_namespace(local, twin.ns)
    wait(lambda: get_or_none(remote, "namespace", "", twin.twin) is not None, timeout=TIMEOUT, what=f"twin namespace {twin.twin}")
    yield twin
    local.kubectl("delete", "namespace", twin.ns, "--wait=false", "--ignore-not-found", check=False)


def test_configmap_is_applied_by_the_vkubelets_field_manager(t, remote):
    manager = field_manager(virtual_node_name(remote.spec.cluster_id))
    t.local.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cfg", "namespace": t.ns, "labels": {"app": "web", "tier": "gold"}},
                   "data": {"mode": "one", "level": "3"}})
    t.until_remote("configmap", "cfg", lambda o: o.get("data") == {"mode": "one", "level": "3"}, "created")
    # kubectl hides managedFields unless asked.
    cm = t.remote.kubectl_json("get", "configmap", "cfg", "-n", t.twin, "--show-managed-fields")
    assert _managers(cm).get(manager) == "Apply", f"{manager} should own the reflected fields: {_managers(cm)}"
    assert manager.startswith(c.REFLECTION_FIELD_MANAGER_PREFIX)


def test_provider_fields_are_left_alone_and_nobody_fights(t):
    # The provider's controller adds an annotation, a label and a data key of its own.
    _patch(t.remote, "configmap", t.twin, "cfg", {
        "metadata": {"annotations": {PROVIDER_ANNOTATION: "yes"}, "labels": {PROVIDER_LABEL: "a"}},
        "data": {"provider-note": "kept"},
    }, manager=PROVIDER)
    # A local change goes out and leaves the provider's fields as they are.
    _patch(t.local, "configmap", t.ns, "cfg", {"data": {"mode": "two"}})
    cm = t.until_remote("configmap", "cfg", lambda o: o["data"].get("mode") == "two", "local change applied")
    assert cm["data"] == {"mode": "two", "level": "3", "provider-note": "kept"}
    assert _meta(cm, "annotations")[PROVIDER_ANNOTATION] == "yes"
    assert _meta(cm, "labels")[PROVIDER_LABEL] == "a"
    assert _meta(cm, "labels")["app"] == "web"
    # Settled: no write from either side (compare-and-replace took the provider's fields
    # away, and a provider controller putting them back would fight it forever).
    version = cm["metadata"]["resourceVersion"]
    time.sleep(5)
    settled = t.remote_obj("configmap", "cfg")
    assert settled is not None and settled["metadata"]["resourceVersion"] == version


def test_the_local_object_wins_over_a_provider_change_to_our_fields(t):
    _patch(t.remote, "configmap", t.twin, "cfg", {"data": {"mode": "provider-says"}, "metadata": {"labels": {"app": "db"}}},
           manager=PROVIDER)
    cm = t.until_remote("configmap", "cfg", lambda o: o["data"].get("mode") == "two" and _meta(o, "labels").get("app") == "web",
                        "our fields taken back")
    assert cm["data"]["provider-note"] == "kept"  # theirs still theirs


def test_a_field_removed_locally_disappears_remotely(t):
    t.local.kubectl("label", "configmap", "cfg", "-n", t.ns, "tier-")
    _patch(t.local, "configmap", t.ns, "cfg", {"data": {"level": None}})
    cm = t.until_remote("configmap", "cfg", lambda o: "level" not in o["data"] and "tier" not in _meta(o, "labels"),
                        "removed fields gone")
    assert cm["data"] == {"mode": "two", "provider-note": "kept"}
    assert _meta(cm, "annotations")[PROVIDER_ANNOTATION] == "yes" and _meta(cm, "labels")[PROVIDER_LABEL] == "a"


def test_service_keeps_its_remote_allocation_through_local_updates(t):
    t.local.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": t.ns},
                   "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    svc = t.until_remote("service", "web", lambda o: bool(o["spec"].get("clusterIP")), "created")
    allocated = svc["spec"]["clusterIP"]
    _patch(t.remote, "service", t.twin, "web", {"metadata": {"annotations": {PROVIDER_ANNOTATION: "yes"}}}, manager=PROVIDER)
    _patch(t.local, "service", t.ns, "web", {"spec": {"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}})
    svc = t.until_remote("service", "web", lambda o: [p["port"] for p in o["spec"]["ports"]] == [81], "port updated")
    assert svc["spec"]["clusterIP"] == allocated, "the remote allocation is the remote cluster's, never re-applied"
    assert _meta(svc, "annotations")[PROVIDER_ANNOTATION] == "yes"
