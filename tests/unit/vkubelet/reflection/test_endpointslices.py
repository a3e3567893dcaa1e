"""vkubelet/reflection/endpointslices.py: a Service's slices found through the informer's
index (by the Service's key), not by scanning every cached slice."""

from __future__ import annotations

from vkubelet.reflection.endpointslices import BY_SERVICE, slice_service_key

from tests.support.informers import offline_informer


def _slice(namespace: str, name: str, service: str | None) -> dict:
    labels = {"kubernetes.io/service-name": service} if service else {}
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": namespace, "name": name, "labels": labels}, "endpoints": []}


def test_a_slice_is_indexed_under_its_service_key():
    assert slice_service_key(_slice("demo", "web-x7k2p", "web")) == ["demo/web"]
    # No Service label (a slice written by hand without one): under no Service.
    assert slice_service_key(_slice("demo", "loose", None)) == []
    assert slice_service_key({"metadata": {"name": "no-namespace", "labels": {"kubernetes.io/service-name": "web"}}}) == []


def test_the_index_follows_slices_added_relabelled_and_deleted():
    informer = offline_informer("local-endpointslices")
    informer.add_indexer(BY_SERVICE, slice_service_key)
    informer.apply("ADDED", _slice("demo", "web-1", "web"))
    informer.apply("ADDED", _slice("demo", "web-2", "web"))
    informer.apply("ADDED", _slice("demo", "db-1", "db"))
    informer.apply("ADDED", _slice("other", "web-1", "web"))  # same Service name, another namespace
    assert sorted(informer.index_keys(BY_SERVICE, "demo/web")) == ["demo/web-1", "demo/web-2"]
    informer.apply("MODIFIED", _slice("demo", "web-2", "db"))
    assert informer.index_keys(BY_SERVICE, "demo/web") == ["demo/web-1"]
    assert sorted(informer.index_keys(BY_SERVICE, "demo/db")) == ["demo/db-1", "demo/web-2"]
    informer.apply("DELETED", _slice("demo", "web-1", "web"))
    assert informer.index_keys(BY_SERVICE, "demo/web") == []
