"""The reconcile's control flow: which writes it makes for each state and how it turns API
answers into outcomes. The API server is an in-memory record here, so these tests say
nothing about Kubernetes itself; tests/e2e/test_enforcer.py runs the same code against a
real kube-apiserver, scheduler, controller-manager and kwok."""

from __future__ import annotations

import copy
import itertools

import pytest

from enforcer.shadowpods.events import EventRecorder
from enforcer.shadowpods.reconcile import POD_INDEXERS, REFUSED_RECHECK_SECONDS, Reconciler
from kube_offload import reasons
from kube_offload.admission import Decision
from kube_offload import constants as C
from kube_offload.pools import Pool
from kube_offload.runtime.controller import PermanentError, Requeue
from kube_offload.runtime.indexer import Indexer
from kube_offload.runtime.kube import ApiError
from kube_offload.shadowpod_status import creation_failure
from support import builders

KEY = "ns/web"


class FakeApi:
    """Just enough of an API server: names are unique, deletes honour UID preconditions,
    status patches honour resourceVersion, and every write is recorded."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.shadowpods: dict[str, dict] = {}
        self.events: list[dict] = []
        self.writes: list[tuple] = []
        self.create_error: ApiError | None = None
        self.patch_error: ApiError | None = None
        self.ephemeral_error: ApiError | None = None
        self.resize_error: ApiError | None = None
        self.delete_graces: list[int | None] = []  # gracePeriodSeconds of each pod delete
        self._uids = itertools.count(1)

    def get_shadowpod(self, namespace, name):
        return copy.deepcopy(self.shadowpods.get(f"{namespace}/{name}"))

    def create_pod(self, namespace, pod):
        self.writes.append(("create", pod["metadata"]["name"]))
        if self.create_error is not None:
            raise self.create_error
        key = f"{namespace}/{pod['metadata']['name']}"
        if key in self.pods:
            raise ApiError(409, "AlreadyExists", "pods exists", {"reason": "AlreadyExists"})
        created = copy.deepcopy(pod)
        created["metadata"].update(uid=f"pod-{next(self._uids)}", creationTimestamp="2025-01-01T00:00:00Z")
        created["status"] = {"phase": "Pending"}
        self.pods[key] = created
        return copy.deepcopy(created)

    def get_pod(self, namespace, name):
        return copy.deepcopy(self.pods.get(f"{namespace}/{name}"))

    def delete_pod(self, namespace, name, uid, grace_period_seconds=None):
        self.writes.append(("delete", name, uid))
        self.delete_graces.append(grace_period_seconds)
        key = f"{namespace}/{name}"
        if key in self.pods and self.pods[key]["metadata"]["uid"] == uid:
            del self.pods[key]

    def patch_shadowpod_status(self, namespace, name, status, resource_version):
        self.writes.append(("status", name))
        current = self.shadowpods.get(f"{namespace}/{name}")
        if current is None:
            raise ApiError(404, "NotFound", "gone")
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise ApiError(409, "Conflict", "the object has been modified")
        current["status"] = copy.deepcopy(status)
        current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(current)

    def patch_pod(self, namespace, name, patch):
        """Labels, annotations and images (by container name), as a strategic merge patch."""
        self.writes.append(("patch", name))
        if self.patch_error is not None:
            raise self.patch_error
        pod = self.pods[f"{namespace}/{name}"]
        for field in ("labels", "annotations"):
            for k, v in (patch["metadata"].get(field) or {}).items():
                if v is None:
                    pod["metadata"].setdefault(field, {}).pop(k, None)
                else:
                    pod["metadata"].setdefault(field, {})[k] = v
        for change in (patch.get("spec") or {}).get("containers") or []:
            for container in pod["spec"]["containers"]:
                if container["name"] == change["name"]:
                    container.update(change)
        return copy.deepcopy(pod)

    def add_ephemeral_containers(self, namespace, name, patch):
        """pods/ephemeralcontainers: a strategic merge patch adding containers by name."""
        self.writes.append(("ephemeral", name))
        if self.ephemeral_error is not None:
            raise self.ephemeral_error
        pod = self.pods[f"{namespace}/{name}"]
        have = pod["spec"].setdefault("ephemeralContainers", [])
        names = {c["name"] for c in have}
        have += [c for c in patch["spec"]["ephemeralContainers"] if c["name"] not in names]
        return copy.deepcopy(pod)

    def resize_pod(self, namespace, name, patch):
        """The resize subresource: each named container's cpu and memory figures."""
        self.writes.append(("resize", name))
        if self.resize_error is not None:
            raise self.resize_error
        pod = self.pods[f"{namespace}/{name}"]
        for field, changes in (patch.get("spec") or {}).items():
            for change in changes:
                for container in pod["spec"].get(field) or []:
                    if container["name"] == change["name"]:
                        for kind, figures in change["resources"].items():
                            container.setdefault("resources", {}).setdefault(kind, {}).update(figures)
        return copy.deepcopy(pod)

    def create_event(self, namespace, event):
        self.events.append(event)
        return event

    def patch_event(self, namespace, name, patch):
        for event in self.events:
            if event["metadata"]["name"] == name:
                event.update(patch)
                return event
        raise ApiError(404, "NotFound", "no event")


class World:
    """The fake API plus caches: the ShadowPod cache shows exactly what the API holds (an
    up-to-date informer) unless a test freezes it; the pod cache is the store an Informer
    keeps, with the enforcer's own indexes, refreshed from the API by :meth:`sync_pods`
    (what the informer's list and watch do) and left behind when a test wants it stale."""

    def __init__(self, status_coalesce_seconds: float = 0.0) -> None:
        """``status_coalesce_seconds``: 0 (the status of a new pod written at once) unless
        a test is about holding it back; then :attr:`now` is the reconcile's clock."""
        self.api = FakeApi()
        self.pods = Indexer(POD_INDEXERS)
        # Events are written by the recorder's own thread: run() and reasons() wait for it.
        self.recorder = EventRecorder(self.api)
        self.now = 100.0
        self.reconcile = Reconciler(
            shadowpods=self, pods=self.pods, api=self.api, recorder=self.recorder,
            status_coalesce_seconds=status_coalesce_seconds, clock=lambda: self.now,
        )
        self.frozen_shadowpods: dict[str, dict] | None = None

    def get(self, key):  # the ShadowPod cache
        source = self.frozen_shadowpods if self.frozen_shadowpods is not None else self.api.shadowpods
        return copy.deepcopy(source.get(key))

    def sync_pods(self) -> None:
        self.pods.replace({key: copy.deepcopy(pod) for key, pod in self.api.pods.items()})

    def add_shadowpod(self, restart_policy: str | None = None) -> dict:
        spec = {"containers": [{"name": "c", "image": "i"}]}
        if restart_policy:
            spec["restartPolicy"] = restart_policy
        shp = builders.shadowpod(spec=spec, pod_labels={"a": "b"}, uid="shp-1", resourceVersion="1", generation=1)
        self.api.shadowpods[KEY] = shp
        return shp

    def run(self) -> None:
        self.sync_pods()
        try:
            self.reconcile(KEY)
        finally:
            assert self.recorder.flush(5)

    def reasons(self) -> list[str]:
        assert self.recorder.flush(5)
        return [e["reason"] for e in self.api.events]


@pytest.fixture
def world() -> World:
    return World()


def test_creates_the_pod_and_writes_status_without_an_event(world):
    world.add_shadowpod()
    world.run()
    pod = world.api.pods[KEY]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "shp-1"
    status = world.api.shadowpods[KEY]["status"]
    assert status["podUID"] == pod["metadata"]["uid"] and status["recreations"] == 0 and status["phase"] == "Pending"
    assert world.reasons() == [], "the routine create says nothing the status does not"


def test_second_reconcile_writes_nothing(world):
    world.add_shadowpod()
    world.run()
    world.api.writes.clear()
    world.run()
    assert world.api.writes == []


def test_vanished_pod_is_recreated_and_counted(world):
    world.add_shadowpod()
    world.run()
    first_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods.pop(KEY)
    world.run()
    assert world.api.pods[KEY]["metadata"]["uid"] != first_uid
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1
    assert world.reasons() == [reasons.REASON_POD_RECREATED]
    assert world.api.events[0]["involvedObject"]["kind"] == "ShadowPod"


def test_evicted_pod_is_deleted_and_replaced(world):
    world.add_shadowpod()
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    old_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.run()
    assert ("delete", "web", old_uid) in world.api.writes
    assert world.api.pods[KEY]["metadata"]["uid"] != old_uid
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1
    assert "Evicted: low on memory" in world.api.events[-1]["message"]


def test_completed_run_is_mirrored_and_never_rerun(world):
    world.add_shadowpod(restart_policy="Never")
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Succeeded"}
    world.run()
    assert world.api.shadowpods[KEY]["status"]["phase"] == "Succeeded"
    world.api.pods.pop(KEY)
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [] and KEY not in world.api.pods


def test_terminating_pod_requeues_without_writes(world):
    world.add_shadowpod()
    world.run()
    world.api.pods[KEY]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    world.api.writes.clear()
    with pytest.raises(Requeue):
        world.run()
    assert world.api.writes == []


def test_already_exists_because_the_cache_lags_requeues(world):
    world.add_shadowpod()
    world.run()
    world.pods.replace({})  # the pod informer has not delivered the pod yet
    with pytest.raises(Requeue):
        world.reconcile(KEY)
    assert len(world.api.pods) == 1


def test_name_taken_by_a_foreign_pod_is_reported(world):
    world.add_shadowpod()
    world.api.pods[KEY] = {"metadata": {"name": "web", "namespace": "ns", "uid": "foreign"}}
    with pytest.raises(Requeue):
        world.reconcile(KEY)  # the foreign pod is not labelled, so not in the index
    assert world.reasons() == [reasons.REASON_POD_NAME_TAKEN]
    assert "not managed by the enforcer" in world.api.shadowpods[KEY]["status"]["message"]
    assert world.api.pods[KEY]["metadata"]["uid"] == "foreign"


def test_pod_of_an_earlier_shadowpod_with_the_same_name_is_deleted(world):
    world.add_shadowpod()
    world.run()
    world.api.shadowpods[KEY]["metadata"]["uid"] = "shp-2"  # deleted and created again
    world.pods.replace({})  # and its old pod not seen (yet) by the informer
    with pytest.raises(Requeue):
        world.reconcile(KEY)
    assert KEY not in world.api.pods
    world.run()
    assert world.api.pods[KEY]["metadata"]["ownerReferences"][0]["uid"] == "shp-2"


def test_rejected_creation_is_reported_then_retried(world):
    world.add_shadowpod()
    world.api.create_error = ApiError(403, "Forbidden", 'pods "web" is forbidden: exceeded quota: q')
    with pytest.raises(ApiError):
        world.run()
    assert world.reasons() == [reasons.REASON_POD_CREATION_FAILED]
    assert "exceeded quota" in world.api.events[0]["message"]
    status = world.api.shadowpods[KEY]["status"]
    assert status["phase"] == "Pending" and "exceeded quota" in status["message"]
    with pytest.raises(ApiError):
        world.run()
    assert len(world.api.events) == 1 and world.api.events[0]["count"] == 2, "repeats fold into one Event"
    world.api.create_error = None
    world.run()
    assert KEY in world.api.pods and world.api.shadowpods[KEY]["status"]["message"] == ""


def test_transient_creation_error_is_retried_without_noise(world):
    world.add_shadowpod()
    world.api.create_error = ApiError(0, "Unreachable", "connection refused")
    with pytest.raises(ApiError):
        world.run()
    assert world.api.events == [] and "status" not in world.api.shadowpods[KEY]


def test_invalid_shadowpod_is_permanent(world):
    shp = world.add_shadowpod()
    shp["spec"]["pod"]["spec"] = "not a pod spec"
    with pytest.raises(PermanentError):
        world.run()
    assert world.reasons() == [reasons.REASON_INVALID_SHADOWPOD]


def test_extra_pods_are_deleted_keeping_the_oldest(world):
    world.add_shadowpod()
    world.run()
    extra = copy.deepcopy(world.api.pods[KEY])
    extra["metadata"].update(name="web-copy", uid="copy", creationTimestamp="2025-02-01T00:00:00Z")
    world.api.pods["ns/web-copy"] = extra
    world.run()
    assert "ns/web-copy" not in world.api.pods and KEY in world.api.pods
    assert reasons.REASON_EXTRA_POD_DELETED in world.reasons()


def test_stale_shadowpod_cache_makes_the_status_write_conflict_and_requeue(world):
    world.add_shadowpod()
    world.run()
    world.frozen_shadowpods = copy.deepcopy(world.api.shadowpods)
    world.api.shadowpods[KEY]["metadata"]["resourceVersion"] = "99"  # someone wrote meanwhile
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    with pytest.raises(Requeue):
        world.run()
    world.frozen_shadowpods = None
    world.run()
    assert world.api.shadowpods[KEY]["status"]["phase"] == "Running"


def test_orphan_pod_is_deleted_once_the_apiserver_confirms_its_owner_is_gone(world):
    world.add_shadowpod()
    world.run()
    world.frozen_shadowpods = {}  # the cache says the ShadowPod is gone ...
    world.run()
    assert KEY in world.api.pods, "... but the apiserver still has it: keep the pod"
    del world.api.shadowpods[KEY]
    world.run()
    assert KEY not in world.api.pods


def test_shadowpod_being_deleted_is_left_to_the_garbage_collector(world):
    world.add_shadowpod()
    world.api.shadowpods[KEY]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    world.run()
    assert world.api.writes == []


def _change_template(world: World, *, labels: dict | None = None, image: str | None = None) -> None:
    template = world.api.shadowpods[KEY]["spec"]["pod"]
    if labels is not None:
        template["metadata"]["labels"] = labels
    if image is not None:
        template["spec"]["containers"][0]["image"] = image


def test_template_change_updates_the_running_pod_in_place(world):
    world.add_shadowpod()
    world.run()
    uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    _change_template(world, labels={"a": "c", "new": "x"}, image="i:2")
    world.api.writes.clear()
    world.run()
    pod = world.api.pods[KEY]
    assert pod["metadata"]["uid"] == uid, "updated, not recreated"
    assert pod["metadata"]["labels"]["a"] == "c" and pod["metadata"]["labels"]["new"] == "x"
    assert pod["spec"]["containers"][0]["image"] == "i:2"
    assert ("patch", "web") in world.api.writes and not any(w[0] in ("create", "delete") for w in world.api.writes)
    assert world.reasons()[-1] == reasons.REASON_POD_UPDATED
    assert "labels, images" in world.api.events[-1]["message"]
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [], "applied once"


def test_refused_update_is_reported_once_and_retried_only_for_a_new_template(world):
    world.add_shadowpod()
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    world.api.patch_error = ApiError(403, "Forbidden", 'pods "web" is forbidden: image i:bad is not allowed here')
    _change_template(world, image="i:bad")
    world.run()
    assert world.reasons()[-1] == reasons.REASON_POD_UPDATE_REFUSED
    assert world.api.events[-1]["type"] == "Warning"
    assert "image i:bad is not allowed here" in world.api.events[-1]["message"]
    assert world.api.pods[KEY]["spec"]["containers"][0]["image"] == "i", "the pod runs on as it was"
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [], "the same template is not tried again at every pod event"
    world.api.patch_error = None
    _change_template(world, image="i:3")
    world.run()
    assert world.api.pods[KEY]["spec"]["containers"][0]["image"] == "i:3"


def test_transient_update_error_is_raised_for_the_controllers_backoff(world):
    world.add_shadowpod()
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    world.api.patch_error = ApiError(503, "ServiceUnavailable", "etcd is sad")
    _change_template(world, labels={"a": "z"})
    with pytest.raises(ApiError):
        world.run()


def test_finished_pod_is_not_updated(world):
    world.add_shadowpod(restart_policy="Never")
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Succeeded"}
    _change_template(world, labels={"a": "z"})
    world.api.writes.clear()
    world.run()
    assert ("patch", "web") not in world.api.writes


# --- the local pod is being deleted: its grace period reaches the remote pod --------------------
def test_deletion_grace_annotation_deletes_the_pod_with_that_grace_and_creates_none(world):
    world.add_shadowpod()
    world.run()
    uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.shadowpods[KEY]["metadata"]["annotations"] = {C.ANNOTATION_DELETION_GRACE: "7"}
    world.run()
    assert ("delete", "web", uid) in world.api.writes and world.api.delete_graces[-1] == 7
    assert KEY not in world.api.pods  # the fake deletes at once; nothing replaced it
    assert world.reasons()[-1] == reasons.REASON_POD_TERMINATING
    world.api.writes.clear()
    world.run()
    assert not [w for w in world.api.writes if w[0] == "create"]


def test_deletion_grace_leaves_a_pod_already_terminating_with_a_shorter_grace(world):
    world.add_shadowpod()
    world.run()
    world.api.pods[KEY]["metadata"].update(deletionTimestamp="2025-01-01T00:00:10Z", deletionGracePeriodSeconds=5)
    world.api.shadowpods[KEY]["metadata"]["annotations"] = {C.ANNOTATION_DELETION_GRACE: "30"}
    world.api.writes.clear()
    world.run()
    assert world.api.writes == []



# --- pods orphaned by `kubectl delete --cascade=orphan` (the GC strips their owner reference) ---
def _orphan(world: World) -> None:
    world.api.pods[KEY]["metadata"]["ownerReferences"] = []


def test_a_pod_orphaned_from_its_deleted_shadowpod_is_deleted(world):
    world.add_shadowpod()
    world.run()
    _orphan(world)
    del world.api.shadowpods[KEY]
    world.run()
    assert KEY not in world.api.pods
    assert ("delete", "web", world.api.writes[-1][2]) == world.api.writes[-1]


def test_a_pod_orphaned_while_its_shadowpod_waits_on_the_orphan_finalizer_is_deleted(world):
    world.add_shadowpod()
    world.run()
    world.api.shadowpods[KEY]["metadata"].update(deletionTimestamp="2025-01-01T00:00:00Z", finalizers=["orphan"])
    _orphan(world)
    world.run()
    assert KEY not in world.api.pods


def test_an_orphan_holding_the_name_of_a_new_shadowpod_is_replaced(world):
    world.add_shadowpod()
    world.run()
    _orphan(world)
    old_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.shadowpods[KEY]["metadata"]["uid"] = "shp-2"  # deleted with --cascade=orphan, created again
    world.run()
    assert ("delete", "web", old_uid) in world.api.writes
    assert world.api.pods[KEY]["metadata"]["ownerReferences"][0]["uid"] == "shp-2"


def test_an_ownerless_pod_without_the_enforcers_marks_is_never_deleted(world):
    # Labelled managed-by=enforcer by someone, but without the applied-template record only
    # build_pod writes: not the enforcer's, so not in its index and never deleted.
    world.api.pods[KEY] = {
        "metadata": {"name": "web", "namespace": "ns", "uid": "foreign", "labels": {C.LABEL_MANAGED_BY: C.MANAGED_BY_ENFORCER}}
    }
    world.run()
    assert world.api.pods[KEY]["metadata"]["uid"] == "foreign" and world.api.writes == []


# --- the provider's API (Consumer spec.policy.pods.remoteAPIAccess) ------------------------------
def _asking(world: World) -> None:
    world.api.shadowpods[KEY]["spec"]["pod"]["spec"]["automountServiceAccountToken"] = True


@pytest.mark.parametrize("granted, expected", [(False, False), (True, True)])
def test_a_pod_asking_for_the_providers_api_gets_it_only_with_the_grant(world, granted, expected):
    asked: list[str] = []
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 remote_api_access=lambda ns: asked.append(ns) or granted)
    world.add_shadowpod()
    _asking(world)
    world.run()
    assert world.api.pods[KEY]["spec"]["automountServiceAccountToken"] is expected
    assert asked == ["ns"]


def test_the_grant_is_not_guessed_before_the_consumer_caches_know_it(world):
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 remote_api_access=lambda _ns: None)
    world.add_shadowpod()
    _asking(world)
    with pytest.raises(Requeue):
        world.run()
    assert world.api.pods == {}  # the field is immutable on a pod: no pod until the answer is known


# --- resource slices (docs/slices.md): the pool's patch on the pod ------------------------------
GPU_POOL = Pool(name="gpu", node_selector={"pool": "gpu"}, runtime_class_name="nvidia",
                tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))


def test_a_slices_pod_gets_its_pools_patch(world):
    asked: list[tuple[str, str]] = []
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 slice_pool=lambda ns, name, recorded: asked.append((ns, name)) or GPU_POOL)
    world.add_shadowpod()
    world.api.shadowpods[KEY]["metadata"].setdefault("labels", {})[C.LABEL_SLICE] = "train"
    world.run()
    spec = world.api.pods[KEY]["spec"]
    assert asked == [("ns", "train")]
    assert spec["nodeSelector"] == {"pool": "gpu"} and spec["runtimeClassName"] == "nvidia"
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert world.api.pods[KEY]["metadata"]["annotations"][C.ANNOTATION_SLICE_POOL] == "gpu"
    assert world.api.shadowpods[KEY]["status"]["slicePool"] == "gpu"


def test_a_recreated_pod_keeps_the_pool_its_first_pod_was_made_on(world):
    # The consumer points its slice at another pool after the first pod was made: the next
    # pod is looked up by the pool recorded in the ShadowPod's status, never the slice's new one.
    asked: list[str] = []
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 slice_pool=lambda _ns, _name, recorded: asked.append(recorded) or GPU_POOL)
    world.add_shadowpod()
    world.api.shadowpods[KEY]["metadata"].setdefault("labels", {})[C.LABEL_SLICE] = "train"
    world.run()
    pod = world.api.pods[KEY]
    world.api.delete_pod("ns", "web", pod["metadata"]["uid"])
    world.run()
    assert asked == ["", "gpu"]
    assert world.api.shadowpods[KEY]["status"]["slicePool"] == "gpu" and world.api.shadowpods[KEY]["status"]["recreations"] == 1


def test_a_slices_pod_waits_while_its_pool_is_unknown(world):
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 slice_pool=lambda _ns, _name, _recorded: None)
    world.add_shadowpod()
    world.api.shadowpods[KEY]["metadata"].setdefault("labels", {})[C.LABEL_SLICE] = "train"
    with pytest.raises(Requeue):
        world.run()
    assert world.api.pods == {}  # never made without the pool's patch


def test_a_pod_of_no_slice_never_looks_a_pool_up(world):
    def lookup(_ns, _name, _recorded):
        raise AssertionError("looked up")
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 slice_pool=lookup)
    world.add_shadowpod()
    world.run()
    assert "nodeSelector" not in world.api.pods[KEY]["spec"]


def test_a_pod_not_asking_never_looks_the_grant_up(world):
    def lookup(_ns):
        raise AssertionError("looked up")
    world.reconcile = Reconciler(shadowpods=world, pods=world.pods, api=world.api, recorder=world.recorder, status_coalesce_seconds=0,
                                 remote_api_access=lookup)
    world.add_shadowpod()
    world.run()
    assert world.api.pods[KEY]["spec"]["automountServiceAccountToken"] is False


# --- the first pod's status held back while it is Pending (STATUS_COALESCE_SECONDS) -----------
@pytest.fixture
def coalescing() -> World:
    return World(status_coalesce_seconds=5.0)


def test_a_new_pods_status_waits_and_pending_then_running_is_one_write(coalescing):
    world = coalescing
    world.add_shadowpod()
    with pytest.raises(Requeue) as held:
        world.run()
    assert held.value.after == 5.0
    assert world.api.writes == [("create", "web")] and "status" not in world.api.shadowpods[KEY]
    world.now += 1  # the pod's own events (scheduled, conditions) while it is Pending
    with pytest.raises(Requeue) as held:
        world.run()
    assert held.value.after == pytest.approx(4.0) and "status" not in world.api.shadowpods[KEY]
    world.api.pods[KEY]["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    world.run()
    status = world.api.shadowpods[KEY]["status"]
    assert status["phase"] == "Running" and status["podUID"] == world.api.pods[KEY]["metadata"]["uid"]
    assert status["recreations"] == 0
    assert [w for w in world.api.writes if w[0] == "status"] == [("status", "web")], "one status write"
    assert world.reasons() == []


def test_a_pod_still_pending_at_the_deadline_is_written_pending(coalescing):
    world = held_back(coalescing)
    world.now += 5
    world.run()
    assert world.api.shadowpods[KEY]["status"]["phase"] == "Pending"


def test_a_pod_lost_before_its_status_was_written_still_counts(coalescing):
    world = held_back(coalescing)
    first_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods.pop(KEY)  # deleted while its status was held back
    world.run()  # a recreation is written at once: no Requeue
    status = world.api.shadowpods[KEY]["status"]
    assert status["recreations"] == 1 and status["podUID"] != first_uid
    assert world.reasons() == [reasons.REASON_POD_RECREATED]
    assert first_uid in world.api.events[0]["message"]


def test_a_pod_killed_before_its_status_was_written_still_counts(coalescing):
    world = held_back(coalescing)
    world.api.pods[KEY]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    world.run()
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1
    assert "Evicted: low on memory" in world.api.events[-1]["message"]


def held_back(world: "World") -> "World":
    """``world`` after its first reconcile: the pod created, its Pending status held back
    (the reconcile asks to be called again when the hold-back ends)."""
    world.add_shadowpod()
    with pytest.raises(Requeue):
        world.run()
    return world


def restarted_enforcer(world: "World") -> "World":
    """A new enforcer (empty memory, the 5 s hold-back) over ``world``'s API objects."""
    restarted = World(status_coalesce_seconds=5.0)
    restarted.api = world.api
    restarted.reconcile = Reconciler(shadowpods=restarted, pods=restarted.pods, api=world.api,
                                     recorder=restarted.recorder, status_coalesce_seconds=5.0)
    return restarted


def test_a_refused_replacement_keeps_the_unwritten_pod_so_the_next_counts(coalescing):
    world = held_back(coalescing)
    first_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods.pop(KEY)
    world.api.create_error = ApiError(403, "Forbidden", 'pods "web" is forbidden: exceeded quota: q')
    with pytest.raises(ApiError):
        world.run()
    status = world.api.shadowpods[KEY]["status"]
    assert status["podUID"] == first_uid and "exceeded quota" in status["message"]
    world.api.create_error = None
    world.run()
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1


def test_a_creation_failure_is_cleared_at_once_when_the_pod_is_created(coalescing):
    """The consumer's vkubelet reads a creation failure from the status (and may hand the
    pod back): once a pod exists, that must not wait."""
    world = coalescing
    world.add_shadowpod()
    world.api.create_error = ApiError(403, "Forbidden", 'pods "web" is forbidden: exceeded quota: q')
    with pytest.raises(ApiError):
        world.run()
    world.api.create_error = None
    world.run()
    status = world.api.shadowpods[KEY]["status"]
    assert status["message"] == "" and status["podUID"] == world.api.pods[KEY]["metadata"]["uid"]


def test_a_restarted_enforcer_writes_a_pending_pods_status_at_once(coalescing):
    world = held_back(coalescing)
    restarted = restarted_enforcer(world)
    restarted.run()
    status = world.api.shadowpods[KEY]["status"]
    assert status["phase"] == "Pending" and status["podUID"] == world.api.pods[KEY]["metadata"]["uid"]
    assert status["recreations"] == 0


def test_a_graceful_stop_writes_the_statuses_held_back(coalescing):
    world = held_back(coalescing)
    assert world.reconcile.write_held_back(2.0) == 1
    status = world.api.shadowpods[KEY]["status"]
    assert status["phase"] == "Pending" and status["podUID"] == world.api.pods[KEY]["metadata"]["uid"]
    assert world.reconcile.write_held_back(2.0) == 0, "nothing held back any more"


def test_a_graceful_stop_records_a_held_back_pod_that_is_gone_so_the_next_enforcer_counts_it(coalescing):
    world = held_back(coalescing)
    first_uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods.pop(KEY)
    world.sync_pods()  # deleted while the status was held back, and the enforcer stops
    assert world.reconcile.write_held_back(2.0) == 1
    assert world.api.shadowpods[KEY]["status"]["podUID"] == first_uid
    restarted = restarted_enforcer(world)
    restarted.run()
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1


def test_a_graceful_stop_gives_up_at_its_deadline(coalescing):
    world = held_back(coalescing)
    assert world.reconcile.write_held_back(0.0) == 0
    assert "status" not in world.api.shadowpods[KEY]


# --- every pod is judged before it is made (the webhook's judge_pod) ------------------------------------
def test_a_recreation_the_providers_rules_refuse_makes_no_pod_and_says_why(world):
    verdicts = [Decision.allow()]
    world.reconcile.set_judge(lambda shp: verdicts[-1])
    world.add_shadowpod()
    world.run()
    first_uid = world.api.pods[KEY]["metadata"]["uid"]
    # The provider took a grant back; the pod is lost (the consumer can make that happen).
    verdicts.append(Decision.deny(422, "Invalid", "spec.pod.spec.tolerations[0].key: toleration of taint 'gpu' is not granted"))
    world.api.pods.pop(KEY)
    world.api.writes.clear()
    with pytest.raises(Requeue) as requeued:
        world.run()
    assert requeued.value.after == REFUSED_RECHECK_SECONDS
    assert not any(write[0] == "create" for write in world.api.writes)
    assert KEY not in world.api.pods
    status = world.api.shadowpods[KEY]["status"]
    assert status["phase"] == "Pending" and status["podUID"] == first_uid
    assert creation_failure(world.api.shadowpods[KEY]) is not None
    assert "the provider's rules refuse to run it again now" in status["message"] and "tolerations[0].key" in status["message"]
    assert world.reasons() == [reasons.REASON_POD_REFUSED]
    assert world.reconcile.refused_keys() == [KEY]
    # Judged again (a resync, or its Consumer changed): still refused, no second Event.
    with pytest.raises(Requeue):
        world.run()
    assert world.reasons() == [reasons.REASON_POD_REFUSED]
    # The grant comes back: the pod is made, counted as a recreation, the refusal forgotten.
    verdicts.append(Decision.allow())
    world.run()
    assert world.api.pods[KEY]["metadata"]["uid"] != first_uid
    assert world.api.shadowpods[KEY]["status"]["recreations"] == 1
    assert world.reconcile.refused_keys() == []


def test_the_first_pod_is_judged_too_and_waits_while_the_judge_cannot_say(world):
    world.reconcile.set_judge(lambda shp: Decision.deny(503, "ServiceUnavailable", "caches not synced"))
    world.add_shadowpod()
    with pytest.raises(Requeue):
        world.run()
    assert world.api.pods == {} and "status" not in world.api.shadowpods[KEY]
    world.reconcile.set_judge(lambda shp: Decision.deny(403, "Forbidden", 'exceeded quota of consumer "local": pods'))
    with pytest.raises(Requeue):
        world.run()
    assert world.api.pods == {}
    assert "refuse to run it now" in world.api.shadowpods[KEY]["status"]["message"]


def test_a_running_pod_is_not_judged(world):
    calls = []
    world.reconcile.set_judge(lambda shp: calls.append(shp) or Decision.allow())
    world.add_shadowpod()
    world.run()
    world.run()
    assert len(calls) == 1  # only the create asked


# --- the largest grace (Consumer spec.policy.pods.maxTerminationGracePeriodSeconds) -----------------------
def grace_world(cap: int | None) -> World:
    made = World()
    made.reconcile = Reconciler(shadowpods=made, pods=made.pods, api=made.api, recorder=made.recorder,
                                status_coalesce_seconds=0, max_grace=lambda _ns: cap)
    return made


def test_the_pod_made_and_every_deletion_have_a_bounded_grace():
    world = grace_world(300)
    shp = world.add_shadowpod()
    shp["spec"]["pod"]["spec"]["terminationGracePeriodSeconds"] = 8 * 24 * 3600
    world.run()
    assert world.api.pods[KEY]["spec"]["terminationGracePeriodSeconds"] == 300
    # An extra pod (made by an older enforcer, with the long grace) is deleted with the bound.
    extra = copy.deepcopy(world.api.pods[KEY])
    extra["metadata"].update(name="web-extra", uid="pod-extra", creationTimestamp="2025-01-01T00:00:01Z")
    extra["spec"]["terminationGracePeriodSeconds"] = 8 * 24 * 3600
    world.api.pods["ns/web-extra"] = extra
    world.run()
    assert ("delete", "web-extra", "pod-extra") in world.api.writes
    assert world.api.delete_graces == [300]
    # The local pod is deleted asking for 8 days: the pod goes with the bound.
    world.api.shadowpods[KEY]["metadata"].setdefault("annotations", {})[C.ANNOTATION_DELETION_GRACE] = str(8 * 24 * 3600)
    world.run()
    assert world.api.delete_graces[-1] == 300


# --- ephemeral containers (kubectl debug) ---------------------------------------------------------------
DEBUGGER = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "c", "stdin": True, "tty": True}


def _debug(world, *containers):
    world.api.shadowpods[KEY]["spec"]["pod"]["spec"]["ephemeralContainers"] = [dict(c) for c in containers]


def test_a_template_with_ephemeral_containers_makes_a_pod_without_them_then_adds_them(world):
    world.add_shadowpod()
    _debug(world, DEBUGGER)
    world.run()
    created = world.api.pods[KEY]
    assert C.ANNOTATION_EPHEMERAL_NOT_RUN not in created["metadata"]["annotations"], "a first pod runs them"
    world.run()  # the pod's event: now it is added, through the subresource, pulling Always
    [added] = world.api.pods[KEY]["spec"]["ephemeralContainers"]
    assert added["name"] == "debugger" and added["targetContainerName"] == "c" and added["imagePullPolicy"] == "Always"
    assert ("ephemeral", "web") in world.api.writes
    assert world.reasons() == [reasons.REASON_EPHEMERAL_CONTAINERS_ADDED]
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [], "added once"


def test_a_pod_made_to_replace_one_never_runs_its_ephemeral_containers_again(world):
    world.add_shadowpod()
    world.run()
    _debug(world, DEBUGGER)
    world.run()
    assert world.api.pods[KEY]["spec"]["ephemeralContainers"]
    world.api.pods.pop(KEY)  # the remote pod vanished: the enforcer recreates it
    world.run()
    replacement = world.api.pods[KEY]
    assert "ephemeralContainers" not in replacement["spec"]
    assert replacement["metadata"]["annotations"][C.ANNOTATION_EPHEMERAL_NOT_RUN] == "debugger"
    world.api.writes.clear()
    world.run()
    assert ("ephemeral", "web") not in world.api.writes
    # A new debug session on the replacement is added.
    _debug(world, DEBUGGER, {**DEBUGGER, "name": "debugger-2"})
    world.run()
    assert [c["name"] for c in world.api.pods[KEY]["spec"]["ephemeralContainers"]] == ["debugger-2"]


def test_ephemeral_containers_are_judged_when_added_and_a_refusal_is_told_once(world):
    judged = []

    def judge(shp):
        judged.append(shp["spec"]["pod"]["spec"].get("ephemeralContainers"))
        if shp["spec"]["pod"]["spec"].get("ephemeralContainers"):
            return Decision.deny(422, "Invalid", "spec.pod.spec.ephemeralContainers[0]: not granted")
        return Decision.allow()

    world.reconcile.set_judge(judge)
    world.add_shadowpod()
    _debug(world, DEBUGGER)
    world.run()
    assert judged == [None], "the pod is created (and judged) without its ephemeral containers"
    assert KEY in world.api.pods
    with pytest.raises(Requeue):
        world.run()
    assert judged[-1] == [DEBUGGER], "then judged with the ones it adds"
    assert "ephemeralContainers" not in world.api.pods[KEY]["spec"]
    world.run()  # within the recheck: neither judged nor told again
    assert world.reasons() == [reasons.REASON_EPHEMERAL_CONTAINERS_REFUSED]
    assert "not granted" in world.api.events[-1]["message"]
    world.reconcile.set_judge(lambda shp: Decision.allow())
    world.now += 31
    world.run()
    assert world.api.pods[KEY]["spec"]["ephemeralContainers"][0]["name"] == "debugger"


def test_the_api_servers_refusal_of_an_ephemeral_container_is_a_warning(world):
    world.add_shadowpod()
    world.run()
    _debug(world, {**DEBUGGER, "securityContext": {"privileged": True}})
    world.api.ephemeral_error = ApiError(422, "Invalid", 'pods "web" is forbidden: violates PodSecurity "baseline:latest"')
    with pytest.raises(Requeue):
        world.run()
    assert world.reasons() == [reasons.REASON_EPHEMERAL_CONTAINERS_REFUSED]
    assert "violates PodSecurity" in world.api.events[-1]["message"]
# --- in-place resize (enforcer/shadowpods/resize.py) ----------------------------------------------
def _resize_template(world: World, cpu: str, memory: str = "64Mi") -> None:
    world.api.shadowpods[KEY]["spec"]["pod"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": "1", "memory": "128Mi"}}


def test_a_resized_template_resizes_the_running_pod_through_the_resize_subresource(world):
    world.add_shadowpod()
    _resize_template(world, "100m")
    world.run()
    uid = world.api.pods[KEY]["metadata"]["uid"]
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    _resize_template(world, "250m", "96Mi")
    world.api.writes.clear()
    world.run()
    pod = world.api.pods[KEY]
    assert pod["metadata"]["uid"] == uid, "resized, not recreated"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "96Mi"}
    assert ("resize", "web") in world.api.writes and not any(w[0] in ("create", "delete") for w in world.api.writes)
    assert world.reasons()[-1] == reasons.REASON_POD_RESIZED
    assert "c: requests.cpu=250m, requests.memory=96Mi" in world.api.events[-1]["message"]
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [], "resized once"


def test_a_refused_resize_is_told_once_and_the_pod_runs_on(world):
    world.add_shadowpod()
    _resize_template(world, "100m")
    world.run()
    world.api.pods[KEY]["status"] = {"phase": "Running"}
    world.api.resize_error = ApiError(422, "Invalid", 'Pod "web" is invalid: spec: Forbidden: Pod QOS Class may not change')
    _resize_template(world, "1", "128Mi")
    world.run()
    assert world.reasons()[-1] == reasons.REASON_POD_RESIZE_REFUSED
    assert "Pod QOS Class may not change" in world.api.events[-1]["message"]
    assert world.api.pods[KEY]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    world.api.writes.clear()
    world.run()
    assert world.api.writes == [], "the same resize is not asked again at every pod event"
