"""Node affinity and toleration that express a namespace policy on a pod (pure functions).

Required node affinity is an OR of nodeSelectorTerms, each an AND of expressions. The
policy's terms are combined with the pod's own by cross product (ARCHITECTURE.md: each
policy term ANDed into each user term, nothing of the user's dropped), and the merge is
idempotent so that webhook re-invocation (reinvocationPolicy: IfNeeded) or a pod created
from an already-mutated manifest gains nothing the second time.

:func:`term_matches` evaluates a term against one node as kube-scheduler does: the virtual
kubelet uses it to drop the terms that chose the virtual node, ``kubectl offload explain``
to say which nodes a pod's affinity allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kube_offload import constants as c
from kube_offload.policy import NamespacePolicy
from kube_offload.selector import IN, NOT_IN


def _type_expression(operator: str) -> dict[str, Any]:
    return {"key": c.LABEL_TYPE, "operator": operator, "values": [c.TYPE_VIRTUAL_NODE]}


def policy_node_terms(policy: NamespacePolicy) -> list[dict[str, Any]] | None:
    """The required nodeSelectorTerms of the placement table; None when nothing is required.

    LocalAndRemote with an empty cluster selector is "physical OR any virtual node", i.e.
    every node, so it requires nothing (the toleration alone opens virtual nodes).
    """
    if not policy.enabled:
        return None
    local_term = {"matchExpressions": [_type_expression(NOT_IN)]}
    remote_term = {
        "matchExpressions": [_type_expression(IN)]
        + policy.cluster_selector.to_node_selector_requirements()
    }
    if policy.placement == c.PLACEMENT_LOCAL:
        return [local_term]
    if policy.placement == c.PLACEMENT_REMOTE:
        return [remote_term]
    if policy.cluster_selector.is_empty():
        return None
    return [local_term, remote_term]


def _expression_identity(expression: Any) -> Any:
    """Comparable identity of an expression: values are a set for In/NotIn semantics."""
    if not isinstance(expression, dict):
        return ("opaque", repr(expression))
    values = expression.get("values")
    if isinstance(values, list):
        values = tuple(sorted(map(str, values)))
    elif values is not None:
        values = ("opaque", repr(values))
    return (expression.get("key"), expression.get("operator"), values or ())


def _identities(expressions: Any) -> list[tuple[Any, Any]]:
    return [(_expression_identity(e), e) for e in expressions or ()]


def _fields_identity(term: dict[str, Any]) -> frozenset[Any]:
    return frozenset(_expression_identity(f) for f in term.get("matchFields") or ())


@dataclass(frozen=True)
class PolicyTerms:
    """A policy's nodeSelectorTerms with the identity of each expression worked out once:
    the webhook keeps one per namespace policy, so an admission only computes the
    identities of the pod's own expressions."""

    terms: tuple[dict[str, Any], ...]
    identities: tuple[list[tuple[Any, Any]], ...]
    sets: tuple[frozenset[Any], ...]

    @classmethod
    def of(cls, terms: Sequence[dict[str, Any]]) -> PolicyTerms:
        identities = tuple(_identities(t.get("matchExpressions")) for t in terms)
        return cls(
            terms=tuple(terms),
            identities=identities,
            sets=tuple(frozenset(identity for identity, _ in p) for p in identities),
        )


def merge_required_terms(
    user_terms: list[dict[str, Any]] | None, policy_terms: Sequence[dict[str, Any]] | PolicyTerms
) -> list[dict[str, Any]]:
    """Cross product of the pod's required terms with the policy's (new lists and terms;
    expression objects are shared, never modified).

    A user term that already contains every expression of some policy term already
    implies the policy, so it is kept as is instead of being crossed again: that is what
    makes a second merge a no-op, and it does not change which nodes match. Identical
    expressions within a term and identical terms (expressions compared as sets) are
    kept once.
    """
    index = policy_terms if isinstance(policy_terms, PolicyTerms) else PolicyTerms.of(policy_terms)
    if not user_terms:
        return [_copy_term(t) for t in index.terms]
    policy, policy_sets = index.identities, index.sets
    merged: list[dict[str, Any]] = []
    seen: set[Any] = set()

    for user_term in user_terms:
        user = _identities(user_term.get("matchExpressions"))
        user_set = frozenset(identity for identity, _ in user)
        fields = _fields_identity(user_term)
        # An empty term matches no node in Kubernetes; crossing it would make it match
        # some, so it stays as the user wrote it.
        if (not user and not fields) or any(p <= user_set for p in policy_sets):
            candidates = [(_copy_term(user_term), (user_set, fields))]
        else:
            candidates = []
            for policy_expressions in policy:
                ids: set[Any] = set()
                expressions = []
                for identity, expression in user + policy_expressions:
                    if identity not in ids:
                        ids.add(identity)
                        expressions.append(expression)
                term = _copy_term(user_term)
                term["matchExpressions"] = expressions
                candidates.append((term, (frozenset(ids), fields)))
        for term, identity in candidates:
            if identity not in seen:
                seen.add(identity)
                merged.append(term)
    return merged


def _copy_term(term: dict[str, Any]) -> dict[str, Any]:
    copied = dict(term)
    for field in ("matchExpressions", "matchFields"):
        if isinstance(copied.get(field), list):
            copied[field] = list(copied[field])
    return copied


# --- evaluating terms against a node (Kubernetes' NodeSelectorTerm semantics) ----------------
def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    """NodeSelectorTerm semantics: every expression and field requirement holds; an
    empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    if not all(requirement_matches(e, labels) for e in expressions):
        return False
    return all(requirement_matches(f, {"metadata.name": node_name}) for f in fields)


def requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key: Any = requirement.get("key")
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    value = labels.get(key) if present else None
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(value or ""), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def virtual_node_toleration() -> dict[str, Any]:
    return {
        "key": c.TAINT_KEY,
        "operator": "Equal",
        "value": c.TAINT_VALUE,
        "effect": c.TAINT_EFFECT,
    }
