"""Who a consumer is on a provider and on what terms, read from its ``Consumer`` and its
tenant namespace (pure).

Facts shared by the TwinNamespace controller (is this request a consumer's?), the ShadowPod
webhook (is this user the consumer that owns the namespace? which Pod Security level
applies? is it within its quota?) and ``kubectl offload explain``. Everything the provider
trusts here is provider-written: the Consumer's spec and the tenant namespace's label,
never anything the consumer can set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kube_offload import constants as c
from kube_offload.consumer_quota import consumer_quota
from kube_offload.provider_policy import ProviderPolicy, ProviderPolicyError, parse_policy
from kube_offload.resources import QuantityError, ResourceList, resource_sort_key

ConsumerLookup = Callable[[str], "Mapping[str, Any] | None"]
"""Consumer name -> Consumer object (or None): e.g. a Consumer informer's ``get``."""


def consumer_name(consumer: Mapping[str, Any]) -> str:
    return str((consumer.get("metadata") or {}).get("name") or "")


def service_account_of(consumer: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the consumer's identity here; each part defaults as the CRD
    documents: ServiceAccount ``consumer`` in ``kube-offload-tenant-<name>``."""
    account = (consumer.get("spec") or {}).get("serviceAccount") or {}
    namespace = account.get("namespace") or c.tenant_namespace(consumer_name(consumer))
    name = account.get("name") or c.CONSUMER_SERVICE_ACCOUNT
    return str(namespace), str(name)


def service_account_username(consumer: Mapping[str, Any]) -> str:
    """The user name the apiserver gives the consumer's requests."""
    namespace, name = service_account_of(consumer)
    return f"system:serviceaccount:{namespace}:{name}"


def pod_security_level(consumer: Mapping[str, Any]) -> str:
    """The consumer's Pod Security level: the CRD's default (baseline) when unset, and
    ``restricted`` for a value this code does not know, so a typo never loosens it."""
    level = (consumer.get("spec") or {}).get("podSecurityLevel")
    if level is None or level == "":
        return c.DEFAULT_PSA_LEVEL
    return level if level in c.PSA_LEVELS else "restricted"


def tenant_of(namespace: Mapping[str, Any] | None) -> str | None:
    """The consumer id a tenant namespace belongs to (its ``kube-offload.io/tenant`` label)."""
    if not namespace:
        return None
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_TENANT) or None


def requesting_consumer(
    request_namespace: str, tenant_namespace: Mapping[str, Any] | None, consumers: ConsumerLookup
) -> tuple[Mapping[str, Any] | None, str]:
    """The Consumer whose requests namespace ``request_namespace`` is, or None and why not.

    All three must hold: the namespace carries ``kube-offload.io/tenant=<id>``, Consumer
    ``<id>`` exists, and that Consumer's ServiceAccount lives in this very namespace (so
    whoever can write requests here is that consumer, and nobody else's label or object
    can make a namespace speak for a consumer).
    """
    consumer_id = tenant_of(tenant_namespace)
    if consumer_id is None:
        return None, (
            f"namespace {request_namespace} is not a tenant namespace (no label {c.LABEL_TENANT}); "
            "the provider admits a consumer by creating its tenant namespace and Consumer"
        )
    consumer = consumers(consumer_id)
    if consumer is None:
        return None, (
            f"namespace {request_namespace} belongs to consumer {consumer_id}, but there is no "
            f"Consumer {consumer_id}: the provider has not admitted it (kubectl get consumers)"
        )
    account_namespace, _ = service_account_of(consumer)
    if account_namespace != request_namespace:
        return None, (
            f"Consumer {consumer_id} has its identity in namespace {account_namespace}, not "
            f"{request_namespace}: requests are served only in the namespace of the consumer's "
            "ServiceAccount (Consumer spec.serviceAccount.namespace)"
        )
    return consumer, ""


# --- the terms the ShadowPod webhook enforces ---------------------------------------------------
@dataclass(frozen=True)
class ConsumerTerms:
    """The parts of a Consumer's spec the webhook enforces."""

    consumer_id: str
    username: str  # system:serviceaccount:<ns>:<name>
    level: str
    quota: ResourceList  # milli-units; an absent resource is unlimited
    cordoned: bool
    policy: ProviderPolicy  # spec.policy, its defaults where absent


class ConsumerError(ValueError):
    """The Consumer object itself is unusable (the provider's mistake)."""


def consumer_terms(consumer: Mapping[str, Any]) -> ConsumerTerms:
    """Identity and level as :func:`service_account_username` and :func:`pod_security_level` read them (an unknown level counts
    as restricted); a quota or a policy that does not parse is the provider's mistake and
    refuses (never a guess at what the provider meant to grant)."""
    spec = consumer.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ConsumerError("spec is not an object")
    if not isinstance(spec.get("serviceAccount") or {}, Mapping):
        raise ConsumerError("spec.serviceAccount is not an object")
    try:
        quota = consumer_quota(spec)  # quota keys read under spec.policy.quotaMode (kube_offload.consumer_quota)
    except QuantityError as exc:
        raise ConsumerError(str(exc)) from None  # names the key: spec.quota or spec.policy
    try:
        policy = parse_policy(spec.get("policy"))
    except ProviderPolicyError as exc:
        raise ConsumerError(str(exc)) from None
    return ConsumerTerms(
        consumer_id=consumer_name(consumer),
        username=service_account_username(consumer),
        level=pod_security_level(consumer),
        quota=quota,
        cordoned=spec.get("cordoned") is True,
        policy=policy,
    )


def quota_excess(
    quota: Mapping[str, int], usage: Mapping[str, int], delta: Mapping[str, int]
) -> list[tuple[str, int, int, int]]:
    """(resource, added, used, quota) for every quota'd resource this request would take
    over its quota. A request that adds nothing to a resource is never refused for it,
    so a consumer already over a lowered quota can still shrink or touch its pods."""
    exceeded = []
    for name in sorted(quota, key=resource_sort_key):
        more = delta.get(name, 0)
        if more <= 0:
            continue
        used = usage.get(name, 0)
        if used + more > quota[name]:
            exceeded.append((name, more, used, quota[name]))
    return exceeded
