"""Which twin namespaces a consumer may have (pure): a name that is a namespace name and
not reserved, one in the provider's plan for that consumer (Consumer
``spec.policy.twinNamespaces``: DefaultName twins end in ``-<consumer id>``, other names
only where granted, never another consumer's), and no more of them than the plan's
maximum. Every refusal names the policy key a provider would change.
:mod:`enforcer.consumers.twin_plan` asks these before anything is created.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.consumers import ConsumerLookup, consumer_name
from kube_offload.provider_policy import (
    ALWAYS_RESERVED_NAMESPACES,
    POLICY,
    ProviderPolicyError,
    TwinNamespacePolicy,
    name_matches,
    parse_policy,
)

# The policy keys a refusal names (Consumer spec.policy.twinNamespaces.*).
SAME_NAMES_KEY = f"{POLICY}.twinNamespaces.sameNames"
RESERVED_KEY = f"{POLICY}.twinNamespaces.reserved"
MAX_COUNT_KEY = f"{POLICY}.twinNamespaces.maxCount"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes' own namespaces exist anyway (and would be refused as not ours); tenant
# namespaces may not exist *yet*, and a consumer must not grab a future consumer's.
_RESERVED_NAMES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
_RESERVED_PREFIXES = (c.TENANT_NAMESPACE_PREFIX,)


def request_key(request: Mapping[str, Any]) -> str:
    metadata = request.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def name_problem(name: str) -> str:
    """Why ``name`` cannot be a twin namespace, or "" when it can."""
    if len(name) > 63 or not _DNS_LABEL.match(name):
        return (
            f"metadata.name {name!r} is not a valid namespace name: at most 63 lower-case letters, "
            "digits and '-', starting and ending with a letter or digit"
        )
    if name in _RESERVED_NAMES or name.startswith(_RESERVED_PREFIXES):
        return f"metadata.name {name!r} is reserved on this provider; ask for another namespace name"
    return ""


def plan_name_problem(
    name: str,
    consumer_id: str,
    policy: TwinNamespacePolicy,
    *,
    release_namespace: str = "",
    consumers: ConsumerLookup = lambda _name: None,
) -> str:
    """Why the provider's plan has no room for twin ``name`` of ``consumer_id``, or "".

    A twin is either a DefaultName twin, ending in ``-<consumer id>`` (what the virtual
    kubelet asks for by default: vkubelet/twins/naming.py), or a name the provider grants as it
    is (EnforceSameName) in ``sameNames``; never a reserved name (``default``, ``kube-*``,
    ``kube-offload-*``, the enforcer's own namespace, and ``reserved``), whatever is
    granted; and never a DefaultName twin of another consumer whose id ends in this one's
    (consumer ``b`` may not take ``web-a-b``, which is consumer ``a-b``'s twin of ``web``)."""
    if name_matches(name, ALWAYS_RESERVED_NAMESPACES) or (release_namespace and name == release_namespace):
        return (
            f"metadata.name {name!r} is reserved by the provider for itself (default, kube-*, kube-offload-* and "
            "the enforcer's namespace are never given to a consumer); ask for another namespace name"
        )
    if name_matches(name, policy.reserved):
        return (
            f"metadata.name {name!r} is reserved by the provider (Consumer {RESERVED_KEY}); "
            "ask for another namespace name"
        )
    suffix = f"-{consumer_id}"
    if name.endswith(suffix) and len(name) > len(suffix):
        for index, char in enumerate(name[: -len(suffix)]):
            other = name[index + 1:]
            if char == "-" and other != consumer_id and consumers(other) is not None:
                return (
                    f"metadata.name {name!r} ends in \"-{other}\": it belongs to the plan of consumer {other!r}; "
                    f"ask for a name ending in \"{suffix}\" that is not another consumer's"
                )
        return ""
    if name_matches(name, policy.same_names):
        return ""
    return (
        f"metadata.name {name!r}: a twin namespace of consumer {consumer_id!r} must end in \"{suffix}\" (the "
        f"DefaultName mapping); other names (EnforceSameName) only where the provider grants them in Consumer "
        f"{SAME_NAMES_KEY}"
        + (f" (granted: {', '.join(policy.same_names)})" if policy.same_names else " (none granted)")
    )


def count_problem(
    request: Mapping[str, Any],
    siblings: Iterable[Mapping[str, Any]],
    *,
    max_count: int,
    eligible: Callable[[Mapping[str, Any]], bool],
    served: Callable[[Mapping[str, Any]], bool],
) -> str:
    """Why ``request`` is over its consumer's maximum of twin namespaces, or "".

    ``siblings``: every TwinNamespace of the consumer (``request`` among them, or not yet);
    ``eligible``: whether one passes the name rules (only those compete); ``served``:
    whether its namespace exists already (those keep their place however the maximum
    changes: a twin in use is never refused). The rest are ranked by creationTimestamp,
    then namespace/name: the first ``max_count`` are served. The ranking depends only on
    the requests, so two reconciles running at once agree on who gets the last place,
    and a request being deleted keeps its place until its namespace is gone."""
    key = request_key(request)
    if served(request):
        return ""
    ranked = {request_key(r): r for r in siblings if eligible(r)}
    ranked[key] = request
    order = sorted(
        ranked.values(),
        key=lambda r: (not served(r), str((r.get("metadata") or {}).get("creationTimestamp") or "~"), request_key(r)),
    )
    position = [request_key(r) for r in order].index(key)
    if position < max_count:
        return ""
    return (
        f"consumer has reached its maximum of {max_count} twin namespaces (Consumer {MAX_COUNT_KEY}); "
        "delete a TwinNamespace it no longer needs, or ask the provider to raise the maximum"
    )


def consumer_twin_policy(consumer: Mapping[str, Any]) -> tuple[TwinNamespacePolicy | None, str]:
    """The consumer's twin namespace policy, or None and why (the provider's mistake)."""
    try:
        return parse_policy((consumer.get("spec") or {}).get("policy")).twin_namespaces, ""
    except ProviderPolicyError as exc:
        return None, f"Consumer {consumer_name(consumer)} has a policy that does not parse ({exc}); the provider must fix it"
