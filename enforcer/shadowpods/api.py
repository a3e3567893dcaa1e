"""The enforcer's writes to (and few live reads from) its own API server, as raw JSON.

Pods and Events are sent as the dicts the reconcile built, not through the client's
models: the generated client validates a dict body against its own V1Pod model and
rejects any field it does not know, and a ShadowPod made from a pod of a newer local
cluster may well carry one. The apiserver is the judge of a pod, not the client.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from kubernetes import client

from kube_offload import ephemeral_containers
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kinds import EVENTS, PODS, SHADOWPODS
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH, STRATEGIC_MERGE_PATCH

# What a ShadowPod field is called in a Pod: the template's spec and metadata.
_POD_FIELD = re.compile(r"(?<![\w.\[])(spec|metadata)(?=[.\[:]|$)")
_NOISE = re.compile(r'^(?:pods?|Pod) "[^"]*" is (?:forbidden|invalid): ', re.IGNORECASE)


class EnforcerApi(Protocol):
    """What the reconcile needs from the API server (a real cluster in production and in
    the end-to-end tests; an in-memory record in the reconcile's unit tests)."""

    def get_shadowpod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def delete_pod(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> None: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_shadowpod_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> dict[str, Any]: ...

    def add_ephemeral_containers(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def resize_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]: ...

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class KubeEnforcerApi:
    """:class:`EnforcerApi` over a kubernetes ``ApiClient`` (the API layer,
    :class:`kube_offload.runtime.kube.Kube`); errors are ApiError."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._kube = Kube(api_client)

    def get_shadowpod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._kube.get_or_none(SHADOWPODS, name, namespace=namespace)

    def patch_shadowpod_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> dict[str, Any]:
        # The resourceVersion makes the patch conditional: the status is computed from
        # the cached ShadowPod (recreations counts up from it), so a stale cache must
        # fail with 409 rather than overwrite a newer count.
        return self._kube.patch(
            SHADOWPODS,
            name,
            {"status": status},
            namespace=namespace,
            subresource="status",
            content_type=MERGE_PATCH,
            resource_version=resource_version or None,
        )

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(PODS, pod, namespace=namespace)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._kube.get_or_none(PODS, name, namespace=namespace)

    def delete_pod(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> None:
        """Delete exactly the pod with ``uid``: a pod of the same name created meanwhile
        (by this enforcer, after a restart) must survive. Already gone is success.
        ``grace_period_seconds`` None = the pod's own terminationGracePeriodSeconds."""
        try:
            self._kube.delete(PODS, name, namespace=namespace, uid=uid, grace_period_seconds=grace_period_seconds)
        except ApiError as exc:
            if exc.not_found:
                return
            if exc.conflict:  # precondition failed: that UID is already gone
                return
            raise

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch: containers merge by name, so an image change names
        only its container (kube_offload.pod_updates.pod_patch)."""
        return self._kube.patch(PODS, name, patch, namespace=namespace, content_type=STRATEGIC_MERGE_PATCH)

    def add_ephemeral_containers(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch of ``pods/ephemeralcontainers`` (what ``kubectl debug``
        sends): the only way to add a container to a running pod."""
        return self._kube.patch(PODS, name, patch, namespace=namespace, subresource=ephemeral_containers.SUBRESOURCE,
                                content_type=STRATEGIC_MERGE_PATCH)
    def resize_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch of the pod's ``resize`` subresource (containers by name:
        kube_offload.pod_resize.pod_resize_patch); the kubelet then resizes in place."""
        return self._kube.patch(PODS, name, patch, namespace=namespace, subresource="resize", content_type=STRATEGIC_MERGE_PATCH)

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(EVENTS, event, namespace=namespace)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._kube.patch(EVENTS, name, patch, namespace=namespace, content_type=MERGE_PATCH)


# How a provider refuses a write to a pod for what it asks (Forbidden: an admission policy or
# webhook; Invalid: the pod's own validation; BadRequest: a webhook's odd answer), as opposed
# to trouble of the server or the network, which is retried: an in-place update, a resize,
# an ephemeral container.
REFUSAL_CODES = frozenset({400, 403, 422})
# After a write was refused because the cache is behind: the informer is about to
# deliver the newer object, look again shortly after.
STALE_CACHE_RECHECK_SECONDS = 0.5
# A write the provider's rules refuse (a pod's create, its ephemeral containers: the
# Consumer changed since admission, a grant withdrawn, the quota lowered, a drain) is
# judged again this often, and at once when its Consumer changes (Enforcer: the Consumer
# informer's handler).
REFUSED_RECHECK_SECONDS = 30.0
# A write that asks for a grant waits this long for the Consumer caches that say whether
# its consumer has it (never guessed).
GRANT_UNKNOWN_RECHECK_SECONDS = 2.0


def write_refused(error: ApiError, pod_name: str) -> bool:
    """What a failed write to a running pod (an in-place update, a resize, ephemeral
    containers) means for its reconcile: False when the pod is gone meanwhile (its DELETED
    event brings the reconcile back); True when the provider refused what the write asks
    (REFUSAL_CODES: the caller records it once and leaves the pod as it is). A conflict
    (the cache was behind) raises Requeue; the rest (the server's or the network's
    trouble) is raised again, for the controller's backoff."""
    if error.not_found:
        return False
    if error.conflict:
        raise Requeue(STALE_CACHE_RECHECK_SECONDS, f"pod {pod_name} changed meanwhile") from error
    if error.transient or error.status not in REFUSAL_CODES:
        raise error
    return True


def pod_message(error: ApiError) -> str:
    """The API server's refusal of a pod write without its preamble, in ShadowPod field
    paths: what the consumer reads, whether the reconcile's in-place update or the
    ShadowPod webhook's dry run (enforcer/admission/dry_run.py) was refused."""
    causes = ((error.body.get("details") or {}).get("causes") or []) if error.status == 422 else []
    parts = []
    for cause in causes:
        field_path = str(cause.get("field") or "")
        message = str(cause.get("message") or cause.get("reason") or "")
        parts.append(f"{_shadowpod_path(field_path)}: {message}" if field_path else message)
    if parts:
        return "; ".join(parts)
    return _shadowpod_path(_NOISE.sub("", error.message or error.reason or f"HTTP {error.status}"))


def _shadowpod_path(text: str) -> str:
    return _POD_FIELD.sub(lambda match: f"spec.pod.{match.group(1)}", text)
