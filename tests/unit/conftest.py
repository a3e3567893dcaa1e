"""Shared fixtures of the unit tests (test modules cannot import each other under
``--import-mode=importlib``, so what two of them share is offered here as a fixture).

``kubelet_auth``: TokenReview and SubjectAccessReview answers for the kubelet API's unit
tests, in the JSON the local apiserver sends (authentication.k8s.io/v1,
authorization.k8s.io/v1). The real apiserver answers them in
tests/e2e/test_kubelet_api_auth.py."""

from __future__ import annotations

import types

import pytest

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi.access import AccessControl
from vkubelet.kubeletapi.authn import Authenticator, TokenReviewer
from vkubelet.kubeletapi.authz import Authorizer
from vkubelet.kubeletapi.decision_cache import CacheTTL

NODE = "kube-offload-r1"
ADMIN_TOKEN = "admin-token"
READER_TOKEN = "reader-token"
ADMIN = "system:serviceaccount:ops:admin"
READER = "system:serviceaccount:ops:reader"
APISERVER = "kube-apiserver-kubelet-client"


class Reviews:
    """Who holds which token, and what RBAC allows: ``grants`` maps a user to the
    (verb, subresource) pairs allowed on the node ("*" matches anything)."""

    def __init__(self, grants=None, *, anonymous_grants=()):
        self.tokens = {
            ADMIN_TOKEN: {"username": ADMIN, "uid": "u-admin", "groups": ["system:serviceaccounts", "system:authenticated"],
                          "extra": {"authentication.kubernetes.io/credential-id": ["JTI=1"]}},
            READER_TOKEN: {"username": READER, "uid": "u-reader", "groups": ["system:serviceaccounts", "system:authenticated"]},
        }
        self.grants = grants if grants is not None else {ADMIN: {("*", "*")}, APISERVER: {("*", "*")}, READER: {("get", "log")}}
        self.grants.setdefault("system:anonymous", set(anonymous_grants))
        self.token_calls = 0
        self.sar_calls: list[dict] = []
        self.sar_users: list[tuple[str, tuple[str, ...]]] = []
        self.fail_sar: ApiError | None = None
        self.fail_token: ApiError | None = None

    def token_review(self, body: dict) -> dict:
        self.token_calls += 1
        if self.fail_token is not None:
            raise self.fail_token
        user = self.tokens.get(body["spec"]["token"])
        status = {"authenticated": True, "user": user, "audiences": ["https://kubernetes.default.svc.cluster.local"]}
        if user is None:
            status = {"user": {}, "error": "[invalid bearer token, square/go-jose: error in cryptographic primitive]"}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}, "spec": body["spec"], "status": status}

    def subject_access_review(self, body: dict) -> dict:
        if self.fail_sar is not None:
            raise self.fail_sar
        spec = body["spec"]
        self.sar_calls.append(spec)
        self.sar_users.append((spec["user"], tuple(spec.get("groups") or ())))
        attrs = spec["resourceAttributes"]
        allowed = (
            attrs["resource"] == "nodes"
            and attrs["name"] == NODE
            and attrs["group"] == ""
            and any(verb in ("*", attrs["verb"]) and sub in ("*", attrs["subresource"]) for verb, sub in self.grants.get(spec["user"], ()))
        )
        status = {"allowed": allowed}
        if allowed:
            status["reason"] = f'RBAC: allowed by ClusterRoleBinding "test" to User "{spec["user"]}"'
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec, "status": status}


def access_control(reviews: Reviews, *, anonymous: bool = False, ttl: CacheTTL = CacheTTL(0, 0)) -> AccessControl:
    """Uncached by default, so each request shows its own reviews."""
    return AccessControl(
        authenticator=Authenticator(tokens=TokenReviewer(reviews.token_review, ttl), anonymous=anonymous),
        authorizer=Authorizer(reviews.subject_access_review, ttl),
        node_name=NODE,
    )


@pytest.fixture
def kubelet_auth() -> types.SimpleNamespace:
    """The fake reviews above and their names, for the kubelet API's tests."""
    return types.SimpleNamespace(
        Reviews=Reviews,
        access_control=access_control,
        NODE=NODE,
        ADMIN_TOKEN=ADMIN_TOKEN,
        READER_TOKEN=READER_TOKEN,
        ADMIN=ADMIN,
        READER=READER,
        APISERVER=APISERVER,
    )
