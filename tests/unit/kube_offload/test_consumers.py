"""Who a consumer is on the provider (kube_offload/consumers.py)."""

from __future__ import annotations

import pytest

from kube_offload.consumers import (
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
