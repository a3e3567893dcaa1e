"""The rule book: every provider-policy rule, one row each (pure; docs/security.md "Provider
policy" is its table for people).

A row names the ``Consumer spec.policy`` key it applies (or, for what no key can grant, its own
name under ``never.``), what it judges, its one predicate (:mod:`kube_offload.pod_rules`,
:mod:`kube_offload.object_rules`, :mod:`kube_offload.tenant_rules`), the honest consumer's fit
(:class:`~kube_offload.policy_rules.FitAction`), what the provider does and where. Everything
that applies a rule asks this book:

* the provider's refusals: the ShadowPod webhook and every pod the enforcer creates
  (enforcer/admission/pod_policy.py, validation.py), the EndpointSlice, TokenRequest,
  tenant-objects and custom-resource webhooks (the other ``*_policy.py``), the twin loop
  (enforcer/consumers/twin_names.py);
* the consumer's fit (vkubelet/shared/policy_fit.py): what it drops or lowers before it sends,
  and the notes it tells its local users;
* the chart's ValidatingAdmissionPolicies are checked against it: the agreement tests run one
  table of cases through :func:`check`, :func:`~kube_offload.policy_rules.fit` and the real API
  server (tests/unit/kube_offload/test_rule_book.py, tests/e2e/test_policy_agreement.py); a
  unit test fails when a key of :mod:`kube_offload.provider_policy` has no row or no case.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import object_rules as obj
from kube_offload import pod_rules as pod
from kube_offload import provider_policy as pp
from kube_offload import tenant_rules as tenant
from kube_offload.policy_rules import (
    NEVER,
    Context,
    FitAction,
    Fitted,
    Kind,
    ProviderAction,
    Rule,
    Violation,
    fit,
)

DROP, ADJUST, REFUSE, ASK = FitAction.DROP, FitAction.ADJUST, FitAction.REFUSE, FitAction.ASK
SHADOWPODS = "the ShadowPod webhook and every pod create"
SERVICES_VAP = "VAP <release>-consumer-services"
SLICES_VAP = "VAP <release>-consumer-endpointslices"
SLICES_WEBHOOK = "VAP <release>-consumer-endpointslices and the enforcer's EndpointSlice webhook"
INGRESSES_VAP = "VAP <release>-consumer-ingresses"
CLAIMS_VAP = "VAP <release>-consumer-persistentvolumeclaims"
SECRETS_VAP = "VAP <release>-consumer-secrets"
TOKENS = "the enforcer's TokenRequest webhook"
TENANT = "the enforcer's tenant-objects webhook"
TWINS = "the enforcer's twin loop (the request's status)"
CUSTOM = "the enforcer's custom-resource webhook"

RULES: tuple[Rule, ...] = (
    # pods: what a pod asks of the provider's nodes
    Rule("pods.priorityClasses", Kind.POD, pod.priority_classes, DROP, SHADOWPODS),
    Rule("pods.tolerations", Kind.POD, pod.tolerations, DROP, SHADOWPODS),
    Rule("pods.reservedNodeLabelKeys", Kind.POD, pod.reserved_node_keys, DROP, SHADOWPODS),
    Rule("pods.volumeTypes", Kind.POD, pod.volume_types, REFUSE, SHADOWPODS),
    Rule("pods.runtimeClasses", Kind.POD, pod.runtime_classes, DROP, SHADOWPODS),
    Rule("pods.deniedMetadataPrefixes", Kind.POD, pod.denied_metadata, DROP, SHADOWPODS),
    Rule("pods.schedulerNames", Kind.POD, pod.scheduler_names, DROP, SHADOWPODS),
    Rule("pods.imageRegistries", Kind.POD, pod.image_registries, REFUSE, SHADOWPODS),
    Rule("pods.ephemeralContainers", Kind.POD, pod.ephemeral_containers, DROP, SHADOWPODS),
    Rule("pods.remoteAPIAccess", Kind.POD, pod.remote_api_access, REFUSE, "the enforcer, at every pod create",
         ProviderAction.SETS),
    Rule("pods.maxTerminationGracePeriodSeconds", Kind.POD, pod.termination_grace, ADJUST,
         "the enforcer, at every pod create and deletion", ProviderAction.SETS),
    Rule("storage.classes", Kind.POD, pod.ephemeral_classes, REFUSE, SHADOWPODS),
    Rule("storage.maxClaimSize", Kind.POD, pod.ephemeral_sizes, REFUSE, SHADOWPODS),
    Rule(pp.QUOTA_MODE_KEY, Kind.POD, pod.quota_limits, REFUSE, SHADOWPODS),
    # Services
    Rule("services.types", Kind.SERVICE, obj.service_types, ADJUST, SERVICES_VAP),
    Rule("services.externalName", Kind.SERVICE, obj.external_name, REFUSE, SERVICES_VAP),
    Rule("services.externalIPCIDRs", Kind.SERVICE, obj.external_ips, DROP, SERVICES_VAP),
    Rule(f"{NEVER}serviceExternalFields", Kind.SERVICE, obj.external_fields, DROP, SERVICES_VAP),
    # EndpointSlices
    Rule("services.externalName", Kind.ENDPOINT_SLICE, obj.fqdn_endpoints, REFUSE, SLICES_VAP),
    Rule("endpoints.cidrs", Kind.ENDPOINT_SLICE, obj.endpoint_addresses, DROP, SLICES_WEBHOOK),
    # Ingresses
    Rule("ingress.classes", Kind.INGRESS, obj.ingress_classes, REFUSE, INGRESSES_VAP),
    Rule("ingress.hostDomains", Kind.INGRESS, obj.ingress_hosts, REFUSE, INGRESSES_VAP),
    Rule("ingress.annotations", Kind.INGRESS, obj.ingress_annotations, DROP, INGRESSES_VAP),
    Rule(f"{NEVER}ingressCatchAll", Kind.INGRESS, obj.ingress_catch_alls, DROP, INGRESSES_VAP),
    # claims
    Rule("storage.classes", Kind.CLAIM, obj.claim_classes, REFUSE, CLAIMS_VAP),
    Rule("storage.maxClaimSize", Kind.CLAIM, obj.claim_size, REFUSE, CLAIMS_VAP),
    Rule(f"{NEVER}claimSources", Kind.CLAIM, obj.claim_sources, REFUSE, CLAIMS_VAP),
    # Secrets
    Rule(f"{NEVER}serviceAccountTokenSecrets", Kind.SECRET, obj.secret_types, REFUSE, SECRETS_VAP),
    # the consumer's tenant namespace and its own kinds
    Rule("tokens.maxExpirationSeconds", Kind.TOKEN_REQUEST, tenant.token_expiration, ADJUST, TOKENS),
    Rule("tokens.audiences", Kind.TOKEN_REQUEST, tenant.token_audiences, REFUSE, TOKENS),
    Rule("twinNamespaces.sameNames", Kind.TWIN_REQUEST, tenant.twin_same_names, ASK, TWINS),
    Rule("twinNamespaces.reserved", Kind.TWIN_REQUEST, tenant.twin_reserved, ASK, TWINS),
    Rule(f"{NEVER}consumerIdClash", Kind.TWIN_REQUEST, tenant.consumer_id_clash, ASK, TWINS),
    Rule("twinNamespaces.maxCount", Kind.TENANT_COUNT, tenant.held_too_many("twinNamespaces.maxCount"), ASK, TWINS),
    Rule("twinNamespaces.maxRequests", Kind.TENANT_COUNT, tenant.held_too_many("twinNamespaces.maxRequests"), ASK, TENANT),
    Rule("twinNamespaces.maxObjects", Kind.TENANT_COUNT, tenant.held_too_many("twinNamespaces.maxObjects"), REFUSE,
         "a ResourceQuota in each twin (built-in kinds); the ShadowPod webhook (ShadowPods)"),
    Rule("slices.maxCount", Kind.TENANT_COUNT, tenant.held_too_many("slices.maxCount"), ASK, TENANT),
    Rule(pp.CUSTOM_RESOURCES_KEY, Kind.CUSTOM_RESOURCE, tenant.custom_resources, REFUSE, CUSTOM),
)


def rules_for(kind: Kind, *, refused_by_provider: bool = False) -> tuple[Rule, ...]:
    """The rows judging ``kind``; ``refused_by_provider``: only those the provider refuses
    by (not those it sets on what it makes)."""
    return tuple(r for r in RULES if r.kind is kind and (not refused_by_provider or r.provider is ProviderAction.REFUSES))


def check(kind: Kind, subject: Mapping[str, Any], ctx: Context, *, refused_by_provider: bool = False) -> list[Violation]:
    """Every violation of the rows judging ``kind``, in the book's order. Raises
    :class:`~kube_offload.policy_rules.Malformed` for an object that does not have its kind's shape."""
    return [v for rule in rules_for(kind, refused_by_provider=refused_by_provider) for v in rule.check(subject, ctx)]


def fitted(kind: Kind, subject: Mapping[str, Any], ctx: Context) -> Fitted:
    """``subject`` as the honest consumer sends it: the fit of every row judging ``kind``."""
    return fit(subject, check(kind, subject, ctx))


def policy_keys() -> list[str]:
    """Every key of ``Consumer spec.policy`` (:mod:`kube_offload.provider_policy`): a rule
    book without a row for one of them is incomplete (tests/unit/kube_offload/test_rule_book.py)."""
    keys = [f"{section}.{name}" for section, (_attr, fields) in pp.SCHEMA.items() for name in fields]
    return [*keys, pp.QUOTA_MODE_KEY, pp.CUSTOM_RESOURCES_KEY]
