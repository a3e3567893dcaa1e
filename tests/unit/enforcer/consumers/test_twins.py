"""The TwinNamespace reconcile's control flow: which writes it makes, in which order, and
how it turns API answers into outcomes. The API server is an in-memory record here, so
these tests say nothing about Kubernetes itself; tests/e2e/test_twin_namespaces.py runs
the same code against a real kube-apiserver and controller-manager."""

from __future__ import annotations

import copy
import itertools

import pytest

from enforcer.consumers.twins import TwinReconciler, consumer_spec_changed
from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.informer import ADDED, MODIFIED
from kube_offload.runtime.kube import ApiError

TENANT = "kube-offload-tenant-local"
KEY = f"{TENANT}/demo-local"
ROLE = "twin-role"


DEFAULT_COUNTS = {f"count/{kind}": str(most) for kind, most in pp.DEFAULT_MAX_OBJECTS if kind != pp.SHADOWPOD_COUNT_KIND}


class FakeApi:
    """Names are unique, deletes honour UID preconditions, the finalizer patch honours the
    resourceVersion; every write is recorded. Its stores double as the caches unless a
    test makes a cache lag."""

    def __init__(self):
        self.requests: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}
        self.rolebindings: dict[str, dict] = {}
        self.resourcequotas: dict[str, dict] = {}
        self.consumers: dict[str, dict] = {}
        self.writes: list[tuple] = []
        self._rv = itertools.count(10)
        self._uid = itertools.count(1)

    def _bump(self, obj):
        obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def set_twin_request_finalizers(self, namespace, name, finalizers, resource_version):
        obj = self.requests.get(f"{namespace}/{name}")
        if obj is None:
            raise ApiError(404, "NotFound", "gone")
        if resource_version and obj["metadata"]["resourceVersion"] != resource_version:
            raise ApiError(409, "Conflict", "changed")
        self.writes.append(("finalizers", name, list(finalizers)))
        obj["metadata"]["finalizers"] = list(finalizers)
        self._bump(obj)
        if obj["metadata"].get("deletionTimestamp") and not finalizers:
            del self.requests[f"{namespace}/{name}"]
        return copy.deepcopy(obj)

    def replace_twin_request_status(self, namespace, name, status):
        obj = self.requests[f"{namespace}/{name}"]
        self.writes.append(("status", name, status["phase"]))
        obj["status"] = copy.deepcopy(status)
        self._bump(obj)
        return copy.deepcopy(obj)

    def get_namespace(self, name):
        return copy.deepcopy(self.namespaces.get(name))

    def create_namespace(self, body):
        name = body["metadata"]["name"]
        if name in self.namespaces:
            raise ApiError(409, "AlreadyExists", "exists", {"reason": "AlreadyExists"})
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"ns-{next(self._uid)}"
        obj["status"] = {"phase": "Active"}
        self._bump(obj)
        self.namespaces[name] = obj
        self.writes.append(("create-ns", name))
        return copy.deepcopy(obj)

    def patch_namespace(self, name, patch):
        obj = self.namespaces[name]
        for section, values in patch["metadata"].items():
            obj["metadata"].setdefault(section, {}).update(values)
        self.writes.append(("patch-ns", name, copy.deepcopy(patch)))
        return copy.deepcopy(obj)

    def delete_namespace(self, name, uid):
        obj = self.namespaces.get(name)
        self.writes.append(("delete-ns", name, uid))
        if obj is None or obj["metadata"]["uid"] != uid:
            return
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        obj["status"]["phase"] = "Terminating"

    def create_rolebinding(self, namespace, body):
        key = f"{namespace}/{body['metadata']['name']}"
        if key in self.rolebindings:
            raise ApiError(409, "AlreadyExists", "exists", {"reason": "AlreadyExists"})
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"rb-{next(self._uid)}"
        self._bump(obj)
        self.rolebindings[key] = obj
        self.writes.append(("create-rb", namespace, body["roleRef"]["name"]))
        return copy.deepcopy(obj)

    def update_rolebinding(self, namespace, body):
        key = f"{namespace}/{body['metadata']['name']}"
        self.rolebindings[key] = copy.deepcopy(body)
        self.writes.append(("update-rb", namespace))
        return body

    def delete_rolebinding(self, namespace, name, uid):
        key = f"{namespace}/{name}"
        if self.rolebindings.get(key, {}).get("metadata", {}).get("uid") == uid:
            del self.rolebindings[key]
        self.writes.append(("delete-rb", namespace, uid))

    def create_resourcequota(self, namespace, body):
        key = f"{namespace}/{body['metadata']['name']}"
        if key in self.resourcequotas:
            raise ApiError(409, "AlreadyExists", "exists", {"reason": "AlreadyExists"})
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"rq-{next(self._uid)}"
        obj["status"] = {"hard": dict(body["spec"]["hard"])}  # the quota controller, at once
        self._bump(obj)
        self.resourcequotas[key] = obj
        self.writes.append(("create-rq", namespace, dict(body["spec"]["hard"])))
        return copy.deepcopy(obj)

    def update_resourcequota(self, namespace, body):
        key = f"{namespace}/{body['metadata']['name']}"
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = self.resourcequotas[key]["metadata"]["uid"]
        obj["status"] = {"hard": dict(body["spec"]["hard"])}
        self._bump(obj)
        self.resourcequotas[key] = obj
        self.writes.append(("update-rq", namespace, dict(body["spec"]["hard"])))
        return copy.deepcopy(obj)

    def delete_resourcequota(self, namespace, name, uid):
        key = f"{namespace}/{name}"
        if self.resourcequotas.get(key, {}).get("metadata", {}).get("uid") == uid:
            del self.resourcequotas[key]
        self.writes.append(("delete-rq", namespace, uid))

    def replace_consumer_status(self, name, status):
        raise AssertionError("not used here")


class DictCache:
    def __init__(self, store):
        self.store = store

    def get(self, key):
        return copy.deepcopy(self.store.get(key))

    def keys(self):
        return list(self.store)


@pytest.fixture
def api():
    api = FakeApi()
    api.namespaces[TENANT] = {
        "metadata": {"name": TENANT, "uid": "tenant", "labels": {c.LABEL_TENANT: "local"}}, "status": {"phase": "Active"}}
    api.consumers["local"] = {"metadata": {"name": "local", "generation": 1}, "spec": {"podSecurityLevel": "baseline"}}
    api.requests[KEY] = {
        "metadata": {"name": "demo-local", "namespace": TENANT, "generation": 1, "resourceVersion": "1", "uid": "r"},
        "spec": {"localNamespace": "demo"},
    }
    return api


def reconciler(api, **caches):
    return TwinReconciler(
        requests=caches.get("requests") or DictCache(api.requests),
        namespaces=caches.get("namespaces") or DictCache(api.namespaces),
        consumers=DictCache(api.consumers),
        rolebindings=caches.get("rolebindings") or DictCache(api.rolebindings),
        api=api,
        twin_role=ROLE,
        resourcequotas=DictCache(api.resourcequotas),
    )


def converge(rec, key=KEY, rounds=6):
    for _ in range(rounds):
        try:
            rec(key)
        except Requeue:
            pass


def test_request_served_in_order_finalizer_namespace_binding_ready(api):
    rec = reconciler(api)
    rec(KEY)
    assert [w[0] for w in api.writes] == ["finalizers", "create-ns", "status"]
    assert api.requests[KEY]["metadata"]["finalizers"] == [c.TWIN_NAMESPACE_FINALIZER]
    labels = api.namespaces["demo-local"]["metadata"]["labels"]
    assert labels[c.LABEL_PSA_ENFORCE] == "baseline" and labels[c.LABEL_ORIGIN_CLUSTER_ID] == "local"
    rec(KEY)
    # The twin's bounds first (the policy's per-twin object counts), then the consumer's rights.
    assert api.writes[3][0] == "create-rq"
    rec(KEY)
    assert ("create-rb", "demo-local", ROLE) in api.writes[4:]
    rec(KEY)
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_READY
    count = len(api.writes)
    rec(KEY)  # converged: nothing more to write
    assert len(api.writes) == count


def test_namespace_created_meanwhile_by_someone_else_is_refused_not_adopted(api):
    # The cache does not show the namespace yet; the create meets AlreadyExists.
    api.namespaces["demo-local"] = {"metadata": {"name": "demo-local", "uid": "theirs", "labels": {}}, "status": {"phase": "Active"}}
    lagging = DictCache({TENANT: api.namespaces[TENANT]})
    rec = reconciler(api, namespaces=lagging)
    with pytest.raises(Requeue):
        rec(KEY)
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_REFUSED
    assert "exists and is not yours" in api.requests[KEY]["status"]["message"]
    assert api.namespaces["demo-local"]["metadata"] == {"name": "demo-local", "uid": "theirs", "labels": {}}
    assert not any(w[0] in ("patch-ns", "delete-ns", "create-rb") for w in api.writes)


def test_our_namespace_not_yet_cached_goes_on_from_the_live_one(api):
    rec = reconciler(api)
    rec(KEY)
    lagging = DictCache({TENANT: api.namespaces[TENANT]})
    reconciler(api, namespaces=lagging)(KEY)
    assert [w[0] for w in api.writes].count("create-ns") == 1
    assert ("create-rb", "demo-local", ROLE) in api.writes
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_PENDING


def test_deletion_deletes_namespace_by_uid_then_releases(api):
    rec = reconciler(api)
    converge(rec)
    uid = api.namespaces["demo-local"]["metadata"]["uid"]
    api.requests[KEY]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(Requeue):
        rec(KEY)
    assert ("delete-ns", "demo-local", uid) in api.writes
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_TERMINATING
    with pytest.raises(Requeue):
        rec(KEY)  # still terminating: the finalizer stays
    assert KEY in api.requests
    del api.namespaces["demo-local"]  # the namespace controller finished
    rec(KEY)
    assert KEY not in api.requests


def test_deletion_reads_the_live_namespace_not_the_cache(api):
    rec = reconciler(api)
    rec(KEY)  # namespace created; a cache that never saw it must not release the request
    api.requests[KEY]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    lagging = DictCache({TENANT: api.namespaces[TENANT]})
    with pytest.raises(Requeue):
        reconciler(api, namespaces=lagging)(KEY)
    assert any(w[0] == "delete-ns" for w in api.writes)
    assert KEY in api.requests


def test_level_change_relabels(api):
    rec = reconciler(api)
    converge(rec)
    api.consumers["local"]["spec"]["podSecurityLevel"] = "restricted"
    converge(rec)
    assert api.namespaces["demo-local"]["metadata"]["labels"][c.LABEL_PSA_ENFORCE] == "restricted"
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_READY


def test_wrong_role_binding_is_replaced(api):
    rec = reconciler(api)
    converge(rec)
    api.rolebindings[f"demo-local/{c.TWIN_ROLEBINDING_NAME}"]["roleRef"]["name"] = "cluster-admin"
    converge(rec)
    assert api.rolebindings[f"demo-local/{c.TWIN_ROLEBINDING_NAME}"]["roleRef"]["name"] == ROLE
    assert any(w[0] == "delete-rb" for w in api.writes)


def test_a_namespace_whose_request_vanished_is_never_deleted(api):
    # Finalizer removed by hand: the request is gone but its namespace stays (deleting
    # it on the word of its labels alone is not this controller's call).
    rec = reconciler(api)
    converge(rec)
    api.requests.pop(KEY)
    api.writes.clear()
    rec(KEY)
    assert api.writes == []
    assert not api.namespaces["demo-local"]["metadata"].get("deletionTimestamp")


def test_unadmitted_request_is_refused_without_finalizer(api):
    del api.consumers["local"]
    reconciler(api)(KEY)
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_REFUSED
    assert "finalizers" not in api.requests[KEY]["metadata"]
    assert "demo-local" not in api.namespaces


def test_keys_for_events(api):
    rec = reconciler(api)
    converge(rec)
    assert rec.keys_for_namespace(api.namespaces["demo-local"]) == [KEY]
    assert rec.keys_for_namespace(api.namespaces[TENANT]) == [KEY]  # requests living in it
    assert rec.keys_for_namespace({"metadata": {"name": "unrelated"}}) == []
    assert rec.keys_for_rolebinding(api.rolebindings[f"demo-local/{c.TWIN_ROLEBINDING_NAME}"]) == [KEY]
    assert rec.keys_for_consumer(api.consumers["local"]) == [KEY]
    assert rec.keys_for_consumer({"metadata": {"name": "other"}}) == []


def test_consumer_status_writes_do_not_requeue_requests():
    old = {"metadata": {"generation": 2}, "spec": {"podSecurityLevel": "baseline"}, "status": {"shadowPods": 1}}
    status_only = {"metadata": {"generation": 2}, "spec": {"podSecurityLevel": "baseline"}, "status": {"shadowPods": 2}}
    spec_change = {"metadata": {"generation": 3}, "spec": {"podSecurityLevel": "restricted"}}
    assert not consumer_spec_changed(MODIFIED, old, status_only)
    assert consumer_spec_changed(MODIFIED, old, spec_change)
    assert consumer_spec_changed(ADDED, None, old)


def test_resourcequota_before_rolebinding_then_kept_in_sync(api):
    # The consumer gets its rights in a twin only once the twin's bounds exist; a change
    # of the Consumer's spec.quota reaches the ResourceQuota; a deleted one comes back.
    api.consumers["local"]["spec"]["quota"] = {"count/services": "1", "cpu": "2"}
    rec = reconciler(api)
    converge(rec)
    kinds = [w[0] for w in api.writes]
    assert kinds.index("create-rq") < kinds.index("create-rb")
    assert ("create-rq", "demo-local", {**DEFAULT_COUNTS, "count/services": "1"}) in api.writes
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_READY
    api.consumers["local"]["spec"]["quota"]["count/services"] = "2"
    converge(rec)
    assert ("update-rq", "demo-local", {**DEFAULT_COUNTS, "count/services": "2"}) in api.writes
    del api.resourcequotas[f"demo-local/{c.TWIN_RESOURCEQUOTA_NAME}"]
    converge(rec)
    assert api.resourcequotas[f"demo-local/{c.TWIN_RESOURCEQUOTA_NAME}"]["spec"]["hard"] == {**DEFAULT_COUNTS, "count/services": "2"}
    api.consumers["local"]["spec"]["quota"] = {"cpu": "2"}
    converge(rec)
    assert api.resourcequotas[f"demo-local/{c.TWIN_RESOURCEQUOTA_NAME}"]["spec"]["hard"] == DEFAULT_COUNTS
    assert api.requests[KEY]["status"]["phase"] == c.TWIN_PHASE_READY


def test_no_object_key_still_writes_the_policys_bounds(api):
    # No kind a consumer writes into a twin is unbounded by default (twinNamespaces.maxObjects).
    api.consumers["local"]["spec"]["quota"] = {"cpu": "2", "pods": "3"}
    converge(reconciler(api))
    [quota] = api.resourcequotas.values()
    assert quota["spec"]["hard"] == DEFAULT_COUNTS
