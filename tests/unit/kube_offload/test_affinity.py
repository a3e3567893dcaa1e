"""Policy node terms and the cross-product merge: shape, semantics, idempotency."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_offload import constants as c
from kube_offload.affinity import merge_required_terms, policy_node_terms, virtual_node_toleration
from kube_offload.policy import NamespacePolicy
from kube_offload.selector import parse_selector

NOT_VIRTUAL = {"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}
VIRTUAL = {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}
EU = {"key": "region", "operator": "In", "values": ["eu"]}


def policy(placement: str, selector: str = "", enabled: bool = True) -> NamespacePolicy:
    return NamespacePolicy("demo", enabled, placement, c.DEFAULT_MAPPING, parse_selector(selector))


@pytest.mark.parametrize(
    ("pol", "terms"),
    [
        (policy("Local"), [{"matchExpressions": [NOT_VIRTUAL]}]),
        (policy("Local", "region=eu"), [{"matchExpressions": [NOT_VIRTUAL]}]),
        (policy("Remote"), [{"matchExpressions": [VIRTUAL]}]),
        (policy("Remote", "region=eu"), [{"matchExpressions": [VIRTUAL, EU]}]),
        # Physical OR any virtual node is every node: nothing to require.
        (policy("LocalAndRemote"), None),
        (
            policy("LocalAndRemote", "region=eu"),
            [{"matchExpressions": [NOT_VIRTUAL]}, {"matchExpressions": [VIRTUAL, EU]}],
        ),
        (policy("Remote", enabled=False), None),
    ],
)
def test_policy_node_terms(pol: NamespacePolicy, terms: list | None) -> None:
    assert policy_node_terms(pol) == terms


def test_toleration_matches_the_virtual_node_taint() -> None:
    assert virtual_node_toleration() == {
        "key": "kube-offload.io/virtual-node",
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
    }


def test_no_user_terms_gives_the_policy_terms() -> None:
    policy_terms = [{"matchExpressions": [VIRTUAL, EU]}]
    assert merge_required_terms(None, policy_terms) == policy_terms
    assert merge_required_terms([], policy_terms) == policy_terms
    assert merge_required_terms(None, policy_terms) is not policy_terms


def test_cross_product_keeps_everything_of_the_user() -> None:
    user = [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    pol = [{"matchExpressions": [NOT_VIRTUAL]}, {"matchExpressions": [VIRTUAL, EU]}]
    original = copy.deepcopy(user)
    merged = merge_required_terms(user, pol)
    assert merged == [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}, NOT_VIRTUAL]},
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}, VIRTUAL, EU]},
        {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
            "matchExpressions": [NOT_VIRTUAL],
        },
        {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
            "matchExpressions": [VIRTUAL, EU],
        },
    ]
    assert user == original  # inputs are never modified


def test_identical_expressions_are_not_repeated() -> None:
    user = [{"matchExpressions": [EU]}]
    assert merge_required_terms(user, [{"matchExpressions": [VIRTUAL, EU]}]) == [
        {"matchExpressions": [EU, VIRTUAL]}
    ]


def test_identical_resulting_terms_are_not_repeated() -> None:
    user = [{"matchExpressions": [EU]}, {"matchExpressions": [EU, EU]}]
    assert merge_required_terms(user, [{"matchExpressions": [VIRTUAL]}]) == [
        {"matchExpressions": [EU, VIRTUAL]}
    ]


def test_empty_user_term_stays_empty() -> None:
    # An empty term matches no node; crossing it would make it match some.
    assert merge_required_terms([{}], [{"matchExpressions": [VIRTUAL]}]) == [{}]


@pytest.mark.parametrize("placement", ["Local", "Remote", "LocalAndRemote"])
def test_merging_twice_adds_nothing(placement: str) -> None:
    pol = policy_node_terms(policy(placement, "region in (eu,us)"))
    assert pol is not None
    user = [
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
    ]
    once = merge_required_terms(user, pol)
    assert merge_required_terms(once, pol) == once
    assert merge_required_terms(merge_required_terms(None, pol), pol) == pol


# --- semantics: the merged affinity selects exactly (user AND policy) -----------------------


def _expression_matches(expression: dict, labels: dict) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(op)


def _term_matches(term: dict, labels: dict, name: str) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # Kubernetes: an empty term matches nothing
    fields_ok = all(_expression_matches(f, {"metadata.name": name}) for f in fields)
    return fields_ok and all(_expression_matches(e, labels) for e in expressions)


def _terms_match(terms: list[dict] | None, labels: dict, name: str) -> bool:
    return terms is None or any(_term_matches(t, labels, name) for t in terms)


_values = st.sampled_from(["a", "b", "c"])
_expressions = st.one_of(
    st.builds(
        lambda k, op, vs: {"key": k, "operator": op, "values": vs},
        st.sampled_from(["region", "disk", c.LABEL_TYPE]),
        st.sampled_from(["In", "NotIn"]),
        st.lists(_values, min_size=1, max_size=2, unique=True),
    ),
    st.builds(
        lambda k, op: {"key": k, "operator": op},
        st.sampled_from(["region", "disk"]),
        st.sampled_from(["Exists", "DoesNotExist"]),
    ),
)
_fields = st.builds(
    lambda op, vs: {"key": "metadata.name", "operator": op, "values": vs},
    st.sampled_from(["In", "NotIn"]),
    st.lists(st.sampled_from(["n1", "n2"]), min_size=1, max_size=2, unique=True),
)
_terms = st.builds(
    lambda exprs, fields: {
        **({"matchExpressions": exprs} if exprs else {}),
        **({"matchFields": fields} if fields else {}),
    },
    st.lists(_expressions, max_size=3),
    st.lists(_fields, max_size=1),
)
_policies = st.builds(
    policy,
    st.sampled_from(["Local", "Remote", "LocalAndRemote"]),
    st.sampled_from(["", "region=a", "region in (a,b),disk", "!disk", "region!=c"]),
)
_nodes = st.tuples(
    st.fixed_dictionaries(
        {},
        optional={
            "region": _values,
            "disk": _values,
            c.LABEL_TYPE: st.sampled_from([c.TYPE_VIRTUAL_NODE, "other"]),
        },
    ),
    st.sampled_from(["n1", "n2", "n3"]),
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), st.lists(_terms, min_size=1, max_size=3)), _policies, st.lists(_nodes, max_size=8))
def test_merge_selects_user_and_policy(user: list | None, pol: NamespacePolicy, nodes: list) -> None:
    policy_terms = policy_node_terms(pol)
    if policy_terms is None:
        return
    merged = merge_required_terms(user, policy_terms)
    assert merged, "never an empty term list"
    assert merge_required_terms(merged, policy_terms) == merged
    for labels, name in nodes:
        expected = _terms_match(user, labels, name) and _terms_match(policy_terms, labels, name)
        assert _terms_match(merged, labels, name) is expected, (labels, name)
