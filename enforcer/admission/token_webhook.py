"""The TokenRequest validating webhook, apart from HTTP: the tenant namespace and the
Consumer from the enforcer's caches, the provider API server's audiences read once from
the enforcer's own credentials, and the decision (pure, :mod:`enforcer.admission.token_policy`)."""

from __future__ import annotations

import logging
from typing import Any

from enforcer.admission import token_policy as policy
from enforcer.admission.caches import ProviderCaches
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision

log = logging.getLogger("kube_offload.enforcer.webhook")


def api_audiences(api_client: Any) -> tuple[str, ...]:
    """The audiences the provider API server gives a token that names none, read from the
    enforcer's own bearer token (in a pod, the projected ServiceAccount token; in the
    tests, a TokenRequest one: both asked with no audience). () for a client that is not
    authenticated by a token (a client certificate): then only the granted audiences pass."""
    keys = getattr(getattr(api_client, "configuration", None), "api_key", None) or {}
    raw = str(keys.get("BearerToken") or keys.get("authorization") or "")
    token = raw.split(" ", 1)[1] if raw.lower().startswith("bearer ") else raw
    return policy.audiences_of_token(token.strip())


class TokenRequestValidator:
    def __init__(self, caches: ProviderCaches, audiences: tuple[str, ...]) -> None:
        self._caches = caches
        self.audiences = audiences
        if not audiences:
            log.warning("the enforcer's own credentials are not a token: the provider API server's audiences are "
                        "unknown, so a consumer's token request is admitted only for audiences its Consumer grants "
                        "(spec.policy.tokens.audiences); run the enforcer with a ServiceAccount token")

    def ready(self) -> bool:
        return self._caches.has_synced()

    def review(self, request: AdmissionRequest) -> Decision:
        if request.operation != "CREATE" or request.sub_resource != "token":
            return Decision.allow()
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable",
                                 "could not verify the token request: the enforcer's caches are not synced yet; retry later")
        namespace = self._caches.namespace(request.namespace) if request.namespace else None
        owner = (((namespace or {}).get("metadata") or {}).get("labels") or {}).get(c.LABEL_TENANT)
        consumer = self._caches.consumer(owner) if owner else None
        return policy.decide(request, namespace=namespace, consumer=consumer, api_audiences=self.audiences)
