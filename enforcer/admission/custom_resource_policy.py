"""Whether a consumer may write a custom resource object into its twin namespace (pure).

A custom resource is an object the consumer writes: the provider's trust rules apply as
to any other. ``Consumer.spec.policy.customResources`` grants kinds and, per kind, the
top-level ``spec`` fields the consumer may set (kube_offload/provider_policy.py); a kind
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
from enforcer.consumers.quota import twin_owner

# What a consumer's custom resource object may hold at the top level.
ALLOWED_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec")
_WHERE = f"Consumer {pp.POLICY}.{pp.CUSTOM_RESOURCES_KEY}"


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
    kind = f"{request.resource or request.kind.kind}.{request.kind.group}"
    try:
        policy = pp.parse_policy((consumer.get("spec") or {}).get("policy"))
    except pp.ProviderPolicyError as exc:
        return _forbidden(f"consumer {owner}'s policy does not parse ({exc}): no custom resource is granted until the provider fixes it")
    grant = policy.custom_resource(request.kind.group, request.resource)
    if grant is None:
        granted = ", ".join(g.name for g in policy.custom_resources) or "none"
        return _forbidden(f"{request.kind.kind} ({kind}) is not granted to consumer {owner} ({_WHERE}: {granted})")
    if request.sub_resource:
        return _forbidden(f"{request.kind.kind} {request.name}: the {request.sub_resource} subresource is the provider's to write; "
                          "the consumer reads it")
    # What this write changes is judged, not what the object holds: on an update the API
    # server hands over the whole object, with the status the provider's controller wrote
    # and spec fields another manager set, which the consumer's write leaves as they are.
    obj = request.object or {}
    old = (request.old_object or {}) if request.operation == "UPDATE" else {}
    extra = sorted(k for k in set(obj) | set(old) if k not in ALLOWED_TOP_LEVEL and obj.get(k) != old.get(k))
    if extra:
        return _forbidden(f"{request.kind.kind} {request.name}: {', '.join(extra)} may not be written by the consumer "
                          f"(only {', '.join(ALLOWED_TOP_LEVEL)}; status is the provider's)")
    spec, old_spec = obj.get("spec"), old.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        return _forbidden(f"{request.kind.kind} {request.name}: spec must be an object")
    spec, old_spec = spec or {}, old_spec if isinstance(old_spec, Mapping) else {}
    refused = sorted(
        name for name in set(spec) | set(old_spec) if name not in grant.spec_fields and spec.get(name) != old_spec.get(name)
    )
    if refused:
        fields = ", ".join(f"spec.{name}" for name in refused)
        return _forbidden(f"{request.kind.kind} {request.name}: {fields} not granted to consumer {owner} "
                          f"({_WHERE}[{grant.name}].specFields: {', '.join(grant.spec_fields) or 'none'})")
    return Decision.allow()
