"""The pod loop's reconcile (vkubelet/pods/reconcile.py), one local pod at a time: the
caches are the loop's own informers fed by hand (support/informers.py), both clusters'
API layers are recording fakes (support/recording_kube.py) that answer as an API server
would, and the Events the loop records are written through the local one. What each
case checks is what the loop wrote, and nothing else:

- a new pod bound to the virtual node: one ShadowPod, in its twin, carrying the pod;
  the next reconcile, with that ShadowPod in the cache, writes nothing more;
- a pod being deleted: its grace period reaches the remote pod through the ShadowPod;
  once the remote pod is gone the ShadowPod goes (this very one: UID precondition), then
  the local pod (grace 0, as a kubelet confirms an end);
- a remote pod's status: written to the local pod (pods/status, on the version read);
- a provider that refuses the ShadowPod: said on the pod, then a backoff: a reconcile
  before it ends sends nothing (no hot loop);
- a twin namespace the provider forbids us to read: nothing written to either cluster
  but a Warning Event on the pod.

Scenarios against real clusters are the e2e and real-node tiers' (tests/e2e/test_pod_lifecycle.py,
test_provider_refusals.py, test_enforcer.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Iterator

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload import views
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from kube_offload.runtime.kinds import EVENTS, PODS, SHADOWPODS
from kube_offload.runtime.kube import MERGE_PATCH
from kube_offload.times import format_time, utc_now
from support import builders
from support.informers import answered_403, listed
from support.recording_kube import CREATE, DELETE, PATCH, RecordingKube, forbidden
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.pods import refusals
from vkubelet.pods.first_status import FirstWriteHolds
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.settings import Settings
from kube_offload import reasons
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces

TWIN = "ns-local"
KEY = "ns/web"
NODE = "kube-offload-remote"


class Loop:
    """A pod loop over fed caches and two recording API layers."""

    def __init__(self) -> None:
        self.settings = Settings(cluster_id="remote", local_cluster_id="local")
        informers = SharedInformers(self.settings, client.ApiClient(), client.ApiClient())
        self.local = RecordingKube()  # the local cluster: pods, their status, Events
        self.remote = RecordingKube()  # the provider: ShadowPods
        self.recorder = EventRecorder(self.local, host="test")
        # The provider runs the relay to our API server (docs/home-api.md).
        relay = HomeAPIEndpoint(ip="10.96.12.34", port=443)
        self.pods = PodOffloader(self.settings, informers, TwinNamespaces(self.settings, informers, self.recorder),
                                 self.recorder, home_api=lambda: relay)
        self.pods.kube = self.remote
        self.pods.local.kube = self.local
        # Local namespace "ns" offloaded (Remote), our request for its twin Ready, and the
        # twin's caches listed once, empty: what the provider shows us before any pod.
        self.pods.twins.local_namespaces.apply(ADDED, builders.namespace(
            "ns", labels={c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}))
        self.pods.twins.requests.apply(ADDED, builders.twin_request(TWIN, self.settings.tenant_namespace))
        informers.set_twin_namespaces([TWIN])
        listed(self.pods.shadowpods, TWIN)
        listed(self.pods.remote_pods, TWIN)
        # What the provider's API server creates or changes shows in our ShadowPod cache, as
        # its watch would deliver it.
        self.remote.feed(SHADOWPODS, self.pods.shadowpods)

    def add_local(self, pod: dict) -> dict:
        """The local API server holds ``pod`` and the local-pods cache shows it."""
        self.local.hold(PODS, pod)
        self.pods.local_pods.apply(ADDED, pod)
        return pod

    def reconcile(self) -> None:
        self.pods.reconcile(KEY)

    def events(self) -> list[tuple[str, str]]:
        """(type, reason) of the Events written about our pods so far."""
        assert self.recorder.flush(5.0)
        return [(w.body["type"], w.body["reason"]) for w in self.local.of(CREATE, EVENTS)]


@pytest.fixture
def loop() -> Iterator[Loop]:
    made = Loop()
    yield made
    made.recorder.stop(1.0)


def bound_pod(**meta: object) -> dict:
    """Local pod ns/web, as the API server shows it once the scheduler bound it to the
    virtual node."""
    return builders.pod(uid="u-web", resourceVersion="10", creationTimestamp="2026-01-01T00:00:00Z",
                        containers=[builders.container()], spec={"nodeName": NODE}, phase="Pending", **meta)


def offloaded(loop: Loop, pod: dict) -> dict:
    """``pod`` offloaded before: its ShadowPod (as our create made it) in the provider and
    in our cache."""
    loop.reconcile()
    [created] = loop.remote.of(CREATE, SHADOWPODS)
    shp = loop.remote.stored(SHADOWPODS, created.name, TWIN)
    assert shp is not None
    return shp


def remote_pod(shp: dict, *, phase: str = "Running", **status: object) -> dict:
    """The pod the enforcer made for ``shp``, as the provider's API server shows it."""
    meta = shp["metadata"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": TWIN, "uid": "remote-uid", "resourceVersion": "50",
                     "labels": dict(meta["labels"]), "annotations": dict(meta["annotations"]),
                     "ownerReferences": [{"apiVersion": shp["apiVersion"], "kind": c.SHADOWPOD_KIND,
                                          "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "status": {"phase": phase, **status},
    }


def test_a_new_pod_gets_one_shadowpod_in_its_twin_and_no_second(loop: Loop) -> None:
    loop.add_local(bound_pod())
    loop.reconcile()
    [create] = loop.remote.writes
    assert (create.verb, create.resource, create.namespace, create.name) == (CREATE, SHADOWPODS, TWIN, "web")
    template = views.pod_template(create.body)
    assert [(k["name"], k["image"]) for k in template["spec"]["containers"]] == [("app", "nginx")]
    assert "nodeName" not in template["spec"]
    assert create.body["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == "local"
    assert create.body["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] == "u-web"
    # Nothing to say on the pod but where it runs; its status is the remote pod's to give.
    assert loop.local.of(PATCH, PODS) == []
    assert loop.events() == [("Normal", reasons.REASON_OFFLOADED)]

    loop.reconcile()  # the ShadowPod is in the cache now (the watch of the provider)
    assert len(loop.remote.writes) == 1


def test_a_pod_being_deleted_ends_remotely_with_its_grace_then_goes(loop: Loop) -> None:
    pod = loop.add_local(bound_pod())
    shp = offloaded(loop, pod)
    running = remote_pod(shp)
    loop.pods.remote_pods.apply(ADDED, running)
    # As the API server marks it: deleted at the end of its grace period, from now.
    deleting = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "11", "deletionGracePeriodSeconds": 45,
                                    "deletionTimestamp": format_time(utc_now() + timedelta(seconds=45))}}
    loop.add_local(deleting)

    # Its remote pod runs: the grace period goes to the ShadowPod, for the enforcer.
    with pytest.raises(Requeue):
        loop.reconcile()
    [ask] = loop.remote.of(PATCH, SHADOWPODS)
    assert ask.name == "web" and ask.options["content_type"] == MERGE_PATCH
    assert ask.body["metadata"]["annotations"] == {c.ANNOTATION_DELETION_GRACE: "45"}
    assert ask.body["metadata"]["uid"] == shp["metadata"]["uid"]  # this very ShadowPod
    assert loop.remote.of(DELETE) == [] and loop.local.of(DELETE) == []

    # The remote pod is gone: the ShadowPod goes, on its UID.
    loop.pods.remote_pods.apply(DELETED, running)
    with pytest.raises(Requeue):
        loop.reconcile()
    [gone] = loop.remote.of(DELETE, SHADOWPODS)
    assert (gone.name, gone.namespace, gone.options["uid"]) == ("web", TWIN, shp["metadata"]["uid"])
    assert loop.remote.stored(SHADOWPODS, "web", TWIN) is None
    assert loop.local.of(DELETE) == []

    # Nothing left remotely: the local pod goes, grace 0, this very pod.
    loop.reconcile()
    [confirmed] = loop.local.of(DELETE, PODS)
    assert confirmed.options == {"uid": "u-web", "grace_period_seconds": 0}


def test_the_remote_pods_status_is_written_to_the_local_pod(loop: Loop) -> None:
    pod = loop.add_local(bound_pod())
    shp = offloaded(loop, pod)
    conditions = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
    loop.pods.remote_pods.apply(ADDED, remote_pod(shp, podIP="10.20.0.7", podIPs=[{"ip": "10.20.0.7"}],
                                                  startTime="2026-01-01T00:00:05Z", conditions=conditions))
    loop.reconcile()
    [write] = loop.local.of(PATCH, PODS)
    assert (write.name, write.namespace, write.subresource) == ("web", "ns", "status")
    assert write.body["metadata"] == {"resourceVersion": "10"}  # on the version read: no stale overwrite
    status = loop.local.stored(PODS, "web", "ns")["status"]
    assert status["phase"] == "Running" and status["podIP"] == "10.20.0.7"
    assert status["hostIP"] == loop.settings.node_address
    assert {(cond["type"], cond["status"]) for cond in status["conditions"]} >= {("Ready", "True")}


def test_a_provider_refusal_backs_off_and_is_not_a_hot_loop(loop: Loop) -> None:
    loop.add_local(bound_pod())
    words = "the ShadowPod's requests.cpu would take the consumer past its quota while its other pods run"
    loop.remote.answer_with(forbidden(f'admission webhook "shadowpods.enforcer.kube-offload.io" denied the request: {words}'),
                            verb=CREATE, resource=SHADOWPODS)
    with pytest.raises(Requeue) as first:
        loop.reconcile()
    assert first.value.after == refusals.BACKOFF_START_SECONDS
    [refused] = loop.remote.writes
    assert refused.error is not None and refused.error.status == 403
    # Said on the pod, in the provider's own words.
    status = loop.local.stored(PODS, "web", "ns")["status"]
    assert status["reason"] == reasons.REASON_PROVIDER_REFUSED and words in status["message"]
    assert loop.events() == [("Warning", reasons.REASON_PROVIDER_REFUSED)]

    # Reconciles before the backoff ends (events, resyncs) send nothing.
    for _ in range(3):
        with pytest.raises(Requeue) as again:
            loop.reconcile()
        assert 0 < again.value.after <= refusals.BACKOFF_START_SECONDS
    assert len(loop.remote.writes) == 1


def test_a_forbidden_twin_gets_nothing_written_but_a_warning(loop: Loop) -> None:
    loop.add_local(bound_pod())
    for informer in (loop.pods.shadowpods, loop.pods.remote_pods):
        answered_403(informer, TWIN, "pods is forbidden")
    with pytest.raises(Requeue):
        loop.reconcile()
    assert loop.remote.writes == []
    assert [w for w in loop.local.writes if w.resource != EVENTS] == []
    assert loop.events() == [("Warning", reasons.REASON_TWIN_FORBIDDEN)]


def test_a_remote_pod_created_then_started_is_one_local_status_write(loop: Loop) -> None:
    """Issue 39: the remote pod's creation, binding and start fold into one pods/status
    write while it is Pending (at most FIRST_WRITE_HOLD_SECONDS); a pod still Pending
    then is mirrored Pending."""
    clock = [100.0]
    loop.pods.first_writes = FirstWriteHolds(5.0, lambda: clock[0])
    pod = loop.add_local(bound_pod())
    shp = offloaded(loop, pod)
    pending = remote_pod(shp, phase="Pending")
    loop.pods.remote_pods.apply(ADDED, pending)
    loop.reconcile()
    clock[0] += 1
    loop.reconcile()  # bound, initialised...: still Pending, still held
    assert loop.local.of(PATCH, PODS) == []
    loop.pods.remote_pods.apply(MODIFIED, remote_pod(shp, phase="Running", podIP="10.20.0.7"))
    loop.reconcile()
    [write] = loop.local.of(PATCH, PODS)
    assert write.body["status"]["phase"] == "Running" and write.body["status"]["hostIP"] == loop.settings.node_address
    assert len(loop.pods.first_writes) == 0


def test_a_remote_pod_pending_past_the_hold_is_mirrored_pending(loop: Loop) -> None:
    clock = [100.0]
    loop.pods.first_writes = FirstWriteHolds(5.0, lambda: clock[0])
    pod = loop.add_local(bound_pod())
    shp = offloaded(loop, pod)
    loop.pods.remote_pods.apply(ADDED, remote_pod(shp, phase="Pending", message="pulling"))
    loop.reconcile()
    assert loop.local.of(PATCH, PODS) == []
    clock[0] += 5
    loop.reconcile()
    [write] = loop.local.of(PATCH, PODS)
    assert write.body["status"]["hostIP"] == loop.settings.node_address
    assert write.body["status"]["message"] == "pulling"


def test_a_running_pods_reconciles_translate_it_again_only_when_an_input_changed(loop: Loop, monkeypatch) -> None:
    """Issue 39: a running pod's remote events, echoes and resyncs change neither pod, nor
    the translation context: the template sync's answer is remembered, not recomputed; a
    new version of the local pod, or a new context (the provider's policy, the node's
    labels, the relay), is translated and carried again."""
    pod = loop.add_local(bound_pod())
    shp = offloaded(loop, pod)
    loop.pods.remote_pods.apply(ADDED, remote_pod(shp, podIP="10.20.0.7"))
    loop.reconcile()  # the status written
    loop.pods.local_pods.apply(MODIFIED, loop.local.stored(PODS, "web", "ns"))  # and its echo
    translated = []
    desired = loop.pods.desired
    monkeypatch.setattr(loop.pods, "desired", lambda *a, **k: translated.append(1) or desired(*a, **k))
    loop.reconcile()
    assert len(translated) == 1
    for rv in ("51", "52", "53"):  # remote pod events; a resync
        loop.pods.remote_pods.apply(MODIFIED, {**remote_pod(shp, podIP="10.20.0.7"),
                                               "metadata": {**remote_pod(shp)["metadata"], "resourceVersion": rv}})
        loop.reconcile()
    assert len(translated) == 1 and loop.remote.of(PATCH, SHADOWPODS) == []

    # `kubectl label`: a new version of the local pod, translated and carried.
    stored = loop.local.stored(PODS, "web", "ns")
    relabelled = {**stored, "metadata": {**stored["metadata"], "resourceVersion": "99",
                                         "labels": {**(stored["metadata"].get("labels") or {}), "tier": "gold"}}}
    loop.add_local(relabelled)
    loop.reconcile()
    assert len(translated) == 2
    [carried] = loop.remote.of(PATCH, SHADOWPODS)
    assert carried.body["spec"]["pod"]["metadata"]["labels"]["tier"] == "gold"

    # A new translation context (here: the relay moved) is looked at again too.
    shp_now = loop.remote.stored(SHADOWPODS, "web", TWIN)
    loop.pods.shadowpods.apply(MODIFIED, shp_now)
    loop.reconcile()
    count = len(translated)
    loop.reconcile()
    assert len(translated) == count  # in sync, remembered
    loop.pods.home_api = lambda: HomeAPIEndpoint(ip="10.96.99.99", port=443)
    loop.reconcile()
    assert len(translated) == count + 1


def test_the_translation_context_is_one_object_while_nothing_in_it_changes(loop: Loop) -> None:
    """Issue 39: every pod's remembered template inputs hold the context; an equal context
    is the same object (one copy for all pods, not one each), and a change gives a new one."""
    first = loop.pods.context()
    again = loop.pods.context()
    assert again is first
    loop.pods.home_api = lambda: HomeAPIEndpoint(ip="10.96.99.99", port=443)
    moved = loop.pods.context()
    assert moved is not first and moved != first
    assert moved.home_api == HomeAPIEndpoint(ip="10.96.99.99", port=443)
    assert loop.pods.context() is moved
