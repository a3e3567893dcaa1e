"""The provider policy's pod rules: what of a ShadowPod's pod template a consumer may
write (pure; part of the ShadowPod webhook's spec rules, :mod:`enforcer.admission.validation`).

One function per rule; each returns one line per problem, naming the field, what is
wrong and the ``Consumer spec.policy`` key a provider would change (or that no key can
grant it). The rules (docs/security.md "Provider policy", docs/enforcer.md):

* ``priorityClassName`` from ``pods.priorityClasses``; ``system-*`` never;
* tolerations by key from ``pods.tolerations``; a key-less toleration (tolerate-all)
  never, a reserved node key never (the node lifecycle taints not-ready/unreachable with
  effect NoExecute excepted: every pod tolerates those for a while);
* node selection: no nodeSelector, node affinity expression, topology spread or pod
  (anti-)affinity topologyKey on a reserved node label key (hostname, node roles, node
  lifecycle keys, plus ``pods.reservedNodeLabelKeys``); no ``matchFields`` (they name
  nodes); pod (anti-)affinity only within the pod's own namespace;
* volume kinds from ``pods.volumeTypes``; a generic ephemeral volume only with a class
  from ``storage.classes`` and a claim no larger than ``storage.maxClaimSize``; projected volumes only of configMap, secret and downwardAPI
  sources (never a serviceAccountToken: the provider's identity);
* ``runtimeClassName`` from ``pods.runtimeClasses``;
* pod label and annotation keys: none under a denied prefix (the provider's controllers'
  keys, plus ``pods.deniedMetadataPrefixes``) but the origin keys the consumer's virtual
  kubelet writes.

What is neutralized rather than refused (the pod the enforcer makes,
:func:`kube_offload.shadowpod.build_pod`): ``imagePullPolicy`` (always ``Always``) and
``automountServiceAccountToken`` (false, unless the template asks for true and the
Consumer grants ``pods.remoteAPIAccess``: then the pod gets the twin namespace's
ServiceAccount token from the provider's own admission).

Malformed shapes raise :class:`Invalid` (the template is not a PodSpec), as in
:mod:`enforcer.admission.validation`.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from kube_offload import provider_policy as pp
from kube_offload.provider_policy import ProviderPolicy
from kube_offload.resources import QuantityError, parse_quantity

POD_SPEC = "spec.pod.spec"
POD_METADATA = "spec.pod.metadata"

# A volume's one field that is not its source: every other field names the volume's kind
# (core/v1 VolumeSource: emptyDir, nfs, ...), so kinds this code has never heard of are
# still judged against the allow-list.
VOLUME_NAME_FIELD = "name"


class Invalid(ValueError):
    """The template does not have the shape of a PodSpec; names the field."""


def _grant(key: str) -> str:
    return f"the provider grants it with Consumer {pp.POLICY}.{key}"


def policy_problems(spec: Mapping[str, Any], metadata: Mapping[str, Any], policy: ProviderPolicy, consumer_id: str, namespace: str) -> list[str]:
    """Every way the pod template (``spec``, ``metadata``) goes beyond ``policy``."""
    who = f'consumer "{consumer_id}"'
    problems: list[str] = []
    problems += priority_problems(spec, policy, who)
    problems += toleration_problems(spec, policy, who)
    problems += node_selection_problems(spec, policy, namespace)
    problems += volume_problems(spec, policy, who)
    problems += runtime_class_problems(spec, policy, who)
    problems += metadata_problems(metadata, policy, who)
    return problems


# --- priority ------------------------------------------------------------------------------------
def priority_problems(spec: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    name = spec.get("priorityClassName")
    if name in (None, ""):
        return []
    if not isinstance(name, str):
        raise Invalid(f"{POD_SPEC}.priorityClassName: must be a string")
    field = f"{POD_SPEC}.priorityClassName"
    if name.startswith(pp.SYSTEM_PRIORITY_PREFIX):
        return [
            f"{field}: {name!r} is a system priority class, which preempts the provider's own components and is never "
            f"granted to a consumer ({pp.POLICY}.pods.priorityClasses cannot hold system-* classes); remove priorityClassName"
        ]
    if name in policy.pods.priority_classes:
        return []
    return [f"{field}: priority class {name!r} is not granted to {who}; {_grant('pods.priorityClasses')}, or remove priorityClassName"]


# --- tolerations ---------------------------------------------------------------------------------
def toleration_problems(spec: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    problems = []
    for index, toleration in _items(spec, "tolerations", POD_SPEC):
        field = f"{POD_SPEC}.tolerations[{index}]"
        key = toleration.get("key")
        if key is not None and not isinstance(key, str):
            raise Invalid(f"{field}.key: must be a string")
        if not key:
            problems.append(
                f"{field}: a toleration without a key tolerates every taint (the provider's control plane and "
                f"reserved nodes included) and is never granted to a consumer; tolerate named taints, which "
                f"{_grant('pods.tolerations')}"
            )
        elif key in pp.LIFECYCLE_TOLERATION_KEYS and toleration.get("effect") == pp.LIFECYCLE_TOLERATION_EFFECT:
            continue  # how long to stay on a failed node: every pod says so
        elif pp.reserved_node_key(key, policy):
            problems.append(
                f"{field}.key: {key!r} is a node key the provider reserves; tolerating it is never granted to a "
                f"consumer (reserved: {_reserved_description(policy)}); remove the toleration"
            )
        elif key not in policy.pods.tolerations:
            problems.append(f"{field}.key: toleration of taint {key!r} is not granted to {who}; {_grant('pods.tolerations')}, or remove it")
    return problems


# --- node selection ------------------------------------------------------------------------------
def node_selection_problems(spec: Mapping[str, Any], policy: ProviderPolicy, namespace: str) -> list[str]:
    problems = []
    selector = field_mapping(spec, "nodeSelector", POD_SPEC)
    for key in selector:
        if pp.reserved_node_key(str(key), policy):
            problems.append(_reserved_key_problem(f"{POD_SPEC}.nodeSelector[{key}]", str(key), policy, "select nodes by"))

    affinity = field_mapping(spec, "affinity", POD_SPEC)
    node_affinity = field_mapping(affinity, "nodeAffinity", f"{POD_SPEC}.affinity")
    base = f"{POD_SPEC}.affinity.nodeAffinity"
    required = field_mapping(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", base)
    terms = [
        (f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", term)
        for i, term in _items(required, "nodeSelectorTerms", f"{base}.requiredDuringSchedulingIgnoredDuringExecution")
    ]
    for i, preferred in _items(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution", base):
        path = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        terms.append((f"{path}.preference", field_mapping(preferred, "preference", path)))
    for path, term in terms:
        for j, expression in _items(term, "matchExpressions", path):
            key = str(expression.get("key") or "")
            if pp.reserved_node_key(key, policy):
                problems.append(_reserved_key_problem(f"{path}.matchExpressions[{j}].key", key, policy, "select nodes by"))
        if term.get("matchFields"):
            problems.append(
                f"{path}.matchFields: a consumer's pods may not select nodes by their fields (metadata.name pins a "
                "node: the provider's scheduler places them); never granted; remove matchFields"
            )

    for index, constraint in _items(spec, "topologySpreadConstraints", POD_SPEC):
        key = str(constraint.get("topologyKey") or "")
        if pp.reserved_topology_key(key, policy):
            path = f"{POD_SPEC}.topologySpreadConstraints[{index}].topologyKey"
            problems.append(_reserved_key_problem(path, key, policy, "spread over (nodes without the key are left out, so this selects nodes)"))

    for kind in ("podAffinity", "podAntiAffinity"):
        kind_path = f"{POD_SPEC}.affinity.{kind}"
        pod_affinity = field_mapping(affinity, kind, f"{POD_SPEC}.affinity")
        pod_terms = [
            (f"{kind_path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term)
            for i, term in _items(pod_affinity, "requiredDuringSchedulingIgnoredDuringExecution", kind_path)
        ]
        for i, weighted in _items(pod_affinity, "preferredDuringSchedulingIgnoredDuringExecution", kind_path):
            path = f"{kind_path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            pod_terms.append((f"{path}.podAffinityTerm", field_mapping(weighted, "podAffinityTerm", path)))
        for path, term in pod_terms:
            key = str(term.get("topologyKey") or "")
            if pp.reserved_topology_key(key, policy):
                problems.append(_reserved_key_problem(f"{path}.topologyKey", key, policy, "place pods by"))
            namespaces = term.get("namespaces")
            if namespaces is not None and (not isinstance(namespaces, list) or any(n != namespace for n in namespaces)):
                problems.append(
                    f"{path}.namespaces: a consumer's pods may relate only to pods of their own namespace "
                    f"({namespace!r}), not to the provider's or other tenants'; never granted; remove namespaces"
                )
            if term.get("namespaceSelector") is not None:
                problems.append(
                    f"{path}.namespaceSelector: a consumer's pods may relate only to pods of their own namespace "
                    f"({namespace!r}), not to the provider's or other tenants'; never granted; remove namespaceSelector"
                )
    return problems


def _reserved_description(policy: ProviderPolicy) -> str:
    always = ", ".join(f"{k}*" if k.endswith("/") else k for k in pp.ALWAYS_RESERVED_NODE_KEYS)
    return f"always {always}; and what Consumer {pp.POLICY}.pods.reservedNodeLabelKeys lists"


def _reserved_key_problem(field: str, key: str, policy: ProviderPolicy, verb: str) -> str:
    # Always-reserved keys are never granted; the others the provider itself chose to
    # reserve, with the key named here.
    never = pp.key_matches(key, pp.ALWAYS_RESERVED_NODE_KEYS)
    return (
        f"{field}: {key!r} is a node label key the provider reserves, which a consumer's pods may not {verb} "
        f"(reserved: {_reserved_description(policy)}); {'never granted' if never else 'reserved by the provider'}; remove it"
    )


# --- volumes -------------------------------------------------------------------------------------
def volume_problems(spec: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    problems = []
    for index, volume in _items(spec, "volumes", POD_SPEC):
        path = f"{POD_SPEC}.volumes[{index}]"
        name = volume.get(VOLUME_NAME_FIELD)
        kinds = [k for k, v in volume.items() if k != VOLUME_NAME_FIELD and v is not None]
        for kind in kinds:
            field = f"{path}.{kind}"
            if kind in pp.NEVER_VOLUME_TYPES:
                problems.append(
                    f'{field}: volume "{name}" would mount a directory of the provider\'s node, which is never granted '
                    f"to a consumer ({pp.POLICY}.pods.volumeTypes cannot hold {kind}); use another volume type "
                    "(emptyDir, configMap, secret, persistentVolumeClaim)"
                )
            elif kind not in policy.pods.volume_types:
                problems.append(
                    f'{field}: volume "{name}" of type {kind} is not granted to {who} (it reaches beyond the pod\'s '
                    f"namespace); {_grant('pods.volumeTypes')}, or use a persistentVolumeClaim"
                )
            elif kind == "ephemeral":
                problems += _ephemeral_problems(field, name, volume.get(kind), policy, who)
            elif kind == "projected":
                problems += _projected_problems(field, name, volume.get(kind))
    return problems


def _ephemeral_problems(field: str, name: Any, ephemeral: Any, policy: ProviderPolicy, who: str) -> list[str]:
    if not isinstance(ephemeral, Mapping):
        raise Invalid(f"{field}: must be an object")
    template = field_mapping(ephemeral, "volumeClaimTemplate", field)
    claim = field_mapping(template, "spec", f"{field}.volumeClaimTemplate")
    class_field = f"{field}.volumeClaimTemplate.spec.storageClassName"
    storage_class = claim.get("storageClassName")
    if claim.get("volumeName"):
        return [f"{field}.volumeClaimTemplate.spec.volumeName: a claim may not name a PersistentVolume (it could bind "
                "someone else's data); never granted; remove volumeName"]
    if storage_class in policy.storage.classes:
        return _claim_size_problems(field, name, claim, policy, who)
    if not storage_class:
        return [f'{class_field}: volume "{name}" names no storage class (the provider\'s default); name one granted to '
                f"{who}: {_granted_list(policy.storage.classes)}; {_grant('storage.classes')}"]
    return [f'{class_field}: storage class {storage_class!r} is not granted to {who} '
            f"(granted: {_granted_list(policy.storage.classes)}); {_grant('storage.classes')}"]


def _claim_size_problems(field: str, name: Any, claim: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    """A generic ephemeral volume's claim is made by the provider's own controller, which
    the PVC admission policy does not judge: its size is bounded here, by the same key."""
    size_field = f"{field}.volumeClaimTemplate.spec.resources.requests.storage"
    requests = field_mapping(field_mapping(claim, "resources", f"{field}.volumeClaimTemplate.spec"), "requests",
                             f"{field}.volumeClaimTemplate.spec.resources")
    size = requests.get("storage")
    if size is None:
        return []
    try:
        too_big = parse_quantity(size) > parse_quantity(policy.storage.max_claim_size)
    except QuantityError as exc:
        raise Invalid(f"{size_field}: {exc}") from None
    if not too_big:
        return []
    return [f'{size_field}: volume "{name}" claims {size}, more than the {policy.storage.max_claim_size} {who} may claim '
            f"at once; {_grant('storage.maxClaimSize')} (default {pp.DEFAULT_MAX_CLAIM_SIZE}), or claim less"]


def _projected_problems(field: str, name: Any, projected: Any) -> list[str]:
    if not isinstance(projected, Mapping):
        raise Invalid(f"{field}: must be an object")
    problems = []
    for index, source in _items(projected, "sources", field):
        for kind, value in source.items():
            if value is None or kind in pp.PROJECTED_SOURCES:
                continue
            why = ("a token of the provider's ServiceAccount, which a consumer's pods never get"
                   if kind == "serviceAccountToken" else "it is not a namespaced object")
            problems.append(
                f'{field}.sources[{index}].{kind}: projected volume "{name}" may combine only '
                f"{', '.join(pp.PROJECTED_SOURCES)} sources, not {kind} ({why}); never granted; remove it"
            )
    return problems


def _granted_list(items: tuple[str, ...]) -> str:
    return ", ".join(items) if items else "none"


# --- runtime class -------------------------------------------------------------------------------
def runtime_class_problems(spec: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    name = spec.get("runtimeClassName")
    if name in (None, ""):
        return []
    if not isinstance(name, str):
        raise Invalid(f"{POD_SPEC}.runtimeClassName: must be a string")
    if name in policy.pods.runtime_classes:
        return []
    return [f"{POD_SPEC}.runtimeClassName: runtime class {name!r} is not granted to {who}; "
            f"{_grant('pods.runtimeClasses')}, or remove runtimeClassName (the provider's default runtime)"]


# --- labels and annotations ----------------------------------------------------------------------
def metadata_problems(metadata: Mapping[str, Any], policy: ProviderPolicy, who: str) -> list[str]:
    denied = (*pp.ALWAYS_DENIED_METADATA_PREFIXES, *policy.pods.denied_metadata_prefixes)
    problems = []
    for kind in ("labels", "annotations"):
        for key in field_mapping(metadata, kind, POD_METADATA):
            key = str(key)
            if key in pp.CONSUMER_METADATA_KEYS:
                continue
            prefix = next((p for p in denied if key.startswith(p)), None)
            if prefix is None:
                continue
            always = prefix in pp.ALWAYS_DENIED_METADATA_PREFIXES
            how = ("configures the provider's own controllers; never granted"
                   if always else f"is denied to {who} by Consumer {pp.POLICY}.pods.deniedMetadataPrefixes")
            problems.append(f"{POD_METADATA}.{kind}[{key}]: keys under {prefix!r} {how}; remove it")
    return problems


# --- reading the template ------------------------------------------------------------------------
def field_mapping(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """``parent[key]`` as an object ({} when absent), or Invalid naming ``path.key``
    (shared with enforcer.admission.validation, which reads the same template)."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Invalid(f"{path}.{key}: must be an object")
    return value


def _items(parent: Mapping[str, Any], key: str, path: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    value = parent.get(key)
    if value is None:
        return
    if not isinstance(value, list):
        raise Invalid(f"{path}.{key}: must be a list")
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise Invalid(f"{path}.{key}[{index}]: must be an object")
        yield index, item
