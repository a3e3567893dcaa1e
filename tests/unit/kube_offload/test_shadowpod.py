"""The ShadowPod model: ShadowPod -> Pod, Pod -> status, and the recreate decision table."""

from __future__ import annotations

import copy
import json

import pytest

from kube_offload.constants import (
    ANNOTATION_APPLIED_TEMPLATE,
    ANNOTATION_DELETION_GRACE,
    ANNOTATION_ORIGIN_NAME,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_ENFORCER,
)
from kube_offload.shadowpod import (
    API_VERSION,
    Action,
    InvalidShadowPod,
    PodFate,
    asks_for_remote_api,
    build_pod,
    build_shadowpod,
    capped_grace,
    choose_pod,
    controller_ref,
    is_owned_by,
    owner_key,
    plan,
    pod_fate,
    pod_update,
    read_pod_template,
    run_completed,
)
from kube_offload.shadowpod_status import (
    status_changed,
    status_from_pod,
    status_may_wait,
    status_without_pod,
    with_recorded_pod,
)
from support import builders

SPEC = {"containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]}]}


def shadowpod(*, restart_policy: str | None = None, status: dict | None = None, **meta) -> dict:
    spec = copy.deepcopy(SPEC)
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    obj = builders.shadowpod("web-0", "demo-local", spec=spec, pod_labels={"app": "web"}, pod_annotations={"note": "x"},
                             origin="local", origin_annotations={ANNOTATION_ORIGIN_NAME: "web-0"},
                             **{"uid": "shp-uid", "resourceVersion": "7", "generation": 1, **meta})
    if status is not None:
        obj["status"] = status
    return obj


def pod_of(shp: dict, *, uid: str = "pod-1", name: str | None = None, created: str = "2025-01-01T00:00:00Z",
           phase: str | None = "Running", reason: str | None = None, deleting: bool = False,
           conditions: list | None = None, message: str | None = None) -> dict:
    pod = build_pod(shp)
    pod["metadata"].update({"uid": uid, "creationTimestamp": created})
    if name:
        pod["metadata"]["name"] = name
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    status: dict = {}
    if phase:
        status["phase"] = phase
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    if conditions is not None:
        status["conditions"] = conditions
    pod["status"] = status
    return pod


# --- building ----------------------------------------------------------------------------------
def test_build_shadowpod_shape_and_origin_labels_reach_the_pod_template():
    pod_meta = {"name": "web-0", "uid": "local-uid", "labels": {"app": "web", LABEL_ORIGIN_CLUSTER_ID: "spoof"},
                "ownerReferences": [{"kind": "ReplicaSet"}]}
    spec = copy.deepcopy(SPEC)
    shp = build_shadowpod(
        name="web-0", namespace="ns", pod_metadata=pod_meta, pod_spec=spec,
        origin_labels={LABEL_ORIGIN_CLUSTER_ID: "local"}, origin_annotations={ANNOTATION_ORIGIN_NAME: "web-0"},
    )
    assert shp == {
        "apiVersion": API_VERSION,
        "kind": "ShadowPod",
        "metadata": {
            "name": "web-0",
            "namespace": "ns",
            "labels": {LABEL_ORIGIN_CLUSTER_ID: "local"},
            "annotations": {ANNOTATION_ORIGIN_NAME: "web-0"},
        },
        "spec": {"pod": {
            "metadata": {
                "labels": {"app": "web", LABEL_ORIGIN_CLUSTER_ID: "local"},  # origin wins
                "annotations": {ANNOTATION_ORIGIN_NAME: "web-0"},
            },
            "spec": SPEC,
        }},
    }
    spec["containers"][0]["image"] = "changed"
    assert shp["spec"]["pod"]["spec"]["containers"][0]["image"] == "nginx", "inputs must be copied"


def test_build_shadowpod_without_labels_has_empty_template_metadata():
    shp = build_shadowpod(name="a", namespace="b", pod_metadata={}, pod_spec=SPEC)
    assert shp["metadata"] == {"name": "a", "namespace": "b"}
    assert shp["spec"]["pod"]["metadata"] == {}


def test_build_pod_from_shadowpod():
    shp = shadowpod()
    pod = build_pod(shp)
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "demo-local",
            "labels": {"app": "web", LABEL_ORIGIN_CLUSTER_ID: "local", LABEL_MANAGED_BY: MANAGED_BY_ENFORCER},
            "annotations": {"note": "x", ANNOTATION_ORIGIN_NAME: "web-0", ANNOTATION_APPLIED_TEMPLATE: pod["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE]},
            "ownerReferences": [{
                "apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "name": "web-0",
                "uid": "shp-uid", "controller": True, "blockOwnerDeletion": True,
            }],
        },
        # The template's spec, with the two fields the provider policy fixes.
        "spec": {"containers": [{**SPEC["containers"][0], "imagePullPolicy": "Always"}], "automountServiceAccountToken": False},
    }
    assert pod["spec"] is not shp["spec"]["pod"]["spec"]
    # The record of what came from the template: every key but managed-by, and a digest.
    record = json.loads(pod["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE])
    assert record["labels"] == ["app", LABEL_ORIGIN_CLUSTER_ID]
    assert record["annotations"] == [ANNOTATION_ORIGIN_NAME, "note"]
    assert record["digest"].startswith("sha256:")
    assert pod_update(shp, pod) is None, "a pod just made from its template needs no update"


@pytest.mark.parametrize("policy", ["IfNotPresent", "Never", None])
def test_the_pod_always_pulls_and_gets_no_provider_token(policy):
    # A cached private image is never run without the credentials that pull it; a
    # consumer's pod never gets a token of a provider ServiceAccount.
    shp = shadowpod()
    spec = shp["spec"]["pod"]["spec"]
    spec["automountServiceAccountToken"] = True
    spec["initContainers"] = [{"name": "init", "image": "private/tool:1"}]
    for container in (*spec["containers"], *spec["initContainers"]):
        if policy is not None:
            container["imagePullPolicy"] = policy
    pod = build_pod(shp)
    assert [c["imagePullPolicy"] for c in (*pod["spec"]["initContainers"], *pod["spec"]["containers"])] == ["Always", "Always"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert spec["automountServiceAccountToken"] is True, "the ShadowPod itself is not changed"
    assert pod_update(shp, pod) is None, "the neutralized fields are not template changes to carry"


@pytest.mark.parametrize("asked, granted, expected", [(True, True, True), (True, False, False), (False, True, False), (None, True, False)])
def test_the_providers_token_only_where_asked_and_granted(asked, granted, expected):
    # Consumer spec.policy.pods.remoteAPIAccess: the pod asks (automount true), the enforcer
    # says whether its consumer is granted; both are needed.
    shp = shadowpod()
    if asked is not None:
        shp["spec"]["pod"]["spec"]["automountServiceAccountToken"] = asked
    assert asks_for_remote_api(shp) is (asked is True)
    assert build_pod(shp, remote_api_access=granted)["spec"]["automountServiceAccountToken"] is expected


def test_managed_by_label_cannot_be_overridden_by_the_template():
    shp = shadowpod()
    shp["spec"]["pod"]["metadata"]["labels"][LABEL_MANAGED_BY] = "someone-else"
    assert build_pod(shp)["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY_ENFORCER


@pytest.mark.parametrize("spec", [{}, {"pod": None}, {"pod": {}}, {"pod": {"spec": "x"}}, {"pod": {"spec": {}, "metadata": []}}])
def test_read_pod_template_rejects_shapes_that_are_no_pod(spec):
    with pytest.raises(InvalidShadowPod):
        read_pod_template({"metadata": {"name": "a"}, "spec": spec})


def test_read_pod_template_stringifies_label_values():
    template = read_pod_template({"spec": {"pod": {"metadata": {"labels": {"n": 1}}, "spec": {}}}})
    assert template.labels == {"n": "1"} and template.annotations == {} and template.spec == {}


# --- ownership ---------------------------------------------------------------------------------
def test_owner_key_and_ownership():
    shp = shadowpod()
    pod = pod_of(shp)
    assert owner_key(pod) == "demo-local/web-0"
    assert is_owned_by(pod, shp)
    other_incarnation = shadowpod(uid="new-uid")
    assert not is_owned_by(pod, other_incarnation)
    assert owner_key({"metadata": {"namespace": "n", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True},
        {"apiVersion": API_VERSION, "kind": "ShadowPod", "name": "x", "controller": False},
    ]}}) is None
    assert owner_key({"metadata": {"namespace": "n", "ownerReferences": [
        {"apiVersion": "other.io/v1", "kind": "ShadowPod", "name": "x", "controller": True}]}}) is None
    assert controller_ref({"metadata": {}}) is None


def test_choose_pod_keeps_the_oldest_and_breaks_ties_by_the_canonical_name():
    shp = shadowpod()
    young = pod_of(shp, uid="b", name="web-0-copy", created="2025-01-02T00:00:00Z")
    old = pod_of(shp, uid="a", name="web-0-zzz", created="2025-01-01T00:00:00Z")
    keep, extra = choose_pod([young, old], "web-0")
    assert keep["metadata"]["uid"] == "a" and [p["metadata"]["uid"] for p in extra] == ["b"]
    canonical = pod_of(shp, uid="c", created="2025-01-01T00:00:00Z")
    keep, extra = choose_pod([old, canonical], "web-0")
    assert keep["metadata"]["uid"] == "c"
    assert choose_pod([], "web-0") == (None, [])


# --- the recreate rule -------------------------------------------------------------------------
FATE_TABLE = [
    # (restartPolicy, phase, reason, conditions, deleting) -> fate
    ("Always", "Pending", None, None, False, PodFate.ACTIVE),
    ("Always", "Running", None, None, False, PodFate.ACTIVE),
    (None, "Running", None, None, False, PodFate.ACTIVE),
    ("Never", "Unknown", None, None, False, PodFate.ACTIVE),
    ("Always", None, None, None, False, PodFate.ACTIVE),
    ("Always", "Running", None, None, True, PodFate.TERMINATING),
    ("Never", "Succeeded", None, None, True, PodFate.TERMINATING),
    ("Always", "Failed", "Evicted", None, False, PodFate.KILLED),
    ("Never", "Failed", "Evicted", None, False, PodFate.KILLED),
    ("OnFailure", "Failed", "Preempting", None, False, PodFate.KILLED),
    ("Never", "Failed", "OutOfcpu", None, False, PodFate.KILLED),
    ("Never", "Failed", "NodeAffinity", None, False, PodFate.KILLED),
    ("Never", "Failed", "Shutdown", None, False, PodFate.KILLED),
    ("Never", "Failed", "UnexpectedAdmissionError", None, False, PodFate.KILLED),
    ("Never", "Failed", None, [{"type": "DisruptionTarget", "status": "True"}], False, PodFate.KILLED),
    ("Never", "Failed", None, [{"type": "DisruptionTarget", "status": "False"}], False, PodFate.COMPLETED),
    # restartPolicy Always never ends on its own: a terminal pod was stopped from outside
    ("Always", "Failed", None, None, False, PodFate.KILLED),
    ("Always", "Succeeded", None, None, False, PodFate.KILLED),
    (None, "Succeeded", None, None, False, PodFate.KILLED),
    # a finished run: mirrored, not replaced
    ("Never", "Succeeded", None, None, False, PodFate.COMPLETED),
    ("Never", "Failed", None, None, False, PodFate.COMPLETED),
    ("OnFailure", "Succeeded", None, None, False, PodFate.COMPLETED),
    ("OnFailure", "Failed", None, None, False, PodFate.COMPLETED),
    ("Never", "Failed", "DeadlineExceeded", None, False, PodFate.COMPLETED),
]


@pytest.mark.parametrize("restart_policy,phase,reason,conditions,deleting,fate", FATE_TABLE)
def test_pod_fate_table(restart_policy, phase, reason, conditions, deleting, fate):
    pod = pod_of(shadowpod(restart_policy=restart_policy), phase=phase, reason=reason,
                 conditions=conditions, deleting=deleting)
    assert pod_fate(pod) is fate


def test_run_completed_only_for_terminal_status_of_a_pod_that_does_not_restart():
    assert run_completed(shadowpod(restart_policy="Never", status={"phase": "Succeeded"}))
    assert run_completed(shadowpod(restart_policy="OnFailure", status={"phase": "Failed"}))
    assert not run_completed(shadowpod(restart_policy="Never", status={"phase": "Running"}))
    assert not run_completed(shadowpod(restart_policy="Always", status={"phase": "Failed"}))
    assert not run_completed(shadowpod(restart_policy="Never"))


def test_run_completed_is_read_from_the_pod_that_ran_not_the_template():
    # The pod ran with restartPolicy Never and finished: the status says so, whatever the
    # template says since (an edit to Always must not bring the finished pod back).
    ran = shadowpod(restart_policy="Never")
    ended = status_from_pod(ran, pod_of(ran, phase="Succeeded"))
    assert ended["runCompleted"] is True
    edited = shadowpod(restart_policy="Always", status=ended)
    assert run_completed(edited)
    assert plan(edited, []).action is Action.NOTHING
    # A pod the system stopped is recorded as not completed, whatever the template says.
    evicted = status_from_pod(ran, pod_of(ran, phase="Failed", reason="Evicted"))
    assert evicted["runCompleted"] is False
    assert not run_completed(shadowpod(restart_policy="Never", status=evicted))
    # A running pod's status says nothing of it (written as before: no extra status write).
    assert status_from_pod(ran, pod_of(ran, phase="Running"))["runCompleted"] is None


def test_the_grace_of_a_pod_and_of_a_deletion_is_cut_to_the_consumers_largest():
    long = shadowpod()
    long["spec"]["pod"]["spec"]["terminationGracePeriodSeconds"] = 8 * 24 * 3600
    assert build_pod(long, max_grace_seconds=300)["spec"]["terminationGracePeriodSeconds"] == 300
    # Not cut without a bound; a short grace is kept; none set counts as the API's 30 s.
    assert build_pod(long)["spec"]["terminationGracePeriodSeconds"] == 8 * 24 * 3600
    short = shadowpod()
    short["spec"]["pod"]["spec"]["terminationGracePeriodSeconds"] = 5
    assert build_pod(short, max_grace_seconds=300)["spec"]["terminationGracePeriodSeconds"] == 5
    assert build_pod(shadowpod(), max_grace_seconds=10)["spec"]["terminationGracePeriodSeconds"] == 10
    assert build_pod(shadowpod(), max_grace_seconds=300)["spec"]["terminationGracePeriodSeconds"] == 30
    assert capped_grace("600", 300) == 30 and capped_grace(True, 300) == 30 and capped_grace(-1, 300) == 30
    # The local pod's deletion asks for a grace: the plan cuts it too.
    deleting = shadowpod(annotations={ANNOTATION_DELETION_GRACE: str(8 * 24 * 3600)})
    terminate = plan(deleting, [pod_of(deleting)], max_grace_seconds=300)
    assert terminate.action is Action.TERMINATE and terminate.grace == 300
    assert plan(deleting, [pod_of(deleting)]).grace == 8 * 24 * 3600


def uids(pods) -> list[str]:
    return [p["metadata"]["uid"] for p in pods]


def test_plan_no_pod_creates():
    decision = plan(shadowpod(), [])
    assert decision.action is Action.CREATE and decision.delete == () and decision.replaced is None


def test_plan_live_pod_is_mirrored():
    shp = shadowpod()
    pod = pod_of(shp)
    decision = plan(shp, [pod])
    assert decision.action is Action.MIRROR and decision.pod == pod and decision.delete == ()


def test_plan_completed_pod_is_mirrored_not_replaced():
    shp = shadowpod(restart_policy="Never")
    pod = pod_of(shp, phase="Failed")
    assert plan(shp, [pod]).action is Action.MIRROR


def test_plan_killed_pod_is_deleted_and_replaced():
    shp = shadowpod()
    evicted = pod_of(shp, phase="Failed", reason="Evicted")
    decision = plan(shp, [evicted])
    assert decision.action is Action.CREATE
    assert uids(decision.delete) == ["pod-1"] and decision.replaced == evicted


def test_plan_waits_while_the_name_is_held_by_a_terminating_pod():
    shp = shadowpod()
    decision = plan(shp, [pod_of(shp, deleting=True)])
    assert decision.action is Action.WAIT and decision.delete == ()


def test_plan_terminating_pod_of_another_name_does_not_block():
    shp = shadowpod()
    assert plan(shp, [pod_of(shp, name="web-0-old", deleting=True)]).action is Action.CREATE


def test_plan_keeps_a_healthy_pod_over_an_older_terminating_one():
    shp = shadowpod()
    dying = pod_of(shp, uid="old", name="web-0-old", created="2025-01-01T00:00:00Z", deleting=True)
    healthy = pod_of(shp, uid="new", created="2025-01-02T00:00:00Z")
    decision = plan(shp, [dying, healthy])
    assert decision.action is Action.MIRROR and decision.pod["metadata"]["uid"] == "new" and decision.delete == ()


def test_plan_extra_pods_are_deleted_oldest_kept():
    shp = shadowpod()
    oldest = pod_of(shp, uid="a", created="2025-01-01T00:00:00Z")
    extra1 = pod_of(shp, uid="b", name="web-0-b", created="2025-01-01T00:00:05Z")
    extra2 = pod_of(shp, uid="c", name="web-0-c", created="2025-01-02T00:00:00Z")
    decision = plan(shp, [extra2, oldest, extra1])
    assert decision.action is Action.MIRROR and decision.pod["metadata"]["uid"] == "a"
    assert uids(decision.delete) == ["b", "c"]


def test_plan_nothing_while_the_shadowpod_is_being_deleted():
    shp = shadowpod(deletionTimestamp="2025-01-01T00:00:00Z")
    assert plan(shp, []).action is Action.NOTHING
    assert plan(shp, [pod_of(shp, phase="Failed", reason="Evicted")]).action is Action.NOTHING


def test_plan_finished_run_whose_pod_vanished_is_not_run_again():
    shp = shadowpod(restart_policy="Never", status={"phase": "Succeeded", "podUID": "pod-1"})
    assert plan(shp, []).action is Action.NOTHING


def test_plan_evicted_run_of_a_never_pod_is_run_again():
    shp = shadowpod(restart_policy="Never", status={"phase": "Running", "podUID": "pod-1"})
    decision = plan(shp, [pod_of(shp, phase="Failed", reason="Evicted")])
    assert decision.action is Action.CREATE


# --- status ------------------------------------------------------------------------------------
def test_status_from_pod_first_pod_leaves_the_conditions_to_the_pod():
    shp = shadowpod()
    pod = pod_of(shp, message="hello", conditions=[
        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2025-01-01T00:00:01Z"}])
    assert status_from_pod(shp, pod) == {
        "phase": "Running",
        "podName": "web-0",
        "podUID": "pod-1",
        "recreations": 0,
        "message": "hello",
        "conditions": None,  # a merge patch's null: removes what an older enforcer mirrored
        "observedGeneration": 1,
        "runCompleted": None,  # said only once the pod has ended
    }


def test_a_condition_change_alone_is_no_status_change():
    """What made ~3.5 status writes per pod: each condition the pod gained was one."""
    shp = shadowpod()
    scheduled = pod_of(shp, phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"}])
    shp["status"] = status_from_pod(shp, scheduled)
    initialized = pod_of(shp, phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"},
                                                           {"type": "Initialized", "status": "True"}])
    assert not status_changed(shp, status_from_pod(shp, initialized))
    assert status_changed(shp, status_from_pod(shp, pod_of(shp, phase="Running")))


def test_conditions_an_older_enforcer_mirrored_are_removed_once():
    shp = shadowpod(status={"phase": "Running", "podName": "web-0", "podUID": "pod-1", "recreations": 0,
                            "observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]})
    desired = status_from_pod(shp, pod_of(shp))
    assert status_changed(shp, desired)
    shp["status"] = {k: v for k, v in desired.items() if v is not None}  # what the merge patch leaves
    assert not status_changed(shp, status_from_pod(shp, pod_of(shp)))


def test_with_recorded_pod_counts_the_next_pod_as_a_recreation():
    shp = shadowpod()
    view = with_recorded_pod(shp, "pod-1")
    assert view["status"]["podUID"] == "pod-1" and view["status"]["podName"] == "web-0"
    assert "status" not in shp, "the ShadowPod itself is not changed"
    assert status_from_pod(view, pod_of(shp, uid="pod-2"))["recreations"] == 1
    assert status_from_pod(view, pod_of(shp, uid="pod-1"))["recreations"] == 0
    assert status_without_pod(view, "creating pod web-0 failed: x")["podUID"] == "pod-1"


def test_with_recorded_pod_never_overrides_what_the_status_records():
    shp = shadowpod(status={"podUID": "pod-7", "podName": "web-0", "recreations": 3})
    assert with_recorded_pod(shp, "pod-1") is shp
    assert with_recorded_pod(shp, None) is shp
    assert with_recorded_pod(shadowpod(), "") == shadowpod()


@pytest.mark.parametrize("status,phase,deleting,may_wait", [
    (None, "Pending", False, True),  # the first pod, not started: Pending and Running can be one write
    (None, None, False, True),  # no phase yet reads as Pending
    (None, "Running", False, False),  # it runs: say so now
    (None, "Succeeded", False, False),  # ended: run_completed reads it
    (None, "Pending", True, False),  # being deleted
    ({"phase": "Pending", "message": "creating pod web-0 failed: exceeded quota"}, "Pending", False, False),
    ({"podUID": "pod-0", "recreations": 1}, "Pending", False, False),  # a recreation: counted at once
])
def test_status_may_wait_table(status, phase, deleting, may_wait):
    shp = shadowpod(status=status)
    assert status_may_wait(shp, pod_of(shp, phase=phase, deleting=deleting)) is may_wait


def test_status_counts_a_new_pod_uid_as_one_recreation_and_is_idempotent():
    shp = shadowpod(status={"phase": "Running", "podName": "web-0", "podUID": "pod-1", "recreations": 2})
    pod = pod_of(shp, uid="pod-2", phase="Pending")
    status = status_from_pod(shp, pod)
    assert status["recreations"] == 3 and status["podUID"] == "pod-2" and status["phase"] == "Pending"
    shp["status"] = status
    assert status_from_pod(shp, pod)["recreations"] == 3
    assert not status_changed(shp, status_from_pod(shp, pod))


def test_status_without_pod_keeps_the_last_pod_so_the_next_counts():
    shp = shadowpod(status={"phase": "Running", "podName": "web-0", "podUID": "pod-1", "recreations": 1,
                            "conditions": [{"type": "Ready", "status": "True"}]})
    status = status_without_pod(shp, "creating pod web-0 failed: exceeded quota")
    assert status == {"phase": "Pending", "podName": "web-0", "podUID": "pod-1", "recreations": 1,
                      "message": "creating pod web-0 failed: exceeded quota", "conditions": None,
                      "observedGeneration": 1, "runCompleted": None}
    shp["status"] = status
    assert status_from_pod(shp, pod_of(shp, uid="pod-2"))["recreations"] == 2


def test_status_changed_ignores_empty_versus_absent_and_fields_we_do_not_own():
    shp = shadowpod(status={"phase": "Running", "podName": "web-0", "podUID": "pod-1", "recreations": 0,
                            "observedGeneration": 1, "somethingElse": "x"})
    desired = status_from_pod(shp, pod_of(shp))
    assert desired["message"] == "" and desired["conditions"] is None
    assert not status_changed(shp, desired)
    assert status_changed(shp, {**desired, "phase": "Pending"})
    assert status_changed(shadowpod(), desired)


def test_bad_recreations_value_reads_as_zero():
    shp = shadowpod(status={"podUID": "pod-1", "recreations": "many"})
    assert status_from_pod(shp, pod_of(shp, uid="pod-2"))["recreations"] == 1
