"""Pod mutation from a namespace policy, as RFC 6902 JSON Patch operations (pure): the
webhook's decision for a pod (:func:`decide_pod`), in the domain so that ``kubectl offload
explain`` asks the very function the webhook (webhook/review.py) serves.

The patch is applied by the apiserver to the pod it sent, so every path must exist in
*that* object: a missing parent (``/spec/affinity``, ``nodeAffinity`` ...) is created by
adding the whole missing subtree at the deepest level that does exist. The result is
idempotent: the webhook is registered with ``reinvocationPolicy: IfNeeded``, so it may see
its own output again and must then return no operations.
"""

from __future__ import annotations

from typing import Any

from kube_offload import constants as c
from kube_offload.affinity import (
    PolicyTerms,
    merge_required_terms,
    policy_node_terms,
    virtual_node_toleration,
)
from kube_offload.admission import Decision
from kube_offload.opt_in import pod_policy
from kube_offload.policy import NamespacePolicy, PolicyError

# Kubernetes' own names (not kube-offload's contract): the kubelet marks the API mirror of
# a static pod with this annotation, and unset schedulerName is defaulted to this value.
MIRROR_POD_ANNOTATION = c.ANNOTATION_MIRROR_POD
DEFAULT_SCHEDULER = "default-scheduler"

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


class MalformedPod(ValueError):
    """The pod does not have the shape the Pod API defines (the field path says where)."""


def _mapping(value: Any, path: str) -> dict[str, Any] | None:
    """``value`` as an object, None when absent or null; anything else is malformed."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedPod(f"{path} must be an object, got {type(value).__name__}")
    return value


def _sequence(value: Any, path: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedPod(f"{path} must be a list, got {type(value).__name__}")
    return value


def skip_reason(pod: dict[str, Any]) -> str | None:
    """Why the webhook must leave this pod alone (ARCHITECTURE.md), or None."""
    metadata = _mapping(pod.get("metadata"), "metadata") or {}
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations") or {}
    if MIRROR_POD_ANNOTATION in annotations:
        return "mirror pod of a static pod"
    owners = _sequence(metadata.get("ownerReferences"), "metadata.ownerReferences") or []
    for i, owner in enumerate(owners):
        owner = _mapping(owner, f"metadata.ownerReferences[{i}]") or {}
        if owner.get("kind") == "DaemonSet" and owner.get("controller") is True:
            return f"owned by DaemonSet {owner.get('name', '')}".rstrip()
    spec = _mapping(pod.get("spec"), "spec") or {}
    if spec.get("nodeName"):
        return "spec.nodeName is already set"
    return None


def _same_toleration(existing: Any, wanted: dict[str, Any]) -> bool:
    if not isinstance(existing, dict):
        return False
    # The API defaults a missing operator to Equal; tolerationSeconds changes the meaning
    # of a NoExecute toleration, so a toleration that has it is not ours.
    return (
        existing.get("key") == wanted["key"]
        and (existing.get("operator") or "Equal") == wanted["operator"]
        and existing.get("value") == wanted["value"]
        and existing.get("effect") == wanted["effect"]
        and existing.get("tolerationSeconds") is None
    )


_TOLERATION = virtual_node_toleration()


def _toleration_ops(spec: dict[str, Any]) -> list[dict[str, Any]]:
    wanted = _TOLERATION
    existing = _sequence(spec.get("tolerations"), "spec.tolerations")
    if existing is None:
        return [{"op": "add", "path": "/spec/tolerations", "value": [dict(wanted)]}]
    if any(_same_toleration(t, wanted) for t in existing):
        return []
    return [{"op": "add", "path": "/spec/tolerations/-", "value": dict(wanted)}]


def _check_terms(terms: list[Any]) -> None:
    base = f"spec.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms"
    for i, term in enumerate(terms):
        term = _mapping(term, f"{base}[{i}]")
        if term is None:
            raise MalformedPod(f"{base}[{i}] must be an object, got null")
        for field in ("matchExpressions", "matchFields"):
            _sequence(term.get(field), f"{base}[{i}].{field}")


def _affinity_ops(spec: dict[str, Any], policy_terms: PolicyTerms) -> list[dict[str, Any]]:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping((affinity or {}).get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _mapping(
        (node_affinity or {}).get(_REQUIRED), f"spec.affinity.nodeAffinity.{_REQUIRED}"
    )
    user_terms = _sequence(
        (required or {}).get("nodeSelectorTerms"),
        f"spec.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms",
    )
    if user_terms:
        _check_terms(user_terms)
    merged = merge_required_terms(user_terms, policy_terms)
    if merged == user_terms:
        return []

    # Build the missing subtree bottom-up and add it where the pod's tree stops.
    value: Any = merged
    levels = (
        (required, "nodeSelectorTerms", f"/spec/affinity/nodeAffinity/{_REQUIRED}"),
        (node_affinity, _REQUIRED, "/spec/affinity/nodeAffinity"),
        (affinity, "nodeAffinity", "/spec/affinity"),
        (spec, "affinity", "/spec"),
    )
    for parent, key, parent_path in levels:
        if parent is not None:
            op = "replace" if key in parent else "add"
            return [{"op": op, "path": f"{parent_path}/{key}", "value": value}]
        value = {key: value}
    raise AssertionError("spec always exists here")  # pragma: no cover


def _scheduler_ops(spec: dict[str, Any], scheduler_name: str | None) -> list[dict[str, Any]]:
    if not scheduler_name:
        return []
    current = spec.get("schedulerName")
    # A pod that chose a scheduler of its own keeps it; only the default is replaced.
    if current not in (None, "", DEFAULT_SCHEDULER) or current == scheduler_name:
        return []
    op = "replace" if "schedulerName" in spec else "add"
    return [{"op": op, "path": "/spec/schedulerName", "value": scheduler_name}]


# What the patch takes from a policy, worked out once per policy object: the webhook's
# namespace cache hands out the same NamespacePolicy until the namespace changes. Keyed by
# identity (hashing a policy costs more than the lookup saves); the entry keeps the policy
# alive so that its id cannot be reused while the entry exists.
_POLICY_TERMS: dict[int, tuple[NamespacePolicy, PolicyTerms | None]] = {}
_POLICY_TERMS_MAX = 4096


def _policy_terms(policy: NamespacePolicy) -> PolicyTerms | None:
    entry = _POLICY_TERMS.get(id(policy))
    if entry is not None and entry[0] is policy:
        return entry[1]
    terms = policy_node_terms(policy)
    index = None if terms is None else PolicyTerms.of(terms)
    if len(_POLICY_TERMS) >= _POLICY_TERMS_MAX:
        _POLICY_TERMS.clear()  # only when namespaces churn; a refill is cheap
    _POLICY_TERMS[id(policy)] = (policy, index)
    return index


def mutate_pod(
    pod: dict[str, Any], policy: NamespacePolicy, *, scheduler_name: str | None
) -> list[dict[str, Any]]:
    """The JSON Patch that applies ``policy`` to ``pod``; empty when nothing is to change.

    Raises :class:`MalformedPod` when a field it reads has the wrong JSON type.
    """
    if not isinstance(pod, dict):
        raise MalformedPod(f"the pod must be an object, got {type(pod).__name__}")
    spec = _mapping(pod.get("spec"), "spec")
    if spec is None:
        raise MalformedPod("spec is missing")
    if not policy.enabled or skip_reason(pod):
        return []
    ops: list[dict[str, Any]] = []
    if policy.placement in (c.PLACEMENT_REMOTE, c.PLACEMENT_LOCAL_AND_REMOTE):
        ops += _toleration_ops(spec)
    policy_terms = _policy_terms(policy)
    if policy_terms is not None:
        ops += _affinity_ops(spec, policy_terms)
    ops += _scheduler_ops(spec, scheduler_name)
    return ops


def decide_pod(
    pod: dict[str, Any], namespace: str, policy: NamespacePolicy | PolicyError | None, *, scheduler_name: str | None
) -> Decision:
    """The webhook's answer for creating ``pod`` in ``namespace`` whose policy is ``policy``
    (None: unknown namespace; a PolicyError: invalid labels). Pure, so that ``kubectl
    offload explain`` shows exactly what the webhook adds. Raises :class:`MalformedPod`."""
    if isinstance(policy, PolicyError):
        # Like the extender: a typo in a namespace label must not stop its pods from being
        # created and running locally (under failurePolicy Fail that would be an outage),
        # while nothing goes remote until it is fixed; no toleration keeps the pod off
        # virtual nodes. The warning tells whoever creates the pod why.
        return Decision.allow(
            warnings=[
                f"namespace {namespace} has an invalid kube-offload policy, so this pod is "
                f"not offloaded: {policy}"
            ]
        )
    # A pod that opts in with the kube-offload RuntimeClass gets Remote placement whatever
    # the namespace's labels say (kube_offload/opt_in.py).
    effective = pod_policy(pod, namespace, policy)
    if effective is None or not effective.enabled:
        return Decision.allow()
    return Decision.allow(mutate_pod(pod, effective, scheduler_name=scheduler_name))
