"""What the webhook decides for one admission request, route by route.

These functions hold the decisions (which kinds and operations each route acts on, when to
deny, what to patch); :mod:`kube_offload.admission` handles the envelope and
:mod:`kube_offload.pod_mutation` the patch itself and the decision for a pod, so the routes stay one line each.
"""

from __future__ import annotations

from kube_offload import constants as c
from kube_offload.policy import POLICY_KEYS, NamespacePolicy, PolicyError, policy_values, validate_namespace
from kube_offload.admission import AdmissionRequest, BadRequest, Decision
from kube_offload.pod_mutation import MalformedPod, decide_pod
from webhook.namespace_cache import NamespaceSource

POD = "Pod"
NAMESPACE = "Namespace"


def _check_route_kind(request: AdmissionRequest, *, expected: str, other: str, other_route: str) -> bool:
    """True when the request is for ``expected`` (core group); False for kinds the route
    does not handle, which are allowed unchanged (the registration decides what is sent,
    and refusing an unforeseen kind would block it cluster-wide under failurePolicy Fail).

    The one kind that belongs to the *other* route is a wiring mistake (URLs swapped in a
    hand-written registration) that would otherwise silently do nothing: that is a 400.
    """
    kind = request.kind
    if kind.group == "" and kind.kind == expected:
        return True
    if kind.group == "" and kind.kind == other:
        raise BadRequest(
            f"this endpoint handles {expected}s but received a {other} review "
            f"({kind}); {other}s belong to {other_route}"
        )
    return False


def review_pod(
    request: AdmissionRequest, *, source: NamespaceSource, scheduler_name: str | None
) -> Decision:
    """Pod CREATE: patch in the namespace policy's toleration, affinity and scheduler."""
    if not _check_route_kind(request, expected=POD, other=NAMESPACE, other_route="/validate/namespaces"):
        return Decision.allow()
    if request.operation != "CREATE" or request.sub_resource:
        return Decision.allow()
    pod = request.object or {}
    namespace = request.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
    if not namespace:
        raise BadRequest("request.namespace is empty; pods are namespaced")
    policy: NamespacePolicy | PolicyError | None
    try:
        policy = source.get_policy(namespace)
    except PolicyError as exc:
        policy = exc
    try:
        return decide_pod(pod, namespace, policy, scheduler_name=scheduler_name)
    except MalformedPod as exc:
        raise BadRequest(f"request.object.{exc}") from None


def review_namespace(request: AdmissionRequest) -> Decision:
    """Namespace CREATE/UPDATE: refuse bad policy labels with a message kubectl can show."""
    if not _check_route_kind(request, expected=NAMESPACE, other=POD, other_route="/mutate/pods"):
        return Decision.allow()
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow()
    namespace = request.object or {}
    errors = validate_namespace(namespace)
    new_values = policy_values(namespace)
    if request.operation == "UPDATE" and request.old_object is not None:
        # Ratchet: a value that was already there is not re-judged, so a namespace labelled
        # before the webhook existed can still get unrelated changes; only what this update
        # sets or changes must be valid.
        old_values = policy_values(request.old_object)
        errors = [e for e in errors if new_values[e.key] != old_values[e.key]]
    if errors:
        return Decision.deny(422, "Invalid", "; ".join(str(e) for e in errors))
    warnings = []
    configured = [k for k in POLICY_KEYS if k != c.LABEL_ENABLED and new_values[k] is not None]
    if configured and new_values[c.LABEL_ENABLED] is None:
        warnings.append(
            f"{', '.join(configured)} set, but pods of this namespace are not offloaded "
            f"until it is labelled {c.LABEL_ENABLED}={c.ENABLED_VALUE}"
        )
    return Decision.allow(warnings=warnings)
