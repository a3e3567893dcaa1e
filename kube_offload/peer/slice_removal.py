"""Slices no longer asked for (docs/slices.md "Removing a slice"): what they left in both
clusters as ``peer`` reads it, and the steps of
:func:`kube_offload.peering_plans.removed_slices`' plan carried out. The vkubelet keeps no
right to delete nodes: ``peer``, which removes the slice, deletes what its vkubelet made,
as the clusters' admin."""

from __future__ import annotations

import functools

from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload.peer.eviction import evict_pods
from kube_offload.peer.session import Context, wait
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError
from kube_offload.slice_requests import SliceLeftovers, SliceNode

ACTIONS = frozenset({p.CORDON_SLICE_NODES, p.EVICT_PODS, p.WAIT_SLICE_VKUBELETS_GONE, p.DELETE_SLICE_NODES,
                     p.DELETE_SLICE_SHADOWPODS, p.DELETE_OFFLOAD_SLICES})


def observe(ctx: Context, consumer_id: str, remote_cluster_id: str) -> SliceLeftovers:
    """What the slices of the peering left in both clusters, asked for or not."""
    rid = remote_cluster_id
    nodes = ctx.local.list_items(kinds.NODES, label_selector=(
        f"{c.LABEL_TYPE}={c.TYPE_VIRTUAL_NODE},{c.LABEL_CLUSTER_ID}={rid},{c.LABEL_SLICE}"))
    slice_nodes: dict[str, SliceNode] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        pods = ctx.local.list_items(kinds.PODS, field_selector=f"spec.nodeName={name}")
        slice_nodes[node["metadata"]["labels"][c.LABEL_SLICE]] = SliceNode(
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            pods=tuple(sorted(f"{x['metadata']['namespace']}/{x['metadata']['name']}" for x in pods)),
        )
    prefix = c.vkubelet_leader_lease_name(rid) + "-"
    leases = [x["metadata"]["name"] for x in ctx.local.list_items(kinds.LEASES, namespace=ctx.namespace)
              if x["metadata"]["name"].startswith(prefix)]
    origin = f"{c.LABEL_ORIGIN_CLUSTER_ID}={consumer_id}"
    asked = ctx.remote.list_items(kinds.OFFLOAD_SLICES, namespace=c.tenant_namespace(consumer_id), label_selector=origin)
    shadowpods: dict[str, list[str]] = {}
    for item in ctx.remote.list_items(kinds.SHADOWPODS, label_selector=f"{origin},{c.LABEL_SLICE}"):
        meta = item["metadata"]
        shadowpods.setdefault(meta["labels"][c.LABEL_SLICE], []).append(f"{meta['namespace']}/{meta['name']}")
    return SliceLeftovers(
        nodes=slice_nodes,
        leader_leases=tuple(sorted(leases)),
        offload_slices=tuple(sorted(x["metadata"]["name"] for x in asked)),
        shadowpods={name: tuple(sorted(keys)) for name, keys in shadowpods.items()},
    )


def carry_out(ctx: Context, consumer_id: str, step: p.Step) -> str:
    """One step of a slice's removal (one of :data:`ACTIONS`)."""
    local, remote = ctx.local, ctx.remote
    try:
        if step.action == p.CORDON_SLICE_NODES:
            for node in step.data["nodes"]:
                local.kube.patch(kinds.NODES, node, {"spec": {"unschedulable": True}})
            return "cordoned"
        if step.action == p.EVICT_PODS:
            return evict_pods(local, step.data["pods"], timeout=ctx.timeout, command="peer")
        if step.action == p.WAIT_SLICE_VKUBELETS_GONE:
            for name, selector in step.data["deployments"].items():
                wait(functools.partial(_vkubelet_gone, ctx, name, selector), timeout=ctx.timeout,
                     what=f"for Deployment {ctx.namespace}/{name} and its pods to go")
            return "stopped"
        if step.action == p.DELETE_SLICE_NODES:
            for node in step.data["nodes"]:
                local.delete(kinds.NODES, node)
                local.delete(kinds.LEASES, node, namespace=c.NODE_LEASE_NAMESPACE)
            for lease in step.data["leases"]:
                local.delete(kinds.LEASES, lease, namespace=ctx.namespace)
            for node in step.data["nodes"]:
                wait(functools.partial(_node_gone, ctx, node), timeout=ctx.timeout, what=f"for node {node} to go")
            return "deleted"
        if step.action == p.DELETE_SLICE_SHADOWPODS:
            selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={consumer_id},{c.LABEL_SLICE} in ({','.join(step.data['slices'])})"
            left = remote.list_items(kinds.SHADOWPODS, label_selector=selector)
            for item in left:
                remote.delete(kinds.SHADOWPODS, item["metadata"]["name"], namespace=item["metadata"]["namespace"])
            return f"deleted {len(left)}" if left else "none left"
        if step.action == p.DELETE_OFFLOAD_SLICES:
            for name in step.data["names"]:
                remote.delete(kinds.OFFLOAD_SLICES, name, namespace=c.tenant_namespace(consumer_id))
            return "deleted"
    except ApiError as exc:
        raise (local if step.description.startswith("local") else remote).error(exc) from None
    raise AssertionError(f"unknown slice removal step {step.action}")


def _vkubelet_gone(ctx: Context, deployment: str, selector: str) -> bool:
    """The Deployment goes first; the garbage collector then removes its ReplicaSet and
    pods, and only a pod that is gone has stopped its process (which would otherwise make
    its node again)."""
    local = ctx.local
    return (local.get(kinds.DEPLOYMENTS, deployment, namespace=ctx.namespace) is None
            and not local.list_items(kinds.REPLICA_SETS, namespace=ctx.namespace, label_selector=selector)
            and not local.list_items(kinds.PODS, namespace=ctx.namespace, label_selector=selector))


def _node_gone(ctx: Context, node: str) -> bool:
    return ctx.local.get(kinds.NODES, node) is None
