"""Reading both clusters for ``explain`` and ``status`` (the I/O edge; decisions are elsewhere).

Every provider call is bounded by the request timeout, and a provider that fails once is
not asked again in the same run: a frozen remote costs one timeout, not one per object,
and what it could not tell is reported as such rather than guessed.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime import kinds
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube
from kube_offload.nodes import cluster_id_of, is_virtual_node, node_name, slice_of
from kube_offload.policy import NamespacePolicy
from kube_offload.namespace_policies import evaluate
from kube_offload.reasons import REASON_REFLECTION_CONFLICT, REASON_REFLECTION_FAILED
from kubectl_offload.explain import ExplainFacts, RemoteView
from kubectl_offload.remote_chain import RemoteChain
from kubectl_offload.kubeconfigs import LocalCluster, PluginError, Remotes, kube_of
from kubectl_offload.status import REMOTE_REACHABLE, REMOTE_UNREACHABLE, REMOTE_UNREAD, RemoteFacts, StatusFacts

Say = Callable[[str], None]
Read = Callable[[Kube], dict[str, Any]]  # one request on a cluster, e.g. _get(kinds.NODES, name)
LEASE_NAMESPACE = "kube-node-lease"
REFLECTION_WARNINGS = (REASON_REFLECTION_FAILED, REASON_REFLECTION_CONFLICT)
# The reflected kinds counted in status, by the name status shows (their plural).
REFLECTED_KINDS: tuple[Resource, ...] = (
    kinds.CONFIG_MAPS, kinds.SECRETS, kinds.SERVICES, kinds.SERVICE_ACCOUNTS, kinds.PERSISTENT_VOLUME_CLAIMS,
    kinds.ENDPOINT_SLICES, kinds.INGRESSES,
)


def _get(resource: Resource, name: str, *, namespace: str | None = None) -> Read:
    """One object, read when a cluster is given (:meth:`Provider.get`, :func:`_local`)."""
    return lambda kube: kube.get(resource, name, namespace=namespace)


def _list(resource: Resource, **query: Any) -> Read:
    """A list (``query``: :meth:`Kube.list`'s namespace and selectors), read when a cluster is given."""
    return lambda kube: kube.list(resource, **query)


def describe_error(exc: ApiError, what: str) -> str:
    if exc.status == 0:
        return f"unreachable from here while reading {what}: {exc.message}"
    if exc.status in (401, 403):
        return f"not allowed to read {what} ({exc.status} {exc.reason}): {exc.message}"
    return f"{exc.status} {exc.reason} reading {what}: {exc.message}"


class Provider:
    """One provider's client that gives up after its first connection failure."""

    def __init__(self, cluster_id: str, api: client.ApiClient | None, timeout: float, error: str = "") -> None:
        self.cluster_id = cluster_id
        self.api = api
        self.timeout = timeout
        self.error = error or ("" if api is not None else "no kubeconfig")
        self.kube = kube_of(api, timeout) if api is not None else None

    @property
    def usable(self) -> bool:
        return self.kube is not None and not self.error

    def get(self, read: Read, *, what: str, missing_ok: bool = True) -> dict[str, Any] | None:
        """The JSON ``read`` answers; None for 404 (when ``missing_ok``). A failure marks the
        provider unusable (unreachable) or raises :class:`ReadError` (anything else)."""
        if self.kube is None or self.error:
            raise ReadError(self.error)
        try:
            return read(self.kube)
        except ApiError as exc:
            if exc.not_found and missing_ok:
                return None
            message = describe_error(exc, what)
            if exc.status == 0:
                self.error = message
            raise ReadError(message) from None


class ReadError(RuntimeError):
    pass


def _local(local: LocalCluster, read: Read, *, what: str, missing_ok: bool = False) -> dict[str, Any] | None:
    try:
        return read(local.kube)
    except ApiError as exc:
        if exc.not_found and missing_ok:
            return None
        raise PluginError(f"local cluster ({local.source}): {describe_error(exc, what)}") from None


def providers(remotes: Remotes, cluster_ids: Sequence[str]) -> dict[str, Provider]:
    found = {}
    for cluster_id in cluster_ids:
        target = remotes.target(cluster_id)
        found[cluster_id] = Provider(cluster_id, target.api, remotes.local.timeout, target.error)
    return found


def _consumer(provider: Provider, local_id: str | None) -> RemoteView:
    if not local_id:
        return RemoteView(provider.cluster_id, error="the local cluster id is unknown: pass --local-cluster-id")
    try:
        consumer = provider.get(_get(kinds.CONSUMERS, local_id), what=f"Consumer {local_id}")
    except ReadError as exc:
        return RemoteView(provider.cluster_id, error=str(exc))
    return RemoteView(provider.cluster_id, consumer=consumer)


# --- explain -----------------------------------------------------------------------------------
def read_pod(local: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    pod = _local(local, _get(kinds.PODS, name, namespace=namespace),
                 what=f"pod {namespace}/{name}", missing_ok=True)
    if pod is None:
        raise PluginError(
            f"pod {name!r} not found in namespace {namespace!r} (pass -n NAMESPACE, or explain -f FILE for a pod not yet created)"
        )
    return pod


def _twin_namespace(provider: Provider, local_id: str, namespace: str, policy: object) -> str:
    """The provider namespace twinning ``namespace``: the TwinNamespace request that asks
    for it, else the name the policy's mapping gives."""
    try:
        requests = provider.get(
            _list(kinds.TWIN_NAMESPACES, namespace=c.tenant_namespace(local_id)),
            what="TwinNamespace requests", missing_ok=False,
        ) or {}
        for request in requests.get("items") or []:
            if (request.get("spec") or {}).get("localNamespace") == namespace:
                return str(request["metadata"]["name"])
    except ReadError:
        if not provider.usable:
            raise
    mapping = policy.mapping if isinstance(policy, NamespacePolicy) else c.DEFAULT_MAPPING
    return c.twin_namespace_name(namespace, local_id, mapping)


def _chain(provider: Provider, local_id: str | None, pod: Mapping[str, Any], policy: object) -> RemoteChain:
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    if not local_id:
        return RemoteChain(provider.cluster_id, "?", error="the local cluster id is unknown: pass --local-cluster-id")
    try:
        twin = _twin_namespace(provider, local_id, namespace, policy)
    except ReadError as exc:
        return RemoteChain(provider.cluster_id, c.twin_namespace_name(namespace, local_id), error=str(exc))
    try:
        shadowpod = provider.get(_get(kinds.SHADOWPODS, name, namespace=twin), what=f"ShadowPod {twin}/{name}")
        remote_pod = None
        if shadowpod is not None:
            pod_name = (shadowpod.get("status") or {}).get("podName") or name
            remote_pod = provider.get(_get(kinds.PODS, pod_name, namespace=twin),
                                      what=f"pod {twin}/{pod_name}")
        events = provider.get(_list(kinds.EVENTS, namespace=twin, field_selector=f"involvedObject.name={name}"),
                              what=f"Events in {twin}", missing_ok=False) or {}
    except ReadError as exc:
        return RemoteChain(provider.cluster_id, twin, error=str(exc))
    return RemoteChain(provider.cluster_id, twin, shadowpod, remote_pod, list(events.get("items") or []))


def explain_facts(
    local: LocalCluster, remotes: Remotes, pod: dict[str, Any], *, created: bool, local_cluster_id: str | None, say: Say,
) -> ExplainFacts:
    meta = pod.get("metadata") or {}
    namespace_name, name = str(meta.get("namespace")), str(meta.get("name") or "")
    say(f"reading namespace {namespace_name}, nodes and pods")
    namespace = _local(local, _get(kinds.NAMESPACES, namespace_name), what=f"namespace {namespace_name}", missing_ok=True)
    nodes = list((_local(local, _list(kinds.NODES), what="nodes") or {}).get("items") or [])
    others = list((_local(local, _list(kinds.PODS, field_selector="status.phase!=Succeeded,status.phase!=Failed"),
                          what="pods") or {}).get("items") or [])
    events: list[dict[str, Any]] = []
    if created:
        listed = _local(local, _list(kinds.EVENTS, namespace=namespace_name,
                                     field_selector=f"involvedObject.name={name},involvedObject.kind=Pod"),
                        what=f"Events in {namespace_name}") or {}
        uid = meta.get("uid")
        events = [e for e in listed.get("items") or [] if not uid or (e.get("involvedObject") or {}).get("uid") in (None, uid)]

    cluster_ids = sorted({cid for n in nodes if (cid := cluster_id_of(n))})
    local_id = remotes.local_cluster_id(local_cluster_id, cluster_ids)
    clients = providers(remotes, cluster_ids)
    views = {}
    for cluster_id, provider in clients.items():
        say(f"reading provider {cluster_id}")
        views[cluster_id] = _consumer(provider, local_id)

    chain = None
    bound = (pod.get("spec") or {}).get("nodeName")
    node = next((n for n in nodes if node_name(n) == bound), None)
    if created and node is not None and is_virtual_node(node):
        cluster_id = cluster_id_of(node) or ""
        provider = clients.get(cluster_id) or Provider(cluster_id, None, local.timeout, "the virtual node has no cluster id")
        policy = evaluate(namespace) if namespace is not None else None
        say(f"following {namespace_name}/{name} into provider {cluster_id}")
        chain = _chain(provider, local_id, pod, policy)
    return ExplainFacts(
        pod=pod, created=created, namespace=namespace, nodes=nodes, other_pods=others,
        now=datetime.now(timezone.utc), local_events=events, remotes=views, chain=chain,
        local_cluster_id=local_id, webhook_scheduler_name=remotes.scheduler_name(),
    )


# --- status ------------------------------------------------------------------------------------
def _ping(provider: Provider) -> float | None:
    started = time.monotonic()
    provider.get(lambda kube: kube.request("GET", "/version"), what="/version", missing_ok=False)
    return time.monotonic() - started


def _reflected(provider: Provider, local_id: str, twins: Sequence[str]) -> dict[str, int]:
    selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={local_id},{c.LABEL_REFLECTOR}"
    counts = {kind.plural: 0 for kind in REFLECTED_KINDS}
    for namespace in twins:
        for kind in REFLECTED_KINDS:
            listed = provider.get(_list(kind, namespace=namespace, label_selector=selector),
                                  what=f"{kind.plural} in {namespace}", missing_ok=False) or {}
            counts[kind.plural] += len(listed.get("items") or [])
    return counts


def _remote_facts(provider: Provider, local_id: str | None, base: dict[str, Any]) -> RemoteFacts:
    if provider.api is None:
        return RemoteFacts(**base, remote_state=REMOTE_UNREAD, remote_error=provider.error)
    try:
        ping = _ping(provider)
    except ReadError as exc:
        state = REMOTE_UNREACHABLE if not provider.usable else REMOTE_UNREAD
        return RemoteFacts(**base, remote_state=state, remote_error=str(exc))
    extra: dict[str, Any] = {"ping_seconds": ping, "remote_state": REMOTE_REACHABLE}
    if not local_id:
        return RemoteFacts(**base, **extra, consumer_error="the local cluster id is unknown: pass --local-cluster-id")
    view = _consumer(provider, local_id)
    extra.update(consumer=view.consumer, consumer_error=view.error)
    try:
        listed = provider.get(
            _list(kinds.TWIN_NAMESPACES, namespace=c.tenant_namespace(local_id),
                  label_selector=f"{c.LABEL_ORIGIN_CLUSTER_ID}={local_id}"),
            what="TwinNamespace requests", missing_ok=False,
        ) or {}
        extra["twin_requests"] = list(listed.get("items") or [])
    except ReadError as exc:
        extra["twin_error"] = str(exc)
    ready_twins = [
        str(r["metadata"]["name"]) for r in extra.get("twin_requests") or []
        if (r.get("status") or {}).get("phase") == c.TWIN_PHASE_READY
    ]
    try:
        listed = provider.get(
            _list(kinds.OFFLOAD_SLICES, namespace=c.tenant_namespace(local_id),
                  label_selector=f"{c.LABEL_ORIGIN_CLUSTER_ID}={local_id}"),
            what="OffloadSlices", missing_ok=True,  # a provider without the slice API has none
        ) or {}
        extra["slices"] = list(listed.get("items") or [])
    except ReadError as exc:
        extra["slice_error"] = str(exc)
    try:
        extra["reflected"] = _reflected(provider, local_id, ready_twins)
    except ReadError as exc:
        extra["reflected_error"] = str(exc)
    if not provider.usable:  # it stopped answering half-way
        extra.update(remote_state=REMOTE_UNREACHABLE, remote_error=provider.error)
    return RemoteFacts(**base, **extra)


def status_facts(local: LocalCluster, remotes: Remotes, *, local_cluster_id: str | None, say: Say) -> StatusFacts:
    say("reading virtual nodes")
    nodes = (_local(local, _list(kinds.NODES, label_selector=f"{c.LABEL_TYPE}={c.TYPE_VIRTUAL_NODE}"),
                    what="nodes") or {}).get("items") or []
    # A peering's own node by cluster id; its slices' nodes (same cluster id) apart.
    by_id = {cid: n for n in nodes if (cid := cluster_id_of(n)) and slice_of(n) is None}
    slice_nodes: dict[str, dict[str, dict[str, Any]]] = {}
    for n in nodes:
        if (cid := cluster_id_of(n)) and (slice_name := slice_of(n)):
            slice_nodes.setdefault(cid, {})[slice_name] = n
    cluster_ids = sorted(set(by_id) | set(slice_nodes) | set(remotes.flags) | set(remotes.vkubelet_deployments()))
    local_id = remotes.local_cluster_id(local_cluster_id, cluster_ids)
    warnings = (_local(local, _list(kinds.EVENTS, field_selector="type=Warning"),
                       what="Events") or {}).get("items") or []
    facts = []
    for cluster_id, provider in providers(remotes, cluster_ids).items():
        say(f"reading remote {cluster_id}")
        node = by_id.get(cluster_id)
        name = node_name(node) if node is not None else c.virtual_node_name(cluster_id)
        lease = _local(local, _get(kinds.LEASES, name, namespace=LEASE_NAMESPACE), what=f"Lease {name}",
                       missing_ok=True)
        pods = (_local(local, _list(kinds.PODS, field_selector=f"spec.nodeName={name}"),
                       what=f"pods on {name}") or {}).get("items") or []
        reflection = [
            e for e in warnings
            if e.get("reason") in REFLECTION_WARNINGS
            and name in ((e.get("source") or {}).get("host"), e.get("reportingInstance"))
        ]
        base = {
            "cluster_id": cluster_id, "node": node, "lease": lease, "pods": pods,
            "reflection_warnings": reflection, "kubeconfig_source": remotes.target(cluster_id).source,
            "slice_nodes": slice_nodes.get(cluster_id, {}),
        }
        facts.append(_remote_facts(provider, local_id, base))
    return StatusFacts(now=datetime.now(timezone.utc), local_cluster_id=local_id, remotes=facts, notes=tuple(remotes.notes))
