"""bench/apirequests.py: parsing an apiserver's /metrics and audit log, diffing, per-pod
tables. The texts below are shaped as kube-apiserver 1.37 writes them."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from support.bench_scripts import load_bench_script

ar = load_bench_script("apirequests.py")

METRICS_BEFORE = """\
# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.005"} 12
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} 40
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 80
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 500
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 1042
"""

# 30 s later: 10 offloaded pods' worth of ShadowPod creates (each admitted with a Pod
# dry-run) and more pod status patches.
METRICS_AFTER = METRICS_BEFORE.replace(
    'verb="PATCH",version="v1"} 80', 'verb="PATCH",version="v1"} 110'
).replace('verb="WATCH",version="v1"} 3', 'verb="WATCH",version="v1"} 4') + """\
apiserver_request_total{code="201",component="apiserver",dry_run="",group="offloading.kube-offload.io",resource="shadowpods",scope="resource",subresource="",verb="POST",version="v1alpha1"} 10
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
"""


def test_parse_prometheus_reads_labels_values_and_skips_comments() -> None:
    samples = ar.parse_prometheus(METRICS_BEFORE)
    assert samples[("go_goroutines", ())] == 1042
    key = ("apiserver_request_total", (("code", "409"), ("component", "apiserver"), ("dry_run", ""), ("group", ""),
                                       ("resource", "pods"), ("scope", "resource"), ("subresource", ""), ("verb", "POST"),
                                       ("version", "v1")))
    assert samples[key] == 2
    bucket = [v for (name, labels), v in samples.items()
              if name == "apiserver_request_duration_seconds_bucket" and ("le", "+Inf") in labels]
    assert bucket == [40]


def test_parse_prometheus_keeps_only_the_names_asked() -> None:
    samples = ar.parse_prometheus(METRICS_BEFORE, names=["apiserver_request_total"])
    assert {name for name, _ in samples} == {"apiserver_request_total"}
    assert len(samples) == 6


def test_parse_prometheus_unescapes_label_values_and_reads_special_values() -> None:
    text = ('weird{path="a\\"b\\\\c\\nd",x="1"} +Inf\n'
            'weird{path="plain"} NaN 1700000000000\n'
            'no_labels 3.5e2\n')
    samples = ar.parse_prometheus(text)
    assert samples[("weird", (("path", 'a"b\\c\nd'), ("x", "1")))] == math.inf
    assert math.isnan(samples[("weird", (("path", "plain"),))])
    assert samples[("no_labels", ())] == 350


@pytest.mark.parametrize("line", ["apiserver_request_total{code=\"200\"}", "apiserver_request_total{code=200} 1",
                                  "apiserver_request_total{code=\"200\"} lots"])
def test_parse_prometheus_refuses_a_malformed_sample_naming_the_line(line: str) -> None:
    with pytest.raises(ar.MetricsFormatError, match="line 2|bad label|not a number"):
        ar.parse_prometheus("# TYPE apiserver_request_total counter\n" + line + "\n")


def test_request_counts_sum_over_codes_and_name_verbs_as_the_api_does() -> None:
    counts = ar.request_counts(ar.parse_prometheus(METRICS_BEFORE))
    assert counts == Counter({
        ("create", "pods"): 42,  # 201 and 409 together: a refused create is work too
        ("patch", "pods/status"): 80,
        ("list", "pods"): 7,
        ("watch", "pods"): 3,
        ("get", "/readyz"): 500,
    })


def test_delta_between_two_scrapes_tells_dry_runs_apart() -> None:
    before = ar.request_counts(ar.parse_prometheus(METRICS_BEFORE))
    after = ar.request_counts(ar.parse_prometheus(METRICS_AFTER))
    assert ar.delta(before, after) == Counter({
        ("patch", "pods/status"): 30,
        ("watch", "pods"): 1,
        ("create", "shadowpods"): 10,
        ("create", "pods (dry run)"): 10,
    })


def test_delta_refuses_a_counter_that_went_down() -> None:
    with pytest.raises(ValueError, match="restarted"):
        ar.delta(Counter({("get", "pods"): 10}), Counter({("get", "pods"): 3}))


@pytest.mark.parametrize(("user", "agent", "client"), [
    ("system:serviceaccount:kube-offload:kube-offload-enforcer", "kube-offload-enforcer/0.1", "ours/enforcer"),
    ("system:serviceaccount:kube-offload:kube-offload-vkubelet", "kube-offload-vkubelet/0.1 (kube-offload-remote-1)",
     "ours/vkubelet"),
    ("system:serviceaccount:kube-offload-tenant-local:consumer", "kube-offload-vkubelet/0.1 (kube-offload-remote-1)",
     "ours/vkubelet (as consumer)"),
    ("kwok-admin", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/4b6a2c3/replicaset-controller",
     "control-plane/kube-controller-manager/replicaset-controller"),
    ("kwok-admin", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/4b6a2c3/system:serviceaccount:kube-system:"
                   "endpointslice-controller", "control-plane/kube-controller-manager/endpointslice-controller"),
    ("system:kube-scheduler", "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/4b6a2c3/scheduler",
     "control-plane/kube-scheduler/scheduler"),
    ("system:apiserver", "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/4b6a2c3", "control-plane/kube-apiserver"),
    ("kwok-admin", "kwok-controller/v0.0.0 (linux/amd64) kubernetes/$Format", "kwok"),
    ("kwok-admin", "kwok/v0.8.0 (linux/amd64) kwok/v0.8.0", "kwok"),
    ("kwok-admin", "kubectl/v1.37.2 (linux/amd64) kubernetes/4b6a2c3", "bench/kubectl"),
    ("alice", "curl/8.5.0", "other/alice"),
])
def test_client_of_names_ours_by_service_account_and_the_rest_by_user_agent(user: str, agent: str, client: str) -> None:
    assert ar.client_of(user, agent) == client


def _event(stage: str, user: str, agent: str, verb: str, uri: str, ref: dict | None) -> str:
    event = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "2f0c…", "stage": stage,
             "requestURI": uri, "verb": verb, "user": {"username": user, "groups": ["system:authenticated"]},
             "sourceIPs": ["127.0.0.1"], "userAgent": agent, "responseStatus": {"metadata": {}, "code": 201},
             "requestReceivedTimestamp": "2026-11-27T03:40:00.000000Z", "stageTimestamp": "2026-11-27T03:40:00.004000Z"}
    if ref is not None:
        event["objectRef"] = ref
    return json.dumps(event)


ENFORCER = "system:serviceaccount:kube-offload:kube-offload-enforcer"
CONSUMER = "system:serviceaccount:kube-offload-tenant-local:consumer"


def test_audit_counts_by_client_verb_and_resource() -> None:
    lines = [
        _event("ResponseComplete", CONSUMER, "kube-offload-vkubelet/0.1", "create",
               "/apis/offloading.kube-offload.io/v1alpha1/namespaces/t-1/shadowpods",
               {"resource": "shadowpods", "namespace": "t-1", "apiGroup": "offloading.kube-offload.io"}),
        _event("ResponseComplete", ENFORCER, "kube-offload-enforcer/0.1", "create",
               "/api/v1/namespaces/t-1/pods?dryRun=All", {"resource": "pods", "namespace": "t-1"}),
        _event("ResponseComplete", ENFORCER, "kube-offload-enforcer/0.1", "create",
               "/api/v1/namespaces/t-1/pods", {"resource": "pods", "namespace": "t-1"}),
        _event("ResponseComplete", "kwok-admin", "kwok-controller/v0.0.0 (linux/amd64) kubernetes/$Format", "patch",
               "/api/v1/namespaces/t-1/pods/p-1/status", {"resource": "pods", "subresource": "status", "name": "p-1"}),
        _event("ResponseComplete", "kwok-admin", "kubectl/v1.37.2", "get", "/readyz", None),
        # A policy keeping other stages would log them too: one request, one count.
        _event("RequestReceived", ENFORCER, "kube-offload-enforcer/0.1", "create", "/api/v1/namespaces/t-1/pods",
               {"resource": "pods"}),
        "",
        '{"kind":"Event","stage":"ResponseComp',  # torn: the apiserver is still writing it
    ]
    assert ar.audit_counts(lines) == Counter({
        ("ours/vkubelet (as consumer)", "create", "shadowpods"): 1,
        ("ours/enforcer", "create", "pods (dry run)"): 1,
        ("ours/enforcer", "create", "pods"): 1,
        ("kwok", "patch", "pods/status"): 1,
        ("bench/kubectl", "get", "(non-resource)"): 1,
    })
    assert ar.by_client(ar.audit_counts(lines))["ours/enforcer"] == 2


def _window(pods: int, seconds: float, requests: dict, clients: dict | None = None, cpu: dict | None = None):
    return ar.Window(pods=pods, seconds=seconds, requests={k: Counter(v) for k, v in requests.items()},
                     clients={k: Counter(v) for k, v in (clients or {}).items()}, cpu=cpu or {})


def test_request_table_per_pod_with_small_rows_folded_and_totals() -> None:
    local = _window(100, 5, {"local": {("create", "pods"): 100, ("patch", "pods/status"): 200, ("get", "leases"): 2},
                             "remote-1": {("get", "leases"): 3}})
    offloaded = _window(100, 8, {"local": {("create", "pods"): 100, ("patch", "pods/status"): 150},
                                 "remote-1": {("create", "shadowpods"): 100, ("create", "pods (dry run)"): 100,
                                              ("get", "leases"): 4}})
    lines = ar.request_table({"local pod": local, "offloaded pod": offloaded})
    rows = {tuple(line.split()[:3]): line.split()[-2:] for line in lines[1:]}
    assert rows[("local", "create", "pods")] == ["1.00", "1.00"]
    assert rows[("local", "patch", "pods/status")] == ["2.00", "1.50"]
    assert rows[("remote-1", "create", "shadowpods")] == ["0.00", "1.00"]
    # leases: 0.02-0.04 per pod everywhere, folded
    assert ("local", "get", "leases") not in rows
    assert [line.split()[-2:] for line in lines if line.startswith("local ") and " (other) " in line] == [["0.02", "0.00"]]
    assert [line.split()[-2:] for line in lines if line.startswith("remote-1") and " all " in line] == [["0.03", "2.04"]]
    totals = {line[:20].strip(): line.split()[-2:] for line in ar.totals_table({"l": local, "o": offloaded}, "local")[1:]}
    assert totals == {"local apiserver": ["3.02", "2.50"], "remote apiservers": ["0.03", "2.04"],
                      "all apiservers": ["3.05", "4.54"]}


def test_client_table_totals_per_client_and_rows() -> None:
    offloaded = _window(10, 8, {}, clients={"remote-1": {("ours/enforcer", "create", "pods"): 10,
                                                         ("ours/enforcer", "create", "pods (dry run)"): 10,
                                                         ("kwok", "patch", "pods/status"): 20}})
    lines = ar.client_table({"offloaded pod": offloaded})
    assert any(line.split() == ["remote-1", "ours/enforcer", "2.00"] for line in lines)
    assert any(line.split() == ["remote-1", "kwok", "2.00"] for line in lines)
    assert any(line.split() == ["remote-1", "ours/enforcer", "create", "pods", "(dry", "run)", "1.00"] for line in lines)
    assert ar.client_table({"offloaded pod": _window(10, 8, {})}) == []


def test_cpu_table_in_ms_per_pod_with_sums() -> None:
    window = _window(100, 10, {}, cpu={"ours/vkubelet-remote-1": 2.0, "ours/webhook": 0.01, "local/kube-apiserver": 5.0,
                                       "remote-1/kube-apiserver": 3.0, "local/etcd": 1.0})
    lines = ar.cpu_table({"offloaded pod": window})
    rows = {line[:40].strip(): float(line.split()[-1]) for line in lines[1:]}
    assert rows["ours/vkubelet-remote-1"] == 20.0
    assert "ours/webhook" not in rows  # 0.1 ms per pod: under the floor
    assert rows["sum: ours"] == pytest.approx(20.1)
    assert rows["sum: kube-apiservers"] == 80.0
    assert rows["sum: rest of the control planes"] == 10.0


def test_background_line_scales_the_idle_rate_to_each_phase() -> None:
    idle = _window(0, 10, {"local": {("get", "leases"): 30}, "remote-1": {("get", "leases"): 20}})
    line = ar.background_line(idle, {"local pod": _window(100, 4, {}), "offloaded pod": _window(100, 8, {})})
    assert line == "idle: 5.0 requests/s over all apiservers; at that rate: local pod 0.20 per pod (4 s), offloaded pod 0.40 per pod (8 s)"


def test_complete_length_stops_at_the_last_newline(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    assert ar.complete_length(log) == len(b'{"a":1}\n{"b":2}\n')
    log.write_bytes(b"")
    assert ar.complete_length(log) == 0


COMPONENT_METRICS = """\
# HELP kube_offload_api_requests_total Requests sent to an API server, by cluster (local, remote), verb and HTTP status code ('error': no answer).
# TYPE kube_offload_api_requests_total counter
kube_offload_api_requests_total{cluster="remote",code="201",verb="CREATE"} 100.0
kube_offload_api_requests_total{cluster="remote",code="409",verb="CREATE"} 3.0
kube_offload_api_requests_total{cluster="local",code="200",verb="PATCH"} 250.0
kube_offload_api_requests_total{cluster="local",code="200",verb="WATCH"} 4.0
# HELP kube_offload_api_requests_created Requests sent to an API server, by cluster (local, remote), verb and HTTP status code ('error': no answer).
# TYPE kube_offload_api_requests_created gauge
kube_offload_api_requests_created{cluster="remote",code="201",verb="CREATE"} 1.7962e+09
"""


def test_component_counts_by_cluster_and_verb_and_their_table() -> None:
    counts = ar.component_counts(ar.parse_prometheus(COMPONENT_METRICS))
    assert counts == Counter({("remote", "create"): 103, ("local", "patch"): 250, ("local", "watch"): 4})
    window = ar.Window(pods=100, seconds=1, requests={}, components={"vkubelet-remote-1": counts})
    lines = ar.component_table({"offloaded pod": window})
    assert ["vkubelet-remote-1", "local", "patch", "2.50"] in [line.split() for line in lines]
    assert ar.component_table({"offloaded pod": ar.Window(pods=1, seconds=1, requests={})}) == []


def test_work_report_holds_every_table_and_leaves_out_empty_ones() -> None:
    offloaded = _window(10, 8, {"remote-1": {("create", "shadowpods"): 10}},
                        clients={"remote-1": {("ours/vkubelet", "create", "shadowpods"): 10}},
                        cpu={"ours/enforcer": 0.5})
    idle = _window(0, 10, {"local": {("get", "leases"): 20}})
    lines = ar.work_report({"offloaded pod": offloaded}, "local", per="pod, 10 pods", idle=idle)
    assert lines[0] == "API requests per pod, 10 pods (apiserver_request_total after - before each phase):"
    assert lines[1].startswith("idle: 2.0 requests/s")
    assert "By client (audit log):" in lines
    assert "By our process, from its own kube_offload_api_requests_total:" not in lines  # no component figures
    cpu = lines.index("CPU ms per pod, 10 pods (/proc/<pid>/stat of the processes started for the run):")
    assert any(line.split()[0] == "ours/enforcer" and line.split()[-1] == "50.0" for line in lines[cpu + 1:])
    goals = lines.index("Goals (issue 39), per offloaded pod:")
    assert all(line.startswith("  ") for line in lines[cpu + 1:goals - 1]) and lines[goals - 1] == ""
    assert not ar.work_report({"offloaded pod": offloaded}, "local", per="pod")[1].startswith("idle")


def test_goals_report_sets_issue_39s_goals_beside_the_offloaded_pods_figures() -> None:
    local_pod = _window(100, 5, {"local": {("create", "pods"): 500}}, cpu={"local/kube-apiserver": 5.0, "ours/webhook": 0.1})
    offloaded = _window(100, 8, {"local": {("create", "pods"): 100, ("patch", "pods/status"): 450},
                                 "remote-1": {("create", "shadowpods"): 100, ("create", "pods"): 300}},
                        cpu={"ours/vkubelet-remote-1": 1.0, "ours/enforcer-remote-1": 0.4, "local/kube-apiserver": 9.0})
    lines = ar.goals_report({"local pod": local_pod, "offloaded pod": offloaded}, "local")
    assert lines == [
        "Goals (issue 39), per offloaded pod:",
        "  ours CPU 14.0 ms (goal <= 15): meets",  # (1.0 + 0.4) s / 100 pods
        "  all processes' CPU 2.04 x a local pod's (goal <= 2.2): meets",  # 104 ms / 51 ms
        "  requests on the local apiserver 5.50 (goal <= 6): meets",
        "  requests on the remote apiservers 4.00 (goal <= 5): meets",
    ]
    offloaded.cpu["ours/vkubelet-remote-1"] = 2.0
    offloaded.requests["remote-1"][("create", "events")] = 101
    lines = ar.goals_report({"offloaded pod": offloaded}, "local")  # no local pods: no ratio
    assert lines[1] == "  ours CPU 24.0 ms (goal <= 15): misses"
    assert not any("a local pod's" in line for line in lines)
    assert lines[-1] == "  requests on the remote apiservers 5.01 (goal <= 5): misses"
    assert ar.goals_report({"scale up": offloaded}, "local") == []
