"""The provider policy's rules on what a consumer asks for in its tenant namespace and writes
of its own kinds, each one predicate (pure; rows of :mod:`kube_offload.rule_book`).

* TokenRequest (``serviceaccounts/token`` of its own identity, enforcer/admission/token_policy.py):
  ``tokens.maxExpirationSeconds`` bounds how long a token lives (the consumer asks for at
  most that), ``tokens.audiences`` whom it is for besides the provider's API server.
* TwinNamespace requests (the enforcer's twin loop, enforcer/consumers/twin_names.py): a
  DefaultName twin ends in ``-<consumer id>`` and is no other consumer's; any other name only
  where ``twinNamespaces.sameNames`` grants it; never a reserved name (``twinNamespaces.reserved``
  and the always-reserved). The consumer asks and reads the answer in the request's status.
* How many it keeps (``twinNamespaces.maxCount`` twins served, ``twinNamespaces.maxRequests``
  requests and ``slices.maxCount`` OffloadSlices held, ``twinNamespaces.maxObjects`` objects of
  each kind in one twin): a :data:`~kube_offload.policy_rules.Kind.TENANT_COUNT` subject,
  ``{"counted": <key>, "held": n, "kind": <what>}``: refused once ``held`` reaches the bound.
* Custom resources (``customResources``, enforcer/admission/custom_resource_policy.py): a
  kind not granted, or a spec field not granted, is refused; the consumer does not send it.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload import policy_matching as pm
from kube_offload.policy_rules import Context, Edit, Malformed, Violation, granted_list

# --- tokens -----------------------------------------------------------------------------------------
def token_expiration(request: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = request.get("spec") or {}
    expiration = spec.get("expirationSeconds")
    most = ctx.policy.tokens.max_expiration_seconds
    if isinstance(expiration, int) and not isinstance(expiration, bool) and expiration <= most:
        return []
    return [Violation(
        "tokens.maxExpirationSeconds", "spec.expirationSeconds",
        f"{expiration} s is longer than {ctx.who} may ask for its token ({most} s, Consumer "
        f"{pp.POLICY}.tokens.maxExpirationSeconds)", "ask for at most that",
        (Edit(("spec", "expirationSeconds"), most),), f"lowered to {most}")]


def token_audiences(request: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = request.get("spec") or {}
    granted = ctx.policy.tokens.audiences
    allowed = set(ctx.api_audiences) | set(granted)
    audiences = spec.get("audiences") or []
    foreign = [str(a) for a in audiences if str(a) not in allowed] if isinstance(audiences, list) else [str(audiences)]
    if not foreign:
        return []
    return [Violation(
        "tokens.audiences", "spec.audiences",
        f"{', '.join(repr(a) for a in foreign)} not granted to {ctx.who}: its tokens are for this API server (ask for no "
        f"audience) or an audience in Consumer {pp.POLICY}.tokens.audiences (granted: {granted_list(granted)})")]


# --- twin namespace names (a valid namespace name, not a tenant's: enforcer/consumers/twin_names.py) ----

def default_name_owner(name: str, consumer_id: str, other_consumer: Any) -> str | None:
    """The other consumer whose DefaultName twin ``name`` is, though it ends in
    ``-<consumer_id>`` too (``web-a-b`` is consumer ``a-b``'s twin of ``web`` as much as
    consumer ``b``'s of ``web-a``), or None."""
    suffix = f"-{consumer_id}"
    for index, char in enumerate(name[: -len(suffix)]):
        other = name[index + 1:]
        if char == "-" and other != consumer_id and other_consumer(other):
            return other
    return None


def twin_reserved(request: Mapping[str, Any], ctx: Context) -> list[Violation]:
    name = str((request.get("metadata") or {}).get("name") or "")
    field = "metadata.name"
    if pm.name_matches(name, pp.ALWAYS_RESERVED_NAMESPACES) or (ctx.release_namespace and name == ctx.release_namespace):
        return [Violation(
            "", field,
            f"{name!r} is reserved by the provider for itself (default, kube-*, kube-offload-* and the enforcer's "
            "namespace are never given to a consumer)", "ask for another namespace name")]
    if pm.name_matches(name, ctx.policy.twin_namespaces.reserved):
        return [Violation("twinNamespaces.reserved", field,
                          f"{name!r} is reserved by the provider (Consumer {pp.POLICY}.twinNamespaces.reserved)",
                          "ask for another namespace name")]
    return []


def twin_same_names(request: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """A DefaultName twin ends in ``-<consumer id>`` and is no other consumer's; any other
    name only where the provider grants it (EnforceSameName)."""
    name = str((request.get("metadata") or {}).get("name") or "")
    field = "metadata.name"
    if pm.name_matches(name, pp.ALWAYS_RESERVED_NAMESPACES):
        return []  # twin_reserved's
    suffix = f"-{ctx.consumer_id}"
    if name.endswith(suffix) and len(name) > len(suffix):
        # A consumer admitted after this one whose id clashes with it gets no twin at all
        # (consumer_id_clash): the name stays this one's.
        other = default_name_owner(name, ctx.consumer_id,
                                   lambda candidate: ctx.other_consumer(candidate) and candidate not in ctx.newer_consumers)
        if other is None:
            return []
        return [Violation(
            "", field,
            f"{name!r} ends in \"-{other}\": it belongs to the plan of consumer {other!r}",
            f"ask for a name ending in \"{suffix}\" that is not another consumer's")]
    same = ctx.policy.twin_namespaces.same_names
    if pm.name_matches(name, same):
        return []
    return [Violation(
        "twinNamespaces.sameNames", field,
        f"{name!r}: a twin namespace of consumer {ctx.consumer_id!r} must end in \"{suffix}\" (the DefaultName mapping); "
        f"other names (EnforceSameName) only where the provider grants them in Consumer {pp.POLICY}.twinNamespaces.sameNames"
        + (f" (granted: {', '.join(same)})" if same else " (none granted)"), "ask for a DefaultName twin")]


def ids_clash(one: str, other: str) -> bool:
    """Whether two consumers' DefaultName twins can have the same name: one id ends in
    ``-<the other>`` (``web-a-b`` is consumer ``a-b``'s twin of ``web`` and consumer ``b``'s
    of ``web-a``)."""
    return one != other and (one.endswith(f"-{other}") or other.endswith(f"-{one}"))


def consumer_id_clash(request: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """No twin for a consumer whose id clashes with one admitted before it: the older one
    may already hold (or ask for, at any time) the names the newer one's DefaultName twins
    would need, so the newer would find its twins taken. Refusing only a name at the moment
    the other consumer exists protects no consumer admitted later; refusing the clash
    itself does (docs/security.md "Twin namespaces are the provider's")."""
    older = next((other for other in ctx.older_consumers if ids_clash(ctx.consumer_id, other)), None)
    if older is None:
        return []
    return [Violation(
        "", "metadata.namespace",
        f"consumer {ctx.consumer_id!r} cannot have twin namespaces here: its id and that of consumer {older!r}, admitted "
        f"before it, end one in the other (\"-{min(older, ctx.consumer_id, key=len)}\"), so their DefaultName twins "
        f"(<namespace>-<id>) can take each other's names; never granted",
        "the provider admits only one of them: peer the other under a cluster id that is not a dash-suffix of "
        "another consumer's")]


# --- how many -----------------------------------------------------------------------------------------------
# counted key -> (what, the bound's reader). maxObjects is per kind: its subject names it.
def count_bound(counted: str, policy: pp.ProviderPolicy, kind: str = "") -> int | None:
    """The bound ``counted`` (a key: ``twinNamespaces.maxCount`` ...) puts on what is held, or
    None when that kind has none."""
    if counted == "twinNamespaces.maxCount":
        return policy.twin_namespaces.max_count
    if counted == "twinNamespaces.maxRequests":
        return policy.twin_namespaces.max_requests
    if counted == "slices.maxCount":
        return policy.slices.max_count
    if counted == "twinNamespaces.maxObjects":
        return policy.twin_namespaces.max_objects.get(kind)
    raise ValueError(f"not a counted key: {counted}")


_COUNTED = {
    "twinNamespaces.maxCount": "twin namespaces",
    "twinNamespaces.maxRequests": f"{c.TWIN_NAMESPACE_KIND}s",
    "slices.maxCount": f"{c.SLICE_KIND}s",
}


def held_too_many(counted: str) -> Any:
    """The rule of one counted key: refused once what the consumer holds reaches the bound."""
    def check(subject: Mapping[str, Any], ctx: Context) -> list[Violation]:
        if subject.get("counted") != counted:
            return []
        kind = str(subject.get("kind") or "")
        held = int(subject.get("held") or 0)
        most = count_bound(counted, ctx.policy, kind)
        if most is None or held < most:
            return []
        what = _COUNTED.get(counted) or kind
        where = f' in namespace "{ctx.namespace}"' if ctx.namespace else ""
        return [Violation(
            counted, counted.split(".", 1)[0],
            f"{ctx.who} holds {held} {what}{where}, the most it may (Consumer {pp.POLICY}.{counted}"
            f"{f'[{kind}]' if counted == 'twinNamespaces.maxObjects' else ''}: {most})",
            "delete one it no longer needs, or ask the provider to raise the key")]
    return check


# --- custom resources -------------------------------------------------------------------------------------
ALLOWED_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec")
_CUSTOM = f"Consumer {pp.POLICY}.{pp.CUSTOM_RESOURCES_KEY}"


def custom_resources(obj: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """What this write changes is judged, not what the object holds: on an update the API
    server hands over the whole object, with the status the provider's controller wrote and
    spec fields another manager set, which the consumer's write leaves as they are."""
    kind = str(obj.get("kind") or ctx.resource)
    name = f"{ctx.resource}.{ctx.group}"
    who = f"consumer {ctx.consumer_id}" if ctx.consumer_id else "this consumer"
    grant_ = ctx.policy.custom_resource(ctx.group, ctx.resource)
    if grant_ is None:
        granted = ", ".join(g.name for g in ctx.policy.custom_resources) or "none"
        return [Violation(pp.CUSTOM_RESOURCES_KEY, "kind", f"{kind} ({name}) is not granted to {who} ({_CUSTOM}: {granted})")]
    old = ctx.old_object or {}
    out = []
    extra = sorted(k for k in set(obj) | set(old) if k not in ALLOWED_TOP_LEVEL and obj.get(k) != old.get(k))
    if extra:
        out.append(Violation("", ", ".join(extra), f"may not be written by the consumer (only {', '.join(ALLOWED_TOP_LEVEL)}; "
                                                    "status is the provider's)"))
    spec, old_spec = obj.get("spec"), old.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        raise Malformed("spec must be an object")
    spec, old_spec = spec or {}, old_spec if isinstance(old_spec, Mapping) else {}
    refused = sorted(f for f in set(spec) | set(old_spec) if f not in grant_.spec_fields and spec.get(f) != old_spec.get(f))
    if refused:
        out.append(Violation(
            pp.CUSTOM_RESOURCES_KEY, ", ".join(f"spec.{f}" for f in refused),
            f"not granted to {who} ({_CUSTOM}[{name}].specFields: {', '.join(grant_.spec_fields) or 'none'})"))
    return out
