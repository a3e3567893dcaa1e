"""Ephemeral containers (``kubectl debug``) on offloaded pods (pure: dicts in, dicts out).

An ephemeral container cannot be created with a pod: Kubernetes adds one to a running pod
through the ``pods/ephemeralcontainers`` subresource, never removes or changes one, and never
restarts one. So across the two hops (docs/logs-and-exec.md "kubectl debug"):

* vkubelet, local pod -> ShadowPod template: the template's ``spec.ephemeralContainers``
  only grows (:func:`grown_list`), with the local pod's new ones the provider's policy
  admits (vkubelet/shared/policy_fit.py);
* ShadowPod admission judges the ephemeral containers a request *adds* (:func:`admission_view`):
  those already in the template were judged when they came;
* enforcer, template -> pod: the pod is created without them (:func:`without`), and the
  template's ones the pod lacks are then added through the subresource (:func:`to_add`,
  :func:`add_patch`), each judged against the Consumer as it is then. A pod made to replace
  one that vanished records the names it will never run
  (:data:`~kube_offload.constants.ANNOTATION_EPHEMERAL_NOT_RUN`): they ran, or were meant to
  run, in the earlier pod, and an ephemeral container runs once.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping

from kube_offload.constants import ANNOTATION_EPHEMERAL_NOT_RUN
from kube_offload.provider_policy import ENFORCED_IMAGE_PULL_POLICY

FIELD = "ephemeralContainers"
SUBRESOURCE = "ephemeralcontainers"


def listed(spec: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The ephemeral containers of a PodSpec (objects only)."""
    value = (spec or {}).get(FIELD)
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def names(spec: Mapping[str, Any] | None) -> list[str]:
    return [str(c.get("name")) for c in listed(spec)]


def without(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` (a shallow copy) without ephemeral containers: the pod as it is created."""
    return {k: v for k, v in spec.items() if k != FIELD}


def only(spec: Mapping[str, Any], keep: Iterable[str]) -> dict[str, Any]:
    """``spec`` (a shallow copy) with only the ephemeral containers named in ``keep``."""
    wanted = set(keep)
    kept = [c for c in listed(spec) if c.get("name") in wanted]
    out = without(spec)
    if kept:
        out[FIELD] = kept
    return out


def with_template_spec(shadowpod: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """``shadowpod`` (copied down to its template) whose template's PodSpec is ``spec``."""
    out = dict(shadowpod)
    out_spec = dict(out.get("spec") or {})
    template = dict(out_spec.get("pod") or {})
    template["spec"] = dict(spec)
    out_spec["pod"] = template
    out["spec"] = out_spec
    return out


def _template_spec(shadowpod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    pod = ((shadowpod or {}).get("spec") or {}).get("pod")
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def for_pod_create(shadowpod: Mapping[str, Any]) -> Mapping[str, Any]:
    """What is judged before the enforcer creates a pod: the ShadowPod without ephemeral
    containers (the pod is created without them; each is judged when it is added)."""
    spec = _template_spec(shadowpod)
    return with_template_spec(shadowpod, without(spec)) if FIELD in spec else shadowpod


def for_adding(shadowpod: Mapping[str, Any], adding: Iterable[str]) -> Mapping[str, Any]:
    """What is judged before the enforcer adds the ephemeral containers ``adding`` to the
    running pod: the pod as it will then be (those, not the ones it already ran)."""
    return with_template_spec(shadowpod, only(_template_spec(shadowpod), adding))


def admission_view(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The ShadowPod a CREATE or UPDATE writes, with only the ephemeral containers it adds
    (by name) to the template: the ones already there were judged when they came and have
    run (or been refused) since; judging them again would refuse every later update of a
    debugged pod once a grant is withdrawn."""
    spec = _template_spec(new)
    if FIELD not in spec or old is None:
        return new
    before = set(names(_template_spec(old)))
    return with_template_spec(new, only(spec, [n for n in names(spec) if n not in before]))


def not_run(pod: Mapping[str, Any]) -> set[str]:
    """The ephemeral containers a pod the enforcer made will never run
    (:data:`ANNOTATION_EPHEMERAL_NOT_RUN`)."""
    raw = (((pod.get("metadata") or {}).get("annotations")) or {}).get(ANNOTATION_EPHEMERAL_NOT_RUN) or ""
    return {name for name in str(raw).split(",") if name}


def not_run_annotation(template_spec: Mapping[str, Any]) -> dict[str, str]:
    """The annotation of a pod made to replace an earlier one: the template's ephemeral
    containers so far ({} when none)."""
    listed_names = names(template_spec)
    return {ANNOTATION_EPHEMERAL_NOT_RUN: ",".join(listed_names)} if listed_names else {}


def to_add(template_spec: Mapping[str, Any], pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The template's ephemeral containers the running ``pod`` lacks and may still run, in
    the template's order."""
    have = set(names(pod.get("spec") or {})) | not_run(pod)
    return [copy.deepcopy(c) for c in listed(template_spec) if c.get("name") not in have]


def add_patch(containers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The strategic merge patch of ``pods/ephemeralcontainers`` that adds ``containers``
    (merged by name, as ``kubectl debug`` sends it), each pulling its image ``Always``
    like every container the enforcer makes (docs/security.md)."""
    added = [{**copy.deepcopy(dict(c)), "imagePullPolicy": ENFORCED_IMAGE_PULL_POLICY} for c in containers]
    return {"spec": {FIELD: added}}


def grown_list(have: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The template's ephemeral containers (``have``: its PodSpec) followed by ``wanted``'s
    (the translated local pod's) that it lacks, by name; None when nothing is new. None is
    ever removed or changed: the pods made from the template could not follow."""
    known = set(names(have))
    new = [copy.deepcopy(c) for c in listed(wanted) if c.get("name") not in known]
    if not new:
        return None
    return [*copy.deepcopy(listed(have)), *new]
