"""Pod mutation (JSON Patch applied to the original pod), the AdmissionReview envelope,
the per-route decisions and the namespace sources, all without HTTP."""

from __future__ import annotations

import base64
import copy
import json
import socket

import jsonpatch
import pytest

from kube_offload import constants as c
from kube_offload.policy import NamespacePolicy
from kube_offload.selector import parse_selector
from kube_offload.admission import (
    BadRequest,
    Decision,
    build_review,
    parse_review,
    review_response,
)
from kube_offload.pod_mutation import MalformedPod, mutate_pod, skip_reason
from webhook.namespace_cache import (
    InformerNamespaceSource,
    NamespaceUnavailable,
    StaticNamespaceSource,
)
from webhook.review import review_namespace, review_pod
from support import builders

OURS = {"key": c.TAINT_KEY, "operator": "Equal", "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}
NOT_VIRTUAL = {"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}
VIRTUAL = {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}
SELECTOR = "region in (eu,us)"
REGION = {"key": "region", "operator": "In", "values": ["eu", "us"]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

SSD = {"key": "disk", "operator": "In", "values": ["ssd"]}
ZONE = {"key": "zone", "operator": "Exists"}
NAME_FIELD = {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}
OTHER_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
PREFERRED = [{"weight": 10, "preference": {"matchExpressions": [SSD]}}]
POD_ANTI_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    ]
}


def policy(placement: str, selector: str = SELECTOR, enabled: bool = True) -> NamespacePolicy:
    return NamespacePolicy("demo", enabled, placement, c.DEFAULT_MAPPING, parse_selector(selector))


def pod(**spec_fields) -> dict:
    return builders.pod("web-0", "demo", containers=[builders.container(requests={"cpu": "100m"})],
                        spec={"restartPolicy": "Always", "schedulerName": "default-scheduler", **spec_fields},
                        labels={"app": "web"})


def required_terms(p: dict) -> list | None:
    affinity = p["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    return required.get("nodeSelectorTerms")


def apply(p: dict, patch: list[dict]) -> dict:
    # jsonpatch refuses a path whose parent does not exist, as the apiserver does.
    return jsonpatch.apply_patch(p, patch, in_place=False)


# --- the table: placement x pod shape -------------------------------------------------------

# What each placement requires, as lists of expressions ANDed into every user term.
POLICY_PARTS = {
    "Local": [[NOT_VIRTUAL]],
    "Remote": [[VIRTUAL, REGION]],
    "LocalAndRemote": [[NOT_VIRTUAL], [VIRTUAL, REGION]],
}
TOLERATES = {"Local": False, "Remote": True, "LocalAndRemote": True}

POD_SHAPES = {
    "bare": pod(),
    "user affinity, several terms": pod(
        affinity={
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [SSD]},
                        {"matchExpressions": [ZONE, SSD]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED,
            },
            "podAntiAffinity": POD_ANTI_AFFINITY,
        }
    ),
    "matchFields": pod(
        affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [NAME_FIELD]}]}}}
    ),
    "existing tolerations": pod(tolerations=[OTHER_TOLERATION]),
    "identical toleration": pod(tolerations=[OTHER_TOLERATION, dict(OURS)]),
    "identical toleration, operator defaulted": pod(
        tolerations=[{k: v for k, v in OURS.items() if k != "operator"}]
    ),
    "empty affinity object": pod(affinity={}),
    "preferred node affinity only": pod(
        affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}}
    ),
    "null tolerations and affinity": pod(tolerations=None, affinity=None),
}


def expected_terms(user_terms: list | None, parts: list[list[dict]]) -> list[dict]:
    """The cross product written out plainly (independent of the code under test)."""
    if not user_terms:
        return [{"matchExpressions": list(p)} for p in parts]
    result = []
    for term in user_terms:
        for p in parts:
            expressions = list(term.get("matchExpressions") or [])
            expressions += [e for e in p if e not in expressions]
            result.append({**term, "matchExpressions": expressions})
    return result


def expected_tolerations(original: list | None, placement: str) -> list | None:
    if not TOLERATES[placement]:
        return original
    for t in original or []:
        if {**t, "operator": t.get("operator", "Equal")} == OURS:
            return original
    return list(original or []) + [OURS]


@pytest.mark.parametrize("placement", ["Local", "Remote", "LocalAndRemote"])
@pytest.mark.parametrize("shape", list(POD_SHAPES))
def test_policy_to_patch(placement: str, shape: str) -> None:
    original = POD_SHAPES[shape]
    untouched = copy.deepcopy(original)
    patch = mutate_pod(original, policy(placement), scheduler_name=None)
    assert original == untouched, "mutate_pod must not modify its input"
    result = apply(original, patch)

    assert required_terms(result) == expected_terms(required_terms(original), POLICY_PARTS[placement])
    assert result["spec"].get("tolerations") == expected_tolerations(
        original["spec"].get("tolerations"), placement
    )
    # Nothing else changes: other affinity kinds, preferred terms, containers, metadata.
    stripped = copy.deepcopy(result)
    stripped["spec"].pop("tolerations", None)
    stripped["spec"].pop("affinity", None)
    base = copy.deepcopy(original)
    base["spec"].pop("tolerations", None)
    base["spec"].pop("affinity", None)
    assert stripped == base
    original_affinity = original["spec"].get("affinity") or {}
    result_affinity = result["spec"]["affinity"]
    assert result_affinity.get("podAntiAffinity") == original_affinity.get("podAntiAffinity")
    assert result_affinity["nodeAffinity"].get("preferredDuringSchedulingIgnoredDuringExecution") == (
        (original_affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
    )

    # Re-invocation (reinvocationPolicy: IfNeeded) sees its own output: nothing more to do.
    assert mutate_pod(result, policy(placement), scheduler_name=None) == []


@pytest.mark.parametrize("shape", list(POD_SHAPES))
def test_local_and_remote_without_selector_only_tolerates(shape: str) -> None:
    original = POD_SHAPES[shape]
    result = apply(original, mutate_pod(original, policy("LocalAndRemote", ""), scheduler_name=None))
    assert required_terms(result) == required_terms(original)
    assert result["spec"].get("affinity") == original["spec"].get("affinity")
    assert result["spec"]["tolerations"] == expected_tolerations(original["spec"].get("tolerations"), "LocalAndRemote")


def test_bare_remote_pod_patch_ops() -> None:
    patch = mutate_pod(pod(), policy("Remote"), scheduler_name=None)
    assert patch == [
        {"op": "add", "path": "/spec/tolerations", "value": [OURS]},
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [VIRTUAL, REGION]}]}}},
        },
    ]


def test_existing_tolerations_get_an_append() -> None:
    patch = mutate_pod(pod(tolerations=[OTHER_TOLERATION]), policy("Remote"), scheduler_name=None)
    assert {"op": "add", "path": "/spec/tolerations/-", "value": OURS} in patch


def test_toleration_with_seconds_is_not_ours() -> None:
    timed = {**OURS, "tolerationSeconds": 60}
    result = apply(pod(tolerations=[timed]), mutate_pod(pod(tolerations=[timed]), policy("Remote"), scheduler_name=None))
    assert result["spec"]["tolerations"] == [timed, OURS]


def test_not_enabled_policy_changes_nothing() -> None:
    assert mutate_pod(pod(), policy("Remote", enabled=False), scheduler_name="x") == []


# --- pods left alone --------------------------------------------------------------------------


def _with_metadata(**metadata) -> dict:
    p = pod()
    p["metadata"].update(metadata)
    return p


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (
            _with_metadata(ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "1", "controller": True}]),
            "owned by DaemonSet agent",
        ),
        (_with_metadata(annotations={"kubernetes.io/config.mirror": "abc"}), "mirror pod"),
        (pod(nodeName="worker-1"), "nodeName"),
    ],
)
def test_left_alone(p: dict, reason: str) -> None:
    assert reason in (skip_reason(p) or "")
    for placement in ("Local", "Remote", "LocalAndRemote"):
        assert mutate_pod(p, policy(placement), scheduler_name="kube-offload") == []


@pytest.mark.parametrize(
    "owner",
    [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "a", "uid": "1"},  # not the controller
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": True},
    ],
)
def test_other_owners_are_mutated(owner: dict) -> None:
    p = _with_metadata(ownerReferences=[owner])
    assert skip_reason(p) is None
    assert mutate_pod(p, policy("Remote"), scheduler_name=None) != []


# --- schedulerName ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "configured", "expected"),
    [
        ("default-scheduler", "kube-offload", "kube-offload"),
        (None, "kube-offload", "kube-offload"),
        ("my-scheduler", "kube-offload", "my-scheduler"),  # the pod's own choice stays
        ("kube-offload", "kube-offload", "kube-offload"),
        ("default-scheduler", None, "default-scheduler"),
        (None, None, None),
    ],
)
def test_scheduler_name(current: str | None, configured: str | None, expected: str | None) -> None:
    p = pod()
    if current is None:
        del p["spec"]["schedulerName"]
    else:
        p["spec"]["schedulerName"] = current
    for placement in ("Local", "Remote"):
        result = apply(p, mutate_pod(p, policy(placement), scheduler_name=configured))
        assert result["spec"].get("schedulerName") == expected
        assert mutate_pod(result, policy(placement), scheduler_name=configured) == []


# --- malformed pods -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "fragment"),
    [
        ({"metadata": {}}, "spec is missing"),
        ({"spec": []}, "spec must be an object"),
        (pod(tolerations="x"), "spec.tolerations must be a list"),
        (pod(affinity=[]), "spec.affinity must be an object"),
        (pod(affinity={"nodeAffinity": 1}), "spec.affinity.nodeAffinity must be an object"),
        (pod(affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": {}}}}), "nodeSelectorTerms must be a list"),
        (pod(affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [None]}}}), "nodeSelectorTerms[0] must be an object"),
        (pod(affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": "a"}]}}}), "matchExpressions must be a list"),
        ({"metadata": {"ownerReferences": {}}, "spec": {}}, "metadata.ownerReferences must be a list"),
    ],
)
def test_malformed_pod(p: dict, fragment: str) -> None:
    with pytest.raises(MalformedPod) as info:
        mutate_pod(p, policy("Remote"), scheduler_name=None)
    assert fragment in str(info.value)


# --- AdmissionReview envelope ---------------------------------------------------------------------


def _body(review: dict) -> bytes:
    return json.dumps(review).encode()


def test_parse_review_reads_what_the_apiserver_sends() -> None:
    request = parse_review(_body(build_review(pod(), uid="abc")))
    assert request.uid == "abc"
    assert request.kind.kind == "Pod" and request.kind.group == "" and request.kind.version == "v1"
    assert request.operation == "CREATE"
    assert request.namespace == "demo"
    assert request.object == pod()


def _review_without(*path: str) -> dict:
    review = build_review(pod())
    target = review
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return review


def _review_with(value, *path: str) -> dict:
    review = build_review(pod())
    target = review
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return review


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[]", "must be a JSON object"),
        (b'"x"', "must be a JSON object"),
        (_body(_review_with("admission.k8s.io/v1beta1", "apiVersion")), "apiVersion must be 'admission.k8s.io/v1'"),
        (_body(_review_with("Pod", "kind")), "kind must be 'AdmissionReview'"),
        (_body(_review_without("request")), "review.request is missing"),
        (_body(_review_with([], "request")), "review.request must be an object, got a list"),
        (_body(_review_without("request", "uid")), "request.uid is missing"),
        (_body(_review_with("", "request", "uid")), "request.uid is empty"),
        (_body(_review_with(7, "request", "uid")), "request.uid must be a string, got a number"),
        (_body(_review_without("request", "object")), "request.object is missing"),
        (_body(_review_with("pod", "request", "object")), "request.object must be an object"),
        (_body(_review_without("request", "kind")), "request.kind is missing"),
        (_body(_review_with({"group": ""}, "request", "kind")), "request.kind.version is missing"),
        (_body(_review_with("PATCH", "request", "operation")), "request.operation must be one of"),
        (_body(_review_with({"a": 1}, "request", "object", "metadata", "labels")), "labels['a'] must be a string"),
        (_body(_review_with("x", "request", "object", "metadata")), "request.object.metadata must be an object"),
    ],
)
def test_parse_review_rejects(body: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_review(body)
    assert fragment in str(info.value)


def test_delete_needs_no_object() -> None:
    request = parse_review(_body(build_review(pod(), operation="DELETE")))
    assert request.object is None and request.old_object == pod()


def test_response_allowed_with_patch() -> None:
    request = parse_review(_body(build_review(pod(), uid="u-1")))
    patch = [{"op": "add", "path": "/spec/schedulerName", "value": "x"}]
    answer = review_response(request, Decision.allow(patch))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "u-1"
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["response"]["patch"])) == patch


def test_response_allowed_without_patch_has_no_patch_fields() -> None:
    request = parse_review(_body(build_review(pod(), uid="u-2")))
    assert review_response(request, Decision.allow())["response"] == {"uid": "u-2", "allowed": True}


def test_response_denied() -> None:
    request = parse_review(_body(build_review(pod(), uid="u-3")))
    answer = review_response(request, Decision.deny(422, "Invalid", "nope"))
    assert answer["response"] == {
        "uid": "u-3",
        "allowed": False,
        "status": {"status": "Failure", "code": 422, "reason": "Invalid", "message": "nope"},
    }


# --- decisions per route ------------------------------------------------------------------------

DEMO = {
    "metadata": {
        "name": "demo",
        "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Remote"},
        "annotations": {c.ANNOTATION_CLUSTER_SELECTOR: SELECTOR},
    }
}
BROKEN = {"metadata": {"name": "broken", "labels": {c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "remote"}}}
OFF = {"metadata": {"name": "off", "labels": {c.LABEL_POD_PLACEMENT: "Remote"}}}
SOURCE = StaticNamespaceSource([DEMO, BROKEN, OFF])


def _pod_in(namespace: str) -> dict:
    p = pod()
    p["metadata"]["namespace"] = namespace
    return p


def _request(review: dict):
    return parse_review(_body(review))


def test_review_pod_patches_an_offloaded_pod() -> None:
    decision = review_pod(_request(build_review(pod())), source=SOURCE, scheduler_name="kube-offload")
    assert decision.allowed
    result = apply(pod(), list(decision.patch))
    assert result["spec"]["schedulerName"] == "kube-offload"
    assert required_terms(result) == [{"matchExpressions": [VIRTUAL, REGION]}]


@pytest.mark.parametrize("namespace", ["off", "unknown"])
def test_review_pod_allows_unchanged_outside_offloaded_namespaces(namespace: str) -> None:
    decision = review_pod(_request(build_review(_pod_in(namespace))), source=SOURCE, scheduler_name="x")
    assert decision == Decision.allow()


def test_review_pod_in_a_namespace_with_a_broken_policy_stays_local_with_a_warning() -> None:
    decision = review_pod(_request(build_review(_pod_in("broken"))), source=SOURCE, scheduler_name="x")
    assert decision.allowed and decision.patch == ()
    (warning,) = decision.warnings
    assert warning.startswith("namespace broken has an invalid kube-offload policy, so this pod is not offloaded")
    assert 'kube-offload.io/pod-placement: "remote" is not valid' in warning


def test_review_pod_uses_the_request_namespace() -> None:
    p = pod()
    del p["metadata"]["namespace"]  # generateName pods often arrive without it
    decision = review_pod(_request(build_review(p, namespace="demo")), source=SOURCE, scheduler_name=None)
    assert decision.patch


def test_review_pod_needs_a_namespace() -> None:
    p = pod()
    del p["metadata"]["namespace"]
    with pytest.raises(BadRequest, match="namespaced"):
        review_pod(_request(build_review(p, namespace="")), source=SOURCE, scheduler_name=None)


def test_review_pod_ignores_other_operations_subresources_and_kinds() -> None:
    for review in (
        build_review(pod(), operation="UPDATE", old_object=pod()),
        build_review(pod(), operation="DELETE"),
        {**build_review(pod()), "request": {**build_review(pod())["request"], "subResource": "ephemeralcontainers"}},
        build_review({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "demo"}}),
    ):
        assert review_pod(_request(review), source=SOURCE, scheduler_name="x") == Decision.allow()
    apps_pod = build_review(pod())
    apps_pod["request"]["kind"] = {"group": "example.com", "version": "v1", "kind": "Pod"}
    assert review_pod(_request(apps_pod), source=SOURCE, scheduler_name="x") == Decision.allow()


def test_review_pod_refuses_a_namespace_review() -> None:
    with pytest.raises(BadRequest, match="belong to /validate/namespaces"):
        review_pod(_request(build_review(BROKEN | {"kind": "Namespace"})), source=SOURCE, scheduler_name=None)


def test_review_pod_reports_a_malformed_pod_as_bad_request() -> None:
    with pytest.raises(BadRequest, match=r"request\.object\.spec\.tolerations must be a list"):
        review_pod(_request(build_review(pod(tolerations={}))), source=SOURCE, scheduler_name=None)


def _ns(labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": labels or {}, "annotations": annotations or {}}}


def test_review_namespace_denies_bad_labels_with_every_problem() -> None:
    decision = review_namespace(
        _request(build_review(_ns({c.LABEL_POD_PLACEMENT: "bogus", c.LABEL_NAMESPACE_MAPPING: "x"})))
    )
    assert not decision.allowed and decision.code == 422 and decision.reason == "Invalid"
    assert decision.message == (
        'kube-offload.io/pod-placement: "bogus" is not valid; use one of Local, Remote, LocalAndRemote; '
        'kube-offload.io/namespace-mapping: "x" is not valid; use one of DefaultName, EnforceSameName'
    )


def test_review_namespace_allows_good_labels() -> None:
    decision = review_namespace(_request(build_review(_ns({c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Local"}))))
    assert decision == Decision.allow()


def test_review_namespace_warns_when_policy_is_set_but_not_enabled() -> None:
    decision = review_namespace(_request(build_review(_ns({c.LABEL_POD_PLACEMENT: "Local"}))))
    assert decision.allowed
    assert decision.warnings and "kube-offload.io/enabled=true" in decision.warnings[0]


def test_review_namespace_update_judges_only_what_changed() -> None:
    old = _ns({c.LABEL_POD_PLACEMENT: "bogus"})
    unrelated_change = _ns({c.LABEL_POD_PLACEMENT: "bogus", "team": "a"})
    assert review_namespace(_request(build_review(unrelated_change, operation="UPDATE", old_object=old))).allowed
    new_mistake = _ns({c.LABEL_POD_PLACEMENT: "bogus", c.LABEL_ENABLED: "yes"})
    decision = review_namespace(_request(build_review(new_mistake, operation="UPDATE", old_object=old)))
    assert not decision.allowed
    assert decision.message.startswith('kube-offload.io/enabled: "yes" is not valid')
    assert "pod-placement" not in decision.message
    changed = _ns({c.LABEL_POD_PLACEMENT: "bogus2"})
    assert not review_namespace(_request(build_review(changed, operation="UPDATE", old_object=old))).allowed


def test_review_namespace_refuses_a_pod_review_and_ignores_delete() -> None:
    with pytest.raises(BadRequest, match="belong to /mutate/pods"):
        review_namespace(_request(build_review(pod())))
    assert review_namespace(_request(build_review(_ns({c.LABEL_POD_PLACEMENT: "bogus"}), operation="DELETE"))).allowed


# --- namespace sources ----------------------------------------------------------------------------


def test_static_source() -> None:
    assert SOURCE.ready()
    assert SOURCE.get_policy("demo").placement == "Remote"
    assert SOURCE.get_policy("nope") is None
    with pytest.raises(Exception) as info:
        SOURCE.get_policy("broken")
    assert getattr(info.value, "key", None) == c.LABEL_POD_PLACEMENT


def _closed_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _client_for(port: int):
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{port}"
    configuration.verify_ssl = False
    configuration.retries = False
    return client.ApiClient(configuration)


def test_informer_source_applies_watch_events() -> None:
    source = InformerNamespaceSource(_client_for(_closed_loopback_port()))
    assert not source.ready()
    source._informer.apply("ADDED", DEMO)
    assert source.get_policy("demo").placement == "Remote"
    changed = copy.deepcopy(DEMO)
    changed["metadata"]["labels"][c.LABEL_POD_PLACEMENT] = "Local"
    source._informer.apply("MODIFIED", changed)
    assert source.get_policy("demo").placement == "Local"
    source._informer.apply("ADDED", BROKEN)
    with pytest.raises(Exception, match="pod-placement"):
        source.get_policy("broken")


def test_informer_source_miss_with_unreachable_apiserver_is_unavailable() -> None:
    source = InformerNamespaceSource(_client_for(_closed_loopback_port()))
    source._informer.apply("ADDED", DEMO)
    source._informer.apply("DELETED", DEMO)
    # Gone from the cache: the fallback GET runs, and its failure is a server-side error.
    with pytest.raises(NamespaceUnavailable, match="demo"):
        source.get_policy("demo")
