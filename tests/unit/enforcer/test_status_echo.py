"""The enforcer's wiring (enforcer/controller.py) without an API server: the echo of its
own ShadowPod status write does not reconcile the ShadowPod again; someone else's status
write, any other change, and every pod change (status included: it becomes the
ShadowPod's) do. Informers are fed through Informer._apply (the path a watch event takes)."""

from __future__ import annotations

import copy
import logging

import pytest
from kubernetes import client

from enforcer.controller import Enforcer, Settings
from enforcer.shadowpods.reconcile import BY_SHADOWPOD
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from support.informers import drain
from support import builders

KEY = "ns/web"


@pytest.fixture
def enforcer() -> Enforcer:
    return Enforcer(client.ApiClient(), Settings(namespace="ns"))


def shadowpod(rv: str, phase: str | None = None, **labels: str) -> dict:
    return builders.shadowpod(spec={"containers": [builders.container("c", "i")]}, pod_labels={"a": "b"}, phase=phase,
                              uid="shp-1", resourceVersion=rv, generation=1, labels=dict(labels))


def managed_pod(rv: str, phase: str) -> dict:
    return {
        "metadata": {
            "name": "web", "namespace": "ns", "uid": "p1", "resourceVersion": rv,
            "ownerReferences": [{"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": "web",
                                 "uid": "shp-1", "controller": True}],
        },
        "status": {"phase": phase},
    }


def test_the_echo_of_its_own_status_write_is_not_reconciled(enforcer, monkeypatch):
    enforcer.shadowpods.apply(ADDED, shadowpod("1"))
    assert drain(enforcer.controller) == [KEY]
    written = shadowpod("2", phase="Running")
    monkeypatch.setattr(enforcer.reconciler._api, "patch_shadowpod_status", lambda *a: copy.deepcopy(written))
    enforcer.reconciler._write_status(shadowpod("1"), {"phase": "Running"}, logging.getLogger("test"))
    enforcer.shadowpods.apply(MODIFIED, copy.deepcopy(written))
    assert drain(enforcer.controller) == []
    # Someone else's status write, and any other change, are reconciled.
    enforcer.shadowpods.apply(MODIFIED, shadowpod("3", phase="Failed"))
    assert drain(enforcer.controller) == [KEY]
    enforcer.shadowpods.apply(MODIFIED, shadowpod("4", phase="Failed", team="x"))
    assert drain(enforcer.controller) == [KEY]
    enforcer.shadowpods.apply(DELETED, shadowpod("4", phase="Failed", team="x"))
    assert drain(enforcer.controller) == [KEY]


def test_pod_status_changes_reach_their_shadowpod(enforcer):
    enforcer.pods.apply(ADDED, managed_pod("1", "Pending"))
    assert drain(enforcer.controller) == [KEY]
    enforcer.pods.apply(MODIFIED, managed_pod("2", "Running"))  # status only: still news
    assert drain(enforcer.controller) == [KEY]
    assert [p["status"]["phase"] for p in enforcer.pods.by_index(BY_SHADOWPOD, KEY)] == ["Running"]
