"""Typed views of API objects (kube_offload/views.py): one reader of what every loop reads."""

import pytest

from kube_offload import constants as c
from kube_offload.views import (
    ConsumerView, NodeView, ObjectMeta, OffloadSliceView, ShadowPodView, metadata, pod_template, spec, status,
)
from support import builders

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


# --- ShadowPod, Consumer, OffloadSlice, Node -------------------------------------------------
SHADOWPOD = builders.shadowpod(spec={"containers": [{"name": "app", "image": "nginx"}], "restartPolicy": "Never"},
                               pod_labels={"app": "web"}, phase="Running")


def test_the_template_is_the_shadowpods_own_object():
    template = pod_template(SHADOWPOD)
    assert template is SHADOWPOD["spec"]["pod"]
    assert template["metadata"]["labels"] == {"app": "web"}
    assert ShadowPodView(SHADOWPOD).template_spec["restartPolicy"] == "Never"


@pytest.mark.parametrize("obj", [None, {}, {"spec": None}, {"spec": {"pod": None}}, {"spec": {"pod": "x"}}, {"spec": []}])
def test_a_shadowpod_without_a_template_has_none(obj):
    assert pod_template(obj) is None
    view = ShadowPodView(obj)
    assert view.template is None and view.template_spec == {}
    assert (view.phase, view.recreations, view.run_completed) == ("", 0, None)


@pytest.mark.parametrize(("recreations", "read"), [(3, 3), ("2", 2), (-1, 0), ("x", 0), (None, 0)])
def test_recreations_read_as_a_count(recreations, read):
    assert ShadowPodView({"status": {"recreations": recreations}}).recreations == read


def test_a_consumer_view_hands_the_terms_raw_and_types_the_rest():
    consumer = {"metadata": {"name": "c1"}, "spec": {"quota": {"cpu": "4"}, "cordoned": True, "drain": {},
                                                     "serviceAccount": {"name": "sa"}},
                "status": {"used": {"cpu": "1"}}}
    view = ConsumerView(consumer)
    assert (view.name, view.quota, view.cordoned, view.drain, view.used) == ("c1", {"cpu": "4"}, True, {}, {"cpu": "1"})
    assert view.service_account == {"name": "sa"} and view.capacity is None
    empty = ConsumerView(None)
    assert (empty.cordoned, empty.drain, empty.service_account, empty.node_labels) == (False, None, {}, None)


def test_an_offloadslice_view():
    view = OffloadSliceView({"metadata": {"name": "s", "generation": 2, "creationTimestamp": "t"},
                             "spec": {"pool": "gpu", "resources": {"cpu": "2"}},
                             "status": {"phase": c.SLICE_PHASE_ACCEPTED, "observedGeneration": 1, "firstDecided": "f"}})
    assert (view.pool, view.resources, view.phase, view.generation, view.observed_generation) == (
        "gpu", {"cpu": "2"}, c.SLICE_PHASE_ACCEPTED, 2, 1)
    assert (view.created, view.first_decided, view.reason) == ("t", "f", "")
    assert OffloadSliceView({"status": {"firstDecided": 5, "observedGeneration": True}}).first_decided == ""
    assert OffloadSliceView({"status": {"observedGeneration": True}}).observed_generation is None


def test_a_node_view_reads_the_node_facts():
    node = builders.node("kube-offload-r1", {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: "r1"},
                         [{"type": "Ready", "status": "True"}])
    view = NodeView(node)
    assert (view.name, view.virtual, view.cluster_id, view.ready, view.slice) == ("kube-offload-r1", True, "r1", True, None)
    physical = NodeView(builders.node("w1", {}, [{"type": "Ready", "status": "False"}]))
    assert (physical.virtual, physical.cluster_id, physical.ready, physical.taints) == (False, None, False, ())
