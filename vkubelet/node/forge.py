"""The virtual Node and its Lease as the API wants them (pure: time is passed in).

``virtual_node.py`` reads the world and calls these; everything that decides what the node says
lives here and is tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping

import kube_offload
from kube_offload import capacity as cap
from kube_offload import constants as c
from kube_offload import reasons, resources
from kube_offload.resources import QuantityError, ResourceList
from kube_offload.remote_resources import PRESSURE_CONDITIONS
from kube_offload.times import format_micro_time, format_time, parse_time_or_none
from vkubelet.shared.provider_terms import suggested_label_problem

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

READY = "Ready"
CONDITION_TYPES = (READY, *PRESSURE_CONDITIONS)
LEASE_NAMESPACE = c.NODE_LEASE_NAMESPACE

# Reasons shown by `kubectl describe node`, kubelet-style.
REASON_READY = reasons.REASON_REMOTE_REACHABLE
REASON_NOT_READY = reasons.REASON_REMOTE_UNREACHABLE
_PRESSURE_REASONS = {
    "MemoryPressure": ("RemoteHasSufficientMemory", "RemoteUnderMemoryPressure", "memory"),
    "DiskPressure": ("RemoteHasNoDiskPressure", "RemoteUnderDiskPressure", "disk"),
    "PIDPressure": ("RemoteHasSufficientPID", "RemoteUnderPIDPressure", "PID"),
}


# --- metadata and spec -----------------------------------------------------------------------
def node_labels(settings: Settings, suggested: Mapping[str, str] | None = None) -> dict[str, str]:
    """The provider's suggested labels (already filtered: vkubelet/shared/provider_terms.py; for a slice's
    node the Consumer's and its pool's: :func:`slice_suggested`), then the configured ones
    (--node-label: the consumer's word wins over the provider's), then the contract labels
    (which win on any clash: the scheduler, the extender and cluster selectors rely on
    them; a slice's node also carries kube-offload.io/slice=<slice>)."""
    labels = dict(suggested or {})
    labels.update(settings.node_labels)
    if settings.slice is not None:
        labels[c.LABEL_SLICE] = settings.slice.name
    labels.update(
        {
            c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE,
            c.LABEL_CLUSTER_ID: settings.cluster_id,
            c.LABEL_HOSTNAME: settings.node_name,
            # Offloaded pods run on Linux nodes; without these, pods with the usual
            # kubernetes.io/os=linux nodeSelector could never land on the virtual node.
            "kubernetes.io/os": "linux",
        }
    )
    return labels


def slice_suggested(
    consumer_suggested: Mapping[str, str] | None, pool_labels: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """A slice node's provider-suggested labels: the Consumer's, then its pool's (the
    slice's status.nodeLabels: the more specific claim wins), each held to the same rule
    as the Consumer's (provider_terms.suggested_label_problem); and what was dropped, why."""
    merged = dict(consumer_suggested or {})
    dropped: list[str] = []
    for key, value in sorted(pool_labels.items()):
        problem = suggested_label_problem(key, value)
        if problem:
            dropped.append(f"pool label {key}={value} ignored: {problem}")
            continue
        merged[key] = value
    return merged, dropped


def provider_label_keys(settings: Settings, suggested: Mapping[str, str] | None) -> list[str]:
    """The label keys that are on the node only because the provider suggested them
    (``suggested``: the Consumer's and, for a slice, its pool's, merged)."""
    own = node_labels(settings)
    return sorted(key for key in (suggested or {}) if key not in own)


def encode_label_keys(keys: list[str]) -> str:
    return ",".join(keys)


def decode_label_keys(value: str | None) -> list[str]:
    return [key for key in (value or "").split(",") if key]


def slice_not_accepted_taint() -> dict[str, str]:
    return {"key": c.TAINT_SLICE_NOT_ACCEPTED_KEY, "value": "true", "effect": c.TAINT_SLICE_NOT_ACCEPTED_EFFECT}


def virtual_node_taint() -> dict[str, str]:
    return {"key": c.TAINT_KEY, "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}


def provider_cordon_taint() -> dict[str, str]:
    return {"key": c.TAINT_PROVIDER_CORDONED_KEY, "value": "true", "effect": c.TAINT_PROVIDER_CORDONED_EFFECT}


def provider_drain_taint() -> dict[str, str]:
    return {"key": c.TAINT_PROVIDER_DRAINING_KEY, "value": "true", "effect": c.TAINT_PROVIDER_DRAINING_EFFECT}


def node_taints(
    current: list[dict[str, Any]] | None, *, cordoned: bool, draining: bool = False, slice_refused: bool = False
) -> list[dict[str, Any]]:
    """The node's taints as they should be: ours (the virtual-node taint always, the
    provider-cordon taint while the provider cordons us, the NoExecute drain taint while it
    drains us, the slice-not-accepted taint while a slice's provider has not accepted it)
    in their exact form, everybody else's (the node lifecycle controller's, an admin's)
    untouched and in their order."""
    current = [dict(t) for t in current or []]
    ours = {c.TAINT_KEY, c.TAINT_PROVIDER_CORDONED_KEY, c.TAINT_PROVIDER_DRAINING_KEY, c.TAINT_SLICE_NOT_ACCEPTED_KEY}
    wanted = (
        [virtual_node_taint()]
        + ([provider_cordon_taint()] if cordoned else [])
        + ([provider_drain_taint()] if draining else [])
        + ([slice_not_accepted_taint()] if slice_refused else [])
    )
    if [t for t in current if t.get("key") in ours] == wanted:
        return current  # already right: no write
    return [*(t for t in current if t.get("key") not in ours), *wanted]


# --- status ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """What the vkubelet currently knows about the remote cluster."""

    reachable: bool
    # Seconds since the remote API server last answered (None: never).
    silent_for: float | None
    capacity: ResourceList | None  # None: not computed yet (remote caches not synced)
    pressure: Mapping[str, list[str]]
    remote_version: str = ""


def node_conditions(observation: Observation, previous: list[dict[str, Any]] | None, now: datetime) -> list[dict[str, Any]]:
    """Ready plus the three pressure conditions; lastTransitionTime is kept from
    ``previous`` while a condition's status does not change."""
    before = {cond.get("type"): cond for cond in previous or []}
    stamp = format_time(now)
    result = []
    if observation.reachable:
        ready = ("True", REASON_READY, "the remote cluster's API server answers")
    elif observation.silent_for is None:
        ready = ("False", REASON_NOT_READY, "the remote cluster's API server has not answered yet")
    else:
        ready = (
            "False",
            REASON_NOT_READY,
            f"the remote cluster's API server has not answered for {int(observation.silent_for)}s",
        )
    wanted: list[tuple[str, tuple[str, str, str]]] = [(READY, ready)]
    for kind in PRESSURE_CONDITIONS:
        fine, under, what = _PRESSURE_REASONS[kind]
        nodes = list(observation.pressure.get(kind) or [])
        if nodes:
            shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
            wanted.append((kind, ("True", under, f"remote nodes under {what} pressure: {shown}")))
        else:
            wanted.append((kind, ("False", fine, f"no remote node reports {what} pressure")))
    for kind, (status, reason, message) in wanted:
        old = before.get(kind) or {}
        transition = old.get("lastTransitionTime") if old.get("status") == status else None
        result.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": transition or stamp,
            }
        )
    return result


def node_info(settings: Settings, remote_version: str) -> dict[str, str]:
    # The API requires every field. kubeletVersion is the remote control plane's version:
    # that is the Kubernetes the pods really run on, and version-skew logic in the local
    # control plane then sees a plausible kubelet.
    return {
        "architecture": "amd64",
        "bootID": "",
        "containerRuntimeVersion": f"kube-offload://{kube_offload.__version__}",
        "kernelVersion": "",
        "kubeProxyVersion": "",
        "kubeletVersion": remote_version or "v0.0.0-unknown",
        "machineID": "",
        "operatingSystem": "linux",
        "osImage": f"kube-offload virtual node of cluster {settings.cluster_id}",
        "systemUUID": "",
    }


def node_status(
    settings: Settings, observation: Observation, previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The whole status the vkubelet owns. With no capacity computed yet the previous
    capacity is kept: a vkubelet restart must not zero the node for a moment and make
    the scheduler think nothing fits."""
    previous = previous or {}
    status: dict[str, Any] = {
        "conditions": node_conditions(observation, previous.get("conditions"), now),
        "addresses": [
            {"type": "InternalIP", "address": settings.node_address},
            {"type": "Hostname", "address": settings.node_address},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": settings.kubelet_port}},
        "nodeInfo": node_info(settings, observation.remote_version or (previous.get("nodeInfo") or {}).get("kubeletVersion", "")),
    }
    if observation.capacity is not None:
        formatted = resources.format_resource_list(observation.capacity)
        status["capacity"] = formatted
        status["allocatable"] = dict(formatted)
    else:
        status["capacity"] = dict(previous.get("capacity") or {"pods": "0"})
        status["allocatable"] = dict(previous.get("allocatable") or status["capacity"])
    return status


def build_node(
    settings: Settings,
    status: dict[str, Any],
    annotations: Mapping[str, str],
    suggested: Mapping[str, str] | None = None,
    *,
    cordoned: bool = False,
    draining: bool = False,
    slice_refused: bool = False,
) -> dict[str, Any]:
    """The Node to create when none exists (status included: the API keeps a Node's
    status on create, as kubelet registration relies on)."""
    metadata: dict[str, Any] = {"name": settings.node_name, "labels": node_labels(settings, suggested)}
    annotations = dict(annotations)
    provider_keys = provider_label_keys(settings, suggested)
    if provider_keys:
        annotations[c.ANNOTATION_PROVIDER_LABELS] = encode_label_keys(provider_keys)
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {"taints": node_taints(None, cordoned=cordoned, draining=draining, slice_refused=slice_refused)},
        "status": status,
    }


def metadata_patch(
    node: Mapping[str, Any],
    settings: Settings,
    annotations: Mapping[str, str],
    suggested: Mapping[str, str] | None = None,
    *,
    cordoned: bool = False,
    draining: bool = False,
    slice_refused: bool = False,
) -> dict[str, Any] | None:
    """A merge patch that puts our labels, annotations and taints on an existing node, or
    None when they are already there. A label the provider suggested earlier (listed in
    the provider-labels annotation) and no longer does is removed, and so is the
    provider-cordon and drain taints once the provider lifts them; other labels, annotations
    and taints (kubectl label, the node lifecycle controller's not-ready taint) are left
    alone."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    have_labels = meta.get("labels") or {}
    have_annotations = meta.get("annotations") or {}
    patch: dict[str, Any] = {}
    wanted = node_labels(settings, suggested)
    labels: dict[str, str | None] = {k: v for k, v in wanted.items() if have_labels.get(k) != v}
    for key in decode_label_keys(have_annotations.get(c.ANNOTATION_PROVIDER_LABELS)):
        if key not in wanted and key in have_labels:
            labels[key] = None  # withdrawn by the provider
    if labels:
        patch.setdefault("metadata", {})["labels"] = labels
    annotations = dict(annotations)
    provider_keys = encode_label_keys(provider_label_keys(settings, suggested))
    annotations[c.ANNOTATION_PROVIDER_LABELS] = provider_keys
    changed: dict[str, str | None] = {k: v for k, v in annotations.items() if have_annotations.get(k) != v}
    if not provider_keys:
        changed.pop(c.ANNOTATION_PROVIDER_LABELS, None)
        if c.ANNOTATION_PROVIDER_LABELS in have_annotations:
            changed[c.ANNOTATION_PROVIDER_LABELS] = None
    if changed:
        patch.setdefault("metadata", {})["annotations"] = changed
    taints = list(spec.get("taints") or [])
    wanted_taints = node_taints(taints, cordoned=cordoned, draining=draining, slice_refused=slice_refused)
    if wanted_taints != taints:
        # A merge patch replaces the whole list; the resourceVersion makes it fail
        # rather than drop a taint another controller added meanwhile.
        patch["spec"] = {"taints": wanted_taints}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch or None


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any], now: datetime, report_seconds: float) -> dict[str, Any] | None:
    """The merge patch for nodes/status, or None when nothing but heartbeat timestamps
    would change and the last heartbeat is younger than ``report_seconds``."""
    current = current or {}
    if status_equivalent(current, desired) and not heartbeat_due(current, now, report_seconds):
        return None
    patch: dict[str, Any] = dict(desired)
    # A merge patch merges maps: resources we no longer report must be nulled out.
    for field in ("capacity", "allocatable"):
        stale = set(current.get(field) or {}) - set(desired.get(field) or {})
        if stale:
            patch[field] = {**desired.get(field, {}), **{name: None for name in stale}}
    return {"status": patch}


def status_equivalent(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Equal in everything but heartbeat times (and quantity spelling)."""
    for field in ("capacity", "allocatable"):
        if _amounts(current.get(field)) != _amounts(desired.get(field)):
            return False
    if _conditions_key(current.get("conditions")) != _conditions_key(desired.get("conditions")):
        return False
    if (current.get("addresses") or []) != desired.get("addresses"):
        return False
    if (current.get("daemonEndpoints") or {}) != desired.get("daemonEndpoints"):
        return False
    info = current.get("nodeInfo") or {}
    return all(info.get(k, "") == v for k, v in (desired.get("nodeInfo") or {}).items())


def heartbeat_due(current: Mapping[str, Any], now: datetime, report_seconds: float) -> bool:
    for cond in current.get("conditions") or []:
        if cond.get("type") == READY:
            beat = parse_time_or_none(cond.get("lastHeartbeatTime"))
            return beat is None or (now - beat).total_seconds() >= report_seconds
    return True


def _amounts(raw: Any) -> ResourceList | None:
    try:
        return resources.parse_resource_list(raw or {})
    except QuantityError:
        return None


def _conditions_key(conditions: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (cond.get("type"), cond.get("status"), cond.get("reason"), cond.get("message"), cond.get("lastTransitionTime"))
        for cond in conditions or []
    )


# --- lease -------------------------------------------------------------------------------------
def build_lease(settings: Settings, node_uid: str | None) -> dict[str, Any]:
    """The node's Lease, without renewTime (set by :func:`lease_renewal`). Owned by the
    Node, as a kubelet's is, so deleting the node deletes its lease."""
    metadata: dict[str, Any] = {"name": settings.node_name, "namespace": LEASE_NAMESPACE}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": settings.node_name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {"holderIdentity": settings.node_name, "leaseDurationSeconds": settings.lease_duration_seconds},
    }


def lease_renewal(settings: Settings, now: datetime) -> dict[str, Any]:
    """A merge patch renewing the lease (sent as raw JSON: see virtual_node.py on MicroTime)."""
    return {
        "spec": {
            "holderIdentity": settings.node_name,
            "leaseDurationSeconds": settings.lease_duration_seconds,
            "renewTime": format_micro_time(now),
        }
    }


def annotation_due(current: str | None, fresh: str, now: datetime, refresh_seconds: float) -> bool:
    """Whether to write ``fresh`` over ``current``: when what it says changed, or when
    ``current`` is older than ``refresh_seconds`` (the extender ignores stale summaries,
    so an unchanged one must still be re-stamped now and then)."""
    if not current:
        return True
    try:
        old = cap.decode_remote_capacity(current)
        new = cap.decode_remote_capacity(fresh)
    except cap.CapacityError:
        return True
    if (old.shapes, dict(old.total), old.remote_nodes, old.omitted) != (
        new.shapes,
        dict(new.total),
        new.remote_nodes,
        new.omitted,
    ):
        return True
    return old.age_seconds(now) >= refresh_seconds


def resources_text(amounts: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in resources.format_resource_list(amounts).items()) or "nothing"
