"""TwinNamespace requests as the consumer sees them (pure).

The consumer may not create namespaces in the provider cluster: it asks for each twin
with a ``TwinNamespace`` object in its tenant namespace (``kube-offload-tenant-<local id>``),
named after the namespace it wants, and the provider's enforcer creates that namespace
and reports ``status.phase`` (Pending, Ready, Refused, Terminating) with a message.
A twin is usable - pods, ShadowPods and reflected objects may go there, and the virtual
kubelet watches there - only while the request is ours and Ready (docs/virtual-kubelet.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.times import doubling_delay

API_VERSION = f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}"

# A Refused request is looked at again after this long, doubling up to the cap: the
# provider may fix what it refused for (create the Consumer, free the name) at any time,
# but a consumer must not hammer it meanwhile.
REFUSED_RETRY_FIRST_SECONDS = 10.0
REFUSED_RETRY_MAX_SECONDS = 300.0


def build_request(twin: str, *, tenant_namespace: str, local_namespace: str, local_cluster_id: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {
            "name": twin,
            "namespace": tenant_namespace,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: local_cluster_id},
        },
        "spec": {"localNamespace": local_namespace},
    }


def local_namespace_of(request: Mapping[str, Any]) -> str | None:
    """The consumer namespace a request twins (None: not a well-formed request)."""
    value = (request.get("spec") or {}).get("localNamespace")
    return value if isinstance(value, str) and value else None


def is_ours(request: Mapping[str, Any], local_cluster_id: str) -> bool:
    labels = (request.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id


def phase(request: Mapping[str, Any]) -> str:
    return str((request.get("status") or {}).get("phase") or c.TWIN_PHASE_PENDING)


def message(request: Mapping[str, Any]) -> str:
    return str((request.get("status") or {}).get("message") or "")


def is_deleting(request: Mapping[str, Any]) -> bool:
    return bool((request.get("metadata") or {}).get("deletionTimestamp")) or phase(request) == c.TWIN_PHASE_TERMINATING


def is_usable(request: Mapping[str, Any], local_cluster_id: str) -> bool:
    """Ours, Ready, and not on its way out: the twin namespace exists, is the provider's
    answer to this very request, and our role is bound in it."""
    if not is_ours(request, local_cluster_id) or is_deleting(request):
        return False
    if phase(request) != c.TWIN_PHASE_READY:
        return False
    name = (request.get("metadata") or {}).get("name")
    granted = (request.get("status") or {}).get("namespace")
    return bool(name) and granted in (None, "", name)


@dataclass(frozen=True)
class TwinRequest:
    """A cached TwinNamespace request as the consumer reads it (the functions above, read
    once): whose it is, which local namespace it twins, where the provider's answer stands."""

    ours: bool
    local_namespace: str | None
    deleting: bool
    phase: str
    message: str
    usable: bool

    @classmethod
    def of(cls, request: Mapping[str, Any], local_cluster_id: str) -> TwinRequest:
        return cls(
            ours=is_ours(request, local_cluster_id),
            local_namespace=local_namespace_of(request),
            deleting=is_deleting(request),
            phase=phase(request),
            message=message(request),
            usable=is_usable(request, local_cluster_id),
        )


def usable_twins(requests: Iterable[Mapping[str, Any]], local_cluster_id: str) -> set[str]:
    """The provider namespaces the consumer may use (and watch) now."""
    return {r["metadata"]["name"] for r in requests if is_usable(r, local_cluster_id)}


def refused_retry_delay(attempt: int) -> float:
    """Seconds before the ``attempt``-th (0-based) new look at a Refused request."""
    return doubling_delay(max(0, attempt) + 1, start=REFUSED_RETRY_FIRST_SECONDS, cap=REFUSED_RETRY_MAX_SECONDS)


@dataclass(frozen=True)
class RefusalBackoff:
    """Where the backoff of one refused twin stands."""

    message: str  # the refusal as last told to the user
    attempts: int  # looks taken since it was first seen with this message
    next_at: float  # (monotonic) time of the next look


@dataclass(frozen=True)
class RefusalStep:
    backoff: RefusalBackoff
    tell: bool  # record a Warning Event / log now
    nudge: bool  # ask the provider to look again now
    wait: float  # seconds until the next look


def refusal_step(previous: RefusalBackoff | None, message: str, now: float) -> RefusalStep:
    """One reconcile of a refused twin. A refusal seen for the first time (or with a new
    message) is told at once and looked at again after the first delay; until the next
    look is due, reconciles (our nudge's own update event, the provider's answer, a
    resync) only wait; a due look tells again, nudges the provider and doubles the delay."""
    if previous is None or previous.message != message:
        backoff = RefusalBackoff(message, 0, now + refused_retry_delay(0))
        return RefusalStep(backoff, tell=True, nudge=False, wait=refused_retry_delay(0))
    if now < previous.next_at:
        return RefusalStep(previous, tell=False, nudge=False, wait=previous.next_at - now)
    attempts = previous.attempts + 1
    delay = refused_retry_delay(attempts)
    return RefusalStep(RefusalBackoff(message, attempts, now + delay), tell=True, nudge=True, wait=delay)
