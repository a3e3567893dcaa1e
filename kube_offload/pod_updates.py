"""What of a running pod may change in place, and the patches that carry such a change
from a local pod to its ShadowPod and from a ShadowPod to the pod the enforcer made
(pure: dicts in, dicts out).

Kubernetes lets a running pod change its labels and annotations and, of its spec, only
the images of its containers and init containers, ``activeDeadlineSeconds`` (set, or
lowered) and its tolerations (added, or an existing one's ``tolerationSeconds``)
(ValidatePodUpdate). The local apiserver refuses every other change before the virtual
kubelet sees it, so these are the only changes carried, in two hops:

* vkubelet, local pod -> ShadowPod template (:func:`template_patch`): the template's
  labels and annotations become the translated pod's, its mutable spec fields the
  translated pod's; the rest of the template stays as first written (a change of the
  translation context, say a new virtual-node label, is no reason to touch a running
  pod, and could not be applied to it anyway).
* enforcer, ShadowPod template -> pod (:func:`pod_patch`): a strategic merge patch.
  What the provider's own admission added to the pod when it was created (labels,
  annotations, default tolerations, a rewritten image) is not ours to take away. So
  the enforcer records on the pod (annotation :data:`ANNOTATION_APPLIED_TEMPLATE`)
  which label and annotation keys it set from the template and a digest of all it
  applied: a template equal to the one last applied needs no patch, whatever the pod
  looks like now (no tug of war with a provider's mutating webhook), and a key gone
  from the template is removed from the pod only if the enforcer had set it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload.constants import ANNOTATION_APPLIED_TEMPLATE, LABEL_MANAGED_BY, MANAGED_BY_ENFORCER

# The containers whose image may change on a running pod (ephemeral containers are
# added through their own subresource, never through a template).
IMAGE_FIELDS = ("initContainers", "containers")
DEADLINE = "activeDeadlineSeconds"
TOLERATIONS = "tolerations"
MUTABLE_SPEC_FIELDS = (*IMAGE_FIELDS, DEADLINE, TOLERATIONS)


@dataclass(frozen=True)
class AppliedTemplate:
    """What the enforcer last applied to a pod (read from its annotation)."""

    labels: frozenset[str]
    annotations: frozenset[str]
    digest: str


# --- the mutable part of a PodSpec -------------------------------------------------------------
def with_mutable_fields(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` (a PodSpec) with ``desired``'s in-place-mutable fields applied:

    * each container and init container takes the image of ``desired``'s container of
      the same name (containers cannot be added or removed; unknown names are ignored);
    * ``activeDeadlineSeconds`` is ``desired``'s when set (it cannot be unset);
    * tolerations: see :func:`merged_tolerations`.
    """
    spec = copy.deepcopy(dict(current))
    for field in IMAGE_FIELDS:
        images = {c.get("name"): c.get("image") for c in _dicts(desired.get(field))}
        for container in _dicts(spec.get(field)):
            image = images.get(container.get("name"))
            if image:
                container["image"] = image
    if desired.get(DEADLINE) is not None:
        spec[DEADLINE] = desired[DEADLINE]
    tolerations = merged_tolerations(current.get(TOLERATIONS), desired.get(TOLERATIONS))
    if tolerations:
        spec[TOLERATIONS] = tolerations
    return spec


def merged_tolerations(current: Any, desired: Any) -> list[dict[str, Any]]:
    """The tolerations a running pod ends up with: its own, each replaced by a desired one
    that differs from it at most in ``tolerationSeconds`` (the one change Kubernetes
    allows), then the desired ones that match none (additions). None is ever removed: a
    running pod cannot lose a toleration, and the provider's admission adds its own
    (``not-ready``/``unreachable`` for 300 s) that the template does not have."""
    wanted = [copy.deepcopy(t) for t in _dicts(desired)]
    used = [False] * len(wanted)
    result = []
    for toleration in _dicts(current):
        replacement = copy.deepcopy(toleration)
        for i, candidate in enumerate(wanted):
            if not used[i] and _identity(candidate) == _identity(toleration):
                used[i] = True
                replacement = candidate
                break
        result.append(replacement)
    result.extend(t for i, t in enumerate(wanted) if not used[i])
    return result


def _identity(toleration: Mapping[str, Any]) -> dict[str, Any]:
    """A toleration without its tolerationSeconds, with the API's default operator."""
    identity = {k: v for k, v in toleration.items() if k != "tolerationSeconds" and v not in (None, "")}
    identity.setdefault("operator", "Equal")
    return identity


def mutable_projection(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The mutable fields of a PodSpec, for comparing and digesting."""
    return {
        "images": {f: {c.get("name"): c.get("image") for c in _dicts(spec.get(f))} for f in IMAGE_FIELDS},
        DEADLINE: spec.get(DEADLINE),
        TOLERATIONS: list(_dicts(spec.get(TOLERATIONS))),
    }


# --- hop 1: local pod -> ShadowPod template (vkubelet) ---------------------------------------------
def template_patch(have: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch for a ShadowPod's ``spec.pod`` that brings the template ``have``
    to the translated pod ``wanted`` (both ``{"metadata": {...}, "spec": {...}}``) as far
    as a running pod may change; None when nothing needs to change. Lists (containers,
    tolerations) are sent whole: a merge patch replaces lists."""
    patch: dict[str, Any] = {}
    metadata = _metadata_patch((have.get("metadata") or {}), (wanted.get("metadata") or {}))
    if metadata:
        patch["metadata"] = metadata
    have_spec = have.get("spec") or {}
    updated = with_mutable_fields(have_spec, wanted.get("spec") or {})
    spec = {field: updated[field] for field in MUTABLE_SPEC_FIELDS if field in updated and updated[field] != have_spec.get(field)}
    if spec:
        patch["spec"] = spec
    return patch or None


def _metadata_patch(have: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        desired, current = wanted.get(field) or {}, have.get(field) or {}
        if desired != current:
            patch[field] = {**desired, **{k: None for k in current if k not in desired}}
    return patch


# --- hop 2: ShadowPod template -> pod (enforcer) ---------------------------------------------------
def desired_labels(template_labels: Mapping[str, str]) -> dict[str, str]:
    """The pod's labels: the template's, plus the enforcer's managed-by label, which no
    template can change (the enforcer finds its pods by it)."""
    return {**template_labels, LABEL_MANAGED_BY: MANAGED_BY_ENFORCER}


def template_digest(labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]) -> str:
    """A digest of everything of a template that reaches a running pod."""
    content = {
        "labels": dict(labels),
        "annotations": {k: v for k, v in annotations.items() if k != ANNOTATION_APPLIED_TEMPLATE},
        "spec": mutable_projection(spec),
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def applied_record(labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]) -> str:
    """The value of :data:`ANNOTATION_APPLIED_TEMPLATE` for a pod made or patched from a
    template with these labels, annotations and spec."""
    record = {
        "labels": sorted(k for k in labels if k != LABEL_MANAGED_BY),
        "annotations": sorted(k for k in annotations if k != ANNOTATION_APPLIED_TEMPLATE),
        "digest": template_digest(labels, annotations, spec),
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def read_applied(pod: Mapping[str, Any]) -> AppliedTemplate | None:
    """What the enforcer last applied to ``pod``; None for a pod without a readable record
    (made before records existed, or the annotation was tampered with)."""
    raw = (((pod.get("metadata") or {}).get("annotations")) or {}).get(ANNOTATION_APPLIED_TEMPLATE)
    if not raw:
        return None
    try:
        record = json.loads(raw)
        return AppliedTemplate(
            labels=frozenset(str(k) for k in record.get("labels") or []),
            annotations=frozenset(str(k) for k in record.get("annotations") or []),
            digest=str(record.get("digest") or ""),
        )
    except (ValueError, TypeError, AttributeError):
        return None


def pod_patch(
    pod: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A strategic merge patch bringing the running ``pod`` to the template (``labels``,
    ``annotations``, ``spec``), or None when the template is the one last applied.

    Labels and annotations of the template are set; a key the last applied template had
    and this one has not is removed; any other key (the provider's admission's) stays.
    A pod without a record removes nothing, since what it holds beyond the template
    cannot be told apart. Images go by container name (containers merge by name in a
    strategic merge patch); tolerations are sent whole (they have no merge key). The
    patch is conditional on the pod's resourceVersion: the tolerations were computed
    from the cached pod, and a stale list would try to remove one.
    """
    want_labels = desired_labels(labels)
    record = read_applied(pod)
    digest = template_digest(want_labels, annotations, spec)
    if record is not None and record.digest == digest:
        return None
    meta = pod.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    have_annotations = meta.get("annotations") or {}

    label_patch: dict[str, Any] = {k: v for k, v in want_labels.items() if have_labels.get(k) != v}
    annotation_patch: dict[str, Any] = {
        k: v for k, v in annotations.items() if k != ANNOTATION_APPLIED_TEMPLATE and have_annotations.get(k) != v
    }
    if record is not None:
        label_patch.update({k: None for k in record.labels if k not in want_labels and k in have_labels})
        annotation_patch.update({k: None for k in record.annotations if k not in annotations and k in have_annotations})
    annotation_patch[ANNOTATION_APPLIED_TEMPLATE] = applied_record(want_labels, annotations, spec)

    metadata: dict[str, Any] = {"annotations": annotation_patch}
    if label_patch:
        metadata["labels"] = label_patch
    if meta.get("resourceVersion"):
        metadata["resourceVersion"] = meta["resourceVersion"]
    patch: dict[str, Any] = {"metadata": metadata}

    have_spec = pod.get("spec") or {}
    spec_patch: dict[str, Any] = {}
    for field in IMAGE_FIELDS:
        images = {c.get("name"): c.get("image") for c in _dicts(spec.get(field))}
        changed = [
            {"name": c.get("name"), "image": images[c.get("name")]}
            for c in _dicts(have_spec.get(field))
            if images.get(c.get("name")) and images[c.get("name")] != c.get("image")
        ]
        if changed:
            spec_patch[field] = changed
    if spec.get(DEADLINE) is not None and spec.get(DEADLINE) != have_spec.get(DEADLINE):
        spec_patch[DEADLINE] = spec[DEADLINE]
    tolerations = merged_tolerations(have_spec.get(TOLERATIONS), spec.get(TOLERATIONS))
    if tolerations != list(_dicts(have_spec.get(TOLERATIONS))):
        spec_patch[TOLERATIONS] = tolerations
    if spec_patch:
        patch["spec"] = spec_patch
    return patch


def describe_patch(patch: Mapping[str, Any]) -> str:
    """What a :func:`pod_patch` changes, in a few words for Events and logs."""
    parts = []
    metadata = patch.get("metadata") or {}
    if metadata.get("labels"):
        parts.append("labels")
    if set(metadata.get("annotations") or {}) - {ANNOTATION_APPLIED_TEMPLATE}:
        parts.append("annotations")
    spec = patch.get("spec") or {}
    if any(field in spec for field in IMAGE_FIELDS):
        parts.append("images")
    for field in (DEADLINE, TOLERATIONS):
        if field in spec:
            parts.append(field)
    return ", ".join(parts) or "the record of the applied template"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
