"""Token reflection and the API server modes: only a pod in mode ``home`` gets a home
token minted into its twin namespace; a pod (or namespace) opted out with ``disabled`` or
``remote`` holds no home credential on the provider, and an opt-out withdraws the token
Secret a pod already had. No API server: the informers are fed through their cache, the
local TokenRequest and the remote deletes are replaced by recorders."""

from __future__ import annotations

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import ADDED, MODIFIED
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.reflection.serviceaccounts import ServiceAccountTokenReflector
from vkubelet.shared.loops import LoopContext
from vkubelet.settings import Settings
from support import builders

TWIN = "ns-local"
KEY = "ns/web"
TOKEN_VOLUME = {"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}


class Minted(Exception):
    """The fake TokenRequest: raised so the reconcile stops where it would write."""


def _namespace(annotations: dict | None = None, rv: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ns", "resourceVersion": rv, "annotations": annotations or {},
                         "labels": {c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}}}


@pytest.fixture
def tokens(monkeypatch) -> ServiceAccountTokenReflector:
    settings = Settings(cluster_id="remote", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    twins = TwinNamespaces(settings, informers, recorder)
    informers.set_twin_namespaces([TWIN])
    twins.local_namespaces.apply(ADDED, _namespace())
    twins.requests.apply(ADDED, builders.twin_request(TWIN, settings.tenant_namespace))
    reflector = ServiceAccountTokenReflector(LoopContext(settings, informers, twins, recorder, None))  # type: ignore[arg-type]
    reflector.deleted = []  # type: ignore[attr-defined]
    reflector.shared = informers  # type: ignore[attr-defined]  (the pod loop's, in the gate's test)

    def mint(*_args, **_kwargs):
        raise Minted()

    monkeypatch.setattr(reflector._local, "create", mint)
    monkeypatch.setattr(reflector.ops, "delete", lambda ns, name, uid=None: reflector.deleted.append(f"{ns}/{name}") or True)  # type: ignore[attr-defined]
    return reflector


def _pod(**annotations: str) -> dict:
    obj = builders.pod(uid="u1", resourceVersion="1", annotations=annotations, containers=[builders.container("c")],
                       spec={"nodeName": "kube-offload-remote", "volumes": [TOKEN_VOLUME]})
    return obj


def _existing_token_secret() -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": c.REFLECTED_TOKEN_SECRET_TYPE,
            "metadata": {"name": "kube-offload-token-web", "namespace": TWIN, "uid": "s1", "resourceVersion": "1",
                         "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local", "kube-offload.io/reflector": "serviceaccounts"},
                         "annotations": {c.ANNOTATION_ORIGIN_NAMESPACE: "ns", c.ANNOTATION_ORIGIN_NAME: "web",
                                         c.ANNOTATION_ORIGIN_UID: "u1"}},
            "data": {}}


def test_a_home_pod_gets_its_token_minted(tokens):
    tokens.local_pods.apply(ADDED, _pod())
    with pytest.raises(Minted):
        tokens.reconcile(KEY)


@pytest.mark.parametrize("mode", [c.API_SERVER_DISABLED, c.API_SERVER_REMOTE, "off"])
def test_an_opted_out_pod_gets_no_home_token(tokens, mode):
    tokens.local_pods.apply(ADDED, _pod(**{c.ANNOTATION_API_SERVER: mode}))
    tokens.reconcile(KEY)  # no Minted: nothing requested
    assert tokens.deleted == []


def test_opting_the_namespace_out_withdraws_the_token_secret(tokens):
    tokens.local_pods.apply(ADDED, _pod())
    tokens.remote._children[TWIN].apply(ADDED, _existing_token_secret())
    tokens._twins.local_namespaces.apply(MODIFIED, _namespace({c.ANNOTATION_API_SERVER: c.API_SERVER_DISABLED}, rv="2"))
    tokens.reconcile(KEY)
    assert tokens.deleted == [f"{TWIN}/kube-offload-token-web"]


# --- the pod loop waits for the token Secret (no FailedMount on the provider) -----------------
def test_a_pod_waits_for_its_token_secret_made_for_its_uid(tokens):
    pod = _pod()
    assert tokens.export_pending(pod) == ["token Secret kube-offload-token-web"]
    other = _existing_token_secret()
    other["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] = "u0"  # an older pod of that name
    tokens.remote._children[TWIN].apply(ADDED, other)
    assert tokens.export_pending(pod) == ["token Secret kube-offload-token-web"]
    tokens.remote._children[TWIN].apply(MODIFIED, {**_existing_token_secret(),
                                                   "metadata": {**_existing_token_secret()["metadata"], "resourceVersion": "2"}})
    assert tokens.export_pending(pod) == []


@pytest.mark.parametrize("mode", [c.API_SERVER_DISABLED, c.API_SERVER_REMOTE])
def test_a_pod_with_no_home_token_waits_for_nothing(tokens, mode):
    assert tokens.export_pending(_pod(**{c.ANNOTATION_API_SERVER: mode})) == []
    untokened = _pod()
    untokened["spec"]["volumes"] = []
    assert tokens.export_pending(untokened) == []


def test_the_shadowpod_is_created_once_the_token_secret_is_there(tokens, monkeypatch):
    from datetime import datetime, timezone

    from kube_offload.runtime.controller import Requeue
    from vkubelet.pods.reconcile import PodOffloader

    loop = PodOffloader(tokens.settings, tokens.shared, tokens._twins, tokens._recorder)
    loop.export_gates = [tokens.export_pending]  # as the runner wires it
    for informer in (loop.shadowpods, loop.remote_pods):
        informer._children[TWIN]._synced.set()
    created: list[dict] = []
    monkeypatch.setattr(loop.kube, "create", lambda kind, body, namespace=None: created.append(body) or body)
    monkeypatch.setattr(loop.local.kube, "patch", lambda *args, **kwargs: {})
    monkeypatch.setattr(tokens._recorder, "normal", lambda obj, reason, message: None)
    monkeypatch.setattr(tokens._recorder, "warning", lambda obj, reason, message: None)
    pod = _pod()
    pod["metadata"]["creationTimestamp"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tokens.local_pods.apply(ADDED, pod)
    with pytest.raises(Requeue, match="token Secret kube-offload-token-web"):
        loop.reconcile(KEY)
    assert created == []
    tokens.remote._children[TWIN].apply(ADDED, _existing_token_secret())  # the reflector's write, seen
    loop.reconcile(KEY)
    assert [body["kind"] for body in created] == ["ShadowPod"]
