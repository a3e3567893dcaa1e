"""Whether a consumer may have the token it asks for (pure): the bound on the TokenRequests
its identity makes in its tenant namespace (``serviceaccounts/token``, the way its virtual
kubelet renews its bound token; docs/security.md "The consumer's identity").

RBAC lets the consumer ask for a token of its own ServiceAccount only; it said nothing of
how long the token lives or whom it is for. So, for a request by the consumer's identity
(the rule book's TokenRequest rows, :mod:`kube_offload.tenant_rules`):

* ``spec.expirationSeconds`` at most ``tokens.maxExpirationSeconds`` (default 24 h): a
  leaked token lives no longer than the provider accepts;
* every ``spec.audiences`` entry is one of the provider API server's own audiences (what a
  request naming none is given before admission sees it) or one the provider grants in
  ``tokens.audiences``: a token for another audience is a credential for another service
  that trusts this cluster's issuer (a cloud's workload identity, a secret store).

The API server's audiences are not in the request: the enforcer reads them from its own
token (:func:`audiences_of_token`), which the API server issued with its default audiences.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from enforcer.admission.tenant_requests import by_consumer
from kube_offload import bound_tokens
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.policy_rules import Context, Kind, refusal_lines
from kube_offload.rule_book import check


def audiences_of_token(token: str) -> tuple[str, ...]:
    """The ``aud`` claim of a JWT (unverified: it is the caller's own token), () when
    ``token`` is not one. A token the API server issued for a request naming no audience
    carries exactly the API server's audiences."""
    claims = bound_tokens.claims(token) or {}
    aud = claims.get("aud")
    if isinstance(aud, str):
        return (aud,)
    if isinstance(aud, list):
        return tuple(str(a) for a in aud if isinstance(a, str) and a)
    return ()


def _forbidden(message: str) -> Decision:
    return Decision.deny(403, "Forbidden", message)


def decide(
    request: AdmissionRequest,
    *,
    namespace: Mapping[str, Any] | None,
    consumer: Mapping[str, Any] | None,
    api_audiences: Iterable[str],
) -> Decision:
    """Allow or refuse (403, naming the field and the key) one TokenRequest (``CREATE`` of
    ``serviceaccounts/token``) in ``namespace``; only the requests of the identity of the
    consumer whose tenant namespace it is are judged (the provider's admins, ``kube-offload
    peer`` among them, mint what they like)."""
    if request.operation != "CREATE" or request.sub_resource != "token":
        return Decision.allow()
    who = by_consumer(request, namespace, consumer, "token is issued to it")
    if who.verdict is not None:
        return who.verdict
    owner, terms = who.owner, who.terms
    assert terms is not None
    ctx = Context(policy=terms.policy, consumer_id=owner, api_audiences=tuple(api_audiences))
    problems = refusal_lines(check(Kind.TOKEN_REQUEST, request.object or {}, ctx))
    if problems:
        return _forbidden("; ".join(problems))
    return Decision.allow()
