"""Consumer.status.capacity: the enforcer encodes a summary, the vkubelet decodes it."""

from __future__ import annotations

import pytest

from kube_offload.remote_resources import (
    CapacityStatusError,
    RemoteResources,
    decode_capacity_status,
    encode_capacity_status,
    summarize,
)

GI = 1024**3 * 1000

SUMMARIES = [
    RemoteResources(shareable={}, free_by_node={}),
    RemoteResources(
        shareable={"cpu": 7500, "memory": 30 * GI, "pods": 220_000, "nvidia.com/gpu": 2000},
        free_by_node={
            "n1": {"cpu": 3500, "memory": 14 * GI + 512 * 1024 * 1024 * 1000, "pods": 108_000},
            # Overcommitted nodes have negative free room; the sign must survive.
            "n2": {"cpu": -250, "memory": -GI, "pods": 0, "nvidia.com/gpu": 2000},
        },
        pressure={"MemoryPressure": ["n2"], "DiskPressure": [], "PIDPressure": []},
        schedulable_nodes=2,
        total_nodes=3,
    ),
    RemoteResources(shareable={"cpu": 1, "memory": 1, "ephemeral-storage": 1500}, free_by_node={"x": {"cpu": 1}}),
]


@pytest.mark.parametrize("summary", SUMMARIES)
def test_round_trip(summary):
    assert decode_capacity_status(encode_capacity_status(summary)) == summary


def test_encoded_shape_is_the_documented_one():
    encoded = encode_capacity_status(SUMMARIES[1])
    assert encoded == {
        "shareable": {"cpu": "7500m", "memory": "30Gi", "pods": "220", "nvidia.com/gpu": "2"},
        "freeByNode": {
            "n1": {"cpu": "3500m", "memory": "14848Mi", "pods": "108"},
            "n2": {"cpu": "-250m", "memory": "-1Gi", "pods": "0", "nvidia.com/gpu": "2"},
        },
        "pressure": {"DiskPressure": [], "MemoryPressure": ["n2"], "PIDPressure": []},
        "schedulableNodes": 2,
        "totalNodes": 3,
    }


def test_round_trip_of_a_real_summary():
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    pod = {
        "metadata": {"name": "p", "namespace": "x"},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "100m"}}}]},
    }
    summary = summarize([node], [pod], "local")
    assert decode_capacity_status(encode_capacity_status(summary)) == summary


def test_absent_status_is_an_empty_summary():
    assert decode_capacity_status(None) == RemoteResources(shareable={}, free_by_node={}, pressure={})
    assert decode_capacity_status({}) == RemoteResources(shareable={}, free_by_node={}, pressure={})


@pytest.mark.parametrize(
    "raw, field",
    [
        ("nope", "status.capacity must be an object"),
        ({"shareable": {"cpu": "lots"}}, "status.capacity.shareable"),
        ({"shareable": ["cpu"]}, "status.capacity.shareable"),
        ({"freeByNode": ["n1"]}, "status.capacity.freeByNode"),
        ({"freeByNode": {"n1": {"memory": "1Qi"}}}, "status.capacity.freeByNode[n1]"),
        ({"pressure": {"MemoryPressure": "n1"}}, "status.capacity.pressure[MemoryPressure]"),
        ({"pressure": ["MemoryPressure"]}, "status.capacity.pressure"),
        ({"schedulableNodes": -1}, "status.capacity.schedulableNodes"),
        ({"totalNodes": "3"}, "status.capacity.totalNodes"),
        ({"totalNodes": True}, "status.capacity.totalNodes"),
    ],
)
def test_malformed_status_names_the_field(raw, field):
    with pytest.raises(CapacityStatusError, match=field.replace("[", r"\[").replace("]", r"\]")):
        decode_capacity_status(raw)
