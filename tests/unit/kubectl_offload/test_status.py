"""``kubectl offload status``: health rules and rows from facts (no cluster), as tables."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload.capacity import encode_remote_capacity
from kube_offload.resources import parse_quantity as q
from kubectl_offload.status import HEALTHY, UNHEALTHY, RemoteFacts, StatusFacts, describe_age, remote_status, report

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(ready="True", reason="RemoteClusterReachable", heartbeat=5, pressure=False):
    conditions = [{"type": "Ready", "status": ready, "reason": reason, "message": "",
                   "lastHeartbeatTime": ts(heartbeat), "lastTransitionTime": ts(600)}]
    if pressure:
        conditions.append({"type": "MemoryPressure", "status": "True", "message": "r-node-0 is short of memory"})
    return {
        "metadata": {"name": "kube-offload-remote-1", "annotations": {c.ANNOTATION_REMOTE_CAPACITY: encode_remote_capacity(
            {"r-node-0": {"cpu": q("3"), "memory": q("8Gi")}}, updated=NOW)}},
        "status": {"allocatable": {"cpu": "7200m", "memory": "28Gi", "pods": "198"}, "conditions": conditions},
    }


def lease(renewed=3, duration=40):
    return {"spec": {"renewTime": (NOW - timedelta(seconds=renewed)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                     "leaseDurationSeconds": duration}}


def consumer(**spec):
    return {
        "metadata": {"name": "local"},
        "spec": {"quota": {"cpu": "4", "pods": "20"}, **spec},
        "status": {"used": {"cpu": "300m", "memory": "64Mi", "pods": "3"},
                   "capacity": {"shareable": {"cpu": "8"}, "freeByNode": {"a": {"cpu": "3", "memory": "8Gi"},
                                                                           "b": {"cpu": "4500m", "memory": "8Gi"}},
                                "pressure": {}, "schedulableNodes": 2, "totalNodes": 2}},
    }


def healthy(**overrides) -> RemoteFacts:
    base = dict(
        cluster_id="remote-1", node=node(), lease=lease(), remote_state="reachable", ping_seconds=0.004,
        consumer=consumer(), twin_requests=[
            {"metadata": {"name": "demo-local"}, "spec": {"localNamespace": "demo"}, "status": {"phase": "Ready"}}],
        reflected={"configmaps": 2, "secrets": 1},
        pods=[{"status": {"phase": "Running"}}, {"status": {"phase": "Running"}}, {"status": {"phase": "Pending"}}],
    )
    base.update(overrides)
    return RemoteFacts(**base)


def test_a_healthy_remote_row():
    row = remote_status(healthy(), NOW, "local")
    assert (row.health, row.problems, row.warnings) == (HEALTHY, [], [])
    assert row.ready == "True" and row.heartbeat_age == 3.0 and row.last_ping_age == 5.0 and row.last_ping_exact
    assert row.advertised == {"cpu": "7200m", "memory": "28Gi", "pods": "198"}
    assert (row.remote_free, row.remote_free_source) == ({"cpu": "7500m", "memory": "16Gi"}, "provider")
    assert row.quota == {"cpu": {"used": "300m", "limit": "4"}, "memory": {"used": "64Mi", "limit": ""},
                         "pods": {"used": "3", "limit": "20"}}
    assert row.quota_mode == "requests"
    assert row.pods == {"Pending": 1, "Running": 2}
    assert row.twins == [{"name": "demo-local", "localNamespace": "demo", "phase": "Ready", "message": ""}]
    assert row.reflected == {"configmaps": 2, "secrets": 1} and row.vkubelet_metrics == "n/a"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"node": None, "lease": None}, "virtual node kube-offload-remote-1 does not exist"),
        ({"node": node(ready="False", reason="RemoteClusterUnreachable")}, "is not Ready (False: RemoteClusterUnreachable)"),
        ({"lease": lease(renewed=95)}, "heartbeat is stale: Lease kube-offload-remote-1 last renewed 95s ago"),
        ({"lease": None}, "has no Lease"),
        ({"remote_state": "unreachable", "remote_error": "unreachable from here while reading /version: refused",
          "consumer": None}, "provider remote-1: unreachable from here"),
        ({"consumer": None}, "admits no consumer 'local'"),
    ],
)
def test_what_makes_a_remote_unhealthy(overrides, problem):
    row = remote_status(healthy(**overrides), NOW, "local")
    assert row.health == UNHEALTHY
    assert any(problem in p for p in row.problems), row.problems


@pytest.mark.parametrize(
    ("overrides", "warning"),
    [
        ({"remote_state": "unread", "remote_error": "no kubeconfig for remote remote-1", "consumer": None},
         "provider remote-1 not read: no kubeconfig"),
        ({"consumer": consumer(cordoned=True)}, "cordoned by provider remote-1"),
        ({"consumer": consumer(drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})}, "consumer local is drained by provider remote-1"),
        ({"twin_requests": [{"metadata": {"name": "x-local"}, "spec": {"localNamespace": "x"},
                             "status": {"phase": "Refused", "message": "exists and is not yours"}}]},
         "twin namespace x-local (for x) refused by the provider: exists and is not yours"),
        ({"node": node(pressure=True)}, "reports MemoryPressure: r-node-0 is short of memory"),
        ({"reflection_warnings": [{"reason": "ReflectionFailed", "count": 3, "lastTimestamp": ts(60), "message": "boom",
                                   "involvedObject": {"kind": "ConfigMap", "namespace": "demo", "name": "cfg"}}]},
         "3 reflection error(s) in the last 15m; latest on configmap/demo/cfg: ReflectionFailed: boom"),
    ],
)
def test_what_only_warns(overrides, warning):
    row = remote_status(healthy(**overrides), NOW, "local")
    assert row.health == HEALTHY, row.problems
    assert any(warning in w for w in row.warnings), row.warnings


def test_old_reflection_errors_are_history():
    old = {"reason": "ReflectionFailed", "count": 1, "lastTimestamp": ts(3600), "message": "old"}
    row = remote_status(healthy(reflection_warnings=[old]), NOW, "local")
    assert row.reflection_errors == 0 and row.warnings == []


def test_not_ready_node_reports_its_last_ping_as_a_bound():
    row = remote_status(healthy(node=node(ready="Unknown", reason="NodeStatusUnknown")), NOW, "local")
    assert row.last_ping_age == 600.0 and row.last_ping_exact is False


def test_unreachable_remote_falls_back_to_the_published_annotation():
    row = remote_status(healthy(remote_state="unreachable", remote_error="x", consumer=None), NOW, "local")
    assert (row.remote_free, row.remote_free_source) == ({"cpu": "3", "memory": "8Gi"}, "annotation")


def test_report_is_unhealthy_when_any_remote_is_or_none_exists():
    good, bad = healthy(), healthy(cluster_id="remote-2", node=None, lease=None)
    assert report(StatusFacts(NOW, "local", [good])).healthy
    assert not report(StatusFacts(NOW, "local", [good, bad])).healthy
    empty = report(StatusFacts(NOW, "local", []))
    assert not empty.healthy and "no remote cluster" in empty.notes[0]
    assert set(report(StatusFacts(NOW, "local", [good])).to_dict()["remotes"][0]) >= {
        "heartbeatAge", "lastPing", "remoteFree", "reflectionErrors", "vkubeletMetrics"}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0s"), (59.9, "59s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3700, "1h1m"),
     (9 * 3600, "9h"), (50 * 3600, "2d2h"), (9 * 86400, "9d")],
)
def test_describe_age_reads_like_kubectl(seconds, text):
    assert describe_age(seconds) == text


@pytest.mark.parametrize(
    ("policy", "mode", "limits_cpu"),
    [
        ({"quotaMode": "hard"}, "hard", {"used": "600m", "limit": "4"}),  # a plain cpu bounds limits.cpu too
        ({"quotaMode": "both"}, "both", {"used": "600m", "limit": "4"}),
        ({}, "requests", {"used": "600m", "limit": ""}),
        ({"quotaMode": "never"}, "", None),  # the provider's mistake: no figures rather than wrong ones
    ],
)
def test_quota_shows_the_mode_and_each_figure_beside_the_usage_it_bounds(policy, mode, limits_cpu):
    counted = consumer(policy=policy)
    counted["status"]["used"]["limits.cpu"] = "600m"
    row = remote_status(healthy(consumer=counted), NOW, "local")
    assert row.quota_mode == mode
    assert row.quota.get("limits.cpu") == limits_cpu
    if limits_cpu is not None:
        assert row.quota["cpu"] == {"used": "300m", "limit": "4"}


# --- slices (docs/slices.md) ------------------------------------------------------------------
def offload_slice(name, pool, asked, phase=None, accepted=None, message=""):
    obj = {"metadata": {"name": name}, "spec": {"pool": pool, "resources": asked}}
    if phase:
        obj["status"] = {"phase": phase, "accepted": accepted or {}, "message": message}
    return obj


def slice_node(name, allocatable, ready="True"):
    base = node(ready=ready)
    base["metadata"] = {"name": f"kube-offload-remote-1-{name}", "labels": {c.LABEL_SLICE: name}}
    base["status"]["allocatable"] = allocatable
    return base


def test_each_slice_shows_asked_accepted_and_its_node():
    facts = healthy(
        slices=[
            offload_slice("gpu", "a100", {"cpu": "2", "nvidia.com/gpu": "1"}, c.SLICE_PHASE_ACCEPTED, {"cpu": "2", "nvidia.com/gpu": "1"}),
            offload_slice("web", "general", {"cpu": "8"}, c.SLICE_PHASE_PARTIAL, {"cpu": "4"},
                          "cpu: asked 8, accepted 4 (quota cpu leaves 4)"),
        ],
        slice_nodes={"gpu": slice_node("gpu", {"cpu": "2", "nvidia.com/gpu": "1"}), "web": slice_node("web", {"cpu": "4"})},
    )
    row = remote_status(facts, NOW, "local")
    assert row.health == HEALTHY
    assert [s["name"] for s in row.slices] == ["gpu", "web"]
    gpu, web = row.slices
    assert gpu == {"name": "gpu", "node": "kube-offload-remote-1-gpu", "ready": "True", "pool": "a100", "phase": "Accepted",
                   "asked": {"cpu": "2", "nvidia.com/gpu": "1"}, "accepted": {"cpu": "2", "nvidia.com/gpu": "1"},
                   "advertised": {"cpu": "2", "nvidia.com/gpu": "1"}, "message": ""}
    assert web["phase"] == "PartiallyAccepted" and web["asked"] == {"cpu": "8"} and web["accepted"] == {"cpu": "4"}
    assert row.warnings == ["slice web only partly accepted by provider remote-1: cpu: asked 8, accepted 4 (quota cpu leaves 4)"]


@pytest.mark.parametrize(
    ("slices", "nodes", "problem", "warning"),
    [
        ([offload_slice("gpu", "a100", {"cpu": "1"}, c.SLICE_PHASE_REFUSED, message="no pool a100")],
         {"gpu": slice_node("gpu", {"pods": "0"})}, None, "slice gpu refused by provider remote-1: no pool a100"),
        ([offload_slice("gpu", "a100", {"cpu": "1"})], {}, "slice gpu has no virtual node", None),
        ([], {"gpu": slice_node("gpu", {"cpu": "1"}, ready="False")}, "slice gpu's virtual node kube-offload-remote-1-gpu is not Ready",
         "slice gpu: no OffloadSlice gpu on provider remote-1"),
    ],
)
def test_what_a_slice_makes_unhealthy_or_warns(slices, nodes, problem, warning):
    row = remote_status(healthy(slices=slices, slice_nodes=nodes), NOW, "local")
    assert (row.health == UNHEALTHY) == (problem is not None)
    if problem:
        assert any(problem in p for p in row.problems), row.problems
    if warning:
        assert any(warning in w for w in row.warnings), row.warnings
