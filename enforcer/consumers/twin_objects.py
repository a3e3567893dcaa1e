"""The objects the enforcer makes for a twin namespace, and what brings each to what it
should be (pure): the namespace (labelled with the consumer's origin id and Pod Security
level), the RoleBinding of the consumer's twin role, and the ResourceQuota bounding what
the consumer may make in it (the object-count and storage keys of its quota).

A namespace is *ours* only when it carries all three marks the enforcer writes at
creation — managed-by=enforcer, origin=<id> and twin-request=T/<name> — so a namespace
made by anyone else, or for another request, is never adopted, relabelled or deleted.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping

from kube_offload.consumer_quota import twin_object_quota
from enforcer.consumers.twin_names import request_key
from kube_offload import constants as c
from kube_offload.consumers import consumer_name, service_account_of
from kube_offload.resources import QuantityError, parse_quantity

RBAC_GROUP = "rbac.authorization.k8s.io"


class RoleBindingAction(Enum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"  # subjects or marks differ
    RECREATE = "recreate"  # roleRef differs, and roleRef is immutable


class ResourceQuotaAction(Enum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"  # spec.hard or marks differ
    DELETE = "delete"  # ours, and the Consumer's spec.quota has no object key any more


def is_ours(namespace: Mapping[str, Any] | None, consumer_id: str, key: str) -> bool:
    """Whether the enforcer made ``namespace`` for request ``key`` of ``consumer_id``."""
    if not namespace:
        return False
    metadata = namespace.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return (
        labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER
        and labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == consumer_id
        and annotations.get(c.ANNOTATION_TWIN_REQUEST) == key
    )


def made_for(namespace: Mapping[str, Any] | None, key: str) -> bool:
    """Whether the enforcer made ``namespace`` for request ``key``, whichever consumer it
    was for (the deletion path, where the Consumer may be gone already)."""
    if not namespace:
        return False
    metadata = namespace.get("metadata") or {}
    return (metadata.get("labels") or {}).get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER and (
        metadata.get("annotations") or {}
    ).get(c.ANNOTATION_TWIN_REQUEST) == key


def desired_labels(consumer_id: str, level: str, further: str | None = None) -> dict[str, str | None]:
    """The twin's labels; a None value is a label that must be absent. ``further``: the
    pod placement of Consumer spec.furtherOffloading (kube_offload.consumers.further_offloading),
    None when the consumer's pods may not be offloaded further. The namespace policy labels
    are then this cluster's own local components' business (its webhook, extender and
    virtual kubelets treat the twin as an offloaded namespace, docs/multihop.md); the
    enforcer owns them on its twins, so a hand-set label does not outlive the Consumer's
    word either way."""
    return {
        c.LABEL_ORIGIN_CLUSTER_ID: consumer_id,
        c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
        c.LABEL_PSA_ENFORCE: level,
        c.LABEL_PSA_ENFORCE_VERSION: "latest",
        c.LABEL_ENABLED: c.ENABLED_VALUE if further else None,
        c.LABEL_POD_PLACEMENT: further,
    }


def desired_annotations(request: Mapping[str, Any]) -> dict[str, str]:
    return {
        c.ANNOTATION_TWIN_OF: str((request.get("spec") or {}).get("localNamespace") or ""),
        c.ANNOTATION_TWIN_REQUEST: request_key(request),
    }


def desired_namespace(request: Mapping[str, Any], consumer_id: str, level: str, further: str | None = None) -> dict[str, Any]:
    labels = {k: v for k, v in desired_labels(consumer_id, level, further).items() if v is not None}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": (request.get("metadata") or {}).get("name"),
            "labels": labels,
            "annotations": desired_annotations(request),
        },
    }


def namespace_patch(
    namespace: Mapping[str, Any], request: Mapping[str, Any], consumer_id: str, level: str, further: str | None = None
) -> dict[str, Any] | None:
    """A merge patch bringing our namespace's labels and annotations to what they should
    be (only the keys that differ; null removes a label that must be absent), or None
    when they already are."""
    metadata = namespace.get("metadata") or {}
    patch: dict[str, Any] = {}
    sections: tuple[tuple[str, Mapping[str, str | None]], ...] = (
        ("labels", desired_labels(consumer_id, level, further)),
        ("annotations", desired_annotations(request)),
    )
    for section, desired in sections:
        current = metadata.get(section) or {}
        changed = {k: v for k, v in desired.items() if current.get(k) != v}
        if changed:
            patch.setdefault("metadata", {})[section] = changed
    return patch or None


def desired_rolebinding(namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any], twin_role: str) -> dict[str, Any]:
    account_namespace, account_name = service_account_of(consumer)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": _marked_metadata(c.TWIN_ROLEBINDING_NAME, namespace, request, consumer),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": twin_role},
        "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": account_namespace}],
    }


def rolebinding_action(existing: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> RoleBindingAction:
    if existing is None:
        return RoleBindingAction.CREATE
    if existing.get("roleRef") != desired["roleRef"]:
        return RoleBindingAction.RECREATE
    marks_ok = _has_marks(existing, desired)
    if _subjects(existing) != _subjects(desired) or not marks_ok:
        return RoleBindingAction.UPDATE
    return RoleBindingAction.NONE


def desired_resourcequota(namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ResourceQuota of twin ``namespace``: the object-count and storage keys of the
    Consumer's ``spec.quota``, each bounding this twin (enforcer/consumers/quota.py
    :func:`~kube_offload.consumer_quota.twin_object_quota`); None when it has none (no ResourceQuota:
    nothing is limited). Raises QuantityError naming the key of a figure that does not
    parse (the provider's mistake)."""
    hard = twin_object_quota((consumer.get("spec") or {}).get("quota"))
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _marked_metadata(c.TWIN_RESOURCEQUOTA_NAME, namespace, request, consumer),
        "spec": {"hard": hard},
    }


def same_hard(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether two ``spec.hard`` say the same: compared as quantities, since the API
    server writes them back in its canonical form ("1000m" comes back as "1")."""
    if set(existing) != set(desired):
        return False
    try:
        return all(parse_quantity(existing[k]) == parse_quantity(desired[k]) for k in desired)
    except QuantityError:
        return False


def resourcequota_action(existing: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> ResourceQuotaAction:
    """What brings the twin's ResourceQuota (``existing``, by its name) to ``desired``.
    One of that name without our mark (made by the provider's admin: the consumer has no
    rights on ResourceQuotas) is replaced when one is desired, else left alone."""
    if desired is None:
        if existing is None:
            return ResourceQuotaAction.NONE
        labels = (existing.get("metadata") or {}).get("labels") or {}
        ours = labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER
        return ResourceQuotaAction.DELETE if ours else ResourceQuotaAction.NONE
    if existing is None:
        return ResourceQuotaAction.CREATE
    marks_ok = _has_marks(existing, desired)
    hard = (existing.get("spec") or {}).get("hard") or {}
    if not marks_ok or not same_hard(hard, desired["spec"]["hard"]):
        return ResourceQuotaAction.UPDATE
    return ResourceQuotaAction.NONE


def _marked_metadata(name: str, namespace: str, request: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of a twin's RoleBinding or ResourceQuota: ours (managed-by), the
    consumer's (origin) and the request's (twin-request), so an event on it finds the
    request and an object of that name made by someone else is told apart."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: consumer_name(consumer)},
        "annotations": {c.ANNOTATION_TWIN_REQUEST: request_key(request)},
    }


def _has_marks(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``existing`` carries every label and annotation ``desired`` sets (others
    it may carry are left alone)."""
    metadata = existing.get("metadata") or {}
    wanted = desired["metadata"]
    return all((metadata.get("labels") or {}).get(k) == v for k, v in wanted["labels"].items()) and all(
        (metadata.get("annotations") or {}).get(k) == v for k, v in wanted["annotations"].items()
    )


def _subjects(binding: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (s.get("kind"), s.get("name"), s.get("namespace") or "", s.get("apiGroup") or "")
        for s in binding.get("subjects") or []
    )
