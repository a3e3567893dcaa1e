"""The ShadowPod webhook's glue (enforcer/admission/shadowpod_webhook.py), its ledger of admissions
not yet cached (enforcer/admission/ledger.py) and the dry run's verdicts (enforcer/admission/dry_run.py).

Caches here are dictionaries and the dry run a function: what these tests check is the
ordering and locking around them (quota under concurrent creates, a refusal giving its
reservation back). The real informers and the real dry run against a real apiserver are
exercised in tests/e2e/test_shadowpod_validation.py."""

from __future__ import annotations

import copy
import threading
import time

import orjson
import pytest

from enforcer.admission import dry_run
from enforcer.admission.ledger import Ledger
from enforcer.admission.shadowpod_webhook import ShadowPodValidator
from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.admission import Decision, build_review, parse_review
from kube_offload.runtime.indexer import Indexer
from kube_offload.runtime.kube import ApiError
from kube_offload.shadowpod import neutralized_spec
from support import builders

NS = "demo-local"
USER = "system:serviceaccount:kube-offload-tenant-local:consumer"


class Cache:
    """The slice of an Informer the webhook reads."""

    def __init__(self, objects: dict[str, dict] | None = None, synced: bool = True) -> None:
        self.objects = dict(objects or {})
        self.synced = synced
        self.lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self.lock:
            return self.objects.get(key)

    def list(self) -> list[dict]:
        with self.lock:
            return list(self.objects.values())

    def has_synced(self) -> bool:
        return self.synced


class StoreCache:
    """The same slice over the informer's real store (kube_offload/runtime/indexer.py),
    with its tallies and indexes: the webhook then reads usage from running sums, as it
    does in production. ``objects`` stays writable like Cache's: a test that stores an
    object "as the watch would" goes through the store."""

    def __init__(self, objects: dict[str, dict] | None = None, synced: bool = True) -> None:
        self.store = Indexer()
        self.synced = synced
        self.lock = threading.RLock()
        self.objects = _StoreView(self)
        for obj in (objects or {}).values():
            self.store.put(obj)

    def get(self, key: str) -> dict | None:
        with self.lock:
            return self.store.get(key)

    def list(self) -> list[dict]:
        with self.lock:
            return self.store.list()

    def has_synced(self) -> bool:
        return self.synced

    def add_tally(self, name, func) -> None:
        with self.lock:
            self.store.add_tally(name, func)

    def tally(self, name, group) -> dict:
        with self.lock:
            return self.store.tally(name, group)

    def add_indexer(self, name, func) -> None:
        with self.lock:
            self.store.add_indexer(name, func)

    def index_keys(self, name, value) -> list[str]:
        with self.lock:
            return self.store.index_keys(name, value)

    def index_key_set(self, name, value) -> frozenset[str]:
        with self.lock:
            return self.store.index_key_set(name, value)


class _StoreView:
    def __init__(self, cache: StoreCache) -> None:
        self._cache = cache

    def __setitem__(self, key: str, obj: dict) -> None:
        with self._cache.lock:
            self._cache.store.put(obj)

    def __delitem__(self, key: str) -> None:
        with self._cache.lock:
            self._cache.store.pop(key)


# Every test below runs twice: over plain dictionaries (the webhook walks every cached
# ShadowPod) and over the informer's store (running sums per namespace).
@pytest.fixture(params=[Cache, StoreCache], ids=["walk", "tally"], autouse=True)
def cache_kind(request, monkeypatch):
    monkeypatch.setitem(globals(), "CACHE", request.param)
    return request.param


CACHE = Cache


class Caches:
    def __init__(self, quota: dict, cordoned: bool = False, policy: dict | None = None) -> None:
        self.namespaces = CACHE(
            {NS: {"metadata": {"name": NS, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}}}}
        )
        self.consumers = CACHE({"local": {"metadata": {"name": "local"},
                                          "spec": {"quota": quota, "cordoned": cordoned, "policy": policy or {}}}})
        self.synced = True

    def namespace(self, name):
        return self.namespaces.get(name)

    def consumer(self, name):
        return self.consumers.get(name)

    def service_account(self, namespace, name):
        return None

    def has_synced(self):
        return self.synced


def shadowpod(name: str, cpu: str = "100m", uid: str | None = None) -> dict:
    return builders.shadowpod(name, NS, spec={"containers": [builders.container(requests={"cpu": cpu})]}, origin="local",
                              uid=uid or f"uid-{name}", generation=1)


def review(obj: dict, *, operation: str = "CREATE", old: dict | None = None, dry: bool = False):
    body = build_review(obj, operation=operation, old_object=old, user_info={"username": USER}, dry_run=dry)
    return parse_review(orjson.dumps(body))


def validator(quota: dict, *, verdict=Decision.allow, delay: float = 0.0, shadowpods: Cache | None = None, clock=time.monotonic,
              policy: dict | None = None):
    calls: list[str] = []

    def fake_dry_run(namespace, obj, operation, probe):
        calls.append(obj["metadata"]["name"] + (" (update)" if operation == "UPDATE" else ""))
        if delay:
            time.sleep(delay)
        return verdict()

    cache = shadowpods or CACHE()
    v = ShadowPodValidator(shadowpods=cache, caches=Caches(quota, policy=policy), dry_run=fake_dry_run,
                           ledger=Ledger(cache.get, clock=clock))
    return v, calls, cache


# --- quota under concurrency --------------------------------------------------------------------
def test_concurrent_creates_cannot_both_take_the_last_slot():
    # 3 slots, 2 taken by cached ShadowPods; 16 threads race for the last one while the
    # informer never catches up (the dry run is slow, as a real round trip is).
    existing = {f"{NS}/old-{i}": shadowpod(f"old-{i}") for i in range(2)}
    v, calls, _ = validator({"pods": "3"}, delay=0.05, shadowpods=CACHE(existing))
    barrier = threading.Barrier(16)
    answers: dict[str, Decision] = {}

    def create(i: int) -> None:
        barrier.wait()
        answers[f"new-{i}"] = v.review(review(shadowpod(f"new-{i}")))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    admitted = [name for name, answer in answers.items() if answer.allowed]
    refused = [answer for answer in answers.values() if not answer.allowed]
    assert len(answers) == 16
    assert len(admitted) == 1, admitted
    assert all("pods: requested 1, used 3, quota 3" in answer.message for answer in refused)
    assert calls == admitted  # refused by quota: no dry run at all


def test_a_twin_holds_at_most_its_bound_of_shadowpods_finished_ones_and_admitted_ones_included():
    # twinNamespaces.maxObjects[shadowpods.kube-offload.io]: a finished ShadowPod holds no
    # quota but is etcd storage all the same; one admitted but not cached yet counts too.
    finished = shadowpod("done")
    finished["status"] = {"phase": "Succeeded"}
    cache = CACHE({f"{NS}/done": finished})
    v, calls, _ = validator({}, shadowpods=cache, policy={"twinNamespaces": {"maxObjects": {"shadowpods.kube-offload.io": 2}}})
    assert v.review(review(shadowpod("a"))).allowed  # done + a
    refused = v.review(review(shadowpod("b")))
    assert not refused.allowed and refused.code == 403
    assert 'consumer "local" holds 2 shadowpods.kube-offload.io in namespace "demo-local"' in refused.message
    assert "Consumer spec.policy.twinNamespaces.maxObjects[shadowpods.kube-offload.io]: 2" in refused.message
    assert calls == ["a"]
    # Once the informer has "a" too, it counts once (cached and admitted are one name), and
    # a create under a name already held is not counted against itself.
    cache.objects[f"{NS}/a"] = shadowpod("a")
    assert not v.review(review(shadowpod("b"))).allowed
    assert "holds" not in v.review(review(shadowpod("a"))).message
    # An update of one it holds is not a new one: never refused for the count.
    held = shadowpod("a", cpu="200m")
    held["metadata"]["generation"] = 2
    assert "holds" not in v.review(review(held, operation="UPDATE", old=shadowpod("a"))).message
    # The default bound holds for a consumer whose policy says nothing.
    assert pp.DEFAULT_POLICY.twin_namespaces.max_objects[pp.SHADOWPOD_COUNT_KIND] == 500


def test_the_reservation_counts_until_the_informer_has_the_object():
    cache = CACHE()
    v, _, _ = validator({"cpu": "1"}, shadowpods=cache)
    first = shadowpod("a", cpu="600m")
    assert v.review(review(first)).allowed
    assert v.ledger.pending("local") == {"cpu": 600, "pods": 1000}
    second = v.review(review(shadowpod("b", cpu="600m")))
    assert not second.allowed and "cpu: requested 600m, used 600m, quota 1" in second.message
    # The watch delivers the object: counted once, from the cache, and the entry is gone.
    cache.objects[f"{NS}/a"] = first
    assert v.ledger.pending("local") == {}
    assert len(v.ledger) == 0
    assert not v.review(review(shadowpod("b", cpu="600m"))).allowed
    # Deleted: the slot is free again.
    del cache.objects[f"{NS}/a"]
    assert v.review(review(shadowpod("b", cpu="600m"))).allowed


def test_a_dry_run_refusal_gives_the_reservation_back():
    v, calls, _ = validator({"pods": "1"}, verdict=lambda: Decision.deny(403, "Forbidden", "the provider would refuse this Pod: x"))
    answer = v.review(review(shadowpod("a")))
    assert not answer.allowed and answer.message.endswith("x") and calls == ["a"]
    assert len(v.ledger) == 0
    # ... so the next create is judged on its own.
    assert v.review(review(shadowpod("b"))).message.endswith("x")


def test_a_dry_run_admission_reserves_nothing():
    v, calls, _ = validator({"pods": "1"})
    assert v.review(review(shadowpod("a"), dry=True)).allowed
    assert calls == ["a"] and len(v.ledger) == 0


def test_a_metadata_only_update_skips_quota_and_dry_run():
    v, calls, _ = validator({"pods": "0"})
    obj = shadowpod("a")
    changed = {**obj, "metadata": {**obj["metadata"], "labels": {**(obj["metadata"].get("labels") or {}), "x": "y"}}}
    assert v.review(review(changed, operation="UPDATE", old=obj)).allowed
    assert calls == [] and len(v.ledger) == 0


def test_a_finalizer_the_consumer_adds_is_refused_before_the_metadata_shortcut():
    v, calls, _ = validator({})
    obj = shadowpod("a")
    changed = {**obj, "metadata": {**obj["metadata"], "finalizers": ["example.com/hold"]}}
    decision = v.review(review(changed, operation="UPDATE", old=obj))
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith("metadata.finalizers:") and "example.com/hold" in decision.message
    assert calls == []


def test_an_update_reserves_only_its_increase_until_the_new_generation_is_cached():
    old = shadowpod("a", cpu="500m")
    cache = CACHE({f"{NS}/a": old})
    v, calls, _ = validator({"cpu": "1"}, shadowpods=cache)
    new = shadowpod("a", cpu="900m")
    new["metadata"]["generation"] = 2
    assert v.review(review(new, operation="UPDATE", old=old)).allowed
    assert calls == ["a (update)"], "an update's dry run also checks the running pod's update"
    assert v.ledger.pending("local") == {"cpu": 400}
    assert not v.review(review(shadowpod("b", cpu="200m"))).allowed  # 900m + 200m > 1
    cache.objects[f"{NS}/a"] = new
    assert v.ledger.pending("local") == {}


def test_not_ready_until_every_cache_synced():
    v, calls, cache = validator({})
    cache.synced = False
    answer = v.review(review(shadowpod("a")))
    assert not v.ready()
    assert (answer.allowed, answer.code) == (False, 503) and "could not verify" in answer.message
    assert calls == []


def test_other_kinds_are_allowed_with_a_warning():
    v, _, _ = validator({})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": {}}
    answer = v.review(parse_review(orjson.dumps(build_review(pod))))
    assert answer.allowed and "does not validate" in answer.warnings[0]


# --- the ledger on its own -------------------------------------------------------------------------
def test_ledger_entries_expire():
    now = [100.0]
    ledger = Ledger(lambda key: None, ttl=60, clock=lambda: now[0])
    token = ledger.reserve(key="ns/a", consumer_id="local", uid="u", generation=1, requests={"cpu": 5, "memory": -3})
    assert token is not None
    assert ledger.pending("local") == {"cpu": 5}  # decreases are never credited early
    assert ledger.pending("other") == {}
    now[0] += 59.9
    assert len(ledger) == 1
    now[0] += 0.1
    assert len(ledger) == 0 and ledger.pending("local") == {}


def test_ledger_settles_on_the_same_uid_only():
    cached: dict[str, dict] = {}
    ledger = Ledger(cached.get)
    ledger.reserve(key="ns/a", consumer_id="local", uid="new", generation=1, requests={"pods": 1000})
    cached["ns/a"] = {"metadata": {"uid": "old", "generation": 7}}  # the previous object of that name
    assert ledger.pending("local") == {"pods": 1000}
    cached["ns/a"] = {"metadata": {"uid": "new", "generation": 1}}
    assert ledger.pending("local") == {}


def test_ledger_ignores_requests_that_add_nothing_and_release_is_idempotent():
    ledger = Ledger(lambda key: None)
    assert ledger.reserve(key="ns/a", consumer_id="local", uid="u", generation=1, requests={"cpu": 0}) is None
    token = ledger.reserve(key="ns/a", consumer_id="local", uid="u", generation=1, requests={"cpu": 1})
    ledger.release(token)
    ledger.release(token)
    ledger.release(None)
    assert len(ledger) == 0


# --- dry-run verdicts -----------------------------------------------------------------------------
PSA_MESSAGE = (
    'pods "web" is forbidden: violates PodSecurity "baseline:latest": hostPort (container "app" uses hostPort 8080)'
)


@pytest.mark.parametrize(
    "error, allowed, code, message",
    [
        (ApiError(403, "Forbidden", PSA_MESSAGE), False, 403,
         'the provider would refuse this Pod: violates PodSecurity "baseline:latest": hostPort (container "app" uses hostPort 8080)'),
        (ApiError(403, "Forbidden", 'pods "web" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=0, limited: cpu=1'),
         False, 403, "the provider would refuse this Pod: exceeded quota: compute, requested: cpu=2, used: cpu=0, limited: cpu=1"),
        (ApiError(422, "Invalid", 'Pod "web" is invalid: spec.containers[0].image: Required value',
                  {"details": {"causes": [{"field": "spec.containers[0].image", "message": "Required value"}]}}),
         False, 422, "the provider would refuse this Pod: spec.pod.spec.containers[0].image: Required value"),
        (ApiError(422, "Invalid", 'Pod "web" is invalid: metadata.labels: Invalid value'), False, 422,
         "the provider would refuse this Pod: spec.pod.metadata.labels: Invalid value"),
        (ApiError(409, "AlreadyExists", 'pods "web" already exists', {"reason": "AlreadyExists"}), True, 200, ""),
        (ApiError(500, "InternalError", "etcdserver: request timed out"), False, 503,
         "could not verify the ShadowPod with a dry run of its Pod (500 InternalError: etcdserver: request timed out); retry later"),
        (ApiError(0, "Unreachable", "read timed out"), False, 503,
         "could not verify the ShadowPod with a dry run of its Pod (API server unreachable: read timed out); retry later"),
        (ApiError(429, "TooManyRequests", "slow down"), False, 503, "could not verify"),
        (ApiError(403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:x:enforcer" cannot create resource "pods" in API group "" in the namespace "demo-local"'),
         False, 503, "could not verify"),
    ],
)
def test_dry_run_verdicts(error, allowed, code, message):
    decision = dry_run.verdict(error)
    assert decision.allowed is allowed
    assert decision.code == code
    assert message in decision.message
    if code in (403, 422):  # a refusal passed on: the apiserver's preamble is noise
        assert "is forbidden:" not in decision.message and "is invalid:" not in decision.message


def test_the_dry_run_pod_is_the_enforcers_pod():
    obj = shadowpod("web")
    pod = dry_run.pod_for(obj)
    assert pod["metadata"]["name"] == "web"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-web"
    assert pod["metadata"]["labels"][c.LABEL_MANAGED_BY] == c.MANAGED_BY_ENFORCER
    # The very spec the enforcer creates: the template's, neutralized as build_pod does.
    assert pod["spec"] == neutralized_spec(obj["spec"]["pod"]["spec"])
    assert pod["spec"]["automountServiceAccountToken"] is False
    # Without name and uid (never from a real apiserver) it still builds.
    bare = shadowpod("x")
    del bare["metadata"]["uid"], bare["metadata"]["name"]
    assert dry_run.pod_for(bare)["metadata"]["name"].endswith("dry-run")


def test_ledger_settles_on_the_informers_events_too():
    # Created and deleted between two admissions: never in the cache when one looks.
    ledger = Ledger(lambda key: None)
    ledger.reserve(key="ns/a", consumer_id="local", uid="u1", generation=2, requests={"pods": 1000})
    ledger.reserve(key="ns/b", consumer_id="local", uid="u2", generation=1, requests={"pods": 1000})
    ledger.on_event("ADDED", None, {"metadata": {"namespace": "ns", "name": "a", "uid": "u1", "generation": 1}})
    assert len(ledger) == 2  # an older generation settles nothing
    ledger.on_event("DELETED", None, {"metadata": {"namespace": "ns", "name": "a", "uid": "u1", "generation": 1}})
    ledger.on_event("MODIFIED", None, {"metadata": {"namespace": "ns", "name": "b", "uid": "other", "generation": 5}})
    assert ledger.pending("local") == {"pods": 1000}
    ledger.on_event("MODIFIED", None, {"metadata": {"namespace": "ns", "name": "b", "uid": "u2", "generation": 1}})
    assert len(ledger) == 0


def test_the_validator_listens_to_an_informer():
    class Informer(Cache):
        handlers: list = []

        def add_handler(self, handler):
            self.handlers.append(handler)

    informer = Informer()
    v, _, _ = validator({"pods": "1"}, shadowpods=informer)
    assert v.review(review(shadowpod("a"))).allowed
    assert not v.review(review(shadowpod("b"))).allowed
    for handler in informer.handlers:
        handler("DELETED", None, shadowpod("a"))
    assert v.review(review(shadowpod("b"))).allowed


# --- the in-place update of a running pod, dry-run -------------------------------------------------
def _running(shp: dict) -> dict:
    pod = dry_run.pod_for(shp)
    pod["metadata"]["uid"] = "pod-uid"
    pod["metadata"]["resourceVersion"] = "9"
    pod["status"] = {"phase": "Running"}
    return pod


@pytest.fixture
def fake_pods(monkeypatch):
    """The live pod dry_run.check_update reads and the patches it dry-runs."""
    state = {"pod": None, "patches": [], "refuse": None}
    monkeypatch.setattr(dry_run, "get_pod", lambda _client, _ns, _name: copy.deepcopy(state["pod"]))

    def patch(_client, _ns, _name, body):
        state["patches"].append(body)
        if state["refuse"] is not None:
            raise state["refuse"]

    monkeypatch.setattr(dry_run, "dry_run_patch", patch)
    return state


def test_update_check_dry_runs_the_patch_of_the_running_pod(fake_pods):
    old = shadowpod("web")
    fake_pods["pod"] = _running(old)
    new = copy.deepcopy(old)
    new["spec"]["pod"]["spec"]["containers"][0]["image"] = "forbidden.example/app"
    fake_pods["refuse"] = ApiError(
        403, "Forbidden", "pods \"web\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no such images"
    )
    decision = dry_run.check_update(None, "demo-local", new)
    assert not decision.allowed and decision.code == 403
    assert "the provider would refuse this update of the running Pod" in decision.message
    assert "no such images" in decision.message
    [patch] = fake_pods["patches"]
    assert patch["spec"]["containers"] == [{"name": "app", "image": "forbidden.example/app"}]
    assert "resourceVersion" not in patch["metadata"]


def test_a_create_is_not_checked_against_a_running_pod(fake_pods, monkeypatch):
    """A ShadowPod being created has a new UID: no pod of it can run, so no GET (which was
    one remote request per offloaded pod). An update still reads and dry-runs it."""
    monkeypatch.setattr(dry_run, "dry_run_create", lambda *_args: None)
    reads: list[str] = []
    monkeypatch.setattr(dry_run, "get_pod", lambda _client, _ns, name: reads.append(name))
    assert dry_run.check(None, "demo-local", shadowpod("web"), operation="CREATE").allowed
    assert reads == []
    assert dry_run.check(None, "demo-local", shadowpod("web"), operation="UPDATE").allowed
    assert reads == ["web"]


def test_update_check_allows_when_nothing_runs_or_nothing_changes(fake_pods):
    shp = shadowpod("web")
    assert dry_run.check_update(None, "demo-local", shp).allowed  # no pod
    fake_pods["pod"] = _running(shp)
    assert dry_run.check_update(None, "demo-local", shp).allowed  # template as applied
    other = copy.deepcopy(shp)
    other["metadata"]["uid"] = "another-shadowpod"  # a pod of an earlier ShadowPod of that name
    other["spec"]["pod"]["spec"]["containers"][0]["image"] = "x"
    assert dry_run.check_update(None, "demo-local", other).allowed
    assert fake_pods["patches"] == []


# --- judging the pod the enforcer is about to make (judge_pod) ----------------------------------------
def test_a_pod_is_judged_against_the_rest_of_the_consumers_use():
    # Two slots, both taken: ShadowPod a's own pod is lost and made again. Its own charges
    # are what is judged, against the rest (b): it fits. A third ShadowPod c (admitted while
    # a's status said its pod ended, say) would not: only one slot is left beside b.
    a, b = shadowpod("a"), shadowpod("b")
    v, calls, cache = validator({"pods": "2"}, shadowpods=CACHE({f"{NS}/a": a, f"{NS}/b": b}))
    assert v.judge_pod(a).allowed
    c_ = shadowpod("c")
    cache.objects[f"{NS}/c"] = c_
    refused = v.judge_pod(c_)
    assert not refused.allowed and refused.code == 403
    assert 'exceeded quota of consumer "local": pods: requested 1, used 2, quota 2' in refused.message
    assert calls == []  # no dry run: the real create is the API server's judgement


def test_a_finished_shadowpod_counts_nothing_so_its_pod_is_judged_whole():
    a = shadowpod("a")
    a["status"] = {"phase": "Failed"}  # not live: the usage does not count it
    b = shadowpod("b")
    v, _, _ = validator({"pods": "1"}, shadowpods=CACHE({f"{NS}/a": a, f"{NS}/b": b}))
    assert not v.judge_pod(a).allowed


def test_no_pod_is_judged_before_the_caches_are_synced():
    v, _, cache = validator({"pods": "10"})
    cache.synced = False
    verdict = v.judge_pod(shadowpod("a"))
    assert not verdict.allowed and verdict.code == 503
