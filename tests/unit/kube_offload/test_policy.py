"""Namespace policy: defaults, every accepted value, and errors that name key and fix."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from kube_offload.policy import (
    NamespacePolicy,
    PolicyError,
    policy_from_namespace,
    policy_values,
    validate_namespace,
)
from kube_offload.selector import parse_selector
from support import builders


def namespace(labels: dict | None = None, annotations: dict | None = None, name: str = "demo") -> dict:
    return builders.namespace(name, labels=labels, annotations=annotations)


def test_defaults_when_nothing_is_set() -> None:
    assert policy_from_namespace(namespace()) == NamespacePolicy(
        namespace="demo",
        enabled=False,
        placement=c.DEFAULT_PLACEMENT,
        mapping=c.DEFAULT_MAPPING,
        cluster_selector=parse_selector(""),
    )
    assert c.DEFAULT_PLACEMENT == "LocalAndRemote" and c.DEFAULT_MAPPING == "DefaultName"


def test_enabled_with_every_field() -> None:
    policy = policy_from_namespace(
        namespace(
            {
                c.LABEL_ENABLED: "true",
                c.LABEL_POD_PLACEMENT: "Remote",
                c.LABEL_NAMESPACE_MAPPING: "EnforceSameName",
            },
            {c.ANNOTATION_CLUSTER_SELECTOR: "region in (eu-west,eu-south),provider!=aws"},
        )
    )
    assert policy.enabled is True
    assert policy.placement == "Remote"
    assert policy.mapping == "EnforceSameName"
    assert str(policy.cluster_selector) == "provider!=aws,region in (eu-south,eu-west)"


@pytest.mark.parametrize("placement", c.PLACEMENTS)
def test_every_placement_is_accepted(placement: str) -> None:
    policy = policy_from_namespace(namespace({c.LABEL_POD_PLACEMENT: placement}))
    assert policy.placement == placement


@pytest.mark.parametrize("mapping", c.MAPPINGS)
def test_every_mapping_is_accepted(mapping: str) -> None:
    assert policy_from_namespace(namespace({c.LABEL_NAMESPACE_MAPPING: mapping})).mapping == mapping


def test_placement_error_names_key_value_and_choices() -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_namespace(namespace({c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "remote"}))
    error = info.value
    assert error.key == c.LABEL_POD_PLACEMENT
    assert error.value == "remote"
    assert error.allowed == c.PLACEMENTS
    assert str(error).startswith(
        'kube-offload.io/pod-placement: "remote" is not valid; use one of Local, Remote, LocalAndRemote'
    )
    assert "did you mean Remote?" in str(error)


def test_no_case_hint_for_an_unrelated_value() -> None:
    error = validate_namespace(namespace({c.LABEL_POD_PLACEMENT: "bogus"}))[0]
    assert str(error) == (
        'kube-offload.io/pod-placement: "bogus" is not valid; use one of Local, Remote, LocalAndRemote'
    )


def test_mapping_error() -> None:
    (error,) = validate_namespace(namespace({c.LABEL_NAMESPACE_MAPPING: "SameName"}))
    assert error.key == c.LABEL_NAMESPACE_MAPPING
    assert "use one of DefaultName, EnforceSameName" in str(error)


@pytest.mark.parametrize("value", ["True", "yes", "1", "false", ""])
def test_enabled_must_be_exactly_true(value: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_namespace(namespace({c.LABEL_ENABLED: value}))
    assert info.value.key == c.LABEL_ENABLED
    assert info.value.allowed == ("true",)
    assert 'the only accepted value is "true"' in str(info.value)
    assert "remove the label" in str(info.value)


def test_selector_error_carries_parser_detail() -> None:
    (error,) = validate_namespace(namespace(annotations={c.ANNOTATION_CLUSTER_SELECTOR: "region in eu"}))
    assert error.key == c.ANNOTATION_CLUSTER_SELECTOR
    assert error.value == "region in eu"
    assert "expected '(' after 'in'" in str(error)
    assert "at position 11" in str(error)
    assert "key in (v1,v2)" in str(error)


def test_validate_reports_every_problem_in_key_order() -> None:
    errors = validate_namespace(
        namespace(
            {
                c.LABEL_ENABLED: "yes",
                c.LABEL_POD_PLACEMENT: "Both",
                c.LABEL_NAMESPACE_MAPPING: "x",
            },
            {c.ANNOTATION_CLUSTER_SELECTOR: "a in ()"},
        )
    )
    assert [e.key for e in errors] == [
        c.LABEL_ENABLED,
        c.LABEL_POD_PLACEMENT,
        c.LABEL_NAMESPACE_MAPPING,
        c.ANNOTATION_CLUSTER_SELECTOR,
    ]
    with pytest.raises(PolicyError) as info:
        policy_from_namespace(namespace({c.LABEL_POD_PLACEMENT: "Both", c.LABEL_NAMESPACE_MAPPING: "x"}))
    assert info.value.key == c.LABEL_POD_PLACEMENT  # the first one


def test_valid_namespace_has_no_problems() -> None:
    assert validate_namespace(namespace({c.LABEL_ENABLED: "true", "unrelated": "x"})) == []
    assert validate_namespace({"metadata": {"name": "x"}}) == []


def test_tolerates_missing_or_null_metadata() -> None:
    assert policy_from_namespace({}).enabled is False
    assert policy_from_namespace({"metadata": None}).namespace == ""
    assert policy_from_namespace({"metadata": {"labels": None, "annotations": None}}).enabled is False


def test_policy_values() -> None:
    values = policy_values(namespace({c.LABEL_POD_PLACEMENT: "Local"}, {c.ANNOTATION_CLUSTER_SELECTOR: "a"}))
    assert values == {
        c.LABEL_ENABLED: None,
        c.LABEL_POD_PLACEMENT: "Local",
        c.LABEL_NAMESPACE_MAPPING: None,
        c.ANNOTATION_CLUSTER_SELECTOR: "a",
    }
