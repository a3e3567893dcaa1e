"""The custom resource grant of a twin: the Role and RoleBinding a Consumer's
spec.policy.customResources asks for, and what brings the existing ones there."""

from __future__ import annotations

from enforcer.consumers.twin_grants import VERBS, GrantAction, action, desired_binding, desired_role
from kube_offload import constants as c

REQUEST = {"metadata": {"namespace": "kube-offload-tenant-local", "name": "demo-local"}}
GRANTED = {"metadata": {"name": "local"}, "spec": {"policy": {"customResources": [
    {"group": "example.com", "resource": "widgets", "specFields": ["size"]},
    {"group": "example.org", "resource": "gadgets"}]}}}
NOTHING = {"metadata": {"name": "local"}, "spec": {}}


def test_one_rule_per_granted_kind_never_a_subresource():
    role = desired_role("demo-local", REQUEST, GRANTED)
    assert role is not None and role["metadata"]["name"] == c.TWIN_CUSTOM_RESOURCES_NAME
    assert role["rules"] == [
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": list(VERBS)},
        {"apiGroups": ["example.org"], "resources": ["gadgets"], "verbs": list(VERBS)},
    ]
    assert role["metadata"]["labels"] == {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}
    assert role["metadata"]["annotations"] == {c.ANNOTATION_TWIN_REQUEST: "kube-offload-tenant-local/demo-local"}


def test_the_binding_names_the_role_and_the_consumers_identity():
    binding = desired_binding("demo-local", REQUEST, GRANTED)
    assert binding is not None
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": c.TWIN_CUSTOM_RESOURCES_NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "consumer", "namespace": "kube-offload-tenant-local"}]


def test_nothing_granted_or_a_policy_that_does_not_parse_is_no_role():
    broken = {"metadata": {"name": "local"}, "spec": {"policy": {"customResources": [{"group": "kube-offload.io", "resource": "shadowpods"}]}}}
    for consumer in (NOTHING, broken):
        assert desired_role("demo-local", REQUEST, consumer) is None
        assert desired_binding("demo-local", REQUEST, consumer) is None


def test_actions():
    role = desired_role("demo-local", REQUEST, GRANTED)
    assert role is not None
    assert action(None, role, field="rules") is GrantAction.CREATE
    assert action(role, role, field="rules") is GrantAction.NONE
    narrower = {**role, "rules": role["rules"][:1]}
    assert action(narrower, role, field="rules") is GrantAction.UPDATE
    unmarked = {**role, "metadata": {**role["metadata"], "labels": {}}}
    assert action(unmarked, role, field="rules") is GrantAction.UPDATE
    # Withdrawn: ours goes, one the provider's admin made by hand stays.
    assert action(role, None, field="rules") is GrantAction.DELETE
    assert action(unmarked, None, field="rules") is GrantAction.NONE
    assert action(None, None, field="rules") is GrantAction.NONE
