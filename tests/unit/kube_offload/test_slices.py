"""The decision of a consumer's OffloadSlices (kube_offload/slices.py; docs/slices.md "How a
slice is decided"): accepted, partly accepted under the quota or the pool, refused, in a
stable order so a later slice never shrinks an earlier one."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kube_offload import constants as c
from kube_offload.slices import (
    REASON_ACCEPTED,
    REASON_INVALID_CONSUMER,
    REASON_INVALID_SPEC,
    REASON_NO_CONSUMER,
    REASON_POOL,
    REASON_QUOTA,
    REASON_UNKNOWN_POOL,
    accepted_of,
    decide_slices,
    first_decided_of,
    quota_bounds,
    slice_status,
)

POOLS = [{"name": "gpu", "nodeSelector": {"pool": "gpu"}, "nodeLabels": {"accelerator": "a100"}},
         {"name": "general", "nodeSelector": {"pool": "general"}}]


def consumer(quota: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "local"}, "spec": {"pools": POOLS, **({"quota": quota} if quota else {}), **spec}}


def node(name: str, pool: str, ready: bool = True, unschedulable: bool = False, **allocatable: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": pool}},
        "spec": {"unschedulable": unschedulable},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def offload_slice(name: str, pool: str, created: str = "2026-11-27T09:00:00Z", **resources: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created, "generation": 1},
            "spec": {"pool": pool, "resources": {k.replace("_", "."): v for k, v in resources.items()}}}


NODES = [node("g1", "gpu", cpu="8", memory="32Gi", pods="110", **{"nvidia.com/gpu": "4"}),
         node("w1", "general", cpu="4", memory="16Gi", pods="110"),
         node("w2", "general", cpu="4", memory="16Gi", pods="110")]


def test_a_slice_within_quota_and_pool_is_accepted_in_full_with_the_pool_labels() -> None:
    [(name, decision)] = decide_slices([offload_slice("train", "gpu", cpu="2", memory="8Gi")], consumer(), NODES).items()
    assert name == "train" and decision.phase == c.SLICE_PHASE_ACCEPTED and decision.reason == REASON_ACCEPTED
    assert decision.accepted == {"cpu": 2000, "memory": 8 * 2**30 * 1000}
    status = slice_status(decision, 1, "")
    assert status["accepted"] == {"cpu": "2", "memory": "8Gi"} and status["nodeLabels"] == {"accelerator": "a100"}
    assert status["phase"] == "Accepted" and status["observedGeneration"] == 1


def test_the_pool_is_the_sum_of_its_ready_schedulable_nodes() -> None:
    nodes = [*NODES, node("w3", "general", ready=False, cpu="4"), node("w4", "general", unschedulable=True, cpu="4")]
    [decision] = decide_slices([offload_slice("web", "general", cpu="10")], consumer(), nodes).values()
    assert decision.phase == c.SLICE_PHASE_PARTIAL and decision.reason == REASON_POOL
    assert decision.accepted == {"cpu": 8000}
    assert decision.message == "cpu: asked 10, accepted 8: pool general leaves 8 (its Ready nodes' allocatable)"


def test_a_slice_larger_than_the_quota_is_partly_accepted_naming_each_cut() -> None:
    decisions = decide_slices(
        [offload_slice("big", "gpu", cpu="6", memory="4Gi", **{"nvidia_com/gpu": "3"})],
        consumer({"cpu": "4", "requests.nvidia.com/gpu": "1"}), NODES)
    decision = decisions["big"]
    assert decision.phase == c.SLICE_PHASE_PARTIAL and decision.reason == REASON_QUOTA
    assert decision.accepted == {"cpu": 4000, "memory": 4 * 2**30 * 1000, "nvidia.com/gpu": 1000}
    assert decision.message == (
        "cpu: asked 6, accepted 4: quota cpu leaves 4 (Consumer spec.quota); "
        "nvidia.com/gpu: asked 3, accepted 1: quota nvidia.com/gpu leaves 1 (Consumer spec.quota)")


def test_earlier_slices_take_first_and_a_later_one_never_shrinks_them() -> None:
    first = offload_slice("a", "general", created="2026-11-27T09:00:00Z", cpu="3")
    second = offload_slice("b", "gpu", created="2026-11-27T09:01:00Z", cpu="3")
    third = offload_slice("c", "general", created="2026-11-27T09:02:00Z", cpu="3")
    quota = consumer({"cpu": "5"})
    decisions = decide_slices([third, second, first], quota, NODES)  # any order in, oldest first decided
    assert decisions["a"].accepted == {"cpu": 3000} and decisions["a"].phase == c.SLICE_PHASE_ACCEPTED
    assert decisions["b"].accepted == {"cpu": 2000} and decisions["b"].phase == c.SLICE_PHASE_PARTIAL
    assert decisions["c"].phase == c.SLICE_PHASE_REFUSED and decisions["c"].reason == REASON_QUOTA
    assert decisions["c"].message == "nothing left to accept: cpu: asked 3, accepted 0: quota cpu leaves 0 (Consumer spec.quota)"
    assert decisions["c"].accepted == {}
    # Same creation time: by name.
    tie = decide_slices([offload_slice("y", "general", cpu="5"), offload_slice("x", "general", cpu="5")], quota, NODES)
    assert tie["x"].phase == c.SLICE_PHASE_ACCEPTED and tie["y"].phase == c.SLICE_PHASE_REFUSED


def test_in_the_same_second_the_slice_decided_first_keeps_its_place() -> None:
    # creationTimestamp has whole seconds: "train" decided, then "big" created within the
    # same second. By name "big" would come first and shrink "train" (seen in CI).
    quota = consumer({"cpu": "2"})
    train = offload_slice("train", "general", cpu="1")
    train["status"] = {"phase": c.SLICE_PHASE_ACCEPTED, "accepted": {"cpu": "1"}, "firstDecided": "2026-11-27T09:00:00.100000Z"}
    big = offload_slice("big", "general", cpu="5")
    decisions = decide_slices([big, train], quota, NODES)
    assert decisions["train"].phase == c.SLICE_PHASE_ACCEPTED and decisions["train"].accepted == {"cpu": 1000}
    assert decisions["big"].phase == c.SLICE_PHASE_PARTIAL and decisions["big"].accepted == {"cpu": 1000}
    # Once both are decided, the stamps still order them, whatever each now holds (an
    # order by "holds an acceptance" fell back to the name here and flipped them).
    big["status"] = {"phase": c.SLICE_PHASE_PARTIAL, "accepted": {"cpu": "1"}, "firstDecided": "2026-11-27T09:00:00.700000Z"}
    again = decide_slices([big, train], quota, NODES)
    assert again["train"].accepted == {"cpu": 1000} and again["big"].accepted == {"cpu": 1000}
    # A stamp orders only within the second: an earlier second comes first, stamped or not.
    earlier = offload_slice("zzz", "general", created="2026-11-27T08:59:59Z", cpu="2")
    assert decide_slices([earlier, train], quota, NODES)["zzz"].accepted == {"cpu": 2000}


def test_a_slice_status_carries_its_first_decision_time() -> None:
    [decision] = decide_slices([offload_slice("a", "general", cpu="1")], consumer(), NODES).values()
    assert slice_status(decision, 3, "2026-11-27T09:00:00.000001Z")["firstDecided"] == "2026-11-27T09:00:00.000001Z"
    assert first_decided_of({"status": {"firstDecided": "2026-11-27T09:00:00.000001Z"}}) == "2026-11-27T09:00:00.000001Z"
    assert first_decided_of({}) == "" and first_decided_of({"status": {"firstDecided": 7}}) == ""


def test_the_pool_left_is_per_pool_and_the_quota_left_across_pools() -> None:
    decisions = decide_slices([offload_slice("a", "general", created="1", cpu="6"),
                               offload_slice("b", "general", created="2", cpu="6"),
                               offload_slice("c", "gpu", created="3", cpu="6")], consumer(), NODES)
    assert [decisions[n].accepted["cpu"] for n in "abc"] == [6000, 2000, 6000]


def test_a_resource_the_pool_lacks_is_cut_to_nothing() -> None:
    [decision] = decide_slices([offload_slice("a", "general", cpu="1", **{"nvidia_com/gpu": "1"})], consumer(), NODES).values()
    assert decision.phase == c.SLICE_PHASE_PARTIAL and decision.accepted == {"cpu": 1000, "nvidia.com/gpu": 0}
    assert slice_status(decision, 1, "")["accepted"] == {"cpu": "1", "nvidia.com/gpu": "0"}


def test_whole_units_for_every_resource_but_cpu() -> None:
    [decision] = decide_slices([offload_slice("a", "general", cpu="2", pods="10")], consumer({"cpu": "1500m", "pods": "2500m"}), NODES).values()
    assert decision.accepted == {"cpu": 1500, "pods": 2000}


def test_a_limits_quota_bounds_the_slice_too() -> None:
    assert quota_bounds({"cpu": 4000, "limits.cpu": 3000, "limits.memory": 5, "count/services": 2000}) == {"cpu": 3000, "memory": 5}
    spec = {"policy": {"quotaMode": "limits"}}
    [decision] = decide_slices([offload_slice("a", "general", cpu="4")], consumer({"cpu": "2"}, **spec), NODES).values()
    assert decision.accepted == {"cpu": 2000}


def test_an_unknown_pool_is_refused_naming_the_pools() -> None:
    [decision] = decide_slices([offload_slice("a", "fpga", cpu="1")], consumer(), NODES).values()
    assert decision.phase == c.SLICE_PHASE_REFUSED and decision.reason == REASON_UNKNOWN_POOL
    assert decision.message == "spec.pool: no pool 'fpga' for this consumer (pools: gpu, general); name one of the provider's pools"
    [none] = decide_slices([offload_slice("a", "gpu", cpu="1")], {"metadata": {"name": "local"}, "spec": {}}, NODES).values()
    assert "(pools: none)" in none.message


@pytest.mark.parametrize(
    "resources, message",
    [
        ({}, r"spec\.resources is required"),
        ({"cpu": "lots"}, r"spec\.resources\[cpu\]"),
        ({"cpu": "-1"}, r"spec\.resources\[cpu\]: '-1' is negative"),
        ({"limits.cpu": "1"}, r"spec\.resources\[limits\.cpu\]: not a node resource"),
        ({"count/services": "1"}, r"not a node resource"),
    ],
)
def test_an_unreadable_spec_is_refused_naming_the_field(resources: dict[str, str], message: str) -> None:
    obj = {"metadata": {"name": "a"}, "spec": {"pool": "gpu", "resources": resources}}
    [decision] = decide_slices([obj], consumer(), NODES).values()
    assert decision.phase == c.SLICE_PHASE_REFUSED and decision.reason == REASON_INVALID_SPEC
    assert re.search(message, decision.message), decision.message


def test_the_providers_mistakes_leave_the_slice_pending() -> None:
    [no_consumer] = decide_slices([offload_slice("a", "gpu", cpu="1")], None, NODES).values()
    assert no_consumer.phase == c.SLICE_PHASE_PENDING and no_consumer.reason == REASON_NO_CONSUMER
    bad = {"metadata": {"name": "local"}, "spec": {"pools": [{"name": "gpu"}]}}
    [invalid] = decide_slices([offload_slice("a", "gpu", cpu="1")], bad, NODES).values()
    assert invalid.phase == c.SLICE_PHASE_PENDING and invalid.reason == REASON_INVALID_CONSUMER
    assert "spec.pools[gpu].nodeSelector is required" in invalid.message


def test_accepted_of_reads_only_a_slice_that_lets_pods_in() -> None:
    assert accepted_of({"status": {"phase": "Accepted", "accepted": {"cpu": "2", "pods": "3"}}}) == {"cpu": 2000, "pods": 3000}
    assert accepted_of({"status": {"phase": "PartiallyAccepted", "accepted": {"cpu": "500m"}}}) == {"cpu": 500}
    assert accepted_of({"status": {"phase": "Refused", "accepted": {}}}) is None
    assert accepted_of({}) is None
