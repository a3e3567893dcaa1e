"""The custom resource admission rule: the kinds and spec fields a consumer's grant names
pass; every other kind, field, top-level key or subresource write is refused, naming it."""

from __future__ import annotations

import json

import pytest

from enforcer.admission.custom_resource_policy import decide
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review

CONSUMER_USER = "system:serviceaccount:kube-offload-tenant-local:consumer"
TWIN = {"metadata": {"name": "demo-local", "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}}}
CONSUMER = {"metadata": {"name": "local"}, "spec": {"policy": {"customResources": [
    {"group": "example.com", "resource": "widgets", "specFields": ["size", "color"]}]}}}


def request(obj: dict | None = None, *, user: str = CONSUMER_USER, resource: str = "widgets", operation: str = "CREATE",
            sub_resource: str = "", old: dict | None = None):
    obj = obj if obj is not None else widget(size=1)
    review = build_review(obj, operation=operation, namespace="demo-local", resource=resource, old_object=old,
                          user_info={"username": user, "groups": ["system:serviceaccounts"]})
    if sub_resource:
        review["request"]["subResource"] = sub_resource
    return parse_review(json.dumps(review).encode())


def widget(kind: str = "Widget", **spec) -> dict:
    return {"apiVersion": "example.com/v1", "kind": kind, "metadata": {"name": "w", "namespace": "demo-local"}, "spec": spec}


def test_the_review_carries_the_resource():
    assert request().resource == "widgets"


def test_granted_kind_and_fields_pass():
    assert decide(request(widget(size=1, color="red")), namespace=TWIN, consumer=CONSUMER).allowed


@pytest.mark.parametrize(
    "req, words",
    [
        (lambda: request(widget(size=1, shape="round")), "spec.shape not granted to consumer local"),
        (lambda: request(widget("Gadget", a=1), resource="gadgets"), "Gadget (gadgets.example.com) is not granted"),
        (lambda: request({**widget(size=1), "status": {"phase": "Ready"}}), "status may not be written"),
        (lambda: request(widget(size=1), sub_resource="status"), "status subresource is the provider's"),
        (lambda: request({**widget(), "spec": "text"}), "spec must be an object"),
    ],
)
def test_refusals_name_the_kind_or_field(req, words):
    decision = decide(req(), namespace=TWIN, consumer=CONSUMER)
    assert not decision.allowed and decision.code == 403
    assert words in decision.message


def test_a_field_refusal_names_the_policy_key():
    decision = decide(request(widget(shape="round")), namespace=TWIN, consumer=CONSUMER)
    assert "spec.policy.customResources[widgets.example.com].specFields: size, color" in decision.message


def test_nothing_granted_by_default():
    bare = {"metadata": {"name": "local"}, "spec": {}}
    decision = decide(request(), namespace=TWIN, consumer=bare)
    assert not decision.allowed and "customResources: none" in decision.message


def test_the_providers_own_writers_and_other_namespaces_are_not_judged():
    assert decide(request(widget(shape="x"), user="system:serviceaccount:operators:widget-controller"),
                  namespace=TWIN, consumer=CONSUMER).allowed
    assert decide(request(widget(shape="x")), namespace={"metadata": {"name": "other"}}, consumer=None).allowed
    assert decide(request(operation="DELETE"), namespace=TWIN, consumer=CONSUMER).allowed


def test_a_twin_whose_consumer_is_gone_grants_nothing():
    decision = decide(request(), namespace=TWIN, consumer=None)
    assert not decision.allowed and "Consumer is gone" in decision.message


def test_a_policy_that_does_not_parse_grants_nothing():
    broken = {"metadata": {"name": "local"}, "spec": {"policy": {"customResources": [{"group": "kube-offload.io", "resource": "shadowpods"}]}}}
    decision = decide(request(), namespace=TWIN, consumer=broken)
    assert not decision.allowed and "does not parse" in decision.message


def test_an_update_is_judged_on_what_it_changes():
    # The provider's status and a field its controller set ride along unchanged: allowed.
    before = {**widget(size=1, tier="gold"), "status": {"phase": "Ready"}}
    after = {**widget(size=2, tier="gold"), "status": {"phase": "Ready"}}
    assert decide(request(after, operation="UPDATE", old=before), namespace=TWIN, consumer=CONSUMER).allowed
    # Changing or removing them is the consumer's doing: refused.
    changed = {**widget(size=2, tier="silver"), "status": {"phase": "Ready"}}
    decision = decide(request(changed, operation="UPDATE", old=before), namespace=TWIN, consumer=CONSUMER)
    assert not decision.allowed and "spec.tier not granted" in decision.message
    forged = {**widget(size=2, tier="gold"), "status": {"phase": "Forged"}}
    decision = decide(request(forged, operation="UPDATE", old=before), namespace=TWIN, consumer=CONSUMER)
    assert not decision.allowed and "status may not be written" in decision.message
