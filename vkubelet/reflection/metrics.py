"""Reflection's figures, per resource type (bounded: the types reflection knows).

``kube_offload_reflection_operations_total{resource, operation}`` counts the writes that
reflection made (remote create / update / delete; for Events, local create / update; for
a custom resource kind, also ``status``: a status written back to the local object),
``kube_offload_reflection_errors_total{resource, reason}`` the objects it could not
reflect, by the reason of the Warning Event it recorded (ReflectionConflict: a remote
object of that name is not ours; ReflectionFailed: unreflectable or refused by the
remote API server; ProviderPolicyRefused: the provider's policy for us refuses it, so it
is not sent), ``kube_offload_reflection_events_dropped_total{bound}`` the remote Events
about offloaded pods dropped because a budget was spent (``object``: the pod's own,
``remote``: the remote cluster's). Failed reconciles (an unreachable API server...) are counted per
controller by the runtime (``kube_offload_reconciles_total{controller="reflect-..."}``).
"""

from __future__ import annotations

from prometheus_client import Counter

from kube_offload.runtime.http_metrics import NAMESPACE
from kube_offload.runtime.metrics import REGISTRY

OPERATION_CREATE = "create"
OPERATION_UPDATE = "update"
OPERATION_DELETE = "delete"

OPERATIONS = Counter(
    "reflection_operations",
    "Objects written by reflection, by resource type and operation (create, update, delete).",
    ["resource", "operation"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
ERRORS = Counter(
    "reflection_errors",
    "Objects reflection could not reflect, by resource type and the reason of the Warning "
    "Event recorded (ReflectionConflict, ReflectionFailed, ProviderPolicyRefused).",
    ["resource", "reason"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)


def wrote(resource: str, operation: str) -> None:
    OPERATIONS.labels(resource=resource, operation=operation).inc()


def failed(resource: str, reason: str) -> None:
    ERRORS.labels(resource=resource, reason=reason).inc()
EVENTS_DROPPED = Counter(
    "reflection_events_dropped",
    "Remote Events about offloaded pods not copied because a budget was spent (docs/reflection.md#events): "
    "bound=object, the pod's own; bound=remote, the remote cluster's, all its pods together.",
    ["bound"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)


def dropped_events(bound: str, count: int) -> None:
    EVENTS_DROPPED.labels(bound=bound).inc(count)
