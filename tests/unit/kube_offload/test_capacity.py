"""The remote-capacity annotation: encoding, bounds, decoding, fit."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import capacity as cap
from kube_offload.capacity import CapacityError
from kube_offload.resources import parse_quantity as q

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def free(**amounts: str) -> dict[str, int]:
    return {name.replace("nvidia_com_gpu", "nvidia.com/gpu"): q(value) for name, value in amounts.items()}


def test_encode_is_compact_sorted_and_documented_shape() -> None:
    text = cap.encode_remote_capacity(
        {"worker-1": free(cpu="3500m", memory="12Gi", pods="105")},
        updated=NOW,
    )
    assert text == (
        '{"nodes":[{"free":{"cpu":"3500m","memory":"12Gi","pods":"105"},"name":"worker-1"}],'
        '"omitted":0,"remoteNodes":1,"total":{"cpu":"3500m","memory":"12Gi","pods":"105"},'
        '"updated":"2026-01-02T03:04:05Z","v":1}'
    )


def test_round_trip() -> None:
    nodes = {
        "a": free(cpu="2", memory="4Gi", pods="100", nvidia_com_gpu="1"),
        "b": free(cpu="8", memory="1Gi", pods="50"),
    }
    decoded = cap.decode_remote_capacity(cap.encode_remote_capacity(nodes, updated=NOW))
    assert decoded.updated == NOW
    assert decoded.remote_nodes == 2
    assert decoded.omitted == 0
    assert {s.name: dict(s.free) for s in decoded.shapes} == nodes
    assert decoded.total == {"cpu": 10_000, "memory": q("5Gi"), "pods": 150_000, "nvidia.com/gpu": 1000}


def test_encode_is_deterministic_whatever_the_input_order() -> None:
    one = {"x": free(cpu="1"), "y": free(cpu="2", memory="1Gi"), "z": free(memory="2Gi")}
    two = dict(reversed(list(one.items())))
    assert cap.encode_remote_capacity(one, updated=NOW) == cap.encode_remote_capacity(two, updated=NOW)


def test_identical_shapes_merge_under_the_first_name() -> None:
    nodes = {f"node-{i:02d}": free(cpu="4", memory="8Gi") for i in range(50)}
    decoded = cap.decode_remote_capacity(cap.encode_remote_capacity(nodes, updated=NOW))
    assert [s.name for s in decoded.shapes] == ["node-00"]
    assert decoded.remote_nodes == 50
    assert decoded.total["cpu"] == 200_000


def test_dominated_shapes_are_dropped_without_changing_fit() -> None:
    nodes = {
        "big": free(cpu="8", memory="32Gi", pods="110"),
        "small": free(cpu="1", memory="1Gi", pods="10"),  # dominated by big
        "cpu-heavy": free(cpu="16", memory="2Gi", pods="110"),
        "zero-gpu": free(cpu="2", memory="2Gi", pods="10", nvidia_com_gpu="0"),  # zero left out: dominated
    }
    decoded = cap.decode_remote_capacity(cap.encode_remote_capacity(nodes, updated=NOW))
    assert sorted(s.name for s in decoded.shapes) == ["big", "cpu-heavy"]
    assert decoded.omitted == 0
    assert decoded.remote_nodes == 4


def test_negative_free_counts_as_zero() -> None:
    text = cap.encode_remote_capacity({"over": {"cpu": -500, "memory": q("1Gi")}}, updated=NOW)
    decoded = cap.decode_remote_capacity(text)
    assert dict(decoded.shapes[0].free) == {"memory": q("1Gi")}
    assert decoded.total == {"memory": q("1Gi")}


def test_bound_keeps_per_resource_peaks_then_the_largest() -> None:
    # 40 incomparable shapes (cpu up, memory down) plus one GPU node and one memory giant.
    nodes = {f"n{i:02d}": {"cpu": (i + 1) * 1000, "memory": (40 - i) * q("1Gi"), "pods": 110_000} for i in range(40)}
    nodes["gpu"] = free(cpu="1", memory="1Gi", pods="10", nvidia_com_gpu="4")
    nodes["fat"] = free(cpu="1", memory="512Gi", pods="10")
    text = cap.encode_remote_capacity(nodes, updated=NOW, max_shapes=5)
    decoded = cap.decode_remote_capacity(text)
    names = {s.name for s in decoded.shapes}
    assert len(decoded.shapes) == 5
    assert {"n39", "fat", "gpu"} <= names  # most cpu, most memory, the only GPUs (and pods peaks)
    assert decoded.omitted == 42 - 5
    assert decoded.remote_nodes == 42
    # The pods that these shapes can tell apart are still judged right.
    assert cap.remote_fit(free(nvidia_com_gpu="1", pods="1"), decoded)[0]
    assert cap.remote_fit(free(memory="500Gi", pods="1"), decoded)[0]
    assert cap.remote_fit(free(cpu="40", pods="1"), decoded)[0]
    assert len(text) < 2048


def test_default_bound_keeps_the_annotation_small() -> None:
    nodes = {
        f"remote-worker-{i:04d}.example.internal": {"cpu": i * 7 + 1, "memory": (5000 - i) * 1_000_003, "pods": 110_000}
        for i in range(5000)
    }
    text = cap.encode_remote_capacity(nodes, updated=NOW)
    decoded = cap.decode_remote_capacity(text)
    assert len(decoded.shapes) == cap.DEFAULT_MAX_SHAPES
    assert decoded.omitted == 5000 - cap.DEFAULT_MAX_SHAPES
    assert len(text) < 4096


def test_empty_cluster() -> None:
    decoded = cap.decode_remote_capacity(cap.encode_remote_capacity({}, updated=NOW))
    assert decoded.shapes == ()
    assert decoded.remote_nodes == 0
    assert cap.remote_fit({"pods": 1000}, decoded) == (False, "the remote cluster reports no schedulable node")


def test_encode_refuses_naive_time_and_zero_bound() -> None:
    with pytest.raises(ValueError):
        cap.encode_remote_capacity({}, updated=datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        cap.encode_remote_capacity({}, updated=NOW, max_shapes=0)


def test_timestamps_in_other_zones_are_normalised_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    text = cap.encode_remote_capacity({}, updated=datetime(2026, 1, 2, 5, 4, 5, tzinfo=plus_two))
    assert json.loads(text)["updated"] == "2026-01-02T03:04:05Z"
    decoded = cap.decode_remote_capacity(text.replace("03:04:05Z", "05:04:05+02:00"))
    assert decoded.updated == NOW
    assert decoded.age_seconds(NOW + timedelta(seconds=90)) == 90


# --- decoding ----------------------------------------------------------------------------
def minimal(**overrides: object) -> str:
    document: dict = {"v": 1, "updated": "2026-01-02T03:04:05Z", "nodes": [{"free": {"cpu": "1"}}]}
    document.update(overrides)
    return json.dumps(document)


def test_decode_minimal_and_defaults() -> None:
    decoded = cap.decode_remote_capacity(minimal())
    assert decoded.shapes == (cap.NodeShape(free={"cpu": 1000}, name=""),)
    assert decoded.remote_nodes == 1
    assert decoded.total == {}
    assert decoded.omitted == 0


def test_decode_ignores_unknown_fields() -> None:
    text = json.dumps({"v": 1, "updated": "2026-01-02T03:04:05Z", "nodes": [{"free": {}, "zone": "a"}], "extra": [1]})
    assert cap.decode_remote_capacity(text).shapes[0].free == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('"x"', "must be a JSON object"),
        ("[" * 100000 + "]" * 100000, "not JSON"),
        (minimal(v=2), "unsupported format version 2"),
        (minimal(v="1"), "unsupported format version '1'"),
        (minimal(v=True), "unsupported format version True"),
        (json.dumps({"updated": "2026-01-02T03:04:05Z", "nodes": []}), "unsupported format version None"),
        (minimal(updated=None), "'updated' must be an RFC 3339 timestamp string"),
        (minimal(updated="yesterday"), "not an RFC 3339 timestamp"),
        (minimal(updated="2026-01-02T03:04:05"), "must carry a time zone"),
        (minimal(nodes={}), "'nodes' must be a list"),
        (minimal(nodes=[1]), r"nodes\[0\] must be an object"),
        (minimal(nodes=[{"free": {"cpu": "1"}}, {"free": []}]), r"nodes\[1\].free must be an object"),
        (minimal(nodes=[{"free": {"cpu": "lots"}}]), r"nodes\[0\].free: cpu: 'lots' is not a Kubernetes quantity"),
        (minimal(nodes=[{"free": {}, "name": 3}]), r"nodes\[0\].name must be a string"),
        (minimal(total=[]), "total must be an object"),
        (minimal(remoteNodes=-1), "'remoteNodes' must be a non-negative integer"),
        (minimal(omitted="many"), "'omitted' must be a non-negative integer"),
        (minimal(omitted=False), "'omitted' must be a non-negative integer"),
        ("x" * (cap.MAX_ANNOTATION_BYTES + 1), "larger than"),
    ],
)
def test_decode_rejects_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(CapacityError, match=message):
        cap.decode_remote_capacity(text)


def test_decode_rejects_non_strings() -> None:
    with pytest.raises(CapacityError, match="must be a string"):
        cap.decode_remote_capacity(None)  # type: ignore[arg-type]


# --- fit ---------------------------------------------------------------------------------
@pytest.fixture
def two_nodes() -> cap.RemoteCapacity:
    return cap.decode_remote_capacity(
        cap.encode_remote_capacity(
            {
                "mem": free(cpu="2", memory="16Gi", pods="110"),
                "cpu": free(cpu="8", memory="2Gi", pods="110"),
            },
            updated=NOW,
        )
    )


@pytest.mark.parametrize(
    "requests, expected",
    [
        (free(cpu="2", memory="16Gi", pods="1"), True),  # exactly the mem node
        (free(cpu="8", memory="2Gi", pods="1"), True),  # exactly the cpu node
        (free(cpu="4", memory="4Gi", pods="1"), False),  # fits the sum, no single node
        (free(cpu="9", pods="1"), False),
        (free(memory="17Gi", pods="1"), False),
        (free(nvidia_com_gpu="1", pods="1"), False),
        (free(pods="1"), True),
        ({}, True),
    ],
)
def test_remote_fit(two_nodes: cap.RemoteCapacity, requests: dict, expected: bool) -> None:
    ok, why = cap.remote_fit(requests, two_nodes)
    assert ok is expected
    assert (why == "") is expected


def test_remote_fit_reason_names_the_largest_node_and_the_resource(two_nodes: cap.RemoteCapacity) -> None:
    ok, why = cap.remote_fit(free(cpu="9", pods="1"), two_nodes)
    assert not ok
    assert why.startswith("no remote node can fit the pod (2 node shapes checked): the largest (")
    assert "insufficient cpu: requested 9, free " in why
