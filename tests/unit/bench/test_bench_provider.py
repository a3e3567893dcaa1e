"""bench/bench_provider.py, its pure part: the ShadowPod it creates, histogram quantiles
from Prometheus buckets, percentiles and the per-ShadowPod figure."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from kube_offload import constants as c

_BENCH = Path(__file__).resolve().parents[3] / "bench"


def _load():
    sys.path.insert(0, str(_BENCH))  # its sibling modules (apirequests, controlplane)
    spec = importlib.util.spec_from_file_location("bench_provider_for_tests", _BENCH / "bench_provider.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bp = _load()
ar = sys.modules["apirequests"]


def test_shadowpod_is_the_consumers_with_a_unique_origin() -> None:
    one = bp.shadowpod(7, namespace="ns-local", consumer_id="local")
    two = bp.shadowpod(8, namespace="ns-local", consumer_id="local")
    assert one["kind"] == c.SHADOWPOD_KIND and one["metadata"]["namespace"] == "ns-local"
    assert one["metadata"]["name"] == "bench-000007"
    assert one["metadata"]["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: "local"}
    assert one["spec"]["pod"]["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == "local"
    # The template's annotations name the same origin as the ShadowPod's own.
    assert one["spec"]["pod"]["metadata"]["annotations"] == one["metadata"]["annotations"]
    assert one["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] != two["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID]
    assert one["spec"]["pod"]["spec"]["automountServiceAccountToken"] is False


EXPOSITION = """\
# TYPE kube_offload_shadowpod_webhook_request_duration_seconds histogram
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_shadowpods",le="0.005"} 10.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_shadowpods",le="0.01"} 90.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_shadowpods",le="0.025"} 100.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_shadowpods",le="+Inf"} 100.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_endpointslices",le="0.005"} 5.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_endpointslices",le="0.01"} 5.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_endpointslices",le="0.025"} 5.0
kube_offload_shadowpod_webhook_request_duration_seconds_bucket{endpoint="validate_endpointslices",le="+Inf"} 5.0
kube_offload_shadowpod_webhook_request_duration_seconds_count{endpoint="validate_shadowpods"} 100.0
"""


def test_histogram_keeps_the_matching_series_only() -> None:
    samples = ar.parse_prometheus(EXPOSITION)
    buckets = bp.histogram(samples, bp.ENFORCER_WEBHOOK_METRIC, endpoint="validate_shadowpods")
    assert buckets == {0.005: 10.0, 0.01: 90.0, 0.025: 100.0, math.inf: 100.0}
    # The apiserver's series carry a label "name" (the webhook's): it is a label, not an argument.
    apiserver = {("apiserver_admission_webhook_admission_duration_seconds_bucket",
                  (("le", "0.005"), ("name", c.SHADOWPOD_WEBHOOK_NAME), ("operation", "CREATE"))): 4.0,
                 ("apiserver_admission_webhook_admission_duration_seconds_bucket",
                  (("le", "0.005"), ("name", "other.example.com"), ("operation", "CREATE"))): 9.0}
    assert bp.histogram(apiserver, bp.APISERVER_WEBHOOK_METRIC, name=c.SHADOWPOD_WEBHOOK_NAME) == {0.005: 4.0}


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    buckets = {0.005: 10.0, 0.01: 90.0, 0.025: 100.0, math.inf: 100.0}
    p50, bound50 = bp.histogram_quantile(buckets, 0.5)
    assert bound50 == 0.01 and p50 == pytest.approx(0.005 + 0.005 * 40 / 80)
    p99, bound99 = bp.histogram_quantile(buckets, 0.99)
    assert bound99 == 0.025 and p99 == pytest.approx(0.01 + 0.015 * 9 / 10)
    low, bound = bp.histogram_quantile(buckets, 0.05)
    assert bound == 0.005 and low == pytest.approx(0.0025)


def test_histogram_quantile_in_the_inf_bucket_and_empty() -> None:
    assert bp.histogram_quantile({0.01: 50.0, math.inf: 100.0}, 0.99) == (0.01, math.inf)
    assert bp.histogram_quantile({0.01: 0.0, math.inf: 0.0}, 0.5) is None
    assert bp.histogram_quantile({}, 0.5) is None
    with pytest.raises(ValueError, match="quantile"):
        bp.histogram_quantile({0.01: 1.0}, 1.5)


def test_bucket_delta_is_the_window() -> None:
    assert bp.bucket_delta({0.01: 5.0, math.inf: 6.0}, {0.01: 15.0, math.inf: 20.0}) == {0.01: 10.0, math.inf: 14.0}
    assert bp.bucket_delta({}, {0.01: 3.0}) == {0.01: 3.0}


def test_percentile_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert bp.percentile(samples, 0.5) == 50.0
    assert bp.percentile(samples, 0.99) == 99.0
    assert bp.percentile([3.0], 0.99) == 3.0
    assert bp.percentile([], 0.5) is None


def test_per_shadowpod_and_verdict() -> None:
    assert bp.per_shadowpod_kib(100_000, 120_000, 1000) == 20.0
    with pytest.raises(ValueError, match="at least one"):
        bp.per_shadowpod_kib(1, 2, 0)
    assert bp.verdict(20.0, 20.0) == "meets" and bp.verdict(20.1, 20.0) == "misses" and bp.verdict(None, 1.0) == "no figure"


def test_histogram_sum_is_sum_and_count_of_the_matching_series() -> None:
    samples = ar.parse_prometheus(EXPOSITION + """\
kube_offload_shadowpod_webhook_request_duration_seconds_sum{endpoint="validate_shadowpods"} 0.75
kube_offload_shadowpod_webhook_request_duration_seconds_sum{endpoint="validate_endpointslices"} 9.0
kube_offload_shadowpod_webhook_request_duration_seconds_count{endpoint="validate_endpointslices"} 5.0
""")
    assert bp.histogram_sum(samples, bp.ENFORCER_WEBHOOK_METRIC, endpoint="validate_shadowpods") == (0.75, 100.0)
    assert bp.histogram_sum(samples, bp.ENFORCER_WEBHOOK_METRIC) == (9.75, 105.0)
    assert bp.histogram_sum(samples, bp.ENFORCER_WEBHOOK_METRIC, endpoint="nothing") == (0.0, 0.0)


def test_parse_rates() -> None:
    assert bp.parse_rates("5,10, 20,40") == [5.0, 10.0, 20.0, 40.0]
    assert bp.parse_rates("2.5") == [2.5]
    for bad in ("", "0", "5,-1", "nan", "inf"):
        with pytest.raises(ValueError, match="positive"):
            bp.parse_rates(bad)
    with pytest.raises(ValueError):
        bp.parse_rates("ten")


def test_probe_schedule_is_open_loop_at_the_rate() -> None:
    assert bp.probe_schedule(4, 5) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert bp.probe_schedule(10, 0) == []
    offsets = bp.probe_schedule(10, 500)
    assert len(offsets) == 500 and offsets[-1] == pytest.approx(49.9)
    with pytest.raises(ValueError):
        bp.probe_schedule(0, 5)


def test_latency_summary_is_exact() -> None:
    figures = bp.latency_summary(float(i) for i in range(1, 201))
    assert figures == {"n": 200, "p50": 100.0, "p99": 198.0, "max": 200.0}
    assert bp.latency_summary([]) == {"n": 0, "p50": None, "p99": None, "max": None}


def test_thread_group_folds_numbers() -> None:
    assert bp.thread_group('Thread 7036 "Thread-12 (process_request_thread)"') == "Thread-N (process_request_thread)"
    assert bp.thread_group('Thread 7034 "MainThread"') == "MainThread"
    assert bp.thread_group("Thread 7040") == "Thread N"


def _speedscope() -> dict:
    """A py-spy speedscope document: frames shared, samples root first, leaf last."""
    frames = [
        {"name": "Thread._bootstrap", "file": "/usr/lib/python3.11/threading.py", "line": 1002},       # 0
        {"name": "WebhookRequestHandler.do_POST", "file": "/x/enforcer/admission/webhook_server.py", "line": 150},  # 1
        {"name": "ShadowPodValidator.review", "file": "/x/enforcer/admission/shadowpod_webhook.py", "line": 139},  # 2
        {"name": "ShadowPodValidator.review", "file": "/x/enforcer/admission/shadowpod_webhook.py", "line": 171},  # 3
        {"name": "check", "file": "/x/enforcer/admission/dry_run.py", "line": 40},                    # 4
        {"name": "SSLSocket.recv_into", "file": "/usr/lib/python3.11/ssl.py", "line": 1311},         # 5
        {"name": "Ledger.pending", "file": "/x/enforcer/admission/ledger.py", "line": 68},            # 6
        {"name": "Worker.run", "file": "/x/enforcer/shadowpods/controller.py", "line": 10},           # 7
        {"name": "do_POST", "file": "/x/other/webhook_server.py", "line": 3},                         # 8: not ours
        {"name": "WebhookRequestHandler.do_POST", "file": "/x/enforcer/admission/webhook_server.py", "line": 161},  # 9
        {"name": "SSLContext.wrap_socket", "file": "/usr/lib/python3.11/ssl.py", "line": 517},       # 10
    ]
    return {
        "shared": {"frames": frames},
        "profiles": [
            {"type": "sampled", "name": 'Thread 11 "Thread-3 (process_request_thread)"', "unit": "seconds",
             "samples": [[0, 1, 2, 6], [0, 1, 3, 4, 5], [0, 1, 3, 4, 5], [0, 9, 3, 4], [0]],
             "weights": [0.01] * 5},
            {"type": "sampled", "name": 'Thread 12 "Thread-4 (process_request_thread)"', "unit": "seconds",
             "samples": [[0, 9, 2, 6], [0, 10]], "weights": [0.01] * 2},
            {"type": "sampled", "name": 'Thread 13 "shadowpod-worker-1"', "unit": "seconds",
             "samples": [[0, 7], [0, 7], [0, 8, 4]], "weights": [0.01] * 3},
        ],
    }


def test_speedscope_summary_counts_the_samples_inside_a_webhook_request() -> None:
    summary = bp.speedscope_summary(_speedscope())
    assert summary["threads"] == {"Thread-N (process_request_thread)": 7, "shadowpod-worker-N": 3}
    assert summary["thread_count"] == {"Thread-N (process_request_thread)": 2, "shadowpod-worker-N": 1}
    assert summary["ticks"] == 5  # the most samples of one thread
    # Marks count anywhere in the process: the worker's dry run too (frame 4 under another do_POST).
    assert summary["marks"] == {"tls handshake": 1, "dry run": 0}
    # Inside do_POST (either line of it): 5 samples; not the worker's, not another file's do_POST.
    assert summary["within"] == 5
    inclusive = dict(summary["inclusive"])
    # review counted once per sample although two of its lines are frames.
    assert inclusive["ShadowPodValidator.review (shadowpod_webhook.py)"] == 5
    assert inclusive["check (dry_run.py)"] == 3
    assert inclusive["SSLSocket.recv_into (ssl.py)"] == 2
    assert inclusive["Ledger.pending (ledger.py)"] == 2
    assert "Thread._bootstrap (threading.py)" not in inclusive  # above the anchor
    assert "WebhookRequestHandler.do_POST (webhook_server.py)" not in inclusive
    assert summary["self"] == [("Ledger.pending (ledger.py)", 2), ("SSLSocket.recv_into (ssl.py)", 2),
                               ("check (dry_run.py)", 1)]
    assert summary["interval_s"] == 0.01


def test_speedscope_summary_top_and_empty() -> None:
    summary = bp.speedscope_summary(_speedscope(), top=1)
    assert summary["inclusive"] == [("ShadowPodValidator.review (shadowpod_webhook.py)", 5)]
    empty = bp.speedscope_summary({"shared": {"frames": []}, "profiles": []})
    assert empty == {"threads": {}, "thread_count": {}, "ticks": 0, "marks": {"tls handshake": 0, "dry run": 0}, "within": 0,
                     "inclusive": [], "self": [], "interval_s": 0.0}
    marked = bp.speedscope_summary(_speedscope(), marks={"checks": ("check", "dry_run.py")})
    assert marked["marks"] == {"checks": 4}


def test_max_bound_is_the_bucket_of_the_largest() -> None:
    assert bp.max_bound({0.01: 1.0, 0.1: 3.0, 0.5: 4.0, math.inf: 4.0}) == 0.5
    assert bp.max_bound({0.01: 1.0, math.inf: 2.0}) == math.inf
    assert bp.max_bound({0.01: 0.0, math.inf: 0.0}) is None
    assert bp.max_bound({}) is None


def test_arms_run_in_rounds_and_unknown_ones_are_refused() -> None:
    assert bp.arm_order(bp.parse_arms("shared, own"), 2) == ["shared", "own", "shared", "own"]
    assert bp.arm_order(["own"], 1) == ["own"]
    with pytest.raises(SystemExit, match="unknown both"):
        bp.parse_arms("shared,both")


def test_gc_pauses_are_read_where_the_webhooks_run() -> None:
    gc = """\
kube_offload_python_gc_pause_seconds_count{generation="2"} 3.0
"""
    own = ar.parse_prometheus(EXPOSITION + gc)
    health = ar.parse_prometheus(gc.replace("3.0", "9.0"))
    assert bp.gc_source(own, health) is own  # the webhook process's own collector
    shared = ar.parse_prometheus(EXPOSITION)
    assert bp.gc_source(shared, health) is health  # one process: the enforcer's


def _probe(arm: str, p99_bucket: float, rate: float = 10.0) -> dict:
    # 100 observations: 98 under 5 ms, 2 in the bucket up to p99_bucket
    buckets = {0.005: 98.0, p99_bucket: 100.0, math.inf: 100.0}
    return {"rate": rate, "arm": arm, "held": 10_000, "enforcer_buckets": buckets, "client": {"p99": 0.03},
            "rss_kib": 400 * 1024, "cpu_s": 4.0, "count": 100, "load": 3.0}


def test_arm_table_compares_each_arm_with_the_first() -> None:
    lines = bp.arm_table([_probe("shared", 0.1), _probe("own", 0.01)])
    assert "goal p99 <= 20 ms" in lines[0]
    shared, own = lines[2], lines[3]
    # the 99th of 100 is half-way into the last bucket: 52.5 ms (5-100) and 7.5 ms (5-10)
    assert shared.startswith("shared") and " 52.5 ms   1.00 misses " in shared
    assert own.startswith("own") and f" 7.5 ms {7.5 / 52.5:>6.2f} meets " in own
    assert " 400.0 " in own and "40.0ms" in own  # the arm's RSS (MiB) and CPU per create
    assert bp.arm_table([{**_probe("x", 0.1), "arm": None}]) == []
