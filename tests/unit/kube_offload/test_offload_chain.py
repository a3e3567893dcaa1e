"""The offload chain (kube_offload/offload_chain.py): parsing, loops, and what a provider
refuses at admission."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from kube_offload import offload_chain as oc


@pytest.mark.parametrize(("value", "chain"), [
    (None, ()),
    ("", ()),
    ("a", ("a",)),
    ("a,b", ("a", "b")),
    ("cluster-1, cluster-2", ("cluster-1", "cluster-2")),
])
def test_parse(value, chain):
    assert oc.parse(value) == chain


@pytest.mark.parametrize("value", ["a,,b", "A", "a,b-", "-a", "a/b", "x" * 64])
def test_parse_refuses_what_is_not_a_chain_of_cluster_ids_naming_the_annotation(value):
    with pytest.raises(oc.ChainError, match=c.ANNOTATION_OFFLOAD_CHAIN):
        oc.parse(value)


def test_parse_bounds_the_number_of_hops():
    at_most = ",".join(f"c{i}" for i in range(c.MAX_OFFLOAD_HOPS))
    assert len(oc.parse(at_most)) == c.MAX_OFFLOAD_HOPS
    with pytest.raises(oc.ChainError, match=f"more than the {c.MAX_OFFLOAD_HOPS} allowed"):
        oc.parse(at_most + ",one-more")


def test_encode_and_describe():
    assert oc.encode(("a", "b")) == "a,b"
    assert oc.parse(oc.encode(("a", "b"))) == ("a", "b")
    assert oc.describe(("a", "b", "a")) == "a -> b -> a"
    assert oc.extend((), "a") == ("a",)
    assert oc.extend(("a",), "b") == ("a", "b")


def test_a_loop_is_named_by_its_whole_chain():
    assert oc.loop_problem(("a",), "b") is None
    assert oc.loop_problem(("a", "b"), "c") is None
    problem = oc.loop_problem(("a", "b"), "a")
    assert problem is not None and "a -> b -> a" in problem and "furtherOffloading" in problem
    longer = oc.loop_problem(("a", "b", "c"), "b")
    assert longer is not None and "a -> b -> c -> b" in longer


def test_a_chain_past_the_hop_limit_is_refused():
    full = tuple(f"c{i}" for i in range(c.MAX_OFFLOAD_HOPS))
    assert oc.loop_problem(full[:-1], "new") is None
    problem = oc.loop_problem(full, "new")
    assert problem is not None and "too long" in problem


def chain(value: str) -> dict[str, str]:
    return {c.ANNOTATION_OFFLOAD_CHAIN: value}


def test_admission_accepts_a_chain_ending_with_the_consumer():
    assert oc.admission_problems(chain("a,b"), "b", "c") == []
    assert oc.admission_problems(chain("b"), "b", "c") == []


def test_admission_reads_no_chain_as_the_consumer_alone():
    assert oc.admission_problems({}, "b", "c") == []
    assert oc.admission_problems(None, "b", "c") == []
    # ... which is a loop when the consumer is this very cluster
    assert "b -> b" in oc.admission_problems({}, "b", "b")[0]


def test_admission_refuses_a_chain_that_hides_its_sender():
    problems = oc.admission_problems(chain("a"), "b", "c")
    assert len(problems) == 1 and "must end with 'b'" in problems[0]


def test_admission_refuses_a_loop_back_to_this_provider_naming_the_chain():
    problems = oc.admission_problems(chain("a,b"), "b", "a")
    assert len(problems) == 1 and "a -> b -> a" in problems[0]


def test_admission_without_its_own_id_checks_all_but_the_loop():
    assert oc.admission_problems(chain("a,b"), "b", "") == []
    assert oc.admission_problems(chain("a"), "b", "") != []
    assert "not a cluster id" in oc.admission_problems(chain("a,,b"), "b", "")[0]


@pytest.mark.parametrize("value", [3, ["a"], {"a": 1}, True])
def test_a_value_that_is_not_a_string_is_refused_not_an_error(value):
    with pytest.raises(oc.ChainError, match="must be a string"):
        oc.parse(value)
    assert "must be a string" in oc.admission_problems({c.ANNOTATION_OFFLOAD_CHAIN: value}, "b", "c")[0]
