"""Typed views of API objects (kube_offload/views.py): one reader of what every loop reads."""

import pytest

from kube_offload.views import ObjectMeta, metadata, spec, status

POD = {
    "metadata": {
        "name": "web", "namespace": "demo", "uid": "u-1", "resourceVersion": "42", "generation": 3,
        "labels": {"app": "web"}, "annotations": {"a": "b"}, "finalizers": ["x/y"],
        "creationTimestamp": "2026-11-26T18:00:00Z", "deletionTimestamp": "2026-11-26T18:40:00Z",
    },
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}


def test_object_meta_reads_every_field():
    meta = ObjectMeta.of(POD)
    assert (meta.name, meta.namespace, meta.uid, meta.resource_version, meta.generation) == ("web", "demo", "u-1", "42", 3)
    assert meta.labels == {"app": "web"} and meta.annotations == {"a": "b"} and meta.finalizers == ("x/y",)
    assert meta.creation_timestamp == "2026-11-26T18:00:00Z"
    assert meta.deleting and meta.key == "demo/web"


@pytest.mark.parametrize("obj", [None, {}, {"metadata": None}, {"metadata": []}, {"metadata": {"labels": None}}])
def test_absent_sections_read_as_empty(obj):
    meta = ObjectMeta.of(obj)
    assert meta == ObjectMeta()
    assert not meta.deleting and meta.key == "" and meta.labels == {} and meta.generation is None
    assert metadata(obj) == {"labels": None} or metadata(obj) == {}
    assert spec(obj) == {} and status(obj) == {}


def test_cluster_scoped_key_is_the_name_and_sections_are_the_objects():
    assert ObjectMeta.of({"metadata": {"name": "node-1"}}).key == "node-1"
    assert spec(POD) == {"nodeName": "n1"} and status(POD)["phase"] == "Running" and metadata(POD)["uid"] == "u-1"


def test_a_bool_generation_is_not_a_generation():
    assert ObjectMeta.of({"metadata": {"generation": True}}).generation is None
