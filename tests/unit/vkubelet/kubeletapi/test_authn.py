"""Kubelet API authentication: credentials read off a request as the kubelet reads them
(x509 CN/O, ``Authorization: Bearer``, the WebSocket token subprotocol), TokenReview answers
and their cache, the certificate -> token -> anonymous chain, and the bounded TTL cache."""

import base64

import pytest

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi.authn import (
    ANONYMOUS,
    AUTHENTICATED_GROUP,
    Authenticator,
    Credentials,
    TokenReviewer,
    Unauthenticated,
    UserInfo,
    bearer_token,
    token_review,
    user_from_certificate,
    user_from_token_review,
    websocket_protocol_token,
    with_authenticated_group,
)
from vkubelet.kubeletapi.decision_cache import CacheTTL, DecisionCache


class Clock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


# --- credentials ---------------------------------------------------------------------------------
def test_certificate_user_is_cn_and_groups_are_every_o():
    peercert = {
        "subject": (
            (("organizationName", "ops"),),
            (("organizationName", "system:masters"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    assert user_from_certificate(peercert) == UserInfo("kube-apiserver-kubelet-client", groups=("ops", "system:masters"))


@pytest.mark.parametrize("peercert", [None, {}, {"subject": ((("organizationName", "ops"),),)}])
def test_no_certificate_or_no_cn_is_no_user(peercert):
    assert user_from_certificate(peercert) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [(None, None), ("", None), ("Basic dXNlcjpwdw==", None), ("Bearer abc", "abc"), ("bearer abc", "abc"),
     ("  Bearer abc  ", "abc"), ("Bearer abc extra", "abc"), ("Bearer", None)],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def test_an_empty_bearer_token_is_refused():
    with pytest.raises(Unauthenticated):
        bearer_token("Bearer  x")  # two spaces: the token part is empty, as bearertoken.go splits


def _protocol(token: str) -> str:
    return "base64url.bearer.authorization.k8s.io." + base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def test_websocket_protocol_token():
    assert websocket_protocol_token([f"v5.channel.k8s.io, {_protocol('tok-en?')}"]) == "tok-en?"
    assert websocket_protocol_token(["v5.channel.k8s.io", "v4.channel.k8s.io"]) is None
    with pytest.raises(Unauthenticated):
        websocket_protocol_token(["base64url.bearer.authorization.k8s.io.%%%"])
    with pytest.raises(Unauthenticated):
        websocket_protocol_token(["base64url.bearer.authorization.k8s.io."])


def test_authenticated_group_is_added_once_and_never_to_anonymous():
    assert with_authenticated_group(UserInfo("a", groups=("x",))).groups == ("x", AUTHENTICATED_GROUP)
    assert with_authenticated_group(UserInfo("a", groups=(AUTHENTICATED_GROUP,))).groups == (AUTHENTICATED_GROUP,)
    assert with_authenticated_group(ANONYMOUS) == ANONYMOUS


def test_token_review_answers():
    ok = {"status": {"authenticated": True, "user": {"username": "alice", "uid": "7", "groups": ["dev"],
                                                      "extra": {"b": ["2"], "a": ["1"]}}}}
    assert user_from_token_review(ok) == (UserInfo("alice", "7", ("dev",), (("a", ("1",)), ("b", ("2",)))), "")
    assert user_from_token_review({"status": {"user": {}, "error": "[invalid bearer token]"}}) == (None, "[invalid bearer token]")
    assert user_from_token_review({"status": {"authenticated": True, "user": {}}})[0] is None
    assert token_review("t") == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}}


# --- TokenReview with a cache ---------------------------------------------------------------------
class TokenReviews:
    def __init__(self):
        self.valid = {"good": "alice"}
        self.calls = []
        self.error = None

    def __call__(self, body):
        if self.error is not None:
            raise self.error
        token = body["spec"]["token"]
        self.calls.append(token)
        name = self.valid.get(token)
        if name is None:
            return {"status": {"user": {}, "error": "invalid bearer token"}}
        return {"status": {"authenticated": True, "user": {"username": name, "groups": ["system:authenticated"]}}}


def test_valid_tokens_are_cached_longer_than_refused_ones():
    clock, reviews = Clock(), TokenReviews()
    tokens = TokenReviewer(reviews, CacheTTL(allowed=120, denied=30), clock=clock)
    for _ in range(3):
        assert tokens.authenticate("good").name == "alice"
        with pytest.raises(Unauthenticated, match="refused"):
            tokens.authenticate("bad")
    assert reviews.calls == ["good", "bad"]
    reviews.valid["bad"] = "bob"  # e.g. a ServiceAccount created meanwhile
    clock.now += 31
    assert tokens.authenticate("bad").name == "bob"
    assert tokens.authenticate("good").name == "alice"
    assert reviews.calls == ["good", "bad", "bad"]
    clock.now += 120
    tokens.authenticate("good")
    assert reviews.calls[-1] == "good"


def test_the_cache_never_holds_a_token():
    clock, reviews = Clock(), TokenReviews()
    tokens = TokenReviewer(reviews, clock=clock)
    tokens.authenticate("good")
    assert "good" not in repr(tokens.cache._entries)


def test_a_failed_token_review_is_unauthenticated_and_not_cached():
    clock, reviews = Clock(), TokenReviews()
    tokens = TokenReviewer(reviews, clock=clock)
    reviews.error = ApiError(403, "Forbidden", "cannot create tokenreviews")
    with pytest.raises(Unauthenticated, match="needs create on tokenreviews"):
        tokens.authenticate("good")
    reviews.error = None
    assert tokens.authenticate("good").name == "alice"


# --- the chain ----------------------------------------------------------------------------------------
CERT = {"subject": ((("commonName", "kube-apiserver-kubelet-client"),),)}


def test_a_certificate_wins_over_a_token():
    reviews = TokenReviews()
    authn = Authenticator(tokens=TokenReviewer(reviews))
    user = authn.authenticate(Credentials(peercert=CERT, authorization="Bearer good"))
    assert user == UserInfo("kube-apiserver-kubelet-client", groups=(AUTHENTICATED_GROUP,))
    assert reviews.calls == []


def test_header_token_then_websocket_token():
    authn = Authenticator(tokens=TokenReviewer(TokenReviews()))
    assert authn.authenticate(Credentials(authorization="Bearer good")).name == "alice"
    assert authn.authenticate(Credentials(websocket_protocols=(_protocol("good"),))).name == "alice"


def test_no_credentials_is_401_unless_anonymous_is_allowed():
    tokens = TokenReviewer(TokenReviews())
    with pytest.raises(Unauthenticated, match="anonymous requests are refused"):
        Authenticator(tokens=tokens).authenticate(Credentials())
    assert Authenticator(tokens=tokens, anonymous=True).authenticate(Credentials()) == ANONYMOUS
    assert ANONYMOUS == UserInfo("system:anonymous", groups=("system:unauthenticated",))


def test_a_bad_token_is_401_even_when_anonymous_is_allowed():
    with pytest.raises(Unauthenticated):
        Authenticator(tokens=TokenReviewer(TokenReviews()), anonymous=True).authenticate(Credentials(authorization="Bearer bad"))


# --- the cache itself ------------------------------------------------------------------------------------
def test_decision_cache_expiry_lru_and_zero_ttl():
    clock = Clock()
    cache = DecisionCache(CacheTTL(allowed=10, denied=0), max_entries=2, clock=clock)
    cache.put("a", 1, positive=True)
    cache.put("denied", 0, positive=False)  # ttl 0: not kept
    assert cache.get("denied") == (False, None)
    cache.put("b", 2, positive=True)
    assert cache.get("a") == (True, 1)  # a is now the most recently used
    cache.put("c", 3, positive=True)
    assert cache.get("b") == (False, None)  # the least recently used went
    assert cache.get("a") == (True, 1) and cache.get("c") == (True, 3)
    clock.now += 10
    assert cache.get("a") == (False, None) and len(cache) == 1
    with pytest.raises(ValueError):
        DecisionCache(CacheTTL(1, 1), max_entries=0)
