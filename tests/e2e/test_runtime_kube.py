"""The API layer's verbs against a real apiserver (a kwok cluster of its own): typed
verbs on built-in and custom kinds, preconditions, the parsed Status, server-side apply,
watch, the informer's list function, and the per-cluster API metrics."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest

from enforcer.crd import ensure_crds
from kube_offload.runtime import kinds
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kube import JSON_PATCH, ApiError, Kube, load_api_client
from kube_offload.runtime.metrics import API_REQUESTS, CLUSTER_LOCAL
from kube_offload_harness.cluster import Cluster
from support.clusters import bare_cluster

NS = "layer"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with bare_cluster(tmp_path_factory, "rtkube", NS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    api_client = load_api_client(str(cluster.kubeconfig))
    ensure_crds(api_client)  # through the layer: create, then get until Established
    return Kube(api_client, cluster=CLUSTER_LOCAL)


def config_map(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


def count(verb: str, code: str) -> float:
    return API_REQUESTS.labels(cluster=CLUSTER_LOCAL, verb=verb, code=code)._value.get()


def test_create_get_list_and_not_found(kube: Kube):
    created = kube.create(kinds.CONFIG_MAPS, config_map("cm-a", a="1"), namespace=NS)
    assert created["metadata"]["uid"]
    assert kube.get(kinds.CONFIG_MAPS, "cm-a", namespace=NS)["data"] == {"a": "1"}
    for i in range(5):
        kube.create(kinds.CONFIG_MAPS, config_map(f"page-{i}"), namespace=NS)
    listed = kube.list(kinds.CONFIG_MAPS, namespace=NS, page_size=2)  # three pages, one list
    names = {o["metadata"]["name"] for o in listed["items"]}
    assert {"cm-a", *(f"page-{i}" for i in range(5))} <= names
    assert listed["metadata"]["resourceVersion"] and not listed["metadata"].get("continue")
    with pytest.raises(ApiError) as caught:
        kube.get(kinds.CONFIG_MAPS, "missing", namespace=NS)
    error = caught.value
    assert (error.status, error.reason, error.not_found) == (404, "NotFound", True)
    assert error.details == {"name": "missing", "kind": "configmaps"}
    assert kube.get_or_none(kinds.CONFIG_MAPS, "missing", namespace=NS) is None
    with pytest.raises(ApiError) as exists:
        kube.create(kinds.CONFIG_MAPS, config_map("cm-a"), namespace=NS)
    assert exists.value.already_exists


def test_patch_with_a_stale_resource_version_is_a_conflict(kube: Kube):
    first = kube.create(kinds.CONFIG_MAPS, config_map("cm-rv", a="1"), namespace=NS)
    rv = first["metadata"]["resourceVersion"]
    kube.patch(kinds.CONFIG_MAPS, "cm-rv", {"data": {"b": "2"}}, namespace=NS, resource_version=rv)
    for patch, content_type in (({"data": {"c": "3"}}, "application/merge-patch+json"),
                                ([{"op": "add", "path": "/data/c", "value": "3"}], JSON_PATCH)):
        with pytest.raises(ApiError) as stale:
            kube.patch(kinds.CONFIG_MAPS, "cm-rv", patch, namespace=NS, content_type=content_type, resource_version=rv)
        assert (stale.value.status, stale.value.reason) == (409, "Conflict")
    assert kube.get(kinds.CONFIG_MAPS, "cm-rv", namespace=NS)["data"] == {"a": "1", "b": "2"}


def test_delete_with_uid_precondition(kube: Kube):
    old = kube.create(kinds.CONFIG_MAPS, config_map("cm-uid"), namespace=NS)
    kube.delete(kinds.CONFIG_MAPS, "cm-uid", namespace=NS, uid=old["metadata"]["uid"])
    new = kube.create(kinds.CONFIG_MAPS, config_map("cm-uid"), namespace=NS)  # same name, new object
    with pytest.raises(ApiError) as caught:
        kube.delete(kinds.CONFIG_MAPS, "cm-uid", namespace=NS, uid=old["metadata"]["uid"])
    assert caught.value.conflict and "precondition" in caught.value.message.lower()
    assert kube.get(kinds.CONFIG_MAPS, "cm-uid", namespace=NS)["metadata"]["uid"] == new["metadata"]["uid"]
    with pytest.raises(ApiError) as wrong_rv:
        kube.delete(kinds.CONFIG_MAPS, "cm-uid", namespace=NS, resource_version="1")
    assert wrong_rv.value.conflict


def test_server_side_apply_owns_its_fields(kube: Kube):
    applied = kube.apply(kinds.CONFIG_MAPS, config_map("cm-apply", a="1", b="2"), namespace=NS)
    assert "kube-offload" in [m["manager"] for m in applied["metadata"]["managedFields"]]
    kube.patch(kinds.CONFIG_MAPS, "cm-apply", {"data": {"theirs": "x"}}, namespace=NS)
    # Applying without b removes b (ours), keeps another manager's field.
    again = kube.apply(kinds.CONFIG_MAPS, config_map("cm-apply", a="1"), namespace=NS)
    assert again["data"] == {"a": "1", "theirs": "x"}
    with pytest.raises(ApiError) as conflict:  # a field another manager owns
        kube.apply(kinds.CONFIG_MAPS, config_map("cm-apply", a="1", theirs="y"), namespace=NS, field_manager="other")
    assert conflict.value.status == 409
    forced = kube.apply(kinds.CONFIG_MAPS, config_map("cm-apply", a="1", theirs="y"), namespace=NS,
                        field_manager="other", force=True)
    assert forced["data"]["theirs"] == "y"


def test_custom_resource_and_status_subresource(kube: Kube):
    consumer = {"apiVersion": kinds.CONSUMERS.api_version, "kind": "Consumer", "metadata": {"name": "layer-consumer"},
                "spec": {"quota": {"pods": "1"}}}
    created = kube.create(kinds.CONSUMERS, consumer)
    assert created["kind"] == "Consumer"
    patched = kube.patch(kinds.CONSUMERS, "layer-consumer", [{"op": "add", "path": "/status", "value": {"shadowPods": 1}}],
                         subresource="status", content_type=JSON_PATCH,
                         resource_version=created["metadata"]["resourceVersion"])
    assert patched["status"] == {"shadowPods": 1}
    with pytest.raises(ApiError) as stale:  # the same precondition again: the object moved on
        kube.patch(kinds.CONSUMERS, "layer-consumer", {"status": {"shadowPods": 2}}, subresource="status",
                   resource_version=created["metadata"]["resourceVersion"])
    assert stale.value.conflict
    kube.delete(kinds.CONSUMERS, "layer-consumer", uid=created["metadata"]["uid"])
    assert kube.get_or_none(kinds.CONSUMERS, "layer-consumer") is None


def test_watch_delivers_events_from_a_resource_version(kube: Kube):
    rv = kube.list(kinds.CONFIG_MAPS, namespace=NS)["metadata"]["resourceVersion"]
    kube.create(kinds.CONFIG_MAPS, config_map("cm-watch"), namespace=NS)
    kube.patch(kinds.CONFIG_MAPS, "cm-watch", {"data": {"x": "1"}}, namespace=NS)
    kube.delete(kinds.CONFIG_MAPS, "cm-watch", namespace=NS)
    seen = []
    for event in kube.watch(kinds.CONFIG_MAPS, namespace=NS, resource_version=rv, timeout_seconds=5):
        if event["type"] != "BOOKMARK" and event["object"]["metadata"]["name"] == "cm-watch":
            seen.append(event["type"])
        if len(seen) == 3:
            break
    assert seen == ["ADDED", "MODIFIED", "DELETED"]


def test_informer_over_the_layer(kube: Kube):
    informer = Informer(name="layer-cms", list_func=kube.list_func(kinds.CONFIG_MAPS, namespace=NS),
                        resync_seconds=3600, page_size=2)
    informer.start()
    try:
        assert informer.wait_for_sync(30)
        assert informer.get(f"{NS}/cm-a") is not None
        kube.create(kinds.CONFIG_MAPS, config_map("cm-informed"), namespace=NS)
        deadline = time.monotonic() + 30
        while informer.get(f"{NS}/cm-informed") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert informer.get(f"{NS}/cm-informed") is not None
    finally:
        informer.stop()


def test_requests_are_counted_per_cluster_verb_and_code(kube: Kube):
    before = {key: count(*key) for key in [("GET", "200"), ("GET", "404"), ("CREATE", "201"), ("LIST", "200"),
                                          ("PATCH", "200"), ("DELETE", "200"), ("WATCH", "200")]}
    kube.get_or_none(kinds.CONFIG_MAPS, "missing", namespace=NS)
    kube.create(kinds.CONFIG_MAPS, config_map("cm-count"), namespace=NS)
    kube.get(kinds.CONFIG_MAPS, "cm-count", namespace=NS)
    kube.list(kinds.CONFIG_MAPS, namespace=NS)
    kube.patch(kinds.CONFIG_MAPS, "cm-count", {"data": {"a": "1"}}, namespace=NS)
    kube.delete(kinds.CONFIG_MAPS, "cm-count", namespace=NS)
    stream = kube.watch(kinds.CONFIG_MAPS, namespace=NS, timeout_seconds=1)
    watching = threading.Thread(target=lambda: list(stream), daemon=True)  # the server ends it after 1 s
    watching.start()
    watching.join(20)
    after = {key: count(*key) for key in before}
    assert {key: after[key] - before[key] for key in before} == {key: 1 for key in before}
