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
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.consumer_quota import consumer_quota
from kube_offload.provider_policy import ProviderPolicy, ProviderPolicyError, parse_policy
from kube_offload.resources import QuantityError, ResourceList, resource_sort_key
from kube_offload.times import format_time, parse_time
from kube_offload.views import ConsumerView

ConsumerLookup = Callable[[str], "Mapping[str, Any] | None"]
"""Consumer name -> Consumer object (or None): e.g. a Consumer informer's ``get``."""


def consumer_name(consumer: Mapping[str, Any]) -> str:
    return str((consumer.get("metadata") or {}).get("name") or "")


def service_account_of(consumer: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the consumer's identity here; each part defaults as the CRD
    documents: ServiceAccount ``consumer`` in ``kube-offload-tenant-<name>``."""
    account = ConsumerView(consumer).service_account
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
    level = ConsumerView(consumer).pod_security_level
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


# --- further offloading (docs/multihop.md) ------------------------------------------------------
FURTHER_OFFLOADING_FIELD = "spec.furtherOffloading"
# The placements a provider may give a consumer's twin namespaces when it offloads them
# further: its own nodes or its providers' (LocalAndRemote), or its providers' only.
# (Local would be the same as no further offloading.)
FURTHER_PLACEMENTS = (c.PLACEMENT_LOCAL_AND_REMOTE, c.PLACEMENT_REMOTE)


def further_offloading(consumer: Mapping[str, Any]) -> str | None:
    """The pod placement (a ``kube-offload.io/pod-placement`` value) the provider gives
    this consumer's twin namespaces when it lets them be offloaded further to its own
    providers, or None: not offloaded further (the default). Anything this code cannot
    read counts as None, so a typo never sends a consumer's pods to a third cluster (the
    CRD's schema names the field to the provider first)."""
    raw = ConsumerView(consumer).further_offloading
    if not isinstance(raw, Mapping) or raw.get("enabled") is not True:
        return None
    placement = raw.get("podPlacement") or c.PLACEMENT_LOCAL_AND_REMOTE
    return placement if placement in FURTHER_PLACEMENTS else None


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
    # spec.drain is set (kube-offload drain): creates are refused as under a cordon.
    draining: bool = False


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
        # Present at all, even unreadable: a drain the enforcer cannot time still refuses
        # new pods (it is the provider's record; the CRD schema keeps it well formed).
        draining=spec.get("drain") is not None,
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


# --- drain (kube-offload drain; docs/enforcer.md "Draining a consumer") -------------------------
# spec.drain is the provider's record of a drain: when it started and how long the consumer's
# pods may take to leave. Its presence refuses new ShadowPods (as spec.cordoned does) and makes
# the consumer's virtual kubelet taint its node NoExecute; once the grace is over the enforcer
# deletes the ShadowPods still there. Only the provider writes spec; the consumer reads it.
DRAIN_FIELD = "spec.drain"
DRAIN_STARTED = "startedAt"
DRAIN_GRACE = "gracePeriodSeconds"
# The CRD's maximum for gracePeriodSeconds (30 days; tests pin the two together).
DRAIN_MAX_GRACE_SECONDS = 30 * 24 * 3600

DRAIN_PHASE_DRAINING = "Draining"  # within the grace: the consumer's pods are leaving
DRAIN_PHASE_EXPIRED = "GraceExpired"  # the enforcer deletes the ShadowPods still there
DRAIN_PHASE_DRAINED = "Drained"  # no ShadowPod of this consumer is left


@dataclass(frozen=True)
class Drain:
    started: datetime
    grace_seconds: int

    @property
    def deadline(self) -> datetime:
        return self.started + timedelta(seconds=self.grace_seconds)


def drain_record(started: datetime, grace_seconds: int) -> dict[str, Any]:
    """The ``spec.drain`` object ``kube-offload drain`` writes."""
    if not 0 <= grace_seconds <= DRAIN_MAX_GRACE_SECONDS:
        raise ValueError(f"{DRAIN_FIELD}.{DRAIN_GRACE} must be 0 to {DRAIN_MAX_GRACE_SECONDS} seconds (30 days), not {grace_seconds}")
    return {DRAIN_STARTED: format_time(started), DRAIN_GRACE: int(grace_seconds)}


def read_drain(spec: Mapping[str, Any]) -> Drain | None:
    """The drain in a Consumer's ``spec`` (None: not drained); :class:`ConsumerError`
    naming the field when it is there but unreadable (the CRD schema prevents that; an
    older schema or an edit without it does not)."""
    raw = spec.get("drain")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConsumerError(f"{DRAIN_FIELD} must be an object with {DRAIN_STARTED} and {DRAIN_GRACE}; undrain and drain again")
    try:
        started = parse_time(str(raw.get(DRAIN_STARTED) or ""))
    except ValueError:
        raise ConsumerError(
            f"{DRAIN_FIELD}.{DRAIN_STARTED}={raw.get(DRAIN_STARTED)!r} is not an RFC 3339 time; undrain and drain again"
        ) from None
    grace = raw.get(DRAIN_GRACE)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ConsumerError(f"{DRAIN_FIELD}.{DRAIN_GRACE}={grace!r} must be a whole number of seconds, 0 or more")
    return Drain(started=started, grace_seconds=grace)


def drain_phase(drain: Drain, now: datetime, shadowpods_left: int) -> str:
    if shadowpods_left == 0:
        return DRAIN_PHASE_DRAINED
    return DRAIN_PHASE_EXPIRED if now >= drain.deadline else DRAIN_PHASE_DRAINING


def shadowpods_due(drain: Drain, shadowpods: Iterable[Mapping[str, Any]], now: datetime) -> list[Mapping[str, Any]]:
    """The ShadowPods of a drained consumer the provider deletes now: none within the grace
    (the consumer's pods leave through their own evictions), afterwards every one not
    already being deleted, whatever the consumer does meanwhile."""
    if now < drain.deadline:
        return []
    return [sp for sp in shadowpods if not (sp.get("metadata") or {}).get("deletionTimestamp")]
