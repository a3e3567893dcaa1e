"""Who writes in a tenant namespace (pure): the one question the webhooks that judge a
consumer's requests there (its tokens, :mod:`enforcer.admission.token_policy`; what it
keeps, :mod:`enforcer.admission.tenant_objects`) ask before their own rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.consumers import ConsumerError, ConsumerTerms, consumer_terms


@dataclass(frozen=True)
class TenantRequest:
    """What a webhook does with a request in a tenant namespace: ``verdict`` when decided
    already (not the consumer's identity: allowed; its Consumer misconfigured: refused),
    else the ``terms`` of the consumer ``owner`` whose identity makes it."""

    verdict: Decision | None = None
    owner: str = ""
    terms: ConsumerTerms | None = None


def by_consumer(request: AdmissionRequest, namespace: Mapping[str, Any] | None, consumer: Mapping[str, Any] | None,
                what: str) -> TenantRequest:
    """Whether ``request`` in ``namespace`` comes from the identity of the consumer whose
    tenant namespace it is (``consumer``: that Consumer). ``what`` names what a misconfigured
    consumer is refused (its refusal's words)."""
    owner = (((namespace or {}).get("metadata") or {}).get("labels") or {}).get(c.LABEL_TENANT)
    if not owner or consumer is None:
        # Not a consumer's tenant namespace (any more): RBAC decides, and the enforcer serves
        # nothing there.
        return TenantRequest(verdict=Decision.allow())
    try:
        terms = consumer_terms(consumer)
    except ConsumerError as exc:
        if request.user_info.username.startswith(f"system:serviceaccount:{request.namespace}:"):
            return TenantRequest(verdict=Decision.deny(
                403, "Forbidden", f'Consumer "{owner}" is misconfigured ({exc}); no {what} until the provider fixes it'))
        return TenantRequest(verdict=Decision.allow())
    if request.user_info.username != terms.username:
        return TenantRequest(verdict=Decision.allow())  # the provider's admins, kube-offload peer
    return TenantRequest(owner=str(owner), terms=terms)
