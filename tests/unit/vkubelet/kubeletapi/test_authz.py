"""Kubelet API authorization: path and method -> node attributes exactly as the kubelet
maps them (the table of kubernetes pkg/kubelet/server/auth_test.go, AuthzTestCases with
fine-grained authorization on, as in 1.36+), the SubjectAccessReview sent, and the
decisions with their cache."""

import pytest

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi.authn import UserInfo
from vkubelet.kubeletapi.authz import (
    AuthorizationFailed,
    Authorizer,
    NodeAttributes,
    api_verb,
    error_message,
    forbidden_message,
    is_subpath,
    request_attributes,
    review_decision,
    subject_access_review,
)
from vkubelet.kubeletapi.decision_cache import CacheTTL

NODE = "test"

# auth_test.go AuthzTestCases(fineGrained=true): path -> expected subresources, in order.
KUBELET_TABLE = {
    "/attach/{podNamespace}/{podID}/{containerName}": ["proxy"],
    "/attach/{podNamespace}/{podID}/{uid}/{containerName}": ["proxy"],
    "/checkpoint/{podNamespace}/{podID}/{containerName}": ["checkpoint"],
    "/configz": ["configz", "proxy"],
    "/statusz": ["statusz", "proxy"],
    "/containerLogs/{podNamespace}/{podID}/{containerName}": ["proxy"],
    "/debug/flags/v": ["proxy"],
    "/debug/pprof/{subpath:*}": ["proxy"],
    "/exec/{podNamespace}/{podID}/{containerName}": ["proxy"],
    "/exec/{podNamespace}/{podID}/{uid}/{containerName}": ["proxy"],
    "/healthz": ["healthz", "proxy"],
    "/healthz/log": ["healthz", "proxy"],
    "/healthz/ping": ["healthz", "proxy"],
    "/healthz/syncloop": ["healthz", "proxy"],
    "/logs/": ["log"],
    "/logs/{logpath:*}": ["log"],
    "/metrics": ["metrics"],
    "/metrics/slis": ["metrics"],
    "/metrics/cadvisor": ["metrics"],
    "/metrics/probes": ["metrics"],
    "/metrics/resource": ["metrics"],
    "/pods/": ["pods", "proxy"],
    "/portForward/{podNamespace}/{podID}": ["proxy"],
    "/portForward/{podNamespace}/{podID}/{uid}": ["proxy"],
    "/run/{podNamespace}/{podID}/{containerName}": ["proxy"],
    "/run/{podNamespace}/{podID}/{uid}/{containerName}": ["proxy"],
    "/runningpods/": ["pods", "proxy"],
    "/stats/": ["stats"],
    "/stats/summary": ["stats"],
}
METHODS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", KUBELET_TABLE)
def test_attributes_are_the_kubelets(path, method):
    assert request_attributes(method, path, NODE) == [
        NodeAttributes(METHODS[method], subresource, NODE, path) for subresource in KUBELET_TABLE[path]
    ]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/pods", ["pods", "proxy"]),
        ("/spec/", ["proxy"]),  # the kubelet no longer maps /spec (the endpoint is gone)
        ("/metricsjunk", ["proxy"]),  # a prefix is not a subpath
        ("/healthzjunk", ["proxy"]),
        ("/stats", ["stats"]),
        ("/logs", ["log"]),
        ("/", ["proxy"]),
    ],
)
def test_edges_of_the_mapping(path, expected):
    assert [a.subresource for a in request_attributes("GET", path, NODE)] == expected


def test_other_methods_get_no_verb_as_on_a_kubelet():
    # auth.go has no case for HEAD/OPTIONS: the verb is "", which only a "*" rule allows.
    assert api_verb("HEAD") == "" and api_verb("OPTIONS") == ""
    assert request_attributes("HEAD", "/healthz", NODE)[0].verb == ""


@pytest.mark.parametrize(
    ("subpath", "path", "expected"),
    [  # auth_test.go TestIsSubPath
        ("", "", True), ("foo", "foo", True), ("/foo", "/foo", True), ("/foo/", "/foo/", True),
        ("/foo/bar", "/foo/bar", True), ("/foo", "/", True), ("/foo/", "/", True), ("/foo/bar", "/", True),
        ("/foo/", "/foo", True), ("/foo/bar", "/foo", True),
        ("/foo", "/bar", False), ("/foo", "/foobar", False), ("/foobar", "/foo", False),
    ],
)
def test_is_subpath(subpath, path, expected):
    assert is_subpath(subpath, path) is expected


USER = UserInfo("system:serviceaccount:ops:viewer", "u-1", ("system:serviceaccounts", "system:authenticated"),
                (("authentication.kubernetes.io/credential-id", ("JTI=1",)),))


def test_subject_access_review_body():
    [attrs] = request_attributes("POST", "/exec/demo/web/app", "kube-offload-r1")
    assert subject_access_review(USER, attrs) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": USER.name,
            "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=1"]},
            "resourceAttributes": {
                "verb": "create", "group": "", "version": "v1", "resource": "nodes", "subresource": "proxy",
                "name": "kube-offload-r1",
            },
        },
    }


@pytest.mark.parametrize(
    ("status", "allowed"),
    [({"allowed": True}, True), ({"allowed": False}, False), ({}, False), ({"allowed": True, "denied": True}, False)],
)
def test_review_decision(status, allowed):
    assert review_decision({"status": status})[0] is allowed


def test_messages_are_the_kubelets():
    assert forbidden_message(USER, request_attributes("GET", "/exec/demo/web/app", "n")) == (
        f"Forbidden (user={USER.name}, verb=get, resource=nodes, subresource=proxy)"
    )
    assert error_message(USER, request_attributes("GET", "/containerLogs/demo/web/app", "n")) == (
        f"Authorization error (user={USER.name}, verb=get, resource=nodes, subresource=proxy)"
    )
    assert forbidden_message(USER, request_attributes("GET", "/pods", "n")).endswith("subresource(s)=pods,proxy)")


# --- the authorizer and its cache -----------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Reviews:
    def __init__(self, allowed):
        self.allowed = set(allowed)  # subresources allowed
        self.calls = []
        self.error = None

    def __call__(self, body):
        if self.error is not None:
            raise self.error
        attrs = body["spec"]["resourceAttributes"]
        self.calls.append(attrs["subresource"])
        return {"kind": "SubjectAccessReview", "status": {"allowed": attrs["subresource"] in self.allowed}}


def authorizer(reviews, clock, ttl=CacheTTL(allowed=300, denied=30), **options):
    return Authorizer(reviews, ttl, clock=clock, **options)


def test_fine_grained_first_then_proxy():
    clock, reviews = Clock(), Reviews({"proxy"})
    decision = authorizer(reviews, clock).authorize(USER, request_attributes("GET", "/pods", NODE))
    assert decision.allowed and decision.attributes[0].subresource == "proxy"
    assert reviews.calls == ["pods", "proxy"]


def test_first_allow_wins_without_asking_further():
    clock, reviews = Clock(), Reviews({"healthz"})
    assert authorizer(reviews, clock).authorize(USER, request_attributes("GET", "/healthz", NODE)).allowed
    assert reviews.calls == ["healthz"]


def test_denied_when_no_attribute_is_allowed():
    clock, reviews = Clock(), Reviews({"log"})
    decision = authorizer(reviews, clock).authorize(USER, request_attributes("GET", "/exec/a/b/c", NODE))
    assert not decision.allowed
    assert [a.subresource for a in decision.attributes] == ["proxy"]


def test_allowed_answers_live_longer_than_denied_ones():
    clock, reviews = Clock(), Reviews({"proxy"})
    authz = authorizer(reviews, clock)
    exec_attrs = request_attributes("GET", "/exec/a/b/c", NODE)
    stats_attrs = request_attributes("GET", "/stats/summary", NODE)
    for _ in range(3):
        assert authz.authorize(USER, exec_attrs).allowed
        assert not authz.authorize(USER, stats_attrs).allowed
    assert reviews.calls == ["proxy", "stats"]  # one review each, then the cache
    # Another pod or container: the same question (the path is not part of the review).
    authz.authorize(USER, request_attributes("GET", "/containerLogs/x/y/z", NODE))
    assert reviews.calls == ["proxy", "stats"]
    clock.now += 31  # the denial expired, the allow did not
    reviews.allowed.add("stats")
    assert authz.authorize(USER, stats_attrs).allowed
    assert authz.authorize(USER, exec_attrs).allowed
    assert reviews.calls == ["proxy", "stats", "stats"]
    clock.now += 300
    authz.authorize(USER, exec_attrs)
    assert reviews.calls[-1] == "proxy" and len(reviews.calls) == 4


def test_users_differing_only_in_groups_are_asked_separately():
    clock, reviews = Clock(), Reviews({"proxy"})
    authz = authorizer(reviews, clock)
    attrs = request_attributes("GET", "/exec/a/b/c", NODE)
    authz.authorize(USER, attrs)
    authz.authorize(UserInfo(USER.name, USER.uid, ("system:authenticated",)), attrs)
    assert reviews.calls == ["proxy", "proxy"]


def test_a_failed_review_is_an_error_and_not_cached():
    clock, reviews = Clock(), Reviews({"proxy"})
    authz = authorizer(reviews, clock)
    attrs = request_attributes("GET", "/exec/a/b/c", NODE)
    reviews.error = ApiError(403, "Forbidden", "cannot create subjectaccessreviews")
    with pytest.raises(AuthorizationFailed, match="needs create on subjectaccessreviews"):
        authz.authorize(USER, attrs)
    assert len(authz.cache) == 0
    reviews.error = None
    assert authz.authorize(USER, attrs).allowed


def test_the_cache_is_bounded():
    clock, reviews = Clock(), Reviews({"proxy"})
    authz = authorizer(reviews, clock, max_entries=3)
    attrs = request_attributes("GET", "/exec/a/b/c", NODE)
    for i in range(10):
        authz.authorize(UserInfo(f"user-{i}"), attrs)
    assert len(authz.cache) == 3
    authz.authorize(UserInfo("user-0"), attrs)  # evicted: asked again
    assert len(reviews.calls) == 11
