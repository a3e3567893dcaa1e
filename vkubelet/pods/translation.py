"""Local pod -> the pod the remote cluster runs (pure).

The local scheduler already chose the virtual node; what in the pod was about that choice
(nodeName, the virtual-node toleration, node affinity and nodeSelector over the virtual
node's labels, a local scheduler) means nothing, or something else, in the remote cluster,
and what the local apiserver's admission added (service-account token volume, priority
number, RuntimeClass overhead) would be added again - or refused - by the remote one.
Then the provider's policy for us (``Consumer.spec.policy``) takes out what its admission
would refuse (vkubelet/shared/policy_fit.py: a priority class or toleration it does not grant, node
selection on keys it reserves...), with a note per change for the local pod's Events; a
pod it would refuse whatever is dropped (a volume type not granted) carries the notes
that say so, and is not sent. Everything else is the user's and is kept as written.
docs/virtual-kubelet.md has the table for users.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import offload_chain, shadowpod
from kube_offload.provider_policy import DEFAULT_POLICY, ProviderPolicy
# NodeSelectorTerm semantics live with the rest of node affinity, shared with `kubectl offload explain`.
from kube_offload.affinity import requirement_matches, term_matches  # noqa: F401  (re-exported)
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.home_api.pod_access import DEFAULT_CLUSTER_DOMAIN, point_at_home_api
from vkubelet.shared.policy_fit import Note, fit_pod
from vkubelet.shared import names as reflection_names
from vkubelet.shared.origin import origin_annotations, origin_labels

# The volume the ServiceAccount admission plugin adds to every pod (kube-api-access-<rand>).
SERVICE_ACCOUNT_VOLUME_PREFIX = "kube-api-access-"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
# Every list of containers whose mounts and environment follow the pod's identity.
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class TranslationContext:
    local_cluster_id: str
    # Labels and name of the virtual node the pod is bound to: node affinity and
    # nodeSelector over these keys were the local scheduler's business.
    virtual_node_labels: Mapping[str, str] = field(default_factory=dict)
    virtual_node_name: str = ""
    # PriorityClasses that exist in the remote cluster; others are dropped.
    remote_priority_classes: frozenset[str] = frozenset()
    # The provider's policy for us: what it does not grant is taken out (vkubelet/shared/policy_fit.py).
    # The default is the strictest, as for a Consumer without one.
    policy: ProviderPolicy = DEFAULT_POLICY
    # Our Consumer's quota as read under its quota mode: the limits it counts (policy_fit).
    quota: Mapping[str, int] = field(default_factory=dict)
    # The provider drains or cordons us (Consumer spec.drain, spec.cordoned): it refuses every
    # new ShadowPod for that before its quota rules (docs/enforcer.md, rules 10 and 11), so the
    # quota's limits are not judged here then: the pod is sent and the provider's refusal, which
    # names the drain, is what the pod says. A drain does not end when quota frees up.
    provider_closed: bool = False
    # Service-account token reflection is on (settings.reflection.service_account_tokens):
    # the pod's tokens come from the reflected token Secret (tokens of the home API
    # server) and kube-root-ca.crt from its reflected copy (vkubelet/reflection/).
    reflection: bool = False
    # Where this remote cluster's offloaded pods reach their home API server (the
    # consumer's relay Service on the provider, docs/home-api.md); None: no relay known.
    # Used for pods in mode ``home`` with reflection on (pod_access.point_at_home_api).
    home_api: HomeAPIEndpoint | None = None
    # The home cluster's Service domain: kubernetes.default.svc.<domain> is one of the
    # API server's names a pod may use (--home-cluster-domain).
    home_cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    # The slice whose virtual node the pod is bound to ('' for the peering's own node).
    slice_name: str = ""
    # The cluster the pod is sent to (--cluster-id): a pod whose offload chain went through
    # it already is not sent (kube_offload/offload_chain.py). "": not checked.
    remote_cluster_id: str = ""


@dataclass(frozen=True)
class RemotePod:
    """What goes into the ShadowPod's ``spec.pod``."""

    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    # What the provider's policy made us change (one note per field), and why it would
    # refuse the pod whatever we drop (non-empty: the pod must not be sent).
    adjusted: tuple[Note, ...] = ()
    refused: tuple[Note, ...] = ()
    # The local pod's ephemeral containers the provider's policy refuses: (name, why);
    # not sent, said in their local status (vkubelet/pods/debugging.py).
    ephemeral_refused: tuple[tuple[str, str], ...] = ()
    # The clusters the pod went through, this one last (offload_chain.py), and why it must
    # not go on to the remote cluster ("": it may): a loop, or too many hops.
    chain: tuple[str, ...] = ()
    loop: str = ""


# The marks a provider's enforcer puts on the pods it makes (kube_offload/constants.py): on
# a pod that came here from another cluster and is sent on (docs/multihop.md), they
# describe the previous hop, never this one. They are taken off before the policy fit (so
# they are no "dropped" notes on every such pod), and this hop writes its own origin
# marks and the extended chain.
HOP_LABELS = (c.LABEL_ORIGIN_CLUSTER_ID, c.LABEL_MANAGED_BY)
HOP_ANNOTATIONS = (
    c.ANNOTATION_ORIGIN_NAMESPACE,
    c.ANNOTATION_ORIGIN_NAME,
    c.ANNOTATION_ORIGIN_UID,
    c.ANNOTATION_APPLIED_TEMPLATE,
    c.ANNOTATION_OFFLOAD_CHAIN,
)


def previous_hops(labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The chain a pod arrived with: the one recorded on a pod a provider's enforcer made
    (``managed-by=enforcer``; that enforcer checked it ends with its consumer), else ()
    - a pod made here, whatever annotation its author wrote. An unreadable chain on an
    enforcer's pod counts as its origin cluster alone (still one hop, never none)."""
    if labels.get(c.LABEL_MANAGED_BY) != c.MANAGED_BY_ENFORCER:
        return ()
    try:
        chain = offload_chain.of(annotations)
    except offload_chain.ChainError:
        chain = ()
    origin = labels.get(c.LABEL_ORIGIN_CLUSTER_ID)
    return chain or ((origin,) if origin else ())


def build_shadowpod_for(
    pod: Mapping[str, Any], remote_namespace: str, context: TranslationContext, *, api_server: str = c.API_SERVER_HOME
) -> dict[str, Any]:
    """The ShadowPod (named like the local pod) that runs ``pod`` in ``remote_namespace``."""
    remote = translate_pod(pod, context, api_server=api_server, remote_namespace=remote_namespace)
    return shadowpod_of(remote, pod, remote_namespace, context)


def shadowpod_of(remote: RemotePod, pod: Mapping[str, Any], remote_namespace: str, context: TranslationContext) -> dict[str, Any]:
    """The ShadowPod carrying ``remote``, the translation of local ``pod``."""
    return shadowpod.build_shadowpod(
        name=str((pod.get("metadata") or {}).get("name")),
        namespace=remote_namespace,
        pod_metadata={"labels": remote.labels, "annotations": remote.annotations},
        pod_spec=remote.spec,
        origin_labels=origin_labels(context.local_cluster_id, context.slice_name),
        origin_annotations=origin_annotations(pod, remote.chain),
    )


def translate_pod(pod: Mapping[str, Any], context: TranslationContext, *, api_server: str = c.API_SERVER_HOME,
                  remote_namespace: str = "") -> RemotePod:
    """``pod`` as the remote cluster runs it in ``remote_namespace`` (its twin); ``api_server``
    is the pod's API server mode (vkubelet/home_api/pod_access.resolve_mode: home, remote or
    disabled)."""
    meta = pod.get("metadata") or {}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))

    spec.pop("nodeName", None)
    # The remote cluster's own default scheduler places the pod; a scheduler named for
    # the local cluster does not exist there: only one the provider grants by that very
    # name is kept (pods.schedulerNames), and the rest goes without a word.
    if spec.get("schedulerName") not in context.policy.pods.scheduler_names:
        spec.pop("schedulerName", None)
    # Set by local admission; the remote admission sets its own or refuses a mismatch.
    spec.pop("overhead", None)
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    # Ephemeral containers (kubectl debug) go into the template, translated like the
    # others; the provider's enforcer adds them to the running pod (kube_offload/ephemeral_containers.py).
    spec.pop("schedulingGates", None)
    # Readiness gates are conditions set by local controllers; nobody sets them remotely.
    spec.pop("readinessGates", None)
    # The kube-offload RuntimeClass is the local opt-in marker (kube_offload/opt_in.py);
    # the provider has no such class, and its own runtimeClasses policy still judges any
    # other class the pod names.
    if spec.get("runtimeClassName") == c.RUNTIME_CLASS_OPT_IN:
        spec.pop("runtimeClassName")

    _drop_virtual_node_toleration(spec)
    _strip_node_selector(spec, context.virtual_node_labels)
    _strip_node_affinity(spec, context.virtual_node_labels, context.virtual_node_name)
    if api_server == c.API_SERVER_REMOTE:
        _use_remote_identity(spec)
    elif api_server == c.API_SERVER_HOME and context.reflection:
        _use_reflected_identity(spec, str(meta.get("name") or ""))
        if context.home_api is not None:
            point_at_home_api(spec, context.home_api, context.home_cluster_domain)
    else:
        # disabled, or home without reflection (no home token to give): no identity.
        _detach_service_account(spec)

    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    chain = offload_chain.extend(previous_hops(labels, annotations), context.local_cluster_id)
    for key in HOP_LABELS:
        labels.pop(key, None)
    for key in HOP_ANNOTATIONS:
        annotations.pop(key, None)
    loop = offload_chain.loop_problem(chain, context.remote_cluster_id) if context.remote_cluster_id else None
    # Read here (the mode just applied); the provider would refuse the kube-offload.io key.
    annotations.pop(c.ANNOTATION_API_SERVER, None)
    fit = fit_pod(labels, annotations, spec, context.policy, consumer_id=context.local_cluster_id,
                  namespace=remote_namespace, quota={} if context.provider_closed else context.quota)
    spec = fit.spec
    # A class the provider grants but does not have (yet): its admission would refuse
    # the pod; the remote default priority applies instead.
    if spec.get("priorityClassName") and spec["priorityClassName"] not in context.remote_priority_classes:
        spec.pop("priorityClassName")
    return RemotePod(
        labels=fit.labels, annotations=fit.annotations, spec=spec, adjusted=fit.adjusted, refused=fit.refused,
        ephemeral_refused=fit.ephemeral_refused, chain=chain, loop=loop or "",
    )


# --- scheduling ------------------------------------------------------------------------------
def _drop_virtual_node_toleration(spec: dict[str, Any]) -> None:
    """The virtual node's own taints (its NoExecute one, the provider-cordoned and -draining
    ones) are local: tolerating them means nothing to the remote nodes."""
    local_keys = (c.TAINT_KEY, c.TAINT_PROVIDER_CORDONED_KEY, c.TAINT_PROVIDER_DRAINING_KEY)
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") not in local_keys]
    if tolerations:
        spec["tolerations"] = tolerations
    else:
        spec.pop("tolerations", None)


def _strip_node_selector(spec: dict[str, Any], node_labels: Mapping[str, str]) -> None:
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k not in node_labels}
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)


def _strip_node_affinity(spec: dict[str, Any], node_labels: Mapping[str, str], node_name: str) -> None:
    """Keep only what the user asked of the remote nodes.

    Required terms are alternatives (OR): a term the virtual node does not satisfy was
    meant for local nodes (e.g. the ``type NotIn [virtual-node]`` branch of
    LocalAndRemote) and is dropped. In the terms kept, expressions over keys the virtual
    node carries (``type``, ``cluster-id``, the cluster selector's region/provider,
    hostname) were about choosing the virtual node and are dropped; the user's other
    expressions stay. matchFields name nodes of the local cluster and are dropped. A
    term left empty means "any node", which makes the whole requirement void.
    """
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict) or not isinstance(affinity.get("nodeAffinity"), dict):
        return
    node_affinity = affinity["nodeAffinity"]

    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        kept: list[dict[str, Any]] = []
        void = False
        for term in required.get("nodeSelectorTerms") or []:
            if not term_matches(term, node_labels, node_name):
                continue
            stripped = _strip_term(term, node_labels)
            if stripped is None:
                void = True
                break
            kept.append(stripped)
        if void or not kept:
            node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
        else:
            required["nodeSelectorTerms"] = kept

    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(preferred, list):
        kept_preferences = []
        for item in preferred:
            stripped = _strip_term(item.get("preference") or {}, node_labels)
            if stripped is not None:
                kept_preferences.append({**item, "preference": stripped})
        if kept_preferences:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = kept_preferences
        else:
            node_affinity.pop("preferredDuringSchedulingIgnoredDuringExecution", None)

    if not node_affinity:
        affinity.pop("nodeAffinity")
    if not affinity:
        spec.pop("affinity")


def _strip_term(term: Mapping[str, Any], node_labels: Mapping[str, str]) -> dict[str, Any] | None:
    """The term without virtual-node expressions and matchFields; None if nothing is left."""
    expressions = [e for e in term.get("matchExpressions") or [] if e.get("key") not in node_labels]
    return {"matchExpressions": expressions} if expressions else None


# --- service account -------------------------------------------------------------------------
def _detach_service_account(spec: dict[str, Any]) -> None:
    """Until reflection mirrors ServiceAccounts, the remote pod runs as its namespace's
    ``default`` account with no token: a token of the remote cluster would give the pod
    rights there, and a named account that does not exist remotely would make the
    remote admission refuse the pod."""
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    spec["automountServiceAccountToken"] = False

    dropped: set[str] = set()
    volumes = []
    for volume in spec.get("volumes") or []:
        name = volume.get("name", "")
        projected = volume.get("projected")
        if isinstance(projected, dict):
            if name.startswith(SERVICE_ACCOUNT_VOLUME_PREFIX):
                dropped.add(name)
                continue
            sources = [s for s in projected.get("sources") or [] if not _is_identity_source(s)]
            if not sources:
                dropped.add(name)
                continue
            volume = {**volume, "projected": {**projected, "sources": sources}}
        elif (volume.get("configMap") or {}).get("name") == ROOT_CA_CONFIGMAP:
            dropped.add(name)
            continue
        volumes.append(volume)
    if volumes:
        spec["volumes"] = volumes
    else:
        spec.pop("volumes", None)
    if not dropped:
        return
    for kind in CONTAINER_KINDS:
        for container in spec.get(kind) or []:
            mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") not in dropped]
            if mounts:
                container["volumeMounts"] = mounts
            else:
                container.pop("volumeMounts", None)


def _use_remote_identity(spec: dict[str, Any]) -> None:
    """Mode ``remote``: the pod runs as the twin namespace's ``default`` account with the
    token the provider's own admission mounts (automountServiceAccountToken true, which
    the provider admits only with ``pods.remoteAPIAccess``; policy_fit refuses the pod
    before it is sent otherwise). Its home token volumes go as without reflection: the
    provider adds its own standard volume at the same path."""
    _detach_service_account(spec)
    spec["automountServiceAccountToken"] = True


def _use_reflected_identity(spec: dict[str, Any], pod_name: str) -> None:
    """With reflection the pod keeps its LOCAL identity: every projected token becomes
    the same path read from the pod's reflected token Secret (tokens the local API
    server issued for this pod), the namespace file next to a token holds the LOCAL
    namespace (from that Secret; the downward API would say the twin's name), and every
    use of kube-root-ca.crt reads the reflected copy of the local CA. The remote pod
    itself runs as the twin namespace's ``default`` account with no token of its own:
    the account named in the pod does not exist remotely (the remote admission would
    refuse the pod) and a remote token would give the pod rights there."""
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    spec["automountServiceAccountToken"] = False
    token_secret = reflection_names.token_secret_name(pod_name)
    volumes = []
    for volume in spec.get("volumes") or []:
        projected = volume.get("projected")
        if isinstance(projected, dict):
            sources = _reflected_sources(projected.get("sources") or [], token_secret)
            volume = {**volume, "projected": {**projected, "sources": sources}}
        elif (volume.get("configMap") or {}).get("name") == ROOT_CA_CONFIGMAP:
            volume = {**volume, "configMap": {**volume["configMap"], "name": reflection_names.REFLECTED_ROOT_CA_CONFIGMAP}}
        volumes.append(volume)
    if volumes:
        spec["volumes"] = volumes
    for kind in CONTAINER_KINDS:
        for container in spec.get(kind) or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if isinstance(ref, dict) and ref.get("name") == ROOT_CA_CONFIGMAP:
                    ref["name"] = reflection_names.REFLECTED_ROOT_CA_CONFIGMAP
            for env_from in container.get("envFrom") or []:
                ref = env_from.get("configMapRef")
                if isinstance(ref, dict) and ref.get("name") == ROOT_CA_CONFIGMAP:
                    ref["name"] = reflection_names.REFLECTED_ROOT_CA_CONFIGMAP


def _reflected_sources(sources: list[dict[str, Any]], token_secret: str) -> list[dict[str, Any]]:
    has_token = any(isinstance(s.get("serviceAccountToken"), dict) for s in sources)
    result: list[dict[str, Any]] = []
    for source in sources:
        token = source.get("serviceAccountToken")
        config_map = source.get("configMap")
        downward = source.get("downwardAPI")
        if isinstance(token, dict):
            key = reflection_names.token_key(token.get("audience") or None)
            result.append({"secret": {"name": token_secret, "items": [{"key": key, "path": token.get("path") or "token"}]}})
        elif isinstance(config_map, dict) and config_map.get("name") == ROOT_CA_CONFIGMAP:
            result.append({"configMap": {**config_map, "name": reflection_names.REFLECTED_ROOT_CA_CONFIGMAP}})
        elif has_token and isinstance(downward, dict) and any(_is_namespace_item(i) for i in downward.get("items") or []):
            items = downward.get("items") or []
            kept = [i for i in items if not _is_namespace_item(i)]
            if kept:
                result.append({"downwardAPI": {**downward, "items": kept}})
            namespace_items = []
            for item in items:
                if _is_namespace_item(item):
                    moved = {"key": reflection_names.NAMESPACE_KEY, "path": item.get("path")}
                    if "mode" in item:
                        moved["mode"] = item["mode"]
                    namespace_items.append(moved)
            result.append({"secret": {"name": token_secret, "items": namespace_items}})
        else:
            result.append(source)
    return result


def _is_namespace_item(item: Mapping[str, Any]) -> bool:
    return (item.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace"


def _is_identity_source(source: Mapping[str, Any]) -> bool:
    """A projected source that carries the local cluster's identity: a token, or the
    local CA (the remote kube-root-ca.crt would hold the wrong CA)."""
    if "serviceAccountToken" in source:
        return True
    return (source.get("configMap") or {}).get("name") == ROOT_CA_CONFIGMAP
