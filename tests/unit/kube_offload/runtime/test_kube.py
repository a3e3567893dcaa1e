"""The pure parts of the API layer (kube_offload/runtime/kube.py, kinds.py): paths,
queries, the parsed Status, retry decisions and preconditions. The verbs against a real
apiserver: tests/e2e/test_runtime_kube.py."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from kube_offload.runtime import kinds
from kube_offload.runtime.kube import (
    APPLY_PATCH,
    DEFAULT_RETRY,
    JSON_PATCH,
    MERGE_PATCH,
    NO_RETRY,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    RetryPolicy,
    delete_options,
    query_string,
    retry_delay,
    with_resource_version,
)


# --- paths --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "resource, kwargs, path",
    [
        (kinds.PODS, {}, "/api/v1/pods"),
        (kinds.PODS, {"namespace": "ns"}, "/api/v1/namespaces/ns/pods"),
        (kinds.PODS, {"namespace": "ns", "name": "p"}, "/api/v1/namespaces/ns/pods/p"),
        (kinds.PODS, {"namespace": "ns", "name": "p", "subresource": "status"}, "/api/v1/namespaces/ns/pods/p/status"),
        (kinds.NAMESPACES, {"name": "ns"}, "/api/v1/namespaces/ns"),
        (kinds.NODES, {"name": "n", "subresource": "status"}, "/api/v1/nodes/n/status"),
        (kinds.ROLE_BINDINGS, {"namespace": "t", "name": "rb"},
         "/apis/rbac.authorization.k8s.io/v1/namespaces/t/rolebindings/rb"),
        (kinds.SHADOWPODS, {"namespace": "t", "name": "s", "subresource": "status"},
         "/apis/kube-offload.io/v1alpha1/namespaces/t/shadowpods/s/status"),
        (kinds.CONSUMERS, {"name": "c1"}, "/apis/kube-offload.io/v1alpha1/consumers/c1"),
        (kinds.CUSTOM_RESOURCE_DEFINITIONS, {}, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        # A name is one segment: what would be structure in a URL is escaped.
        (kinds.PODS, {"namespace": "ns", "name": "a/b?c"}, "/api/v1/namespaces/ns/pods/a%2Fb%3Fc"),
    ],
)
def test_paths(resource, kwargs, path):
    assert resource.path(**kwargs) == path


@pytest.mark.parametrize(
    "resource, kwargs, words",
    [
        (kinds.NAMESPACES, {"namespace": "x", "name": "y"}, "cluster-scoped"),
        (kinds.PODS, {"name": "p"}, "namespace="),
        (kinds.PODS, {"namespace": "ns", "name": ""}, "empty name"),
        (kinds.PODS, {"namespace": "ns", "subresource": "status"}, "needs a name"),
    ],
)
def test_path_mistakes_name_the_fix(resource, kwargs, words):
    with pytest.raises(ValueError, match=words):
        resource.path(**kwargs)


def test_api_versions():
    assert kinds.PODS.api_version == "v1"
    assert kinds.LEASES.api_version == "coordination.k8s.io/v1"
    assert kinds.SHADOWPODS.api_version == "kube-offload.io/v1alpha1"


def test_custom_resources_match_their_crds():
    manifests = resources.files("kube_offload") / "manifests"
    by_kind = {r.kind: r for r in kinds.ALL}
    crds = [yaml.safe_load(p.read_text()) for p in manifests.iterdir() if p.name.endswith("-crd.yaml")]
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {"ShadowPod", "Consumer", "TwinNamespace", "OffloadSlice"}
    for crd in crds:
        spec = crd["spec"]
        resource = by_kind[spec["names"]["kind"]]
        assert resource.group == spec["group"]
        assert resource.plural == spec["names"]["plural"]
        assert resource.namespaced == (spec["scope"] == "Namespaced")
        assert resource.version in [v["name"] for v in spec["versions"] if v.get("served")]


def test_every_kind_once():
    assert len({(r.group, r.kind) for r in kinds.ALL}) == len(kinds.ALL)


# --- queries ------------------------------------------------------------------------------
def test_query_string_leaves_out_unset_and_escapes():
    assert query_string({}) == ""
    assert query_string({"limit": None, "force": False}) == ""
    assert query_string({"watch": True, "labelSelector": "a=b,c in (d)", "limit": 500}) == (
        "?watch=true&labelSelector=a%3Db%2Cc+in+%28d%29&limit=500"
    )


# --- the parsed Status --------------------------------------------------------------------
def status(code: int, reason: str, message: str, **details) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return json.dumps(body).encode()


def test_status_parsed():
    causes = [{"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"}]
    error = ApiError.from_response(422, status(422, "Invalid", 'Pod "p" is invalid', name="p", kind="pods", causes=causes), "Unprocessable Entity")
    assert (error.status, error.code, error.reason, error.message) == (422, 422, "Invalid", 'Pod "p" is invalid')
    assert error.details["causes"] == causes
    assert error.body["kind"] == "Status"
    assert not error.transient


def test_already_exists_and_conflict():
    exists = ApiError.from_response(409, status(409, "AlreadyExists", 'pods "p" already exists'))
    conflict = ApiError.from_response(409, status(409, "Conflict", "Precondition failed: UID in precondition: x"))
    assert exists.already_exists and exists.conflict
    assert conflict.conflict and not conflict.already_exists


def test_not_a_status_keeps_the_text_and_http_reason():
    error = ApiError.from_response(503, b"upstream connect error", "Service Unavailable")
    assert (error.status, error.reason, error.message, error.body) == (503, "Service Unavailable", "upstream connect error", {})
    assert error.transient
    empty = ApiError.from_response(404, b"", "Not Found")
    assert (empty.reason, empty.message, empty.not_found) == ("Not Found", "Not Found", True)


def test_retry_after_from_details():
    error = ApiError.from_response(429, status(429, "TooManyRequests", "slow down", retryAfterSeconds=1))
    assert error.retry_after == 1.0
    assert ApiError.from_response(429, status(429, "TooManyRequests", "x")).retry_after is None


# --- retries ------------------------------------------------------------------------------
def err(code: int) -> ApiError:
    return ApiError(code, "", "")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_429_is_retried_for_every_method(method):
    # Refused before it was handled: a write was not done either.
    assert retry_delay(err(429), method, 1) is not None


@pytest.mark.parametrize("code", [0, 500, 502, 503, 504])
def test_server_faults_are_retried_for_reads_only(code):
    assert retry_delay(err(code), "GET", 1) is not None
    for method in ("POST", "PUT", "PATCH", "DELETE"):  # may have been applied
        assert retry_delay(err(code), method, 1) is None


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 410, 422])
def test_answers_about_the_request_are_not_retried(code):
    assert retry_delay(err(code), "GET", 1) is None


def test_attempts_bound_the_retries():
    assert retry_delay(err(503), "GET", DEFAULT_RETRY.attempts - 1) is not None
    assert retry_delay(err(503), "GET", DEFAULT_RETRY.attempts) is None
    assert retry_delay(err(503), "GET", 1, NO_RETRY) is None


def test_backoff_grows_is_capped_and_honours_retry_after():
    policy = RetryPolicy(attempts=10, backoff=0.2, max_backoff=1.0)
    first = retry_delay(err(503), "GET", 1, policy)
    third = retry_delay(err(503), "GET", 3, policy)
    ninth = retry_delay(err(503), "GET", 9, policy)
    assert first is not None and 0.1 <= first <= 0.2
    assert third is not None and 0.4 <= third <= 0.8
    assert ninth is not None and 0.5 <= ninth <= 1.0
    told = ApiError.from_response(429, status(429, "TooManyRequests", "x", retryAfterSeconds=2))
    assert retry_delay(told, "POST", 1, policy) == 2.0


# --- preconditions ------------------------------------------------------------------------
def test_delete_options():
    assert delete_options() == {"apiVersion": "v1", "kind": "DeleteOptions"}
    assert delete_options(uid="u", resource_version="7", grace_period_seconds=0, propagation_policy="Background") == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u", "resourceVersion": "7"},
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
    }


@pytest.mark.parametrize("content_type", [MERGE_PATCH, STRATEGIC_MERGE_PATCH])
def test_resource_version_in_an_object_patch(content_type):
    patch = {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Running"}}
    assert with_resource_version(patch, content_type, "42") == {
        "metadata": {"labels": {"a": "b"}, "resourceVersion": "42"},
        "status": {"phase": "Running"},
    }
    assert patch["metadata"] == {"labels": {"a": "b"}}  # the caller's patch is not changed
    assert with_resource_version(patch, content_type, None) is patch


def test_resource_version_in_a_json_patch_is_set_first():
    ops = [{"op": "add", "path": "/status", "value": {}}]
    assert with_resource_version(ops, JSON_PATCH, "42") == [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "42"},
        *ops,
    ]


def test_apply_takes_no_resource_version():
    with pytest.raises(ValueError, match="server-side apply"):
        with_resource_version({"metadata": {}}, APPLY_PATCH, "42")
