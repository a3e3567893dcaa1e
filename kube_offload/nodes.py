"""Facts about Node objects (plain API dicts) that the webhook and the extender share.

:func:`placement_allows` is the placement table of ARCHITECTURE.md applied to one node;
the webhook expresses the same table as node affinity (``affinity.policy_node_terms``),
and the scheduler extender calls this function as a filter, so that both agree.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.policy import NamespacePolicy


def _labels(node: Mapping[str, Any]) -> dict[str, Any]:
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return labels if isinstance(labels, dict) else {}


def node_name(node: Mapping[str, Any]) -> str:
    metadata = node.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


def is_virtual_node(node: Mapping[str, Any]) -> bool:
    return _labels(node).get(c.LABEL_TYPE) == c.TYPE_VIRTUAL_NODE


def slice_of(node: Mapping[str, Any]) -> str | None:
    """The slice a virtual node stands for (docs/slices.md); None for a peering's own node."""
    value = _labels(node).get(c.LABEL_SLICE) if is_virtual_node(node) else None
    return value if isinstance(value, str) and value else None


def cluster_id_of(node: Mapping[str, Any]) -> str | None:
    """The remote cluster id of a virtual node; None for physical nodes or a missing label."""
    if not is_virtual_node(node):
        return None
    cluster_id = _labels(node).get(c.LABEL_CLUSTER_ID)
    return cluster_id if isinstance(cluster_id, str) and cluster_id else None


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node reports condition Ready=True (Unknown and missing are not ready)."""
    status = node.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def placement_allows(policy: NamespacePolicy, node: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a pod of ``policy``'s namespace may run on ``node``; the reason when not.

    Readiness and remote capacity are deliberately not checked here: they are facts about
    the node at scheduling time, not about the policy (the extender checks them itself).
    """
    # The extender calls this for every virtual candidate of every pod: the names in the
    # reasons are only looked up for a refusal.
    labels = _labels(node)
    if labels.get(c.LABEL_TYPE) != c.TYPE_VIRTUAL_NODE:
        if policy.enabled and policy.placement == c.PLACEMENT_REMOTE:
            if policy.opt_in:
                return False, (
                    f"the pod opted in with runtimeClassName {c.RUNTIME_CLASS_OPT_IN}: "
                    f"node {node_name(node)} is not a virtual node"
                )
            return False, (
                f"namespace {policy.namespace} has {c.LABEL_POD_PLACEMENT}="
                f"{c.PLACEMENT_REMOTE}: node {node_name(node)} is not a virtual node"
            )
        return True, ""

    if policy.enabled and policy.placement != c.PLACEMENT_LOCAL and policy.cluster_selector.matches(labels):
        return True, ""
    where = f"virtual node {node_name(node)} (cluster {cluster_id_of(node) or 'unknown'})"
    if not policy.enabled:
        return False, (
            f"namespace {policy.namespace} is not offloaded ({c.LABEL_ENABLED}="
            f"{c.ENABLED_VALUE} is not set): {where} is excluded"
        )
    if policy.placement == c.PLACEMENT_LOCAL:
        return False, (
            f"namespace {policy.namespace} has {c.LABEL_POD_PLACEMENT}={c.PLACEMENT_LOCAL}: "
            f"{where} is excluded"
        )
    return False, (
        f"{where} does not match the cluster selector "
        f'"{policy.cluster_selector}" of namespace {policy.namespace}'
    )
