"""``kube-offload peer``: observe both clusters, plan (:func:`kube_offload.peering_plans.plan_peer`),
print the plan, carry it out."""

from __future__ import annotations

import argparse
import base64
import time
from dataclasses import dataclass
from typing import Any, Mapping

import yaml

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload import fabric as fb
from kube_offload import peering_plans as plans
from kube_offload.peer import gateway as gw
from kube_offload.peer.api import Cluster
from kube_offload.peer.errors import CommandError
from kube_offload.peer import slice_removal
from kube_offload.peer.inputs import pod_security_level, policy_grants, read_policy_file, read_values_files, remote_endpoint
from kube_offload.peer.session import Context, execute, open_context, run_command, say, wait
from kube_offload.runtime.flags import appended
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError
from kube_offload.slice_requests import SliceRequest
from kube_offload.times import now_time


def _b64(data: Mapping[str, str] | None, key: str) -> bytes | None:
    value = (data or {}).get(key)
    return base64.b64decode(value) if value else None


@dataclass(frozen=True)
class PeerFlags:
    """The flags of ``peer`` that need no cluster, and the files they name, read and checked
    before anything else (Helm, the charts, the kubeconfigs): a mistake in one is the first
    thing reported, naming the flag and the fix."""

    quota: Mapping[str, str] | None
    pod_security_level: str | None
    node_labels: Mapping[str, str] | None
    slices: tuple[SliceRequest, ...] | None
    policy: Mapping[str, Any] | None
    policy_grants: Mapping[tuple[str, str], tuple[str, ...]]
    local_values: Mapping[str, Any]
    remote_values: Mapping[str, Any]
    gateway: p.GatewayOptions | None


def check_flags(args: argparse.Namespace) -> PeerFlags:
    labels = appended(args, "--node-label")
    return PeerFlags(
        quota=p.parse_quota(args.quota) if args.quota else None,
        pod_security_level=pod_security_level(args.pod_security_level),
        node_labels=p.parse_node_labels(labels) if labels else None,
        slices=p.parse_slice_flags(appended(args, "--slice")),
        policy=read_policy_file(args.policy_file),
        policy_grants=policy_grants(args),
        local_values=read_values_files(appended(args, "--local-values"), "--local-values"),
        remote_values=read_values_files(appended(args, "--remote-values"), "--remote-values"),
        gateway=gateway_options(args),
    )


def peer_options(args: argparse.Namespace, ctx: Context, flags: PeerFlags) -> p.PeerOptions:
    server, ca_pem = remote_endpoint(ctx.remote_kubeconfig, args.remote_context)
    return p.PeerOptions(
        local_cluster_id=args.local_cluster_id,
        remote_cluster_id=args.remote_cluster_id,
        remote_server=p.pod_reachable_server(args.remote_server, server),
        remote_ca_pem=ca_pem,
        remote_chart=ctx.remote_chart,
        local_chart=ctx.local_chart,
        namespace=args.namespace,
        local_release=args.local_release,
        remote_release=args.remote_release,
        quota=flags.quota,
        pod_security_level=flags.pod_security_level,
        node_labels=flags.node_labels,
        slices=flags.slices,
        policy=flags.policy,
        policy_grants=flags.policy_grants,
        local_values=flags.local_values,
        remote_values=flags.remote_values,
        wait=bool(args.wait),
        token_expiration_seconds=int(args.token_expiration),
        gateway=flags.gateway,
    )


def gateway_options(args: argparse.Namespace) -> p.GatewayOptions | None:
    """--gateway and its flags, checked before any cluster is read."""
    cidr_flags = ("local_pod_cidr", "local_pod_cidr_remapped", "remote_pod_cidr", "remote_pod_cidr_remapped")
    given = [name for name in cidr_flags if getattr(args, name)]
    if not args.gateway:
        if given or args.gateway_endpoint or args.local_gateway_endpoint or args.rotate_gateway_keys:
            raise p.PeeringError("--local-pod-cidr, --remote-pod-cidr (and -remapped), --gateway-endpoint, --local-gateway-endpoint "
                                 "and --rotate-gateway-keys configure kube-offload's gateway: add --gateway (docs/networking.md)")
        return None
    missing = [f"--{name.replace('_', '-')}" for name in cidr_flags if name not in given]
    if missing:
        raise p.PeeringError(f"--gateway needs the four CIDRs of the pair: {', '.join(missing)} missing "
                             "(the pod CIDR of each cluster and a free range of the same size under which the other "
                             "reaches it; docs/networking.md)")
    try:
        cidrs = fb.FabricCIDRs.parse(local=args.local_pod_cidr, local_remapped=args.local_pod_cidr_remapped,
                                     remote=args.remote_pod_cidr, remote_remapped=args.remote_pod_cidr_remapped)
    except fb.FabricError as exc:
        raise p.PeeringError(str(exc)) from None
    return p.GatewayOptions(cidrs=cidrs, remote_endpoint=gw.check_endpoint(args.gateway_endpoint, "--gateway-endpoint"),
                            local_endpoint=gw.check_endpoint(args.local_gateway_endpoint, "--local-gateway-endpoint"),
                            rotate_keys=bool(args.rotate_gateway_keys))


def read_root_ca(remote: Cluster, consumer_id: str) -> bytes | None:
    """The remote cluster's CA as kube-controller-manager publishes it in every namespace
    (here the consumer's tenant namespace); None until it has."""
    configmap = remote.get(kinds.CONFIG_MAPS, p.ROOT_CA_CONFIGMAP, namespace=c.tenant_namespace(consumer_id))
    ca = ((configmap or {}).get("data") or {}).get("ca.crt")
    return ca.encode() if ca else None


def request_token(remote: Cluster, consumer_id: str, expiration_seconds: int) -> bt.Grant:
    """A bound token for the consumer's ServiceAccount (TokenRequest, as the provider's admin)."""
    try:
        answer = remote.kube.create(kinds.SERVICE_ACCOUNTS, bt.request_body(c.CONSUMER_SERVICE_ACCOUNT, expiration_seconds),
                                    namespace=c.tenant_namespace(consumer_id), subresource="token")
    except ApiError as exc:
        raise remote.error(exc) from None
    try:
        return bt.grant_from_response(answer, time.time())
    except ValueError as exc:
        raise CommandError(f"remote: {exc}") from None


def read_kubeconfig_secret(local: Cluster, namespace: str, remote_cluster_id: str) -> tuple[bool, dict[str, Any] | None]:
    secret = local.get(kinds.SECRETS, p.kubeconfig_secret_name(remote_cluster_id), namespace=namespace)
    if secret is None:
        return False, None
    raw = _b64(secret.get("data"), p.KUBECONFIG_KEY)
    try:
        return True, (yaml.safe_load(raw) if raw else None)
    except yaml.YAMLError:
        return True, None  # not a kubeconfig: rewrite it


def node_is_ready(node: dict[str, Any] | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)


def observe_peer(ctx: Context, options: p.PeerOptions) -> p.PeerState:
    tenant = c.tenant_namespace(options.local_cluster_id)
    legacy = ctx.remote.get(kinds.SECRETS, p.LEGACY_TOKEN_SECRET, namespace=tenant)
    secret_exists, kubeconfig = read_kubeconfig_secret(ctx.local, ctx.namespace, options.remote_cluster_id)
    deployment = ctx.local.get(
        kinds.DEPLOYMENTS, p.vkubelet_deployment_name(options.local_release, options.remote_cluster_id), namespace=ctx.namespace
    )
    node = ctx.local.get(kinds.NODES, p.node_name(options.remote_cluster_id))
    return p.PeerState(
        remote_release=ctx.remote_helm.release(options.remote_release),
        legacy_token_secret_exists=legacy is not None,
        remote_ca_pem=read_root_ca(ctx.remote, options.local_cluster_id),
        kubeconfig_secret=kubeconfig,
        kubeconfig_secret_exists=secret_exists,
        local_release=ctx.local_helm.release(options.local_release),
        vkubelet_deployed=deployment is not None,
        node_ready=node_is_ready(node),
        now=time.time(),
        consumer_service_account_exists=ctx.remote.get(kinds.SERVICE_ACCOUNTS, c.CONSUMER_SERVICE_ACCOUNT, namespace=tenant) is not None,
        local_gateway=gw.observe_side(ctx.local, ctx.namespace, p.local_gateway_name(options)),
        remote_gateway=gw.observe_side(ctx.remote, ctx.namespace, p.remote_gateway_name(options)),
        slices=slice_removal.observe(ctx, options.local_cluster_id, options.remote_cluster_id),
    )


class PeerRun:
    """Carries out a peer plan, step by step."""

    def __init__(self, ctx: Context, options: p.PeerOptions) -> None:
        self.ctx = ctx
        self.options = options
        self.grant: bt.Grant | None = None
        self.secret_changed = False

    def do(self, step: p.Step) -> str:
        ctx, options = self.ctx, self.options
        if step.action == p.REMOTE_RELEASE:
            release = ctx.remote_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                              wait=options.wait, timeout=ctx.timeout)
            return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
        if step.action == p.DELETE_LEGACY_TOKEN:
            ctx.remote.delete(kinds.SECRETS, step.data["name"], namespace=c.tenant_namespace(options.local_cluster_id))
            return "deleted (no long-lived token is left)"
        if step.action == p.REQUEST_TOKEN:
            self.grant = request_token(ctx.remote, options.local_cluster_id, step.data["expiration_seconds"])
            return f"token valid until {bt.rfc3339(self.grant.lifetime.expires)}"
        if step.action == p.KUBECONFIG_SECRET:
            return self._write_secret(step.data["name"])
        if step.action == p.LOCAL_RELEASE:
            release = ctx.local_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                             wait=options.wait, timeout=ctx.timeout)
            return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
        if step.action == p.RESTART_VKUBELET:
            if not self.secret_changed:
                return "kubeconfig unchanged, not restarted"
            patch = {"spec": {"template": {"metadata": {"annotations": {
                p.RESTARTED_AT_ANNOTATION: now_time()}}}}}
            try:
                ctx.local.kube.patch(kinds.DEPLOYMENTS, step.data["name"], patch, namespace=ctx.namespace)
            except ApiError as exc:
                raise ctx.local.error(exc) from None
            return "restarted"
        if step.action == p.GATEWAY_OBJECTS:
            local = gw.write_objects(ctx.local, ctx.namespace, p.local_gateway_name(options), options.remote_cluster_id,
                                     step.data["local"])
            remote = gw.write_objects(ctx.remote, ctx.namespace, p.remote_gateway_name(options), options.local_cluster_id,
                                      step.data["remote"])
            return f"{local}; {remote}"
        if step.action == p.ROTATE_GATEWAY_KEYS:
            gw.drop_key(ctx.local, ctx.namespace, p.local_gateway_name(options))
            gw.drop_key(ctx.remote, ctx.namespace, p.remote_gateway_name(options))
            return "both keys dropped: each gateway makes a new pair"
        if step.action == p.GATEWAY_PEERS:
            return gw.exchange(ctx, options, step.data["previous"])
        if step.action in slice_removal.ACTIONS:
            return slice_removal.carry_out(ctx, options.local_cluster_id, step)
        if step.action == p.WAIT_NODE_READY:
            node = p.node_name(options.remote_cluster_id)
            deployment = p.vkubelet_deployment_name(options.local_release, options.remote_cluster_id)
            wait(
                lambda: node_is_ready(ctx.local.get(kinds.NODES, node)),
                timeout=ctx.timeout,
                what=f"for node {node} to be Ready",
                hint=f"see `kubectl -n {ctx.namespace} logs deploy/{deployment}`",
            )
            return f"node {node} is Ready"
        raise AssertionError(f"unknown peer step {step.action}")

    def _write_secret(self, name: str) -> str:
        ctx, options = self.ctx, self.options
        grant = self.grant
        assert grant is not None, "the plan requests a token before it writes the kubeconfig"
        ca_pem = options.remote_ca_pem or wait(
            lambda: read_root_ca(ctx.remote, options.local_cluster_id),
            timeout=ctx.timeout,
            what=f"for ConfigMap {c.tenant_namespace(options.local_cluster_id)}/{p.ROOT_CA_CONFIGMAP} (the remote cluster's CA)",
            hint="the remote kubeconfig names no CA; is kube-controller-manager running on the remote cluster?",
        )
        desired = plans.desired_kubeconfig(options, grant.token, ca_pem)
        exists, _ = read_kubeconfig_secret(ctx.local, ctx.namespace, options.remote_cluster_id)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": ctx.namespace,
                "labels": {"app.kubernetes.io/managed-by": p.PEER_MANAGER, c.LABEL_CLUSTER_ID: options.remote_cluster_id},
                "annotations": bt.secret_annotations(grant),
            },
            "data": {p.KUBECONFIG_KEY: base64.b64encode(yaml.safe_dump(desired).encode()).decode()},
        }
        try:
            if ctx.local.get(kinds.NAMESPACES, ctx.namespace) is None:
                ctx.local.kube.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctx.namespace}})
            if exists:
                ctx.local.kube.replace(kinds.SECRETS, body, namespace=ctx.namespace)
            else:
                ctx.local.kube.create(kinds.SECRETS, body, namespace=ctx.namespace)
        except ApiError as exc:
            raise ctx.local.error(exc) from None
        self.secret_changed = True
        return "updated" if exists else "created"


def run_peer(args: argparse.Namespace) -> int:
    return run_command("peer", args, _peer)


def _peer(args: argparse.Namespace) -> int:
    flags = check_flags(args)  # before Helm, the charts and the clusters are looked for
    ctx = open_context(args)
    options = peer_options(args, ctx, flags)
    steps = plans.plan_peer(observe_peer(ctx, options), options)
    title = f"peer {options.local_cluster_id} -> {options.remote_cluster_id}"
    say(plans.render_plan(steps, title=title))
    if args.dry_run:
        say("dry run: nothing was changed")
        return 0
    execute(steps, PeerRun(ctx, options).do)
    node = p.node_name(options.remote_cluster_id)
    if plans.changes(steps):
        say(f"peered: pods of {options.local_cluster_id} can run on {options.remote_cluster_id} through node {node}; "
             f"offload a namespace with `kubectl label namespace NAME {c.LABEL_ENABLED}={c.ENABLED_VALUE}`")
    else:
        say("already peered: nothing changed")
    return 0


