"""``kube-offload unpeer``: observe both clusters, plan (:func:`kube_offload.peering_plans.plan_unpeer`),
print the plan, carry it out: drain and remove the virtual node locally, then leave
nothing of the consumer on the remote."""

from __future__ import annotations

import argparse

from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload import peering_plans as plans
from kube_offload.peer import gateway as gw
from kube_offload.peer import slice_removal
from kube_offload.peer.eviction import evict_pods
from kube_offload.peer.session import Context, execute, open_context, run_command, say, wait
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError


def observe_unpeer(ctx: Context, options: p.UnpeerOptions) -> p.UnpeerState:
    local, remote = ctx.local, ctx.remote
    node = local.get(kinds.NODES, p.node_name(options.remote_cluster_id))
    pods = local.list_items(kinds.PODS,
                            field_selector=f"spec.nodeName={p.node_name(options.remote_cluster_id)}")
    vkubelet_pods = local.list_items(kinds.PODS, namespace=ctx.namespace,
                                     label_selector=_vkubelet_selector(options))
    secret = local.get(kinds.SECRETS, p.kubeconfig_secret_name(options.remote_cluster_id), namespace=ctx.namespace)
    tenant = c.tenant_namespace(options.local_cluster_id)
    requests = remote.list_items(kinds.TWIN_NAMESPACES, namespace=tenant)
    origin = remote.list_items(kinds.NAMESPACES,
                               label_selector=f"{c.LABEL_ORIGIN_CLUSTER_ID}={options.local_cluster_id}")
    ours = [n for n in origin if ((n["metadata"].get("labels") or {}).get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER)]
    consumer = remote.get(kinds.CONSUMERS, options.local_cluster_id)
    slices = slice_removal.observe(ctx, options.local_cluster_id, options.remote_cluster_id)
    return p.UnpeerState(
        node_exists=node is not None,
        node_unschedulable=bool(((node or {}).get("spec") or {}).get("unschedulable")),
        pods_on_node=sorted(f"{x['metadata']['namespace']}/{x['metadata']['name']}" for x in pods),
        local_release=ctx.local_helm.release(options.local_release),
        vkubelet_pods=sorted(x["metadata"]["name"] for x in vkubelet_pods),
        kubeconfig_secret_exists=secret is not None,
        twin_requests=sorted(r["metadata"]["name"] for r in requests),
        twin_namespaces=sorted(n["metadata"]["name"] for n in ours),
        foreign_namespaces=sorted(n["metadata"]["name"] for n in origin if n not in ours),
        remote_release=ctx.remote_helm.release(options.remote_release),
        tenant_namespace_exists=remote.get(kinds.NAMESPACES, tenant) is not None,
        consumer_exists=consumer is not None,
        consumer_service_account_exists=remote.get(kinds.SERVICE_ACCOUNTS, c.CONSUMER_SERVICE_ACCOUNT, namespace=tenant) is not None,
        local_gateway_objects=gw.objects_of(local, ctx.namespace, p.local_gateway_name(options)),
        remote_gateway_objects=gw.objects_of(remote, ctx.namespace, p.remote_gateway_name(options)),
        slices=slices,
    )


def _vkubelet_selector(options: p.UnpeerOptions) -> str:
    # The local chart's selector labels of one remote's vkubelet Deployment.
    return (f"app.kubernetes.io/instance={options.local_release},app.kubernetes.io/component=vkubelet,"
            f"{c.LABEL_CLUSTER_ID}={options.remote_cluster_id}")


class UnpeerRun:
    def __init__(self, ctx: Context, options: p.UnpeerOptions) -> None:
        self.ctx = ctx
        self.options = options

    def do(self, step: p.Step) -> str:
        ctx, options = self.ctx, self.options
        local, remote = ctx.local, ctx.remote
        node = p.node_name(options.remote_cluster_id)
        tenant = c.tenant_namespace(options.local_cluster_id)
        try:
            if step.action == p.CORDON_NODE:
                local.kube.patch(kinds.NODES, node, {"spec": {"unschedulable": True}})
                return "cordoned"
            if step.action == p.EVICT_PODS:
                return evict_pods(local, step.data["pods"], timeout=ctx.timeout, command="unpeer")
            if step.action == p.LOCAL_RELEASE:
                release = ctx.local_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                                 wait=False, timeout=ctx.timeout)
                return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
            if step.action == p.WAIT_VKUBELET_GONE:
                name = step.data["name"]
                selector = _vkubelet_selector(options)
                # The Deployment goes first; the garbage collector then removes its
                # ReplicaSet and pod, and only a pod that is gone has stopped its process.
                wait(
                    lambda: local.get(kinds.DEPLOYMENTS, name, namespace=ctx.namespace) is None
                    and not local.list_items(kinds.REPLICA_SETS, namespace=ctx.namespace, label_selector=selector)
                    and not local.list_items(kinds.PODS, namespace=ctx.namespace, label_selector=selector),
                    timeout=ctx.timeout,
                    what=f"for Deployment {ctx.namespace}/{name} and its pods to go",
                )
                return "stopped"
            if step.action == p.DELETE_KUBECONFIG_SECRET:
                local.delete(kinds.SECRETS, step.data["name"], namespace=ctx.namespace)
                return "deleted"
            if step.action in (p.CORDON_SLICE_NODES, p.WAIT_SLICE_VKUBELETS_GONE, p.DELETE_SLICE_NODES):
                return slice_removal.carry_out(ctx, options.local_cluster_id, step)
            if step.action == p.DELETE_NODE:
                local.delete(kinds.NODES, node)
                local.delete(kinds.LEASES, node, namespace=c.NODE_LEASE_NAMESPACE)
                local.delete(kinds.LEASES, c.vkubelet_leader_lease_name(options.remote_cluster_id), namespace=ctx.namespace)
                wait(lambda: local.get(kinds.NODES, node) is None, timeout=ctx.timeout, what=f"for node {node} to go")
                return "deleted"
            if step.action == p.DELETE_GATEWAY_OBJECTS:
                gw.delete_objects(local, ctx.namespace, step.data["local"])
                gw.delete_objects(remote, ctx.namespace, step.data["remote"])
                return "deleted"
            if step.action == p.DELETE_TWIN_REQUESTS:
                for name in step.data["names"]:
                    remote.delete(kinds.TWIN_NAMESPACES, name, namespace=tenant)
                return "deleted"
            if step.action == p.REVOKE_CONSUMER:
                return self._revoke(step.data["namespace"], step.data["name"])
            if step.action == p.DELETE_TWIN_NAMESPACES:
                for name in step.data["names"]:
                    remote.delete(kinds.NAMESPACES, name)
                return "deleted"
            if step.action == p.WAIT_TWINS_GONE:
                wait(self._twins_gone, timeout=ctx.timeout, what=f"for the twin namespaces of {options.local_cluster_id} to go",
                      hint=f"the enforcer removes them; is it running? (`kubectl -n {ctx.namespace} get deploy` on the remote)")
                return "gone"
            if step.action == p.REMOTE_RELEASE:
                release = ctx.remote_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                                  wait=False, timeout=ctx.timeout)
                return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
            if step.action == p.DELETE_CONSUMER:
                if step.data.get("consumer"):
                    remote.delete(kinds.CONSUMERS, options.local_cluster_id)
                if step.data.get("namespace"):
                    remote.delete(kinds.NAMESPACES, tenant)
                return "deleted"
            if step.action == p.WAIT_CONSUMER_GONE:
                wait(
                    lambda: remote.get(kinds.CONSUMERS, options.local_cluster_id) is None
                    and remote.get(kinds.NAMESPACES, tenant) is None,
                    timeout=ctx.timeout,
                    what=f"for Consumer {options.local_cluster_id} and namespace {tenant} to go",
                )
                return "gone"
            if step.action == p.NOTE:
                return ""
        except ApiError as exc:
            raise (local if step.description.startswith("local") else remote).error(exc) from None
        raise AssertionError(f"unknown unpeer step {step.action}")

    def _revoke(self, namespace: str, name: str) -> str:
        """Delete the consumer's ServiceAccount and wait until it is gone: the API server
        refuses a bound token whose ServiceAccount no longer exists (or is another one of
        the same name, by uid), so every copy of the consumer's kubeconfig dies with it."""
        remote = self.ctx.remote
        account = remote.get(kinds.SERVICE_ACCOUNTS, name, namespace=namespace)
        if account is None:
            return "already gone"
        remote.delete(kinds.SERVICE_ACCOUNTS, name, namespace=namespace)
        wait(lambda: remote.get(kinds.SERVICE_ACCOUNTS, name, namespace=namespace) is None, timeout=self.ctx.timeout,
             what=f"for ServiceAccount {namespace}/{name} to go")
        return f"revoked: ServiceAccount {namespace}/{name} (uid {account['metadata'].get('uid')}) deleted; its tokens are refused"

    def _twins_gone(self) -> bool:
        remote, options = self.ctx.remote, self.options
        requests = remote.list_items(kinds.TWIN_NAMESPACES, namespace=c.tenant_namespace(options.local_cluster_id))
        namespaces = remote.list_items(kinds.NAMESPACES, label_selector=(
            f"{c.LABEL_ORIGIN_CLUSTER_ID}={options.local_cluster_id},{c.LABEL_MANAGED_BY}={c.MANAGED_BY_ENFORCER}"))
        return not requests and not namespaces


def run_unpeer(args: argparse.Namespace) -> int:
    return run_command("unpeer", args, _unpeer)


def _unpeer(args: argparse.Namespace) -> int:
    ctx = open_context(args)
    options = p.UnpeerOptions(
        local_cluster_id=args.local_cluster_id,
        remote_cluster_id=args.remote_cluster_id,
        remote_chart=ctx.remote_chart,
        local_chart=ctx.local_chart,
        namespace=args.namespace,
        local_release=args.local_release,
        remote_release=args.remote_release,
    )
    steps = plans.plan_unpeer(observe_unpeer(ctx, options), options)
    say(plans.render_plan(steps, title=f"unpeer {options.local_cluster_id} -> {options.remote_cluster_id}"))
    if args.dry_run:
        say("dry run: nothing was changed")
        return 0
    execute(steps, UnpeerRun(ctx, options).do)
    say(f"unpeered: nothing of consumer {options.local_cluster_id} is left in {options.remote_cluster_id}"
         if plans.changes(steps) else "not peered: nothing changed")
    return 0


