"""The dry run's verdict cache (enforcer/admission/verdict_cache.py) and its use by
dry_run.check: two pods of one template share a key; anything the provider's admission
may read changes it; bounded in size and time; refusals kept, "could not verify" not."""

from __future__ import annotations

import copy
import threading

import pytest

from enforcer.admission import dry_run
from enforcer.admission.verdict_cache import (
    NAME_PLACEHOLDER, TOKEN_SECRET_PREFIX, VerdictCache, normalised_shadowpod, quota_binds_pods, template_key,
)
from kube_offload import constants as c
from kube_offload.admission import Decision
from kube_offload.runtime.kube import ApiError
from tests.support import builders

NS = {"metadata": {"name": "twin", "uid": "ns-uid", "resourceVersion": "7",
                   "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}


def replica(name: str, uid: str, *, image: str = "nginx:1.27", **changes) -> dict:
    """A ShadowPod as the vkubelet sends it for local pod ``name`` of a Deployment: the
    origin annotations, the per-pod token Secret of a reflected identity, in the volume the
    local ServiceAccount admission named with a random suffix."""
    volume = f"kube-api-access-{uid[-5:]}"
    token_volume = {"name": volume, "projected": {"sources": [
        {"secret": {"name": f"{TOKEN_SECRET_PREFIX}{name}", "items": [{"key": "token", "path": "token"}]}},
        {"configMap": {"name": "kube-offload-root-ca.crt"}},
    ]}}
    app = builders.container(image=image, requests={"cpu": "100m"})
    app["volumeMounts"] = [{"name": volume, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    spec = {"containers": [app], "volumes": [token_volume]}
    spec.update(changes)
    return builders.shadowpod(
        name, "twin", spec=spec, pod_labels={"app": "web", "pod-template-hash": "5d4f"}, origin="local",
        origin_annotations={c.ANNOTATION_ORIGIN_NAMESPACE: "default", c.ANNOTATION_ORIGIN_NAME: name,
                            c.ANNOTATION_ORIGIN_UID: f"local-{uid}"},
        uid=uid, generation=1, resourceVersion=f"rv-{uid}",
    )


def key(shadowpod: dict, namespace: dict = NS, limit_ranges: list | None = None) -> str:
    return template_key(dry_run.pod_for(normalised_shadowpod(shadowpod)), namespace, limit_ranges or [])


# --- the key -----------------------------------------------------------------------------------------
def test_two_pods_of_one_template_share_a_key():
    assert key(replica("web-5d4f-abcde", "u1")) == key(replica("web-5d4f-xyz12", "u2"))


@pytest.mark.parametrize("change", [
    lambda s: s["spec"]["pod"]["spec"]["containers"][0].update(image="nginx:1.28"),
    lambda s: s["spec"]["pod"]["spec"]["containers"][0].update(securityContext={"privileged": True}),
    lambda s: s["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"].update(cpu="2"),
    lambda s: s["spec"]["pod"]["spec"].update(hostNetwork=True),
    lambda s: s["spec"]["pod"]["spec"].update(priorityClassName="high"),
    lambda s: s["spec"]["pod"]["spec"].update(runtimeClassName="kata"),
    lambda s: s["spec"]["pod"]["spec"]["volumes"][0]["projected"]["sources"][0]["secret"].update(name="other-secret"),
    lambda s: s["spec"]["pod"]["metadata"]["labels"].update(app="db"),
    lambda s: s["spec"]["pod"]["metadata"]["annotations"].update({"seccomp": "unconfined"}),
    lambda s: s["spec"]["pod"]["metadata"]["annotations"].update({c.ANNOTATION_ORIGIN_NAMESPACE: "prod"}),
], ids=["image", "securityContext", "requests", "hostNetwork", "priorityClass", "runtimeClass",
        "another secret", "label", "annotation", "origin namespace"])
def test_anything_admission_may_read_of_the_pod_changes_the_key(change):
    base = replica("web-1", "u1")
    changed = copy.deepcopy(base)
    change(changed)
    assert key(base) != key(changed)


def test_two_api_access_volumes_are_not_merged():
    a, b = replica("web-1", "u1"), replica("web-2", "u2")
    for shp in (a, b):
        extra = copy.deepcopy(shp["spec"]["pod"]["spec"]["volumes"][0])
        extra["name"] = "kube-api-access-other"
        shp["spec"]["pod"]["spec"]["volumes"].append(extra)
    assert key(a) != key(b)  # left as they are: each pod its own template


def test_the_namespace_and_its_limit_ranges_are_in_the_key():
    shp = replica("web-1", "u1")
    relabelled = copy.deepcopy(NS)
    relabelled["metadata"]["resourceVersion"] = "8"  # e.g. its Pod Security level changed
    recreated = copy.deepcopy(NS)
    recreated["metadata"]["uid"] = "another"
    limit = {"metadata": {"name": "lr", "namespace": "twin", "resourceVersion": "3"}}
    edited = {"metadata": {"name": "lr", "namespace": "twin", "resourceVersion": "4"}}
    keys = {key(shp), key(shp, relabelled), key(shp, recreated), key(shp, NS, [limit]), key(shp, NS, [edited])}
    assert len(keys) == 5
    assert key(shp, NS, [limit, {"metadata": {"name": "b", "resourceVersion": "1"}}]) == \
        key(shp, NS, [{"metadata": {"name": "b", "resourceVersion": "1"}}, limit])  # order of the cache: not


def test_only_the_identity_fields_are_normalised():
    # A container arg that happens to hold the pod's name is not rewritten: only the fields
    # the vkubelet and the API server fill per pod are.
    a = replica("web-1", "u1")
    a["spec"]["pod"]["spec"]["containers"][0]["args"] = ["web-1"]
    b = replica("web-2", "u2")
    b["spec"]["pod"]["spec"]["containers"][0]["args"] = ["web-2"]
    assert key(a) != key(b)
    n = normalised_shadowpod(a)
    assert n["metadata"]["name"] == NAME_PLACEHOLDER
    assert n["spec"]["pod"]["metadata"]["annotations"][c.ANNOTATION_ORIGIN_NAME] == NAME_PLACEHOLDER
    assert n["spec"]["pod"]["spec"]["volumes"][0]["projected"]["sources"][0]["secret"]["name"] == \
        TOKEN_SECRET_PREFIX + NAME_PLACEHOLDER
    assert a["metadata"]["name"] == "web-1"  # the input is not touched


@pytest.mark.parametrize("hard, binds", [
    ({"pods": "10"}, True),
    ({"count/pods": "10"}, True),
    ({"requests.cpu": "4"}, True),
    ({"limits.memory": "1Gi"}, True),
    ({"cpu": "4"}, True),
    ({"requests.nvidia.com/gpu": "1"}, True),
    ({"count/secrets": "10", "persistentvolumeclaims": "3", "requests.storage": "1Gi", "services": "2"}, False),
    ({"gold.storageclass.storage.k8s.io/requests.storage": "1Gi"}, False),
    ({}, False),
])
def test_which_quotas_make_a_verdict_depend_on_usage(hard, binds):
    assert quota_binds_pods({"spec": {"hard": hard}}) is binds


# --- the cache -----------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_verdicts_expire_and_the_least_recently_used_goes_first():
    clock = Clock()
    cache = VerdictCache(max_entries=2, ttl=10, clock=clock)
    cache.put("a", Decision.allow())
    cache.put("b", Decision.allow())
    assert cache.get("a") is not None  # a is now the most recently used
    cache.put("c", Decision.allow())
    assert len(cache) == 2 and cache.get("b") is None and cache.get("a") is not None
    clock.now += 10
    assert cache.get("a") is None and cache.get("c") is None


def test_refusals_are_kept_could_not_verify_is_not():
    cache = VerdictCache()
    cache.put("refused", Decision.deny(403, "Forbidden", "violates PodSecurity"))
    cache.put("unverified", Decision.deny(503, "ServiceUnavailable", "could not verify"))
    assert cache.get("refused") is not None and not cache.get("refused").allowed
    assert cache.get("unverified") is None


# --- dry_run.check with the cache ------------------------------------------------------------------
@pytest.fixture
def server(monkeypatch):
    """The dry runs dry_run.check sends, answered with ``state["refuse"]`` when set."""
    state: dict = {"creates": [], "gets": [], "refuse": None}

    def create(_client, namespace, pod):
        state["creates"].append(pod["metadata"]["name"])
        if state["refuse"] is not None:
            raise state["refuse"]

    monkeypatch.setattr(dry_run, "dry_run_create", create)
    monkeypatch.setattr(dry_run, "get_pod", lambda _c, _ns, name: state["gets"].append(name))
    return state


def verdicts(quotas: list | None = None, clock=None) -> dry_run.Verdicts:
    return dry_run.Verdicts(
        cache=VerdictCache(clock=clock or Clock()),
        namespace=lambda _ns: NS,
        limit_ranges=lambda _ns: [],
        resource_quotas=lambda _ns: quotas or [],
    )


def test_one_dry_run_per_template_and_no_get_on_create(server):
    v = verdicts()
    for i in range(5):
        assert dry_run.check(None, "twin", replica(f"web-{i}", f"u{i}"), operation="CREATE", verdicts=v).allowed
    assert server["creates"] == ["web-0"] and server["gets"] == []
    assert v.cache.counts == {"hit": 4, "miss": 1, "bypass": 0}
    dry_run.check(None, "twin", replica("db-0", "u9", image="postgres:17"), operation="CREATE", verdicts=v)
    assert server["creates"] == ["web-0", "db-0"]


def test_a_refused_template_stays_refused_for_its_next_pods(server):
    v = verdicts()
    server["refuse"] = ApiError(403, "Forbidden", 'pods "web-0" is forbidden: violates PodSecurity "restricted:latest"')
    first = dry_run.check(None, "twin", replica("web-0", "u0"), operation="CREATE", verdicts=v)
    server["refuse"] = None  # were it asked again, the server would now accept
    second = dry_run.check(None, "twin", replica("web-1", "u1"), operation="CREATE", verdicts=v)
    assert not first.allowed and not second.allowed and second.code == 403
    assert "violates PodSecurity" in second.message
    assert server["creates"] == ["web-0"]


def test_a_pod_counting_quota_means_a_dry_run_every_time(server):
    v = verdicts(quotas=[{"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10"}}}])
    for i in range(3):
        dry_run.check(None, "twin", replica(f"web-{i}", f"u{i}"), operation="CREATE", verdicts=v)
    assert server["creates"] == ["web-0", "web-1", "web-2"]
    assert v.cache.counts == {"hit": 0, "miss": 0, "bypass": 3} and len(v.cache) == 0


def test_could_not_verify_is_asked_again(server):
    v = verdicts()
    server["refuse"] = ApiError(503, "ServiceUnavailable", "etcd timeout")
    assert dry_run.check(None, "twin", replica("web-0", "u0"), operation="CREATE", verdicts=v).code == 503
    server["refuse"] = None
    assert dry_run.check(None, "twin", replica("web-1", "u1"), operation="CREATE", verdicts=v).allowed
    assert server["creates"] == ["web-0", "web-1"]


def concurrent_creates(server, monkeypatch, v, count: int, answer: ApiError | None) -> list:
    """``count`` admissions of one template at once; the first one's dry run is held until
    every other has found it in flight, then answered with ``answer`` (None: accepted)."""
    started, release = threading.Event(), threading.Event()
    server_create = dry_run.dry_run_create
    waiting: list[threading.Event] = []
    lead = v.cache.lead

    def counted_lead(key):
        flight = lead(key)
        if flight is not None:
            waiting.append(flight)
        return flight

    def create(client, namespace, pod):
        if started.is_set():  # a waiter's own dry run
            return server_create(client, namespace, pod)
        started.set()
        assert release.wait(5)
        server["refuse"] = answer
        try:
            return server_create(client, namespace, pod)
        finally:
            server["refuse"] = None

    monkeypatch.setattr(dry_run, "dry_run_create", create)
    monkeypatch.setattr(v.cache, "lead", counted_lead)
    results: list = [None] * count

    def admit(i: int) -> None:
        results[i] = dry_run.check(None, "twin", replica(f"web-{i}", f"u{i}"), operation="CREATE", verdicts=v)

    threads = [threading.Thread(target=admit, args=(i,)) for i in range(count)]
    threads[0].start()
    assert started.wait(5)
    for t in threads[1:]:
        t.start()
    for _ in range(500):
        if len(waiting) == count - 1:
            break
        threading.Event().wait(0.01)
    assert len(waiting) == count - 1, "every other admission should find the leader's dry run in flight"
    release.set()
    for t in threads:
        t.join(10)
    return results


def test_admissions_of_one_template_at_once_share_one_dry_run(server, monkeypatch):
    v = verdicts()
    results = concurrent_creates(server, monkeypatch, v, 4, None)
    assert all(r is not None and r.allowed for r in results)
    assert server["creates"] == ["web-0"]  # the others waited for its answer
    assert v.cache.counts == {"hit": 3, "miss": 1, "bypass": 0} and v.cache._in_flight == {}


def test_waiters_on_an_unverified_dry_run_ask_themselves(server, monkeypatch):
    v = verdicts()
    results = concurrent_creates(server, monkeypatch, v, 3, ApiError(503, "ServiceUnavailable", "etcd timeout"))
    assert results[0].code == 503 and results[1].allowed and results[2].allowed
    # A 503 is no verdict to share: the waiters dry-run (the second may find the first's).
    assert server["creates"][0] == "web-0" and len(server["creates"]) in (2, 3)
    assert v.cache.counts["bypass"] == 1 and v.cache._in_flight == {}


def test_without_the_cache_every_create_is_dry_run_and_an_update_still_reads_the_pod(server):
    for i in range(2):
        dry_run.check(None, "twin", replica("web", f"u{i}"), operation="CREATE")
    assert server["creates"] == ["web", "web"] and server["gets"] == []
    dry_run.check(None, "twin", replica("web", "u1"), operation="UPDATE", verdicts=verdicts())
    assert server["gets"] == ["web"]  # an update: the running pod's in-place patch is checked


def test_a_shadowpod_dry_run_asks_the_server_and_renews_the_verdict(server):
    # `kubectl create --dry-run=server` of a ShadowPod is a question about now (a provider
    # checking a policy it just added): never from the cache, and its answer is kept.
    v = verdicts()
    assert dry_run.check(None, "twin", replica("web-0", "u0"), operation="CREATE", verdicts=v).allowed
    server["refuse"] = ApiError(403, "Forbidden", "ValidatingAdmissionPolicy 'p' denied request: no")
    assert not dry_run.check(None, "twin", replica("probe", "u1"), operation="CREATE", verdicts=v, fresh=True).allowed
    assert not dry_run.check(None, "twin", replica("web-1", "u2"), operation="CREATE", verdicts=v).allowed
    assert server["creates"] == ["web-0", "probe"]


def test_the_vkubelets_shadowpods_of_two_replicas_share_a_key():
    # The real translation (reflected identity): pins the per-pod fields the key normalises
    # (origin annotations, token Secret, the local kube-api-access-<random> volume).
    from vkubelet.pods.translation import TranslationContext, build_shadowpod_for

    ctx = TranslationContext(local_cluster_id="local", virtual_node_labels={"type": "virtual-kubelet"},
                             virtual_node_name="vk", reflection=True)

    def local_pod(name: str, suffix: str) -> dict:
        volume = f"kube-api-access-{suffix}"
        return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{suffix}", "generateName": "web-5d4f-",
                             "labels": {"app": "web", "pod-template-hash": "5d4f"}},
                "spec": {"nodeName": "vk", "serviceAccountName": "default",
                         "containers": [{"name": "app", "image": "nginx", "volumeMounts": [
                             {"name": volume, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                         "volumes": [{"name": volume, "projected": {"sources": [
                             {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                             {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]}}

    keys = set()
    for name, suffix in (("web-5d4f-aaaaa", "abcde"), ("web-5d4f-bbbbb", "xyz12")):
        shp = build_shadowpod_for(local_pod(name, suffix), "bench-local", ctx)
        shp["metadata"]["uid"] = f"shadow-{suffix}"
        keys.add(key(shp))
    assert len(keys) == 1
