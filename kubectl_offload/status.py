"""``kubectl offload status``: the state of every peering, and whether it is healthy (pure).

Input is what :mod:`kubectl_offload.gather` read (:class:`StatusFacts`); output one
:class:`RemoteStatus` per remote cluster, with the *problems* that make it unhealthy (the
command exits non-zero) and *warnings* that do not (the peering works; something in it
needs a look). The rules, in one place:

unhealthy
  the virtual node is missing or not Ready; its Lease is missing or older than its
  duration (the virtual kubelet stopped: the Ready condition it wrote last is stale);
  the provider's API server does not answer from here; the provider admits no consumer
  of our name.
warning
  no kubeconfig for the provider (its side is unknown); the provider refused a
  TwinNamespace; the consumer is cordoned; a remote node reports pressure; reflection
  errors (the virtual kubelet's ``ReflectionFailed``/``ReflectionConflict`` Warning
  Events) seen in the last :data:`RECENT_SECONDS`; a slice (docs/slices.md) the provider
  refused or accepted only in part, or a slice's node that is missing or not Ready.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from kube_offload import capacity as cap
from kube_offload import constants as c
from kube_offload import resources
from kube_offload.consumer_quota import consumer_quota
from kube_offload.provider_policy import ProviderPolicyError, parse_policy
from kube_offload.remote_resources import CapacityStatusError, decode_capacity_status
from kube_offload.resources import QuantityError
from kube_offload.times import parse_time_or_none
from kubectl_offload.documents import camel_keys

REMOTE_REACHABLE = "reachable"
REMOTE_UNREACHABLE = "unreachable"  # its API server did not answer from here
REMOTE_UNREAD = "unread"  # no usable kubeconfig for it: nothing is known


@dataclass(frozen=True)
class RemoteFacts:
    """Everything ``status`` reads about one remote cluster."""

    cluster_id: str
    node: Mapping[str, Any] | None = None
    lease: Mapping[str, Any] | None = None
    pods: Sequence[Mapping[str, Any]] = ()  # local pods bound to the virtual node
    reflection_warnings: Sequence[Mapping[str, Any]] = ()  # local Warning Events of its vkubelet's reflection
    kubeconfig_source: str = ""
    remote_state: str = ""  # REMOTE_REACHABLE | REMOTE_UNREACHABLE | REMOTE_UNREAD
    remote_error: str = ""  # why it is unreachable or unread
    ping_seconds: float | None = None  # how long the provider's /version took from here
    consumer: Mapping[str, Any] | None = None
    consumer_error: str = ""
    twin_requests: Sequence[Mapping[str, Any]] | None = None
    twin_error: str = ""
    reflected: Mapping[str, int] | None = None  # kind -> objects our reflectors wrote
    reflected_error: str = ""
    # Resource slices (docs/slices.md): our OffloadSlices on the provider, and the local
    # virtual node of each slice by slice name.
    slices: Sequence[Mapping[str, Any]] = ()
    slice_error: str = ""
    slice_nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusFacts:
    now: datetime
    local_cluster_id: str | None
    remotes: Sequence[RemoteFacts]
    notes: Sequence[str] = field(default_factory=tuple)


# Reflection errors older than this are history, not a warning.
RECENT_SECONDS = 15 * 60
DEFAULT_LEASE_DURATION = 40
HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
# Shown where the virtual kubelet keeps no counter we could read.
NOT_AVAILABLE = "n/a"
REFLECTION_ERRORS_SOURCE = "Warning Events ReflectionFailed/ReflectionConflict of the virtual kubelet"


@dataclass
class RemoteStatus:
    cluster: str
    node: str
    ready: str  # True | False | Unknown | missing
    ready_reason: str
    heartbeat_age: float | None  # seconds since the Lease was renewed
    last_ping: str  # when the virtual kubelet last reached the provider (RFC 3339), "" unknown
    last_ping_age: float | None
    last_ping_exact: bool  # False: NotReady since last_ping, so the last success was before it
    remote_api: str  # reachable | unreachable | unread
    remote_ping_seconds: float | None
    advertised: dict[str, str]  # the virtual node's allocatable
    remote_free: dict[str, str]  # free on the provider's nodes, summed
    remote_free_source: str  # "provider" (Consumer status) | "annotation" (as last published) | ""
    quota: dict[str, dict[str, str]]  # resource -> {used, limit}
    quota_mode: str  # the Consumer's spec.policy.quotaMode (requests|limits|both|hard); "" unread
    cordoned: bool | None
    pods: dict[str, int]  # phase -> count of local pods on the virtual node
    twins: list[dict[str, Any]]  # {name, localNamespace, phase, message}
    reflected: dict[str, int] | None  # kind -> objects written by the reflectors; None: not read
    reflection_errors: int  # recent
    reflection_errors_source: str = REFLECTION_ERRORS_SOURCE
    vkubelet_metrics: str = NOT_AVAILABLE
    health: str = HEALTHY
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Resource slices (docs/slices.md), by name: {name, node, ready, pool, phase, asked,
    # accepted, advertised, message}.
    slices: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class StatusReport:
    local_cluster_id: str | None
    remotes: list[RemoteStatus]
    healthy: bool
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return camel_keys(asdict(self))


def _age(now: datetime, text: object) -> float | None:
    """Seconds since ``text`` (RFC 3339), to the tenth: output stays readable and diffable."""
    moment = parse_time_or_none(text)
    return None if moment is None else round(max(0.0, (now - moment).total_seconds()), 1)


def _condition(node: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def describe_age(seconds: float | None) -> str:
    """kubectl's AGE style: 45s, 3m12s, 2h5m, 3d4h; "-" when unknown."""
    if seconds is None:
        return "-"
    total = int(seconds)
    if total < 120:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if minutes < 10 and secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m" if hours < 8 and minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if days < 8 and hours else f"{days}d"


def _format(amounts: Mapping[str, int]) -> dict[str, str]:
    return resources.format_resource_list({k: v for k, v in amounts.items()})


def _advertised(node: Mapping[str, Any] | None) -> dict[str, str]:
    try:
        return _format(resources.node_allocatable(node or {}))
    except QuantityError:
        return {}


def _remote_free(facts: RemoteFacts, warnings: list[str]) -> tuple[dict[str, str], str]:
    capacity = ((facts.consumer or {}).get("status") or {}).get("capacity")
    if facts.consumer is not None and capacity is not None:
        try:
            summary = decode_capacity_status(capacity)
            return _format(resources.add(*summary.free_by_node.values()) if summary.free_by_node else {}), "provider"
        except CapacityStatusError as exc:
            warnings.append(f"the provider's capacity summary does not parse: {exc}")
    text = (((facts.node or {}).get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_REMOTE_CAPACITY)
    if isinstance(text, str):
        try:
            return _format(cap.decode_remote_capacity(text).total), "annotation"
        except cap.CapacityError:
            return {}, ""
    return {}, ""


def _quota(consumer: Mapping[str, Any] | None) -> tuple[dict[str, dict[str, str]], bool | None, str]:
    """(resource -> {used, limit}, cordoned, quota mode) of the provider's Consumer. The
    limits are spec.quota as the ShadowPod webhook reads it under spec.policy.quotaMode
    (a plain ``cpu`` under ``both`` or ``hard`` bounds ``cpu`` and ``limits.cpu``), so each
    figure stands beside the status.used entry it bounds."""
    if consumer is None:
        return {}, None, ""
    spec = consumer.get("spec") or {}
    status = consumer.get("status") or {}
    cordoned = spec.get("cordoned") is True
    try:
        mode = parse_policy(spec.get("policy")).quota_mode
        limits = consumer_quota(spec)
        used = resources.parse_resource_list(status.get("used"))
    except (QuantityError, ProviderPolicyError):
        return {}, cordoned, ""
    names = sorted(set(limits) | set(used), key=resources.resource_sort_key)
    quota = {}
    for name in names:
        binary = resources.uses_binary_format(name)
        quota[name] = {
            "used": resources.format_quantity(used.get(name, 0), binary=binary),
            "limit": resources.format_quantity(limits[name], binary=binary) if name in limits else "",
        }
    return quota, cordoned, mode


def _pods_by_phase(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        phase = str((pod.get("status") or {}).get("phase") or "Unknown")
        counts[phase] = counts.get(phase, 0) + 1
    return dict(sorted(counts.items()))


def _twins(requests: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {
            "name": str((r.get("metadata") or {}).get("name") or ""),
            "localNamespace": str((r.get("spec") or {}).get("localNamespace") or ""),
            "phase": str((r.get("status") or {}).get("phase") or "Pending"),
            "message": str((r.get("status") or {}).get("message") or ""),
        }
        for r in sorted(requests or [], key=lambda r: str((r.get("metadata") or {}).get("name")))
    ]


def _amounts(raw: object) -> dict[str, str]:
    try:
        return _format(resources.parse_resource_list(raw if isinstance(raw, Mapping) else {}))
    except QuantityError:
        return {}


def _slices(facts: RemoteFacts, problems: list[str], warnings: list[str]) -> list[dict[str, Any]]:
    """One row per slice, from our OffloadSlice (what was asked, what the provider
    answered) and its virtual node (what it offers). A slice the provider refused or cut
    is a warning (the peering works; that slice does not, or less); a slice's node missing
    or not Ready is a problem, as the peering's own node is."""
    objects = {str((o.get("metadata") or {}).get("name") or ""): o for o in facts.slices}
    rows = []
    for name in sorted(set(objects) | set(facts.slice_nodes)):
        obj, node = objects.get(name) or {}, facts.slice_nodes.get(name)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        node_name = str(((node or {}).get("metadata") or {}).get("name") or "")
        ready = "missing" if node is None else str(_condition(node, "Ready").get("status") or "Unknown")
        phase = str(status.get("phase") or (c.SLICE_PHASE_PENDING if obj else "unknown"))
        message = str(status.get("message") or "")
        rows.append({
            "name": name, "node": node_name, "ready": ready, "pool": str(spec.get("pool") or ""), "phase": phase,
            "asked": _amounts(spec.get("resources")), "accepted": _amounts(status.get("accepted")),
            "advertised": _advertised(node) if node is not None else {}, "message": message,
        })
        if node is None:
            problems.append(f"slice {name} has no virtual node: is its virtual kubelet (--slice {name}=...) running?")
        elif ready != "True":
            problems.append(f"slice {name}'s virtual node {node_name} is not Ready ({ready})")
        if not obj and facts.remote_state == REMOTE_REACHABLE and not facts.slice_error:
            warnings.append(f"slice {name}: no OffloadSlice {name} on provider {facts.cluster_id} (its virtual kubelet writes it)")
        elif phase == c.SLICE_PHASE_REFUSED:
            warnings.append(f"slice {name} refused by provider {facts.cluster_id}: {message or status.get('reason') or 'no reason given'}")
        elif phase == c.SLICE_PHASE_PARTIAL:
            warnings.append(f"slice {name} only partly accepted by provider {facts.cluster_id}: {message or status.get('reason') or ''}")
    if facts.slice_error:
        warnings.append(f"provider {facts.cluster_id}: {facts.slice_error}")
    return rows


def _recent(events: Sequence[Mapping[str, Any]], now: datetime) -> list[Mapping[str, Any]]:
    recent = []
    for event in events:
        age = _age(now, event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp"))
        if age is not None and age <= RECENT_SECONDS:
            recent.append(event)
    return recent


def remote_status(facts: RemoteFacts, now: datetime, local_cluster_id: str | None) -> RemoteStatus:
    problems: list[str] = []
    warnings: list[str] = []
    node = facts.node
    name = str(((node or {}).get("metadata") or {}).get("name") or c.virtual_node_name(facts.cluster_id))

    ready = _condition(node, "Ready")
    ready_state = "missing" if node is None else str(ready.get("status") or "Unknown")
    if node is None:
        problems.append(f"virtual node {name} does not exist: is the virtual kubelet for {facts.cluster_id} running?")
    elif ready_state != "True":
        why = ": ".join(p for p in (str(ready.get("reason") or ""), str(ready.get("message") or "")) if p)
        problems.append(f"virtual node {name} is not Ready ({ready_state}{': ' + why if why else ''})")

    heartbeat_age = None
    if facts.lease is not None:
        spec = facts.lease.get("spec") or {}
        heartbeat_age = _age(now, spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_DURATION)
        if heartbeat_age is None or heartbeat_age > duration:
            problems.append(
                f"the virtual kubelet's heartbeat is stale: Lease {name} last renewed {describe_age(heartbeat_age)} ago "
                f"(duration {duration}s): is it running?"
            )
    elif node is not None:
        problems.append(f"virtual node {name} has no Lease in kube-node-lease: its virtual kubelet never renewed one")

    # Ready=True is written only after a successful ping: its heartbeat is the last one
    # we know of; once NotReady, the last success came before the transition.
    if ready_state == "True":
        last_ping, ping_exact = str(ready.get("lastHeartbeatTime") or ""), True
    else:
        last_ping, ping_exact = str(ready.get("lastTransitionTime") or ""), False

    if facts.remote_state == "unreachable":
        problems.append(f"provider {facts.cluster_id}: {facts.remote_error}")
    elif facts.remote_state == "unread":
        warnings.append(f"provider {facts.cluster_id} not read: {facts.remote_error}")
    if facts.remote_state == "reachable":
        if facts.consumer_error:
            warnings.append(f"provider {facts.cluster_id}: {facts.consumer_error}")
        elif facts.consumer is None:
            problems.append(
                f"provider {facts.cluster_id} admits no consumer {local_cluster_id!r} (no Consumer object): "
                "it refuses every ShadowPod; ask its admin (kube-offload peer)"
            )
        if facts.twin_error:
            warnings.append(f"provider {facts.cluster_id}: {facts.twin_error}")
        if facts.reflected_error:
            warnings.append(f"provider {facts.cluster_id}: {facts.reflected_error}")

    quota, cordoned, quota_mode = _quota(facts.consumer)
    if cordoned:
        warnings.append(f"consumer {local_cluster_id} is cordoned by provider {facts.cluster_id}: no new pods are admitted there")
    if facts.consumer is not None and (facts.consumer.get("spec") or {}).get("drain") is not None:
        warnings.append(f"consumer {local_cluster_id} is drained by provider {facts.cluster_id}: no new pods are admitted "
                        "there and the pods there are sent home (until the provider runs kube-offload undrain)")
    twins = _twins(facts.twin_requests)
    for twin in twins:
        if twin["phase"] == "Refused":
            warnings.append(f"twin namespace {twin['name']} (for {twin['localNamespace']}) refused by the provider: {twin['message']}")
    for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        if _condition(node, kind).get("status") == "True":
            warnings.append(f"virtual node {name} reports {kind}: {_condition(node, kind).get('message') or 'on a remote node'}")

    recent = _recent(facts.reflection_warnings, now)
    errors = sum(int(e.get("count") or 1) for e in recent)
    if recent:
        last = max(recent, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        involved = last.get("involvedObject") or {}
        warnings.append(
            f"{errors} reflection error(s) in the last {RECENT_SECONDS // 60}m; latest on "
            f"{str(involved.get('kind') or '').lower()}/{involved.get('namespace')}/{involved.get('name')}: "
            f"{last.get('reason')}: {last.get('message')}"
        )

    remote_free, free_source = _remote_free(facts, warnings)
    slices = _slices(facts, problems, warnings)
    return RemoteStatus(
        cluster=facts.cluster_id, node=name, ready=ready_state,
        ready_reason=str(ready.get("reason") or ""),
        heartbeat_age=heartbeat_age, last_ping=last_ping, last_ping_age=_age(now, last_ping), last_ping_exact=ping_exact,
        remote_api=facts.remote_state or "unread",
        remote_ping_seconds=None if facts.ping_seconds is None else round(facts.ping_seconds, 3),
        advertised=_advertised(node), remote_free=remote_free, remote_free_source=free_source,
        quota=quota, quota_mode=quota_mode, cordoned=cordoned, pods=_pods_by_phase(facts.pods), twins=twins,
        reflected=dict(facts.reflected) if facts.reflected is not None else None,
        reflection_errors=errors,
        health=UNHEALTHY if problems else HEALTHY, problems=problems, warnings=warnings, slices=slices,
    )


def report(facts: StatusFacts) -> StatusReport:
    rows = [remote_status(remote, facts.now, facts.local_cluster_id) for remote in facts.remotes]
    notes = list(facts.notes)
    if not rows:
        notes.append("no remote cluster: no virtual node, no --remote-kubeconfig and no virtual-kubelet Deployment")
    return StatusReport(
        local_cluster_id=facts.local_cluster_id, remotes=rows,
        healthy=bool(rows) and all(r.health == HEALTHY for r in rows), notes=notes,
    )
