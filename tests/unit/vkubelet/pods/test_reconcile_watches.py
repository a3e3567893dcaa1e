"""The pod loop's wiring (vkubelet/pods/) without an API server: which informer events
make it reconcile a local pod again. Its own pods/status patch comes back as a
status-only update and is skipped; someone else's status write, any other change of the
local pod, and every remote pod change (status included) are not. The informers are
fed through Informer._apply (the path a watch event takes); the keys the controller would
hand to its workers are read off its queue."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.indexes import BY_ORIGIN
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.settings import Settings
from support.informers import drain

TWIN = "ns-local"
KEY = "ns/web"


@pytest.fixture
def offloader() -> PodOffloader:
    settings = Settings(cluster_id="remote", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    loop = PodOffloader(settings, informers, TwinNamespaces(settings, informers, recorder), recorder)
    informers.set_twin_namespaces([TWIN])
    return loop


def local_pod(rv: str, phase: str = "Pending", **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": rv, "labels": dict(labels)},
        "spec": {"nodeName": "kube-offload-remote", "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": phase},
    }


def remote_pod(rv: str, phase: str) -> dict:
    return {
        "metadata": {
            "name": "web", "namespace": TWIN, "uid": "r1", "resourceVersion": rv,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
            "annotations": {c.ANNOTATION_ORIGIN_NAMESPACE: "ns", c.ANNOTATION_ORIGIN_NAME: "web",
                            c.ANNOTATION_ORIGIN_UID: "u1"},
        },
        "status": {"phase": phase},
    }


def test_the_echo_of_its_own_status_patch_is_not_reconciled(offloader, monkeypatch):
    offloader.local_pods.apply(ADDED, local_pod("1"))
    assert drain(offloader.controller) == [KEY]

    # The loop writes the pod's status; the API server answers with version 2...
    written = local_pod("2", phase="Running")
    monkeypatch.setattr(offloader.local.kube, "patch", lambda *a, **kw: written)
    offloader.local.patch_status(local_pod("1"), {"status": {"phase": "Running"}})
    # ...whose watch event changes nothing but the status: nothing to reconcile.
    offloader.local_pods.apply(MODIFIED, copy.deepcopy(written))
    assert drain(offloader.controller) == []

    # Someone else's status write (the node lifecycle controller, say) is answered.
    offloader.local_pods.apply(MODIFIED, local_pod("3", phase="Unknown"))
    assert drain(offloader.controller) == [KEY]
    # So is any change beyond the status, and a resync.
    offloader.local_pods.apply(MODIFIED, local_pod("4", phase="Unknown", app="web"))
    assert drain(offloader.controller) == [KEY]
    offloader.local_pods.resync()
    assert drain(offloader.controller) == [KEY]


def test_remote_pod_status_changes_still_reach_the_local_pod(offloader):
    remote = offloader.remote_pods
    remote.apply(ADDED, remote_pod("1", "Pending"))
    assert drain(offloader.controller) == [KEY]
    remote.apply(MODIFIED, remote_pod("2", "Running"))  # status only: the loop mirrors it
    assert drain(offloader.controller) == [KEY]
    assert [p["status"]["phase"] for p in offloader.remote_pods.by_index(BY_ORIGIN, KEY)] == ["Running"]


def test_a_deleted_local_pod_forgets_its_echo(offloader, monkeypatch):
    offloader.local_pods.apply(ADDED, local_pod("1"))
    monkeypatch.setattr(offloader.local.kube, "patch", lambda *a, **kw: local_pod("2", "Running"))
    offloader.local.patch_status(local_pod("1"), {"status": {"phase": "Running"}})
    assert len(offloader.local.status_echoes) == 1
    offloader.local_pods.apply(DELETED, local_pod("2", "Running"))
    assert drain(offloader.controller) == [KEY]
    offloader.reconcile(KEY)  # nothing of it left anywhere: no API call
    assert len(offloader.local.status_echoes) == 0
