"""The local status of ephemeral containers the provider refuses (vkubelet/pods/debugging.py)."""

from vkubelet.pods.debugging import refused_statuses

LOCAL = {
    "metadata": {"name": "web", "namespace": "demo", "resourceVersion": "7"},
    "spec": {"containers": [{"name": "app"}], "ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36"}]},
    "status": {"ephemeralContainerStatuses": []},
}


def test_a_refused_ephemeral_container_waits_with_the_refusal_where_kubectl_debug_prints_it():
    statuses = refused_statuses(LOCAL, [("debugger", "not granted; grant with X: true")], "cluster r refuses it")
    assert statuses == [{
        "name": "debugger", "image": "busybox:1.36", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"waiting": {"reason": "ProviderRefused", "message": "cluster r refuses it: not granted; grant with X: true"}},
    }]
    said = {**LOCAL, "status": {"ephemeralContainerStatuses": statuses}}
    assert refused_statuses(said, [("debugger", "not granted; grant with X: true")], "cluster r refuses it") is None
    assert refused_statuses(LOCAL, [], "cluster r refuses it") is None
