"""The plans of ``kube-offload peer`` and ``kube-offload unpeer`` (pure): from what both
clusters hold now (:class:`~kube_offload.peering.PeerState`,
:class:`~kube_offload.peering.UnpeerState`) and what the user asked for, the list of steps
to take, each saying in one line what it does and whether it changes anything; the
consumer's kubeconfig they compare and write. The vocabulary they read (options, state,
actions, names, values) is :mod:`kube_offload.peering`'s; nothing there reads back.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping, Sequence

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import fabric as fb
from kube_offload.peering import (
    CORDON_NODE,
    CORDON_SLICE_NODES,
    DELETE_OFFLOAD_SLICES,
    DELETE_SLICE_NODES,
    DELETE_SLICE_SHADOWPODS,
    WAIT_SLICE_VKUBELETS_GONE,
    ChartRef,
    DELETE_CONSUMER,
    DELETE_GATEWAY_OBJECTS,
    DELETE_KUBECONFIG_SECRET,
    DELETE_LEGACY_TOKEN,
    DELETE_NODE,
    DELETE_TWIN_NAMESPACES,
    DELETE_TWIN_REQUESTS,
    EVICT_PODS,
    GATEWAY_OBJECTS,
    GATEWAY_PEERS,
    GatewayOptions,
    GatewaySide,
    KUBECONFIG_SECRET,
    LEGACY_TOKEN_SECRET,
    LOCAL_RELEASE,
    NOTE,
    PeerOptions,
    PeerState,
    REMOTE_RELEASE,
    REQUEST_TOKEN,
    RESTART_VKUBELET,
    REVOKE_CONSUMER,
    ROTATE_GATEWAY_KEYS,
    Release,
    Step,
    UnpeerOptions,
    UnpeerState,
    WAIT_CONSUMER_GONE,
    WAIT_NODE_READY,
    WAIT_TWINS_GONE,
    WAIT_VKUBELET_GONE,
    consumer_username,
    has_consumer,
    has_remote,
    kubeconfig_secret_name,
    local_gateway_name,
    local_values_with_remote,
    local_values_without_remote,
    remote_gateway_name,
    remote_values_with_consumer,
    remote_values_without_consumer,
    node_name,
    vkubelet_deployment_name,
)


def _entry(values: Mapping[str, Any], list_key: str, key: str, wanted: str) -> dict[str, Any]:
    return next((dict(e) for e in values.get(list_key) or [] if e.get(key) == wanted), {})


def _release_is_current(release: Release | None, chart: ChartRef, values: Mapping[str, Any]) -> bool:
    return (
        release is not None
        and release.status == "deployed"
        and release.chart == chart.label
        and _normalized(release.values) == _normalized(values)
    )


def _normalized(values: Mapping[str, Any]) -> Any:
    """Values compared as Helm sees them: an empty map or list equals an absent key."""
    if isinstance(values, Mapping):
        return {k: _normalized(v) for k, v in values.items() if v not in (None, {}, [])}
    if isinstance(values, list):
        return [_normalized(v) for v in values]
    return values


def _release_verb(release: Release | None, chart: ChartRef, namespace: str, name: str) -> str:
    if release is None:
        return f"install chart {chart.label} as release {name} in namespace {namespace}"
    why = []
    if release.status != "deployed":
        why.append(f"it is {release.status}")
    if release.chart != chart.label:
        why.append(f"from {release.chart}")
    suffix = f" ({'; '.join(why)})" if why else ""
    return f"upgrade release {namespace}/{name} (revision {release.revision}) to {chart.label}{suffix}"


def _describe_consumer(entry: Mapping[str, Any]) -> str:
    parts = [f"pod security {entry.get('podSecurityLevel') or c.DEFAULT_PSA_LEVEL}"]
    quota = entry.get("quota") or {}
    parts.append("quota " + (", ".join(f"{k}={v}" for k, v in sorted(quota.items())) if quota else "none"))
    labels = entry.get("nodeLabels") or {}
    if labels:
        parts.append("node labels " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    grants = _policy_grants(entry.get("policy"))
    if grants:
        parts.append("policy " + ", ".join(grants))
    return "; ".join(parts)


def _policy_grants(policy: Any) -> list[str]:
    """The keys of a spec.policy that are set, as ``section.key=value`` (what differs from
    nothing: the defaults apply to the rest)."""
    if not isinstance(policy, Mapping):
        return []
    out = []
    for section, fields in sorted(policy.items()):
        if isinstance(fields, Mapping):
            for key, value in sorted(fields.items()):
                shown = "+".join(map(str, value)) if isinstance(value, list) else str(value)
                out.append(f"{section}.{key}={shown or 'none'}")
        else:
            out.append(f"{section}={fields}")
    return out


def _names(entries: Any, key: str) -> str:
    return ", ".join(str(e.get(key)) for e in entries or []) or "none"


# --- the consumer's kubeconfig --------------------------------------------------------------
def consumer_kubeconfig(*, server: str, ca_pem: bytes, token: str, remote_cluster_id: str, local_cluster_id: str) -> dict[str, Any]:
    """The kubeconfig a virtual kubelet uses in the remote cluster: its server and CA,
    the consumer ServiceAccount's token, nothing else."""
    user = f"{c.CONSUMER_SERVICE_ACCOUNT}-{local_cluster_id}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": remote_cluster_id, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": remote_cluster_id, "context": {"cluster": remote_cluster_id, "user": user}}],
        "current-context": remote_cluster_id,
    }


def desired_kubeconfig(options: PeerOptions, token: str, ca_pem: bytes) -> dict[str, Any]:
    return consumer_kubeconfig(
        server=options.remote_server,
        ca_pem=options.remote_ca_pem or ca_pem,
        token=token,
        remote_cluster_id=options.remote_cluster_id,
        local_cluster_id=options.local_cluster_id,
    )


def token_renewal_reason(kubeconfig: Mapping[str, Any] | None, now: float, fraction: float) -> str | None:
    """Why the stored kubeconfig needs a new token, or None while its token is good. The
    virtual kubelet renews its own token at ``fraction`` of its lifetime; one found past
    that point here was not renewed (the virtual kubelet was down, or is failing)."""
    token = bt.kubeconfig_token(kubeconfig)
    if token is None:
        return "it holds no token"
    lifetime = bt.lifetime(token)
    if lifetime is None:
        return "it holds a token that never expires (a long-lived token Secret's)"
    if lifetime.expired(now):
        return f"its token expired at {bt.rfc3339(lifetime.expires)}"
    if now >= lifetime.renew_at(fraction):
        return f"its token is due for renewal (expires {bt.rfc3339(lifetime.expires)})"
    return None


def _kubeconfig_differs(state: PeerState, options: PeerOptions) -> bool:
    """Whether the stored kubeconfig differs from the desired one in anything but the
    token (server, CA, names): then the virtual kubelet must restart to use it."""
    current = state.kubeconfig_secret
    ca_pem = options.remote_ca_pem or state.remote_ca_pem
    if current is None or ca_pem is None or bt.kubeconfig_token(current) is None:
        return True
    return bt.with_token(desired_kubeconfig(options, "", ca_pem), "") != bt.with_token(current, "")


# --- peer -----------------------------------------------------------------------------------
def plan_peer(state: PeerState, options: PeerOptions) -> list[Step]:
    """The steps that take the pair from ``state`` to peered as ``options`` say."""
    steps: list[Step] = []
    consumer_id, rid, ns = options.local_cluster_id, options.remote_cluster_id, options.namespace
    tenant = c.tenant_namespace(consumer_id)

    gateway = options.gateway
    if gateway is not None:
        # Before the releases: a gateway reads them as it starts.
        local_data, remote_data = gateway.cidrs.local_gateway(), gateway.cidrs.remote_gateway()
        if _gateway_objects_differ(state.local_gateway, local_data) or _gateway_objects_differ(state.remote_gateway, remote_data):
            steps.append(Step(
                GATEWAY_OBJECTS,
                f"local+remote: write the gateways' ConfigMaps {ns}/{local_gateway_name(options)} (pods "
                f"{gateway.cidrs.local_pod_cidr} seen remotely as {gateway.cidrs.local_pod_cidr_remapped}) and "
                f"{ns}/{remote_gateway_name(options)} (pods {gateway.cidrs.remote_pod_cidr} seen locally as "
                f"{gateway.cidrs.remote_pod_cidr_remapped}), and their key Secrets if missing (each gateway makes its own key)",
                data={"local": local_data, "remote": remote_data},
            ))

    remote_values = remote_values_with_consumer(state.remote_release.values if state.remote_release else {}, options)
    current = _release_is_current(state.remote_release, options.remote_chart, remote_values)
    # A long-lived token Secret left by an older chart: the upgrade removes it (and
    # brings the RBAC by which the virtual kubelet renews its bound token).
    legacy = state.legacy_token_secret_exists
    revoked = state.remote_release is not None and not state.consumer_service_account_exists
    if not current or legacy or revoked:
        admitted = "admit" if not has_consumer(state.remote_release, consumer_id) else "update"
        entry = _entry(remote_values, "consumers", "name", consumer_id)
        why = ""
        if current and legacy:
            why = "; replaces the long-lived token Secret by bound tokens"
        elif current:
            why = f"; recreates ServiceAccount {tenant}/{c.CONSUMER_SERVICE_ACCOUNT} (revoked: a new identity)"
        steps.append(Step(
            REMOTE_RELEASE,
            f"remote: {_release_verb(state.remote_release, options.remote_chart, ns, options.remote_release)}{why}; "
            f"{admitted} consumer {consumer_id} ({_describe_consumer(entry)}); consumers: {_names(remote_values['consumers'], 'name')}",
            data={"values": remote_values, "release": options.remote_release, "chart": options.remote_chart.path, "version": options.remote_chart.version},
        ))
    if legacy:
        steps.append(Step(
            DELETE_LEGACY_TOKEN,
            f"remote: delete Secret {tenant}/{LEGACY_TOKEN_SECRET} if still there: a token that never expires "
            "(the virtual kubelet uses a bound token from now on)",
            data={"name": LEGACY_TOKEN_SECRET},
        ))

    secret = kubeconfig_secret_name(rid)
    differs = _kubeconfig_differs(state, options)
    why_token = token_renewal_reason(state.kubeconfig_secret, state.now, options.renew_fraction)
    if revoked:
        why_token = "its token's ServiceAccount was deleted (revoked)"
    if differs or why_token:
        hours = options.token_expiration_seconds / 3600
        steps.append(Step(
            REQUEST_TOKEN,
            f"remote: request a bound token for {consumer_username(consumer_id)} valid {hours:g}h "
            "(TokenRequest; the API server may shorten it)",
            data={"expiration_seconds": options.token_expiration_seconds},
        ))
        how = "create" if not state.kubeconfig_secret_exists else "update"
        reason = "" if not state.kubeconfig_secret_exists else f" ({why_token})" if why_token and not differs else ""
        steps.append(Step(
            KUBECONFIG_SECRET,
            f"local: {how} Secret {ns}/{secret}: a kubeconfig for {options.remote_server} as {consumer_username(consumer_id)}{reason}",
            data={"name": secret},
        ))

    local_values = local_values_with_remote(state.local_release.values if state.local_release else {}, options)
    removed = removed_slices(state, options, local_values)
    before_release, after_release = _slice_removal(state, options, removed)
    steps += before_release
    if not _release_is_current(state.local_release, options.local_chart, local_values):
        added = "add" if not has_remote(state.local_release, rid) else "keep"
        steps.append(Step(
            LOCAL_RELEASE,
            f"local: {_release_verb(state.local_release, options.local_chart, ns, options.local_release)}; "
            f"{added} remote cluster {rid} (a virtual kubelet for node {c.virtual_node_name(rid)}); "
            f"remoteClusters: {_names(local_values['remoteClusters'], 'id')}",
            data={"values": local_values, "release": options.local_release, "chart": options.local_chart.path, "version": options.local_chart.version},
        ))

    steps += after_release

    if (differs or legacy) and state.kubeconfig_secret_exists and state.vkubelet_deployed:
        # The virtual kubelet follows a new token in its Secret as it runs; a new server
        # or CA it reads only at start-up, and one of a version before bound tokens reads
        # nothing after start-up (its long-lived token dies with the legacy Secret).
        deployment = vkubelet_deployment_name(options.local_release, rid)
        steps.append(Step(
            RESTART_VKUBELET,
            f"local: restart Deployment {ns}/{deployment}, so the virtual kubelet reads its new kubeconfig",
            data={"name": deployment},
        ))

    if gateway is not None:
        if gateway.rotate_keys:
            steps.append(Step(
                ROTATE_GATEWAY_KEYS,
                f"local+remote: drop the keys of gateways {local_gateway_name(options)} and {remote_gateway_name(options)}: "
                "each makes a new pair in its own cluster",
            ))
        if gateway.rotate_keys or not _gateways_peered(state, gateway):
            steps.append(Step(
                GATEWAY_PEERS,
                "local+remote: wait for both gateways' public keys, then give each the other's key and endpoint "
                f"(remote gateway at {gateway.remote_endpoint or 'its Service'}, local gateway at "
                f"{gateway.local_endpoint or 'its Service'})",
                data={"previous": {"local": (state.local_gateway.config or {}).get(fb.PUBLIC_KEY, ""),
                                   "remote": (state.remote_gateway.config or {}).get(fb.PUBLIC_KEY, "")}},
            ))

    if options.wait:
        steps.append(Step(WAIT_NODE_READY, f"local: wait until node {c.virtual_node_name(rid)} is Ready", changes=False))
    return steps


def slice_deployment_name(local_release: str, remote_cluster_id: str, slice_name: str) -> str:
    """The local chart's vkubelet Deployment of one slice (charts/kube-offload-local/templates/vkubelet.yaml)."""
    return f"{vkubelet_deployment_name(local_release, remote_cluster_id)}-{slice_name}"


def slice_vkubelet_selector(local_release: str, remote_cluster_id: str, slice_name: str) -> str:
    """The chart's selector labels of one slice's vkubelet pods."""
    return (f"app.kubernetes.io/instance={local_release},app.kubernetes.io/component=vkubelet,"
            f"{c.LABEL_SLICE_NODE}={c.slice_node_name(node_name(remote_cluster_id), slice_name)}")


def _slice_names(values: Mapping[str, Any], remote_cluster_id: str) -> set[str]:
    entry = _entry(values, "remoteClusters", "id", remote_cluster_id)
    return {str(s.get("name")) for s in entry.get("slices") or [] if isinstance(s, Mapping) and s.get("name")}


def removed_slices(state: PeerState, options: PeerOptions, local_values: Mapping[str, Any]) -> list[str]:
    """The slices of this peering that the local values about to be installed no longer
    ask for, but that left something behind: in the release as it is, a virtual node, our
    OffloadSlice on the provider, ShadowPods there. Sorted."""
    rid = options.remote_cluster_id
    kept = _slice_names(local_values, rid)
    released = _slice_names(state.local_release.values, rid) if state.local_release else set()
    found = released | set(state.slices.nodes) | set(state.slices.offload_slices) | set(state.slices.shadowpods)
    return sorted(found - kept)


def _slice_removal(state: PeerState, options: PeerOptions, removed: Sequence[str]) -> tuple[list[Step], list[Step]]:
    """The steps that remove ``removed`` slices: before the local release's upgrade, their
    nodes cordoned and their pods evicted while their vkubelets still run (each deletes its
    pods' ShadowPods, then the pods); after it, once those vkubelets have stopped, what
    they made and nobody else deletes (docs/slices.md "Removing a slice")."""
    if not removed:
        return [], []
    rid, ns, release = options.remote_cluster_id, options.namespace, options.local_release
    nodes = {name: c.slice_node_name(c.virtual_node_name(rid), name) for name in removed}
    present = [name for name in removed if name in state.slices.nodes]
    before: list[Step] = []
    cordon = [nodes[name] for name in present if not state.slices.nodes[name].unschedulable]
    if cordon:
        before.append(Step(CORDON_SLICE_NODES, f"local: cordon node(s) {', '.join(cordon)} of removed slice(s) "
                                               "(no new pods are scheduled there)", data={"nodes": cordon}))
    pods = sorted(pod for name in present for pod in state.slices.nodes[name].pods)
    if pods:
        shown = ", ".join(pods[:5]) + (" ..." if len(pods) > 5 else "")
        before.append(Step(
            EVICT_PODS,
            f"local: evict the {len(pods)} pod(s) on the removed slices' node(s) and wait until they are gone "
            f"(their controllers recreate them elsewhere): {shown}",
            data={"pods": pods},
        ))
    after = [Step(
        WAIT_SLICE_VKUBELETS_GONE,
        f"local: wait until the virtual kubelets of removed slice(s) {', '.join(removed)} have stopped "
        f"(Deployment(s) {', '.join(slice_deployment_name(release, rid, name) for name in removed)})",
        changes=False,
        data={"deployments": {slice_deployment_name(release, rid, name): slice_vkubelet_selector(release, rid, name)
                              for name in removed}},
    )]
    leases = [c.vkubelet_leader_lease_name(rid, name) for name in removed
              if c.vkubelet_leader_lease_name(rid, name) in state.slices.leader_leases]
    if present or leases:
        what = [f"node(s) {', '.join(nodes[name] for name in present)} (with their Leases in kube-node-lease)"] if present else []
        if leases:
            what.append(f"leader-election Lease(s) {', '.join(f'{ns}/{lease}' for lease in leases)}")
        after.append(Step(DELETE_SLICE_NODES, f"local: delete {' and '.join(what)}",
                          data={"nodes": [nodes[name] for name in present], "leases": leases}))
    orphans = [name for name in removed if state.slices.shadowpods.get(name) or (name in present and state.slices.nodes[name].pods)]
    if orphans:
        after.append(Step(
            DELETE_SLICE_SHADOWPODS,
            f"remote: delete the ShadowPods of removed slice(s) {', '.join(orphans)} still there once their virtual "
            "kubelets have stopped (no one else would: their local pods are gone)",
            data={"slices": orphans},
        ))
    asked = [name for name in removed if name in state.slices.offload_slices]
    if asked:
        after.append(Step(
            DELETE_OFFLOAD_SLICES,
            f"remote: delete OffloadSlice(s) {', '.join(asked)} in {c.tenant_namespace(options.local_cluster_id)} "
            "(what they held of the consumer's quota goes back to its other slices)",
            data={"names": asked},
        ))
    return before, after


def _gateway_objects_differ(side: GatewaySide, data: Mapping[str, str]) -> bool:
    return side.config is None or not side.key_secret_exists or any(side.config.get(k) != v for k, v in data.items())


def _gateways_peered(state: PeerState, gateway: GatewayOptions) -> bool:
    """Whether each gateway already holds the other's current public key and the endpoint
    asked for (an endpoint read from a Service is kept once written)."""
    local, remote = state.local_gateway.config or {}, state.remote_gateway.config or {}
    local_key, remote_key = local.get(fb.PUBLIC_KEY), remote.get(fb.PUBLIC_KEY)
    if not local_key or not remote_key:
        return False
    if local.get(fb.PEER_PUBLIC_KEY) != remote_key or remote.get(fb.PEER_PUBLIC_KEY) != local_key:
        return False
    if not local.get(fb.PEER_ENDPOINT) or (gateway.remote_endpoint and local.get(fb.PEER_ENDPOINT) != gateway.remote_endpoint):
        return False
    return not (gateway.local_endpoint and remote.get(fb.PEER_ENDPOINT) != gateway.local_endpoint)


# --- unpeer ---------------------------------------------------------------------------------
def plan_unpeer(state: UnpeerState, options: UnpeerOptions) -> list[Step]:
    """The steps that leave nothing of the pair: the local side first (no new pods, pods
    back to their controllers, no more virtual kubelet), then the remote side (twin
    namespaces with everything in them, then the consumer's identity)."""
    steps: list[Step] = []
    consumer_id, rid, ns = options.local_cluster_id, options.remote_cluster_id, options.namespace
    node = c.virtual_node_name(rid)
    tenant = c.tenant_namespace(consumer_id)

    if state.node_exists and not state.node_unschedulable:
        steps.append(Step(CORDON_NODE, f"local: cordon node {node} (no new pods are scheduled there)"))
    slices = sorted(_slice_names(state.local_release.values, rid) | set(state.slices.nodes) if state.local_release
                    else set(state.slices.nodes))
    slice_nodes = {name: c.slice_node_name(node, name) for name in slices}
    cordon = [slice_nodes[name] for name, found in sorted(state.slices.nodes.items()) if not found.unschedulable]
    if cordon:
        steps.append(Step(CORDON_SLICE_NODES, f"local: cordon the slices' node(s) {', '.join(cordon)} "
                                              "(no new pods are scheduled there)", data={"nodes": cordon}))
    pods = [*state.pods_on_node, *sorted(pod for found in state.slices.nodes.values() for pod in found.pods)]
    if pods:
        shown = ", ".join(pods[:5]) + (" ..." if len(pods) > 5 else "")
        where = f"{node} and its slices' nodes" if any(found.pods for found in state.slices.nodes.values()) else node
        steps.append(Step(
            EVICT_PODS,
            f"local: evict the {len(pods)} pod(s) on {where} and wait until they are gone "
            f"(their controllers recreate them elsewhere): {shown}",
            data={"pods": pods},
        ))
    deployment = vkubelet_deployment_name(options.local_release, rid)
    if has_remote(state.local_release, rid):
        assert state.local_release is not None
        values = local_values_without_remote(state.local_release.values, rid)
        steps.append(Step(
            LOCAL_RELEASE,
            f"local: {_release_verb(state.local_release, options.local_chart, ns, options.local_release)} without remote "
            f"cluster {rid} (removes Deployment {deployment}); remoteClusters left: {_names(values['remoteClusters'], 'id')}",
            data={"values": values, "release": options.local_release, "chart": options.local_chart.path, "version": options.local_chart.version},
        ))
    if has_remote(state.local_release, rid) or state.vkubelet_pods:
        steps.append(Step(
            WAIT_VKUBELET_GONE,
            f"local: wait until the virtual kubelet of {rid} has stopped (pods of Deployment {ns}/{deployment})",
            changes=False,
            data={"name": deployment},
        ))
    if slices:
        release = options.local_release
        steps.append(Step(
            WAIT_SLICE_VKUBELETS_GONE,
            f"local: wait until the virtual kubelets of slice(s) {', '.join(slices)} have stopped",
            changes=False,
            data={"deployments": {slice_deployment_name(release, rid, name): slice_vkubelet_selector(release, rid, name)
                                  for name in slices}},
        ))
    if state.kubeconfig_secret_exists:
        steps.append(Step(DELETE_KUBECONFIG_SECRET, f"local: delete Secret {ns}/{kubeconfig_secret_name(rid)}",
                          data={"name": kubeconfig_secret_name(rid)}))
    if state.node_exists:
        steps.append(Step(DELETE_NODE, f"local: delete node {node} (its Leases go with it)", data={"name": node}))
    leases = [c.vkubelet_leader_lease_name(rid, name) for name in slices
              if c.vkubelet_leader_lease_name(rid, name) in state.slices.leader_leases]
    if state.slices.nodes or leases:
        steps.append(Step(
            DELETE_SLICE_NODES,
            f"local: delete the slices' node(s) {', '.join(slice_nodes[name] for name in sorted(state.slices.nodes)) or 'none'} "
            f"and Lease(s) {', '.join(leases) or 'none'}",
            data={"nodes": [slice_nodes[name] for name in sorted(state.slices.nodes)], "leases": leases},
        ))
    if state.local_gateway_objects or state.remote_gateway_objects:
        # After the local release stopped the local gateway; the remote one stops with the
        # consumer's removal below and takes its link and rules with it either way.
        steps.append(Step(
            DELETE_GATEWAY_OBJECTS,
            f"local+remote: delete the gateways' objects (their keys go with them): "
            f"{', '.join([*(f'local {o}' for o in state.local_gateway_objects), *(f'remote {o}' for o in state.remote_gateway_objects)])}",
            data={"local": list(state.local_gateway_objects), "remote": list(state.remote_gateway_objects)},
        ))

    if state.consumer_service_account_exists:
        # Explicit, not left to the release upgrade below: the identity goes first, so
        # nothing holding one of its tokens (a copy of the kubeconfig) acts any more.
        steps.append(Step(
            REVOKE_CONSUMER,
            f"remote: revoke the consumer's identity: delete ServiceAccount {tenant}/{c.CONSUMER_SERVICE_ACCOUNT} "
            f"(every token issued to {consumer_username(consumer_id)} is refused from then on)",
            data={"namespace": tenant, "name": c.CONSUMER_SERVICE_ACCOUNT},
        ))
    if state.twin_requests:
        steps.append(Step(
            DELETE_TWIN_REQUESTS,
            f"remote: delete the {len(state.twin_requests)} TwinNamespace request(s) in {tenant} "
            f"(the enforcer deletes each twin namespace with its ShadowPods, pods and reflected objects): "
            f"{', '.join(state.twin_requests)}",
            data={"names": list(state.twin_requests)},
        ))
    orphans = sorted(set(state.twin_namespaces) - set(state.twin_requests))
    if orphans:
        steps.append(Step(
            DELETE_TWIN_NAMESPACES,
            f"remote: delete twin namespace(s) of {consumer_id} whose request is already gone: {', '.join(orphans)}",
            data={"names": orphans},
        ))
    if state.twin_requests or state.twin_namespaces:
        steps.append(Step(
            WAIT_TWINS_GONE,
            f"remote: wait until the twin namespaces of {consumer_id} and their requests are gone",
            changes=False,
        ))
    for name in state.foreign_namespaces:
        steps.append(Step(
            NOTE,
            f"remote: namespace {name} carries {c.LABEL_ORIGIN_CLUSTER_ID}={consumer_id} but the enforcer did not make it; "
            "left alone (delete it yourself if it is this consumer's)",
            changes=False,
        ))

    if has_consumer(state.remote_release, consumer_id):
        assert state.remote_release is not None
        values = remote_values_without_consumer(state.remote_release.values, consumer_id)
        steps.append(Step(
            REMOTE_RELEASE,
            f"remote: {_release_verb(state.remote_release, options.remote_chart, ns, options.remote_release)} without "
            f"consumer {consumer_id} (removes Consumer {consumer_id}, namespace {tenant}, its ServiceAccount and RBAC); "
            f"consumers left: {_names(values['consumers'], 'name')}",
            data={"values": values, "release": options.remote_release, "chart": options.remote_chart.path, "version": options.remote_chart.version},
        ))
    elif state.consumer_exists or state.tenant_namespace_exists:
        # Admitted by hand (not through this release's values): remove what is there.
        what = []
        if state.consumer_exists:
            what.append(f"Consumer {consumer_id}")
        if state.tenant_namespace_exists:
            what.append(f"namespace {tenant}")
        steps.append(Step(
            DELETE_CONSUMER,
            f"remote: delete {' and '.join(what)} (not managed by release {ns}/{options.remote_release})",
            data={"consumer": state.consumer_exists, "namespace": state.tenant_namespace_exists},
        ))
    if has_consumer(state.remote_release, consumer_id) or state.consumer_exists or state.tenant_namespace_exists:
        steps.append(Step(
            WAIT_CONSUMER_GONE,
            f"remote: wait until Consumer {consumer_id} and namespace {tenant} are gone",
            changes=False,
        ))
    return steps


def changes(steps: Sequence[Step]) -> list[Step]:
    return [step for step in steps if step.changes]


def render_plan(steps: Sequence[Step], *, title: str) -> str:
    """The plan as printed: one numbered line per step, waits and notes marked."""
    changing = changes(steps)
    if not changing:
        head = f"{title}: nothing to change"
    else:
        head = f"{title}: {len(changing)} change(s)"
    lines = [head]
    for index, step in enumerate(steps, 1):
        marker = "" if step.changes else ("(note) " if step.action == NOTE else "(check) ")
        lines.append(f"  {index}. {marker}{step.description}")
    return "\n".join(lines)
