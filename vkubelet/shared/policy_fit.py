"""What the provider's policy would refuse, dropped before it is sent (pure).

The provider holds everything our identity writes to its policy for us
(``Consumer.spec.policy``, kube_offload/provider_policy.py) and refuses the rest at
admission. An honest consumer does not send what it knows will be refused: it takes out
what can be taken out without losing the object (a priority class, a toleration, a
Service type, an annotation...) and says so, field by field, on the LOCAL object (a
Warning Event, policy_events.py), so local users learn the provider's terms without
reading its logs. What cannot be taken out without changing what the object *is* (a
volume the pod mounts, an Ingress host, a claim's class) is not sent at all; the local
object says why.

Each ``fit_*`` takes the object as it would be sent and the policy, and returns a
:class:`Fit`: the adjusted object, the notes on what was adjusted, and the notes that
refuse it (non-empty: do not send). A note names the field, what was dropped, why, and
the policy key a provider would change to grant it. docs/virtual-kubelet.md ("What the
provider's policy takes out") and docs/reflection.md list the rules.

Decisions worth knowing (the docs say them to users):

* **Node affinity**: a required term's requirement on a reserved key (the hostname, a
  node role...) is dropped from that term, the term's other requirements stay: the pod
  may then land on more nodes than asked (the closest the provider admits). A term left
  with no requirement matches any node, which voids the whole required affinity, as the
  scheduler reads it.
* **Spread and pod (anti-)affinity** over a reserved topology key (a node role, a
  provider-reserved key) are dropped whole: the key is what the constraint is about.
  ``kubernetes.io/hostname`` is kept there (provider_policy.reserved_topology_key: every
  node has it, so spreading by it selects no node), so one-replica-per-node still holds.
* **Tolerations** Kubernetes itself adds to every pod (DefaultTolerationSeconds:
  not-ready and unreachable, NoExecute, 300 s) are dropped without a word: the
  provider's admission adds the same ones again. Other tolerations of reserved keys, a
  tolerate-all and keys the provider does not grant are dropped with a note.
* **imagePullPolicy** becomes ``Always`` (the provider's rule: a private image cached
  on one of its nodes must not run without its pull credentials). Only ``Never`` gets a
  note: local admission writes ``IfNotPresent`` into nearly every pod, and pulling each
  time changes nothing the user sees.
* **Storage**: a claim naming a class the provider does not grant, or larger than its
  largest grant, cannot be made; one naming no class takes the provider's default class,
  which only the provider knows: sent, unless the provider grants no class at all.

Why one module (about 600 lines): it is the consumer's copy of one rule book, the
provider's admission of ``Consumer.spec.policy`` (kube_offload/provider_policy.py and the
enforcer's admission), and each rule here is checked against its twin there; one file
read beside the other is how that check is done. The pod's rules are most of it; the
other kinds are one function each (30 to 60 lines) over the same ``Note``/``Fit`` shapes
and the same grant and reserved-key helpers. All pure, table-tested in one file.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.resources import QuantityError, parse_quantity


# Where a provider grants what a note is about: the policy key it would change.
def policy_key(section: str, name: str) -> str:
    return f"Consumer spec.policy.{section}.{name}"


# The tolerations the DefaultTolerationSeconds admission plugin adds to every pod that
# has none of its own for these taints; the provider's admission adds them again.
DEFAULT_TOLERATION_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DEFAULT_TOLERATION_SECONDS = 300
ALWAYS = "Always"
# The annotations reflection itself puts on every object it writes (which local object
# it stands for): the provider's own to expect, never the user's to be granted.
REFLECTION_ANNOTATIONS = (c.ANNOTATION_ORIGIN_NAMESPACE, c.ANNOTATION_ORIGIN_NAME)
# The annotation Ingress controllers read before spec.ingressClassName existed.
LEGACY_INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"


@dataclass(frozen=True)
class Note:
    """One thing the policy changed or refuses: ``field`` is the object's field path,
    ``message`` the sentence the local user reads (it starts with the field)."""

    field: str
    message: str


@dataclass(frozen=True)
class Fit:
    obj: Any  # the adjusted object (or spec): a copy, never the input
    adjusted: tuple[Note, ...] = ()
    # Non-empty: the object cannot be made acceptable; it must not be sent.
    refused: tuple[Note, ...] = ()

    @property
    def notes(self) -> tuple[Note, ...]:
        return (*self.adjusted, *self.refused)


@dataclass(frozen=True)
class PodFit:
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    adjusted: tuple[Note, ...] = ()
    refused: tuple[Note, ...] = ()


def _q(value: Any) -> str:
    return f'"{value}"'


def _granted(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(values) if values else "none"


# --- pods ------------------------------------------------------------------------------------------
def fit_pod(labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any], policy: pp.ProviderPolicy) -> PodFit:
    """The pod as the provider's policy admits it (labels, annotations and spec as the
    translation would send them), with a note per change and the notes that refuse it."""
    sent: dict[str, Any] = copy.deepcopy(dict(spec))
    adjusted: list[Note] = []
    refused: list[Note] = []
    kept_labels = _fit_metadata("metadata.labels", labels, policy, adjusted)
    kept_annotations = _fit_metadata("metadata.annotations", annotations, policy, adjusted)
    _fit_priority_class(sent, policy, adjusted)
    _fit_runtime_class(sent, policy, adjusted)
    _fit_tolerations(sent, policy, adjusted)
    _fit_node_selector(sent, policy, adjusted)
    _fit_node_affinity(sent, policy, adjusted)
    _fit_pod_affinity(sent, policy, adjusted)
    _fit_topology_spread(sent, policy, adjusted)
    _fit_image_pull_policy(sent, adjusted)
    _check_volumes(sent, policy, refused)
    _check_remote_api_access(sent, policy, refused)
    return PodFit(kept_labels, kept_annotations, sent, tuple(adjusted), tuple(refused))


def _check_remote_api_access(spec: Mapping[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    """A pod in API server mode ``remote`` asks for the provider's API (a token of the twin
    namespace's account). Not granted, it is not sent: running it without any API access
    would break it in a way its owner chose against, and giving it its home API instead
    would go against the choice too."""
    if spec.get("automountServiceAccountToken") is not True or policy.pods.remote_api_access:
        return
    path = "spec.automountServiceAccountToken"
    notes.append(Note(path, (
        f"{path}: the pod asks for the provider's API server ({c.ANNOTATION_API_SERVER}={c.API_SERVER_REMOTE}), "
        f"which the provider does not grant ({policy_key('pods', 'remoteAPIAccess')}: false); set the annotation to "
        f"{c.API_SERVER_HOME} or {c.API_SERVER_DISABLED}, or ask the provider for the grant"
    )))


def _fit_metadata(where: str, items: Mapping[str, str], policy: pp.ProviderPolicy, notes: list[Note]) -> dict[str, str]:
    kept: dict[str, str] = {}
    for key, value in items.items():
        if pp.denied_metadata_key(key, policy):
            path = f"{where}[{key}]"
            notes.append(Note(path, (
                f"{path} dropped: the key configures the provider's own controllers and is not the consumer's to set "
                f"(always denied: {', '.join(pp.ALWAYS_DENIED_METADATA_PREFIXES)}; more in "
                f"{policy_key('pods', 'deniedMetadataPrefixes')})"
            )))
        else:
            kept[key] = value
    return kept


def _fit_priority_class(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    name = spec.get("priorityClassName")
    if not name or name in policy.pods.priority_classes:
        return
    spec.pop("priorityClassName")
    path = "spec.priorityClassName"
    if str(name).startswith(pp.SYSTEM_PRIORITY_PREFIX):
        why = (
            "system-* classes preempt the provider's own components and are never granted "
            f"({policy_key('pods', 'priorityClasses')} cannot list them)"
        )
    else:
        why = f"the provider grants no such class ({policy_key('pods', 'priorityClasses')}: {_granted(policy.pods.priority_classes)})"
    notes.append(Note(path, f"{path} {_q(name)} dropped: {why}"))


def _fit_runtime_class(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    name = spec.get("runtimeClassName")
    if not name or name in policy.pods.runtime_classes:
        return
    spec.pop("runtimeClassName")
    path = "spec.runtimeClassName"
    notes.append(Note(path, (
        f"{path} {_q(name)} dropped: the provider grants no such runtime class, the pod runs with its default runtime "
        f"({policy_key('pods', 'runtimeClasses')}: {_granted(policy.pods.runtime_classes)})"
    )))


def _is_default_toleration(toleration: Mapping[str, Any]) -> bool:
    return (
        toleration.get("key") in DEFAULT_TOLERATION_KEYS
        and toleration.get("operator", "Equal") == "Exists"
        and toleration.get("effect") == "NoExecute"
        and toleration.get("tolerationSeconds") == DEFAULT_TOLERATION_SECONDS
    )


def _toleration_text(toleration: Mapping[str, Any]) -> str:
    key = toleration.get("key") or ""
    text = key or "(every key)"
    if toleration.get("operator") == "Exists" or not key:
        text += " Exists"
    elif toleration.get("value"):
        text += f"={toleration['value']}"
    if toleration.get("effect"):
        text += f":{toleration['effect']}"
    return text


def _fit_tolerations(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        return
    kept = []
    for index, toleration in enumerate(tolerations):
        key = str(toleration.get("key") or "")
        path = f"spec.tolerations[{index}]"
        if not key:
            why = "a toleration without a key tolerates every taint, which the provider never grants"
        elif pp.reserved_node_key(key, policy):
            if _is_default_toleration(toleration):
                continue  # Kubernetes' own default: the provider's admission adds it again
            why = f"{key} is a node key the provider reserves ({policy_key('pods', 'reservedNodeLabelKeys')} and the always-reserved {', '.join(pp.ALWAYS_RESERVED_NODE_KEYS)})"
        elif key not in policy.pods.tolerations:
            why = f"the provider grants no toleration of {key} ({policy_key('pods', 'tolerations')}: {_granted(policy.pods.tolerations)})"
        else:
            kept.append(toleration)
            continue
        notes.append(Note(path, f"{path} ({_toleration_text(toleration)}) dropped: {why}"))
    if kept:
        spec["tolerations"] = kept
    else:
        spec.pop("tolerations", None)


def _reserved_why(key: str) -> str:
    return (
        f"{key} is a node key the provider reserves (always: {', '.join(pp.ALWAYS_RESERVED_NODE_KEYS)}; "
        f"more in {policy_key('pods', 'reservedNodeLabelKeys')})"
    )


def _fit_node_selector(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    selector = spec.get("nodeSelector")
    if not isinstance(selector, dict):
        return
    kept = {}
    for key, value in selector.items():
        if pp.reserved_node_key(str(key), policy):
            path = f"spec.nodeSelector[{key}]"
            notes.append(Note(path, f"{path} ({key}={value}) dropped: {_reserved_why(str(key))}"))
        else:
            kept[key] = value
    if kept:
        spec["nodeSelector"] = kept
    else:
        spec.pop("nodeSelector")


def _fit_term(term: Mapping[str, Any], path: str, policy: pp.ProviderPolicy, notes: list[Note]) -> dict[str, Any] | None:
    """A NodeSelectorTerm without requirements on reserved keys (matchFields name nodes,
    which is pinning: dropped too); None when nothing is left (the term matches any node)."""
    kept: dict[str, list[Any]] = {}
    for part in ("matchExpressions", "matchFields"):
        items = []
        for index, requirement in enumerate(term.get(part) or []):
            key = str(requirement.get("key") or "")
            if part == "matchFields" or pp.reserved_node_key(key, policy):
                where = f"{path}.{part}[{index}]"
                why = "a node field names a node, which pins the pod" if part == "matchFields" else _reserved_why(key)
                notes.append(Note(where, f"{where} (requirement on {key}) dropped: {why}"))
            else:
                items.append(requirement)
        if items:
            kept[part] = items
    return kept or None


def _fit_node_affinity(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict) or not isinstance(affinity.get("nodeAffinity"), dict):
        return
    node_affinity = affinity["nodeAffinity"]
    base = "spec.affinity.nodeAffinity"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        path = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        terms, void = [], False
        for index, term in enumerate(required.get("nodeSelectorTerms") or []):
            fitted = _fit_term(term, f"{path}.nodeSelectorTerms[{index}]", policy, notes)
            if fitted is None:
                void = True  # a term that matches any node: the requirement says nothing
            else:
                terms.append(fitted)
        if void or not terms:
            node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution")
        else:
            required["nodeSelectorTerms"] = terms
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(preferred, list):
        path = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
        kept = []
        for index, item in enumerate(preferred):
            fitted = _fit_term(item.get("preference") or {}, f"{path}[{index}].preference", policy, notes)
            if fitted is not None:
                kept.append({**item, "preference": fitted})
        if kept:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = kept
        else:
            node_affinity.pop("preferredDuringSchedulingIgnoredDuringExecution")
    if not node_affinity:
        affinity.pop("nodeAffinity")
    if not affinity:
        spec.pop("affinity")


def _without_reserved_topology(
    items: list[Any], path: str, policy: pp.ProviderPolicy, notes: list[Note], *, term_of: Callable[[Any], Mapping[str, Any]]
) -> list[Any]:
    """``items`` without those whose ``topologyKey`` (read from ``term_of(item)``) the
    provider reserves, a note for each one dropped: spread constraints and pod
    (anti-)affinity terms are judged alike."""
    kept = []
    for index, item in enumerate(items):
        key = str(term_of(item).get("topologyKey") or "")
        if pp.reserved_topology_key(key, policy):
            where = f"{path}[{index}]"
            notes.append(Note(where, f"{where} (topologyKey {key}) dropped: {_reserved_why(key)}"))
        else:
            kept.append(item)
    return kept


def _fit_pod_affinity(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if not isinstance(section, dict):
            continue
        for when in ("requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"):
            terms = section.get(when)
            if not isinstance(terms, list):
                continue
            preferred = when.startswith("preferred")
            kept = _without_reserved_topology(
                terms, f"spec.affinity.{kind}.{when}", policy, notes,
                term_of=lambda item: item.get("podAffinityTerm") or {} if preferred else item,  # noqa: B023 (called in this iteration)
            )
            if len(kept) == len(terms):
                continue  # untouched, as the user wrote it (an empty list included)
            if kept:
                section[when] = kept
            else:
                section.pop(when)
        if not section:
            affinity.pop(kind)
    if not affinity:
        spec.pop("affinity")


def _fit_topology_spread(spec: dict[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    constraints = spec.get("topologySpreadConstraints")
    if not isinstance(constraints, list):
        return
    kept = _without_reserved_topology(constraints, "spec.topologySpreadConstraints", policy, notes, term_of=lambda item: item)
    if len(kept) == len(constraints):
        return
    if kept:
        spec["topologySpreadConstraints"] = kept
    else:
        spec.pop("topologySpreadConstraints")


def _fit_image_pull_policy(spec: dict[str, Any], notes: list[Note]) -> None:
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            before = container.get("imagePullPolicy")
            container["imagePullPolicy"] = ALWAYS
            if before == "Never":
                path = f"spec.{kind}[{index}].imagePullPolicy"
                notes.append(Note(path, (
                    f"{path} Never changed to Always: the provider runs only images pulled with the pod's own "
                    "credentials (an image cached on one of its nodes may be someone else's)"
                )))


def volume_type(volume: Mapping[str, Any]) -> str:
    """The kind of a PodSpec volume: its one field besides ``name`` (``emptyDir``, ``nfs``...)."""
    kinds = [k for k in volume if k != "name"]
    return kinds[0] if kinds else "emptyDir"  # the API defaults a bare volume to emptyDir


def _check_volumes(spec: Mapping[str, Any], policy: pp.ProviderPolicy, notes: list[Note]) -> None:
    for index, volume in enumerate(spec.get("volumes") or []):
        kind = volume_type(volume)
        path = f"spec.volumes[{index}]"
        label = f"{path} ({volume.get('name')})"
        if kind in pp.NEVER_VOLUME_TYPES or kind not in policy.pods.volume_types:
            never = " (never granted: it mounts the node's files)" if kind in pp.NEVER_VOLUME_TYPES else ""
            notes.append(Note(path, (
                f"{label}: volume type {kind} is not granted{never}; the pod is not sent "
                f"({policy_key('pods', 'volumeTypes')}: {_granted(policy.pods.volume_types)})"
            )))
            continue
        if kind == "ephemeral":
            claim = ((volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
            problem = claim_problem(claim.get("storageClassName"), _claim_request(claim), policy)
            if problem:
                notes.append(Note(path, f"{label}: its claim {problem}; the pod is not sent"))


# --- storage ------------------------------------------------------------------------------------------
def _claim_request(claim_spec: Mapping[str, Any]) -> Any:
    return ((claim_spec.get("resources") or {}).get("requests") or {}).get("storage")


def claim_problem(storage_class: str | None, request: Any, policy: pp.ProviderPolicy) -> str | None:
    """Why the provider would refuse a claim of ``storage_class`` (None: its default
    class) for ``request`` bytes of storage, or None."""
    classes = policy.storage.classes
    if not classes:
        return f"cannot be made: the provider grants no storage class ({policy_key('storage', 'classes')}: none)"
    if storage_class and storage_class not in classes:
        return (
            f"names storage class {_q(storage_class)}, which the provider does not grant "
            f"({policy_key('storage', 'classes')}: {_granted(classes)})"
        )
    if policy.storage.max_claim_size and request is not None:
        try:
            too_big = parse_quantity(request) > parse_quantity(policy.storage.max_claim_size)
        except (QuantityError, TypeError, ValueError):
            return None  # the provider's admission says what is wrong with it
        if too_big:
            return (
                f"asks for {request} of storage, more than the {policy.storage.max_claim_size} the provider grants "
                f"one claim ({policy_key('storage', 'maxClaimSize')})"
            )
    return None


def fit_pvc(claim: Mapping[str, Any], policy: pp.ProviderPolicy) -> Fit:
    """A reflected claim (its class already mapped to the remote one): refused when the
    provider would not make it."""
    spec = claim.get("spec") or {}
    problem = claim_problem(spec.get("storageClassName"), _claim_request(spec), policy)
    if problem is None:
        return Fit(claim)
    field_ = "spec.storageClassName" if "storage class" in problem else "spec.resources.requests.storage"
    return Fit(claim, refused=(Note(field_, f"the claim {problem}; it is not reflected"),))


# --- Services -------------------------------------------------------------------------------------------
# Fields that only mean something for a Service reached from outside the cluster.
_EXTERNAL_SERVICE_FIELDS = (
    "externalTrafficPolicy",
    "healthCheckNodePort",
    "loadBalancerIP",
    "loadBalancerSourceRanges",
    "loadBalancerClass",
    "allocateLoadBalancerNodePorts",
)


def _in_cidrs(address: str, cidrs: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        if ip.version == network.version and ip in network:
            return True
    return False


def fit_service(service: Mapping[str, Any], policy: pp.ProviderPolicy) -> Fit:
    """A reflected Service as the provider's policy admits it: a type not granted becomes
    ClusterIP (node ports and load-balancer fields go with it), external IPs outside the
    granted CIDRs are dropped; an ExternalName Service not granted is refused."""
    fitted: dict[str, Any] = copy.deepcopy(dict(service))
    spec = fitted.setdefault("spec", {})
    adjusted: list[Note] = []
    service_type = spec.get("type") or "ClusterIP"
    if service_type == "ExternalName" and not policy.services.external_name:
        note = Note("spec.type", (
            f"spec.type ExternalName ({spec.get('externalName')}) is not granted: the Service is not reflected "
            f"({policy_key('services', 'externalName')})"
        ))
        return Fit(fitted, refused=(note,))
    if service_type in pp.GRANTABLE_SERVICE_TYPES and service_type not in policy.services.types:
        spec["type"] = "ClusterIP"
        for key in _EXTERNAL_SERVICE_FIELDS:
            spec.pop(key, None)
        for port in spec.get("ports") or []:
            port.pop("nodePort", None)
        adjusted.append(Note("spec.type", (
            f"spec.type {service_type} changed to ClusterIP: the provider grants no {service_type} Services "
            f"({policy_key('services', 'types')}: {_granted(policy.services.types)})"
        )))
    external = spec.get("externalIPs")
    if isinstance(external, list) and external:
        kept = [a for a in external if _in_cidrs(str(a), policy.services.external_ip_cidrs)]
        for address in external:
            if address not in kept:
                adjusted.append(Note("spec.externalIPs", (
                    f"spec.externalIPs {_q(address)} dropped: outside the CIDRs the provider grants "
                    f"({policy_key('services', 'externalIPCIDRs')}: {_granted(policy.services.external_ip_cidrs)})"
                )))
        if kept:
            spec["externalIPs"] = kept
        else:
            spec.pop("externalIPs")
            if spec.get("type", "ClusterIP") == "ClusterIP":
                spec.pop("externalTrafficPolicy", None)  # only meaningful with external IPs
    return Fit(fitted, adjusted=tuple(adjusted))


# --- EndpointSlices ----------------------------------------------------------------------------------------
def fit_endpointslice(slice_: Mapping[str, Any], policy: pp.ProviderPolicy) -> Fit:
    """A reflected slice (local pods' addresses, as the remote cluster reaches them) with
    only the addresses inside the ranges the provider grants (``endpoints.cidrs``: the
    consumer's remapped pod range, typically); none left: not reflected. One note for
    all the addresses taken out, worded without them, so that pods coming and going do
    not make a new Event each time."""
    fitted: dict[str, Any] = copy.deepcopy(dict(slice_))
    cidrs = policy.endpoints.cidrs
    why = (
        "outside the address ranges the provider grants "
        f"({policy_key('endpoints', 'cidrs')}: {_granted(cidrs)})"
    )
    endpoints, dropped = [], False
    for endpoint in fitted.get("endpoints") or []:
        addresses = [a for a in endpoint.get("addresses") or [] if _in_cidrs(str(a), cidrs)]
        dropped = dropped or len(addresses) != len(endpoint.get("addresses") or [])
        if addresses:
            endpoints.append({**endpoint, "addresses": addresses})
    if not dropped:
        return Fit(fitted)
    if not endpoints:
        note = Note("endpoints", f"endpoints[].addresses: every address is {why}; the slice is not reflected")
        return Fit(fitted, refused=(note,))
    fitted["endpoints"] = endpoints
    return Fit(fitted, adjusted=(Note("endpoints", f"endpoints[].addresses {why} dropped"),))


# --- Ingresses ------------------------------------------------------------------------------------------------
def host_granted(host: str, domains: tuple[str, ...]) -> bool:
    """Whether Ingress host ``host`` (``*.`` wildcards included) is ``domains``' one or
    under one of them."""
    name = host[2:] if host.startswith("*.") else host
    return any(name == d or name.endswith(f".{d}") for d in (d.lstrip(".").rstrip(".") for d in domains))


def fit_ingress(ingress: Mapping[str, Any], policy: pp.ProviderPolicy) -> Fit:
    """A reflected Ingress as the provider's policy admits it: annotations not granted
    are dropped, a catch-all default backend beside host rules too; a class not granted,
    a host outside the granted domains, or nothing but a catch-all: not reflected."""
    fitted: dict[str, Any] = copy.deepcopy(dict(ingress))
    meta = fitted.setdefault("metadata", {})
    spec = fitted.setdefault("spec", {})
    adjusted: list[Note] = []
    refused: list[Note] = []
    granted_domains = _granted(policy.ingress.host_domains)
    domains_key = policy_key("ingress", "hostDomains")

    annotations = dict(meta.get("annotations") or {})
    legacy_class = annotations.get(LEGACY_INGRESS_CLASS_ANNOTATION)
    if legacy_class and not spec.get("ingressClassName"):
        # The class in the field the provider's policy reads (both at once is invalid).
        spec["ingressClassName"] = legacy_class
        annotations.pop(LEGACY_INGRESS_CLASS_ANNOTATION)
        adjusted.append(Note(f"metadata.annotations[{LEGACY_INGRESS_CLASS_ANNOTATION}]", (
            f"metadata.annotations[{LEGACY_INGRESS_CLASS_ANNOTATION}] {_q(legacy_class)} moved to spec.ingressClassName, "
            "the field the provider's policy reads"
        )))
    class_name = spec.get("ingressClassName")
    if not class_name:
        refused.append(Note("spec.ingressClassName", (
            "spec.ingressClassName is not set: the provider admits Ingresses of the classes it grants only, the "
            f"Ingress is not reflected ({policy_key('ingress', 'classes')}: {_granted(policy.ingress.classes)})"
        )))
    elif class_name not in policy.ingress.classes:
        refused.append(Note("spec.ingressClassName", (
            f"spec.ingressClassName {_q(class_name)} is not granted: the Ingress is not reflected "
            f"({policy_key('ingress', 'classes')}: {_granted(policy.ingress.classes)})"
        )))

    rules = spec.get("rules") or []
    for index, rule in enumerate(rules):
        host = rule.get("host")
        path = f"spec.rules[{index}].host"
        if not host:
            refused.append(Note(path, (
                f"{path} is not set: a rule without a host catches every host, which the provider never admits; the "
                "Ingress is not reflected"
            )))
        elif not host_granted(str(host), policy.ingress.host_domains):
            refused.append(Note(path, (
                f"{path} {_q(host)} is not under a domain the provider grants: the Ingress is not reflected "
                f"({domains_key}: {granted_domains})"
            )))
    for index, tls in enumerate(spec.get("tls") or []):
        for host_index, host in enumerate(tls.get("hosts") or []):
            if not host_granted(str(host), policy.ingress.host_domains):
                path = f"spec.tls[{index}].hosts[{host_index}]"
                refused.append(Note(path, (
                    f"{path} {_q(host)} is not under a domain the provider grants: the Ingress is not reflected "
                    f"({domains_key}: {granted_domains})"
                )))
    if spec.get("defaultBackend") is not None:
        if rules:
            spec.pop("defaultBackend")
            adjusted.append(Note("spec.defaultBackend", (
                "spec.defaultBackend dropped: a default backend catches every host, which the provider never admits "
                "(the rules are kept)"
            )))
        else:
            refused.append(Note("spec.defaultBackend", (
                "spec.defaultBackend catches every host, which the provider never admits, and the Ingress has no "
                "rules: it is not reflected"
            )))

    kept = {}
    for key, value in annotations.items():
        if key in REFLECTION_ANNOTATIONS or pp.key_matches(key, policy.ingress.annotations):
            kept[key] = value
            continue
        path = f"metadata.annotations[{key}]"
        adjusted.append(Note(path, (
            f"{path} dropped: the provider does not grant this Ingress annotation "
            f"({policy_key('ingress', 'annotations')}: {_granted(policy.ingress.annotations)})"
        )))
    if "annotations" in meta:
        meta["annotations"] = kept
    return Fit(fitted, adjusted=tuple(adjusted), refused=tuple(refused))


