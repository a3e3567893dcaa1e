"""The status of the pods of an unreachable virtual node (vkubelet/pods/readiness.py), and how
it combines with the status mapping's patch (vkubelet/pods/status.py)."""

from __future__ import annotations

import pytest

from vkubelet.pods import readiness
from vkubelet.pods import status as st

NOW = "2025-01-01T00:01:00Z"
EARLIER = "2025-01-01T00:00:00Z"
MESSAGE = readiness.unreachable_message("kube-offload-remote-1", "remote-1")


def running_pod(**status_extra) -> dict:
    return {
        "metadata": {"name": "web", "namespace": "demo", "resourceVersion": "7"},
        "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "init"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": EARLIER},
                {"type": "Initialized", "status": "True", "lastTransitionTime": EARLIER},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": EARLIER},
                {"type": "Ready", "status": "True", "lastTransitionTime": EARLIER},
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
            ],
            "containerStatuses": [
                {"name": "app", "ready": True, "restartCount": 2, "state": {"running": {"startedAt": EARLIER}}}
            ],
            "initContainerStatuses": [{"name": "init", "ready": True, "state": {"terminated": {"exitCode": 0}}}],
            **status_extra,
        },
    }


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def test_ready_and_containers_ready_turn_false_with_the_node_reason():
    status = readiness.unreachable_status(running_pod(), MESSAGE, NOW)
    by_type = conditions(status)
    for kind in ("Ready", "ContainersReady"):
        assert by_type[kind]["status"] == "False"
        assert by_type[kind]["reason"] == readiness.REASON_UNREACHABLE == "RemoteClusterUnreachable"
        assert by_type[kind]["message"] == MESSAGE
        assert by_type[kind]["lastTransitionTime"] == NOW
    # The other conditions are kept as they are, ours and other controllers' alike.
    assert by_type["PodScheduled"]["status"] == "True" and by_type["Initialized"]["status"] == "True"
    assert by_type["DisruptionTarget"]["reason"] == "DeletionByTaintManager"


def test_containers_turn_unready_and_nothing_else_is_guessed():
    status = readiness.unreachable_status(running_pod(), MESSAGE, NOW)
    (container,) = status["containerStatuses"]
    assert container["ready"] is False
    assert container["restartCount"] == 2 and container["state"] == {"running": {"startedAt": EARLIER}}
    # Phase, IPs and init containers (ready = completed) are not managed here: unchanged.
    assert set(status) == {"conditions", "containerStatuses"}


def test_missing_conditions_are_added():
    pod = running_pod()
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    by_type = conditions(readiness.unreachable_status(pod, MESSAGE, NOW))
    assert by_type["Ready"]["status"] == "False" and by_type["ContainersReady"]["status"] == "False"


def test_an_already_false_condition_keeps_its_transition_time():
    pod = running_pod()
    for cond in pod["status"]["conditions"]:
        if cond["type"] == "ContainersReady":
            cond.update(status="False", reason="ContainersNotReady")
    by_type = conditions(readiness.unreachable_status(pod, MESSAGE, NOW))
    assert by_type["ContainersReady"]["lastTransitionTime"] == EARLIER
    assert by_type["ContainersReady"]["reason"] == readiness.REASON_UNREACHABLE
    assert by_type["Ready"]["lastTransitionTime"] == NOW


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_left_alone(phase):
    assert readiness.unreachable_status(running_pod(phase=phase), MESSAGE, NOW) is None


def test_written_once_then_nothing_to_patch():
    pod = running_pod()
    patch = st.status_patch(pod, readiness.unreachable_status(pod, MESSAGE, NOW))
    assert patch is not None and patch["metadata"]["resourceVersion"] == "7"
    pod["status"].update(patch["status"])
    assert readiness.marked_unreachable(pod)
    # A later reconcile (another clock reading) writes nothing.
    assert st.status_patch(pod, readiness.unreachable_status(pod, MESSAGE, "2025-01-01T00:05:00Z")) is None


def test_marked_only_by_our_reason():
    assert not readiness.marked_unreachable(running_pod())
    pod = running_pod()
    for cond in pod["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond.update(status="False", reason="ContainersNotReady")
    assert not readiness.marked_unreachable(pod)


def test_fresh_truth_needed_only_for_a_marked_pod_until_its_remote_pods_are_listed_again():
    pod = running_pod()
    assert not readiness.needs_fresh_truth(pod, listed_since_reconnect=False)
    pod["status"].update(readiness.unreachable_status(pod, MESSAGE, NOW))
    assert readiness.needs_fresh_truth(pod, listed_since_reconnect=False)
    assert not readiness.needs_fresh_truth(pod, listed_since_reconnect=True)


def test_the_remote_pods_status_replaces_the_mark():
    """Back from the outage, the usual mapping takes Ready/ContainersReady from the remote
    pod (kubelet-owned conditions are never kept from the local copy)."""
    pod = running_pod()
    pod["status"].update(readiness.unreachable_status(pod, MESSAGE, NOW))
    remote = {"status": {"phase": "Running", "podIP": "10.0.0.5", "conditions": [
        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
    ], "containerStatuses": [{"name": "app", "ready": True, "restartCount": 2, "state": {"running": {}}}]}}
    desired = st.desired_status(pod, remote, None, "127.0.0.1")
    by_type = conditions(desired)
    assert by_type["Ready"]["status"] == "True" and by_type["ContainersReady"]["status"] == "True"
    assert desired["containerStatuses"][0]["ready"] is True
