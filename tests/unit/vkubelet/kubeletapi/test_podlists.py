"""``/pods`` and ``/runningpods/`` shaped as a kubelet shapes them (pure), and served over
real HTTPS by the kubelet API from a pod list (the informer's, in the vkubelet)."""

import json
import threading

import pytest
from kubernetes import client

from vkubelet.kubeletapi import podlists
from vkubelet.kubeletapi.paths import PODS, RUNNING_PODS, RequestError, parse_request_path
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.tls import ServerContext, serving_files
from support.kubelet_https import get

NODE = "kube-offload-r1"


def pod(namespace, name, *, phase="Running", statuses=(), containers=("app",)):
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": {"app": name}},
        "spec": {"nodeName": NODE, "containers": [{"name": c, "image": f"img/{c}:1"} for c in containers]},
        "status": {"phase": phase, "containerStatuses": list(statuses)},
    }


def running(name, image=""):
    return {"name": name, "image": image, "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}


def waiting(name):
    return {"name": name, "image": "", "state": {"waiting": {"reason": "ContainerCreating"}}}


def test_pods_is_a_v1_podlist_of_every_bound_pod_whole_and_sorted():
    pods = [pod("b", "web"), pod("a", "db", phase="Succeeded"), pod("a", "cache", phase="Pending")]
    doc = podlists.pod_list(pods)
    assert (doc["kind"], doc["apiVersion"], doc["metadata"]) == ("PodList", "v1", {})
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in doc["items"]] == [("a", "cache"), ("a", "db"), ("b", "web")]
    # Items as a kubelet encodes them: no TypeMeta of their own; the rest untouched.
    assert all("kind" not in p and "apiVersion" not in p for p in doc["items"])
    assert doc["items"][2]["metadata"]["labels"] == {"app": "web"}
    assert doc["items"][2]["spec"] == pods[0]["spec"]
    assert "kind" in pods[0]  # the informer's objects are not modified


def test_runningpods_lists_only_running_containers_in_the_runtimes_shape():
    pods = [
        pod("demo", "web", statuses=[running("app", "docker.io/img/app:1"), waiting("side")], containers=("app", "side")),
        pod("demo", "starting", phase="Pending", statuses=[waiting("app")]),
        pod("demo", "done", phase="Succeeded", statuses=[running("app")]),  # stale status of a finished pod
        pod("demo", "nostatus"),
    ]
    doc = podlists.running_pod_list(pods)
    assert doc == {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [{
            "metadata": {"name": "web", "namespace": "demo", "uid": "uid-web", "creationTimestamp": None},
            "spec": {"containers": [{"name": "app", "image": "docker.io/img/app:1", "resources": {}}]},
            "status": {},
        }],
    }


def test_runningpods_takes_the_spec_image_when_the_status_has_none():
    item = podlists.running_pod(pod("demo", "web", statuses=[running("app")]))
    assert item is not None
    assert item["spec"]["containers"] == [{"name": "app", "image": "img/app:1", "resources": {}}]


@pytest.mark.parametrize("path, endpoint", [("/pods", PODS), ("/pods/", PODS), ("/runningpods/", RUNNING_PODS), ("/runningpods", RUNNING_PODS)])
def test_paths(path, endpoint):
    assert parse_request_path(path).endpoint == endpoint


def test_paths_below_pods_are_not_served():
    with pytest.raises(RequestError) as info:
        parse_request_path("/pods/demo/web")
    assert info.value.status == 404


# --- served -------------------------------------------------------------------------------------
@pytest.fixture
def served(kubelet_auth):
    pods = [pod("demo", "web", statuses=[running("app")]), pod("demo", "pending", phase="Pending")]
    files = serving_files("", "", node_address="127.0.0.1", node_name=NODE)
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()), list_pods=lambda: pods)
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    files.cleanup()


def test_pods_and_runningpods_are_served_as_json(served):
    response, body = get(served, "/pods")
    assert (response.status, response.getheader("Content-Type")) == (200, "application/json")
    assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == ["pending", "web"]
    response, body = get(served, "/runningpods/")
    assert response.status == 200
    assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == ["web"]


def test_pods_takes_get_only(served):
    assert get(served, "/pods", "POST")[0].status == 405


def test_pods_without_a_pod_source_is_404(kubelet_auth):
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()))
    with pytest.raises(RequestError) as info:
        app.pods_document(parse_request_path("/pods"))
    assert info.value.status == 404
