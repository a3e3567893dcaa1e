"""A recording fake of the API layer for WRITES (:class:`kube_offload.runtime.kube.Kube`),
for the unit tests of a loop's reconcile.

A loop reads from its informers (fed by hand: :mod:`support.informers`) and writes through
``Kube``; a test puts a :class:`RecordingKube` where the loop keeps its ``Kube`` and then
looks at what was written: every create, apply, patch, replace and delete with its
arguments, in order (:attr:`RecordingKube.writes`). It answers as the API server would in
the cases the tests meet, from a store of the objects it holds (seeded with
:meth:`~RecordingKube.hold`, changed by the writes):

- create: AlreadyExists (409) for a name it holds; otherwise the object with a uid, a
  resourceVersion, a creationTimestamp and a generation, stored (not with ``dry_run``);
- patch (merge and strategic merge as a JSON merge patch, JSON patch) and replace:
  NotFound (404) for a name it does not hold; Conflict (409) when the patch or the body
  names another ``metadata.resourceVersion`` or ``metadata.uid`` than the object's (the
  preconditions :func:`~kube_offload.runtime.kube.with_resource_version` and the
  vkubelet's termination request write); the ``status`` subresource changes the status
  only, the object itself everything but its status (the kinds here have the subresource);
- delete: NotFound, Conflict for a failed uid/resourceVersion precondition; an object with
  finalizers, or a pod bound to a node deleted with a grace period, gets a
  deletionTimestamp and stays (as the API server leaves it to its finalizer or kubelet);
  anything else goes;
- apply: creates or merges;
- any write answered with an error of the test's choosing (a 403 from the provider's
  webhook, a 422, a 500) with :meth:`~RecordingKube.answer_with`.

Reads are not its business: ``get``/``get_or_none`` answer from the store (the few live
reads a loop makes, e.g. the pod loop's orphan check) and are listed in
:attr:`RecordingKube.reads`; ``list``, ``watch`` and any other request fail the test (a
loop's caches are informers). Nothing here runs an API server; what it answers is
checked against a real one by the e2e tier.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import jsonpatch
from kubernetes import client

from kube_offload.runtime.kinds import PODS, Resource
from kube_offload.runtime.kube import (
    APPLY_PATCH,
    FIELD_MANAGER,
    JSON_PATCH,
    MERGE_PATCH,
    PATCH_TYPES,
    ApiError,
    Kube,
    RetryPolicy,
)
from kube_offload.times import now_time

CREATE = "create"
APPLY = "apply"
PATCH = "patch"
REPLACE = "replace"
DELETE = "delete"
WRITE_VERBS = (CREATE, APPLY, PATCH, REPLACE, DELETE)


# --- the API server's errors, as it words them (k8s.io/apimachinery/pkg/api/errors) ---------
def status_error(code: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None) -> ApiError:
    """An :class:`ApiError` carrying the ``metav1.Status`` an API server sends."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = dict(details)
    return ApiError(code, reason, message, body)


def _qualified(resource: Resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def not_found(resource: Resource, name: str) -> ApiError:
    return status_error(404, "NotFound", f'{_qualified(resource)} "{name}" not found',
                        details={"name": name, "group": resource.group, "kind": resource.plural})


def already_exists(resource: Resource, name: str) -> ApiError:
    return status_error(409, "AlreadyExists", f'{_qualified(resource)} "{name}" already exists',
                        details={"name": name, "group": resource.group, "kind": resource.plural})


def conflict(resource: Resource, name: str, why: str) -> ApiError:
    return status_error(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(resource)} "{name}": {why}',
                        details={"name": name, "group": resource.group, "kind": resource.plural})


def forbidden(message: str) -> ApiError:
    """403, e.g. a validating webhook's denial as the API server wraps it
    (``admission webhook "<name>" denied the request: <message>``) or RBAC's."""
    return status_error(403, "Forbidden", message)


def invalid(message: str, *, causes: list[dict[str, str]] | None = None) -> ApiError:
    """422 with the field causes of a schema or webhook check."""
    return status_error(422, "Invalid", message, details={"causes": causes or []})


MODIFIED_SINCE = "the object has been modified; please apply your changes to the latest version and try again"


@dataclass(frozen=True)
class Write:
    """One write as the loop sent it, and how it was answered."""

    verb: str  # create, apply, patch, replace, delete
    resource: Resource
    name: str
    namespace: str | None
    # The object (create, apply, replace), the patch, or the DeleteOptions body, as sent.
    body: Any
    subresource: str | None = None
    # The other arguments: content_type, dry_run, force, field_manager,
    # grace_period_seconds, uid, resource_version, propagation_policy.
    options: Mapping[str, Any] = field(default_factory=dict)
    error: ApiError | None = None  # what it was answered with, if not the object


@dataclass
class _Refusal:
    verb: str | None
    resource: Resource | None
    name: str | None
    error: ApiError
    times: int

    def matches(self, verb: str, resource: Resource, name: str) -> bool:
        return (self.verb in (None, verb) and self.resource in (None, resource)
                and self.name in (None, name))


class WatchedCache(Protocol):
    """What :meth:`RecordingKube.feed` hands each change to: an informer's ``apply``."""

    def apply(self, kind: str, obj: dict[str, Any]) -> None: ...


_Key = tuple[Resource, str, str]  # (resource, namespace or "", name)


class RecordingKube(Kube):
    """``Kube`` with the API server replaced by a store and a record (see the module)."""

    def __init__(self) -> None:
        # No API server behind it: the official client's configuration is never read.
        super().__init__(client.ApiClient(), cluster="test")  # its connection is never used: see request()
        self.writes: list[Write] = []
        self.reads: list[tuple[Resource, str, str | None]] = []
        self._store: dict[_Key, dict[str, Any]] = {}
        self._versions = itertools.count(1000)
        self._refusals: list[_Refusal] = []
        self._fed: dict[Resource, list[WatchedCache]] = {}

    # --- what a test sets up ---------------------------------------------------------------
    def hold(self, resource: Resource, *objects: Mapping[str, Any]) -> None:
        """The API server holds ``objects`` (as they are: their resourceVersion and uid
        are the ones a cache shows), e.g. the local pod a loop patches."""
        for obj in objects:
            meta = obj.get("metadata") or {}
            self._store[(resource, str(meta.get("namespace") or ""), str(meta["name"]))] = copy.deepcopy(dict(obj))

    def answer_with(self, error: ApiError, *, verb: str | None = None, resource: Resource | None = None,
                    name: str | None = None, times: int = 1) -> None:
        """Answer the next ``times`` writes that match (``verb``, ``resource``, ``name``;
        None: any) with ``error`` instead of doing them (they are still recorded)."""
        if verb is not None and verb not in WRITE_VERBS:
            raise ValueError(f"verb {verb!r}: one of {', '.join(WRITE_VERBS)}")
        self._refusals.append(_Refusal(verb, resource, name, error, times))

    def feed(self, resource: Resource, cache: WatchedCache) -> None:
        """Deliver each stored change of ``resource`` to ``cache`` as its watch would
        (ADDED, MODIFIED, DELETED), so the loop's informer shows what it wrote."""
        self._fed.setdefault(resource, []).append(cache)

    # --- what a test looks at --------------------------------------------------------------
    def of(self, verb: str | None = None, resource: Resource | None = None) -> list[Write]:
        """The writes of ``verb`` on ``resource`` (None: any), in the order sent."""
        return [w for w in self.writes if verb in (None, w.verb) and resource in (None, w.resource)]

    def stored(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as the API server now holds it (None: it does not)."""
        obj = self._store.get((resource, namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    # --- writes ------------------------------------------------------------------------------
    def create(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
               subresource: str | None = None, dry_run: bool = False, timeout: tuple[float, float] | None = None,
               retry: RetryPolicy | None = None) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        self._answer(Write(CREATE, resource, name, namespace, copy.deepcopy(body), subresource,
                           {"dry_run": dry_run}))
        if subresource:
            return copy.deepcopy(body)  # e.g. a TokenRequest: answered, not stored
        if not name and meta.get("generateName"):
            name = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        key = (resource, namespace or "", name)
        if key in self._store:
            raise self._refused_now(already_exists(resource, name))
        obj = copy.deepcopy(body)
        obj_meta = obj.setdefault("metadata", {})
        obj_meta["name"] = name
        if resource.namespaced:
            obj_meta["namespace"] = namespace
        obj_meta.setdefault("uid", str(uuid.uuid4()))
        obj_meta.setdefault("creationTimestamp", now_time())
        obj_meta.setdefault("generation", 1)
        obj_meta["resourceVersion"] = self._version()
        return self._keep(key, obj, dry_run=dry_run, event="ADDED")

    def apply(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
              subresource: str | None = None, force: bool = False, field_manager: str | None = None,
              timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        name = str((body.get("metadata") or {}).get("name") or "")
        self._answer(Write(APPLY, resource, name, namespace, copy.deepcopy(body), subresource,
                           {"force": force, "field_manager": field_manager or FIELD_MANAGER}))
        key = (resource, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            obj = copy.deepcopy(body)
            obj_meta = obj.setdefault("metadata", {})
            if resource.namespaced:
                obj_meta["namespace"] = namespace
            obj_meta.setdefault("uid", str(uuid.uuid4()))
            obj_meta.setdefault("creationTimestamp", now_time())
            obj_meta["resourceVersion"] = self._version()
            return self._keep(key, obj, event="ADDED")
        return self._keep(key, self._changed(current, merge_patch(current, body), subresource), event="MODIFIED")

    def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
              subresource: str | None = None, content_type: str = MERGE_PATCH, resource_version: str | None = None,
              dry_run: bool = False, timeout: tuple[float, float] | None = None,
              retry: RetryPolicy | None = None) -> dict[str, Any]:
        if content_type not in PATCH_TYPES or content_type == APPLY_PATCH:
            raise ValueError(f"patch content type {content_type!r}: server-side apply is apply()")
        options: dict[str, Any] = {"content_type": content_type, "dry_run": dry_run}
        if resource_version is not None:
            options["resource_version"] = resource_version
        self._answer(Write(PATCH, resource, name, namespace, copy.deepcopy(patch), subresource, options))
        key = (resource, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            raise self._refused_now(not_found(resource, name))
        if content_type == JSON_PATCH:
            patched = jsonpatch.apply_patch(current, list(patch))
        else:
            self._check_preconditions(resource, name, current, patch.get("metadata") or {})
            patched = merge_patch(current, patch)
        if resource_version is not None and resource_version != current["metadata"].get("resourceVersion"):
            raise self._refused_now(conflict(resource, name, MODIFIED_SINCE))
        return self._keep(key, self._changed(current, patched, subresource), dry_run=dry_run, event="MODIFIED")

    def replace(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
                subresource: str | None = None, timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        name = str((body.get("metadata") or {}).get("name") or "")
        self._answer(Write(REPLACE, resource, name, namespace, copy.deepcopy(body), subresource))
        key = (resource, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            raise self._refused_now(not_found(resource, name))
        self._check_preconditions(resource, name, current, body.get("metadata") or {})
        return self._keep(key, self._changed(current, copy.deepcopy(body), subresource), event="MODIFIED")

    def delete(self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None,
               resource_version: str | None = None, grace_period_seconds: int | None = None,
               propagation_policy: str | None = None, timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        options = {k: v for k, v in (("uid", uid), ("resource_version", resource_version),
                                     ("grace_period_seconds", grace_period_seconds),
                                     ("propagation_policy", propagation_policy)) if v is not None}
        self._answer(Write(DELETE, resource, name, namespace, None, None, options))
        key = (resource, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            raise self._refused_now(not_found(resource, name))
        meta = current["metadata"]
        if uid is not None and uid != meta.get("uid"):
            raise self._refused_now(conflict(resource, name, (
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}")))
        if resource_version is not None and resource_version != meta.get("resourceVersion"):
            raise self._refused_now(conflict(resource, name, (
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}")))
        graceful = (resource == PODS and grace_period_seconds != 0
                    and bool((current.get("spec") or {}).get("nodeName")))
        if meta.get("finalizers") or graceful:
            kept = copy.deepcopy(current)
            kept_meta = kept["metadata"]
            if not kept_meta.get("deletionTimestamp"):
                kept_meta["deletionTimestamp"] = now_time()
                if grace_period_seconds is not None:
                    kept_meta["deletionGracePeriodSeconds"] = grace_period_seconds
                kept_meta["resourceVersion"] = self._version()
            return self._keep(key, kept, event="MODIFIED")
        del self._store[key]
        self._deliver(resource, "DELETED", current)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": resource.group, "kind": resource.plural, "uid": meta.get("uid")}}

    # --- reads: the store, or not at all -----------------------------------------------------
    def get(self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None,
            timeout: tuple[float, float] | None = None, retry: RetryPolicy | None = None) -> dict[str, Any]:
        self.reads.append((resource, name, namespace))
        obj = self._store.get((resource, namespace or "", name))
        if obj is None:
            raise not_found(resource, name)
        return copy.deepcopy(obj)

    def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                timeout: tuple[float, float | None] | None = None, retry: RetryPolicy | None = None,
                stream: bool = False, accept: str = "application/json") -> Any:
        """Every verb not faked above (list, watch, list_func...) ends here: a loop under
        test reads its informers, not the API server."""
        raise AssertionError(f"RecordingKube: {method} {path} was not expected (reads come from the informers)")

    # --- the store ---------------------------------------------------------------------------
    def _version(self) -> str:
        return str(next(self._versions))

    def _answer(self, write: Write) -> None:
        """Record ``write``; raise the error a test asked for, if it matches."""
        for refusal in self._refusals:
            if refusal.times > 0 and refusal.matches(write.verb, write.resource, write.name):
                refusal.times -= 1
                self.writes.append(Write(write.verb, write.resource, write.name, write.namespace, write.body,
                                         write.subresource, write.options, refusal.error))
                raise refusal.error
        self.writes.append(write)

    def _refused_now(self, error: ApiError) -> ApiError:
        """``error`` is the answer to the write just recorded: say so on its record."""
        last = self.writes[-1]
        self.writes[-1] = Write(last.verb, last.resource, last.name, last.namespace, last.body,
                                last.subresource, last.options, error)
        return error

    def _check_preconditions(self, resource: Resource, name: str, current: Mapping[str, Any],
                             meta: Mapping[str, Any]) -> None:
        have = current.get("metadata") or {}
        if meta.get("uid") and meta["uid"] != have.get("uid"):
            raise self._refused_now(conflict(resource, name, (
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {have.get('uid')}")))
        if meta.get("resourceVersion") and meta["resourceVersion"] != have.get("resourceVersion"):
            raise self._refused_now(conflict(resource, name, MODIFIED_SINCE))

    def _changed(self, current: Mapping[str, Any], patched: dict[str, Any], subresource: str | None) -> dict[str, Any]:
        """``patched`` as the API server keeps it: through the status subresource only the
        status changes, through the object everything but the status."""
        result = copy.deepcopy(dict(current))
        if subresource == "status":
            result["status"] = patched.get("status")
        else:
            status = result.get("status")
            result = patched
            if status is not None:
                result["status"] = status
            else:
                result.pop("status", None)
            if (result.get("spec") != current.get("spec")) and "generation" in (current.get("metadata") or {}):
                result["metadata"]["generation"] = int(current["metadata"]["generation"]) + 1
        meta = result.setdefault("metadata", {})
        for fixed in ("uid", "creationTimestamp", "name", "namespace"):
            if fixed in (current.get("metadata") or {}):
                meta[fixed] = current["metadata"][fixed]
        meta["resourceVersion"] = self._version()
        return result

    def _keep(self, key: _Key, obj: dict[str, Any], *, event: str, dry_run: bool = False) -> dict[str, Any]:
        if not dry_run:
            self._store[key] = obj
            self._deliver(key[0], event, obj)
        return copy.deepcopy(obj)

    def _deliver(self, resource: Resource, event: str, obj: Mapping[str, Any]) -> None:
        for cache in self._fed.get(resource, ()):
            cache.apply(event, copy.deepcopy(dict(obj)))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of ``patch`` onto ``target`` (a new value): what the API
    server does with a merge patch, and, for the objects the tests patch, with a
    strategic merge patch too (lists replaced whole)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
