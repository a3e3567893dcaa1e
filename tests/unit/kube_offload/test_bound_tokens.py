"""kube_offload.bound_tokens: a bound token's schedule read from its own claims, the
TokenRequest answer, and the kubeconfig that carries the token."""

from __future__ import annotations

import base64
import json

import pytest

from kube_offload import bound_tokens as bt
from kube_offload import constants as c


def jwt(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2ln"


def test_lifetime_from_the_claims_and_the_renewal_point():
    token = jwt({"iat": 1000, "exp": 1600, "nbf": 1000})
    life = bt.lifetime(token)
    assert life == bt.Lifetime(1000.0, 1600.0)
    assert life.seconds == 600
    assert life.renew_at(0.8) == 1480.0
    assert life.renew_at(0.01) == 1006.0
    assert not life.expired(1599.9) and life.expired(1600)


@pytest.mark.parametrize("token", [
    "opaque-token",
    "a.b",
    "a.!!!.c",
    jwt({"iss": "kubernetes/serviceaccount"}),  # a legacy Secret token: no exp
    jwt({"iat": 10, "exp": 5}),
    jwt({"iat": "10", "exp": 50}),
])
def test_tokens_without_a_usable_lifetime(token):
    assert bt.lifetime(token) is None


def test_the_fresher_token_wins_whatever_the_order_copies_arrive_in():
    old, new = jwt({"iat": 0, "exp": 600}), jwt({"iat": 300, "exp": 900})
    legacy = jwt({"sub": "x"})
    assert bt.fresher(old, new) and not bt.fresher(new, old)
    assert not bt.fresher(new, new) and not bt.fresher(new, "")
    # a bound token replaces a never-expiring one; never the reverse
    assert bt.fresher(legacy, new) and not bt.fresher(new, legacy)


@pytest.mark.parametrize("value, ok", [(0.8, True), (0.01, True), (0, False), (1, False), (1.5, False), (-0.1, False)])
def test_fraction_problem(value, ok):
    problem = bt.fraction_problem("--remote-token-renew-fraction", value)
    assert (problem is None) == ok
    if not ok:
        assert "--remote-token-renew-fraction" in problem and "between 0 and 1" in problem


def test_expiration_problem_names_the_api_servers_minimum():
    assert bt.expiration_problem("--token-expiration", 600) is None
    assert "at least 10m" in (bt.expiration_problem("--token-expiration", 599) or "")


def test_request_body():
    assert bt.request_body("consumer", 3600) == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {"name": "consumer"}, "spec": {"expirationSeconds": 3600},
    }


def test_grant_uses_what_the_api_server_granted():
    token = jwt({"iat": 1000, "exp": 4600})  # asked for a day, shortened to an hour
    grant = bt.grant_from_response({"status": {"token": token, "expirationTimestamp": "1970-01-01T01:16:40Z"}}, now=999)
    assert grant == bt.Grant(token, bt.Lifetime(1000.0, 4600.0))
    # a token that is no JWT: its lifetime from status.expirationTimestamp, from now
    grant = bt.grant_from_response({"status": {"token": "opaque", "expirationTimestamp": "1970-01-01T01:00:00Z"}}, now=100)
    assert grant.lifetime == bt.Lifetime(100.0, 3600.0)
    with pytest.raises(ValueError, match="status.token"):
        bt.grant_from_response({"status": {}}, now=0)
    assert bt.secret_annotations(bt.Grant(token, bt.Lifetime(0, 3600))) == {
        c.ANNOTATION_TOKEN_ISSUED_AT: "1970-01-01T00:00:00Z", c.ANNOTATION_TOKEN_EXPIRES_AT: "1970-01-01T01:00:00Z"}


def test_the_token_of_the_current_user_is_read_and_replaced():
    config = {
        "current-context": "r",
        "contexts": [{"name": "other", "context": {"user": "u0"}}, {"name": "r", "context": {"cluster": "r", "user": "u1"}}],
        "users": [{"name": "u0", "user": {"token": "zero"}}, {"name": "u1", "user": {"token": "one"}}],
    }
    assert bt.kubeconfig_token(config) == "one"
    updated = bt.with_token(config, "two")
    assert bt.kubeconfig_token(updated) == "two"
    assert updated["users"][0]["user"] == {"token": "zero"}
    assert config["users"][1]["user"] == {"token": "one"}  # the input is not changed
    assert bt.kubeconfig_token({}) is None
    with pytest.raises(ValueError, match="names no user"):
        bt.with_token({"users": []}, "x")
