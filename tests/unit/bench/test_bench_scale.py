"""bench/bench_scale.py: the pure parts of the local baseline (Deployment sizes, kwok node
capacity, the offloaded/local throughput lines and ratio)."""

from __future__ import annotations


import pytest

from support.bench_scripts import load_bench_script

bs = load_bench_script("bench_scale.py")


@pytest.mark.parametrize(
    ("pods", "per_deployment", "sizes"),
    [(300, 300, [300]), (10_000, 1000, [1000] * 10), (2500, 1000, [1000, 1000, 500]), (7, 10, [7])],
)
def test_deployment_sizes_make_exactly_the_pods(pods, per_deployment, sizes):
    assert bs.deployment_sizes(pods, per_deployment) == sizes
    assert sum(sizes) == pods


@pytest.mark.parametrize(("pods", "per_deployment"), [(0, 10), (10, 0), (-1, 5)])
def test_deployment_sizes_refuse_nothing_to_create(pods, per_deployment):
    with pytest.raises(ValueError, match="--pods"):
        bs.deployment_sizes(pods, per_deployment)


def test_nodes_capacity_holds_the_pods_one_and_a_half_times_over():
    # The local baseline's 10,000 pods on 2 local nodes; each remote's share on its 2 nodes.
    assert bs.nodes_capacity(10_000, 2) == 7550
    assert bs.nodes_capacity(3334, 2) == 2551
    for pods, nodes in ((300, 2), (10_000, 2), (1, 1), (5001, 3)):
        assert bs.nodes_capacity(pods, nodes) * nodes >= pods * 1.5


def test_throughput_report_ratio_is_offloaded_rate_over_local_rate():
    # 10,000 pods: offloaded in 200 s (50 pods/s), locally in 170 s (58.8 pods/s).
    lines, ratio = bs.throughput_report(10_000, 200.0, 170.0)
    assert ratio == pytest.approx(0.85)
    assert lines[0] == "throughput, 10000 pods: offloaded 50.0 pods/s (200.0s), local kwok nodes 58.8 pods/s (170.0s)"
    assert lines[1] == "ratio offloaded/local pods/s: 0.85 (goal >= 0.85)"


@pytest.mark.parametrize(("offloaded", "local"), [(None, 10.0), (10.0, None), (None, None)])
def test_throughput_report_without_a_converged_run_has_no_ratio(offloaded, local):
    lines, ratio = bs.throughput_report(300, offloaded, local)
    assert ratio is None
    assert "not converged" in lines[0]
    assert lines[1].startswith("ratio offloaded/local pods/s: - ")


def test_steady_line_gives_ms_per_second_and_per_pod_per_minute_largest_first():
    line = bs.steady_line({"ours/enforcer-remote-1": 3.0, "ours/vkubelet-remote-1": 12.0}, seconds=60, pods_each=1000)
    # 12 s over 60 s = 200 ms/s; x 60 s / 1000 pods = 12 ms per pod per minute.
    assert line == ("vkubelet-remote-1 200 ms/s (12.00 ms per pod per minute), "
                    "enforcer-remote-1 50 ms/s (3.00 ms per pod per minute)")
