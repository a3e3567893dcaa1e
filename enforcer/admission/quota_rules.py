"""The ShadowPod webhook's rules that keep the quota counting what runs (pure).

:mod:`enforcer.consumers.quota` counts a consumer's usage; these rules refuse the writes that would
let that count drift from what the provider's nodes actually hold:

* a **finalizer** the consumer puts on a ShadowPod (on create or by an update) is refused:
  the enforcer never needs one of the consumer's, and one would hold a deleted ShadowPod
  for as long as the consumer likes;
* an UPDATE that **lowers** a request or limit of a live ShadowPod is refused, but for the
  cpu and memory of its containers and sidecars, which the enforcer resizes the running pod
  to (``pods/resize``, :mod:`kube_offload.pod_resize`; until the kubelet has applied it, the
  pod's status keeps counting the old figures): anything else the running pod keeps as it
  was created (a ShadowPod update reaches the pod only in what a running pod may change),
  so a lower figure would count less than runs;
* when the quota counts **limits** (``limits.<name>``, or a plain key under
  ``spec.policy.quotaMode: limits|both``), every container must set that limit, as
  Kubernetes' ResourceQuota requires: a pod without one is unbounded;
* under ``spec.policy.quotaMode: hard``, every container and init container must set
  limits **equal** to requests for every resource the quota counts: nothing may burst
  beyond the figure the quota charged. The rule applies to what is written (CREATE, or an
  UPDATE of the spec); ShadowPods admitted before the mode changed keep running and keep
  counting (their limits and requests, as under ``both``) until they are deleted.

Each problem is one line naming the field, why, and what to do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator, Mapping

from enforcer.consumers.quota import live_shadowpod, twin_owner
from kube_offload.consumer_quota import pod_charges
from kube_offload.pod_resize import RESIZABLE_RESOURCES, template_resize
from kube_offload.consumers import service_account_username
from kube_offload.admission import AdmissionRequest
from kube_offload.policy_rules import Context, Kind, Malformed, refusal_lines
from kube_offload.provider_policy import DEFAULT_POLICY, QUOTA_MODE_HARD, QUOTA_MODE_KEY
from kube_offload.rule_book import rules_for
from kube_offload.resources import (
    QuantityError,
    ResourceList,
    format_quantity,
    parse_resource_list,
    resource_sort_key,
    uses_binary_format,
)
from kube_offload.views import pod_template

POD_SPEC = "spec.pod.spec"
CONTAINER_LISTS = ("initContainers", "containers")


# --- finalizers ---------------------------------------------------------------------------------
def added_finalizers(request: AdmissionRequest) -> list[str]:
    """Finalizers this request puts on the ShadowPod: all of a CREATE's, an UPDATE's new ones."""
    new = _finalizers(request.object)
    if request.operation == "UPDATE":
        old = set(_finalizers(request.old_object))
        return [f for f in new if f not in old]
    return new


def finalizer_problem(request: AdmissionRequest, *, namespace: Mapping[str, Any] | None, consumer: Mapping[str, Any] | None) -> str:
    """Why the consumer may not add these finalizers, or "" (none added, or added by
    someone else than the consumer whose twin this is: a provider's administrator, or
    Kubernetes itself)."""
    if request.operation not in ("CREATE", "UPDATE"):
        return ""
    added = added_finalizers(request)
    if not added:
        return ""
    owner = twin_owner(namespace)
    if owner is None or consumer is None:
        return ""  # not a consumer's twin: the other rules decide
    try:
        username = service_account_username(consumer)
    except (TypeError, ValueError, AttributeError):
        return ""
    if request.user_info.username != username:
        return ""
    return (
        f"metadata.finalizers: consumer \"{owner}\" may not add finalizers to a ShadowPod "
        f"(got {', '.join(repr(f) for f in added)}): a finalizer would keep a deleted ShadowPod, and its "
        "quota accounting, as long as the consumer likes; the enforcer deletes the pod when its ShadowPod "
        "is deleted and needs none; remove the finalizer (this is not grantable)"
    )


def _finalizers(obj: Mapping[str, Any] | None) -> list[str]:
    value = ((obj or {}).get("metadata") or {}).get("finalizers") or []
    return [str(f) for f in value] if isinstance(value, list) else []


# --- lowering resources ------------------------------------------------------------------------
def lowered_resources(request: AdmissionRequest) -> list[str]:
    """One problem per request or limit an UPDATE lowers (or removes) on a live
    ShadowPod; [] for a CREATE, an old object that holds nothing any more, or a
    template that does not parse (other rules report that)."""
    old = request.old_object
    if request.operation != "UPDATE" or old is None or not live_shadowpod(old):
        return []
    old_spec = _pod_spec(old)
    new_spec = _pod_spec(request.object or {})
    if old_spec is None or new_spec is None:
        return []
    problems: list[str] = []
    try:
        for path, before, after, resizable in _resource_pairs(old_spec, new_spec):
            for kind in ("requests", "limits"):
                old_amounts, new_amounts = before.get(kind, {}), after.get(kind, {})
                for name in sorted(old_amounts, key=resource_sort_key):
                    was, now = old_amounts[name], new_amounts.get(name)
                    if resizable and name in RESIZABLE_RESOURCES and now is not None:
                        continue  # a resize: the enforcer resizes the running pod to it
                    if now is None or now < was:
                        field = f"{path}.{kind}.{name}" if path else f"{POD_SPEC}.overhead.{name}"
                        problems.append(_lowered_message(field, name, was, now, kind))
        if not problems:
            # No single figure went down, but the pod's total did (a sidecar turned into
            # an ordinary init container, say): still less than what runs.
            # A resize lowers the total too: judged with the resize undone.
            unresized = {**new_spec, **(template_resize(new_spec, old_spec) or {})}
            before_total, after_total = pod_charges({"spec": old_spec}), pod_charges({"spec": unresized})
            lowered = sorted(
                (n for n, a in before_total.items() if after_total.get(n, 0) < a), key=resource_sort_key
            )
            if lowered:
                problems.append(
                    f"{POD_SPEC}: this update lowers the pod's total {', '.join(lowered)}; refused: the running pod "
                    "keeps the resources it was created with and the quota counts what runs; to lower them, delete "
                    "the ShadowPod and create it again"
                )
    except QuantityError:
        return []
    return problems


def _lowered_message(field: str, name: str, was: int, now: int | None, kind: str) -> str:
    binary = uses_binary_format(name)
    if now is None:
        got = f"removed (was {format_quantity(was, binary=binary)})"
    else:
        got = f"lowered from {format_quantity(was, binary=binary)} to {format_quantity(now, binary=binary)}"
    return (
        f"{field}: {got}; refused: the running pod keeps its old {kind} (an update of its ShadowPod resizes a "
        "running pod only in the cpu and memory figures of its containers and sidecars, never removing one), and the "
        "quota counts what runs; to lower them, delete the ShadowPod and create it again"
    )


def _pod_spec(shadowpod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = (pod_template(shadowpod) or {}).get("spec")
    return spec if isinstance(spec, Mapping) else None


def _resource_pairs(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, ResourceList], dict[str, ResourceList], bool]]:
    """(field path of a resources block, old amounts, new amounts, whether a resize may
    change it) for every container of the old template (matched by name; a container gone
    from the new one has none), the pod-level resources, and the overhead (path "").
    Resizable: the containers, and the sidecars (restartPolicy Always in both)."""
    for field in CONTAINER_LISTS:
        new_by_name = {c.get("name"): c for c in _list(new.get(field)) if isinstance(c, Mapping)}
        for index, container in enumerate(_list(old.get(field))):
            if not isinstance(container, Mapping):
                continue
            path = f"{POD_SPEC}.{field}[{index}].resources"
            other = new_by_name.get(container.get("name")) or {}
            resizable = field == "containers" or container.get("restartPolicy") == other.get("restartPolicy") == "Always"
            yield path, _amounts(container.get("resources")), _amounts(other.get("resources")), resizable
    yield f"{POD_SPEC}.resources", _amounts(old.get("resources")), _amounts(new.get("resources")), False
    yield "", {"requests": _parse(old.get("overhead"))}, {"requests": _parse(new.get("overhead"))}, False


def _amounts(resources: object) -> dict[str, ResourceList]:
    if not isinstance(resources, Mapping):
        return {}
    requests, limits = _parse(resources.get("requests")), _parse(resources.get("limits"))
    # The apiserver defaults a missing request to its limit: compare what the pod got.
    return {"requests": {**limits, **requests}, "limits": limits}


def _parse(raw: object) -> ResourceList:
    return parse_resource_list(raw) if isinstance(raw, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


# --- limits a quota counts ------------------------------------------------------------------------
def missing_limits(request: AdmissionRequest, quota: Mapping[str, int], consumer_id: str, mode: str = "requests") -> list[str]:
    """One problem per container that sets no limit for a resource whose limit the
    consumer's quota counts (``quota`` as :func:`kube_offload.consumer_quota.quota_limits` gives
    it), or, under quota mode ``hard``, whose limit is missing or differs from its request:
    the rule book's ``quotaMode`` row (:func:`kube_offload.pod_rules.quota_limits`, over
    :func:`kube_offload.consumer_quota.limit_problems`, which ``kubectl offload explain`` asks
    too). [] when the template does not parse (other rules report that)."""
    pod = pod_template(request.object) or {}
    ctx = Context(policy=replace(DEFAULT_POLICY, quota_mode=mode), quota=quota, consumer_id=consumer_id)
    try:
        violations = [v for rule in rules_for(Kind.POD) if rule.key == QUOTA_MODE_KEY for v in rule.check(pod, ctx)]
    except Malformed:
        return []
    return refusal_lines(violations, "spec.pod.")


def unequal_limits(request: AdmissionRequest, quota: Mapping[str, int], consumer_id: str) -> list[str]:
    """Quota mode ``hard``: :func:`missing_limits` under that mode."""
    return missing_limits(request, quota, consumer_id, QUOTA_MODE_HARD)
