"""The rule book (kube_offload/rule_book.py) is complete and its two sides agree: one table of
cases (tests/support/policy_cases.py) through the provider's check and the consumer's fit.

- every key of Consumer spec.policy (kube_offload/provider_policy.py) has a row, and a case;
- each case gets the verdict the table says from the provider's check, naming the case's key;
- the consumer's fit never sends what the check refuses: the object it sends passes the
  check (every row, those the provider sets included), and what it refuses the check
  refuses too (but where the provider sets instead of refusing: then not sending is the
  consumer's own choice, said on its object);
- each row's violations carry the fit its row says (drop, adjust, refuse, ask).
The e2e half (tests/e2e/test_policy_agreement.py) runs the same table through the real API
server with the chart's policies and the enforcer's webhooks.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_offload import provider_policy as pp
from kube_offload import policy_matching as pm
from kube_offload import rule_book
from kube_offload.consumer_quota import consumer_quota
from kube_offload.policy_rules import DELETE, Context, FitAction, Kind, ProviderAction, Violation, fit, refusal_lines
from support.policy_cases import CASES, TERMS, Case, substituted

TWIN = "agree-twin"


def context(case: Case) -> Context:
    policy, quota = TERMS[case.terms]
    fields: dict[str, Any] = {"consumer_id": "agree", "namespace": TWIN, **case.context}
    return Context(policy=pp.parse_policy(policy), quota=consumer_quota({"policy": policy, "quota": quota}), **fields)


def subject(case: Case) -> dict[str, Any]:
    return substituted(case.obj, TWIN)


def by_row(case: Case) -> list[tuple[rule_book.Rule, list[Violation]]]:
    return [(rule, rule.check(subject(case), context(case))) for rule in rule_book.rules_for(case.kind)]


# --- complete -------------------------------------------------------------------------------------
def test_every_policy_key_has_a_row():
    rows = {rule.key for rule in rule_book.RULES}
    missing = [key for key in rule_book.policy_keys() if key not in rows]
    assert not missing, f"keys of Consumer spec.policy with no rule in kube_offload/rule_book.py: {missing}"


def test_every_row_and_every_policy_key_has_a_case():
    cased = {case.key for case in CASES}
    missing = [key for key in {*rule_book.policy_keys(), *(r.key for r in rule_book.RULES)} if key not in cased]
    assert not missing, f"rules without a case in tests/support/policy_cases.py: {sorted(missing)}"


def test_a_key_added_to_the_policy_without_a_row_is_caught(monkeypatch):
    # The completeness test can fail: a new key in the schema and nothing else.
    schema = {**pp.SCHEMA, "pods": (pp.SCHEMA["pods"][0], {**pp.SCHEMA["pods"][1], "hostUsers": ("host_users", "bool")})}
    monkeypatch.setattr(pp, "SCHEMA", schema)
    assert "pods.hostUsers" in rule_book.policy_keys()
    assert "pods.hostUsers" not in {rule.key for rule in rule_book.RULES}


def test_case_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


# --- the provider's check ----------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_check_gives_the_tables_verdict_naming_the_key(case: Case):
    violations = rule_book.check(case.kind, subject(case), context(case), refused_by_provider=True)
    assert bool(violations) == case.refused, refusal_lines(violations)
    if case.refused:
        keys = {v.key for v in violations}
        rows = {rule.key for rule, found in by_row(case) if found}
        assert case.key in rows, (case.key, rows)
        grantable = [v for v in violations if v.key]
        for v in grantable:
            assert f"spec.policy.{v.key}" in v.problem, v.problem  # the refusal names the key
        assert keys, violations


# --- the consumer's fit agrees ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_fit_sends_only_what_the_check_admits(case: Case):
    rows = by_row(case)
    fitted = fit(subject(case), [v for _rule, found in rows for v in found])
    if fitted.refused:
        refusing_rows = {rule.key: rule for rule, found in rows if any(v.refuses_object for v in found)}
        provider_refuses = [r for r in refusing_rows.values() if r.provider is ProviderAction.REFUSES]
        if provider_refuses:
            assert case.refused, f"the fit refuses what the provider admits: {refusal_lines(list(fitted.refused))}"
        else:
            assert all(r.provider is ProviderAction.SETS for r in refusing_rows.values())
        return
    again = rule_book.check(case.kind, fitted.obj, context(case))
    assert again == [], f"the object the fit sends is still refused: {refusal_lines(again)}"
    if not case.refused and not any(found for _rule, found in rows):
        assert fitted.obj == subject(case)  # what the provider admits is sent as written


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_violation_carries_its_rows_fit(case: Case):
    for rule, found in by_row(case):
        for v in found:
            sets = [e for e in v.edits if e.value is not DELETE]
            if rule.fit in (FitAction.REFUSE, FitAction.ASK):
                assert v.edits == (), (rule.key, v)
            elif rule.fit is FitAction.ADJUST:
                assert sets, (rule.key, v)  # lowered or replaced, never only taken out
            else:
                assert not sets, (rule.key, v)  # dropped (or, nothing left to send, refused)


def test_the_fitted_pod_is_what_the_provider_would_make_of_it():
    # A grace beyond the bound is lowered to it, as the enforcer cuts it (shadowpod.capped_grace).
    [case] = [c for c in CASES if c.id == "grace-eight-days"]
    fitted = rule_book.fitted(Kind.POD, subject(case), context(case))
    assert fitted.obj["spec"]["terminationGracePeriodSeconds"] == pp.DEFAULT_MAX_TERMINATION_GRACE_SECONDS
    assert [v.done for v in fitted.adjusted] == [f"lowered to {pp.DEFAULT_MAX_TERMINATION_GRACE_SECONDS}"]


def test_a_required_term_left_with_nothing_voids_the_requirement():
    [case] = [c for c in CASES if c.id == "affinity-only-reserved"]
    fitted = rule_book.fitted(Kind.POD, subject(case), context(case))
    assert "affinity" not in fitted.obj["spec"]  # the term said nothing else: any node, as the scheduler reads it
    [case] = [c for c in CASES if c.id == "affinity-control-plane"]
    fitted = rule_book.fitted(Kind.POD, subject(case), context(case))
    terms = fitted.obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]}]


# --- images (pods.imageRegistries) -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "image, allowed, ok",
    [
        ("nginx:1.27", ["docker.io"], True),
        ("nginx:1.27", ["docker.io/library/"], True),
        ("someone/nginx", ["docker.io/library/"], False),
        ("index.docker.io/library/nginx@sha256:" + "0" * 64, ["docker.io/library/nginx"], True),
        ("registry.k8s.io/pause:3.10", ["registry.k8s.io"], True),
        ("registry.k8s.io.evil.example/pause", ["registry.k8s.io"], False),
        ("registry.k8s.io/pause", ["registry.k8s.io/paus"], False),  # a name, not a string prefix, without the /
        ("localhost:5000/app:1", ["localhost:5000"], True),
        ("123.dkr.ecr.eu-west-1.amazonaws.com/private:1", ["docker.io", "quay.io"], False),
        ("anything/at:all", ["*"], True),
    ],
)
def test_image_registries(image, allowed, ok):
    assert pm.image_allowed(image, allowed) is ok


def test_an_empty_registry_list_is_the_providers_mistake():
    with pytest.raises(pp.ProviderPolicyError, match="imageRegistries"):
        pp.parse_policy({"pods": {"imageRegistries": []}})
