"""Which remote figures the virtual node reports (vkubelet/kubeletapi/sampler.py): only
those of the remote pods the resolver says are ours, under the local pod's name, and a
failed read shows as ``resource_scrape_error`` with a warning that says what to fix."""

import logging
from datetime import datetime, timezone

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod
from vkubelet.kubeletapi.sampler import UsageSampler, explain, running_pods, samples_from, targets
from vkubelet.kubeletapi.usage import PodRef, RunningPod

NODE = "kube-offload-r1"
T0 = 1_800_000_000.0


def local_pod(namespace, name, uid, phase="Running"):
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid}, "spec": {"nodeName": NODE}, "status": {"phase": phase}}


REMOTE = {  # local ns/name -> the remote pod our ShadowPod owns
    "demo/web": RemotePod("demo-local", "web"),
    "demo/db": RemotePod("demo-local", "db"),
    "shop/cart": RemotePod("shop-local", "cart"),
}


def resolve(namespace, name, uid=""):
    try:
        return REMOTE[f"{namespace}/{name}"]
    except KeyError:
        raise RequestError(400, f"pod {namespace}/{name} has no running counterpart yet") from None


def item(name, namespace="demo-local", cpu="100m", memory="10Mi", at="2027-01-15T08:00:00Z"):
    return {"metadata": {"name": name, "namespace": namespace}, "timestamp": at, "window": "10s",
            "containers": [{"name": "app", "usage": {"cpu": cpu, "memory": memory}}]}


def test_targets_group_resolved_pods_by_twin_namespace():
    pods = [local_pod("demo", "web", "u1"), local_pod("demo", "db", "u2"), local_pod("shop", "cart", "u3"),
            local_pod("demo", "new", "u4"),  # no remote pod yet
            local_pod("demo", "done", "u5", phase="Succeeded")]
    assert targets(pods, resolve) == {
        "demo-local": {"web": PodRef("demo", "web", "u1"), "db": PodRef("demo", "db", "u2")},
        "shop-local": {"cart": PodRef("shop", "cart", "u3")},
    }


def test_items_of_pods_that_are_not_ours_are_ignored():
    wanted = {"web": PodRef("demo", "web", "u1")}
    # "intruder" is another tenant's pod in the same namespace (copied labels or not): the
    # resolver did not name it, so it is never read, let alone exported.
    samples, problems = samples_from({"items": [item("web"), item("intruder", cpu="8")]}, wanted)
    assert [s.pod for s in samples] == [PodRef("demo", "web", "u1")]
    assert problems == []


def test_a_malformed_item_is_a_problem_not_a_crash():
    samples, problems = samples_from({"items": [item("web", cpu="much")]}, {"web": PodRef("demo", "web", "u1")})
    assert samples == []
    assert problems and "demo-local/web" in problems[0]


def test_explanations_say_what_to_fix():
    kind, message = explain(ApiError(404, "NotFound", "the server could not find the requested resource"), cluster_id="r1", namespace="demo-local")
    assert kind == "unavailable" and "needs metrics-server in the remote cluster" in message
    kind, message = explain(ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request (get pods.metrics.k8s.io)"),
                            cluster_id="r1", namespace="demo-local")
    assert kind == "unavailable"
    kind, message = explain(ApiError(403, "Forbidden", "cannot list resource pods"), cluster_id="r1", namespace="demo-local")
    assert kind == "forbidden" and "consumer twin role" in message


class Pods:
    def __init__(self, pods):
        self.pods = pods

    def list(self):
        return self.pods


def sampler(listings, pods, clock=lambda: T0):
    def list_metrics(namespace):
        found = listings[namespace]
        if isinstance(found, Exception):
            raise found
        return found

    return UsageSampler(local_pods=Pods(pods), resolve_pass=lambda: resolve, list_metrics=list_metrics, cluster_id="r1",
                        node_name=NODE, interval=15, clock=clock)


def test_a_round_reads_each_twin_namespace_once_and_maps_to_local_names():
    calls = []
    pods = [local_pod("demo", "web", "u1"), local_pod("shop", "cart", "u3")]
    s = sampler({"demo-local": {"items": [item("web")]}, "shop-local": {"items": [item("cart", "shop-local", cpu="2")]}}, pods)
    real = s._list_metrics
    s._list_metrics = lambda ns: calls.append(ns) or real(ns)
    state = s.sample_once()
    assert calls == ["demo-local", "shop-local"]
    assert (state.namespaces, state.samples, state.errors) == (2, 2, 0)
    snap = s.snapshot()
    assert [(p.pod.namespace, p.pod.name, p.cpu_nanocores) for p in snap.pods] == [("demo", "web", 100_000_000), ("shop", "cart", 2_000_000_000)]
    assert not snap.scrape_error


def test_a_failing_namespace_keeps_the_others_and_sets_scrape_error(caplog):
    pods = [local_pod("demo", "web", "u1"), local_pod("shop", "cart", "u3")]
    s = sampler({"demo-local": {"items": [item("web")]}, "shop-local": ApiError(403, "Forbidden", "no")}, pods)
    with caplog.at_level(logging.DEBUG, logger="kube_offload.vkubelet.kubelet_api"):
        s.sample_once()
        s.sample_once()
    snap = s.snapshot()
    assert [p.pod.name for p in snap.pods] == ["web"]
    assert snap.scrape_error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "shop-local" in warnings[0].getMessage()  # said once, not every round


def test_pods_that_left_the_node_are_dropped():
    now = [T0]
    pods = [local_pod("demo", "web", "u1"), local_pod("demo", "db", "u2")]
    s = sampler({"demo-local": {"items": [item("web"), item("db")]}}, pods, clock=lambda: now[0])
    s.sample_once()
    assert len(s.snapshot().pods) == 2
    pods.pop()
    s.sample_once()
    assert [p.pod.name for p in s.snapshot().pods] == ["web"]


def test_running_pods_are_those_whose_status_shows_a_running_container():
    started = {"running": {"startedAt": "2027-01-15T08:00:10Z"}}
    web = local_pod("demo", "web", "u1")
    web["status"].update(startTime="2027-01-15T08:00:00Z", containerStatuses=[
        {"name": "app", "state": started},
        {"name": "side", "state": {"running": {}}},  # no startedAt: the pod's start
        {"name": "init", "state": {"waiting": {}}},
    ])
    pending = local_pod("demo", "pending", "u2", phase="Pending")
    done = local_pod("demo", "done", "u3", phase="Succeeded")
    done["status"]["containerStatuses"] = [{"name": "app", "state": started}]
    pod_start = datetime(2027, 1, 15, 8, 0, 0, tzinfo=timezone.utc).timestamp()
    assert running_pods([web, pending, done], now=0.0) == [
        RunningPod(PodRef("demo", "web", "u1"), (("app", pod_start + 10), ("side", pod_start))),
    ]
    bare = local_pod("demo", "bare", "u4")
    bare["status"]["containerStatuses"] = [{"name": "app", "state": {"running": {}}}]
    assert running_pods([bare], now=42.0) == [RunningPod(PodRef("demo", "bare", "u4"), (("app", 42.0),))]
