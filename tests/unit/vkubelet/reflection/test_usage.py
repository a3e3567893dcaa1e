"""Export by use (vkubelet/reflection/usage.py): what a pod references, which objects
running pods use (the pod informer's index), and the by-use reflector that exports an
object while a pod uses it and withdraws it after."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.indexer import Indexer
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.reflection import usage
from vkubelet.reflection.configmaps import ConfigMapReflector
from vkubelet.reflection.flags import add_reflection_flags, reflection_settings_from_args
from vkubelet.reflection.policy import HELM_RELEASE_TYPE, SERVICE_ACCOUNT_TOKEN_TYPE, Policy, decide
from vkubelet.reflection.secrets import SecretReflector
from vkubelet.reflection.settings import CONFIGMAPS, SECRETS, ReflectionSettings, ResourceSettings
from vkubelet.shared.loops import LoopContext
from vkubelet.settings import Settings
from support import builders
from support.informers import drain

TWIN = "ns-local"


# --- what a pod references --------------------------------------------------------------------
def _pod(spec: dict, *, name: str = "web", namespace: str = "ns", phase: str | None = None) -> dict:
    return builders.pod(name, namespace, spec={"containers": [builders.container("app")], **spec}, phase=phase,
                        uid=f"u-{name}", resourceVersion="1")


EVERY_KIND_OF_REFERENCE = {
    "initContainers": [{
        "name": "init", "image": "busybox",
        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-init-env", "key": "a"}}}],
        "envFrom": [{"secretRef": {"name": "s-init-envfrom"}}],
    }],
    "containers": [{
        "name": "app", "image": "nginx",
        "env": [
            {"name": "PLAIN", "value": "x"},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "b", "optional": True}}},
            {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "c"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "envFrom": [{"configMapRef": {"name": "cm-envfrom", "optional": True}, "prefix": "X_"}],
    }],
    "ephemeralContainers": [{"name": "debug", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cm-debug"}}]}],
    "volumes": [
        {"name": "v1", "configMap": {"name": "cm-volume", "optional": True}},
        {"name": "v2", "secret": {"secretName": "s-volume"}},
        {"name": "v3", "projected": {"sources": [
            {"configMap": {"name": "cm-projected"}},
            {"secret": {"name": "s-projected", "optional": True}},
            {"serviceAccountToken": {"path": "token"}},
            {"downwardAPI": {"items": []}},
        ]}},
        {"name": "v4", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "s-csi"}}},
        {"name": "v5", "azureFile": {"secretName": "s-azure", "shareName": "s"}},
        {"name": "v6", "rbd": {"image": "i", "monitors": ["m"], "secretRef": {"name": "s-rbd"}}},
        {"name": "v7", "emptyDir": {}},
    ],
    "imagePullSecrets": [{"name": "s-pull"}],
}


def test_every_kind_of_reference_is_found():
    refs = usage.references({"spec": EVERY_KIND_OF_REFERENCE})
    assert refs.configmaps == {"cm-init-env", "cm-env", "cm-envfrom", "cm-debug", "cm-volume", "cm-projected"}
    assert refs.secrets == {"s-init-envfrom", "s-env", "s-volume", "s-projected", "s-csi", "s-azure", "s-rbd", "s-pull"}


@pytest.mark.parametrize(
    "spec, kind, name",
    [
        ({"containers": [{"name": "a", "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]}]},
         usage.CONFIGMAP, "x"),
        ({"containers": [{"name": "a", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]}]},
         usage.SECRET, "x"),
        ({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "x"}}]}]}, usage.CONFIGMAP, "x"),
        ({"containers": [{"name": "a", "envFrom": [{"secretRef": {"name": "x", "optional": True}}]}]}, usage.SECRET, "x"),
        ({"initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "x"}}]}]}, usage.SECRET, "x"),
        ({"volumes": [{"name": "v", "configMap": {"name": "x"}}]}, usage.CONFIGMAP, "x"),
        ({"volumes": [{"name": "v", "secret": {"secretName": "x", "optional": True}}]}, usage.SECRET, "x"),
        ({"volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "x"}}]}}]}, usage.CONFIGMAP, "x"),
        ({"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "x"}}]}}]}, usage.SECRET, "x"),
        ({"imagePullSecrets": [{"name": "x"}]}, usage.SECRET, "x"),
    ],
)
def test_each_reference_alone_names_exactly_its_object(spec, kind, name):
    refs = usage.references({"spec": spec})
    other = usage.SECRET if kind == usage.CONFIGMAP else usage.CONFIGMAP
    assert refs.of(kind) == {name}
    assert refs.of(other) == frozenset()


def test_the_service_account_token_empty_names_and_odd_shapes_are_no_references():
    spec = {
        "containers": [{"name": "a", "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"key": "k"}}}], "envFrom": None}],
        "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "s", "secret": {}}, "not-a-volume"],
        "imagePullSecrets": [{}],
    }
    assert usage.references({"spec": spec}) == usage.References()
    assert usage.references({}) == usage.References()
    with pytest.raises(KeyError, match="Service"):
        usage.references({}).of("Service")


@pytest.mark.parametrize("phase, using", [(None, True), ("Pending", True), ("Running", True),
                                          ("Succeeded", False), ("Failed", False)])
def test_a_pod_uses_its_references_until_it_has_finished(phase, using):
    pod = _pod({"volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}, phase=phase)
    assert usage.is_using(pod) is using
    assert usage.used_keys(pod, usage.CONFIGMAP) == (["ns/cfg"] if using else [])
    assert usage.used_keys(pod, usage.SECRET) == []


# --- the in-use index -------------------------------------------------------------------------
def _uses(name: str, *configmaps: str, namespace: str = "ns", phase: str | None = None) -> dict:
    return _pod({"volumes": [{"name": cm, "configMap": {"name": cm}} for cm in configmaps]},
                name=name, namespace=namespace, phase=phase)


def _in_use(store: Indexer) -> list[str]:
    return store.index_values(usage.USES_INDEX[usage.CONFIGMAP])


def test_the_index_follows_pods_that_come_finish_and_go():
    store = Indexer({usage.USES_INDEX[usage.CONFIGMAP]: usage.index_func(usage.CONFIGMAP)})
    a, b = _uses("a", "shared", "only-a"), _uses("b", "shared")
    store.put(a)
    store.put(b)
    store.put(_uses("c", "shared", namespace="other"))  # same name, another namespace: another object
    assert _in_use(store) == ["ns/only-a", "ns/shared", "other/shared"]
    assert store.index_keys(usage.USES_INDEX[usage.CONFIGMAP], "ns/shared") == ["ns/a", "ns/b"]
    store.pop("ns/a")  # what only a used goes; what b still uses stays
    assert _in_use(store) == ["ns/shared", "other/shared"]
    store.put(_uses("b", "shared", phase="Succeeded"))  # finished: uses nothing any more
    assert _in_use(store) == ["other/shared"]
    store.put(_uses("c", "renamed", namespace="other"))  # a reference dropped by an update
    assert _in_use(store) == ["other/renamed"]


def test_the_index_is_rebuilt_from_the_pods_alone():
    """A restart lists the pods again: the same answer, with nothing else kept."""
    pods = [_uses("a", "x", "y"), _uses("b", "y"), _uses("done", "z", phase="Failed")]
    first = Indexer({usage.USES_INDEX[usage.CONFIGMAP]: usage.index_func(usage.CONFIGMAP)})
    for pod in pods:
        first.put(pod)
    again = Indexer()
    for pod in reversed(pods):
        again.put(pod)
    again.add_indexer(usage.USES_INDEX[usage.CONFIGMAP], usage.index_func(usage.CONFIGMAP))  # registered after the list
    assert _in_use(first) == _in_use(again) == ["ns/x", "ns/y"]


def test_only_spec_changes_and_finishing_can_change_what_a_pod_uses():
    pod = _uses("a", "x")
    status_only = {**pod, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    assert usage.use_changed(None, pod) is True
    assert usage.use_changed(pod, pod) is True  # a resync
    assert usage.use_changed({**pod, "status": {"phase": "Pending"}}, status_only) is False
    assert usage.use_changed(status_only, {**pod, "status": {"phase": "Succeeded"}}) is True
    assert usage.use_changed(pod, _uses("a", "y")) is True


@pytest.mark.parametrize(
    "pending, waited, held",
    [([], 0.0, False), (["ConfigMap x"], 1.0, True), (["ConfigMap x"], usage.EXPORT_WAIT_SECONDS, False),
     (["ConfigMap x"], None, False)],
)
def test_a_new_pod_waits_for_its_exports_but_not_for_ever(pending, waited, held):
    why = usage.hold_for_exports(pending, waited)
    assert (why is not None) is held
    if held:
        assert "ConfigMap x" in why and "by-use" in why


# --- the policy -------------------------------------------------------------------------------
def test_by_use_selects_what_is_used_and_never_what_is_never_exported():
    cm = {"metadata": {"name": "cfg", "namespace": "ns"}}
    assert decide(cm, Policy.BY_USE, kind="ConfigMap", in_use=True).reflect is True
    assert decide(cm, Policy.BY_USE, kind="ConfigMap", in_use=False).reflect is False
    assert "no offloaded pod uses it" in decide(cm, Policy.BY_USE, kind="ConfigMap").why
    skipped = {"metadata": {"name": "cfg", "annotations": {c.ANNOTATION_SKIP_REFLECTION: "true"}}}
    assert decide(skipped, Policy.BY_USE, kind="ConfigMap", in_use=True).reflect is False
    token = {"metadata": {"name": "t"}, "type": SERVICE_ACCOUNT_TOKEN_TYPE}
    assert decide(token, Policy.BY_USE, kind="Secret", in_use=True).reflect is False
    helm = {"metadata": {"name": "r"}, "type": HELM_RELEASE_TYPE}
    assert decide(helm, Policy.BY_USE, kind="Secret", in_use=True).reflect is False
    # The other policies do not read use.
    assert decide(cm, Policy.ALLOW_LIST, kind="ConfigMap", in_use=True).reflect is False
    assert decide(cm, Policy.DENY_LIST, kind="ConfigMap", in_use=False).reflect is True


def test_by_use_is_refused_for_kinds_pods_do_not_reference_by_name():
    settings = ReflectionSettings(resources={"services": ResourceSettings(policy=Policy.BY_USE)})
    problem = settings.problem()
    assert problem is not None and "--reflect-services-policy=by-use" in problem and "configmaps and secrets" in problem
    for name in (CONFIGMAPS, SECRETS):
        assert ReflectionSettings(resources={name: ResourceSettings(policy=Policy.BY_USE)}).problem() is None


# --- the by-use reflector ---------------------------------------------------------------------
def _settings() -> Settings:
    by_use = ResourceSettings(policy=Policy.BY_USE)
    return Settings(cluster_id="remote", local_cluster_id="local",
                    reflection=ReflectionSettings(resources={CONFIGMAPS: by_use, SECRETS: by_use}))


def _offloaded(twins: TwinNamespaces, settings: Settings) -> None:
    twins.local_namespaces.apply(ADDED, {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "ns", "resourceVersion": "1",
                     "labels": {c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}},
    })
    twins.requests.apply(ADDED, builders.twin_request(TWIN, settings.tenant_namespace))


def _configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}}


@pytest.fixture
def reflector(monkeypatch) -> ConfigMapReflector:
    settings = _settings()
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    twins = TwinNamespaces(settings, informers, recorder)
    informers.set_twin_namespaces([TWIN])
    reflector = ConfigMapReflector(LoopContext(settings, informers, twins, recorder, node=None))  # type: ignore[arg-type]
    _offloaded(twins, settings)
    reflector.scope.refresh()
    for name in ("used", "unused"):
        reflector.local.apply(ADDED, _configmap(name))
    reflector.local._children["ns"]._synced.set()  # the namespace listed
    remote = reflector.remote._children[TWIN]
    remote._synced.set()
    reflector.writes = []  # type: ignore[attr-defined]

    def apply(namespace, body, *, creates):
        reflector.writes.append(("create" if creates else "apply", namespace, body["metadata"]["name"]))  # type: ignore[attr-defined]
        stored = {**body, "metadata": {**body["metadata"], "uid": "r-" + body["metadata"]["name"], "resourceVersion": "1"}}
        remote.apply(ADDED, stored)
        return stored  # as the API server answers: with the version its watch event carries

    def delete(namespace, name, uid=None):
        reflector.writes.append(("delete", namespace, name))  # type: ignore[attr-defined]
        remote.apply(DELETED, remote.get(f"{namespace}/{name}"))
        return True

    monkeypatch.setattr(reflector.ops, "read", lambda namespace, name: remote.get(f"{namespace}/{name}"))
    monkeypatch.setattr(reflector.ops, "apply", apply)
    monkeypatch.setattr(reflector.ops, "delete", delete)
    return reflector


def _reconcile_queued(reflector: ConfigMapReflector) -> list[str]:
    """Reconcile what is queued until nothing is (our own remote writes come back as
    events); the keys of the first round."""
    first = keys = drain(reflector.controller)
    while keys:
        for key in keys:
            reflector.reconcile(key)
        keys = drain(reflector.controller)
    return first


def _web(*configmaps: str, phase: str | None = None) -> dict:
    return _pod({"containers": [{"name": "app", "image": "nginx",
                                 "envFrom": [{"configMapRef": {"name": cm, "optional": True}} for cm in configmaps]}]},
                phase=phase)


def test_only_a_configmap_a_pod_uses_is_exported_and_it_is_withdrawn_when_the_pod_goes(reflector):
    drain(reflector.controller)
    for key in ("ns/used", "ns/unused"):
        reflector.reconcile(key)
    assert reflector.writes == []  # no pod uses either yet

    reflector.pods.apply(ADDED, _web("used"))
    assert _reconcile_queued(reflector) == ["ns/used"]  # the pod event enqueues what it references
    assert reflector.writes == [("create", TWIN, "used")]
    reflector.reconcile("ns/unused")
    assert reflector.writes == [("create", TWIN, "used")]

    reflector.pods.apply(DELETED, _web("used"))
    assert _reconcile_queued(reflector) == ["ns/used"]
    assert reflector.writes[-1] == ("delete", TWIN, "used")


def test_a_finished_pod_withdraws_what_only_it_used(reflector):
    reflector.pods.apply(ADDED, _web("used"))
    reflector.pods.apply(ADDED, {**_web("unused"), "metadata": {**_web("unused")["metadata"], "name": "other", "uid": "u2"}})
    _reconcile_queued(reflector)
    assert sorted(reflector.writes) == [("create", TWIN, "unused"), ("create", TWIN, "used")]
    reflector.pods.apply(MODIFIED, _web("used", phase="Succeeded"))
    assert _reconcile_queued(reflector) == ["ns/used"]
    assert reflector.writes[-1] == ("delete", TWIN, "used")
    assert reflector.remote_of("ns/unused")  # still used by the other pod


def test_a_status_change_of_a_running_pod_enqueues_nothing(reflector):
    reflector.pods.apply(ADDED, _web("used"))
    drain(reflector.controller)
    reflector.pods.apply(MODIFIED, {**_web("used"), "status": {"phase": "Running", "podIP": "10.0.0.9"}})
    assert drain(reflector.controller) == []


def test_the_pod_waits_until_its_configmap_is_exported(reflector):
    reflector.pods.apply(ADDED, _web("used", "missing"))  # "missing" does not exist locally: nothing to wait for
    assert reflector.export_pending(_web("used", "missing")) == ["ConfigMap used"]
    _reconcile_queued(reflector)
    assert reflector.export_pending(_web("used", "missing")) == []


def test_a_restart_keeps_what_is_used_and_withdraws_what_is_not(reflector, monkeypatch):
    """A new reflector on caches listed afresh: the copy a running pod uses stays, the
    copy of an object no pod uses any more goes."""
    reflector.pods.apply(ADDED, _web("used", "unused"))
    _reconcile_queued(reflector)
    assert len(reflector.writes) == 2
    reflector.pods.apply(MODIFIED, _web("used"))  # as if the change came while it was down
    reflector.writes.clear()
    for key in sorted(set(reflector.reflected_keys())):  # what the remote informer's first list enqueues
        reflector.reconcile(key)
    assert reflector.writes == [("delete", TWIN, "unused")]


def test_a_never_exported_secret_is_not_exported_even_when_used(monkeypatch):
    settings = _settings()
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="test")
    twins = TwinNamespaces(settings, informers, recorder)
    informers.set_twin_namespaces([TWIN])
    secrets = SecretReflector(LoopContext(settings, informers, twins, recorder, node=None))  # type: ignore[arg-type]
    _offloaded(twins, settings)
    secrets.scope.refresh()
    secrets.remote._children[TWIN]._synced.set()
    token = {"apiVersion": "v1", "kind": "Secret", "type": SERVICE_ACCOUNT_TOKEN_TYPE,
             "metadata": {"name": "legacy", "namespace": "ns", "uid": "s1", "resourceVersion": "1"}}
    secrets.local.apply(ADDED, token)
    pod = _pod({"volumes": [{"name": "t", "secret": {"secretName": "legacy"}}]})
    secrets.pods.apply(ADDED, pod)
    assert secrets.in_use("ns/legacy") is True
    assert secrets.export_pending(pod) == []  # nothing the pod could wait for
    created = []
    monkeypatch.setattr(secrets.ops, "read", lambda ns, name: None)
    monkeypatch.setattr(secrets.ops, "apply", lambda ns, body, *, creates: created.append(body))
    secrets.reconcile("ns/legacy")
    assert created == []


# --- the pod loop waits for the export --------------------------------------------------------
def _now(seconds_ago: float = 0.0) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def pod_loop(reflector, monkeypatch) -> PodOffloader:
    context = reflector.context
    loop = PodOffloader(context.settings, context.informers, reflector._twins, reflector._recorder)
    # As the runner wires them.
    loop.export_gates = [reflector.export_pending]
    for informer in (loop.shadowpods, loop.remote_pods):
        informer._children[TWIN]._synced.set()
    loop.created = []  # type: ignore[attr-defined]
    monkeypatch.setattr(loop.kube, "create", lambda kind, body, namespace=None: loop.created.append(body) or body)  # type: ignore[attr-defined]
    monkeypatch.setattr(loop.local.kube, "patch", lambda *args, **kwargs: {})
    monkeypatch.setattr(reflector._recorder, "normal", lambda obj, reason, message: None)
    monkeypatch.setattr(reflector._recorder, "warning", lambda obj, reason, message: None)  # no home API in a unit test
    return loop


def _new_web(seconds_ago: float = 0.0) -> dict:
    pod = _web("used")
    pod["metadata"]["creationTimestamp"] = _now(seconds_ago)
    pod["spec"]["nodeName"] = "kube-offload-remote"
    return pod


def test_a_new_pods_shadowpod_waits_for_its_configmaps_export(reflector, pod_loop):
    reflector.pods.apply(ADDED, _new_web())
    with pytest.raises(Requeue, match="ConfigMap used to be exported"):
        pod_loop.reconcile("ns/web")
    assert pod_loop.created == []
    _reconcile_queued(reflector)  # the same pod event kicked the reflector
    pod_loop.reconcile("ns/web")
    assert [body["kind"] for body in pod_loop.created] == ["ShadowPod"]


def test_a_pod_whose_export_never_comes_goes_after_the_wait(reflector, pod_loop):
    reflector.pods.apply(ADDED, _new_web(seconds_ago=usage.EXPORT_WAIT_SECONDS + 1))
    pod_loop.reconcile("ns/web")  # the remote kubelet waits for a required one itself
    assert [body["kind"] for body in pod_loop.created] == ["ShadowPod"]


def test_by_use_is_a_choice_of_the_policy_flags_and_their_environment(monkeypatch):
    monkeypatch.setenv("KUBE_OFFLOAD_VKUBELET_REFLECT_SECRETS_POLICY", "by-use")
    parser = argparse.ArgumentParser()
    add_reflection_flags(parser, "vkubelet")
    settings = reflection_settings_from_args(parser.parse_args(["--reflect-configmaps-policy", "by-use"]))
    assert settings.of(CONFIGMAPS).policy is Policy.BY_USE
    assert settings.of(SECRETS).policy is Policy.BY_USE
    assert settings.of("services").policy is Policy.DENY_LIST
    assert settings.problem() is None
