"""Label selector string syntax: every operator, canonical text, matching, bad syntax."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_offload.selector import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    LabelSelector,
    Requirement,
    SelectorError,
    parse_selector,
)

R = Requirement


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("   ", ()),
        ("a=b", (R("a", IN, ("b",)),)),
        ("a==b", (R("a", IN, ("b",)),)),
        ("a!=b", (R("a", NOT_IN, ("b",)),)),
        ("a in (x,y)", (R("a", IN, ("x", "y")),)),
        ("a notin (x,y)", (R("a", NOT_IN, ("x", "y")),)),
        ("a", (R("a", EXISTS),)),
        ("!a", (R("a", DOES_NOT_EXIST),)),
        ("a=", (R("a", IN, ("",)),)),  # empty value, as Kubernetes allows
        ("a in (y, x, y)", (R("a", IN, ("x", "y")),)),  # a set: sorted, deduplicated
        ("a in (x,)", (R("a", IN, ("", "x")),)),
        (
            "  topology.kubernetes.io/region in ( eu-west , eu-south ) , provider != aws ",
            (
                R("provider", NOT_IN, ("aws",)),
                R("topology.kubernetes.io/region", IN, ("eu-south", "eu-west")),
            ),
        ),
        ("b=1,a=2", (R("a", IN, ("2",)), R("b", IN, ("1",)))),  # canonical order by key
        ("a=in", (R("a", IN, ("in",)),)),  # "in" is a fine label value
        ("a\tin\n(x)", (R("a", IN, ("x",)),)),
        ("!a,b", (R("a", DOES_NOT_EXIST), R("b", EXISTS))),
        ("example.com/gpu-type=a100", (R("example.com/gpu-type", IN, ("a100",)),)),
    ],
)
def test_parse(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_selector(text) == LabelSelector(expected)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("a==b", "a=b"),
        ("a in (b)", "a=b"),
        ("a notin (b)", "a!=b"),
        ("a in (c, b)", "a in (b,c)"),
        ("a notin (c,b)", "a notin (b,c)"),
        (" ! a ", "!a"),
        ("z, a", "a,z"),
        ("", ""),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(str(selector)) == selector


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("", {"a": "b"}, True),
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a!=b", {"a": "c"}, True),
        ("a!=b", {"a": "b"}, False),
        ("a!=b", {}, True),  # NotIn matches a missing key, as in Kubernetes
        ("a notin (b,c)", {}, True),
        ("a notin (b,c)", {"a": "c"}, False),
        ("a in (b,c)", {"a": "c"}, True),
        ("a in (b,c)", {"a": "d"}, False),
        ("a", {"a": ""}, True),
        ("a", {}, False),
        ("!a", {}, True),
        ("!a", {"a": "x"}, False),
        ("a=b,c", {"a": "b"}, False),  # comma is AND
        ("a=b,c", {"a": "b", "c": "1"}, True),
        ("a=", {"a": ""}, True),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


def test_node_selector_requirements() -> None:
    selector = parse_selector("a=1,b!=2,c in (3,4),d notin (5),e,!f")
    assert selector.to_node_selector_requirements() == [
        {"key": "a", "operator": "In", "values": ["1"]},
        {"key": "b", "operator": "NotIn", "values": ["2"]},
        {"key": "c", "operator": "In", "values": ["3", "4"]},
        {"key": "d", "operator": "NotIn", "values": ["5"]},
        # The API refuses a values field on Exists / DoesNotExist.
        {"key": "e", "operator": "Exists"},
        {"key": "f", "operator": "DoesNotExist"},
    ]


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("a in b", 5, "expected '(' after 'in'"),
        ("a in ()", 6, "'in' needs at least one value"),
        ("a in (x", 7, "expected ',' or ')'"),
        ("a in (x y)", 8, "expected ',' or ')'"),
        ("a,", 2, "expected a label key, found the end of the text"),
        (",a", 0, "expected a label key, found ','"),
        ("a,,b", 2, "expected a label key"),
        ("a b", 2, "expected an operator"),
        ("a=b c", 4, "expected ',' or the end"),
        ("a=b=c", 3, "expected ',' or the end"),
        ("!a=b", 2, "'!a' takes no operator or value"),
        ("!", 1, "expected a label key"),
        ("=b", 0, "expected a label key, found '='"),
        ("in=b", 0, "keyword 'in'"),
        ("a>1", 1, "'>' operator is not supported"),
        ("a<1", 1, "'<' operator is not supported"),
        ("A/b=c", 0, "must be a DNS subdomain"),
        ("/b=c", 0, "empty prefix"),
        ("a/=c", 0, "empty name"),
        ("-a=c", 0, "must start and end with a letter or digit"),
        ("a=-c", 2, "label value '-c'"),
        ("a=" + "v" * 64, 2, "longer than 63"),
        ("k" * 64, 0, "longer than 63"),
        ("p" * 254 + "/a", 0, "longer than 253"),
        ("a in (x,(y))", 8, "expected a label value, found '('"),
    ],
)
def test_bad_syntax_points_at_the_problem(text: str, position: int, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    error = info.value
    assert fragment in str(error)
    assert error.position == position
    assert f"at position {position + 1} of {text!r}" in str(error)
    assert "accepted syntax: key=value" in str(error)
    assert error.caret.splitlines()[1] == " " * position + "^"


def test_longest_valid_key_and_value() -> None:
    key = "a" * 253 + "/" + "b" * 63
    selector = parse_selector(f"{key}={'v' * 63}")
    assert selector.requirements[0].key == key


@pytest.mark.parametrize(
    ("operator", "values"),
    [("Gt", ("1",)), (IN, ()), (NOT_IN, ()), (EXISTS, ("x",)), (DOES_NOT_EXIST, ("x",))],
)
def test_requirement_rejects_inconsistent_fields(operator: str, values: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        Requirement("a", operator, values)


_names = st.from_regex(r"\A[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?\Z")
# A key spelled like the keywords cannot be written in selector syntax (Kubernetes' lexer
# reads it as the keyword too); values can.
_keys = _names.filter(lambda k: k not in ("in", "notin"))
_requirements = st.one_of(
    st.builds(lambda k: R(k, EXISTS), _keys),
    st.builds(lambda k: R(k, DOES_NOT_EXIST), _keys),
    st.builds(
        lambda k, op, vs: R(k, op, tuple(sorted(set(vs)))),
        _keys,
        st.sampled_from([IN, NOT_IN]),
        st.lists(_names, min_size=1, max_size=4),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_requirements, max_size=5))
def test_text_round_trip(requirements: list[Requirement]) -> None:
    selector = LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))
    assert parse_selector(str(selector)) == selector
