"""AdmissionReview (admission.k8s.io/v1) in and out, as pure functions, shared by every
admission webhook of the project (the local pod/namespace webhook, the enforcer's ShadowPod
validation).

:func:`parse_review` turns the raw request body into an :class:`AdmissionRequest` or
raises :class:`BadRequest` with a message naming the offending field; the HTTP layer
answers those with 400. :func:`review_response` builds the answer the apiserver expects:
same apiVersion and kind, ``response.uid`` echoed (the apiserver rejects an answer whose
uid differs), a base64 JSON Patch when allowed with changes, a ``status`` when denied.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")

# Outcomes as reported in metrics and logs.
PATCHED = "patched"
ALLOWED = "allowed"
DENIED = "denied"


class BadRequest(ValueError):
    """The body is not an AdmissionReview the webhook can act on (HTTP 400)."""


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def __str__(self) -> str:
        return f"{self.group}/{self.version}, Kind={self.kind}" if self.group else (
            f"{self.version}, Kind={self.kind}"
        )


@dataclass(frozen=True)
class UserInfo:
    """Who sent the request the apiserver is admitting (``request.userInfo``)."""

    username: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    api_version: str
    kind: GroupVersionKind
    operation: str
    namespace: str
    name: str
    sub_resource: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    user_info: UserInfo = UserInfo()
    # request.resource.resource: the plural the request was made on (``widgets``), what
    # RBAC and a custom resource grant name; "" when the review does not say.
    resource: str = ""


@dataclass(frozen=True)
class Decision:
    """What to answer: allowed (with an optional patch) or denied with a status."""

    allowed: bool
    patch: tuple[dict[str, Any], ...] = ()
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def allow(cls, patch: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (), *,
              warnings: list[str] | tuple[str, ...] = ()) -> Decision:
        return cls(allowed=True, patch=tuple(patch), warnings=tuple(warnings))

    @classmethod
    def deny(cls, code: int, reason: str, message: str) -> Decision:
        return cls(allowed=False, code=code, reason=reason, message=message)

    @property
    def outcome(self) -> str:
        if not self.allowed:
            return DENIED
        return PATCHED if self.patch else ALLOWED


def _field(container: dict[str, Any], key: str, path: str, kind: type | tuple[type, ...], *,
           required: bool, default: Any = None) -> Any:
    value = container.get(key)
    if value is None:
        if required:
            raise BadRequest(f"{path}.{key} is missing")
        return default
    if not isinstance(value, kind):
        expected: dict[type | tuple[type, ...], str] = {dict: "an object", str: "a string", bool: "a boolean", list: "a list"}
        raise BadRequest(
            f"{path}.{key} must be {expected.get(kind, str(kind))}, got {_json_type(value)}"
        )
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def decode_body(body: bytes) -> Any:
    try:
        # orjson: the review is parsed on every admission, and the stdlib decoder was the
        # largest single cost of the admission work (docs/performance.md).
        return orjson.loads(body)
    except ValueError as exc:  # orjson.JSONDecodeError, also for invalid UTF-8
        if "depth limit" in str(exc):  # orjson refuses more than 1024 levels
            raise BadRequest("request body is nested too deeply to be an AdmissionReview") from None
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview body; :class:`BadRequest` when it is unusable."""
    review = decode_body(body)
    if not isinstance(review, dict):
        raise BadRequest(f"request body must be a JSON object (an {KIND}), got {_json_type(review)}")
    api_version = review.get("apiVersion")
    kind = review.get("kind")
    if kind != KIND:
        raise BadRequest(f"kind must be {KIND!r}, got {kind!r}")
    if api_version != API_VERSION:
        raise BadRequest(
            f"apiVersion must be {API_VERSION!r} (register the webhook with "
            f"admissionReviewVersions: [v1]), got {api_version!r}"
        )
    request = _field(review, "request", "review", dict, required=True)
    uid = _field(request, "uid", "request", str, required=True)
    if not uid:
        raise BadRequest("request.uid is empty")
    gvk = _field(request, "kind", "request", dict, required=True)
    group = _field(gvk, "group", "request.kind", str, required=False, default="")
    version = _field(gvk, "version", "request.kind", str, required=True)
    kind_name = _field(gvk, "kind", "request.kind", str, required=True)
    operation = _field(request, "operation", "request", str, required=True)
    if operation not in OPERATIONS:
        raise BadRequest(f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    obj = _field(request, "object", "request", dict, required=operation in ("CREATE", "UPDATE"))
    old = _field(request, "oldObject", "request", dict, required=False)
    if obj is not None:
        _check_metadata(obj, "request.object")
    if old is not None:
        _check_metadata(old, "request.oldObject")
    return AdmissionRequest(
        uid=uid,
        api_version=api_version,
        kind=GroupVersionKind(group, version, kind_name),
        operation=operation,
        namespace=_field(request, "namespace", "request", str, required=False, default=""),
        name=_field(request, "name", "request", str, required=False, default=""),
        sub_resource=_field(request, "subResource", "request", str, required=False, default=""),
        resource=_field(_field(request, "resource", "request", dict, required=False, default={}) or {},
                        "resource", "request.resource", str, required=False, default=""),
        object=obj,
        old_object=old,
        dry_run=bool(_field(request, "dryRun", "request", bool, required=False, default=False)),
        user_info=_user_info(request),
    )


def _user_info(request: dict[str, Any]) -> UserInfo:
    info = _field(request, "userInfo", "request", dict, required=False) or {}
    username = _field(info, "username", "request.userInfo", str, required=False, default="")
    groups = _field(info, "groups", "request.userInfo", list, required=False, default=[])
    for index, group in enumerate(groups):
        if not isinstance(group, str):
            raise BadRequest(f"request.userInfo.groups[{index}] must be a string, got {_json_type(group)}")
    return UserInfo(username, tuple(groups))


def _check_metadata(obj: dict[str, Any], path: str) -> None:
    """Labels and annotations are string maps in every Kubernetes object; policy reading
    relies on it, so a different shape is the client's mistake, reported here."""
    metadata = _field(obj, "metadata", path, dict, required=False)
    if metadata is None:
        return
    for key in ("labels", "annotations"):
        values = _field(metadata, key, f"{path}.metadata", dict, required=False) or {}
        for name, value in values.items():
            if not isinstance(value, str):
                raise BadRequest(
                    f"{path}.metadata.{key}[{name!r}] must be a string, got {_json_type(value)}"
                )


def review_response(request: AdmissionRequest, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview to send back for ``request``."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        patch = orjson.dumps(list(decision.patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode("ascii")
    if not decision.allowed:
        response["status"] = {
            "status": "Failure",
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return {"apiVersion": request.api_version, "kind": KIND, "response": response}


def error_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status body for HTTP-level errors (400, 404, 503 ...)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


_RESOURCES = {"Pod": "pods", "Namespace": "namespaces"}


def build_review(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    uid: str = "00000000-0000-0000-0000-000000000000",
    old_object: dict[str, Any] | None = None,
    namespace: str | None = None,
    resource: str | None = None,
    user_info: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """An AdmissionReview for ``obj`` as kube-apiserver sends it (every field it sets),
    for tests, benchmarks and debugging with curl. The group and version come from the
    object's apiVersion (core/v1 when absent); ``resource`` defaults to the lower-case
    plural of the kind for the core kinds above and ``<kind>s`` otherwise."""
    kind = obj.get("kind", "Pod")
    group, _, version = str(obj.get("apiVersion") or "v1").rpartition("/")
    resource_ref = {"group": group, "version": version, "resource": resource or _RESOURCES.get(kind, kind.lower() + "s")}
    gvk = {"group": group, "version": version, "kind": kind}
    metadata = obj.get("metadata") or {}
    if namespace is None:
        namespace = metadata.get("namespace", "") if kind != "Namespace" else ""
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": gvk,
        "resource": resource_ref,
        "requestKind": gvk,
        "requestResource": resource_ref,
        "name": metadata.get("name", ""),
        "operation": operation,
        "userInfo": user_info
        if user_info is not None
        else {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": None if operation == "DELETE" else obj,
        "oldObject": obj if operation == "DELETE" and old_object is None else old_object,
        "dryRun": dry_run,
        "options": {"kind": options_kind.get(operation, "CreateOptions"), "apiVersion": "meta.k8s.io/v1"},
    }
    if namespace:
        request["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}
