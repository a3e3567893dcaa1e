"""How many objects a consumer may keep in its tenant namespace (pure).

RBAC lets a consumer's identity create TwinNamespace requests and OffloadSlices in its
tenant namespace (``kube-offload-tenant-<id>``) and says nothing of how many. Each one is
etcd storage and work for the enforcer's per-consumer loops, and a TwinNamespace request
past ``twinNamespaces.maxCount`` is kept (Refused) until a place frees: without a bound a
consumer could fill both. So a CREATE by the consumer's identity is refused once it holds
``twinNamespaces.maxRequests`` requests (default 100) or ``slices.maxCount`` slices
(default 20); what others create there (the provider's admins) is not judged.

Why not a ResourceQuota (``count/twinnamespaces.kube-offload.io``): Kubernetes' quota
controller learns a custom resource only at its next discovery, and counts a quota that
names one it did not know yet only at its next full resync (minutes): until then the API
server refuses *every* create of that kind ("status unknown for quota"), so a freshly
installed provider refused its consumers' first requests for minutes.
"""

from __future__ import annotations

from typing import Any, Mapping

from enforcer.admission.tenant_requests import by_consumer
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.policy_rules import Context, Kind
from kube_offload.rule_book import check

# resource (the plural the request names) -> (kind, the policy key that bounds it: the rule
# book's row, kube_offload.tenant_rules.held_too_many)
LIMITED = {
    c.TWIN_NAMESPACE_PLURAL: (c.TWIN_NAMESPACE_KIND, "twinNamespaces.maxRequests"),
    c.SLICE_PLURAL: (c.SLICE_KIND, "slices.maxCount"),
}


def _forbidden(message: str) -> Decision:
    return Decision.deny(403, "Forbidden", message)


def decide(request: AdmissionRequest, *, namespace: Mapping[str, Any] | None, consumer: Mapping[str, Any] | None,
           held: int) -> Decision:
    """Allow or refuse (403, naming the key) one CREATE of a TwinNamespace or OffloadSlice in
    ``namespace`` when its consumer already holds ``held`` of them there."""
    if request.operation != "CREATE" or request.sub_resource or request.resource not in LIMITED:
        return Decision.allow()
    kind, key = LIMITED[request.resource]
    who = by_consumer(request, namespace, consumer, f"{kind} is taken")
    if who.verdict is not None:
        return who.verdict
    owner, terms = who.owner, who.terms
    assert terms is not None
    ctx = Context(policy=terms.policy, consumer_id=owner or "", namespace=request.namespace)
    violations = check(Kind.TENANT_COUNT, {"counted": key, "held": held}, ctx)
    if not violations:
        return Decision.allow()
    return _forbidden("; ".join(f"{v.problem}; {v.fix}" for v in violations))
