"""Issue 37 item 1, the agreement test: one table of cases (tests/support/policy_cases.py)
through the rule book's Python check (kube_offload/rule_book.py), the consumer's fit, and the
real API server with the remote chart's ValidatingAdmissionPolicies (CEL) and the enforcer's
webhooks, as the consumer. It fails when any two disagree: the table's verdict, the check's,
and the API server's; a refusal must also name the field the check names and, when a key
grants it, the key. (The fit's agreement with the check is the unit half,
tests/unit/kube_offload/test_rule_book.py; here the object the fit sends is submitted too,
and must be admitted.)

One consumer per terms of the table (``TERMS``: the defaults, a policy granting something of
every key, quota mode hard), each admitted through the remote chart with its own identity and
twin; each case is a server-side dry run (nothing is stored) of the object as that consumer
writes it, straight to the provider's API server; TokenRequests are real (they store
nothing). The rules whose verdict is not an admission (twin names, counts) get tests of their
own at the end, which run both sides the same way.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload import rule_book
from kube_offload.consumer_quota import consumer_quota
from kube_offload.policy_rules import Context, Kind, refusal_lines
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import ask_twin, find, patch_consumer, serve_twin, twin_request, twin_status
from support.policy_cases import CASES, PRIORITY_CLASS, RUNTIME_CLASS, TERMS, Case, substituted

CONSUMERS = {"default": "agree-d", "granted": "agree-g", "hard": "agree-h"}
SERVE_SECONDS = 90
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
SLICE_KIND = f"{c.SLICE_PLURAL}.{c.DOMAIN}"
SERVED = [case for case in CASES if case.server]
# The rows whose verdict is not an admission of one object, and the e2e test that runs the
# rule book's side and the provider's alike for each (test_every_rule_reaches_the_provider
# keeps this and the rule book in step: a new key needs a served case or a line here).
APART = {
    "slices.maxCount": "tests/e2e/test_policy_agreement.py::test_counts_agree",
    "twinNamespaces.maxRequests": "tests/e2e/test_policy_agreement.py::test_counts_agree",
    "twinNamespaces.maxObjects": "tests/e2e/test_policy_agreement.py::test_counts_agree",
    "twinNamespaces.maxCount": "tests/e2e/test_policy_agreement.py::test_counts_agree",
    "twinNamespaces.sameNames": "tests/e2e/test_policy_agreement.py::test_twin_names_agree",
    "twinNamespaces.reserved": "tests/e2e/test_policy_agreement.py::test_twin_names_agree",
    "never.consumerIdClash": "tests/e2e/test_provider_judges_the_rest.py::test_a_consumer_whose_id_clashes_with_an_older_ones_gets_no_twin",
    "customResources": "tests/e2e/test_reflection_crd.py::test_a_kind_not_granted_is_refused",
}


@dataclass(frozen=True)
class Admitted:
    """One consumer of the table's terms, as the chart admits it."""

    consumer_id: str
    kubeconfig: Path
    twin: str

    @property
    def tenant(self) -> str:
        return c.tenant_namespace(self.consumer_id)


@pytest.fixture(scope="module")
def admitted(offload_env: Environment, remote: Cluster) -> Iterator[dict[str, Admitted]]:
    remote.apply([
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS}, "value": 10},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS}, "handler": "runc"},
    ])
    out: dict[str, Admitted] = {}
    for terms, consumer_id in CONSUMERS.items():
        policy, quota = TERMS[terms]
        offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(
            consumer_id, node_labels={}, quota=quota, policy=policy or None))
        kubeconfig = offload_env.identity_kubeconfig(remote, identities.consumer_sa(consumer_id))
        twin = f"{unique('agree')}-{consumer_id}"
        serve_twin(remote, kubeconfig, consumer_id, twin, timeout=SERVE_SECONDS)
        out[terms] = Admitted(consumer_id, kubeconfig, twin)
    yield out
    for one in out.values():
        remote.kubectl("delete", TWIN_KIND, "--all", "-n", one.tenant, "--wait=true", "--timeout=120s", check=False, timeout=150)
    remote.kubectl("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found", check=False)
    remote.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--ignore-not-found", check=False)


def context(case: Case, one: Admitted) -> Context:
    policy, quota = TERMS[case.terms]
    fields = {k: v for k, v in case.context.items() if k != "api_audiences"}
    return Context(policy=pp.parse_policy(policy), quota=consumer_quota({"policy": policy, "quota": quota}),
                   consumer_id=one.consumer_id, namespace=one.twin, **fields)


def as_written(case: Case, one: Admitted, subject: dict[str, Any]) -> dict[str, Any]:
    """The object the consumer writes for ``subject`` (a pod is written as a ShadowPod)."""
    if case.kind is not Kind.POD:
        return subject
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: one.consumer_id}
    written = subject.get("metadata") or {}
    metadata = {"labels": {**(written.get("labels") or {}), **origin}, "annotations": written.get("annotations") or {}}
    return {"apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}", "kind": c.SHADOWPOD_KIND,
            "metadata": {"name": "agree", "labels": origin}, "spec": {"pod": {"metadata": metadata, "spec": subject["spec"]}}}


def submit(remote: Cluster, case: Case, one: Admitted, subject: dict[str, Any]) -> subprocess.CompletedProcess:
    """The API server's verdict on ``subject`` written by the case's consumer."""
    if case.kind is Kind.TOKEN_REQUEST:
        spec = subject["spec"]
        audiences = [arg for a in spec.get("audiences") or [] for arg in ("--audience", a)]
        return remote.kubectl_as(one.kubeconfig, "create", "token", c.CONSUMER_SERVICE_ACCOUNT, "-n", one.tenant,
                                 "--duration", f"{spec['expirationSeconds']}s", *audiences)
    return remote.kubectl_as(one.kubeconfig, "create", "-n", one.twin, "--dry-run=server", "-f", "-",
                             input=json.dumps(as_written(case, one, subject)))


@pytest.mark.parametrize("case", SERVED, ids=[case.id for case in SERVED])
def test_the_api_server_the_check_and_the_fit_agree(remote: Cluster, admitted: dict[str, Admitted], case: Case) -> None:
    one = admitted[case.terms]
    subject = substituted(case.obj, one.twin)
    ctx = context(case, one)
    violations = rule_book.check(case.kind, subject, ctx, refused_by_provider=True)
    assert bool(violations) == case.refused, f"the check disagrees with the table: {refusal_lines(violations)}"

    answer = submit(remote, case, one, subject)
    assert "Traceback" not in answer.stderr and "InternalError" not in answer.stderr, answer.stderr
    assert (answer.returncode != 0) == case.refused, (
        f"the API server {'refused' if answer.returncode else 'admitted'} what the rule book "
        f"{'refuses' if case.refused else 'admits'}: {answer.stderr or answer.stdout}")
    if violations:
        # The API server stops at the first policy (or validation) that refuses: it names
        # one of the fields the check names, and, when our policies refused, a key they name.
        fields = {v.field.split("[", 1)[0].lower() for v in violations}
        said = answer.stderr.lower()  # the API server's own validation capitalizes some fields
        assert any(field in said for field in fields), f"the refusal names none of {fields}: {answer.stderr}"
        keys = {v.key for v in violations if v.key in rule_book.policy_keys()}
        ours = "admission webhook" in answer.stderr or "ValidatingAdmissionPolicy" in answer.stderr
        if keys and ours:
            assert any(f"spec.policy.{key}" in answer.stderr for key in keys), f"no key of {keys} named: {answer.stderr}"

    # What the honest consumer sends instead: admitted, unless it sends nothing.
    fitted = rule_book.fitted(case.kind, subject, ctx)
    if fitted.refused or not fitted.adjusted or case.kind is Kind.TOKEN_REQUEST:
        return
    sent = submit(remote, case, one, fitted.obj)
    assert sent.returncode == 0, f"the object the fit sends is refused: {sent.stderr}"


def test_every_rule_reaches_the_provider() -> None:
    """Every key of Consumer spec.policy and every row of the rule book is judged against the
    real provider here: by a served case of the table, or by the test :data:`APART` names
    (which must exist). Fails when a key is added with unit cases only."""
    keys = {*rule_book.policy_keys(), *(rule.key for rule in rule_book.RULES)}
    served = {case.key for case in SERVED}
    missing = sorted(keys - served - APART.keys())
    assert not missing, f"rules no e2e test submits to the provider (add a served case, or name the test in APART): {missing}"
    root = Path(__file__).resolve().parents[2]
    for key, where in APART.items():
        path, _, name = where.partition("::")
        assert f"def {name}(" in (root / path).read_text(), f"{key}: {where} does not exist"
    assert not sorted(APART.keys() - keys), "APART names a rule the rule book does not have"


# --- what is not an admission: asked for, and answered in a status or by a count -------------------------
def held(remote: Cluster, kind: str, namespace: str) -> int:
    return len(remote.kubectl_json("get", kind, "-n", namespace)["items"])


def check_count(counted: str, held_now: int, one: Admitted, policy: dict[str, Any], kind: str = "") -> bool:
    """Whether the rule book refuses one more when ``held_now`` are held."""
    ctx = Context(policy=pp.parse_policy(policy), consumer_id=one.consumer_id, namespace=one.tenant)
    return bool(rule_book.check(Kind.TENANT_COUNT, {"counted": counted, "held": held_now, "kind": kind}, ctx))


def test_counts_agree(remote: Cluster, admitted: dict[str, Admitted], wait) -> None:
    """slices.maxCount and twinNamespaces.maxRequests (the tenant-objects webhook),
    twinNamespaces.maxObjects (the twin's ResourceQuota) and twinNamespaces.maxCount (the twin
    loop: a request past it is kept, Refused): the n-th object admitted or served, the next
    refused, as the rule book says for the count held."""
    one = admitted["default"]
    policy = {"slices": {"maxCount": 1},
              "twinNamespaces": {"maxCount": 1, "maxRequests": 2, "maxObjects": {"configmaps": 2}}}
    patch_consumer(remote, one.consumer_id, {"policy": policy})
    try:
        # The enforcer follows the Consumer (its ResourceQuota, its webhooks' caches) within a moment.
        wait(lambda: (q := find(remote, "resourcequota", c.TWIN_RESOURCEQUOTA_NAME, "-n", one.twin))
             and (q.get("status") or {}).get("hard", {}).get("count/configmaps") == "2", timeout=SERVE_SECONDS,
             what="the twin's ResourceQuota at the new bound")

        def offload_slice(name: str) -> str:
            return json.dumps({"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.SLICE_KIND,
                               "metadata": {"name": name, "namespace": one.tenant},
                               "spec": {"pool": "none", "resources": {"cpu": "1"}}})

        assert held(remote, SLICE_KIND, one.tenant) == 0 and not check_count("slices.maxCount", 0, one, policy)
        first = remote.kubectl_as(one.kubeconfig, "create", "-f", "-", input=offload_slice("first"))
        assert first.returncode == 0, first.stderr
        assert check_count("slices.maxCount", 1, one, policy)
        second = wait(lambda: (r := remote.kubectl_as(one.kubeconfig, "create", "--dry-run=server", "-f", "-",
                                                      input=offload_slice("second"))).returncode != 0 and r,
                      timeout=30, what="the second OffloadSlice refused")
        assert "spec.policy.slices.maxCount: 1" in second.stderr, second.stderr

        # One twin served (the fixture's): a second request is admitted (maxRequests 2) but
        # not served (maxCount 1); a third is not admitted.
        second_twin = f"more-{one.consumer_id}"
        assert held(remote, TWIN_KIND, one.tenant) == 1 and check_count("twinNamespaces.maxCount", 1, one, policy)
        assert not check_count("twinNamespaces.maxRequests", 1, one, policy)
        made = ask_twin(remote, one.kubeconfig, one.consumer_id, second_twin)
        assert made.returncode == 0, made.stderr
        status = wait(lambda: (s := twin_status(remote, one.consumer_id, second_twin)).get("phase") in (
            c.TWIN_PHASE_REFUSED, c.TWIN_PHASE_READY) and s, timeout=SERVE_SECONDS, what=f"twin request {second_twin} answered")
        assert status["phase"] == c.TWIN_PHASE_REFUSED and "twinNamespaces.maxCount" in str(status.get("message")), status
        assert check_count("twinNamespaces.maxRequests", 2, one, policy)
        refused = remote.kubectl_as(one.kubeconfig, "create", "--dry-run=server", "-f", "-",
                                    input=json.dumps(twin_request(one.consumer_id, f"third-{one.consumer_id}")))
        assert refused.returncode != 0 and "spec.policy.twinNamespaces.maxRequests: 2" in refused.stderr, refused.stderr

        count = held(remote, "configmaps", one.twin)  # kube-root-ca.crt, which Kubernetes puts in every namespace
        for name in ("one", "two"):
            expected = check_count("twinNamespaces.maxObjects", count, one, policy, "configmaps")
            made = remote.kubectl_as(one.kubeconfig, "create", "-n", one.twin, "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
            assert (made.returncode != 0) == expected, (name, count, made.stderr)
            count += made.returncode == 0
        assert expected, "the last ConfigMap must have met the bound"
    finally:
        remote.kubectl("delete", SLICE_KIND, "--all", "-n", one.tenant, "--wait=false", check=False)
        remote.kubectl("delete", TWIN_KIND, f"more-{one.consumer_id}", "-n", one.tenant, "--ignore-not-found",
                       "--wait=true", "--timeout=120s", check=False, timeout=150)
        remote.kubectl("delete", "configmap", "one", "two", "-n", one.twin, "--ignore-not-found", check=False)
        patch_consumer(remote, one.consumer_id, {"policy": None})


@pytest.mark.parametrize("name, key", [("web", "twinNamespaces.sameNames"), ("agree-shared", "twinNamespaces.sameNames"),
                                       ("kube-agree", "twinNamespaces.reserved"),
                                       ("agree-secret-agree-g", "twinNamespaces.reserved")])
def test_twin_names_agree(remote: Cluster, admitted: dict[str, Admitted], wait, name: str, key: str) -> None:
    """A twin name is asked for; the enforcer's answer (the request's status) is the rule
    book's for that name."""
    one = admitted["granted"]
    policy, _quota = TERMS["granted"]
    ctx = Context(policy=pp.parse_policy(policy), consumer_id=one.consumer_id)
    refused = bool(rule_book.check(Kind.TWIN_REQUEST, {"metadata": {"name": name}}, ctx))
    made = ask_twin(remote, one.kubeconfig, one.consumer_id, name)
    try:
        assert made.returncode == 0, made.stderr
        status = wait(lambda: (s := twin_status(remote, one.consumer_id, name)).get("phase") in (
            c.TWIN_PHASE_REFUSED, c.TWIN_PHASE_READY) and s, timeout=SERVE_SECONDS, what=f"twin request {name} answered")
        assert (status["phase"] == c.TWIN_PHASE_REFUSED) == refused, (key, status)
    finally:
        remote.kubectl("delete", TWIN_KIND, name, "-n", one.tenant, "--ignore-not-found", "--wait=true", "--timeout=120s",
                       check=False, timeout=150)
