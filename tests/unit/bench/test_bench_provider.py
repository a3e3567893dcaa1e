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
