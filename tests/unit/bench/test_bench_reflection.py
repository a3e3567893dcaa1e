"""bench/bench_reflection.py: the pure parts (nearest-rank percentiles, pairing local and
remote watch timestamps, what counts as a ready slice, the objects the bench writes)."""

from __future__ import annotations

import ipaddress
import math

import pytest

from support.bench_scripts import load_bench_script

br = load_bench_script("bench_reflection.py")


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0], 99, 1.0),
        ([3.0, 1.0, 2.0], 50, 2.0),  # unsorted input
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),  # nearest rank: the 2nd of 4, no interpolation
        (list(range(1, 101)), 99, 99),  # the 99th of 100
        (list(range(1, 101)), 100, 100),
        (list(range(1, 1001)), 99, 990),  # the 990th of 1,000
        (list(range(1, 1001)), 50, 500),
        ([5.0] * 10 + [100.0], 99, 100.0),  # one slow object of 11 is the p99
    ],
)
def test_percentile_is_nearest_rank(values, q, expected):
    assert br.percentile(values, q) == expected


def test_percentile_of_nothing_is_nan_and_a_bad_rank_is_refused():
    assert math.isnan(br.percentile([], 50))
    with pytest.raises(ValueError, match="percentile 0"):
        br.percentile([1.0], 0)
    with pytest.raises(ValueError, match="percentile 101"):
        br.percentile([1.0], 101)


def test_pair_measures_remote_minus_local_by_name_and_names_the_lost():
    local = {"a": 10.0, "b": 11.0, "c": 12.0}
    remote = {"b": 11.5, "a": 10.25, "kube-offload-root-ca.crt": 1.0}  # c never came; the CA bundle was not written by us
    latencies, missing = br.pair(local, remote)
    assert latencies == [0.25, 0.5]  # a then b: name order
    assert missing == ["c"]


def test_pair_keeps_a_negative_latency_rather_than_hiding_a_clock_or_watch_lag():
    latencies, missing = br.pair({"a": 2.0}, {"a": 1.5})
    assert latencies == [-0.5] and missing == []


def test_summary_counts_seen_and_lost_and_takes_p50_p99_max():
    local = {f"o{i:03d}": float(i) for i in range(100)}
    remote = {f"o{i:03d}": i + (i + 1) / 100 for i in range(99)}  # latencies 0.01 .. 0.99, o099 lost
    s = br.Summary.of(local, remote)
    assert (s.count, s.missing) == (99, 1)
    assert s.p50 == pytest.approx(0.50) and s.p99 == pytest.approx(0.99) and s.max == pytest.approx(0.99)
    assert s.to_json()["missing"] == 1


def test_summary_of_nothing_seen_is_nan_not_an_error():
    s = br.Summary.of({"a": 1.0}, {})
    assert s.count == 0 and s.missing == 1 and math.isnan(s.p99) and math.isnan(s.max)


@pytest.mark.parametrize(
    ("endpoints", "ready"),
    [
        (None, False),
        ([], False),
        ([{"addresses": ["10.200.0.1"], "conditions": {"ready": True}}], True),
        ([{"addresses": ["10.200.0.1"], "conditions": {}}], True),  # unset: read as ready (the API's rule)
        ([{"addresses": ["10.200.0.1"]}], True),
        ([{"addresses": ["10.200.0.1"], "conditions": {"ready": False}}], False),
        ([{"addresses": [], "conditions": {"ready": True}}], False),  # no address: nothing to send to
        ([{"addresses": ["10.200.0.1"], "conditions": {"ready": False}},
          {"addresses": ["10.200.0.2"], "conditions": {"ready": True}}], True),
    ],
)
def test_slice_ready_needs_one_ready_endpoint_with_an_address(endpoints, ready):
    assert br.slice_ready({"endpoints": endpoints}) is ready


def test_endpoint_addresses_are_distinct_and_in_the_harness_local_pod_cidr():
    from kube_offload_harness.cluster import KWOK_POD_CIDR

    addresses = [br.endpoint_address(i) for i in range(0, 250 * 256, 97)] + [br.endpoint_address(250 * 256 - 1)]
    assert len(set(addresses)) == len(addresses)
    net = ipaddress.ip_network(KWOK_POD_CIDR)
    for a in addresses:
        ip = ipaddress.ip_address(a)
        assert ip in net and not a.endswith(".0")
    with pytest.raises(ValueError, match="at most 64000"):
        br.endpoint_address(250 * 256)


def test_a_bench_slice_belongs_to_its_service_and_is_reflectable():
    svc = br.service("ns", 7)
    eps = br.endpointslice("ns", 7)
    assert svc["metadata"]["name"] == "service-00007" and "selector" not in svc["spec"]
    assert eps["metadata"]["labels"]["kubernetes.io/service-name"] == "service-00007"
    # Not claimed by the endpointslice controller, which would delete a slice it does not own.
    assert eps["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != "endpointslice-controller.k8s.io"
    assert br.slice_ready(eps)
    assert br.service_of_slice(eps["metadata"]["name"]) == "service-00007"


def test_by_service_keys_slice_stamps_by_their_service_earliest_first():
    assert br.by_service({"service-00001-1": 5.0, "service-00001-2": 4.0, "service-00002-1": 7.0}) == {
        "service-00001": 4.0, "service-00002": 7.0}


def test_object_names_sort_in_write_order():
    names = [br.object_name(br.CONFIGMAPS, i) for i in (0, 9, 10, 999, 4999)]
    assert names == sorted(names) and names[0] == "configmap-00000"


def test_only_reflected_remote_objects_count_as_copies():
    from kube_offload import constants as C

    # The twin's own kube-root-ca.crt (published by the remote cluster) has the local
    # bundle's name but is not a copy of it.
    assert not br.reflected({"metadata": {"name": "kube-root-ca.crt"}})
    ours = {"metadata": {"name": "service-00001-1", "labels": {C.LABEL_REFLECTOR: "endpointslices"}},
            "endpoints": [{"addresses": ["10.200.0.1"], "conditions": {"ready": True}}]}
    assert br.reflected(ours) and br.reflected_and_ready(ours)
    assert not br.reflected_and_ready({**ours, "metadata": {"name": "x"}})


def test_written_keeps_the_local_stamps_of_what_the_bench_wrote():
    stamps = {"kube-root-ca.crt": 1.0, "configmap-00000": 2.0, "configmap-00001": 3.0}
    assert br.written(stamps, ["configmap-00000", "configmap-00001", "configmap-00002"]) == {
        "configmap-00000": 2.0, "configmap-00001": 3.0}


def test_mean_create_time_comes_from_the_duration_histogram_of_posts_only():
    metrics = br.apirequests.parse_prometheus
    before_text = "\n".join([
        'apiserver_request_duration_seconds_sum{resource="services",subresource="",verb="POST",dry_run=""} 1.0',
        'apiserver_request_duration_seconds_count{resource="services",subresource="",verb="POST",dry_run=""} 10',
    ])
    after_text = "\n".join([
        'apiserver_request_duration_seconds_sum{resource="services",subresource="",verb="POST",dry_run=""} 31.0',
        'apiserver_request_duration_seconds_count{resource="services",subresource="",verb="POST",dry_run=""} 110',
        # a dry run, a GET, a subresource: not creates of the object
        'apiserver_request_duration_seconds_sum{resource="services",subresource="",verb="POST",dry_run="All"} 99',
        'apiserver_request_duration_seconds_count{resource="services",subresource="",verb="POST",dry_run="All"} 1',
        'apiserver_request_duration_seconds_sum{resource="configmaps",subresource="",verb="GET",dry_run=""} 5',
        'apiserver_request_duration_seconds_count{resource="configmaps",subresource="",verb="GET",dry_run=""} 5',
        'apiserver_request_duration_seconds_sum{resource="serviceaccounts",subresource="token",verb="POST",dry_run=""} 7',
        'apiserver_request_duration_seconds_count{resource="serviceaccounts",subresource="token",verb="POST",dry_run=""} 7',
    ])
    before, after = br.create_seconds(metrics(before_text)), br.create_seconds(metrics(after_text))
    assert after == {"services": (31.0, 110.0)}
    assert br.mean_create_ms(before, after) == {"services": pytest.approx(300.0)}  # 30 s over 100 creates
    assert br.mean_create_ms(after, after) == {}  # nothing created in between: no mean


def test_a_remote_service_is_usable_once_it_exists_and_its_slice_is_ready_whichever_is_last():
    assert br.usable({"a": 5.0, "b": 1.0, "c": 2.0}, {"a": 3.0, "b": 4.0}) == {"a": 5.0, "b": 4.0}  # c: no slice yet


def test_headless_services_ask_for_no_cluster_ip():
    assert br.service("ns", 1, headless=True)["spec"]["clusterIP"] == "None"
    assert "clusterIP" not in br.service("ns", 1)["spec"]
