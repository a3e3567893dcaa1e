"""The collector's pauses as a histogram (kube_offload.runtime.metrics.GcPauses)."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kube_offload.runtime import metrics as rm


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_collection_is_timed_by_generation() -> None:
    clock = Clock()
    pauses = rm.GcPauses(buckets=(0.001, 0.1), clock=clock)
    for generation, seconds in ((0, 0.0002), (0, 0.0004), (2, 0.3), (1, 0.05)):
        pauses("start", {"generation": generation})
        clock.now += seconds
        pauses("stop", {"generation": generation, "collected": 0, "uncollectable": 0})
    assert pauses.counts == {0: [2, 0, 0], 1: [0, 1, 0], 2: [0, 0, 1]}
    assert pauses.sums[0] == pytest.approx(0.0006) and pauses.sums[2] == pytest.approx(0.3)


def test_exposed_cumulative_with_sum_and_count() -> None:
    clock = Clock()
    pauses = rm.GcPauses(buckets=(0.001, 0.1), clock=clock)
    for seconds in (0.0009765625, 0.0625, 0.5):  # binary fractions: an exact sum
        pauses("start", {"generation": 2})
        clock.now += seconds
        pauses("stop", {"generation": 2})
    registry = CollectorRegistry()
    registry.register(pauses)
    text = generate_latest(registry).decode()
    assert 'kube_offload_python_gc_pause_seconds_bucket{generation="2",le="0.001"} 1.0' in text
    assert 'kube_offload_python_gc_pause_seconds_bucket{generation="2",le="0.1"} 2.0' in text
    assert 'kube_offload_python_gc_pause_seconds_bucket{generation="2",le="+Inf"} 3.0' in text
    assert 'kube_offload_python_gc_pause_seconds_count{generation="2"} 3.0' in text
    assert 'kube_offload_python_gc_pause_seconds_sum{generation="2"} 0.5634765625' in text
    assert 'kube_offload_python_gc_pause_seconds_count{generation="0"} 0.0' in text  # every generation, always


def test_a_stop_without_a_known_generation_is_ignored() -> None:
    pauses = rm.GcPauses(buckets=(0.001,), clock=Clock())
    pauses("start", {"generation": 2})
    pauses("stop", {"generation": 7})
    pauses("other", {"generation": 2})
    assert all(sum(counts) == 0 for counts in pauses.counts.values())


def test_tracking_hooks_the_real_collector_once() -> None:
    pauses = rm.track_gc_pauses()
    assert rm.track_gc_pauses() is pauses
    assert gc.callbacks.count(pauses) == 1
    before = sum(pauses.counts[2])
    gc.collect()
    assert sum(pauses.counts[2]) == before + 1
    assert "kube_offload_python_gc_pause_seconds_bucket" in rm.exported_names(rm.REGISTRY)
