"""How a provider decides a consumer's resource slices (pure; docs/slices.md "How a slice is
decided").

An OffloadSlice asks for resources from one of the Consumer's pools (kube_offload/pools.py).
:func:`decide_slices` decides every slice of one consumer together, oldest first
(creationTimestamp; within the same second, by ``status.firstDecided``, the microsecond
the enforcer first decided it, an undecided slice last; then by name), so a slice created
later never shrinks one decided before it: each slice gets, per resource it asks for, the
least of

* what it asks,
* what the Consumer's ``spec.quota`` leaves after the consumer's earlier slices (every
  pool): the quota's key for that resource's requests and, when the quota counts limits,
  its ``limits.<resource>`` key too (a pod's requests never exceed its limits),
* what the pool's Ready, schedulable nodes' allocatable leaves after this consumer's
  earlier slices of the same pool.

All of it: Accepted; some: PartiallyAccepted, the message naming each cut resource, what
was asked, what was accepted and the bound that cut it; nothing: Refused. Whole units for
every resource but cpu (a node's pods or GPUs are never fractional).

Why ``firstDecided``: creationTimestamp has whole seconds, so two slices created within one
second tie. Ordering the tie by anything the decision itself changes (such as "holds an
acceptance already") is not a fixed point: once both hold one, the next pass orders them by
name and the later slice takes the earlier one's share. ``firstDecided`` is written once,
by the enforcer alone (the consumer cannot write the status subresource), and carried over
on every later decision, so the order it gives never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.consumer_quota import LIMITS_PREFIX, consumer_quota, is_object_quota_key
from kube_offload.nodes import node_is_ready
from kube_offload.pools import Pool, PoolError, parse_pools, pool_covers
from kube_offload.views import OffloadSliceView
from kube_offload.resources import (
    FRACTIONAL_RESOURCES,
    MILLI,
    QuantityError,
    ResourceList,
    format_quantity,
    format_resource_list,
    node_allocatable,
    parse_quantity,
    resource_sort_key,
    uses_binary_format,
)

# status.reason values: one word for why the phase is what it is.
REASON_ACCEPTED = "Accepted"
REASON_QUOTA = "QuotaExceeded"  # cut (or refused) by the Consumer's spec.quota
REASON_POOL = "PoolExhausted"  # cut (or refused) by what the pool's nodes have left
REASON_UNKNOWN_POOL = "UnknownPool"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_INVALID_CONSUMER = "InvalidConsumer"  # the provider's mistake: Pending until fixed
REASON_NO_CONSUMER = "NoConsumer"

# Keys a slice may not ask for: quota spellings and object counts are not node resources.
_NOT_RESOURCES = (LIMITS_PREFIX, "requests.", "count/")


@dataclass(frozen=True)
class SliceRequest:
    """One OffloadSlice's spec as read: ``problem`` says why it is unreadable."""

    name: str
    pool: str
    resources: ResourceList
    created: str = ""
    generation: int = 0
    problem: str = ""
    # status.firstDecided (metav1.MicroTime text), "" while never decided.
    first_decided: str = ""

    def order(self) -> tuple[str, bool, str, str]:
        """Oldest first; in the same second, by when first decided, a slice never decided
        after every decided one; then by name (module docstring)."""
        return (self.created, not self.first_decided, self.first_decided, self.name)


@dataclass(frozen=True)
class SliceDecision:
    phase: str
    reason: str
    message: str
    accepted: ResourceList = field(default_factory=dict)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    pool: Pool | None = None


def read_slice(obj: Mapping[str, Any]) -> SliceRequest:
    """The parts of an OffloadSlice the decision uses; a spec the schema should have kept
    out (an unparsable quantity, a quota spelling, a negative amount) becomes ``problem``."""
    view = OffloadSliceView(obj)
    name = view.name
    created = view.created
    generation = int(view.generation or 0)
    first_decided = view.first_decided
    pool = view.pool
    raw = view.resources

    def bad(problem: str) -> SliceRequest:
        return SliceRequest(name, str(pool or ""), {}, created, generation, problem, first_decided)

    if not isinstance(pool, str) or not pool:
        return bad("spec.pool is required: the name of one of the provider's pools (kubectl get consumer -o yaml: spec.pools)")
    if not isinstance(raw, Mapping) or not raw:
        return bad("spec.resources is required: resource name -> quantity, e.g. {cpu: 2, memory: 4Gi, pods: 20}")
    resources: ResourceList = {}
    for key, value in raw.items():
        key = str(key)
        if key.startswith(_NOT_RESOURCES) or is_object_quota_key(key) or key == "count/pods":
            return bad(f"spec.resources[{key}]: not a node resource; name resources as a node's capacity does (cpu, memory, pods, nvidia.com/gpu)")
        try:
            amount = parse_quantity(value)
        except (QuantityError, TypeError) as exc:
            return bad(f"spec.resources[{key}]: {exc}")
        if amount < 0:
            return bad(f"spec.resources[{key}]: {value!r} is negative; ask for 0 or more")
        resources[key] = amount
    return SliceRequest(name, pool, resources, created, generation, first_decided=first_decided)


def _whole(resource: str, amount: int) -> int:
    return amount if resource in FRACTIONAL_RESOURCES else amount // MILLI * MILLI


def quota_bounds(quota: Mapping[str, int]) -> ResourceList:
    """Per node resource, what a Consumer's quota (:func:`consumer_quota` output) allows a
    slice: the lower of its requests key and its ``limits.`` key (requests <= limits)."""
    bounds: ResourceList = {}
    for key, amount in quota.items():
        if is_object_quota_key(key):
            continue
        name = key[len(LIMITS_PREFIX):] if key.startswith(LIMITS_PREFIX) else key
        bounds[name] = min(amount, bounds.get(name, amount))
    return bounds


def pool_allocatable(pool: Pool, nodes: Iterable[Mapping[str, Any]]) -> ResourceList:
    """The sum of the allocatable of the pool's Ready, schedulable nodes (a cordoned node
    takes no new pods, so it offers nothing to a new slice)."""
    total: ResourceList = {}
    for node in nodes:
        if not pool_covers(pool, node) or not node_is_ready(dict(node)) or (node.get("spec") or {}).get("unschedulable"):
            continue
        try:
            allocatable = node_allocatable(node)
        except QuantityError:
            continue  # a node reporting garbage offers nothing
        for name, amount in allocatable.items():
            total[name] = total.get(name, 0) + amount
    return total


def _fmt(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=uses_binary_format(resource))


def decide_slices(
    slices: Iterable[Mapping[str, Any]], consumer: Mapping[str, Any] | None, nodes: Iterable[Mapping[str, Any]]
) -> dict[str, SliceDecision]:
    """Every slice of one consumer (its OffloadSlices, from its tenant namespace), decided
    against the Consumer and the provider's nodes; by slice name."""
    requests = sorted((read_slice(s) for s in slices), key=SliceRequest.order)
    if consumer is None:
        return {r.name: SliceDecision(c.SLICE_PHASE_PENDING, REASON_NO_CONSUMER,
                                      "no Consumer object for this tenant: the provider has not admitted this consumer") for r in requests}
    spec = consumer.get("spec") or {}
    try:
        pools = parse_pools(spec)
        bounds = quota_bounds(consumer_quota(spec))
    except (PoolError, QuantityError) as exc:
        message = f"Consumer {consumer_name(consumer)} cannot be read ({exc}): the provider must fix it; the slice waits"
        return {r.name: SliceDecision(c.SLICE_PHASE_PENDING, REASON_INVALID_CONSUMER, message) for r in requests}
    node_list = list(nodes)
    pool_free = {name: pool_allocatable(pool, node_list) for name, pool in pools.items()}
    quota_used: ResourceList = {}
    decisions: dict[str, SliceDecision] = {}
    for request in requests:
        if request.problem:
            decisions[request.name] = SliceDecision(c.SLICE_PHASE_REFUSED, REASON_INVALID_SPEC, request.problem)
            continue
        pool = pools.get(request.pool)
        if pool is None:
            known = ", ".join(pools) or "none"
            decisions[request.name] = SliceDecision(
                c.SLICE_PHASE_REFUSED, REASON_UNKNOWN_POOL,
                f"spec.pool: no pool {request.pool!r} for this consumer (pools: {known}); name one of the provider's pools",
            )
            continue
        free = pool_free[pool.name]
        accepted: ResourceList = {}
        cuts: list[str] = []
        by_quota = False
        for resource in sorted(request.resources, key=resource_sort_key):
            asked = request.resources[resource]
            amount, bound = asked, ""
            if resource in bounds:
                left = max(0, bounds[resource] - quota_used.get(resource, 0))
                if left < amount:
                    amount, bound = left, f"quota {resource} leaves {_fmt(resource, left)} (Consumer spec.quota)"
            pool_left = max(0, free.get(resource, 0))
            if pool_left < amount:
                amount, bound = pool_left, f"pool {pool.name} leaves {_fmt(resource, pool_left)} (its Ready nodes' allocatable)"
            amount = _whole(resource, amount)
            if amount < asked:
                by_quota = by_quota or bound.startswith("quota")
                cuts.append(f"{resource}: asked {_fmt(resource, asked)}, accepted {_fmt(resource, amount)}: {bound}")
            accepted[resource] = amount
        if not cuts:
            phase, reason, message = c.SLICE_PHASE_ACCEPTED, REASON_ACCEPTED, f"accepted in full from pool {pool.name}"
        else:
            reason = REASON_QUOTA if by_quota else REASON_POOL
            phase = c.SLICE_PHASE_PARTIAL if any(accepted.values()) else c.SLICE_PHASE_REFUSED
            message = "; ".join(cuts)
        if phase == c.SLICE_PHASE_REFUSED:
            decisions[request.name] = SliceDecision(phase, reason, f"nothing left to accept: {message}", pool=pool)
            continue
        for resource, amount in accepted.items():
            quota_used[resource] = quota_used.get(resource, 0) + amount
            free[resource] = free.get(resource, 0) - amount
        decisions[request.name] = SliceDecision(phase, reason, message, accepted, dict(pool.node_labels), pool)
    return decisions


def consumer_name(consumer: Mapping[str, Any]) -> str:
    return str((consumer.get("metadata") or {}).get("name") or "")


def first_decided_of(obj: Mapping[str, Any]) -> str:
    """An OffloadSlice's ``status.firstDecided``, "" when never decided."""
    return OffloadSliceView(obj).first_decided


def slice_status(decision: SliceDecision, generation: int, first_decided: str) -> dict[str, Any]:
    """The OffloadSlice ``status`` for ``decision`` (compared with the stored one: the loop
    writes only on change). ``first_decided``: the stored ``status.firstDecided`` when there
    is one, else now (metav1.MicroTime): it orders slices created in the same second."""
    status: dict[str, Any] = {
        "phase": decision.phase,
        "reason": decision.reason,
        "message": decision.message,
        "accepted": format_resource_list(decision.accepted),
        "nodeLabels": dict(decision.node_labels),
        "observedGeneration": generation,
        "firstDecided": first_decided,
    }
    return status


def accepted_of(obj: Mapping[str, Any]) -> ResourceList | None:
    """An OffloadSlice's ``status.accepted`` in milli-units when its phase lets pods in
    (Accepted or PartiallyAccepted), else None. Raises QuantityError on a status the
    enforcer did not write."""
    view = OffloadSliceView(obj)
    if view.phase not in (c.SLICE_PHASE_ACCEPTED, c.SLICE_PHASE_PARTIAL):
        return None
    accepted: ResourceList = {}
    for name, value in (view.accepted or {}).items():
        accepted[str(name)] = parse_quantity(value)
    return accepted
