"""May this user make this request: authorization as a kubelet does it in webhook mode.

Every request, once authenticated, is turned into attributes on the virtual node
(``resource=nodes``, ``name=<node>``, a subresource chosen by path, a verb from the HTTP
method) and checked with a **SubjectAccessReview** on the local apiserver, answers cached.
The mapping is the kubelet's own (``pkg/kubelet/server/auth.go``,
``nodeAuthorizerAttributesGetter.GetRequestAttributes``, Kubernetes 1.36+ where
``KubeletFineGrainedAuthz`` is GA), so the RBAC that grants access to a real kubelet grants
the same access here:

=====================  ============================================
path                   subresources tried, in order (first allow wins)
=====================  ============================================
``/stats/...``         ``stats``
``/metrics...``        ``metrics``
``/logs/...``          ``log`` (the node's log files, not a pod's)
``/checkpoint/...``    ``checkpoint``
``/pods...``           ``pods``, then ``proxy``
``/runningpods/...``   ``pods``, then ``proxy``
``/healthz...``        ``healthz``, then ``proxy``
``/configz...``        ``configz``, then ``proxy``
``/statusz...``        ``statusz``, then ``proxy``
anything else          ``proxy`` (``/containerLogs``, ``/exec``, ``/attach``,
                       ``/portForward``, ``/run``...)
=====================  ============================================

Verb: POST -> create, GET -> get, PUT -> update, PATCH -> patch, DELETE -> delete, any other
method (HEAD included) -> "" (which no RBAC rule but ``*`` matches). Note what this means,
exactly as for a kubelet: a WebSocket ``exec`` arrives as a GET, so ``get`` on
``nodes/proxy`` is enough to exec. The kubelet maintainers keep it so (kubernetes PR
136550, closed; the kubelet authn/authz page warns that ``get nodes/proxy`` is not
read-only); grant ``nodes/proxy`` only to identities trusted to run commands in pods.

A denial is ``403`` with the kubelet's message, ``Forbidden (user=..., verb=...,
resource=nodes, subresource=...)``; a review that cannot be made is ``500``
``Authorization error (...)``, never a silent allow.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from kubernetes import client

from kube_offload.runtime import kinds
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube
from vkubelet.kubeletapi.authn import UserInfo
from vkubelet.kubeletapi.decision_cache import CacheTTL, DecisionCache

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

# The kubelet's --authorization-webhook-cache-authorized-ttl / -unauthorized-ttl defaults.
DEFAULT_AUTHZ_TTL = CacheTTL(allowed=300.0, denied=30.0)
REVIEW_TIMEOUT: tuple[float, float] = (5.0, 10.0)

_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

# pkg/kubelet/server/server.go and k8s.io/apiserver healthz/configz/statusz paths.
STATS_PATH = "/stats/"
METRICS_PATH = "/metrics"
LOGS_PATH = "/logs/"
CHECKPOINT_PATH = "/checkpoint/"
PODS_PATH = "/pods"
RUNNING_PODS_PATH = "/runningpods/"
HEALTHZ_PATH = "/healthz"
CONFIGZ_PATH = "/configz"
STATUSZ_PATH = "/statusz"

# Checked first: a fine-grained subresource that, if denied, falls back to proxy.
_FINE_GRAINED = (
    (PODS_PATH, "pods"),
    (HEALTHZ_PATH, "healthz"),
    (CONFIGZ_PATH, "configz"),
    (STATUSZ_PATH, "statusz"),
    (RUNNING_PODS_PATH, "pods"),
)
# Then exactly one of these; proxy when none matches.
_SPECIFIC = (
    (STATS_PATH, "stats"),
    (METRICS_PATH, "metrics"),
    (LOGS_PATH, "log"),
    (CHECKPOINT_PATH, "checkpoint"),
)


@dataclass(frozen=True)
class NodeAttributes:
    """One authorization question about the node (``apiVersion v1``, ``resource nodes``)."""

    verb: str
    subresource: str
    name: str
    path: str

    def describe(self, user: UserInfo) -> str:
        return f"user={user.name}, verb={self.verb}, resource=nodes, subresource={self.subresource}"


def api_verb(method: str) -> str:
    return _VERBS.get(method, "")


def is_subpath(subpath: str, path: str) -> bool:
    """auth.go's isSubpath: ``subpath`` is ``path`` or below it (``/metricsX`` is not)."""
    path = path[:-1] if path.endswith("/") else path
    return subpath == path or (subpath.startswith(path) and subpath[len(path)] == "/")


def subresources_for(path: str) -> list[str]:
    found: list[str] = []
    for prefix, subresource in _FINE_GRAINED:
        if is_subpath(path, prefix):
            found.append(subresource)
            break
    for prefix, subresource in _SPECIFIC:
        if is_subpath(path, prefix):
            found.append(subresource)
            break
    else:
        found.append("proxy")
    return found


def request_attributes(method: str, path: str, node_name: str) -> list[NodeAttributes]:
    """The attributes to authorize, in order; ``path`` is the URL path without query."""
    verb = api_verb(method)
    return [NodeAttributes(verb, subresource, node_name, path) for subresource in subresources_for(path)]


def subject_access_review(user: UserInfo, attributes: NodeAttributes) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": user.name,
        "groups": list(user.groups),
        "resourceAttributes": {
            "verb": attributes.verb,
            "group": "",
            "version": "v1",
            "resource": "nodes",
            "subresource": attributes.subresource,
            "name": attributes.name,
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = user.extra_dict()
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def review_decision(review: Mapping[str, Any]) -> tuple[bool, str]:
    """(allowed, reason); an explicit ``denied`` wins over ``allowed``, as in the API."""
    status = review.get("status") or {}
    allowed = bool(status.get("allowed")) and not status.get("denied")
    return allowed, str(status.get("reason") or status.get("evaluationError") or "")


def forbidden_message(user: UserInfo, attributes: Sequence[NodeAttributes]) -> str:
    return f"Forbidden ({_describe(user, attributes)})"


def error_message(user: UserInfo, attributes: Sequence[NodeAttributes]) -> str:
    return f"Authorization error ({_describe(user, attributes)})"


def _describe(user: UserInfo, attributes: Sequence[NodeAttributes]) -> str:
    if len(attributes) == 1:
        return attributes[0].describe(user)
    first = attributes[0]
    names = ",".join(a.subresource for a in attributes)
    return f"user={user.name}, verb={first.verb}, resource=nodes, subresource(s)={names}"


# --- I/O: SubjectAccessReview with a cache -------------------------------------------------------
ReviewCall = Callable[[dict[str, Any]], dict[str, Any]]


def subject_access_review_call(api_client: client.ApiClient) -> ReviewCall:
    """POST a SubjectAccessReview to the local apiserver, as the vkubelet's own identity
    (which needs ``create`` on ``authorization.k8s.io/subjectaccessreviews``). One short
    try: a kubectl call waits on it (a failure is its 500)."""
    kube = Kube(api_client, timeout=REVIEW_TIMEOUT, retry=NO_RETRY)
    return lambda body: kube.create(kinds.SUBJECT_ACCESS_REVIEWS, body)


class AuthorizationFailed(Exception):
    """The apiserver could not be asked (unreachable, RBAC missing): answered 500."""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    # The attributes that allowed the request, or every one tried when denied.
    attributes: tuple[NodeAttributes, ...]
    reason: str = ""


class Authorizer:
    def __init__(self, review: ReviewCall, ttl: CacheTTL = DEFAULT_AUTHZ_TTL, **cache_options: Any) -> None:
        self._review = review
        self.cache: DecisionCache[tuple[bool, str]] = DecisionCache(ttl, **cache_options)

    def authorize(self, user: UserInfo, attributes: Sequence[NodeAttributes]) -> Decision:
        """Allowed when any of ``attributes`` is (tried in order, as the kubelet's
        nodeAuthorizer does); AuthorizationFailed when a review cannot be made."""
        reason = ""
        for attrs in attributes:
            allowed, reason = self._decide(user, attrs)
            if allowed:
                return Decision(True, (attrs,), reason)
        return Decision(False, tuple(attributes), reason)

    def _decide(self, user: UserInfo, attributes: NodeAttributes) -> tuple[bool, str]:
        # The path is not part of a resource SubjectAccessReview: requests that differ
        # only in pod or container share one answer.
        key = (user, attributes.verb, attributes.subresource, attributes.name)
        hit, cached = self.cache.get(key)
        if hit and cached is not None:
            return cached
        try:
            review = self._review(subject_access_review(user, attributes))
        except ApiError as exc:
            hint = (
                " (the vkubelet's identity needs create on subjectaccessreviews.authorization.k8s.io)"
                if exc.status == 403
                else ""
            )
            raise AuthorizationFailed(f"SubjectAccessReview failed: {exc}{hint}") from None
        allowed, reason = review_decision(review)
        self.cache.put(key, (allowed, reason), positive=allowed)
        return allowed, reason
