"""The bound on a consumer's own TokenRequests (enforcer/admission/token_policy.py and its
glue, token_webhook.py): expiry and audiences, for the consumer's identity only."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import orjson
import pytest

from enforcer.admission import token_policy
from enforcer.admission.token_webhook import api_audiences
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review

TENANT = c.tenant_namespace("local")
CONSUMER_USER = f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"
API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)


def jwt(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def tenant(labelled: bool = True) -> dict:
    labels = {c.LABEL_TENANT: "local"} if labelled else {}
    return {"metadata": {"name": TENANT, "labels": labels}}


def consumer(**policy) -> dict:
    return {"metadata": {"name": "local"}, "spec": {"policy": policy} if policy else {}}


def token_request(expiration: int = 86400, audiences: list[str] | None = None, *, user: str = CONSUMER_USER):
    obj = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "consumer", "namespace": TENANT},
           "spec": {"expirationSeconds": expiration, "audiences": list(API_AUDIENCES if audiences is None else audiences)}}
    review = build_review(obj, operation="CREATE", user_info={"username": user})
    request = review["request"]
    request.update(subResource="token", namespace=TENANT, name="consumer",
                   kind={"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"},
                   resource={"group": "", "version": "v1", "resource": "serviceaccounts"})
    return parse_review(orjson.dumps(review))


def decide(request, *, the_consumer=None, namespace=None):
    return token_policy.decide(request, namespace=namespace or tenant(), consumer=the_consumer or consumer(),
                               api_audiences=API_AUDIENCES)


def test_the_honest_renewal_is_admitted():
    # The virtual kubelet asks for no audience (the API server fills in its own) and the
    # lifetime kube-offload peer granted (24 h by default).
    assert decide(token_request()).allowed


def test_an_eight_day_token_is_refused_naming_the_key():
    answer = decide(token_request(8 * 24 * 3600))
    assert not answer.allowed and answer.code == 403
    assert "spec.expirationSeconds: 691200 s is longer than consumer \"local\" may ask for its token (86400 s" in answer.message
    assert "Consumer spec.policy.tokens.maxExpirationSeconds" in answer.message
    assert decide(token_request(8 * 24 * 3600), the_consumer=consumer(tokens={"maxExpirationSeconds": 8 * 24 * 3600})).allowed


def test_a_token_for_another_audience_is_refused_unless_granted():
    answer = decide(token_request(audiences=["sts.amazonaws.com"]))
    assert not answer.allowed
    assert "spec.audiences: 'sts.amazonaws.com' not granted to consumer \"local\"" in answer.message
    assert "Consumer spec.policy.tokens.audiences (granted: none)" in answer.message
    assert decide(token_request(audiences=["sts.amazonaws.com"]), the_consumer=consumer(tokens={"audiences": ["sts.amazonaws.com"]})).allowed


def test_only_the_consumers_identity_in_its_tenant_namespace_is_judged():
    admin = token_request(8 * 24 * 3600, ["anything"], user="kubernetes-admin")
    assert decide(admin).allowed
    relay = token_request(8 * 24 * 3600, user=f"system:serviceaccount:{TENANT}:home-api-relay")
    assert decide(relay).allowed  # RBAC gives it no token request at all
    assert decide(token_request(8 * 24 * 3600), namespace=tenant(labelled=False)).allowed  # not a tenant namespace


def test_a_misconfigured_consumer_gets_no_token():
    answer = decide(token_request(), the_consumer=consumer(tokens={"maxExpirationSeconds": 5}))
    assert not answer.allowed and 'Consumer "local" is misconfigured' in answer.message


@pytest.mark.parametrize("aud, expected", [
    (list(API_AUDIENCES), API_AUDIENCES), ("https://issuer", ("https://issuer",)), (None, ()),
])
def test_the_api_servers_audiences_are_read_from_the_enforcers_own_token(aud, expected):
    claims = {"sub": "system:serviceaccount:kube-offload:kube-offload-enforcer"}
    if aud is not None:
        claims["aud"] = aud
    for key, prefix in (("BearerToken", "Bearer "), ("BearerToken", "bearer "), ("authorization", "Bearer ")):
        client = SimpleNamespace(configuration=SimpleNamespace(api_key={key: prefix + jwt(claims)}))
        assert api_audiences(client) == expected
    assert api_audiences(SimpleNamespace(configuration=SimpleNamespace(api_key={}))) == ()
