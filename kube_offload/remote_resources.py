"""What the remote cluster has to offer, from its Nodes and Pods (pure).

Two different numbers come out of the same data, on purpose:

* ``shareable``: the basis of the virtual node's capacity. Per schedulable remote node,
  allocatable minus the requests of its non-terminated pods that are NOT ours, summed.
  Our own offloaded pods are left in: the local scheduler already counts them against
  the virtual node's allocatable (they are bound to it), so subtracting them here as
  well would count every offloaded pod twice and shrink the node with each pod placed.
* ``free_by_node``: what each schedulable remote node can take *right now* (every pod
  subtracted, ours included, since they occupy the node): the per-node summary the
  scheduler extender reads to know whether one node can hold a given pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload import resources
from kube_offload.nodes import is_virtual_node, node_is_ready, node_name
from kube_offload.resources import QuantityError, ResourceList

PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")


@dataclass(frozen=True)
class RemoteResources:
    shareable: ResourceList
    free_by_node: dict[str, ResourceList]
    # Condition type -> names of the remote nodes reporting it True.
    pressure: dict[str, list[str]] = field(default_factory=dict)
    schedulable_nodes: int = 0
    total_nodes: int = 0


def node_is_schedulable(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned. A remote cluster's own virtual nodes (it may offload
    further) are left out: their capacity is borrowed, and counting it would advertise
    the same resources twice, or in a loop back to us."""
    spec = node.get("spec") or {}
    return node_is_ready(dict(node)) and not spec.get("unschedulable") and not is_virtual_node(dict(node))


def is_ours(pod: Mapping[str, Any], local_cluster_id: str) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id


def summarize(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], local_cluster_id: str) -> RemoteResources:
    return summarize_many(nodes, pods, [local_cluster_id])[local_cluster_id]


class PodRequestsMemo:
    """:func:`~kube_offload.resources.pod_requests` of the pods of one pass, kept for the
    next pass for the pods that are the very same objects (an informer replaces an object
    when it changes and hands out the same one until then): a pass over 10,000 unchanged
    pods then parses no quantity, and allocates nothing (a new container per pod per pass
    would be promoted to the collector's oldest generation and bring its full passes
    sooner). Call :meth:`next_pass` after each pass: what the pass did not ask for is
    forgotten. The requests handed out are shared: callers must not change them
    (:func:`summarize_many` does not). Not thread-safe: one pass at a time."""

    def __init__(self, requests_of: Callable[[Mapping[str, Any]], ResourceList] = resources.pod_requests) -> None:
        self._requests_of = requests_of
        # id(pod) -> [pod, its requests, the pass that last asked]; the pod is held so its
        # id is not reused meanwhile; the entry is a list so a hit only updates it
        self._known: dict[int, list[Any]] = {}
        self._pass = 0
        self.parsed = 0

    def __call__(self, pod: Mapping[str, Any]) -> ResourceList:
        known = self._known.get(id(pod))
        if known is not None and known[0] is pod:
            known[2] = self._pass
            requests: ResourceList = known[1]
            return requests
        requests = self._requests_of(pod)  # QuantityError: not kept, raised again next time
        self.parsed += 1
        self._known[id(pod)] = [pod, requests, self._pass]
        return requests

    def next_pass(self) -> None:
        gone = [key for key, entry in self._known.items() if entry[2] != self._pass]
        for key in gone:
            del self._known[key]
        self._pass += 1

    def __len__(self) -> int:
        return len(self._known)


def _accumulate(total: ResourceList, requests: Mapping[str, int]) -> None:
    """``total += requests`` in place (a pass adds 10,000 pods: no new dict per pod)."""
    for name, amount in requests.items():
        total[name] = total.get(name, 0) + amount


def summarize_many(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    consumer_ids: Iterable[str],
    *,
    requests_of: Callable[[Mapping[str, Any]], ResourceList] = resources.pod_requests,
) -> dict[str, RemoteResources]:
    """:func:`summarize` for several consumers at once (the provider's enforcer publishes
    one summary per Consumer): every pod's requests are parsed once, not once per
    consumer, and each consumer's "foreign" use is everyone's minus its own.
    ``requests_of``: a pod's requests (a :class:`PodRequestsMemo` to parse only the pods
    that changed since the last pass); never changed here."""
    node_list = list(nodes)
    # Every resource any remote node reports stays on the virtual node, at zero if need
    # be, so a resource does not vanish and reappear as nodes come and go.
    reported: set[str] = set()
    allocatable: dict[str, ResourceList] = {}
    for node in node_list:
        try:
            amounts = resources.node_allocatable(node)
        except QuantityError:
            continue  # a node with a malformed status offers nothing we can trust
        reported.update(amounts)
        if node_is_schedulable(node):
            allocatable[node_name(dict(node))] = amounts

    ids = list(dict.fromkeys(consumer_ids))
    used_all: dict[str, ResourceList] = {name: {} for name in allocatable}
    # consumer id -> node -> requests of that consumer's own pods there
    used_own: dict[str, dict[str, ResourceList]] = {cid: {} for cid in ids}
    for pod in pods:
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to not in allocatable or resources.pod_is_terminated(pod):
            continue
        try:
            requests = requests_of(pod)
        except QuantityError:
            continue  # the apiserver validated it; a parse failure is our limitation
        _accumulate(used_all[bound_to], requests)
        origin = ((pod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID)
        if origin in used_own:
            _accumulate(used_own[origin].setdefault(bound_to, {}), requests)

    free_by_node: dict[str, ResourceList] = {}
    for name, amounts in allocatable.items():
        # Requests of resources the node does not report cannot be taken from it.
        everyone = {r: a for r, a in used_all[name].items() if r in amounts}
        free_by_node[name] = resources.subtract(amounts, everyone)

    pressure: dict[str, list[str]] = {kind: [] for kind in PRESSURE_CONDITIONS}
    for node in node_list:
        for condition in (node.get("status") or {}).get("conditions") or []:
            kind = condition.get("type")
            if kind in pressure and condition.get("status") == "True":
                pressure[kind].append(node_name(dict(node)))
    pressure = {kind: sorted(names) for kind, names in pressure.items()}

    summaries: dict[str, RemoteResources] = {}
    for cid in ids:
        shareable: ResourceList = {name: 0 for name in reported}
        for name, amounts in allocatable.items():
            foreign_all = resources.subtract(used_all[name], used_own[cid].get(name, {}))
            foreign = {r: a for r, a in foreign_all.items() if r in amounts}
            # Clamped per node: one overcommitted node must not eat the others' free room.
            shareable = resources.add(shareable, resources.clamp_non_negative(resources.subtract(amounts, foreign)))
        summaries[cid] = RemoteResources(
            shareable=shareable,
            free_by_node={name: dict(free) for name, free in free_by_node.items()},
            pressure={kind: list(names) for kind, names in pressure.items()},
            schedulable_nodes=len(allocatable),
            total_nodes=len(node_list),
        )
    return summaries


# Byte amounts are published in whole KiB, as a kubelet does, rather than as 11-digit
# byte counts; rounding down further by less than 1 KiB costs nothing.
_KIB = 1024 * resources.MILLI


def virtual_node_capacity(shareable: Mapping[str, int], sharing_percentage: int) -> ResourceList:
    """``sharing_percentage`` % of ``shareable``, always rounded down - cpu to the
    milli-core, bytes to the KiB, everything else to a whole unit: a virtual node never
    promises more than exists."""
    scaled = resources.clamp_non_negative(resources.scale(shareable, sharing_percentage))
    for name, amount in scaled.items():
        if resources.uses_binary_format(name) and amount >= _KIB:
            scaled[name] = amount - amount % _KIB
    return scaled


# --- Consumer.status.capacity ------------------------------------------------------------
# The provider's enforcer publishes a consumer's summary in its Consumer's status so the
# consumer's virtual kubelet needs no read access to the provider's nodes and pods. The
# JSON shape (quantities as canonical strings) is the contract in docs/security.md.
#
# It says less than the summary knows: no node names, no addresses. A consumer that
# learned the provider's node names could pin its pods again with a hostname selector
# (what the nodeName refusal stops) and would map the provider's machines. What the
# consumer needs is the *shapes* of free room (does one node fit this pod?) and how many
# nodes report pressure: the free room is published as an anonymous, sorted list (one
# entry per schedulable node), the pressure as counts.

SHAPE_NAME_PREFIX = "shape-"
"""Decoded shapes are named ``shape-1``, ``shape-2``... (the provider's names are not sent)."""
PRESSURE_NODE_PREFIX = "remote-node-"


class CapacityStatusError(ValueError):
    """A ``Consumer.status.capacity`` that does not have the documented shape."""


def _shape_order(shape: Mapping[str, str]) -> str:
    return ",".join(f"{name}={shape[name]}" for name in sorted(shape))


def encode_capacity_status(summary: RemoteResources) -> dict[str, Any]:
    """``summary`` as ``Consumer.status.capacity`` JSON, without node names:
    ``{"shareable": {res: qty}, "freeShapes": [{res: qty}, ...] (one per schedulable node,
    sorted), "pressure": {condition: number of nodes}, "schedulableNodes": n,
    "totalNodes": n}``. Decoding gives back :func:`anonymous` ``(summary)``."""
    shapes = [resources.format_resource_list(free) for free in summary.free_by_node.values()]
    return {
        "shareable": resources.format_resource_list(summary.shareable),
        "freeShapes": sorted(shapes, key=_shape_order),
        "pressure": {kind: len(nodes) for kind, nodes in sorted(summary.pressure.items())},
        "schedulableNodes": summary.schedulable_nodes,
        "totalNodes": summary.total_nodes,
    }


def anonymous(summary: RemoteResources) -> RemoteResources:
    """``summary`` as the consumer sees it: free shapes named ``shape-<i>`` in the
    published order, nodes under pressure named ``remote-node-<i>``."""
    ordered = sorted(
        ((resources.format_resource_list(free), free) for free in summary.free_by_node.values()),
        key=lambda pair: _shape_order(pair[0]),
    )
    return RemoteResources(
        shareable=dict(summary.shareable),
        free_by_node={f"{SHAPE_NAME_PREFIX}{i + 1}": dict(free) for i, (_text, free) in enumerate(ordered)},
        pressure={kind: _pressure_names(len(nodes)) for kind, nodes in summary.pressure.items()},
        schedulable_nodes=summary.schedulable_nodes,
        total_nodes=summary.total_nodes,
    )


def _pressure_names(count: int) -> list[str]:
    return [f"{PRESSURE_NODE_PREFIX}{i + 1}" for i in range(count)]


def decode_capacity_status(raw: Mapping[str, Any] | None) -> RemoteResources:
    """The inverse of :func:`encode_capacity_status` (free shapes and pressured nodes get
    anonymous names, see :func:`anonymous`). The shape an older enforcer wrote
    (``freeByNode`` by node name, ``pressure`` as lists of names) is read too. Raises
    :class:`CapacityStatusError` naming the field when ``raw`` is not of that shape (e.g.
    written by a newer or a broken enforcer), so the reader can say what is wrong
    instead of guessing."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise CapacityStatusError(f"status.capacity must be an object, got {type(raw).__name__}")
    shareable = _resource_list(raw.get("shareable"), "status.capacity.shareable")
    free_by_node: dict[str, ResourceList] = {}
    shapes_raw = raw.get("freeShapes")
    if shapes_raw is not None:
        if not isinstance(shapes_raw, list):
            raise CapacityStatusError("status.capacity.freeShapes must be a list of resources -> quantity")
        for index, free in enumerate(shapes_raw):
            free_by_node[f"{SHAPE_NAME_PREFIX}{index + 1}"] = _resource_list(free, f"status.capacity.freeShapes[{index}]")
    else:
        free_raw = raw.get("freeByNode") or {}
        if not isinstance(free_raw, Mapping):
            raise CapacityStatusError("status.capacity.freeByNode must be an object of node -> resources")
        free_by_node = {
            str(node): _resource_list(free, f"status.capacity.freeByNode[{node}]") for node, free in free_raw.items()
        }
    pressure_raw = raw.get("pressure") or {}
    if not isinstance(pressure_raw, Mapping):
        raise CapacityStatusError("status.capacity.pressure must be an object of condition -> number of nodes")
    pressure: dict[str, list[str]] = {}
    for kind, nodes in pressure_raw.items():
        if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 0:
            pressure[str(kind)] = _pressure_names(nodes)
        elif isinstance(nodes, list) and all(isinstance(n, str) for n in nodes):
            pressure[str(kind)] = list(nodes)
        else:
            raise CapacityStatusError(f"status.capacity.pressure[{kind}] must be a number of nodes")
    return RemoteResources(
        shareable=shareable,
        free_by_node=free_by_node,
        pressure=pressure,
        schedulable_nodes=_count(raw.get("schedulableNodes"), "status.capacity.schedulableNodes"),
        total_nodes=_count(raw.get("totalNodes"), "status.capacity.totalNodes"),
    )


def _resource_list(raw: object, field_name: str) -> ResourceList:
    try:
        return resources.parse_resource_list(raw)  # type: ignore[arg-type]
    except QuantityError as exc:
        raise CapacityStatusError(f"{field_name}: {exc}") from None


def _count(raw: object, field_name: str) -> int:
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise CapacityStatusError(f"{field_name} must be a non-negative integer, got {raw!r}")
    return raw
