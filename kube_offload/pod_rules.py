"""The provider policy's rules on a pod, each one predicate (pure; the rows of
:mod:`kube_offload.rule_book` that judge a pod).

A pod here is what a ShadowPod carries, ``{"metadata": {"labels", "annotations"}, "spec":
PodSpec}``: the enforcer judges a ShadowPod's ``spec.pod`` (its refusal prefixes the fields
with ``spec.pod.``), the honest virtual kubelet the pod it is about to send. One function
per policy key; each returns the :class:`~kube_offload.policy_rules.Violation` s it finds,
with the consumer's fit in their edits:

* ``pods.priorityClasses``, ``pods.runtimeClasses``, ``pods.schedulerNames``: a name not
  granted (``system-*`` classes never) is dropped (the provider's default then applies);
* ``pods.tolerations``: a toleration of a key not granted, or of every key, is dropped;
* ``pods.reservedNodeLabelKeys``: node selection on a reserved key (the hostname, the node
  roles, the node lifecycle keys, and the provider's list) is dropped: a node selector key,
  a node affinity requirement (a required term left with nothing voids the requirement, as
  the scheduler reads it), a spread or pod (anti-)affinity term over a reserved topology
  key, a toleration of a reserved key; so are ``matchFields`` (they name nodes) and pod
  (anti-)affinity across namespaces (other tenants' pods), which no key grants;
* ``pods.volumeTypes``, ``storage.classes``, ``storage.maxClaimSize``, ``pods.imageRegistries``:
  a volume kind not granted (``hostPath`` never), a projected source other than configMap,
  secret and downwardAPI, a generic ephemeral volume's class or size, an image from a
  registry not granted: nothing taken out keeps the pod what it is, so it is not sent;
* ``pods.deniedMetadataPrefixes``: a label or annotation that configures the provider's own
  controllers is dropped (the origin keys the virtual kubelet writes excepted);
* ``pods.remoteAPIAccess`` and ``pods.maxTerminationGracePeriodSeconds``: the provider does
  not refuse, it sets (no token of its own ServiceAccount; the grace cut to the bound): the
  consumer does not send a pod that asks for the provider's API it is not granted (it would
  run without the API its owner chose), and lowers a grace beyond the bound;
* ``quotaMode``: a container without the limits the quota counts (equal to its requests
  under ``hard``) is refused by the provider: not sent;
* ``pods.ephemeralContainers``: an ephemeral container (``kubectl debug``) not granted is
  dropped: the pod runs on without it, and the consumer's virtual kubelet shows the refusal
  in that container's local status (docs/logs-and-exec.md "kubectl debug").
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import consumer_quota
from kube_offload import provider_policy as pp
from kube_offload import policy_matching as pm
from kube_offload.policy_rules import (
    Context,
    Edit,
    Malformed,
    Path,
    Violation,
    field_text,
    grant,
    granted_list,
    items,
    mapping,
    text,
)
from kube_offload.resources import QuantityError, parse_quantity
from kube_offload.shadowpod import capped_grace

# A volume's one field that is not its source: every other field names its kind
# (core/v1 VolumeSource), so kinds this code has never heard of are judged too.
VOLUME_NAME_FIELD = "name"
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODE_AFFINITY = ("spec", "affinity", "nodeAffinity")


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(pod, "spec", "")


def _drop(*path: str | int) -> tuple[Edit, ...]:
    return (Edit(tuple(path)),)


# --- names: priority class, runtime class, scheduler -------------------------------------------------
def _name_not_granted(pod: Mapping[str, Any], ctx: Context, field: str, key: str, what: str, granted: tuple[str, ...],
                      fix: str, why: str = "") -> list[Violation]:
    """A name field (``spec.<field>``) whose value is not in ``granted``: dropped, so the
    provider's default applies."""
    name = text(_spec(pod), field, "spec")
    if not name or name in granted:
        return []
    return [Violation(
        key, f"spec.{field}",
        f"{what} {name!r} is not granted to {ctx.who}{why} (granted: {granted_list(granted)}); {grant(key)}",
        f"or remove {field}{fix}", _drop("spec", field))]


def priority_classes(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    name = text(_spec(pod), "priorityClassName", "spec")
    if name.startswith(pp.SYSTEM_PRIORITY_PREFIX):
        return [Violation(
            "", "spec.priorityClassName",
            f"{name!r} is a system priority class, which preempts the provider's own components and is never granted to "
            f"a consumer ({pp.POLICY}.pods.priorityClasses cannot hold system-* classes)",
            "remove priorityClassName", _drop("spec", "priorityClassName"))]
    return _name_not_granted(pod, ctx, "priorityClassName", "pods.priorityClasses", "priority class",
                             ctx.policy.pods.priority_classes, "")


def runtime_classes(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    return _name_not_granted(pod, ctx, "runtimeClassName", "pods.runtimeClasses", "runtime class",
                             ctx.policy.pods.runtime_classes, " (the provider's default runtime)")


def scheduler_names(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    granted = (pp.DEFAULT_SCHEDULER, *ctx.policy.pods.scheduler_names)
    return _name_not_granted(pod, ctx, "schedulerName", "pods.schedulerNames", "scheduler", granted, "",
                             ": the provider's default scheduler places its pods unless it grants another")


# --- tolerations ------------------------------------------------------------------------------------
def _lifecycle(toleration: Mapping[str, Any]) -> bool:
    """How long a pod stays on a failed node: every pod says so (DefaultTolerationSeconds)."""
    return toleration.get("key") in pp.LIFECYCLE_TOLERATION_KEYS and toleration.get("effect") == pp.LIFECYCLE_TOLERATION_EFFECT


def _toleration_key(toleration: Mapping[str, Any], index: int) -> str:
    key = toleration.get("key")
    if key is not None and not isinstance(key, str):
        raise Malformed(f"spec.tolerations[{index}].key: must be a string")
    return key or ""


def tolerations(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    out = []
    for index, toleration in items(_spec(pod), "tolerations", "spec"):
        key = _toleration_key(toleration, index)
        edits = _drop("spec", "tolerations", index)
        if not key:
            out.append(Violation(
                "pods.tolerations", f"spec.tolerations[{index}]",
                "a toleration without a key tolerates every taint (the provider's control plane and reserved nodes "
                f"included) and is never granted to a consumer; tolerate named taints, which {grant('pods.tolerations')}",
                "remove it", edits))
        elif not _lifecycle(toleration) and not pm.reserved_node_key(key, ctx.policy) and key not in ctx.policy.pods.tolerations:
            out.append(Violation(
                "pods.tolerations", f"spec.tolerations[{index}].key",
                f"toleration of taint {key!r} is not granted to {ctx.who} (granted: "
                f"{granted_list(ctx.policy.pods.tolerations)}); {grant('pods.tolerations')}",
                "or remove it", edits))
    return out


# --- node selection ---------------------------------------------------------------------------------
def _reserved_description() -> str:
    always = ", ".join(f"{k}*" if k.endswith("/") else k for k in pp.ALWAYS_RESERVED_NODE_KEYS)
    return f"always {always}; and what Consumer {pp.POLICY}.pods.reservedNodeLabelKeys lists"


def _reserved(field: str, key: str, verb: str, edits: tuple[Edit, ...], done: str = "dropped") -> Violation:
    # Always-reserved keys are never granted; the others the provider itself chose to reserve.
    never = pm.key_matches(key, pp.ALWAYS_RESERVED_NODE_KEYS)
    return Violation(
        "" if never else "pods.reservedNodeLabelKeys", field,
        f"{key!r} is a node label key the provider reserves, which a consumer's pods may not {verb} (reserved: "
        f"{_reserved_description()}); {'never granted' if never else 'reserved by the provider'}",
        "remove it", edits, done)


def reserved_node_keys(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = _spec(pod)
    out: list[Violation] = []
    for key in mapping(spec, "nodeSelector", "spec"):
        if pm.reserved_node_key(str(key), ctx.policy):
            out.append(_reserved(f"spec.nodeSelector[{key}]", str(key), "select nodes by", _drop("spec", "nodeSelector", str(key))))
    for index, toleration in items(spec, "tolerations", "spec"):
        key = _toleration_key(toleration, index)
        if key and not _lifecycle(toleration) and pm.reserved_node_key(key, ctx.policy):
            never = pm.key_matches(key, pp.ALWAYS_RESERVED_NODE_KEYS)
            out.append(Violation(
                "" if never else "pods.reservedNodeLabelKeys", f"spec.tolerations[{index}].key",
                f"{key!r} is a node key the provider reserves; tolerating it is never granted to a consumer (reserved: "
                f"{_reserved_description()})", "remove the toleration", _drop("spec", "tolerations", index)))
    out += _node_affinity(spec, ctx)
    for index, constraint in items(spec, "topologySpreadConstraints", "spec"):
        key = str(constraint.get("topologyKey") or "")
        if pm.reserved_topology_key(key, ctx.policy):
            out.append(_reserved(
                f"spec.topologySpreadConstraints[{index}].topologyKey", key,
                "spread over (nodes without the key are left out, so this selects nodes)",
                _drop("spec", "topologySpreadConstraints", index)))
    out += _pod_affinity(spec, ctx)
    return out


def _node_affinity(spec: Mapping[str, Any], ctx: Context) -> list[Violation]:
    affinity = mapping(spec, "affinity", "spec")
    node_affinity = mapping(affinity, "nodeAffinity", "spec.affinity")
    base = "spec.affinity.nodeAffinity"
    out: list[Violation] = []
    required = mapping(node_affinity, REQUIRED, base)
    for i, term in items(required, "nodeSelectorTerms", f"{base}.{REQUIRED}"):
        path: Path = (*NODE_AFFINITY, REQUIRED, "nodeSelectorTerms", i)
        # A term left with no requirement matches any node, which voids the whole requirement.
        out += _term(term, path, ctx, void=(*NODE_AFFINITY, REQUIRED),
                     done="dropped, and with it the required node affinity (its term asked for nothing else: any node)")
    for i, preferred in items(node_affinity, PREFERRED, base):
        path = (*NODE_AFFINITY, PREFERRED, i, "preference")
        out += _term(mapping(preferred, "preference", f"{base}.{PREFERRED}[{i}]"), path, ctx,
                     void=(*NODE_AFFINITY, PREFERRED, i), done="dropped, and with it the preference (nothing else left in it)")
    return out


def _term(term: Mapping[str, Any], path: Path, ctx: Context, *, void: Path, done: str) -> list[Violation]:
    """The requirements of one NodeSelectorTerm on reserved keys, and its matchFields;
    dropped from the term, or, when nothing else is left in it, ``void`` goes."""
    where = field_text(path)
    bad: list[tuple[str, str, Path]] = []  # (field, key, what to drop)
    expressions = list(items(term, "matchExpressions", where))
    for j, expression in expressions:
        key = str(expression.get("key") or "")
        if pm.reserved_node_key(key, ctx.policy):
            bad.append((f"{where}.matchExpressions[{j}].key", key, (*path, "matchExpressions", j)))
    fields = term.get("matchFields")
    emptied = len(bad) == len(expressions) and (bool(bad) or bool(fields))
    out = []
    for field, key, drop in bad:
        edits = (Edit(void),) if emptied else (Edit(drop),)
        out.append(_reserved(field, key, "select nodes by", edits, done if emptied else "dropped"))
    if fields:
        edits = (Edit(void),) if emptied else (Edit((*path, "matchFields")),)
        out.append(Violation(
            "", f"{where}.matchFields",
            "a consumer's pods may not select nodes by their fields (metadata.name pins a node: the provider's "
            "scheduler places them); never granted", "remove matchFields", edits, done if emptied else "dropped"))
    return out


def _pod_affinity(spec: Mapping[str, Any], ctx: Context) -> list[Violation]:
    affinity = mapping(spec, "affinity", "spec")
    out: list[Violation] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        base = f"spec.affinity.{kind}"
        section = mapping(affinity, kind, "spec.affinity")
        terms: list[tuple[str, Mapping[str, Any], Path]] = [
            (f"{base}.{REQUIRED}[{i}]", term, ("spec", "affinity", kind, REQUIRED, i))
            for i, term in items(section, REQUIRED, base)
        ]
        for i, weighted in items(section, PREFERRED, base):
            where = f"{base}.{PREFERRED}[{i}]"
            terms.append((f"{where}.podAffinityTerm", mapping(weighted, "podAffinityTerm", where),
                          ("spec", "affinity", kind, PREFERRED, i)))
        for where, term, path in terms:
            edits = (Edit(path),)
            key = str(term.get("topologyKey") or "")
            if pm.reserved_topology_key(key, ctx.policy):
                out.append(_reserved(f"{where}.topologyKey", key, "place pods by", edits))
            namespaces = term.get("namespaces")
            if namespaces is not None and (not isinstance(namespaces, list) or any(n != ctx.namespace for n in namespaces)):
                out.append(_other_namespaces(f"{where}.namespaces", ctx, edits))
            if term.get("namespaceSelector") is not None:
                out.append(_other_namespaces(f"{where}.namespaceSelector", ctx, edits))
    return out


def _other_namespaces(field: str, ctx: Context, edits: tuple[Edit, ...]) -> Violation:
    return Violation(
        "", field,
        f"a consumer's pods may relate only to pods of their own namespace ({ctx.namespace!r}), not to the provider's "
        "or other tenants'; never granted", f"remove {field.rsplit('.', 1)[-1]}", edits)


# --- volumes ---------------------------------------------------------------------------------------
def _volumes(pod: Mapping[str, Any]) -> list[tuple[int, Any, list[str], Mapping[str, Any]]]:
    """(index, name, kinds, volume) of each volume: its kinds are its fields but ``name``."""
    return [(i, v.get(VOLUME_NAME_FIELD), [k for k, s in v.items() if k != VOLUME_NAME_FIELD and s is not None], v)
            for i, v in items(_spec(pod), "volumes", "spec")]


def volume_types(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    out = []
    for index, name, kinds, volume in _volumes(pod):
        for kind in kinds:
            field = f"spec.volumes[{index}].{kind}"
            if kind in pp.NEVER_VOLUME_TYPES:
                out.append(Violation(
                    "", field,
                    f'volume "{name}" would mount a directory of the provider\'s node, which is never granted to a '
                    f"consumer ({pp.POLICY}.pods.volumeTypes cannot hold {kind})",
                    "use another volume type (emptyDir, configMap, secret, persistentVolumeClaim)"))
            elif kind not in ctx.policy.pods.volume_types:
                out.append(Violation(
                    "pods.volumeTypes", field,
                    f'volume "{name}" of type {kind} is not granted to {ctx.who} (it reaches beyond the pod\'s namespace; '
                    f"granted: {granted_list(ctx.policy.pods.volume_types)}); {grant('pods.volumeTypes')}",
                    "or use a persistentVolumeClaim"))
            elif kind == "projected":
                out += _projected(field, name, volume.get(kind))
    return out


def _projected(field: str, name: Any, projected: Any) -> list[Violation]:
    if not isinstance(projected, Mapping):
        raise Malformed(f"{field}: must be an object")
    out = []
    for index, source in items(projected, "sources", field):
        for kind, value in source.items():
            if value is None or kind in pp.PROJECTED_SOURCES:
                continue
            why = ("a token of the provider's ServiceAccount, which a consumer's pods never get"
                   if kind == "serviceAccountToken" else "it is not a namespaced object")
            out.append(Violation(
                "", f"{field}.sources[{index}].{kind}",
                f'projected volume "{name}" may combine only {", ".join(pp.PROJECTED_SOURCES)} sources, not {kind} '
                f"({why}); never granted", "remove it"))
    return out


def _claims(pod: Mapping[str, Any]) -> list[tuple[str, Any, Mapping[str, Any]]]:
    """(field, volume name, claim spec) of every generic ephemeral volume's claim template."""
    out = []
    for index, name, kinds, volume in _volumes(pod):
        if "ephemeral" in kinds:
            field = f"spec.volumes[{index}].ephemeral"
            template = mapping(mapping(volume, "ephemeral", f"spec.volumes[{index}]"), "volumeClaimTemplate", field)
            out.append((f"{field}.volumeClaimTemplate.spec", name, mapping(template, "spec", f"{field}.volumeClaimTemplate")))
    return out


def ephemeral_classes(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """A generic ephemeral volume's claim is made by the provider's own controller, which
    the claims' admission policy does not judge: its class is judged here, by the same key."""
    out = []
    classes = ctx.policy.storage.classes
    for where, name, claim in _claims(pod):
        storage_class = text(claim, "storageClassName", where)
        if text(claim, "volumeName", where):
            out.append(Violation(
                "", f"{where}.volumeName",
                f'volume "{name}": a claim may not name a PersistentVolume (it could bind someone else\'s data); never granted',
                "remove volumeName"))
        if not storage_class:
            out.append(Violation(
                "storage.classes", f"{where}.storageClassName",
                f'volume "{name}" names no storage class (the provider\'s default); name one granted to {ctx.who}: '
                f"{granted_list(classes)}; {grant('storage.classes')}", "name a granted class"))
        elif storage_class not in classes:
            out.append(Violation(
                "storage.classes", f"{where}.storageClassName",
                f'volume "{name}": storage class {storage_class!r} is not granted to {ctx.who} (granted: '
                f"{granted_list(classes)}); {grant('storage.classes')}", "or name a granted class"))
    return out


def ephemeral_sizes(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    out = []
    most = ctx.policy.storage.max_claim_size
    for where, name, claim in _claims(pod):
        requests = mapping(mapping(claim, "resources", where), "requests", f"{where}.resources")
        size = requests.get("storage")
        if size is None:
            continue
        field = f"{where}.resources.requests.storage"
        try:
            too_big = parse_quantity(size) > parse_quantity(most)
        except QuantityError as exc:
            raise Malformed(f"{field}: {exc}") from None
        if too_big:
            out.append(Violation(
                "storage.maxClaimSize", field,
                f'volume "{name}" claims {size}, more than the {most} {ctx.who} may claim at once; '
                f"{grant('storage.maxClaimSize')} (default {pp.DEFAULT_MAX_CLAIM_SIZE})", "or claim less"))
    return out


# --- images ----------------------------------------------------------------------------------------
def image_registries(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    allowed = ctx.policy.pods.image_registries
    if pp.ANY_REGISTRY in allowed:
        return []
    out = []
    spec = _spec(pod)
    for kind in CONTAINER_LISTS:
        for index, container in items(spec, kind, "spec"):
            field = f"spec.{kind}[{index}].image"
            image = text(container, "image", f"spec.{kind}[{index}]")
            if image and not pm.image_allowed(image, allowed):
                out.append(Violation(
                    "pods.imageRegistries", field,
                    f"image {image!r} ({pm.image_name(image)}) is not from a registry granted to {ctx.who} (granted: "
                    f"{', '.join(allowed) or 'none'}): the provider's nodes pull with their own credentials, which may "
                    f"reach the provider's private images; {grant('pods.imageRegistries')}",
                    "or use an image from a granted registry"))
    return out


# --- ephemeral containers (kubectl debug) --------------------------------------------------------------
def ephemeral_containers(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """A debug container runs a process of the consumer's choice inside a running pod's
    namespaces, outside what the pod was admitted with: a grant of its own. Its image,
    security context and mounts are judged by the other rules, like any container's."""
    if ctx.policy.pods.ephemeral_containers:
        return []
    out = []
    for index, container in items(_spec(pod), "ephemeralContainers", "spec"):
        name = container.get("name")
        out.append(Violation(
            "pods.ephemeralContainers", f"spec.ephemeralContainers[{index}]",
            f"ephemeral container {name!r} (kubectl debug) is not granted to {ctx.who} (Consumer "
            f"{pp.POLICY}.pods.ephemeralContainers: false); {grant('pods.ephemeralContainers')}: true",
            "or debug the pod at home", _drop("spec", "ephemeralContainers", index)))
    return out


# --- labels and annotations ------------------------------------------------------------------------
def denied_metadata(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    denied = (*pp.ALWAYS_DENIED_METADATA_PREFIXES, *ctx.policy.pods.denied_metadata_prefixes)
    metadata = mapping(pod, "metadata", "")
    out = []
    for kind in ("labels", "annotations"):
        for key in mapping(metadata, kind, "metadata"):
            key = str(key)
            prefix = next((p for p in denied if key.startswith(p)), None)
            if key in pp.CONSUMER_METADATA_KEYS or prefix is None:
                continue
            always = prefix in pp.ALWAYS_DENIED_METADATA_PREFIXES
            how = ("configures the provider's own controllers; never granted" if always
                   else f"is denied to {ctx.who} by Consumer {pp.POLICY}.pods.deniedMetadataPrefixes")
            out.append(Violation(
                "" if always else "pods.deniedMetadataPrefixes", f"metadata.{kind}[{key}]",
                f"keys under {prefix!r} {how}", "remove it", _drop("metadata", kind, key)))
    return out


# --- what the provider sets ---------------------------------------------------------------------------
def remote_api_access(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """The provider gives no pod a token of its own ServiceAccounts unless granted; a pod
    that asks (API server mode ``remote``) is not sent: run without any API, it would break
    in a way its owner chose against."""
    if _spec(pod).get("automountServiceAccountToken") is not True or ctx.policy.pods.remote_api_access:
        return []
    return [Violation(
        "pods.remoteAPIAccess", "spec.automountServiceAccountToken",
        f"the pod asks for the provider's API server (a token of the twin namespace's ServiceAccount), which is not "
        f"granted to {ctx.who} (Consumer {pp.POLICY}.pods.remoteAPIAccess: false); the provider makes it without one",
        "set the pod's kube-offload.io/api-server annotation to home or disabled, or ask the provider for the grant")]


def termination_grace(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = _spec(pod)
    grace = spec.get("terminationGracePeriodSeconds")
    most = ctx.policy.pods.max_termination_grace_seconds
    if grace is None or capped_grace(grace, most) == grace:
        return []
    cut = capped_grace(grace, most)
    return [Violation(
        "pods.maxTerminationGracePeriodSeconds", "spec.terminationGracePeriodSeconds",
        f"{grace} s is longer than {ctx.who} may hold a provider's node after its pod is told to stop ({most} s, Consumer "
        f"{pp.POLICY}.pods.maxTerminationGracePeriodSeconds); the provider cuts it",
        f"ask for at most {most} s", (Edit(("spec", "terminationGracePeriodSeconds"), cut),), f"lowered to {cut}")]


def quota_limits(pod: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """The limits the consumer's quota counts (``quotaMode``: limits, both, hard): nothing
    the consumer could take out gives a container the limit it lacks."""
    try:
        lines = consumer_quota.limit_problems(pod, ctx.quota, ctx.policy.quota_mode, ctx.consumer_id)
    except QuantityError as exc:
        raise Malformed(f"spec: {exc}") from None
    out = []
    for line in lines:
        field, _, problem = line.partition(": ")
        out.append(Violation("quotaMode", field, problem))
    return out

