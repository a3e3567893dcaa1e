"""The pod loop's create step with the API server modes: the endpoint of the relay comes
from the ``home_api`` the runner passes in (read at each translation), the mode from the
pod's or its namespace's annotation, and what keeps a pod from its home API server is
said on it (InvalidAPIServerMode, HomeAPIUnavailable), in place of the Offloaded Event:
one Event per offloaded pod from the vkubelet (issue 27). No API server: the informers are
fed through their cache, API calls are replaced by recorders."""

from __future__ import annotations

import logging

from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import ADDED
from kube_offload import reasons
from vkubelet.shared.events import EventRecorder
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.pods import shadowpods
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.settings import Settings
from support import builders

TWIN = "ns-local"
RELAY = HomeAPIEndpoint(ip="10.96.12.34", port=443)
LOG = logging.LoggerAdapter(logging.getLogger("test"), {})


class Loop:
    def __init__(self, monkeypatch, endpoint: HomeAPIEndpoint | None, namespace_annotations: dict | None = None) -> None:
        self.endpoint = endpoint
        settings = Settings(cluster_id="remote", local_cluster_id="local", home_cluster_domain="corp.example")
        informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
        recorder = EventRecorder(client.ApiClient(), host="test")
        self.offloader = PodOffloader(settings, informers, TwinNamespaces(settings, informers, recorder), recorder,
                                      home_api=lambda: self.endpoint)
        self.offloader.twins.local_namespaces.apply(ADDED, {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ns", "resourceVersion": "1", "annotations": namespace_annotations or {}},
        })
        self.created: list[dict] = []
        self.warnings: list[tuple[str, str]] = []
        self.normals: list[tuple[str, str]] = []
        monkeypatch.setattr(self.offloader.kube, "create", lambda _kind, body, **_kw: self.created.append(body) or body)
        monkeypatch.setattr(self.offloader.local.kube, "patch", lambda *a, **kw: {})
        monkeypatch.setattr(recorder, "warning", lambda obj, reason, message: self.warnings.append((reason, message)))
        monkeypatch.setattr(recorder, "normal", lambda obj, reason, message: self.normals.append((reason, message)))

    def create(self, **annotations: str) -> dict:
        local = builders.pod(uid="u1", annotations=annotations,
                             containers=[{"name": "app", "image": "nginx"}], spec={"nodeName": "kube-offload-remote"})
        attempt = self.offloader.refusals.attempt(("ns/web", shadowpods.CREATE), local)
        shadowpods.create(self.offloader, local, TWIN, self.offloader.desired(local, TWIN), attempt, LOG)
        return self.created[-1]["spec"]["pod"]["spec"]


def _env(spec: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in spec["containers"][0].get("env") or []}


def test_a_known_relay_points_the_pod_at_it_and_nothing_is_said(monkeypatch):
    loop = Loop(monkeypatch, RELAY)
    spec = loop.create()
    assert _env(spec)["KUBERNETES_SERVICE_HOST"] == "kubernetes.default.svc"
    assert spec["hostAliases"][0]["ip"] == RELAY.ip
    assert "kubernetes.default.svc.corp.example" in spec["hostAliases"][0]["hostnames"]
    assert loop.warnings == []
    assert loop.normals == [(reasons.REASON_OFFLOADED, f"running in cluster remote as {TWIN}/web")]


def test_the_endpoint_is_read_at_each_translation(monkeypatch):
    loop = Loop(monkeypatch, None)
    assert "hostAliases" not in loop.create()
    loop.endpoint = HomeAPIEndpoint(ip="10.96.0.50", port=443)
    assert loop.create()["hostAliases"][0]["ip"] == "10.96.0.50"


def test_no_relay_keeps_todays_pod_and_says_so(monkeypatch):
    loop = Loop(monkeypatch, None)
    spec = loop.create()
    assert "KUBERNETES_SERVICE_HOST" not in _env(spec) and "hostAliases" not in spec
    [(reason, message)] = loop.warnings
    assert reason == reasons.REASON_HOME_API_UNAVAILABLE == "HomeAPIUnavailable"
    assert c.HOME_API_SERVICE in message and f"{c.ANNOTATION_API_SERVER}={c.API_SERVER_DISABLED}" in message
    # The Warning stands in for Offloaded: it says where the pod runs, and nothing else is written.
    assert message.startswith(f"running in cluster remote as {TWIN}/")
    assert loop.normals == []


def test_a_namespace_opting_out_gets_no_address_and_no_warning_about_it(monkeypatch):
    loop = Loop(monkeypatch, None, {c.ANNOTATION_API_SERVER: c.API_SERVER_DISABLED})
    spec = loop.create()
    assert spec["automountServiceAccountToken"] is False and "hostAliases" not in spec
    assert loop.warnings == []
    assert [reason for reason, _ in loop.normals] == [reasons.REASON_OFFLOADED]


def test_an_unknown_mode_runs_the_pod_with_no_api_access_and_says_which_values_exist(monkeypatch):
    loop = Loop(monkeypatch, RELAY)
    spec = loop.create(**{c.ANNOTATION_API_SERVER: "off"})
    assert spec["automountServiceAccountToken"] is False and "hostAliases" not in spec
    [(reason, message)] = loop.warnings
    assert reason == "InvalidAPIServerMode"
    assert "'off'" in message and "home, remote, disabled" in message
    assert message.startswith(f"running in cluster remote as {TWIN}/") and loop.normals == []
