"""Local pod -> remote pod, the node's declared feature, and where the endpoint listens."""

import pytest

from kube_offload import constants as c
from vkubelet.kubelet_api import WEBSOCKET_FEATURE, bind_address, declared_features_patch
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod, choose_remote_pod
from vkubelet.settings import Settings

NODE = "kube-offload-remote-1"


def local_pod(name="web", namespace="demo", uid="uid-1", node=NODE):
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {"nodeName": node}}


def remote_pod(name="web", namespace="demo-local", *, origin=("demo", "web", "uid-1"), cluster="local", created="2026-01-01T00:00:00Z", deleting=False):
    meta = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": created,
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: cluster},
        "annotations": {
            c.ANNOTATION_ORIGIN_NAMESPACE: origin[0],
            c.ANNOTATION_ORIGIN_NAME: origin[1],
            c.ANNOTATION_ORIGIN_UID: origin[2],
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return {"metadata": meta}


def choose(local, candidates, pod_uid=""):
    return choose_remote_pod(
        local, candidates, key="demo/web", node_name=NODE, cluster_id="remote-1", local_cluster_id="local", pod_uid=pod_uid
    )


def test_the_twin_pod_is_found():
    assert choose(local_pod(), [remote_pod()]) == RemotePod("demo-local", "web")


def test_enforce_same_name_twins_are_found_by_their_origin_not_their_namespace():
    assert choose(local_pod(), [remote_pod(namespace="demo")]) == RemotePod("demo", "web")


@pytest.mark.parametrize("local", [None, local_pod(node="worker-1")])
def test_pods_not_bound_to_this_node_are_404(local):
    with pytest.raises(RequestError, match=f"not bound to virtual node {NODE}") as info:
        choose(local, [remote_pod()])
    assert info.value.status == 404


def test_a_request_for_another_uid_is_404():
    with pytest.raises(RequestError) as info:
        choose(local_pod(), [remote_pod()], pod_uid="uid-0")
    assert info.value.status == 404
    assert choose(local_pod(), [remote_pod()], pod_uid="uid-1") == RemotePod("demo-local", "web")


@pytest.mark.parametrize(
    "candidate",
    [
        remote_pod(cluster="another-consumer"),  # not ours
        remote_pod(origin=("demo", "web", "uid-0")),  # an older pod of the same name
        remote_pod(origin=("other", "web", "uid-1")),  # another local pod
    ],
)
def test_remote_pods_that_are_not_this_pods_twin_are_never_used(candidate):
    with pytest.raises(RequestError, match="no running counterpart in remote cluster remote-1") as info:
        choose(local_pod(), [candidate])
    assert info.value.status == 400


def test_no_remote_pod_yet_is_a_400_kubectl_can_show():
    with pytest.raises(RequestError) as info:
        choose(local_pod(), [])
    assert info.value.status == 400
    assert "try again" in info.value.message


def test_the_live_pod_wins_over_one_being_deleted_then_the_newest():
    old_dying = remote_pod(namespace="a", created="2026-01-03T00:00:00Z", deleting=True)
    live_old = remote_pod(namespace="b", created="2026-01-01T00:00:00Z")
    live_new = remote_pod(namespace="c", created="2026-01-02T00:00:00Z")
    assert choose(local_pod(), [old_dying, live_old, live_new]) == RemotePod("c", "web")
    assert choose(local_pod(), [old_dying]) == RemotePod("a", "web")


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
