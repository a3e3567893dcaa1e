"""kube-scheduler's own node filters, as far as ``explain`` must say why a node is out (pure).

These are Kubernetes' rules, not kube-offload's (those are asked of the webhook and the
extender themselves): NodeUnschedulable, TaintToleration, NodeAffinity (``nodeSelector``
and required node affinity) and NodeResourcesFit, as kube-scheduler v1.37 applies them in
``pkg/scheduler/framework/plugins``. Only the filters a kube-offload user meets are here;
ports, volumes and inter-pod affinity are left to the scheduler's own FailedScheduling
Event, which ``explain`` shows beside this.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from kube_offload import constants as c
from kube_offload import resources
from kube_offload.affinity import term_matches
from kube_offload.nodes import node_name

# Effects the scheduler filters on; PreferNoSchedule only lowers a node's score.
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("spec"))


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return _mapping(_mapping(node.get("metadata")).get("labels"))


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``v1.Toleration.ToleratesTaint``: an empty effect or key matches every effect or key;
    ``Exists`` ignores the value, ``Equal`` (the default) compares it."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def describe_taint(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of ``node`` that ``pod`` does not tolerate."""
    tolerations = [t for t in _spec(pod).get("tolerations") or [] if isinstance(t, Mapping)]
    for taint in _spec(node).get("taints") or []:
        if not isinstance(taint, Mapping) or taint.get("effect") not in FILTERED_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def taints_allow(pod: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, str]:
    taint = untolerated_taint(pod, node)
    if taint is None:
        return True, ""
    why = f"untolerated taint {describe_taint(taint)}"
    if taint.get("key") == c.TAINT_PROVIDER_CORDONED_KEY:
        # Ours, and not to be tolerated: the provider would refuse the pod anyway.
        why += " (the provider cordons this cluster: Consumer spec.cordoned; the pods already there keep running)"
    elif taint.get("key") == c.TAINT_PROVIDER_DRAINING_KEY:
        why += (" (the provider drains this cluster: Consumer spec.drain; the pods there are evicted and "
                "recreated on local nodes, until the provider runs kube-offload undrain)")
    return False, why


def unschedulable_allows(pod: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, str]:
    """NodeUnschedulable: a cordoned node takes only pods tolerating its unschedulable taint."""
    if not _spec(node).get("unschedulable"):
        return True, ""
    tolerations = [t for t in _spec(pod).get("tolerations") or [] if isinstance(t, Mapping)]
    if any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations):
        return True, ""
    return False, "node is cordoned (spec.unschedulable)"


def required_node_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The pod's required nodeSelectorTerms; None when it requires none."""
    affinity = _mapping(_mapping(_spec(pod).get("affinity")).get("nodeAffinity"))
    required = affinity.get(_REQUIRED)
    if not isinstance(required, Mapping):
        return None
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]


def affinity_allows(pod: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, str]:
    """NodeAffinity: every ``nodeSelector`` label, and at least one required term (ORed)."""
    labels = _labels(node)
    for key, value in sorted(_mapping(_spec(pod).get("nodeSelector")).items()):
        if labels.get(key) != value:
            return False, f"nodeSelector {key}={value} does not match the node's labels"
    terms = required_node_terms(pod)
    if terms is None:
        return True, ""
    if any(term_matches(term, labels, node_name(dict(node))) for term in terms):
        return True, ""
    return False, "no required node-affinity term matches the node's labels"


def bound_pods_by_node(pods: Iterable[Mapping[str, Any]], *, exclude_uid: str = "") -> dict[str, list[Mapping[str, Any]]]:
    """Non-terminated pods grouped by ``spec.nodeName`` (the pod being explained left out,
    so a running pod is not counted against its own node)."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        bound = _spec(pod).get("nodeName")
        if not bound or resources.pod_is_terminated(pod):
            continue
        if exclude_uid and _mapping(pod.get("metadata")).get("uid") == exclude_uid:
            continue
        grouped.setdefault(str(bound), []).append(pod)
    return grouped


def resources_fit(requests: Mapping[str, int], node: Mapping[str, Any], bound: Iterable[Mapping[str, Any]]) -> tuple[bool, str]:
    """NodeResourcesFit: ``requests`` (``resources.pod_requests``) within the node's
    allocatable minus the requests of the pods bound to it. Raises ``QuantityError``."""
    free = resources.free_resources(resources.node_allocatable(node), bound)
    return resources.fits(requests, free)
