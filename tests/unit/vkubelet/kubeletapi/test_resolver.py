"""Local pod -> remote pod (only through our ShadowPod in our twin namespace), the node's
declared feature, and where the endpoint listens."""

import pytest

from kube_offload import constants as c
from kube_offload.shadowpod import owner_reference
from vkubelet.kubeletapi.loop import WEBSOCKET_FEATURE, bind_address, declared_features_patch
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod, choose_remote_pod
from vkubelet.settings import Settings

NODE = "kube-offload-remote-1"
TWIN = "demo-local"


def local_pod(name="web", namespace="demo", uid="uid-1", node=NODE):
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {"nodeName": node}}


def _origin_meta(name, namespace, origin, cluster):
    return {
        "name": name,
        "namespace": namespace,
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: cluster},
        "annotations": {
            c.ANNOTATION_ORIGIN_NAMESPACE: origin[0],
            c.ANNOTATION_ORIGIN_NAME: origin[1],
            c.ANNOTATION_ORIGIN_UID: origin[2],
        },
    }


def shadowpod(name="web", namespace=TWIN, *, uid="shp-1", origin=("demo", "web", "uid-1"), cluster="local"):
    meta = _origin_meta(name, namespace, origin, cluster)
    meta["uid"] = uid
    return {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod", "metadata": meta}


def remote_pod(name="web", namespace=TWIN, *, owner=None, origin=("demo", "web", "uid-1"), cluster="local",
               created="2026-01-01T00:00:00Z", deleting=False):
    """A pod as the enforcer makes it: controlled by ``owner`` (default: the ShadowPod of
    the same name and namespace); ``owner=False`` for none."""
    meta = _origin_meta(name, namespace, origin, cluster)
    meta["creationTimestamp"] = created
    if owner is None:
        owner = shadowpod(name, namespace)
    if owner:
        meta["ownerReferences"] = [owner_reference(owner)]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return {"metadata": meta}


def choose(local, pods, shadowpods=None, *, twin=TWIN, pod_uid=""):
    return choose_remote_pod(
        local,
        [shadowpod()] if shadowpods is None else shadowpods,
        pods,
        twin=twin,
        twin_problem="" if twin else "namespace demo is not offloaded (kube-offload.io/enabled is not true)",
        key="demo/web",
        node_name=NODE,
        cluster_id="remote-1",
        local_cluster_id="local",
        pod_uid=pod_uid,
    )


def test_the_pod_our_shadowpod_owns_in_our_twin_is_found():
    assert choose(local_pod(), [remote_pod()]) == RemotePod(TWIN, "web")


def test_enforce_same_name_twins_work_the_same():
    assert choose(local_pod(), [remote_pod(namespace="demo")], [shadowpod(namespace="demo")], twin="demo") == RemotePod("demo", "web")


@pytest.mark.parametrize("local", [None, local_pod(node="worker-1")])
def test_pods_not_bound_to_this_node_are_404(local):
    with pytest.raises(RequestError, match=f"not bound to virtual node {NODE}") as info:
        choose(local, [remote_pod()])
    assert info.value.status == 404


def test_a_request_for_another_uid_is_404():
    with pytest.raises(RequestError) as info:
        choose(local_pod(), [remote_pod()], pod_uid="uid-0")
    assert info.value.status == 404
    assert choose(local_pod(), [remote_pod()], pod_uid="uid-1") == RemotePod(TWIN, "web")


def test_a_namespace_with_no_usable_twin_is_a_400_saying_why():
    with pytest.raises(RequestError, match="namespace demo has no twin there .*not offloaded") as info:
        choose(local_pod(), [remote_pod()], twin=None)
    assert info.value.status == 400


# Every one of these looks like the twin pod by its labels and annotations; none is owned
# by our ShadowPod in our twin namespace, so none may ever be exec'd into.
FORGED_ELSEWHERE = shadowpod(namespace="tenant-b-ns")  # another tenant's copy of our ShadowPod
FORGERIES = {
    "another consumer's pod": [remote_pod(cluster="another-consumer")],
    "an older pod of the same name": [remote_pod(origin=("demo", "web", "uid-0"))],
    "another local pod's twin": [remote_pod(origin=("other", "web", "uid-1"))],
    "a copy with our labels in another namespace, owned by a forged ShadowPod there": [
        remote_pod(namespace="tenant-b-ns", owner=FORGED_ELSEWHERE)
    ],
    "a copy in another namespace claiming our ShadowPod as owner": [remote_pod(namespace="tenant-b-ns", owner=shadowpod())],
    "a pod in our twin with no owner": [remote_pod(owner=False)],
    "a pod in our twin owned by an older ShadowPod of the same name": [remote_pod(owner=shadowpod(uid="shp-0"))],
    "a pod in our twin owned by something else": [
        {**remote_pod(), "metadata": {**remote_pod()["metadata"], "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "shp-1", "controller": True}]}}
    ],
}


@pytest.mark.parametrize("candidates", FORGERIES.values(), ids=FORGERIES.keys())
def test_pods_not_owned_by_our_shadowpod_in_our_twin_are_never_used(candidates):
    with pytest.raises(RequestError, match="no running counterpart in remote cluster remote-1") as info:
        choose(local_pod(), candidates, [shadowpod(), FORGED_ELSEWHERE])
    assert info.value.status == 400


@pytest.mark.parametrize(
    "owner",
    [
        shadowpod(cluster="another-consumer"),  # a ShadowPod in our twin without our label
        shadowpod(origin=("demo", "web", "uid-0")),  # for an older local pod of the same name
    ],
)
def test_the_owning_shadowpod_must_be_ours_and_stand_for_this_very_pod(owner):
    with pytest.raises(RequestError, match="no running counterpart"):
        choose(local_pod(), [remote_pod(owner=owner)], [owner])


def test_no_remote_pod_yet_is_a_400_kubectl_can_show():
    with pytest.raises(RequestError) as info:
        choose(local_pod(), [])
    assert info.value.status == 400
    assert "try again" in info.value.message


def test_the_live_pod_wins_over_one_being_deleted_then_the_newest():
    old_dying = remote_pod(name="web", created="2026-01-03T00:00:00Z", deleting=True)
    live_old = remote_pod(name="web", created="2026-01-01T00:00:00Z")
    live_new = {**remote_pod(name="web", created="2026-01-02T00:00:00Z")}
    live_new["metadata"] = {**live_new["metadata"], "name": "web-2"}
    assert choose(local_pod(), [old_dying, live_old, live_new]) == RemotePod(TWIN, "web-2")
    assert choose(local_pod(), [old_dying]) == RemotePod(TWIN, "web")


# --- declaredFeatures ----------------------------------------------------------------------
def test_feature_is_added_sorted_keeping_the_others():
    node = {"status": {"declaredFeatures": ["ZFeature", "AFeature"]}}
    assert declared_features_patch(node) == {"status": {"declaredFeatures": ["AFeature", WEBSOCKET_FEATURE, "ZFeature"]}}


def test_no_patch_when_declared_or_no_node():
    assert declared_features_patch({"status": {"declaredFeatures": [WEBSOCKET_FEATURE]}}) is None
    assert declared_features_patch(None) is None
    assert declared_features_patch({"status": {}}) == {"status": {"declaredFeatures": [WEBSOCKET_FEATURE]}}


# --- settings -----------------------------------------------------------------------------
def test_listens_on_the_node_address_unless_told_otherwise():
    assert bind_address(Settings(cluster_id="r", local_cluster_id="l", node_address="10.1.2.3")) == "10.1.2.3"
    assert bind_address(Settings(cluster_id="r", local_cluster_id="l", kubelet_bind_address="0.0.0.0")) == "0.0.0.0"


def test_cert_and_key_go_together():
    from vkubelet.settings import SettingsError

    with pytest.raises(SettingsError, match="--kubelet-tls-cert and --kubelet-tls-key"):
        Settings(cluster_id="r", local_cluster_id="l", kubelet_tls_cert="/x.crt").validate()
    Settings(cluster_id="r", local_cluster_id="l", kubelet_tls_cert="/x.crt", kubelet_tls_key="/x.key").validate()


class Pod(dict):
    """A local pod a weak reference can follow."""


def test_a_pod_not_running_yet_leaves_no_reference_cycle_behind():
    """Issue 39: the refusal is raised, not kept in a local of the resolver's frame. A kept
    one is a cycle (exception -> traceback -> frame -> exception) that holds the frames of
    every caller and what they hold (the usage sampler's list of all pods): garbage for
    the collector, and kept until the next thaw once a full collection froze it
    (kube_offload/runtime/gc_freeze.py). Without the collector, nothing may hold the pod."""
    import gc
    import weakref

    pod = Pod(local_pod())
    held = weakref.ref(pod)
    gc.disable()
    try:
        try:
            choose(pod, [])
        except RequestError as exc:
            assert "no running counterpart" in exc.message
        del pod
        assert held() is None, "the refused lookup left a reference cycle holding the pod"
    finally:
        gc.enable()
