"""Service continuity's decisions (enforcer/consumers/continuity.py): reachability from
the heartbeat Lease, which slices are a consumer's, and the hold / release patches."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from enforcer.consumers import continuity as cont
from kube_offload import constants as C

NOW = datetime(2026, 11, 27, 10, 0, 0, tzinfo=timezone.utc)
CONSUMER = {"metadata": {"name": "alpha"}, "spec": {}}


def lease(age_seconds: float | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": "kube-offload-beta"}
    if age_seconds is not None:
        spec["renewTime"] = (NOW - timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": C.CONSUMER_HEARTBEAT_LEASE, "namespace": "kube-offload-tenant-alpha"}, "spec": spec}


@pytest.mark.parametrize(
    ("consumer", "the_lease", "state", "hold", "release"),
    [
        (CONSUMER, lease(5), cont.REACHABLE, False, True),
        (CONSUMER, lease(40), cont.REACHABLE, False, True),  # exactly the grace: still reachable
        (CONSUMER, lease(41), cont.UNREACHABLE, True, False),
        (CONSUMER, None, cont.UNKNOWN, False, True),  # never promised a heartbeat: left alone
        (CONSUMER, lease(None), cont.UNKNOWN, False, True),
        (None, lease(5), cont.GONE, False, False),  # deleted Consumer: whatever its Lease says
    ],
)
def test_reachability(consumer, the_lease, state, hold, release) -> None:
    found = cont.reachability("alpha", consumer, the_lease, NOW, 40.0)
    assert (found.state, found.hold, found.release) == (state, hold, release)
    assert "alpha" in found.message


def test_reachability_says_how_long_and_when_it_expires() -> None:
    silent = cont.reachability("alpha", CONSUMER, lease(95), NOW, 40.0)
    assert "95s" in silent.message and "grace 40s" in silent.message and C.CONSUMER_HEARTBEAT_LEASE in silent.message
    assert silent.expires_in is None
    fresh = cont.reachability("alpha", CONSUMER, lease(10), NOW, 40.0)
    assert fresh.expires_in == pytest.approx(30.0)


def reflected(origin: str = "alpha", reflector: str = C.REFLECTOR_ENDPOINTSLICES, **extra: Any) -> dict[str, Any]:
    labels = {C.LABEL_ORIGIN_CLUSTER_ID: origin, "kubernetes.io/service-name": "web"}
    if reflector:
        labels[C.LABEL_REFLECTOR] = reflector
    body: dict[str, Any] = {
        "metadata": {"name": "web-abc", "namespace": "demo-alpha", "labels": labels, "resourceVersion": "7"},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.1.0.5"], "conditions": {"ready": True, "serving": True, "terminating": False}},
            {"addresses": ["10.1.0.6"], "conditions": {}},  # absent: "ready" to every reader
            {"addresses": ["10.1.0.7"], "conditions": {"ready": False, "serving": False}},  # the consumer's own word
        ],
        "ports": [{"port": 80}],
    }
    body.update(extra)
    return body


def twin(owner: str | None, managed: bool = True) -> dict[str, Any]:
    labels = {}
    if owner:
        labels[C.LABEL_ORIGIN_CLUSTER_ID] = owner
    if managed:
        labels[C.LABEL_MANAGED_BY] = C.MANAGED_BY_ENFORCER
    return {"metadata": {"name": "demo-alpha", "labels": labels}}


@pytest.mark.parametrize(
    ("endpoint_slice", "namespace", "owner"),
    [
        (reflected(), twin("alpha"), "alpha"),
        # The provider's EndpointSlice controller copies the Service's origin label, not the reflector's.
        (reflected(reflector=""), twin("alpha"), None),
        (reflected(reflector="services"), twin("alpha"), None),
        # A slice claiming another consumer, in alpha's twin: not beta's to lose, nor alpha's.
        (reflected(origin="beta"), twin("alpha"), None),
        (reflected(), twin("alpha", managed=False), None),  # not a namespace the enforcer made
        (reflected(), None, None),
    ],
)
def test_reflected_owner(endpoint_slice, namespace, owner) -> None:
    assert cont.reflected_owner(endpoint_slice, namespace) == owner


def apply_merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies a merge patch."""
    out = dict(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = apply_merge(out[key], value)
        else:
            out[key] = value
    return out


def test_hold_turns_every_ready_endpoint_not_ready_and_records_what_it_overwrote() -> None:
    original = reflected()
    patch = cont.hold_patch(original)
    assert patch is not None
    held = apply_merge(original, patch)
    assert [e["conditions"] for e in held["endpoints"]] == [
        {"ready": False, "serving": False, "terminating": False},
        {"ready": False, "serving": False},
        {"ready": False, "serving": False},
    ]
    record = json.loads(held["metadata"]["annotations"][C.ANNOTATION_HELD_NOT_READY])
    # Only what it changed; the endpoint the consumer had marked not ready is not its to give back.
    assert record == {"10.1.0.5": {"ready": True, "serving": True}, "10.1.0.6": {"ready": None, "serving": None}}
    assert held["endpoints"][0]["addresses"] == ["10.1.0.5"] and held["ports"] == original["ports"]
    assert original["endpoints"][0]["conditions"]["ready"] is True  # the input is not changed
    assert cont.held_endpoints(held) == 2
    # Held already: nothing more to write (a quiet outage makes no writes).
    assert cont.hold_patch(held) is None


def test_release_gives_back_exactly_what_hold_took() -> None:
    original = reflected()
    held = apply_merge(original, cont.hold_patch(original) or {})
    released = apply_merge(held, cont.release_patch(held) or {})
    assert released["endpoints"] == original["endpoints"]
    assert C.ANNOTATION_HELD_NOT_READY not in (released["metadata"].get("annotations") or {})
    assert cont.release_patch(released) is None
    assert cont.held_endpoints(released) == 0


def test_release_after_the_consumer_rewrote_the_slice_only_drops_the_mark() -> None:
    # The consumer's reflector wrote its local truth back (an endpoint gone, one not ready
    # now) while the annotation stayed (a server-side apply keeps fields it does not own).
    held = apply_merge(reflected(), cont.hold_patch(reflected()) or {})
    rewritten = dict(held, endpoints=[{"addresses": ["10.1.0.5"], "conditions": {"ready": True, "serving": True}},
                                      {"addresses": ["10.1.0.9"], "conditions": {"ready": False, "serving": False}}])
    patch = cont.release_patch(rewritten)
    assert patch == {"metadata": {"annotations": {C.ANNOTATION_HELD_NOT_READY: None}}}


def test_hold_of_a_slice_without_ready_endpoints_writes_nothing() -> None:
    quiet = reflected(endpoints=[{"addresses": ["10.1.0.7"], "conditions": {"ready": False, "serving": False}}])
    assert cont.hold_patch(quiet) is None
    assert cont.release_patch(quiet) is None


def test_an_unreadable_mark_restores_nothing_and_is_dropped() -> None:
    bad = reflected()
    bad["metadata"]["annotations"] = {C.ANNOTATION_HELD_NOT_READY: "not json"}
    assert cont.held(bad) == {}
    assert cont.release_patch(bad) == {"metadata": {"annotations": {C.ANNOTATION_HELD_NOT_READY: None}}}
