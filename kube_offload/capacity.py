"""The remote free-capacity annotation: what the virtual kubelet tells the scheduler
extender about the free resources of the remote cluster's nodes.

The virtual node's allocatable says how much of the remote cluster the local scheduler may
use *in total*; it cannot say whether any single remote node can hold a given pod (ten
nodes with 1 cpu free each do not run a 2-cpu pod). This annotation carries that, per
remote node "shape" (a distinct amount of free resources). The format, the bound on its
size and the staleness rules are documented in docs/capacity-annotation.md; this module is
the only code that reads or writes it. Pure: no I/O, time is passed in.

Example (one line on the Node; wrapped here)::

    {"nodes":[{"free":{"cpu":"3500m","memory":"12Gi","pods":"105"},"name":"worker-1"}],
     "omitted":0,"remoteNodes":3,"total":{"cpu":"7","memory":"20Gi","pods":"300"},
     "updated":"2026-01-01T12:00:00Z","v":1}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from kube_offload import resources, times
from kube_offload.resources import QuantityError, ResourceList

FORMAT_VERSION = 1

# Each shape costs ~60-120 bytes (plus its node name). Sixteen keeps the annotation near
# 2 KiB, which matters: without nodeCacheCapable, kube-scheduler sends every Node object,
# annotations included, to the extender for every pod it schedules.
DEFAULT_MAX_SHAPES = 16

# Refuse to parse anything larger than the apiserver would store for all annotations of
# an object together (256 KiB); a real annotation is a few KiB.
MAX_ANNOTATION_BYTES = 256 * 1024


class CapacityError(ValueError):
    """The annotation is not a remote-capacity summary this code understands."""


@dataclass(frozen=True)
class NodeShape:
    """The free resources of one or more remote nodes (milli-units, zeros left out).
    ``name`` is one remote node with exactly this free amount: informative only."""

    free: Mapping[str, int]
    name: str = ""


@dataclass(frozen=True)
class RemoteCapacity:
    shapes: tuple[NodeShape, ...]
    updated: datetime
    """When the virtual kubelet computed the summary (UTC)."""
    remote_nodes: int = 0
    """Remote nodes summarised (the schedulable ones)."""
    total: Mapping[str, int] = field(default_factory=dict)
    """Free resources summed over those remote nodes."""
    omitted: int = 0
    """Shapes left out by the size bound that no kept shape covers: while > 0,
    :func:`remote_fit` may answer no for a pod that one of them could hold."""

    def age_seconds(self, now: datetime) -> float:
        return (now - self.updated).total_seconds()


# --- writing (virtual kubelet) -----------------------------------------------------------
def encode_remote_capacity(
    free_by_node: Mapping[str, Mapping[str, int]],
    *,
    updated: datetime,
    max_shapes: int = DEFAULT_MAX_SHAPES,
) -> str:
    """The annotation value for the remote nodes' free resources.

    ``free_by_node`` maps each *schedulable* remote node (Ready, not cordoned) to its free
    resources in milli-units, e.g. from :func:`kube_offload.resources.free_resources`.
    Negative amounts (overcommitted nodes) count as zero.

    Bounding the size (see docs/capacity-annotation.md): identical shapes are merged;
    shapes dominated by another one (no more of any resource) are dropped, which never
    changes :func:`remote_fit`'s answer; if more than ``max_shapes`` remain, the shape
    with the most of each resource is kept first, then the largest by normalised size,
    and the rest is counted in ``omitted``.

    The output is deterministic (sorted keys and shapes), so an unchanged cluster gives
    the very same string and the caller can skip a no-op Node update.
    """
    if max_shapes < 1:
        raise ValueError("max_shapes must be at least 1")
    if updated.tzinfo is None:
        raise ValueError("updated must be timezone-aware")

    total: ResourceList = {}
    by_shape: dict[tuple[tuple[str, int], ...], str] = {}
    for name in sorted(free_by_node):
        free = {r: a for r, a in free_by_node[name].items() if a > 0}
        for resource, amount in free.items():
            total[resource] = total.get(resource, 0) + amount
        key = tuple(sorted(free.items()))
        by_shape.setdefault(key, name)  # sorted names: the first name represents the shape

    distinct = [NodeShape(free=dict(key), name=name) for key, name in by_shape.items()]
    kept, omitted = _select_shapes(distinct, max_shapes)
    document = {
        "v": FORMAT_VERSION,
        "updated": times.format_time(updated),
        "remoteNodes": len(free_by_node),
        "total": resources.format_resource_list(total),
        "nodes": [_encode_shape(shape) for shape in kept],
        "omitted": omitted,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def _encode_shape(shape: NodeShape) -> dict[str, Any]:
    entry: dict[str, Any] = {"free": resources.format_resource_list(shape.free)}
    if shape.name:
        entry["name"] = shape.name
    return entry


def _select_shapes(distinct: list[NodeShape], max_shapes: int) -> tuple[list[NodeShape], int]:
    """The kept shapes (largest first) and how many uncovered shapes were left out."""
    if not distinct:
        return [], 0
    peaks: ResourceList = {}
    for shape in distinct:
        for resource, amount in shape.free.items():
            peaks[resource] = max(peaks.get(resource, 0), amount)

    def size(shape: NodeShape) -> float:
        # Each resource as a share of the largest amount of it: cpu and bytes compare.
        return sum(amount / peaks[resource] for resource, amount in shape.free.items())

    ordered = sorted(distinct, key=lambda s: (-size(s), s.name))
    kept: list[NodeShape] = []
    # The biggest node for each resource first, so a pod limited by one resource (a GPU,
    # a huge memory request) is judged right even when shapes had to be left out.
    for resource in sorted(peaks, key=resources.resource_sort_key):
        if len(kept) >= max_shapes:
            break
        best = next(s for s in ordered if s.free.get(resource, 0) == peaks[resource])
        if best not in kept:
            kept.append(best)
    # Scanning by decreasing size, a shape can only be dominated by one already seen, so
    # comparing with the kept shapes is enough (domination is transitive).
    omitted = 0
    for shape in ordered:
        if shape in kept or any(_dominates(k.free, shape.free) for k in kept):
            continue
        if len(kept) < max_shapes:
            kept.append(shape)
        else:
            omitted += 1
    kept.sort(key=lambda s: (-size(s), s.name))
    return kept, omitted


def _dominates(big: Mapping[str, int], small: Mapping[str, int]) -> bool:
    return all(big.get(resource, 0) >= amount for resource, amount in small.items())


# --- reading (scheduler extender) --------------------------------------------------------
def decode_remote_capacity(text: str) -> RemoteCapacity:
    """Parse an annotation value; raises :class:`CapacityError` with a reason a human can
    act on. Unknown fields are ignored so a newer writer can add some without a version
    bump; an incompatible change bumps ``v``, which older readers refuse."""
    if not isinstance(text, str):
        raise CapacityError(f"annotation must be a string, got {type(text).__name__}")
    if len(text) > MAX_ANNOTATION_BYTES:
        raise CapacityError(f"annotation is larger than {MAX_ANNOTATION_BYTES} bytes")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CapacityError(f"annotation is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CapacityError("annotation must be a JSON object")
    version = document.get("v")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise CapacityError(f"unsupported format version {version!r} (this reader knows v={FORMAT_VERSION})")

    updated = _parse_timestamp(document.get("updated"))
    raw_nodes = document.get("nodes")
    if not isinstance(raw_nodes, list):
        raise CapacityError("'nodes' must be a list")
    shapes = []
    for index, entry in enumerate(raw_nodes):
        if not isinstance(entry, dict):
            raise CapacityError(f"nodes[{index}] must be an object")
        name = entry.get("name", "")
        if not isinstance(name, str):
            raise CapacityError(f"nodes[{index}].name must be a string")
        free = _resource_list(entry.get("free"), f"nodes[{index}].free")
        shapes.append(NodeShape(free=free, name=name))

    total = _resource_list(document.get("total", {}), "total")
    remote_nodes = _count(document.get("remoteNodes", len(shapes)), "remoteNodes")
    omitted = _count(document.get("omitted", 0), "omitted")
    return RemoteCapacity(
        shapes=tuple(shapes), updated=updated, remote_nodes=remote_nodes, total=total, omitted=omitted
    )


def _parse_timestamp(value: object) -> datetime:
    if not isinstance(value, str):
        raise CapacityError("'updated' must be an RFC 3339 timestamp string")
    try:
        return times.parse_time(value, require_offset=True)
    except times.MissingOffset:
        raise CapacityError(f"'updated' must carry a time zone (e.g. Z): {value!r}") from None
    except ValueError:
        raise CapacityError(f"'updated' is not an RFC 3339 timestamp: {value!r}") from None


def _resource_list(value: object, where: str) -> ResourceList:
    if not isinstance(value, dict):
        raise CapacityError(f"{where} must be an object of quantities")
    try:
        return resources.parse_resource_list(value)
    except QuantityError as exc:
        raise CapacityError(f"{where}: {exc}") from None


def _count(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CapacityError(f"'{where}' must be a non-negative integer")
    return value


def remote_fit(requests: Mapping[str, int], capacity: RemoteCapacity) -> tuple[bool, str]:
    """Whether at least one remote node can hold a pod with ``requests`` (milli-units,
    from :func:`kube_offload.resources.pod_requests`); the reason says why not, naming
    the resource short on the largest remote node."""
    if not capacity.shapes:
        return False, "the remote cluster reports no schedulable node"
    first_reason = ""
    for shape in capacity.shapes:
        ok, reason = resources.fits(requests, shape.free)
        if ok:
            return True, ""
        if not first_reason:
            first_reason = reason
    largest = capacity.shapes[0]
    which = f"the largest ({largest.name})" if largest.name else "the largest"
    count = len(capacity.shapes)
    shapes = "1 node shape" if count == 1 else f"{count} node shapes"
    return False, f"no remote node can fit the pod ({shapes} checked): {which} has {first_reason}"
