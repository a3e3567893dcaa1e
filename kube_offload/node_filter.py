"""The scheduler extender's decisions, free of HTTP and of the API server: in the domain so
that ``kubectl offload explain`` asks the very functions the extender (extender/app.py) serves.

``filter_nodes`` applies to each candidate node what node affinity cannot express
(ARCHITECTURE.md, "The extender applies the same table as a filter"):

1. pods of namespaces that are not offloaded pass untouched: every node is kept;
2. the namespace's placement and cluster selector (``nodes.placement_allows``, the same
   table the webhook writes as affinity: defence in depth for pods it did not mutate);
3. a virtual node must be Ready;
4. a virtual node's remote cluster must have at least one node that fits the pod, per the
   capacity annotation its virtual kubelet publishes (docs/capacity-annotation.md);
5. a virtual node must not have handed back a pod of the same workload lately (its
   ``kube-offload.io/handed-back`` record of the pod's controller, kube_offload/handed_back.py:
   the remote could not run such a pod; the refusal grows on repeats).

``prioritize`` scores the nodes that passed, 0..10, by a strategy.

Both are pure functions of their arguments (the clock and the annotation decoder can be
passed in), so they are table-tested and benchmarked without HTTP.

Just over 400 lines, one module on purpose: it is the one answer to "may this pod go to
this node, and how good a place is it", which the extender serves and ``kubectl offload
explain`` repeats. Filter and prioritize read the same namespace policy lookup, the same
capacity reader (with its memo behind a lock) and the same verdict types; split, the
plugin would have to import the pieces back together to give the same answer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Container, Mapping, Sequence, Union

from kube_offload import capacity as cap
from kube_offload import constants as c
from kube_offload import handed_back
from kube_offload import resources
from kube_offload.nodes import is_virtual_node, node_is_ready, node_name, placement_allows, cluster_id_of
from kube_offload.namespace_policies import evaluate
from kube_offload.opt_in import pod_policy
from kube_offload.policy import NamespacePolicy, PolicyError, namespace_name
from kube_offload.times import format_time

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
MIN_EXTENDER_PRIORITY = 0

STRATEGY_PREFER_LOCAL = "prefer-local"
STRATEGY_PREFER_REMOTE = "prefer-remote"
STRATEGY_MOST_FREE_REMOTE = "most-free-remote"
STRATEGIES = (STRATEGY_PREFER_LOCAL, STRATEGY_PREFER_REMOTE, STRATEGY_MOST_FREE_REMOTE)
DEFAULT_STRATEGY = STRATEGY_PREFER_LOCAL

# Five missed refreshes of the virtual kubelet (it refreshes at least every 60 s).
DEFAULT_CAPACITY_MAX_AGE = 300.0

# Why a node was filtered out: the label values of the "filtered out" metric.
REASON_PLACEMENT = "placement"
REASON_NOT_READY = "not-ready"
REASON_CAPACITY = "capacity"
REASON_UNKNOWN_NODE = "unknown-node"
REASON_INVALID_POLICY = "invalid-policy"
REASON_HANDED_BACK = "handed-back"

# Why a virtual node was kept without a capacity check (see docs/capacity-annotation.md).
CAPACITY_MISSING = "missing"
CAPACITY_STALE = "stale"
CAPACITY_INVALID = "invalid"


@dataclass(frozen=True)
class InvalidPolicy:
    """The namespace is offloaded but its policy labels do not parse (created before the
    webhook validated them, or edited while it was down)."""

    namespace: str
    message: str


PolicyLookup = Union[NamespacePolicy, InvalidPolicy, None]
"""A namespace's policy; None when the namespace is unknown (treated as not offloaded)."""


def policy_lookup(name: str, entry: NamespacePolicy | PolicyError | None) -> PolicyLookup:
    """Namespace ``name``'s policy as the filter takes it: an invalid one as :class:`InvalidPolicy`."""
    if isinstance(entry, PolicyError):
        return InvalidPolicy(namespace=name, message=str(entry))
    return entry


def evaluate_policy(namespace: dict[str, Any]) -> PolicyLookup:
    """The policy a Namespace object gives its pods, as the filter takes it."""
    return policy_lookup(namespace_name(namespace), evaluate(namespace))


NodeLookup = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True)
class NodeFailure:
    reason: str  # one of the REASON_* values
    message: str  # for humans: ends up in the pod's FailedScheduling event
    unresolvable: bool  # True: preempting pods on that node cannot help


@dataclass
class FilterResult:
    passed: list[str] = field(default_factory=list)
    """Names of the nodes kept, in input order."""
    passed_nodes: list[dict[str, Any]] = field(default_factory=list)
    """Their Node objects when the input had them (not in NodeNames mode)."""
    failures: dict[str, NodeFailure] = field(default_factory=dict)
    capacity_unknown: dict[str, str] = field(default_factory=dict)
    """Virtual nodes kept without a capacity check, and why (CAPACITY_*)."""
    passthrough: bool = False
    """True when the namespace is not offloaded and nothing was checked."""

    @property
    def failed_nodes(self) -> dict[str, str]:
        return {name: f.message for name, f in self.failures.items() if not f.unresolvable}

    @property
    def unresolvable_nodes(self) -> dict[str, str]:
        return {name: f.message for name, f in self.failures.items() if f.unresolvable}


class CapacityReader:
    """Decodes capacity annotations once per distinct string.

    Every virtual node carries the same string until its virtual kubelet publishes a new
    one, and the scheduler asks about every pod: decoding once per string keeps the filter
    at dictionary-lookup cost. The memo is cleared when full rather than kept LRU: there
    are few virtual nodes, so it only fills when strings churn, and a clear is cheap.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self._max_entries = max_entries
        self._memo: dict[str, cap.RemoteCapacity | cap.CapacityError] = {}
        self._lock = threading.Lock()

    def read(self, text: str) -> cap.RemoteCapacity | cap.CapacityError:
        found = self._memo.get(text)
        if found is not None:
            return found
        try:
            found = cap.decode_remote_capacity(text)
        except cap.CapacityError as exc:
            found = exc
        with self._lock:
            if len(self._memo) >= self._max_entries:
                self._memo.clear()
            self._memo[text] = found
        return found


DEFAULT_READER = CapacityReader()


def _annotation(node: Mapping[str, Any], key: str) -> object:
    annotations = (node.get("metadata") or {}).get("annotations")
    return annotations.get(key) if isinstance(annotations, Mapping) else None


def pod_lookup(pod: Mapping[str, Any], policy: PolicyLookup) -> PolicyLookup:
    """The policy ``pod`` is held to, its namespace's being ``policy``: a pod that opts in
    with the kube-offload RuntimeClass gets Remote placement (kube_offload/opt_in.py), as
    the webhook gave it. Idempotent, so callers may apply it before filter/prioritize."""
    metadata = pod.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return pod_policy(pod, str(namespace or ""), policy)


def is_passthrough(policy: PolicyLookup) -> bool:
    """Pods of namespaces that are not offloaded are none of the extender's business."""
    if policy is None:
        return True
    return isinstance(policy, NamespacePolicy) and not policy.enabled


def filter_nodes(
    pod: Mapping[str, Any],
    nodes_or_names: Sequence[dict[str, Any]] | Sequence[str],
    policy: PolicyLookup,
    node_lookup: NodeLookup,
    *,
    now: datetime | None = None,
    capacity_max_age: float | None = DEFAULT_CAPACITY_MAX_AGE,
    reader: CapacityReader = DEFAULT_READER,
    virtual_names: Container[str] | None = None,
) -> FilterResult:
    """Keep the nodes ``pod`` may run on (see the module doc); every other node gets a
    reason. ``nodes_or_names`` are Node objects, or names resolved with ``node_lookup``
    (nodeCacheCapable mode). ``capacity_max_age`` (seconds, None = no limit) is when a
    capacity annotation counts as stale. ``virtual_names``, when the node cache keeps
    them, are the names of the virtual nodes ``node_lookup`` knows: a name not among them
    is a physical node without reading its labels. Raises ``resources.QuantityError`` for
    a pod with malformed requests.
    """
    result = FilterResult()
    policy = pod_lookup(pod, policy)
    if is_passthrough(policy):
        result.passthrough = True
        for item in nodes_or_names:
            if isinstance(item, str):
                result.passed.append(item)
            else:
                result.passed.append(node_name(item))
                result.passed_nodes.append(item)
        return result

    assert policy is not None  # no policy is a passthrough (is_passthrough), answered above
    requests = resources.pod_requests(pod)
    now = now or datetime.now(timezone.utc)
    # One verdict per distinct annotation string in this call: the fit check runs once
    # per remote summary, however many candidates carry it.
    verdicts: dict[str, tuple[NodeFailure | None, str | None]] = {}
    # Most candidates are physical nodes, and the verdict on a physical node depends on
    # the policy alone: judged once here, so each costs a label lookup (names mode at
    # 5,000 nodes is dominated by this loop).
    physical_verdict = _physical_verdict(policy)
    failures, keep, keep_node = result.failures, result.passed.append, result.passed_nodes.append

    for item in nodes_or_names:
        if isinstance(item, str):
            name = item
            node = node_lookup(name)
            if node is None:
                failures[name] = NodeFailure(
                    REASON_UNKNOWN_NODE,
                    "node not (yet) in the scheduler extender's node cache",  # no name: see _physical_verdict
                    unresolvable=False,
                )
                continue
            virtual = name in virtual_names if virtual_names is not None else is_virtual_node(node)
        else:
            node = item
            name = node_name(node)
            virtual = is_virtual_node(node)

        if not virtual:
            if physical_verdict is not None:
                failures[name] = physical_verdict
                continue
        else:
            failure, unknown = _judge_virtual(node, name, policy, requests, now, capacity_max_age, reader, verdicts)
            if failure is None:
                failure = _handback_verdict(node, name, pod, now)
            if failure is not None:
                failures[name] = failure
                continue
            if unknown is not None:
                result.capacity_unknown[name] = unknown
        keep(name)
        if node is item:
            keep_node(node)
    return result


def _physical_verdict(policy: NamespacePolicy | InvalidPolicy) -> NodeFailure | None:
    """Why a physical node is refused under ``policy``, or None when it is kept."""
    if isinstance(policy, InvalidPolicy):
        # Physical nodes stay usable: a typo in a label must not stop the namespace's pods
        # from running locally, while nothing goes remote until the policy is fixed.
        return None
    if policy.enabled and policy.placement == c.PLACEMENT_REMOTE:
        # kube-scheduler counts identical reasons ("4990 node(s) ..."); a node name in
        # the text would make thousands of distinct lines in the pod's event.
        return NodeFailure(
            REASON_PLACEMENT,
            (f"the pod opted in with runtimeClassName {c.RUNTIME_CLASS_OPT_IN}: not a virtual node"
             if policy.opt_in else
             f"namespace {policy.namespace} has {c.LABEL_POD_PLACEMENT}={policy.placement}: not a virtual node"),
            unresolvable=True,
        )
    return None


def _judge_virtual(
    node: dict[str, Any],
    name: str,
    policy: NamespacePolicy | InvalidPolicy,
    requests: Mapping[str, int],
    now: datetime,
    capacity_max_age: float | None,
    reader: CapacityReader,
    verdicts: dict[str, tuple[NodeFailure | None, str | None]],
) -> tuple[NodeFailure | None, str | None]:
    """(failure or None, why capacity was not checked or None) for one virtual node."""
    if isinstance(policy, InvalidPolicy):
        return NodeFailure(
            REASON_INVALID_POLICY,
            f"namespace {policy.namespace} has an invalid offloading policy, so no virtual node "
            f"is allowed: {policy.message}",
            unresolvable=True,
        ), None

    allowed, why = placement_allows(policy, node)
    if not allowed:
        return NodeFailure(REASON_PLACEMENT, why, unresolvable=True), None
    if not node_is_ready(node):
        cluster = cluster_id_of(node) or "unknown"
        return NodeFailure(
            REASON_NOT_READY,
            f"virtual node {name} (cluster {cluster}) is not Ready: its remote cluster is unreachable",
            unresolvable=True,
        ), None

    text = _annotation(node, c.ANNOTATION_REMOTE_CAPACITY)
    if not isinstance(text, str):
        return None, CAPACITY_MISSING
    cached = verdicts.get(text)
    if cached is None:
        cached = _capacity_verdict(text, requests, now, capacity_max_age, reader)
        verdicts[text] = cached
    failure, unknown = cached
    if failure is not None:
        cluster = cluster_id_of(node) or "unknown"
        failure = NodeFailure(
            failure.reason, f"virtual node {name} (cluster {cluster}): {failure.message}", failure.unresolvable
        )
    return failure, unknown


def _handback_verdict(node: dict[str, Any], name: str, pod: Mapping[str, Any], now: datetime) -> NodeFailure | None:
    """A virtual node that handed back a pod of this pod's workload, while that lasts."""
    record = handed_back.refused_until(node, pod, now)
    if record is None:
        return None
    cluster = cluster_id_of(node) or "unknown"
    # Unresolvable: preempting pods on the virtual node does not make the remote run it.
    return NodeFailure(
        REASON_HANDED_BACK,
        f"virtual node {name} (cluster {cluster}) handed back a pod of this workload "
        f"({record.reason}, {record.count} time(s)); refused until {format_time(record.until)}",
        unresolvable=True,
    )


def _capacity_verdict(
    text: str,
    requests: Mapping[str, int],
    now: datetime,
    capacity_max_age: float | None,
    reader: CapacityReader,
) -> tuple[NodeFailure | None, str | None]:
    summary = reader.read(text)
    if isinstance(summary, cap.CapacityError):
        return None, CAPACITY_INVALID
    if capacity_max_age is not None and summary.age_seconds(now) > capacity_max_age:
        return None, CAPACITY_STALE
    fits, why = cap.remote_fit(requests, summary)
    if fits:
        return None, None
    # Resolvable: preempting pods already bound to the virtual node frees remote room.
    return NodeFailure(REASON_CAPACITY, why, unresolvable=False), None


# --- prioritize ----------------------------------------------------------------------------
def prioritize(
    pod: Mapping[str, Any],
    nodes: Sequence[dict[str, Any]] | Sequence[str],
    policy: PolicyLookup,
    strategy: str,
    *,
    node_lookup: NodeLookup | None = None,
    now: datetime | None = None,
    capacity_max_age: float | None = DEFAULT_CAPACITY_MAX_AGE,
    reader: CapacityReader = DEFAULT_READER,
) -> list[tuple[str, int]]:
    """(node name, score 0..10) for each node, in input order.

    - ``prefer-local``: physical nodes 10, virtual nodes 0;
    - ``prefer-remote``: virtual nodes 10, physical nodes 0;
    - ``most-free-remote``: physical nodes 0, virtual nodes 1..10 by the free cpu and
      memory of their remote cluster relative to the freest candidate (the capacity
      annotation's total when fresh, else the virtual node's allocatable).

    Pods of namespaces that are not offloaded (or whose policy is invalid) get 0
    everywhere, leaving the choice to the scheduler's own scoring. Names that
    ``node_lookup`` cannot resolve score 0.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    policy = pod_lookup(pod, policy)
    resolved: list[tuple[str, dict[str, Any] | None]] = []
    for item in nodes:
        if isinstance(item, str):
            resolved.append((item, node_lookup(item) if node_lookup else None))
        else:
            resolved.append((node_name(item), item))
    if is_passthrough(policy) or isinstance(policy, InvalidPolicy):
        return [(name, MIN_EXTENDER_PRIORITY) for name, _ in resolved]

    if strategy == STRATEGY_MOST_FREE_REMOTE:
        return _most_free_remote(resolved, now or datetime.now(timezone.utc), capacity_max_age, reader)
    virtual_score = MAX_EXTENDER_PRIORITY if strategy == STRATEGY_PREFER_REMOTE else MIN_EXTENDER_PRIORITY
    physical_score = MAX_EXTENDER_PRIORITY - virtual_score
    return [
        (name, MIN_EXTENDER_PRIORITY if node is None else virtual_score if is_virtual_node(node) else physical_score)
        for name, node in resolved
    ]


_FREE_RESOURCES_SCORED = ("cpu", "memory")


def _most_free_remote(
    resolved: list[tuple[str, dict[str, Any] | None]],
    now: datetime,
    capacity_max_age: float | None,
    reader: CapacityReader,
) -> list[tuple[str, int]]:
    free_of: dict[str, Mapping[str, int]] = {}
    for name, node in resolved:
        if node is not None and is_virtual_node(node):
            free_of[name] = _remote_free(node, now, capacity_max_age, reader)
    peaks = {
        resource: max((free.get(resource, 0) for free in free_of.values()), default=0)
        for resource in _FREE_RESOURCES_SCORED
    }
    scored = [r for r in _FREE_RESOURCES_SCORED if peaks[r] > 0]
    scores = []
    for name, _ in resolved:
        free = free_of.get(name)
        if free is None:
            scores.append((name, MIN_EXTENDER_PRIORITY))
            continue
        share = sum(max(0, free.get(r, 0)) / peaks[r] for r in scored) / len(scored) if scored else 0.0
        # 1..10, never 0, so that any allowed virtual node still beats a physical one.
        scores.append((name, 1 + int(share * (MAX_EXTENDER_PRIORITY - 1))))
    return scores


def _remote_free(
    node: dict[str, Any], now: datetime, capacity_max_age: float | None, reader: CapacityReader
) -> Mapping[str, int]:
    text = _annotation(node, c.ANNOTATION_REMOTE_CAPACITY)
    if isinstance(text, str):
        summary = reader.read(text)
        if not isinstance(summary, cap.CapacityError) and (
            capacity_max_age is None or summary.age_seconds(now) <= capacity_max_age
        ):
            return summary.total
    try:
        return resources.node_allocatable(node)
    except resources.QuantityError:
        return {}
