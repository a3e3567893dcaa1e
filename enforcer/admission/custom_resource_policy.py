"""Whether a consumer may write a custom resource object into its twin namespace (pure).

A custom resource is an object the consumer writes: the provider's trust rules apply as
to any other. ``Consumer.spec.policy.customResources`` grants kinds and, per kind, the
top-level ``spec`` fields the consumer may set (kube_offload/provider_policy.py; the rule is
the rule book's, :func:`kube_offload.tenant_rules.custom_resources`, which the consumer's
virtual kubelet fits with too); a kind
no grant names is refused, and so is a write that sets or changes a spec field no grant
names or anything besides apiVersion, kind, metadata and spec (``status`` belongs to the
provider's controllers: the consumer reads it, never writes it, whether the kind has a
status subresource or not). What the write leaves as it was (status the provider wrote,
a spec field the provider's controller set) is not the consumer's doing and passes.

Only the twin's owner is judged here: the provider's own controllers and admins write
what they like (they are the ones the grant protects). The decision needs the request,
the twin namespace and the Consumer, all given: no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import provider_policy as pp
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.consumers import service_account_username
from kube_offload.policy_rules import Context, Kind, Malformed
from kube_offload.rule_book import check
from enforcer.consumers.quota import twin_owner


def _forbidden(message: str) -> Decision:
    return Decision.deny(403, "Forbidden", message)


def decide(request: AdmissionRequest, *, namespace: Mapping[str, Any] | None, consumer: Mapping[str, Any] | None) -> Decision:
    """Allow or refuse (403, naming the kind or field and the policy key) one CREATE or
    UPDATE of a custom resource object in ``namespace`` (the request's namespace as the
    enforcer's cache has it) by the consumer that owns it (``consumer``: its Consumer)."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow()
    owner = twin_owner(namespace)
    if owner is None:
        return Decision.allow()  # not a twin: no consumer writes there by grant
    if consumer is None:
        return _forbidden(f"namespace {request.namespace} is a twin of consumer {owner}, whose Consumer is gone: nothing is granted")
    if request.user_info.username != service_account_username(consumer):
        return Decision.allow()  # the provider's own controllers and admins
    try:
        policy = pp.parse_policy((consumer.get("spec") or {}).get("policy"))
    except pp.ProviderPolicyError as exc:
        return _forbidden(f"consumer {owner}'s policy does not parse ({exc}): no custom resource is granted until the provider fixes it")
    if request.sub_resource and policy.custom_resource(request.kind.group, request.resource) is not None:
        return _forbidden(f"{request.kind.kind} {request.name}: the {request.sub_resource} subresource is the provider's to write; "
                          "the consumer reads it")
    ctx = Context(policy=policy, consumer_id=owner, group=request.kind.group, resource=request.resource,
                  old_object=request.old_object if request.operation == "UPDATE" else None)
    try:
        violations = check(Kind.CUSTOM_RESOURCE, request.object or {}, ctx)
    except Malformed as exc:
        return _forbidden(f"{request.kind.kind} {request.name}: {exc}")
    if not violations:
        return Decision.allow()
    # A kind not granted is said alone; a field's refusal names the object it is of.
    lines = [v.problem if v.field == "kind" else f"{request.kind.kind} {request.name}: {v.field} {v.problem}" for v in violations]
    return _forbidden("; ".join(lines))
