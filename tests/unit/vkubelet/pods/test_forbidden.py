"""The pod loop (vkubelet/pods/) with a twin namespace whose remote caches were answered
403 (the provider deleted the consumer RoleBinding there): it acts on nothing it cannot
see - no local pod deleted because its remote side "is gone", none failed, no ShadowPod
"recreated" - says why once in the log (the twin and the fix) and on each pod as a Warning
Event, and manages the namespace again once a list there is accepted. The reflectors
(vkubelet/reflection/reflector.py) write nothing there and leave the reporting to the pod
loop. Control cases show the same reconciles do act when the twin is readable. No API
server: the informers are fed through Informer._apply, API calls are replaced by recorders."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.informer import ADDED
from kube_offload import reasons
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from kube_offload.runtime.kube import ApiError
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.reflection.configmaps import ConfigMapReflector
from vkubelet.shared.loops import LoopContext
from vkubelet.settings import Settings
from support import builders

TWIN = "ns-local"
KEY = "ns/web"
DENIED = 'pods is forbidden: User "system:serviceaccount:kube-offload-tenant-local:consumer" cannot list resource "pods"'


def offloaded_with_a_ready_twin(twins: TwinNamespaces, settings: Settings) -> None:
    """Local namespace "ns" offloaded, and our request for its twin Ready (the provider's
    answer): the twin is usable."""
    twins.local_namespaces.apply(ADDED, {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "ns", "resourceVersion": "1",
                     "labels": {c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}},
    })
    twins.requests.apply(ADDED, builders.twin_request(TWIN, settings.tenant_namespace))


@pytest.fixture
def loop(monkeypatch) -> PodOffloader:
    settings = Settings(cluster_id="remote", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    offloader = PodOffloader(settings, informers, TwinNamespaces(settings, informers, recorder), recorder)
    informers.set_twin_namespaces([TWIN])
    offloaded_with_a_ready_twin(offloader.twins, settings)
    offloader.shared = informers  # type: ignore[attr-defined]
    offloader.calls = []  # type: ignore[attr-defined]
    offloader.warnings = []  # type: ignore[attr-defined]

    def called(name):
        def record(*args, **kwargs):
            offloader.calls.append(name)  # type: ignore[attr-defined]
            return {}
        return record

    monkeypatch.setattr(offloader.local.kube, "delete", called("delete local pod"))
    monkeypatch.setattr(offloader.local.kube, "patch", called("patch local status"))
    monkeypatch.setattr(offloader.kube, "create", called("create ShadowPod"))
    monkeypatch.setattr(offloader.kube, "delete", called("delete ShadowPod"))
    monkeypatch.setattr(recorder, "warning", lambda obj, reason, message: offloader.warnings.append((reason, message)))
    monkeypatch.setattr(recorder, "normal", lambda obj, reason, message: None)
    # Both twin-scoped caches listed once (empty): the readable case.
    for informer in (offloader.shadowpods, offloader.remote_pods):
        informer._children[TWIN]._synced.set()
    return offloader


def forbid(loop: PodOffloader, forbidden: bool = True) -> None:
    for informer in (loop.shadowpods, loop.remote_pods):
        child = informer._children[TWIN]
        child.forbidden, child.forbidden_message = forbidden, DENIED if forbidden else ""


def pod(**meta) -> dict:
    return builders.pod(containers=[builders.container("c")], spec={"nodeName": "kube-offload-remote"}, phase="Running",
                        **{"uid": "u1", "resourceVersion": "1", **meta})


TERMINATING = {"deletionTimestamp": "2026-11-23T22:00:00Z", "deletionGracePeriodSeconds": 0}


def test_a_terminating_pod_of_a_forbidden_twin_is_not_confirmed_gone(loop):
    loop.local_pods.apply(ADDED, pod(**TERMINATING))
    forbid(loop)
    with pytest.raises(Requeue):
        loop.reconcile(KEY)
    assert loop.calls == []  # the remote pod may still run: the local pod stays
    reason, message = loop.warnings[-1]
    assert reason == reasons.REASON_TWIN_FORBIDDEN
    assert TWIN in message and c.TWIN_ROLEBINDING_NAME in message and "403" in message and DENIED in message


def test_control_the_same_terminating_pod_with_a_readable_empty_twin_is_deleted(loop):
    loop.local_pods.apply(ADDED, pod(**TERMINATING))
    loop.reconcile(KEY)
    assert loop.calls == ["delete local pod"]


def test_a_running_pod_whose_shadowpod_is_invisible_gets_no_new_one_and_no_status_write(loop):
    loop.local_pods.apply(ADDED, pod())
    forbid(loop)
    with pytest.raises(Requeue):
        loop.reconcile(KEY)
    assert loop.calls == []


def test_control_a_pod_of_a_readable_twin_without_a_shadowpod_gets_one(loop):
    loop.local_pods.apply(ADDED, pod())
    loop.reconcile(KEY)
    assert "create ShadowPod" in loop.calls


def test_a_namespace_no_longer_offloaded_does_not_fail_pods_it_cannot_see(loop):
    # Its labels removed; its twin is still requested (our request names the namespace).
    loop.twins.local_namespaces.apply(ADDED, {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "resourceVersion": "2"},
    })
    loop.local_pods.apply(ADDED, pod())
    forbid(loop)
    assert loop.forbidden.twin_of("ns") == TWIN
    with pytest.raises(Requeue):
        loop.reconcile(KEY)
    assert loop.calls == []  # not marked Failed while its remote pod may run


def test_said_once_in_the_log_and_again_after_access_came_back(loop, caplog):
    loop.local_pods.apply(ADDED, pod())
    forbid(loop)
    with caplog.at_level(logging.INFO, logger="kube_offload.vkubelet.pods"):
        for _ in range(3):
            with pytest.raises(Requeue):
                loop.reconcile(KEY)
        warned = [r for r in caplog.records if r.levelno == logging.WARNING and TWIN in r.getMessage()]
        assert len(warned) == 1 and c.TWIN_ROLEBINDING_NAME in warned[0].getMessage()
        assert len(loop.warnings) == 3  # the Event recorder folds these into one Event

        forbid(loop, False)
        loop.reconcile(KEY)  # managed again: the ShadowPod is created
        assert "create ShadowPod" in loop.calls
        assert any("can be read again" in r.getMessage() for r in caplog.records)


def test_no_service_account_token_is_minted_for_a_forbidden_twin(loop, monkeypatch):
    """Token reflection (vkubelet/reflection/serviceaccounts.py) would mint a local token at
    every retry only to have its Secret refused (403) in the twin: it waits instead."""
    from vkubelet.reflection.serviceaccounts import ServiceAccountTokenReflector
    from vkubelet.shared.loops import LoopContext

    context = LoopContext(loop.settings, loop.shared, loop.twins, loop.recorder, None)  # type: ignore[arg-type]
    tokens = ServiceAccountTokenReflector(context)
    minted: list[str] = []
    monkeypatch.setattr(tokens._local, "create", lambda *a, **kw: minted.append("token"))
    projected = {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    with_token = pod()
    with_token["spec"]["volumes"] = [projected]
    loop.local_pods.apply(ADDED, with_token)
    tokens.remote._children[TWIN].forbidden = True
    with pytest.raises(Requeue):
        tokens.reconcile(KEY)
    assert minted == []
    tokens.remote._children[TWIN].forbidden = False
    # control: readable, so it asks for a token (the fake answers nothing, hence any error)
    with pytest.raises(Exception):  # noqa: B017
        tokens.reconcile(KEY)
    assert minted == ["token"]


# --- the reflectors ---------------------------------------------------------------------------
@pytest.fixture
def reflector(monkeypatch):
    settings = Settings(cluster_id="remote", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    twins = TwinNamespaces(settings, informers, recorder)
    informers.set_twin_namespaces([TWIN])
    reflector = ConfigMapReflector(LoopContext(settings, informers, twins, recorder, node=None))
    offloaded_with_a_ready_twin(twins, settings)
    reflector.scope.refresh()
    reflector.local.apply(ADDED, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "ns", "uid": "cm1", "resourceVersion": "1"},
        "data": {"mode": "fast"},
    })
    reflector.remote._children[TWIN]._synced.set()  # listed once, empty: the readable case
    reflector.calls = []
    reflector.warnings = []

    def read(namespace, name):
        reflector.calls.append(("read", namespace, name))
        return None

    def apply(namespace, body, *, creates):
        reflector.calls.append(("apply", namespace, body["metadata"]["name"]))
        raise ApiError(403, "Forbidden", "configmaps is forbidden")

    monkeypatch.setattr(reflector.ops, "read", read)
    monkeypatch.setattr(reflector.ops, "apply", apply)
    monkeypatch.setattr(recorder, "warning", lambda obj, reason, message: reflector.warnings.append((reason, message)))
    return reflector


def test_a_reflector_writes_nothing_to_a_forbidden_twin_and_leaves_the_report_to_the_pod_loop(reflector):
    child = reflector.remote._children[TWIN]
    child.forbidden, child.forbidden_message = True, DENIED
    with pytest.raises(Requeue) as requeue:
        reflector.reconcile("ns/settings")
    assert reflector.calls == [] and reflector.warnings == []  # no ReflectionFailed every 30 s
    assert TWIN in str(requeue.value)


def test_control_a_reflector_with_a_readable_twin_creates_its_copy(reflector):
    with pytest.raises(Requeue):  # the fake API refuses, as a revoked RoleBinding would
        reflector.reconcile("ns/settings")
    assert reflector.calls == [("read", TWIN, "settings"), ("apply", TWIN, "settings")]
    assert [reason for reason, _ in reflector.warnings] == ["ReflectionFailed"]
