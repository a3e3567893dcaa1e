"""Who a consumer is on the provider (kube_offload/consumers.py)."""

from __future__ import annotations

import pytest

from kube_offload.consumers import (
    further_offloading,
    pod_security_level,
    requesting_consumer,
    service_account_of,
    service_account_username,
    tenant_of,
)
from kube_offload import constants as c


def consumer(name: str, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": spec}


def tenant_ns(name: str, tenant: str | None) -> dict:
    return {"metadata": {"name": name, "labels": {c.LABEL_TENANT: tenant} if tenant else {}}}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({}, ("kube-offload-tenant-local", "consumer")),
        ({"serviceAccount": {}}, ("kube-offload-tenant-local", "consumer")),
        ({"serviceAccount": {"name": "vk"}}, ("kube-offload-tenant-local", "vk")),
        ({"serviceAccount": {"namespace": "elsewhere"}}, ("elsewhere", "consumer")),
        ({"serviceAccount": {"namespace": "ns", "name": "sa"}}, ("ns", "sa")),
    ],
)
def test_service_account_defaults(spec, expected):
    assert service_account_of(consumer("local", **spec)) == expected


def test_username():
    assert service_account_username(consumer("local")) == "system:serviceaccount:kube-offload-tenant-local:consumer"


@pytest.mark.parametrize(
    "level, expected",
    [(None, "baseline"), ("", "baseline"), ("privileged", "privileged"), ("baseline", "baseline"),
     ("restricted", "restricted"), ("Privileged", "restricted"), ("anything", "restricted")],
)
def test_pod_security_level_never_loosens_on_an_unknown_value(level, expected):
    spec = {} if level is None else {"podSecurityLevel": level}
    assert pod_security_level(consumer("x", **spec)) == expected


@pytest.mark.parametrize(
    "ns, expected",
    [(tenant_ns("t", "local"), "local"), (tenant_ns("t", None), None), (tenant_ns("t", ""), None), (None, None)],
)
def test_tenant_of(ns, expected):
    assert tenant_of(ns) == expected


CONSUMERS = {
    "local": consumer("local"),
    "moved": consumer("moved", serviceAccount={"namespace": "custom-home"}),
}


@pytest.mark.parametrize(
    "request_ns, tenant, found, message_part",
    [
        ("kube-offload-tenant-local", tenant_ns("kube-offload-tenant-local", "local"), "local", ""),
        # Not labelled as a tenant namespace.
        ("team-a", tenant_ns("team-a", None), None, "is not a tenant namespace"),
        ("gone", None, None, "is not a tenant namespace"),
        # Labelled for a consumer the provider never admitted.
        ("kube-offload-tenant-ghost", tenant_ns("kube-offload-tenant-ghost", "ghost"), None, "no Consumer ghost"),
        # Someone labels their own namespace to speak for "local": its identity lives elsewhere.
        ("sneaky", tenant_ns("sneaky", "local"), None, "has its identity in namespace kube-offload-tenant-local"),
        # A Consumer whose identity lives in a custom namespace is served there only.
        ("custom-home", tenant_ns("custom-home", "moved"), "moved", ""),
        ("kube-offload-tenant-moved", tenant_ns("kube-offload-tenant-moved", "moved"), None, "not kube-offload-tenant-moved"),
    ],
)
def test_requesting_consumer(request_ns, tenant, found, message_part):
    result, message = requesting_consumer(request_ns, tenant, CONSUMERS.get)
    assert (result and result["metadata"]["name"]) == found
    if found:
        assert message == ""
    else:
        assert message_part in message


# --- drain (spec.drain) ----------------------------------------------------------------------------
from datetime import datetime, timedelta, timezone  # noqa: E402

from kube_offload import consumers as co  # noqa: E402

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)


def test_a_drain_record_reads_back_with_its_deadline():
    record = co.drain_record(T0, 90)
    assert record == {"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 90}
    drain = co.read_drain({"drain": record})
    assert drain == co.Drain(started=T0, grace_seconds=90)
    assert drain.deadline == T0 + timedelta(seconds=90)
    assert co.read_drain({}) is None and co.read_drain({"drain": None}) is None


@pytest.mark.parametrize("grace", [-1, co.DRAIN_MAX_GRACE_SECONDS + 1])
def test_a_drain_record_refuses_a_grace_out_of_range(grace):
    with pytest.raises(ValueError, match="spec.drain.gracePeriodSeconds must be 0 to 2592000 seconds"):
        co.drain_record(T0, grace)


@pytest.mark.parametrize(
    "raw, field",
    [
        ("soon", "spec.drain must be an object"),
        ({"startedAt": "yesterday", "gracePeriodSeconds": 5}, "spec.drain.startedAt='yesterday' is not an RFC 3339 time"),
        ({"gracePeriodSeconds": 5}, "spec.drain.startedAt=None is not an RFC 3339 time"),
        ({"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": "5"}, "spec.drain.gracePeriodSeconds='5'"),
        ({"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": True}, "spec.drain.gracePeriodSeconds=True"),
        ({"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": -3}, "spec.drain.gracePeriodSeconds=-3"),
    ],
)
def test_an_unreadable_drain_names_the_field(raw, field):
    with pytest.raises(co.ConsumerError) as caught:
        co.read_drain({"drain": raw})
    assert str(caught.value).startswith(field)


def test_a_drain_refuses_creates_as_a_cordon_does_even_when_unreadable():
    assert co.consumer_terms(consumer("local", drain=co.drain_record(T0, 60))).draining
    assert co.consumer_terms(consumer("local", drain="garbage")).draining
    terms = co.consumer_terms(consumer("local"))
    assert not terms.draining and not terms.cordoned


def _shp(name: str, deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "twin"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T03:05:00Z"
    return {"metadata": meta}


def test_nothing_is_due_within_the_grace_and_everything_not_already_going_after_it():
    drain = co.Drain(started=T0, grace_seconds=60)
    shadowpods = [_shp("a"), _shp("b", deleting=True), _shp("c")]
    assert co.shadowpods_due(drain, shadowpods, T0 + timedelta(seconds=59)) == []
    due = co.shadowpods_due(drain, shadowpods, T0 + timedelta(seconds=60))
    assert [sp["metadata"]["name"] for sp in due] == ["a", "c"]
    assert co.shadowpods_due(co.Drain(started=T0, grace_seconds=0), shadowpods, T0) == due


@pytest.mark.parametrize(
    "seconds_after, left, phase",
    [(10, 2, "Draining"), (60, 2, "GraceExpired"), (10, 0, "Drained"), (600, 0, "Drained")],
)
def test_drain_phase(seconds_after, left, phase):
    drain = co.Drain(started=T0, grace_seconds=60)
    assert co.drain_phase(drain, T0 + timedelta(seconds=seconds_after), left) == phase


# --- further offloading (docs/multihop.md) ------------------------------------------------------
@pytest.mark.parametrize(("spec", "placement"), [
    ({}, None),
    ({"furtherOffloading": {}}, None),
    ({"furtherOffloading": {"enabled": False, "podPlacement": "Remote"}}, None),
    ({"furtherOffloading": {"enabled": True}}, c.PLACEMENT_LOCAL_AND_REMOTE),
    ({"furtherOffloading": {"enabled": True, "podPlacement": "Remote"}}, c.PLACEMENT_REMOTE),
    # what this code cannot read never sends pods further
    ({"furtherOffloading": {"enabled": "true"}}, None),
    ({"furtherOffloading": True}, None),
    ({"furtherOffloading": {"enabled": True, "podPlacement": "Local"}}, None),
    ({"furtherOffloading": {"enabled": True, "podPlacement": "Elsewhere"}}, None),
])
def test_further_offloading(spec, placement):
    assert further_offloading({"metadata": {"name": "a"}, "spec": spec}) == placement
