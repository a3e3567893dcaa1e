"""What the provider's policy would refuse, taken out before it is sent (pure).

The provider holds everything our identity writes to its policy for us
(``Consumer.spec.policy``, kube_offload/provider_policy.py) and refuses the rest at
admission. An honest consumer does not send what it knows will be refused: it takes out
what can be taken out without losing the object (a priority class, a toleration, a
Service type, an annotation...) and says so, field by field, on the LOCAL object (a
Warning Event, policy_events.py), so local users learn the provider's terms without
reading its logs. What cannot be taken out without changing what the object *is* (a
volume the pod mounts, an image from a registry not granted, an Ingress host, a claim's
class) is not sent at all; the local object says why.

The rules are not written here: each is one predicate of the rule book
(kube_offload/rule_book.py), from which the provider's refusal is derived too; a violation
carries its fit (the edits that make the object acceptable, or none: not sent). This module
only shapes what the virtual kubelet sends and says:

* each ``fit_*`` takes the object as it would be sent and the policy, and returns a
  :class:`Fit`: the adjusted object, the notes on what was adjusted, and the notes that
  refuse it (non-empty: do not send). A note names the field, what was done, why, and the
  policy key a provider would change (docs/virtual-kubelet.md "What the provider's policy
  takes out", docs/reflection.md);
* what is ours, not the provider's: Kubernetes' default tolerations go without a word (the
  provider's admission adds them again); every container pulls ``Always`` (the provider's
  rule: a private image cached on one of its nodes must not run without its pull
  credentials; only ``Never`` gets a note, since local admission writes ``IfNotPresent``
  into nearly every pod); an Ingress's legacy class annotation moves to the field the
  policy reads; an EndpointSlice's addresses taken out are told in one note, worded
  without them, so that pods coming and going do not make a new Event each time.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload import provider_policy as pp
from kube_offload import rule_book
from kube_offload.policy_rules import Context, Kind, Violation, note_text


# Where a provider grants what a note is about: the policy key it would change.
def policy_key(section: str, name: str) -> str:
    return f"Consumer spec.policy.{section}.{name}"


# The tolerations the DefaultTolerationSeconds admission plugin adds to every pod that
# has none of its own for these taints; the provider's admission adds them again.
DEFAULT_TOLERATION_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DEFAULT_TOLERATION_SECONDS = 300
ALWAYS = "Always"
EPHEMERAL = "ephemeralContainers"
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
    # Ephemeral containers taken out: (name, why), each judged on its own (_fit_ephemeral).
    ephemeral_refused: tuple[tuple[str, str], ...] = ()


def _notes(violations: tuple[Violation, ...]) -> tuple[Note, ...]:
    return tuple(Note(v.field, note_text(v)) for v in violations)


def _fit(kind: Kind, obj: Mapping[str, Any], ctx: Context, *, before: tuple[Note, ...] = ()) -> Fit:
    fitted = rule_book.fitted(kind, obj, ctx)
    return Fit(fitted.obj, (*before, *_notes(fitted.adjusted)), _notes(fitted.refused))


# --- pods ------------------------------------------------------------------------------------------
def fit_pod(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    spec: Mapping[str, Any],
    policy: pp.ProviderPolicy,
    *,
    consumer_id: str = "",
    namespace: str = "",
    quota: Mapping[str, int] | None = None,
) -> PodFit:
    """The pod as the provider's policy admits it (labels, annotations and spec as the
    translation would send them), with a note per change and the notes that refuse it.
    ``consumer_id``: ours, as the provider knows us; ``namespace``: the twin it goes to;
    ``quota``: our Consumer's quota as read under its quota mode
    (kube_offload.consumer_quota.consumer_quota)."""
    sent: dict[str, Any] = copy.deepcopy(dict(spec))
    ephemeral = sent.pop(EPHEMERAL, None)
    _drop_default_tolerations(sent)
    pull_notes = _fit_image_pull_policy(sent)
    pod = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}, "spec": sent}
    ctx = Context(policy=policy, consumer_id=consumer_id, namespace=namespace, quota=dict(quota or {}))
    fitted = rule_book.fitted(Kind.POD, pod, ctx)
    meta = fitted.obj.get("metadata") or {}
    fitted_spec = fitted.obj.get("spec") or {}
    kept, refused = _fit_ephemeral(fitted.obj, ephemeral, ctx)
    if kept:
        fitted_spec[EPHEMERAL] = kept
    return PodFit(
        dict(meta.get("labels") or {}), dict(meta.get("annotations") or {}), fitted_spec,
        (*_notes(fitted.adjusted), *pull_notes), _notes(fitted.refused), refused,
    )


def _fit_ephemeral(pod: Mapping[str, Any], containers: Any, ctx: Context) -> tuple[list[dict[str, Any]], tuple[tuple[str, str], ...]]:
    """The ephemeral containers (kubectl debug) the provider admits into the fitted ``pod``,
    and (name, why) of the others. Each is judged alone, in the pod as it will run with it:
    one the provider refuses (debugging not granted, an image from a registry not granted)
    is taken out without refusing the pod, which runs on (an ephemeral container cannot be
    removed, so refusing the pod for it would hold the pod's every later update)."""
    kept: list[dict[str, Any]] = []
    refused: list[tuple[str, str]] = []
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, Mapping):
            continue
        candidate = {**copy.deepcopy(dict(container)), "imagePullPolicy": ALWAYS}
        alone = {**pod, "spec": {**(pod.get("spec") or {}), EPHEMERAL: [candidate]}}
        problems = [v for v in rule_book.check(Kind.POD, alone, ctx) if v.field.startswith(f"spec.{EPHEMERAL}")]
        if problems:
            refused.append((str(container.get("name")), "; ".join(v.problem for v in problems)))
        else:
            kept.append(candidate)
    return kept, tuple(refused)


def _is_default_toleration(toleration: Mapping[str, Any]) -> bool:
    return (
        toleration.get("key") in DEFAULT_TOLERATION_KEYS
        and toleration.get("operator", "Equal") == "Exists"
        and toleration.get("effect") == "NoExecute"
        and toleration.get("tolerationSeconds") == DEFAULT_TOLERATION_SECONDS
    )


def _drop_default_tolerations(spec: dict[str, Any]) -> None:
    """Kubernetes' own defaults: the provider's admission adds them again."""
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        return
    kept = [t for t in tolerations if not (isinstance(t, Mapping) and _is_default_toleration(t))]
    if kept:
        spec["tolerations"] = kept
    else:
        spec.pop("tolerations")


def _fit_image_pull_policy(spec: dict[str, Any]) -> tuple[Note, ...]:
    notes = []
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
    return tuple(notes)


# --- reflected objects -------------------------------------------------------------------------------
def fit_pvc(claim: Mapping[str, Any], policy: pp.ProviderPolicy, *, consumer_id: str = "") -> Fit:
    """A reflected claim (its class already mapped to the remote one): refused when the
    provider would not make it. One naming no class takes the provider's default class,
    which only the provider knows: sent, unless the provider grants no class at all."""
    return _fit(Kind.CLAIM, claim, Context(policy=policy, consumer_id=consumer_id))


def fit_service(service: Mapping[str, Any], policy: pp.ProviderPolicy, *, consumer_id: str = "") -> Fit:
    """A reflected Service as the provider's policy admits it: a type not granted becomes
    ClusterIP (node ports and load-balancer fields go with it), external IPs outside the
    granted CIDRs are dropped; an ExternalName Service not granted is refused."""
    return _fit(Kind.SERVICE, service, Context(policy=policy, consumer_id=consumer_id))


def fit_endpointslice(slice_: Mapping[str, Any], policy: pp.ProviderPolicy, *, consumer_id: str = "") -> Fit:
    """A reflected slice (local pods' addresses, as the remote cluster reaches them) with
    only the addresses inside the ranges the provider grants (``endpoints.cidrs``: the
    consumer's remapped pod range, typically); none left: not reflected. One note for
    all the addresses taken out, worded without them."""
    fitted = rule_book.fitted(Kind.ENDPOINT_SLICE, slice_, Context(policy=policy, consumer_id=consumer_id))
    cidrs = policy.endpoints.cidrs
    why = f"outside the address ranges the provider grants ({policy_key('endpoints', 'cidrs')}: {', '.join(cidrs) or 'none'})"
    addresses = [v for v in (*fitted.adjusted, *fitted.refused) if v.field.startswith("endpoints[")]
    others = tuple(v for v in fitted.refused if v not in addresses)
    if others:
        return Fit(fitted.obj, refused=_notes(others))
    if not addresses:
        return Fit(fitted.obj)
    if fitted.refused:
        return Fit(fitted.obj, refused=(Note("endpoints", f"endpoints[].addresses: every address is {why}; the slice is not reflected"),))
    return Fit(fitted.obj, adjusted=(Note("endpoints", f"endpoints[].addresses {why} dropped"),))


def fit_ingress(ingress: Mapping[str, Any], policy: pp.ProviderPolicy, *, consumer_id: str = "") -> Fit:
    """A reflected Ingress as the provider's policy admits it: annotations not granted
    are dropped, a catch-all default backend beside host rules too; a class not granted,
    a host outside the granted domains, or nothing but a catch-all: not reflected."""
    moved: dict[str, Any] = copy.deepcopy(dict(ingress))
    annotations = (moved.get("metadata") or {}).get("annotations") or {}
    spec = moved.setdefault("spec", {})
    legacy_class = annotations.get(LEGACY_INGRESS_CLASS_ANNOTATION)
    before: tuple[Note, ...] = ()
    if legacy_class and not spec.get("ingressClassName"):
        # The class in the field the provider's policy reads (both at once is invalid).
        spec["ingressClassName"] = legacy_class
        annotations.pop(LEGACY_INGRESS_CLASS_ANNOTATION)
        field = f"metadata.annotations[{LEGACY_INGRESS_CLASS_ANNOTATION}]"
        before = (Note(field, f'{field} "{legacy_class}" moved to spec.ingressClassName, the field the provider\'s policy reads'),)
    return _fit(Kind.INGRESS, moved, Context(policy=policy, consumer_id=consumer_id), before=before)


def fit_custom_resource(obj: Mapping[str, Any], group: str, resource: str, policy: pp.ProviderPolicy, *,
                        consumer_id: str = "") -> Fit:
    """A reflected custom resource: refused when its kind, or a spec field it sets, is not
    granted (``customResources``): dropping a field would send another object than the
    user wrote, so nothing is taken out."""
    return _fit(Kind.CUSTOM_RESOURCE, obj, Context(policy=policy, consumer_id=consumer_id, group=group, resource=resource))
