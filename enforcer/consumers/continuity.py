"""Service continuity on the provider (pure): whether a consumer is reachable, and what
becomes of the endpoints it reflected here.

A consumer's virtual kubelet reflects the EndpointSlices of its local Services into its
twin namespaces (vkubelet/reflection/endpointslices.py): their endpoints are the
consumer's own pods, reached across the clusters. When the consumer is cut off, nothing
on the provider knows those pods stopped answering, and provider-side clients (offloaded
pods calling a Service that has consumer-side backends) keep sending traffic into the
void. The provider has no credentials in the consumer cluster, so the only sign it can
read is the consumer's heartbeat: a Lease its vkubelet renews in its tenant namespace
(:data:`kube_offload.constants.CONSUMER_HEARTBEAT_LEASE`).

* **Reachable**: the Lease was renewed within the grace. Endpoints the enforcer held
  not ready are restored, exactly to the conditions it overwrote.
* **Unreachable**: the Lease is older than the grace. Each reflected endpoint that is
  ready or serving is turned ``ready: false, serving: false`` (``serving`` too: kube-proxy
  falls back to serving terminating endpoints when none is ready); what it overwrote is
  kept in the slice's annotation :data:`~kube_offload.constants.ANNOTATION_HELD_NOT_READY`,
  keyed by the endpoint's addresses, so an endpoint the consumer itself marked not ready
  stays so after the return, and a slice the consumer rewrote meanwhile (its reflector
  writes the local truth over ours) is not "restored" to stale values.
* **Gone** (its Consumer deleted): every write into its twin namespaces is refused by the
  provider's admission policy (the Consumer is its parameter; parameterNotFoundAction
  Deny), so a held mark could not even be written: its reflected slices are **deleted**.
  A consumer admitted again recreates them (its reflector re-creates missing copies).
* **Unknown** (no Lease at all: a vkubelet from before the heartbeat, or one never
  started): left alone. Guessing a consumer dead from an absence it never promised would
  cut the traffic of every consumer that has not upgraded.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.times import parse_time_or_none

REACHABLE = "Reachable"
UNREACHABLE = "Unreachable"
GONE = "Gone"
UNKNOWN = "Unknown"

# The endpoint conditions a lost consumer can no longer vouch for.
HELD_CONDITIONS = ("ready", "serving")


@dataclass(frozen=True)
class Reachability:
    state: str
    message: str
    # Seconds until a reachable consumer turns unreachable if its Lease is not renewed
    # (None: no such deadline): the loop wakes then, since no event will.
    expires_in: float | None = None

    @property
    def hold(self) -> bool:
        return self.state == UNREACHABLE

    @property
    def release(self) -> bool:
        return self.state in (REACHABLE, UNKNOWN)


def reachability(
    consumer_id: str, consumer: Mapping[str, Any] | None, lease: Mapping[str, Any] | None, now: datetime, grace_seconds: float
) -> Reachability:
    """The state of ``consumer_id`` from its Consumer object and its heartbeat Lease (the
    one in its tenant namespace, or None)."""
    if consumer is None:
        return Reachability(GONE, f"consumer {consumer_id} has no Consumer object here any more")
    if lease is None:
        return Reachability(UNKNOWN, f"consumer {consumer_id} publishes no heartbeat Lease {c.CONSUMER_HEARTBEAT_LEASE}")
    spec = lease.get("spec") or {}
    renewed = parse_time_or_none(spec.get("renewTime")) or parse_time_or_none(spec.get("acquireTime"))
    if renewed is None:
        return Reachability(UNKNOWN, f"the heartbeat Lease of consumer {consumer_id} has no renewTime yet")
    age = (now - renewed).total_seconds()
    if age > grace_seconds:
        return Reachability(
            UNREACHABLE,
            f"consumer {consumer_id} has not renewed its heartbeat Lease {c.CONSUMER_HEARTBEAT_LEASE} for {age:.0f}s "
            f"(grace {grace_seconds:g}s): its endpoints here are held not ready",
        )
    return Reachability(REACHABLE, f"consumer {consumer_id} renewed its heartbeat {max(age, 0.0):.0f}s ago",
                        expires_in=max(0.0, grace_seconds - age))


def reflected_owner(endpoint_slice: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> str | None:
    """The consumer whose reflector wrote ``endpoint_slice``, or None when it is not a
    reflected slice in a twin namespace of that same consumer. Both reflection labels are
    needed: the provider's EndpointSlice controller copies a Service's labels (the origin
    label among them) onto the slices it writes for the provider's own pods, which must
    never be touched."""
    labels = (endpoint_slice.get("metadata") or {}).get("labels") or {}
    origin = labels.get(c.LABEL_ORIGIN_CLUSTER_ID)
    if not origin or labels.get(c.LABEL_REFLECTOR) != c.REFLECTOR_ENDPOINTSLICES:
        return None
    ns_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    if ns_labels.get(c.LABEL_MANAGED_BY) != c.MANAGED_BY_ENFORCER or ns_labels.get(c.LABEL_ORIGIN_CLUSTER_ID) != origin:
        return None
    return str(origin)


def endpoint_key(endpoint: Mapping[str, Any]) -> str:
    """An endpoint's identity across rewrites of its slice: its addresses."""
    return ",".join(str(a) for a in endpoint.get("addresses") or [])


def held(endpoint_slice: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """What the enforcer overwrote on this slice (None: it holds nothing here; a value
    it cannot read counts as nothing to restore, and is dropped at the next release)."""
    text = ((endpoint_slice.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_HELD_NOT_READY)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, dict)}


def hold_patch(endpoint_slice: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that turns every ready or serving endpoint of the slice not ready,
    recording what it overwrote; None when nothing is left to turn (already held, or no
    endpoint ready). ``endpoints`` is an atomic list: the patch carries it whole, and is
    sent with the resourceVersion read, so a concurrent rewrite is never lost."""
    endpoints = copy.deepcopy(list(endpoint_slice.get("endpoints") or []))
    record = dict(held(endpoint_slice) or {})
    changed = False
    for endpoint in endpoints:
        conditions = endpoint.setdefault("conditions", {})
        if all(conditions.get(name) is False for name in HELD_CONDITIONS):
            continue
        key = endpoint_key(endpoint)
        record.setdefault(key, {name: conditions.get(name) for name in HELD_CONDITIONS})
        for name in HELD_CONDITIONS:
            conditions[name] = False
        changed = True
    if not changed:
        return None
    return {
        "metadata": {"annotations": {c.ANNOTATION_HELD_NOT_READY: json.dumps(record, sort_keys=True, separators=(",", ":"))}},
        "endpoints": endpoints,
    }


def release_patch(endpoint_slice: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that gives back what :func:`hold_patch` took, on the endpoints that
    are still as it left them (not ready, not serving); None when the slice holds nothing."""
    record = held(endpoint_slice)
    if record is None:
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {c.ANNOTATION_HELD_NOT_READY: None}}}
    endpoints = copy.deepcopy(list(endpoint_slice.get("endpoints") or []))
    restored = False
    for endpoint in endpoints:
        before = record.get(endpoint_key(endpoint))
        conditions = endpoint.get("conditions") or {}
        if before is None or not all(conditions.get(name) is False for name in HELD_CONDITIONS):
            continue
        for name in HELD_CONDITIONS:
            if before.get(name) is None:
                conditions.pop(name, None)
            else:
                conditions[name] = bool(before[name])
        endpoint["conditions"] = conditions
        restored = True
    if restored:
        patch["endpoints"] = endpoints
    return patch


def held_endpoints(endpoint_slice: Mapping[str, Any]) -> int:
    """How many endpoints of the slice the enforcer holds not ready now (for the metric)."""
    record = held(endpoint_slice)
    if not record:
        return 0
    count = 0
    for endpoint in endpoint_slice.get("endpoints") or []:
        conditions = endpoint.get("conditions") or {}
        if endpoint_key(endpoint) in record and all(conditions.get(name) is False for name in HELD_CONDITIONS):
            count += 1
    return count
