"""The RBAC of the custom resource kinds a consumer is granted, in each of its twin
namespaces (pure): a Role ``kube-offload-custom-resources`` with one rule per kind of
``Consumer.spec.policy.customResources`` and the RoleBinding of it to the consumer's
identity; none granted (or a policy that does not parse): neither exists.

The rights are the objects only, never a subresource (status is the provider's
controllers'); the enforcer's custom resource webhook judges the fields
(enforcer/admission/custom_resource_policy.py). The enforcer can only write a Role whose
rights it holds itself (RBAC's escalation check): the remote chart gives it those of the
kinds its values list (``enforcer.customResources``), so a kind the provider's admin did
not list there cannot be granted by editing a Consumer alone.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping

from enforcer.consumers.twin_names import request_key
from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.consumers import consumer_name, service_account_of

RBAC_GROUP = "rbac.authorization.k8s.io"
# What the consumer may do with the objects of a granted kind in its twins: what the
# virtual kubelet's reflection needs (create by server-side apply, read, delete).
VERBS: tuple[str, ...] = ("get", "list", "watch", "create", "update", "patch", "delete")


class GrantAction(Enum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"  # ours, and nothing is granted any more


def grants_of(consumer: Mapping[str, Any]) -> tuple[pp.CustomResourceGrant, ...]:
    """The kinds granted; none when the policy does not parse (the strict reading)."""
    try:
        return pp.parse_policy((consumer.get("spec") or {}).get("policy")).custom_resources
    except pp.ProviderPolicyError:
        return ()


def _metadata(namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": c.TWIN_CUSTOM_RESOURCES_NAME,
        "namespace": namespace,
        "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: consumer_name(consumer)},
        "annotations": {c.ANNOTATION_TWIN_REQUEST: request_key(request)},
    }


def desired_role(namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any] | None:
    grants = grants_of(consumer)
    if not grants:
        return None
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": _metadata(namespace, request, consumer),
        "rules": [{"apiGroups": [g.group], "resources": [g.resource], "verbs": list(VERBS)} for g in grants],
    }


def desired_binding(namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any] | None:
    if not grants_of(consumer):
        return None
    account_namespace, account_name = service_account_of(consumer)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(namespace, request, consumer),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": c.TWIN_CUSTOM_RESOURCES_NAME},
        "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": account_namespace}],
    }


def _ours(existing: Mapping[str, Any]) -> bool:
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER


def action(existing: Mapping[str, Any] | None, desired: Mapping[str, Any] | None, *, field: str) -> GrantAction:
    """What brings the Role (``field`` "rules") or RoleBinding (``field`` "subjects";
    its roleRef never changes) of that name to ``desired``. One not ours (the provider's
    admin made it by hand) is left alone when nothing is granted, replaced otherwise."""
    if desired is None:
        return GrantAction.DELETE if existing is not None and _ours(existing) else GrantAction.NONE
    if existing is None:
        return GrantAction.CREATE
    wanted = desired["metadata"]
    meta = existing.get("metadata") or {}
    marks = all((meta.get("labels") or {}).get(k) == v for k, v in wanted["labels"].items()) and all(
        (meta.get("annotations") or {}).get(k) == v for k, v in wanted["annotations"].items())
    if not marks or existing.get(field) != desired[field] or existing.get("roleRef", desired.get("roleRef")) != desired.get("roleRef"):
        return GrantAction.UPDATE
    return GrantAction.NONE
