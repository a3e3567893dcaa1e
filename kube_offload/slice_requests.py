"""Resource slices, the consumer's half (pure): what a slice asks for and what its answer says.

A slice is a share of one provider *pool* (docs/slices.md): the consumer writes an
``OffloadSlice`` in its tenant namespace (spec: the pool and the resources wanted), the
provider's enforcer answers in its status (Accepted, PartiallyAccepted, Refused, with the
amounts accepted and the pool's suggested node labels), and the consumer shows the slice as
one virtual node sized from ``status.accepted``.

This module is shared by everything that speaks of slices on the consumer side: the
``--slice`` flag of ``kube-offload vkubelet`` and ``kube-offload peer`` (same grammar, same
messages), the virtual kubelet (the object it writes, the node it derives), and
``kubectl offload`` (what it shows). No I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import reasons, resources
from kube_offload.resources import QuantityError, ResourceList
from kube_offload.views import OffloadSliceView

# A pool name is a DNS label of at most 20 characters (the provider's CRD says so); a
# slice name the same, so that slice_node_name(kube-offload-<cluster id>, slice) stays a
# short, valid node name.
MAX_SLICE_NAME = 20
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Resource names: cpu, memory, pods, ephemeral-storage, or a qualified extended resource
# (nvidia.com/gpu); the API server's own rule, loosely: a name, optionally a DNS prefix.
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

SLICE_API_VERSION = f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}"
# The phases in which a slice's virtual node takes pods; in the others it is tainted
# (TAINT_SLICE_NOT_ACCEPTED) and offers nothing.
USABLE_PHASES = frozenset({c.SLICE_PHASE_ACCEPTED, c.SLICE_PHASE_PARTIAL})

FLAG_SYNTAX = "NAME=POOL:RESOURCE=QUANTITY[,RESOURCE=QUANTITY...]"
FLAG_EXAMPLE = "gpu=gpu:cpu=2,memory=4Gi,nvidia.com/gpu=1"


class SliceError(ValueError):
    """A slice request that does not parse; the message names the flag and the fix."""


@dataclass(frozen=True)
class SliceRequest:
    """One slice the consumer asks for: its name, the provider's pool, the resources."""

    name: str
    pool: str
    resources: Mapping[str, int]  # milli-units (kube_offload/resources.py)

    def resource_strings(self) -> dict[str, str]:
        """The resources as Kubernetes quantities, for the object's spec."""
        return resources.format_resource_list(self.resources)

    def flag_value(self) -> str:
        """The request written back in the flag's grammar (parse_slice(flag_value()) == self)."""
        pairs = ",".join(f"{name}={quantity}" for name, quantity in self.resource_strings().items())
        return f"{self.name}={self.pool}:{pairs}"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a slice or a pool (None: it can)."""
    if not name:
        return "is empty"
    if len(name) > MAX_SLICE_NAME:
        return f"is longer than {MAX_SLICE_NAME} characters"
    if not _DNS_LABEL.match(name):
        return "is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    return None


def parse_slice(text: str, *, flag: str = "--slice") -> SliceRequest:
    """``NAME=POOL:cpu=2,memory=4Gi,nvidia.com/gpu=1`` as a :class:`SliceRequest`; raises
    :class:`SliceError` naming ``flag``, what is wrong and the expected form."""

    def error(what: str) -> SliceError:
        return SliceError(f"{flag}={text!r}: {what}; expected {FLAG_SYNTAX}, e.g. {flag}={FLAG_EXAMPLE}")

    head, sep, tail = text.partition(":")
    if not sep:
        raise error("no ':' between the pool and the resources")
    name, sep, pool = head.partition("=")
    if not sep:
        raise error("no '=' between the slice name and the pool")
    name, pool = name.strip(), pool.strip()
    for what, value in (("slice name", name), ("pool", pool)):
        problem = name_problem(value)
        if problem:
            raise error(f"the {what} {value!r} {problem}")
    asked: ResourceList = {}
    for item in (part.strip() for part in tail.split(",")):
        if not item:
            continue
        resource, sep, quantity = item.partition("=")
        resource, quantity = resource.strip(), quantity.strip()
        if not sep or not resource or not quantity:
            raise error(f"{item!r} is not RESOURCE=QUANTITY")
        if not _RESOURCE_NAME.match(resource):
            raise error(f"{resource!r} is not a resource name (cpu, memory, pods, or an extended one such as nvidia.com/gpu)")
        if resource in asked:
            raise error(f"resource {resource} is given twice")
        try:
            amount = resources.parse_quantity(quantity)
        except QuantityError as exc:
            raise error(f"{resource}={quantity!r} is not a quantity ({exc})") from None
        if amount <= 0:
            raise error(f"{resource}={quantity} must be more than zero")
        if resource not in resources.FRACTIONAL_RESOURCES and amount % resources.MILLI:
            raise error(f"{resource}={quantity} must be a whole number (only cpu comes in fractions)")
        asked[resource] = amount
    if not asked:
        raise error("no resources asked for")
    return SliceRequest(name=name, pool=pool, resources=asked)


def parse_slices(values: list[str], *, flag: str = "--slice") -> list[SliceRequest]:
    """Every ``--slice`` of a command line; slice names must differ."""
    requests = [parse_slice(value, flag=flag) for value in values]
    seen: set[str] = set()
    for request in requests:
        if request.name in seen:
            raise SliceError(f"{flag}: slice {request.name!r} is given twice; give each slice a name of its own")
        seen.add(request.name)
    return requests


# ``--slice none`` of ``kube-offload peer``: no slice at all (no --slice keeps the release's).
NO_SLICES = "none"


def parse_slice_list(values: list[str], *, flag: str = "--slice") -> tuple[SliceRequest, ...] | None:
    """Every ``--slice`` of ``kube-offload peer``: None when none is given (keep what the
    release has), ``()`` for ``--slice none`` (remove them all)."""
    if not values:
        return None
    if NO_SLICES in values:
        if len(values) > 1:
            raise SliceError(f"{flag}={NO_SLICES} removes every slice of the peering: give it alone, or list only "
                             "the slices to keep (a slice left out is removed)")
        return ()
    return tuple(parse_slices(values, flag=flag))


def chart_values(requests: list[SliceRequest] | tuple[SliceRequest, ...]) -> list[dict[str, Any]]:
    """The local chart's ``remoteClusters[].slices`` for ``requests``."""
    return [{"name": s.name, "pool": s.pool, "resources": s.resource_strings()} for s in requests]


@dataclass(frozen=True)
class SliceNode:
    """A slice's virtual node, as ``kube-offload peer`` reads it."""

    unschedulable: bool = False
    pods: tuple[str, ...] = ()  # "namespace/name" of the pods bound to it


@dataclass(frozen=True)
class SliceLeftovers:
    """What the slices of one peering left in both clusters, asked for or not (``peer``
    removes what is no longer asked for, ``unpeer`` all of it; docs/slices.md)."""

    nodes: Mapping[str, SliceNode] = field(default_factory=dict)  # the slices' virtual nodes by slice name
    leader_leases: tuple[str, ...] = ()  # the leader-election Leases of the remote's vkubelets (names)
    offload_slices: tuple[str, ...] = ()  # our OffloadSlices on the provider (names)
    shadowpods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # slice -> "namespace/name" there


# --- the object the consumer writes ----------------------------------------------------------
def desired_slice(request: SliceRequest, *, namespace: str, local_cluster_id: str) -> dict[str, Any]:
    """The OffloadSlice asking for ``request`` in our tenant namespace ``namespace``. The
    origin label marks it ours, as on every object the vkubelet writes remotely."""
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": c.SLICE_KIND,
        "metadata": {
            "name": request.name,
            "namespace": namespace,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: local_cluster_id},
        },
        "spec": {"pool": request.pool, "resources": request.resource_strings()},
    }


def spec_differs(current: Mapping[str, Any], request: SliceRequest) -> bool:
    """Whether the OffloadSlice ``current`` asks for something else than ``request`` (then
    the vkubelet updates its spec: the flag is the consumer's source of truth)."""
    spec = current.get("spec") or {}
    if spec.get("pool") != request.pool:
        return True
    try:
        return resources.parse_resource_list(spec.get("resources") or {}) != dict(request.resources)
    except QuantityError:
        return True


# --- the provider's answer -----------------------------------------------------------------
@dataclass(frozen=True)
class SliceAnswer:
    """One reading of an OffloadSlice's status (what the provider decided)."""

    phase: str = c.SLICE_PHASE_PENDING
    accepted: Mapping[str, int] = field(default_factory=dict)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""
    message: str = ""
    # The status answers an older spec (observedGeneration < generation): the provider
    # has not decided the current request yet.
    stale: bool = False
    problems: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether the slice's node may take pods (accepted, fully or partly, and current)."""
        return self.phase in USABLE_PHASES and not self.stale


PENDING = SliceAnswer()


def read_answer(obj: Mapping[str, Any] | None) -> SliceAnswer:
    """The provider's answer in OffloadSlice ``obj`` (None: not created yet: Pending). An
    unreadable amount counts as nothing accepted, with a problem saying so: a node sized
    on a guess would attract pods the provider refuses."""
    if not obj:
        return PENDING
    view = OffloadSliceView(obj)
    phase = view.phase or c.SLICE_PHASE_PENDING
    problems: list[str] = []
    try:
        accepted = resources.parse_resource_list(view.accepted or {})
    except QuantityError as exc:
        accepted = {}
        problems.append(f"status.accepted does not parse ({exc}): the node offers nothing")
    labels = view.node_labels or {}
    node_labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    generation, observed = view.generation, view.observed_generation
    stale = generation is not None and observed is not None and observed < generation
    if phase not in USABLE_PHASES:
        accepted = {}
    return SliceAnswer(
        phase=phase,
        accepted=accepted,
        node_labels=node_labels,
        reason=view.reason,
        message=view.message,
        stale=stale,
        problems=tuple(problems),
    )


def node_capacity(answer: SliceAnswer, *, default_pods: int = 0) -> ResourceList:
    """The slice node's capacity: what the provider accepted, nothing while not usable. A
    stale answer keeps its accepted amounts out too (the provider may be shrinking it).

    A slice that does not ask for ``pods`` leaves the pod count unbounded by the slice (the
    provider counts pods against it only when accepted lists them), but a node without
    ``pods`` allocatable takes no pod at all: it then offers ``default_pods`` (milli-units;
    the caller passes what the peering's own node offers, the Consumer's quota included)."""
    if not answer.usable:
        return {"pods": 0}
    capacity = dict(answer.accepted)
    capacity.setdefault("pods", default_pods)
    return capacity


# The Event of each phase of a slice's answer, and whether it is a warning.
_DECISION_EVENTS: Mapping[str, tuple[str, bool]] = {
    c.SLICE_PHASE_ACCEPTED: (reasons.REASON_SLICE_ACCEPTED, False),
    c.SLICE_PHASE_PARTIAL: (reasons.REASON_SLICE_PARTIALLY_ACCEPTED, True),
    c.SLICE_PHASE_REFUSED: (reasons.REASON_SLICE_REFUSED, True),
    c.SLICE_PHASE_PENDING: (reasons.REASON_SLICE_PENDING, True),
}


@dataclass(frozen=True)
class DecisionEvent:
    """The Event that says a slice's answer (docs/slices.md "Events")."""

    reason: str
    warning: bool
    message: str


def decision_event(name: str, pool: str, phase: str, reason: str, message: str) -> DecisionEvent:
    """The Event for the provider's answer ``phase`` (``reason``, ``message``) to slice
    ``name`` of ``pool``: the same words on both sides of the peering."""
    event_reason, warning = _DECISION_EVENTS.get(phase, (reasons.REASON_SLICE_PENDING, True))
    text = f"slice {name} (pool {pool or '?'}) is {phase or c.SLICE_PHASE_PENDING}"
    if reason and reason != phase:
        text += f" ({reason})"
    if message:
        text += f": {message}"
    return DecisionEvent(event_reason, warning, text)


def not_accepted_message(name: str, answer: SliceAnswer) -> str:
    """Why the slice's node takes no pods (logs, Events, ``kubectl offload status``)."""
    if answer.stale:
        return f"slice {name}: the provider has not decided its current request yet ({answer.phase} is for an older one)"
    text = f"slice {name} is {answer.phase}"
    if answer.message:
        text += f": {answer.message}"
    return text
