"""In-place resize of an offloaded pod (``kubectl patch pod X --subresource resize``), pure:
what changed, the patches that carry it over the two hops, what a running pod holds
meanwhile, and the resize conditions a local pod shows (docs/virtual-kubelet.md,
"In-place resize").

Kubernetes (1.35+, ``pods/resize`` GA) lets the ``pods/resize`` subresource change the cpu
and memory requests and limits of a running pod's containers and of its sidecars
(restartable init containers) without touching anything else; resizing an ordinary init
container or the pod-level resources needs a feature the node declares
(``status.declaredFeatures``), which a virtual node does not, so the local API server
refuses those before the virtual kubelet sees them. A resize travels like the other
changes of a running pod, but on its own:

* vkubelet, local pod -> ShadowPod template (:func:`template_resize`): the resources of
  the resizable containers become the local pod's, in a patch apart from the template's
  other updates, so that a resize the provider refuses does not hold back a new label;
* the provider's ShadowPod webhook judges the new template against the consumer's quota
  and the pod's slice as any update (what it adds), and the enforcer brings the running pod
  to it through the provider's own ``pods/resize`` subresource (:func:`pod_resize_patch`);
  the remote kubelet then resizes the containers, restarting one only where its
  ``resizePolicy`` says ``RestartContainer``.

Until the remote kubelet has actuated a resize that lowers a container, the container still
holds its old amounts: :func:`held_pod` counts the larger of what the pod asks and what its
status says it was given, as Kubernetes' ResourceQuota does (``UseStatusResources``).
"""

from __future__ import annotations

import copy
from typing import Any, Iterator, Mapping

from kube_offload.consumer_quota import pod_charges
from kube_offload.consumers import quota_excess
from kube_offload.resources import QuantityError, format_quantity, parse_quantity, uses_binary_format

# What pods/resize may change (ValidatePodResize: cpu and memory only).
RESIZABLE_RESOURCES = ("cpu", "memory")
RESOURCE_KINDS = ("requests", "limits")
# The conditions a kubelet reports a resize with (k8s.io/api core/v1), and their reasons.
PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
RESIZE_CONDITIONS = frozenset({PENDING, IN_PROGRESS})
INFEASIBLE = "Infeasible"
DEFERRED = "Deferred"


def resizable_containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """(list field, index, container) of every container a resize may change: the
    ordinary containers and the sidecars (init containers with ``restartPolicy: Always``)."""
    for field in ("initContainers", "containers"):
        for index, container in enumerate(_dicts(spec.get(field))):
            if field == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            yield field, index, container


def _amounts(resources: Any) -> dict[str, dict[str, int | None]]:
    """{kind: {resource: milli-units}} of the resizable resources a ``resources`` block
    names; a quantity that does not parse reads as None (and so differs from any other)."""
    out: dict[str, dict[str, int | None]] = {}
    block = resources if isinstance(resources, Mapping) else {}
    for kind in RESOURCE_KINDS:
        raw = block.get(kind)
        if not isinstance(raw, Mapping):
            continue
        for name in RESIZABLE_RESOURCES:
            if name in raw:
                try:
                    out.setdefault(kind, {})[name] = parse_quantity(raw[name])
                except QuantityError:
                    out.setdefault(kind, {})[name] = None
    return out


def resized_containers(have: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """Names of the resizable containers of PodSpec ``have`` whose cpu or memory requests
    or limits differ from those of the container of the same name in ``wanted`` (compared
    by amount: ``0.5`` and ``500m`` are one figure)."""
    wanted_by_name = {c.get("name"): c for _f, _i, c in resizable_containers(wanted)}
    changed = []
    for _field, _index, container in resizable_containers(have):
        other = wanted_by_name.get(container.get("name"))
        if other is not None and _amounts(container.get("resources")) != _amounts(other.get("resources")):
            changed.append(str(container.get("name")))
    return changed


def carried(local_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> bool:
    """Whether the ShadowPod template has the local pod's resources (the resize, if any,
    was carried to the provider)."""
    return not resized_containers(template_spec, local_spec)


# --- hop 1: local pod -> ShadowPod template (vkubelet) ---------------------------------------------
def template_resize(template_spec: Mapping[str, Any], local_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``spec`` part of a JSON merge patch of a ShadowPod's ``spec.pod`` that gives the
    template's resizable containers the local pod's ``resources``; None when they have
    them. The container lists are sent whole (a merge patch replaces lists), everything
    but those resources as the template has it."""
    changed = set(resized_containers(template_spec, local_spec))
    if not changed:
        return None
    wanted = {c.get("name"): c.get("resources") for _f, _i, c in resizable_containers(local_spec)}
    patch: dict[str, Any] = {}
    for field in ("initContainers", "containers"):
        containers = [copy.deepcopy(c) for c in _dicts(template_spec.get(field))]
        touched = False
        for container in containers:
            if container.get("name") in changed and (field == "containers" or container.get("restartPolicy") == "Always"):
                container["resources"] = copy.deepcopy(wanted.get(container.get("name")) or {})
                touched = True
        if touched:
            patch[field] = containers
    return patch


# --- hop 2: ShadowPod template -> the running pod (enforcer) ---------------------------------------
def pod_resize_patch(pod_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The strategic merge patch for the running pod's ``pods/resize`` subresource that
    gives its resizable containers the template's cpu and memory figures, or None when
    it has them. Only the figures the template names are sent: a limit the provider's
    LimitRange gave the pod at creation is not the template's to take away (nor can a
    resize remove one)."""
    template = {c.get("name"): c for _f, _i, c in resizable_containers(template_spec)}
    patch: dict[str, list[dict[str, Any]]] = {}
    for field, _index, container in resizable_containers(pod_spec):
        wanted = template.get(container.get("name"))
        if wanted is None:
            continue
        have = _amounts(container.get("resources"))
        block = wanted.get("resources")
        raw: Mapping[str, Any] = block if isinstance(block, Mapping) else {}
        resources: dict[str, dict[str, Any]] = {}
        for kind, amounts in _amounts(raw).items():
            for name, amount in amounts.items():
                if amount is not None and have.get(kind, {}).get(name) != amount:
                    resources.setdefault(kind, {})[name] = raw[kind][name]
        if resources:
            patch.setdefault(field, []).append({"name": container.get("name"), "resources": resources})
    return {"spec": patch} if patch else None


def describe_resize(patch: Mapping[str, Any]) -> str:
    """What a :func:`pod_resize_patch` changes, for Events and logs: ``web: limits.cpu=400m``."""
    parts = []
    for field in ("initContainers", "containers"):
        for entry in _dicts(((patch.get("spec") or {}).get(field))):
            figures = [
                f"{kind}.{name}={value}"
                for kind in RESOURCE_KINDS
                for name, value in sorted(((entry.get("resources") or {}).get(kind) or {}).items())
            ]
            parts.append(f"{entry.get('name')}: {', '.join(figures)}")
    return "; ".join(parts)


# --- what a running pod holds -------------------------------------------------------------------
def held_pod(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod`` with each resizable container's cpu and memory requests and limits the
    larger of its spec's and what its status reports (``allocatedResources``, the
    requests the kubelet admitted; ``resources``, what it actuated): a resize that lowers
    a container frees nothing until the kubelet has applied it. The pod itself when its
    status reports nothing (a ShadowPod's template, a pod not yet started)."""
    status = pod.get("status") or {}
    reported = {
        s.get("name"): s
        for field in ("containerStatuses", "initContainerStatuses")
        for s in _dicts(status.get(field))
        if s.get("allocatedResources") or s.get("resources")
    }
    if not reported:
        return pod
    held = copy.deepcopy(dict(pod))
    spec: dict[str, Any] = held["spec"] if isinstance(held.get("spec"), dict) else {}
    names = {str(c.get("name")) for _f, _i, c in resizable_containers(spec)}
    for container in [*_dicts(spec.get("initContainers")), *_dicts(spec.get("containers"))]:
        seen = reported.get(container.get("name"))
        if seen is None or str(container.get("name")) not in names:
            continue
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue  # nothing asked: nothing a resize changed
        block = seen.get("resources")
        actuated: Mapping[str, Any] = block if isinstance(block, Mapping) else {}
        sources = {
            "requests": [seen.get("allocatedResources"), actuated.get("requests")],
            "limits": [actuated.get("limits")],
        }
        for kind, reports in sources.items():
            figures = dict(resources.get(kind) or {})
            for report in reports:
                if not isinstance(report, Mapping):
                    continue
                for name in RESIZABLE_RESOURCES:
                    if name in report and name in figures and _larger(report[name], figures[name]):
                        figures[name] = report[name]
            if figures:
                resources[kind] = figures
    return held


def _larger(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) > parse_quantity(b)
    except QuantityError:
        return False


# --- the local pod's resize conditions -----------------------------------------------------------
def local_conditions(local: list[dict[str, Any]], remote: list[dict[str, Any]], *, is_carried: bool) -> list[dict[str, Any]]:
    """The resize conditions the local pod shows. Once the template has the local pod's
    resources, the remote kubelet's word on them (its ``PodResizePending`` and
    ``PodResizeInProgress``; ``observedGeneration`` counts the remote pod's generations, so
    it is not copied). While it has not (the provider refused the resize, or it is on its
    way), the local pod keeps the ones the virtual kubelet wrote (:func:`pending_condition`)."""
    if not is_carried:
        return [copy.deepcopy(c) for c in local if c.get("type") in RESIZE_CONDITIONS]
    seen: set[str] = set()
    kept = []
    for condition in remote:
        kind = condition.get("type")
        if kind in RESIZE_CONDITIONS and kind not in seen:
            seen.add(str(kind))
            kept.append({k: v for k, v in condition.items() if k != "observedGeneration"})
    return kept


def pending_condition(reason: str, message: str, *, generation: int | None, now: str) -> dict[str, Any]:
    """A ``PodResizePending`` condition as a kubelet writes it (reason ``Infeasible`` or
    ``Deferred``), about the local pod's ``generation``."""
    condition: dict[str, Any] = {
        "type": PENDING, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def with_pending(conditions: list[dict[str, Any]], pending: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``conditions`` with ``pending`` in place of any resize condition (a refused resize
    is in progress nowhere); None when they already say the same (its times aside)."""
    same = [c for c in conditions if c.get("type") == PENDING
            and all(c.get(k) == pending.get(k) for k in ("status", "reason", "message", "observedGeneration"))]
    others = [c for c in conditions if c.get("type") in RESIZE_CONDITIONS and c.get("type") != PENDING]
    if same and not others:
        return None
    return [copy.deepcopy(c) for c in conditions if c.get("type") not in RESIZE_CONDITIONS] + [dict(pending)]


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def beyond_quota(pod: Mapping[str, Any], quota: Mapping[str, int], cluster_id: str) -> str | None:
    """Why ``pod`` (a local pod whose resources were resized) can never run under the
    consumer's whole ``quota`` on cluster ``cluster_id`` (:func:`consumer_quota.quota_limits`
    names), whatever else runs there: the ShadowPod webhook's quota rule (the same
    :func:`kube_offload.consumers.quota_excess`) with nothing else used. None when it fits,
    or when the pod does not parse (the provider says why)."""
    try:
        charges = pod_charges(pod)
    except QuantityError:
        return None
    over = quota_excess(quota, {}, charges)
    if not over:
        return None
    details = "; ".join(
        f"{name}: requested {format_quantity(more, binary=uses_binary_format(name))}, "
        f"quota {format_quantity(limit, binary=uses_binary_format(name))}"
        for name, more, _used, limit in over
    )
    return (
        f"the resize asks more of cluster {cluster_id} than this cluster's whole quota there (Consumer spec.quota): "
        f"{details}; resize the pod within the quota, or ask the provider to raise it"
    )
