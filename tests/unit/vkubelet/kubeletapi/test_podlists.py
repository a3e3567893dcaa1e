"""``/pods`` and ``/runningpods/`` shaped as a kubelet shapes them (pure), and served over
real HTTPS by the kubelet API from the local pod informer and, for ``/runningpods/``, the
remote pods its resolver finds in the remote caches (informers fed by hand, as a watch
feeds them)."""

import json
import threading

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from kube_offload.shadowpod import owner_reference
from vkubelet.kubeletapi import podlists
from vkubelet.kubeletapi.paths import PODS, RUNNING_PODS, RequestError, parse_request_path
from vkubelet.kubeletapi.resolver import PodResolver
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.tls import ServerContext, serving_files
from support.informers import offline_informer
from support.kubelet_https import get

NODE = "kube-offload-r1"
TWIN = "demo-local"


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


def remote(local, *, phase="Running", statuses=()):
    """``local``'s remote pod: only its status is read here."""
    return {"metadata": {"namespace": TWIN, "name": local["metadata"]["name"]},
            "status": {"phase": phase, "containerStatuses": list(statuses)}}


def test_runningpods_lists_the_containers_the_remote_pod_runs_in_the_runtimes_shape():
    web = pod("demo", "web", containers=("app", "side"))
    starting, done, gone = pod("demo", "starting", phase="Pending"), pod("demo", "done"), pod("demo", "gone")
    remotes = {
        "web": remote(web, statuses=[running("app", "docker.io/img/app:1"), waiting("side")]),
        "starting": remote(starting, phase="Pending", statuses=[waiting("app")]),
        "done": remote(done, phase="Succeeded", statuses=[running("app")]),  # a stale container status
    }
    doc = podlists.running_pod_list([web, starting, done, gone], lambda p: remotes.get(p["metadata"]["name"]))
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


def test_runningpods_reads_the_runtime_not_the_local_status():
    # The local status lags behind (the informer has not seen the sync's write yet) or
    # ahead (the remote pod is gone): the remote pod decides, as a runtime would.
    lagging = pod("demo", "lagging", phase="Pending")
    assert podlists.running_pod(lagging, remote(lagging, statuses=[running("app", "img/app:1")])) is not None
    assert podlists.running_pod(pod("demo", "gone", statuses=[running("app")]), None) is None
    finished = pod("demo", "finished", phase="Failed")
    assert podlists.running_pod(finished, remote(finished, statuses=[running("app")])) is None


def test_runningpods_takes_the_spec_image_when_the_status_has_none():
    web = pod("demo", "web")
    item = podlists.running_pod(web, remote(web, statuses=[running("app")]))
    assert item is not None
    assert item["spec"]["containers"] == [{"name": "app", "image": "img/app:1", "resources": {}}]


@pytest.mark.parametrize("path, endpoint", [("/pods", PODS), ("/pods/", PODS), ("/runningpods/", RUNNING_PODS), ("/runningpods", RUNNING_PODS)])
def test_paths(path, endpoint):
    assert parse_request_path(path).endpoint == endpoint


def test_paths_below_pods_are_not_served():
    with pytest.raises(RequestError) as info:
        parse_request_path("/pods/demo/web")
    assert info.value.status == 404


# --- served ---------------------------------------------------------------------------------------
class Twins:
    """The twin-namespace rule: namespace ``demo`` is offloaded to ``demo-local``."""

    def twin_for(self, name):
        return (TWIN, "") if name == "demo" else (None, f"namespace {name} is not offloaded")


def _origin(local):
    meta = local["metadata"]
    return {
        "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
        "annotations": {
            c.ANNOTATION_ORIGIN_NAMESPACE: meta["namespace"],
            c.ANNOTATION_ORIGIN_NAME: meta["name"],
            c.ANNOTATION_ORIGIN_UID: meta["uid"],
        },
    }


def remote_side(local, *, statuses):
    """``local``'s ShadowPod in the twin and the pod the enforcer made from it."""
    name = local["metadata"]["name"]
    shp = {"apiVersion": "kube-offload.io/v1alpha1", "kind": "ShadowPod",
           "metadata": {"name": name, "namespace": TWIN, "uid": f"shp-{name}", **_origin(local)}}
    made = {"metadata": {"name": name, "namespace": TWIN, "uid": f"remote-{name}", "ownerReferences": [owner_reference(shp)],
                         **_origin(local)},
            "status": {"phase": "Running", "containerStatuses": list(statuses)}}
    return shp, made


class Caches:
    """The vkubelet's three caches the kubelet API reads, and its resolver over them."""

    def __init__(self):
        self.local_pods = offline_informer("local-pods")
        self.remote_pods = offline_informer("remote-pods")
        self.shadowpods = offline_informer("remote-shadowpods")
        self.resolver = PodResolver(local_pods=self.local_pods, remote_pods=self.remote_pods, shadowpods=self.shadowpods,
                                    twins=Twins(), node_name=NODE, cluster_id="r1", local_cluster_id="local")

    def offloaded(self, local, *, remote_statuses):
        self.local_pods.apply(ADDED, local)
        shp, made = remote_side(local, statuses=remote_statuses)
        self.shadowpods.apply(ADDED, shp)
        self.remote_pods.apply(ADDED, made)
        return made


def serve(kubelet_auth, caches):
    files = serving_files("", "", node_address="127.0.0.1", node_name=NODE)
    app = KubeletApi(resolver=caches.resolver, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()), list_pods=caches.local_pods.list)
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return srv, files


@pytest.fixture
def caches():
    return Caches()


@pytest.fixture
def served(kubelet_auth, caches):
    caches.offloaded(pod("demo", "web", statuses=[running("app")]), remote_statuses=[running("app", "docker.io/img/app:1")])
    caches.offloaded(pod("demo", "pending", phase="Pending"), remote_statuses=[waiting("app")])
    srv, files = serve(kubelet_auth, caches)
    yield srv
    srv.shutdown()
    srv.server_close()
    files.cleanup()


def running_names(served):
    response, body = get(served, "/runningpods/")
    assert response.status == 200, body
    return [p["metadata"]["name"] for p in json.loads(body)["items"]]


def test_pods_and_runningpods_are_served_as_json(served):
    response, body = get(served, "/pods")
    assert (response.status, response.getheader("Content-Type")) == (200, "application/json")
    assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == ["pending", "web"]
    response, body = get(served, "/runningpods/")
    assert (response.status, response.getheader("Content-Type")) == (200, "application/json")
    assert [(p["metadata"]["name"], p["spec"]["containers"][0]["image"]) for p in json.loads(body)["items"]] == [
        ("web", "docker.io/img/app:1")
    ]


def test_a_pod_shown_ready_is_running_before_the_local_informer_sees_its_status(served, caches):
    # The status sync has read the remote pod (running) from the remote cache and written
    # Running/Ready to the local pod; the API server shows it, but the local informer
    # still holds the Pending copy until the watch event comes back. A kubelet never
    # shows a pod Ready before its runtime lists it.
    assert (caches.local_pods.get("demo/pending") or {})["status"]["phase"] == "Pending"
    made = caches.remote_pods.get(f"{TWIN}/pending")
    caches.remote_pods.apply(MODIFIED, {**made, "status": {"phase": "Running", "containerStatuses": [running("app")]}})
    assert running_names(served) == ["pending", "web"]


def test_a_pod_whose_remote_pod_is_gone_is_not_running_whatever_its_local_status(served, caches):
    # Deleted gracefully: the remote pod went first, the local pod (its status still
    # Running) goes once the vkubelet has seen that.
    caches.remote_pods.apply(DELETED, caches.remote_pods.get(f"{TWIN}/web"))
    assert running_names(served) == []


def test_a_remote_pod_that_is_not_our_shadowpods_is_not_listed(kubelet_auth, caches):
    # Another tenant's pod carrying our origin label and annotations, owned by no
    # ShadowPod of ours: the resolver's chain, as for logs and exec.
    local = pod("demo", "web")
    caches.local_pods.apply(ADDED, local)
    _, forged = remote_side(local, statuses=[running("app")])
    forged["metadata"]["ownerReferences"] = []
    caches.remote_pods.apply(ADDED, forged)
    srv, files = serve(kubelet_auth, caches)
    try:
        assert running_names(srv) == []
    finally:
        srv.shutdown()
        srv.server_close()
        files.cleanup()


def test_pods_takes_get_only(served):
    assert get(served, "/pods", "POST")[0].status == 405


def test_pods_without_a_pod_source_is_404(kubelet_auth):
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()))
    with pytest.raises(RequestError) as info:
        app.pods_document(parse_request_path("/pods"))
    assert info.value.status == 404


class CountingTwins(Twins):
    def __init__(self):
        self.asked = []

    def twin_for(self, name):
        self.asked.append(name)
        return super().twin_for(name)


def test_one_pass_decides_each_namespace_twin_once_and_resolves_as_resolve_does(caches):
    """A usage-sampling round resolves every pod: the twin rule (a policy parse each time)
    runs once per namespace per pass, and every pod resolves as :meth:`resolve` says."""
    twins = CountingTwins()
    caches.resolver._twins = twins
    names = [f"web-{i}" for i in range(5)]
    for name in names:
        caches.offloaded(pod("demo", name), remote_statuses=[running("app")])
    caches.local_pods.apply(ADDED, pod("other", "x"))
    one_pass = caches.resolver.for_one_pass()
    found = [str(one_pass("demo", name, f"uid-{name}")) for name in names]
    with pytest.raises(RequestError):
        one_pass("other", "x", "uid-x")
    with pytest.raises(RequestError):
        one_pass("other", "x", "uid-x")
    assert twins.asked == ["demo", "other"]
    assert found == [str(caches.resolver.resolve("demo", name, f"uid-{name}")) for name in names]
    # The next pass decides again (a namespace whose policy changed is seen at once).
    caches.resolver.for_one_pass()("demo", names[0], f"uid-{names[0]}")
    assert twins.asked.count("demo") == 2 + len(names)
