"""``/metrics/resource`` and ``/stats/summary`` of the virtual node: the kubelet's formats
(vkubelet/kubeletapi/stats.py), read back with a Prometheus text parser, and served over
real HTTPS by the kubelet API with a sampler fed from remote PodMetrics JSON."""

import json
import threading

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from vkubelet.kubeletapi import stats
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod
from vkubelet.kubeletapi.sampler import UsageSampler
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.tls import ServerContext, serving_files
from support.kubelet_https import get
from vkubelet.kubeletapi.usage import ContainerSample, PodRef, PodSample, UsageLedger

T0 = 1_800_000_000.0
WEB = PodRef("demo", "web", "uid-web")
NODE = "kube-offload-r1"


def snapshot_of(*samples, scrape_error=False, now=T0):
    ledger = UsageLedger(started=T0 - 600)
    ledger.record(samples, on_node=[s.pod.uid for s in samples], now=now, scrape_error=scrape_error)
    return ledger.snapshot(now)


def web(at=T0, cpu=250_000_000, memory=64 << 20):
    return PodSample(WEB, at, 15.0, (ContainerSample("app", cpu, memory),))


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def values(family):
    return {tuple(sorted(s.labels.items())): (s.value, s.timestamp) for s in family.samples}


# --- Prometheus text ---------------------------------------------------------------------------
@pytest.mark.parametrize("value, text", [
    (0, "0"), (1, "1"), (15.0, "15"), (0.25, "0.25"), (3.75, "3.75"), (123456, "123456"),
    (67108864, "6.7108864e+07"), (1795428000.5, "1.7954280005e+09"), (1.7e-05, "1.7e-05"), (0.0001, "0.0001"),
])
def test_values_are_written_as_client_golang_writes_them(value, text):
    assert stats.format_value(value) == text


def test_resource_metrics_have_the_kubelet_families_labels_and_timestamps():
    text = stats.resource_metrics(snapshot_of(web()))
    found = families(text)
    assert set(found) == {
        "container_cpu_usage_seconds", "container_memory_working_set_bytes", "container_start_time_seconds",
        "node_cpu_usage_seconds", "node_memory_working_set_bytes", "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes", "resource_scrape_error", "scrape_error",
    }  # the parser drops a counter's _total suffix from the family name
    container = (("container", "app"), ("namespace", "demo"), ("pod", "web"))
    pod = (("namespace", "demo"), ("pod", "web"))
    assert values(found["container_cpu_usage_seconds"])[container] == (3.75, T0)
    assert values(found["container_memory_working_set_bytes"])[container] == (64 << 20, T0)
    assert values(found["container_start_time_seconds"])[container] == (T0 - 15, None)
    assert values(found["pod_cpu_usage_seconds"])[pod] == (3.75, T0)
    assert values(found["pod_memory_working_set_bytes"])[pod] == (64 << 20, T0)
    assert values(found["node_cpu_usage_seconds"])[()] == (3.75, T0)
    assert values(found["node_memory_working_set_bytes"])[()] == (64 << 20, T0)
    assert values(found["resource_scrape_error"])[()] == (0, None)
    assert found["container_cpu_usage_seconds"].type == "counter"
    assert found["node_memory_working_set_bytes"].type == "gauge"
    # The exact lines metrics-server's decoder matches on (name, then '{' or ' ').
    assert 'container_cpu_usage_seconds_total{container="app",namespace="demo",pod="web"} 3.75 1800000000000\n' in text
    assert "\nnode_cpu_usage_seconds_total 3.75 1800000000000\n" in text
    assert "# TYPE node_cpu_usage_seconds_total counter\n" in text


def test_families_are_sorted_and_each_declared_once():
    text = stats.resource_metrics(snapshot_of(web(), PodSample(PodRef("a", "x", "u2"), T0, 10, (ContainerSample("c", 1, 1),))))
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names) == sorted(set(names))
    pods = [line for line in text.splitlines() if line.startswith("pod_cpu_usage_seconds_total")]
    assert pods[0].startswith('pod_cpu_usage_seconds_total{namespace="a",pod="x"}')


def test_an_idle_node_serves_no_node_figures_only_the_error_gauge():
    text = stats.resource_metrics(snapshot_of(scrape_error=True))
    found = families(text)
    assert set(found) == {"resource_scrape_error", "scrape_error"}
    assert values(found["resource_scrape_error"])[()] == (1, None)
    assert "(Deprecated since 1.29.0)" in text


def test_label_values_are_escaped():
    odd = PodSample(PodRef("demo", 'we"b', "u"), T0, 10, (ContainerSample("a\\b", 1, 1),))
    text = stats.resource_metrics(snapshot_of(odd))
    assert 'container="a\\\\b",namespace="demo",pod="we\\"b"' in text
    assert families(text)["container_cpu_usage_seconds"].samples[0].labels["pod"] == 'we"b'


# --- Summary ------------------------------------------------------------------------------------
def test_summary_has_the_kubelet_shape():
    doc = stats.summary(snapshot_of(web()), node_name=NODE, now=T0 + 3)
    node = doc["node"]
    assert node["nodeName"] == NODE
    assert node["startTime"] == "2027-01-15T07:50:00Z"
    assert node["cpu"] == {"time": "2027-01-15T08:00:00Z", "usageNanoCores": 250_000_000, "usageCoreNanoSeconds": 3_750_000_000}
    assert node["memory"] == {"time": "2027-01-15T08:00:00Z", "workingSetBytes": 64 << 20}
    [pod] = doc["pods"]
    assert pod["podRef"] == {"name": "web", "namespace": "demo", "uid": "uid-web"}
    assert pod["startTime"] == "2027-01-15T07:59:45Z"
    [container] = pod["containers"]
    assert container["name"] == "app"
    assert container["cpu"]["usageNanoCores"] == 250_000_000
    assert container["memory"]["workingSetBytes"] == 64 << 20
    assert pod["cpu"]["usageCoreNanoSeconds"] == 3_750_000_000


def test_an_idle_node_summary_claims_no_rate():
    doc = stats.summary(snapshot_of(), node_name=NODE, now=T0)
    assert doc["pods"] == []
    assert "usageNanoCores" not in doc["node"]["cpu"]
    assert doc["node"]["memory"]["workingSetBytes"] == 0


# --- served over HTTPS --------------------------------------------------------------------------
class Pods:
    def __init__(self, pods):
        self.pods = pods

    def list(self):
        return self.pods


def local_pod(name, uid):
    return {"metadata": {"namespace": "demo", "name": name, "uid": uid}, "spec": {"nodeName": NODE}, "status": {"phase": "Running"}}


def pod_metrics(name, cpu, memory, at="2027-01-15T08:00:00Z"):
    return {"metadata": {"name": name, "namespace": "demo-local"}, "timestamp": at, "window": "15s",
            "containers": [{"name": "app", "usage": {"cpu": cpu, "memory": memory}}]}


@pytest.fixture
def served(kubelet_auth):
    def resolve(namespace, pod, uid=""):
        if pod != "web":
            raise RequestError(400, "not offloaded yet")
        return RemotePod("demo-local", "web-remote")

    listing = {"items": [pod_metrics("web-remote", "250m", "64Mi"), pod_metrics("not-ours", "4", "1Gi")]}
    sampler = UsageSampler(
        local_pods=Pods([local_pod("web", "uid-web"), local_pod("pending", "uid-p")]),
        resolve_pass=lambda: resolve, list_metrics=lambda ns: listing, cluster_id="r1", node_name=NODE, interval=15,
        clock=lambda: T0 + 1,
    )
    sampler.sample_once()
    files = serving_files("", "", node_address="127.0.0.1", node_name=NODE)
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()), usage=sampler)
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    files.cleanup()


def test_metrics_resource_is_served_with_the_offloaded_pod_only(served):
    response, body = get(served, "/metrics/resource")
    assert response.status == 200
    assert response.getheader("Content-Type") == stats.PROMETHEUS_CONTENT_TYPE
    text = body.decode()
    cpu = values(families(text)["container_cpu_usage_seconds"])
    assert cpu == {(("container", "app"), ("namespace", "demo"), ("pod", "web")): (3.75, T0)}
    assert "not-ours" not in text and "web-remote" not in text and "demo-local" not in text


def test_stats_summary_is_json(served):
    response, body = get(served, "/stats/summary?only_cpu_and_memory=true")
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    doc = json.loads(body)
    assert [p["podRef"]["name"] for p in doc["pods"]] == ["web"]
    assert doc["node"]["memory"]["workingSetBytes"] == 64 << 20


def test_only_get_is_served(served):
    assert get(served, "/metrics/resource", "POST")[0].status == 405


def test_metrics_off_is_a_404_that_says_so(kubelet_auth):
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()), usage=None)
    from vkubelet.kubeletapi.paths import parse_request_path

    with pytest.raises(RequestError) as info:
        app.usage_document(parse_request_path("/stats/summary"))
    assert info.value.status == 404
    assert "--kubelet-metrics-interval=0" in info.value.message


def test_stats_summary_lists_a_running_pod_before_its_first_sample(kubelet_auth):
    fresh = local_pod("fresh", "uid-fresh")
    fresh["status"]["containerStatuses"] = [{"name": "app", "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}]
    sampler = UsageSampler(
        local_pods=Pods([fresh]), resolve_pass=lambda: lambda *a: RemotePod("demo-local", "fresh"),
        list_metrics=lambda ns: {"items": []}, cluster_id="r1", node_name=NODE, interval=15, clock=lambda: T0,
    )
    app = KubeletApi(resolver=None, remote=client.ApiClient(), cluster_id="r1",
                     access=kubelet_auth.access_control(kubelet_auth.Reviews()), usage=sampler)
    from vkubelet.kubeletapi.paths import parse_request_path

    # No sampling round has run yet: the pod is there, with zeros.
    doc = json.loads(app.usage_document(parse_request_path("/stats/summary"))[1])
    assert [p["podRef"] for p in doc["pods"]] == [{"name": "fresh", "namespace": "demo", "uid": "uid-fresh"}]
    container = doc["pods"][0]["containers"][0]
    assert (container["name"], container["startTime"]) == ("app", "2027-01-15T08:00:00Z")
    assert (container["cpu"]["usageNanoCores"], container["cpu"]["usageCoreNanoSeconds"], container["memory"]["workingSetBytes"]) == (0, 0, 0)
    assert "usageNanoCores" not in doc["node"]["cpu"]  # the node claims no rate without a sample
    # /metrics/resource does not carry zero counters (metrics-server would drop the pod).
    assert "fresh" not in app.usage_document(parse_request_path("/metrics/resource"))[1].decode()
