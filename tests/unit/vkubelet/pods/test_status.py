"""Remote pod status -> local pod status, as the vkubelet writes it through pods/status."""

import copy

import pytest

from vkubelet.shared.ip_remapping import RemappingSettings
from vkubelet.pods import status as st
from vkubelet.pods.status import desired_status, failed_status, remote_pod_ips, remote_unschedulable, status_patch

HOST = "127.0.0.1"


def _local(**status) -> dict:
    base = {
        "phase": "Pending",
        "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }
    base.update(status)
    return {
        "metadata": {"name": "web-1", "namespace": "demo", "uid": "u1", "resourceVersion": "42"},
        "spec": {"containers": [{"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                 "initContainers": [{"name": "init"}]},
        "status": base,
    }


def _remote(restarts: int = 0, **status) -> dict:
    base = {
        "phase": "Running",
        "qosClass": "BestEffort",
        "hostIP": "10.9.9.9",
        "hostIPs": [{"ip": "10.9.9.9"}],
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}],
        "startTime": "2026-01-01T00:00:05Z",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"},
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:06Z", "observedGeneration": 3},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:06Z"},
        ],
        "containerStatuses": [
            {
                "name": "app",
                "image": "nginx",
                "imageID": "docker.io/nginx@sha256:1",
                "containerID": "containerd://abc",
                "ready": True,
                "started": True,
                "restartCount": restarts,
                "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}},
            }
        ],
    }
    base.update(status)
    return {"metadata": {"name": "web-1", "namespace": "demo-local"}, "status": base}


def _shadowpod(recreations: int) -> dict:
    return {"status": {"phase": "Running", "recreations": recreations}}


def test_running_remote_pod_maps_onto_the_local_status():
    desired = desired_status(_local(), _remote(), _shadowpod(0), HOST)
    assert desired["phase"] == "Running"
    assert desired["podIP"] == "10.0.0.7" and desired["podIPs"] == [{"ip": "10.0.0.7"}]
    # hostIP is the virtual node's, never the remote node's.
    assert desired["hostIP"] == HOST and desired["hostIPs"] == [{"ip": HOST}]
    assert desired["startTime"] == "2026-01-01T00:00:05Z"
    assert desired["containerStatuses"][0]["containerID"] == "containerd://abc"
    assert "qosClass" not in desired  # immutable, kept as the local apiserver set it


def test_pod_scheduled_stays_local_other_conditions_come_from_remote():
    desired = desired_status(_local(), _remote(), None, HOST)
    types = [c["type"] for c in desired["conditions"]]
    assert types == ["PodScheduled", "Initialized", "Ready", "ContainersReady"]
    assert desired["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    ready = next(c for c in desired["conditions"] if c["type"] == "Ready")
    assert "observedGeneration" not in ready  # the remote pod's generation means nothing here


def test_local_only_conditions_survive_stale_kubelet_ones_do_not():
    local = _local(
        conditions=[
            {"type": "PodScheduled", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
            {"type": "PodReadyToStartContainers", "status": "True"},
        ]
    )
    types = [c["type"] for c in desired_status(local, _remote(), None, HOST)["conditions"]]
    assert "DisruptionTarget" in types
    assert "PodReadyToStartContainers" not in types  # the remote pod does not report it


def test_restart_count_adds_recreations():
    desired = desired_status(_local(), _remote(restarts=2), _shadowpod(3), HOST)
    assert desired["containerStatuses"][0]["restartCount"] == 5


def test_restart_count_never_decreases():
    local = _local(containerStatuses=[{"name": "app", "restartCount": 7, "ready": True, "image": "nginx", "imageID": "", "state": {}}])
    # The remote pod was recreated: fresh counter, one recreation so far.
    desired = desired_status(local, _remote(restarts=0), _shadowpod(1), HOST)
    assert desired["containerStatuses"][0]["restartCount"] == 7


def test_init_container_statuses_map_too():
    remote = _remote(initContainerStatuses=[{"name": "init", "restartCount": 1, "ready": True, "image": "b", "imageID": "", "state": {"terminated": {"exitCode": 0}}}])
    desired = desired_status(_local(), remote, _shadowpod(2), HOST)
    assert desired["initContainerStatuses"][0]["restartCount"] == 3


def test_local_start_time_is_kept_once_set():
    local = _local(startTime="2025-12-31T23:59:59Z")
    assert desired_status(local, _remote(), None, HOST)["startTime"] == "2025-12-31T23:59:59Z"


def test_terminal_local_pod_is_left_alone():
    assert desired_status(_local(phase="Succeeded"), _remote(), None, HOST) is None
    assert status_patch(_local(phase="Failed"), None) is None


def test_patch_is_none_when_nothing_changed():
    local = _local()
    desired = desired_status(local, _remote(), _shadowpod(0), HOST)
    local["status"].update(copy.deepcopy(desired))
    # The apiserver writes lastProbeTime: null; that is not a difference.
    for cond in local["status"]["conditions"]:
        cond["lastProbeTime"] = None
    assert status_patch(local, desired_status(local, _remote(), _shadowpod(0), HOST)) is None


def test_patch_carries_the_resource_version_and_only_changes():
    local = _local()
    desired = desired_status(local, _remote(), None, HOST)
    patch = status_patch(local, desired)
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert patch["status"]["phase"] == "Running"
    assert "qosClass" not in patch["status"]


def test_reason_and_message_are_cleared_when_the_remote_pod_drops_them():
    local = _local(phase="Running", reason="Evicted", message="gone")
    patch = status_patch(local, desired_status(local, _remote(), None, HOST))
    assert patch["status"]["reason"] is None and patch["status"]["message"] is None


def test_ip_is_kept_while_a_recreated_remote_pod_has_none_yet():
    local = _local(phase="Running", podIP="10.0.0.7", podIPs=[{"ip": "10.0.0.7"}])
    remote = _remote(phase="Pending")
    del remote["status"]["podIP"], remote["status"]["podIPs"]
    patch = status_patch(local, desired_status(local, remote, _shadowpod(1), HOST))
    assert "podIP" not in patch["status"] and "podIPs" not in patch["status"]
    assert patch["status"]["phase"] == "Pending"


def test_remote_unschedulable_message():
    remote = _remote(
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available"}],
    )
    assert remote_unschedulable(remote) == "0/2 nodes are available"
    assert remote_unschedulable(_remote()) is None


def test_failed_status_terminates_containers_and_readiness():
    local = _local(
        phase="Running",
        conditions=[{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        containerStatuses=[{"name": "app", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "t0"}}}],
    )
    failed = failed_status(local, "NotOffloaded", "namespace demo is not offloaded", "t1")
    assert failed["phase"] == "Failed" and failed["reason"] == "NotOffloaded"
    assert next(c for c in failed["conditions"] if c["type"] == "Ready")["status"] == "False"
    container = failed["containerStatuses"][0]
    assert container["ready"] is False
    assert container["state"] == {"terminated": {"exitCode": 137, "reason": "NotOffloaded", "finishedAt": "t1", "startedAt": "t0"}}
    assert failed_status(_local(phase="Succeeded"), "x", "y", "t") is None


# --- pod IP remapping (vkubelet/shared/ip_remapping.py) ----------------------------------------------------
def _remapping():
    return RemappingSettings(remote_pod_cidr="10.0.0.0/16,fd00:10::/64",
                             remote_pod_cidr_remapped="10.100.0.0/16,fd00:99::/64").remote_pod_ips


def test_pod_ips_are_shown_in_the_remote_cidr_as_the_local_cluster_sees_it():
    remote = _remote(podIP="10.0.3.7", podIPs=[{"ip": "10.0.3.7"}, {"ip": "fd00:10::7"}])
    desired = desired_status(_local(), remote, _shadowpod(0), HOST, _remapping())
    assert desired["podIP"] == "10.100.3.7"
    assert desired["podIPs"] == [{"ip": "10.100.3.7"}, {"ip": "fd00:99::7"}]
    assert desired["hostIP"] == HOST  # the virtual node's address: not a pod address, never remapped
    assert remote_pod_ips(remote) == ["10.0.3.7", "fd00:10::7"]
    assert _remapping().outside(remote_pod_ips(remote)) == []
    # The remote pod itself is not touched: translation is on the way into the local status.
    assert remote["status"]["podIP"] == "10.0.3.7"


def test_a_pod_ip_outside_the_remote_pod_cidr_is_not_shown():
    """The provider chose it (no honest provider's pod has one: the enforcer refuses
    hostNetwork): a local client would reach whatever it is."""
    remote = _remote(podIP="192.168.5.5", podIPs=[{"ip": "192.168.5.5"}])
    local = _local(podIP="10.100.0.7", podIPs=[{"ip": "10.100.0.7"}])
    desired = desired_status(local, remote, _shadowpod(0), HOST, _remapping())
    # Cleared rather than kept: the last good address may be another pod's by now.
    assert desired["podIP"] is None and desired["podIPs"] is None
    assert status_patch(local, desired)["status"]["podIP"] is None
    assert _remapping().outside(remote_pod_ips(remote)) == ["192.168.5.5"]
    # One family inside, one outside: the one inside is shown.
    dual = _remote(podIP="10.0.3.7", podIPs=[{"ip": "10.0.3.7"}, {"ip": "fd00:77::7"}])
    desired = desired_status(_local(), dual, _shadowpod(0), HOST, _remapping())
    assert desired["podIP"] == "10.100.3.7" and desired["podIPs"] == [{"ip": "10.100.3.7"}]


def test_pod_ips_are_valid_addresses_one_per_family():
    remote = _remote(podIP="10.0.3.7", podIPs=[{"ip": "10.0.3.7"}, {"ip": "10.0.3.8"}, {"ip": "not-an-ip"}, {"ip": "fd00:10::7"}])
    desired = desired_status(_local(), remote, _shadowpod(0), HOST, _remapping())
    assert desired["podIPs"] == [{"ip": "10.100.3.7"}, {"ip": "fd00:99::7"}]
    # With no range configured, every valid address is shown as it is.
    desired = desired_status(_local(), remote, _shadowpod(0), HOST)
    assert desired["podIP"] == "10.0.3.7" and desired["podIPs"] == [{"ip": "10.0.3.7"}, {"ip": "fd00:10::7"}]


def test_without_remapping_pod_ips_are_the_remote_ones():
    desired = desired_status(_local(), _remote(podIP="10.0.3.7", podIPs=[{"ip": "10.0.3.7"}]), _shadowpod(0), HOST)
    assert desired["podIP"] == "10.0.3.7" and desired["podIPs"] == [{"ip": "10.0.3.7"}]


def _killed(remote: dict) -> dict:
    """What a 1.27+ kubelet reports of a pod it deletes: terminal phase, containers ended."""
    remote["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    remote["status"]["phase"] = "Failed"
    remote["status"]["conditions"][2].update(status="False")
    remote["status"]["containerStatuses"][0].update(
        ready=False, state={"terminated": {"exitCode": 137, "reason": "Error"}})
    return remote


def test_a_remote_pod_deleted_behind_our_back_does_not_end_the_local_pod():
    """The enforcer recreates it: the local pod must stay (a terminal phase is final)."""
    local = _local(phase="Running")
    desired = desired_status(local, _killed(_remote()), _shadowpod(0), HOST)
    assert "phase" not in desired  # kept as it is: Running
    assert desired["containerStatuses"][0]["state"] == {"terminated": {"exitCode": 137, "reason": "Error"}}
    assert {c["type"]: c["status"] for c in desired["conditions"]}["Ready"] == "False"
    assert "phase" not in status_patch(local, desired)["status"]


def test_a_remote_pod_ending_because_the_local_one_is_deleted_ends_it():
    local = _local(phase="Running")
    local["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert desired_status(local, _killed(_remote()), _shadowpod(0), HOST)["phase"] == "Failed"
    # and a remote pod that ends by itself (not deleted) still ends the local one
    finished = _remote(phase="Succeeded")
    assert desired_status(_local(phase="Running"), finished, _shadowpod(0), HOST)["phase"] == "Succeeded"


# --- which remote pod events go to the work queue's fast lane --------------------------------
def _pod(phase: str = "Pending", ready: str | None = None, restarts: int | None = None, deleting: bool = False) -> dict:
    status: dict = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready}]
    if restarts is not None:
        status["containerStatuses"] = [{"name": "app", "restartCount": restarts}]
    meta: dict = {"name": "web", "namespace": "twin"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T07:00:00Z"
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    "event, old, new, hurry",
    [
        ("ADDED", None, _pod("Pending"), False),  # just made: nothing to show yet
        ("ADDED", None, {"metadata": {}}, False),  # no status at all yet
        ("ADDED", None, _pod("Running", "True"), True),  # found running (a restart, a relist)
        ("MODIFIED", _pod("Pending"), _pod("Pending", "False"), False),  # scheduled, initialising
        ("MODIFIED", _pod("Pending", "False"), _pod("Running", "False"), True),  # running
        ("MODIFIED", _pod("Running", "False"), _pod("Running", "True"), True),  # ready
        ("MODIFIED", _pod("Running", "True", 0), _pod("Running", "True", 1), True),  # restarted
        ("MODIFIED", _pod("Running", "True"), _pod("Running", "True", deleting=True), True),
        ("MODIFIED", _pod("Running", "True"), _pod("Succeeded", "False"), True),
        ("DELETED", _pod("Running", "True"), _pod("Running", "True"), True),
    ],
)
def test_worth_hurrying_is_the_milestones_a_user_waits_for(event, old, new, hurry):
    assert st.worth_hurrying(event, old, new) is hurry


def test_a_resync_is_never_hurried():
    pod = _pod("Running", "True")
    assert st.worth_hurrying("MODIFIED", pod, pod) is False


# --- what the provider writes is bounded (vkubelet/shared/provider_bounds.py) -----------------------
def test_messages_and_reasons_the_provider_writes_are_cut_at_their_bounds():
    remote = _remote(message="m" * 100_000, reason="Q" * 1000)
    remote["status"]["conditions"][2].update(message="r" * 100_000, reason="R" * 1000)
    remote["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "reason": "T" * 1000, "message": "t" * 100_000}}
    remote["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "W" * 1000, "message": "w" * 100_000}}
    desired = desired_status(_local(), remote, _shadowpod(0), HOST)
    assert desired["message"] == "m" * 4096 and desired["reason"] == "Q" * 128
    ready = next(c for c in desired["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "r" * 4096 and ready["reason"] == "R" * 128
    [app] = desired["containerStatuses"]
    # Two containers (app, init): each gets the kubelet's 4 KiB, within 12 KiB for the pod.
    assert app["lastState"]["terminated"] == {"exitCode": 1, "reason": "T" * 128, "message": "t" * 4096}
    assert app["state"]["waiting"] == {"reason": "W" * 128, "message": "w" * 4096}


def test_many_containers_share_twelve_kib_of_state_messages():
    local = _local()
    local["spec"]["containers"] = [{"name": f"c{i}"} for i in range(6)]
    statuses = [{"name": f"c{i}", "restartCount": 0, "state": {"terminated": {"exitCode": 1, "message": "x" * 10_000}}}
                for i in range(6)]
    desired = desired_status(local, _remote(containerStatuses=statuses), _shadowpod(0), HOST)
    # 7 containers with the init one: 12288 // 7 bytes each, as the kubelet's normalizeStatus divides it.
    assert [len(s["state"]["terminated"]["message"]) for s in desired["containerStatuses"]] == [12288 // 7] * 6


def test_only_the_kubelets_conditions_come_from_the_remote_pod_each_once():
    remote = _remote()
    remote["status"]["conditions"] += [
        {"type": "example.com/provider-says", "status": "True", "message": "trust me"},
        {"type": "target-health.example.com/lb", "status": "True"},  # posing as a local readiness gate
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},  # the enforcer recreates it
        {"type": "Ready", "status": "False", "reason": "Second"},
    ]
    types = [c["type"] for c in desired_status(_local(), remote, None, HOST)["conditions"]]
    assert types == ["PodScheduled", "Initialized", "Ready", "ContainersReady"]
    ready = next(c for c in desired_status(_local(), remote, None, HOST)["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"  # the first Ready, not the one after it


def test_container_statuses_only_of_the_local_pods_containers_one_each():
    app = _remote()["status"]["containerStatuses"][0]
    mounts = [{"name": f"m{i}", "mountPath": f"/m{i}"} for i in range(50)]
    statuses = [{**app, "volumeMounts": mounts}, {**app, "name": "ghost"}, {**app, "restartCount": 99}]
    desired = desired_status(_local(), _remote(containerStatuses=statuses, initContainerStatuses=[
        {"name": "init", "restartCount": 0, "state": {}}, {"name": "app", "restartCount": 0, "state": {}}]), None, HOST)
    [status] = desired["containerStatuses"]
    assert status["name"] == "app" and status["restartCount"] == 0  # the first one
    assert len(status["volumeMounts"]) == 1  # the local container mounts one volume
    assert [s["name"] for s in desired["initContainerStatuses"]] == ["init"]
    # Nothing of a container the pod does not have: the field is left as it was.
    assert "containerStatuses" not in desired_status(_local(), _remote(containerStatuses=[{**app, "name": "ghost"}]), None, HOST)


def test_a_phase_the_api_does_not_define_leaves_the_local_phase():
    assert "phase" not in desired_status(_local(phase="Running"), _remote(phase="Hacked"), None, HOST)


# --- the first write held back while the remote pod is Pending (issue 39) ---------------------
def test_the_first_write_may_wait_while_the_remote_pod_is_pending():
    assert st.first_write_may_wait(_local(), _remote(phase="Pending"))
    assert st.first_write_may_wait(_local(), {"metadata": {}, "status": {}})  # just created: no phase yet


@pytest.mark.parametrize("why, local, remote", [
    ("the remote pod runs", _local(), _remote()),
    ("the remote pod ended", _local(), _remote(phase="Failed")),
    ("something is mirrored already", _local(hostIP=HOST), _remote(phase="Pending")),
    ("the local pod is going", {**_local(), "metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}},
     _remote(phase="Pending")),
    ("the remote pod is going", _local(), {**_remote(phase="Pending"),
                                            "metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}}),
])
def test_the_first_write_never_waits_for_anything_but_a_pending_remote_pod(why, local, remote):
    assert not st.first_write_may_wait(local, remote), why


def test_a_mirror_write_always_sets_what_ends_the_hold():
    # The hold's "nothing mirrored yet" is the absence of hostIP: every write sets it.
    desired = desired_status(_local(), _remote(phase="Pending"), None, HOST)
    patch = status_patch(_local(), desired)
    assert patch is not None and patch["status"]["hostIP"] == HOST
    merged = _local(**patch["status"])
    assert not st.first_write_may_wait(merged, _remote(phase="Pending"))


# --- ephemeral containers (kubectl debug) -------------------------------------------------------------
DEBUGGER = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app"}
RUNNING = {"name": "debugger", "image": "busybox:1.36", "imageID": "x", "ready": False, "restartCount": 0,
           "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}}}


def _debugged(**status) -> dict:
    local = _local(**status)
    local["spec"]["ephemeralContainers"] = [dict(DEBUGGER)]
    return local


def test_ephemeral_container_statuses_come_from_the_remote_pod():
    desired = desired_status(_debugged(), _remote(ephemeralContainerStatuses=[RUNNING, {**RUNNING, "name": "stranger"}]),
                             _shadowpod(2), HOST)
    assert desired["ephemeralContainerStatuses"] == [RUNNING], "only the local pod's own, never restarted by recreations"


def test_an_ephemeral_container_the_remote_pod_does_not_report_keeps_its_local_word():
    refused = {**RUNNING, "state": {"waiting": {"reason": "ProviderRefused", "message": "not granted"}}}
    desired = desired_status(_debugged(ephemeralContainerStatuses=[refused]), _remote(), _shadowpod(0), HOST)
    assert desired["ephemeralContainerStatuses"] == [refused]
    assert "ephemeralContainerStatuses" not in desired_status(_debugged(), _remote(), _shadowpod(0), HOST)


def test_an_ephemeral_container_a_replaced_remote_pod_never_runs_is_shown_ended():
    remote = _remote()
    remote["metadata"]["annotations"] = {"kube-offload.io/ephemeral-containers-not-run": "debugger"}
    desired = desired_status(_debugged(ephemeralContainerStatuses=[RUNNING]), remote, _shadowpod(1), HOST)
    [shown] = desired["ephemeralContainerStatuses"]
    terminated = shown["state"]["terminated"]
    assert terminated["reason"] == "PodReplaced" and terminated["startedAt"] == "2026-01-01T00:01:00Z"
    assert terminated["finishedAt"] == "2026-01-01T00:00:05Z" and not shown["ready"]
# --- in-place resize (kube_offload/pod_resize.py, vkubelet/pods/resizes.py) ------------------------
def _resized(cpu: str) -> tuple[dict, dict, dict]:
    """(local pod asking ``cpu``, its ShadowPod whose template has 100m, the remote pod
    whose kubelet reports a resize in progress and the resources it actuated)."""
    local = _local(phase="Running")
    local["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    shadowpod = {"metadata": {"name": "web-1"}, "status": {"recreations": 0},
                 "spec": {"pod": {"metadata": {}, "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}}}]}}}}
    remote = _remote()
    remote["status"]["conditions"].append({"type": "PodResizeInProgress", "status": "True", "observedGeneration": 7})
    remote["status"]["containerStatuses"][0]["resources"] = {"requests": {"cpu": "100m"}}
    remote["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "100m"}
    return local, shadowpod, remote


def test_a_carried_resize_shows_the_remote_kubelets_conditions_and_container_resources():
    local, shadowpod, remote = _resized("100m")
    local["status"]["conditions"].append({"type": "PodResizePending", "status": "True", "reason": "Deferred"})
    status = desired_status(local, remote, shadowpod, HOST)
    assert {"type": "PodResizeInProgress", "status": "True"} in status["conditions"], "observedGeneration is the remote's"
    assert not any(c["type"] == "PodResizePending" for c in status["conditions"]), "our own verdict is over"
    assert status["containerStatuses"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert status["containerStatuses"][0]["allocatedResources"] == {"cpu": "100m"}


def test_a_resize_the_provider_did_not_take_keeps_the_pending_condition_written_for_it():
    local, shadowpod, remote = _resized("500m")
    pending = {"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": "exceeded quota"}
    local["status"]["conditions"].append(pending)
    status = desired_status(local, remote, shadowpod, HOST)
    resize = [c for c in status["conditions"] if c["type"].startswith("PodResize")]
    assert resize == [pending], "the remote kubelet's word is about the old resources"
