"""Thin I/O edge to the Kubernetes API: client loading, one error type, raw-JSON calls.

Objects travel through kube-offload as plain dicts in the API's own JSON shape (camelCase),
exactly as the apiserver sends them in AdmissionReviews, watches and extender calls, so a
pure function never has to care whether its input came from a model or the wire.

:class:`Kube` is the one way to call an API server: typed verbs (get, list, watch,
create, apply, patch, replace, delete) on the resource values of
:mod:`kube_offload.runtime.kinds`, UID and resourceVersion preconditions, one
:class:`ApiError` carrying the parsed ``metav1.Status``, a timeout on every request,
retries where a retry is safe (:func:`retry_delay`), and the per-cluster API metrics
(docs/metrics.md) counted at the one place every request passes. It borrows the official
client's configuration only: host, TLS, credentials (token refresh included) and
connection pool; no generated method or model is in between (docs/runtime.md says why,
with the figures of bench/bench_api_client.py). :func:`call` and :func:`call_json` remain
as the informers' way of calling a list function (:meth:`Kube.list_func`, or a generated
list method in a test), with one error type either way.

Over 400 lines on purpose: it is one concern, the edge to the API server. The pure
helpers (Status parsing, :func:`retry_delay`, :func:`query_string`, the preconditions)
sit beside the one request path that uses them, and are tested on their own
(tests/unit/kube_offload/runtime/test_kube.py).
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlencode

import urllib3

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.metrics import CODE_ERROR, instrumented_cluster, observe_api_call, request_verb
from kube_offload.times import doubling_delay

# The patch content types our components send (one place; the API server picks the patch
# semantics from the Content-Type header alone).
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply; a JSON body is valid YAML
JSON = "application/json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH, APPLY_PATCH)
FIELD_MANAGER = "kube-offload"

# Seconds to wait for a TCP connection and for a (non-watch) response. Without a read
# timeout a request to an apiserver that went away can hang forever and stall a worker.
DEFAULT_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)


class ApiError(Exception):
    """An error answered by (or on the way to) an API server, with the parsed Status."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status  # the HTTP status (the Status's code); 0: no answer
        self.reason = reason  # the Status's reason (NotFound, AlreadyExists, Conflict...)
        self.message = message
        self.body = body or {}  # the metav1.Status as the server sent it ({} if none)

    @property
    def code(self) -> int:
        return self.status

    @property
    def details(self) -> dict[str, Any]:
        """The Status's details: name, group, kind, causes (field errors), retryAfterSeconds."""
        return self.body.get("details") or {}

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (429, some 5xx), if it said."""
        value = self.details.get("retryAfterSeconds")
        return float(value) if isinstance(value, (int, float)) and value >= 0 else None

    @classmethod
    def from_response(cls, status: int, data: bytes | str | None, http_reason: str = "") -> "ApiError":
        """The error for an answer with HTTP ``status`` and body ``data``: the body's
        metav1.Status when it is one, else the HTTP reason phrase and the text."""
        body: dict[str, Any] = {}
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")
        if text:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("kind") == "Status":
                body = parsed
        message = str(body.get("message") or text.strip()[:500] or http_reason)
        return cls(int(body.get("code") or status), str(body.get("reason") or http_reason), message, body)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.body.get("reason") == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def transient(self) -> bool:
        """Worth retrying: the server or the network, not the request, is at fault."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_exception(cls, exc: ApiException) -> "ApiError":
        body: dict[str, Any] = {}
        if exc.body:
            try:
                body = json.loads(exc.body)
            except (ValueError, TypeError):
                body = {}
        message = body.get("message") or str(exc.reason or "")
        return cls(int(exc.status or 0), str(body.get("reason") or exc.reason or ""), message, body)


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> client.ApiClient:
    """A client for ``kubeconfig`` if given, else in-cluster config, else ~/.kube/config."""
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise SystemExit(f"kube-offload: kubeconfig {kubeconfig!r} does not exist; pass --kubeconfig with a readable file")
        api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig, context=context)
        return api
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except ConfigException:
        fallback: client.ApiClient = config.new_client_from_config(context=context)
        return fallback


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a kubernetes-client method; an ApiException becomes an ApiError, connection
    failures become ApiError(status=0) so callers handle one type."""
    kwargs.setdefault("_request_timeout", DEFAULT_REQUEST_TIMEOUT)
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        raise ApiError.from_exception(exc) from exc
    except (OSError, ConnectionError) as exc:
        raise ApiError(0, "Unreachable", str(exc)) from exc
    except Exception as exc:  # urllib3 errors do not share a base class with OSError
        if type(exc).__module__.startswith("urllib3"):
            raise ApiError(0, "Unreachable", str(exc)) from exc
        raise


def call_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Like :func:`call` but returns the response body as the API's raw JSON dict,
    skipping the (slow, snake_case) model deserialisation."""
    kwargs["_preload_content"] = False
    response = call(fn, *args, **kwargs)
    data = response.data
    return json.loads(data) if data else {}


def object_key(obj: Mapping[str, Any]) -> str:
    """``ns/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    name = meta.get("name", "")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    if "/" in key:
        namespace, name = key.split("/", 1)
        return namespace, name
    return None, key


# --- the layer ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """How often a request is tried (``attempts`` in all) and how long between tries
    (``backoff`` doubling up to ``max_backoff``, with jitter, unless the server said)."""

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 2.0


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)

# Methods that change nothing: trying one again cannot do anything twice.
_SAFE_METHODS = frozenset({"GET", "HEAD"})
# The server or a proxy on the way failed, or is restarting, for any request.
_SERVER_FAULTS = frozenset({500, 502, 503, 504})


def retry_delay(error: ApiError, method: str, attempt: int, policy: RetryPolicy = DEFAULT_RETRY) -> float | None:
    """Seconds to wait before trying again the request that failed with ``error`` on its
    ``attempt``-th try (1-based), or None: give up and raise.

    - 429 Too Many Requests, any method: API Priority and Fairness (or the max-inflight
      filter) refused the request *before* handling it, so a write was not done either;
      the server's Retry-After is honoured.
    - 5xx and no answer (status 0), reads only: a GET or a list done twice does nothing
      twice. A write that met one may have been applied (a timeout after etcd stored it,
      a connection cut after the request was sent), and only its caller can tell whether
      to send it again; a controller's reconcile does, from its cache, on its own retry.
      (Connection failures before anything was sent are retried by urllib3 already.)
    - Anything else is the request's fault or a fact (404, 409, 403, 422, 410): trying
      again gets the same answer.
    """
    if attempt >= policy.attempts:
        return None
    method = method.upper()
    if error.status == 429:
        pass
    elif method in _SAFE_METHODS and (error.status == 0 or error.status in _SERVER_FAULTS):
        pass
    else:
        return None
    if error.retry_after is not None:
        return min(error.retry_after, policy.max_backoff * 4)
    delay = doubling_delay(attempt, start=policy.backoff, cap=policy.max_backoff)
    return delay * (0.5 + random.random() / 2)  # jitter: many workers must not retry in step


def query_string(params: Mapping[str, Any]) -> str:
    """``?k=v&...`` of the parameters that are set (None and False are left out, True is
    ``true``), in the order given; "" when none is."""
    pairs = []
    for key, value in params.items():
        if value is None or value is False:
            continue
        pairs.append((key, "true" if value is True else str(value)))
    return "?" + urlencode(pairs) if pairs else ""


def delete_options(
    *,
    uid: str | None = None,
    resource_version: str | None = None,
    grace_period_seconds: int | None = None,
    propagation_policy: str | None = None,
) -> dict[str, Any]:
    """A DeleteOptions body: the delete happens only if the object still has ``uid`` (an
    object of the same name made since survives) and/or ``resource_version`` (nobody
    changed it since it was read); else the server answers 409 Conflict."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    # "" is a precondition too (one no object meets): only None means none.
    preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None}
    if preconditions:
        body["preconditions"] = preconditions
    if grace_period_seconds is not None:
        body["gracePeriodSeconds"] = grace_period_seconds
    if propagation_policy:
        body["propagationPolicy"] = propagation_policy
    return body


def with_resource_version(patch: Any, content_type: str, resource_version: str | None) -> Any:
    """``patch`` made conditional on the object's ``resource_version``: the patched object
    carries that version, so the server answers 409 Conflict if the object changed since
    (a stale cache must not overwrite a newer write). A merge or strategic merge patch
    sets it in its metadata; a JSON patch starts by replacing it (not a ``test`` op: a
    failed test is a 422 Invalid, and a precondition should fail one way, 409)."""
    if not resource_version:
        return patch
    if content_type == JSON_PATCH:
        return [{"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}, *patch]
    if content_type == APPLY_PATCH:
        raise ValueError("server-side apply takes no resourceVersion precondition: it merges by field owner")
    patched = dict(patch)
    patched["metadata"] = {**(patch.get("metadata") or {}), "resourceVersion": resource_version}
    return patched


def _chunks(response: Any) -> Iterator[bytes]:
    """A streamed answer's chunks; a connection that breaks meanwhile is an ApiError (0)."""
    try:
        yield from response.stream(None, decode_content=True)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ApiError(0, "Unreachable", f"the stream broke: {exc}") from exc


class _Unread:
    """A list's answer as a generated method gives it with ``_preload_content=False``:
    the bytes in ``data`` (:func:`call_json` parses them once)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Kube:
    """One API server's verbs, on raw JSON dicts. ``api_client`` is an official
    ``ApiClient`` (:func:`load_api_client`): its configuration and connection pool are
    used, nothing else. ``cluster`` labels the API metrics (``local``/``remote``); by
    default the label :func:`kube_offload.runtime.metrics.instrument_api_client` gave
    the client, read at each request (no label: not counted, as before)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        cluster: str | None = None,
        timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        self.api_client = api_client
        self._cluster = cluster
        self.timeout = timeout
        self.retry = retry
        self.field_manager = field_manager

    @property
    def cluster(self) -> str | None:
        return self._cluster or instrumented_cluster(self.api_client)

    # --- verbs ------------------------------------------------------------------------------
    def get(self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None,
            timeout: tuple[float, float] | None = None, retry: RetryPolicy | None = None) -> dict[str, Any]:
        return self._object("GET", resource.path(namespace=namespace, name=name, subresource=subresource),
                             timeout=timeout, retry=retry)

    def get_or_none(self, resource: Resource, name: str, *, namespace: str | None = None,
                    timeout: tuple[float, float] | None = None, retry: RetryPolicy | None = None) -> dict[str, Any] | None:
        """The object, or None when the server says 404 (any other error raises)."""
        try:
            return self.get(resource, name, namespace=namespace, timeout=timeout, retry=retry)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def list(self, resource: Resource, *, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None,
             timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        """Every object, page by page (``page_size`` a page; None: one request), as one
        list body: the last page's metadata (its resourceVersion) with every page's items.
        A continue token that expired (410) is an ApiError: the pages would not form one
        snapshot, and only the caller knows whether to start again."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = {"labelSelector": label_selector, "fieldSelector": field_selector,
                     "limit": page_size if page_size and page_size > 0 else None, "continue": token}
            body = self._object("GET", resource.path(namespace=namespace) + query_string(query), timeout=timeout)
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                body["items"] = items
                return body

    def watch(self, resource: Resource, *, namespace: str | None = None, resource_version: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None, timeout_seconds: int = 240,
              bookmarks: bool = True) -> Iterator[dict[str, Any]]:
        """The watch events (``{"type", "object"}``) from ``resource_version`` until the
        server ends the watch (``timeout_seconds``) or the generator is closed. An ERROR
        event (410 Gone: history lost) raises its Status as an ApiError."""
        query = {"watch": True, "resourceVersion": resource_version, "labelSelector": label_selector,
                 "fieldSelector": field_selector, "allowWatchBookmarks": bookmarks, "timeoutSeconds": timeout_seconds}
        response = self.request("GET", resource.path(namespace=namespace) + query_string(query),
                                timeout=(self.timeout[0], timeout_seconds + 15), stream=True)
        try:
            pending = b""
            for chunk in _chunks(response):  # as each arrives: events, or part of one
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(int(status.get("code") or 0), str(status.get("reason") or ""),
                                       str(status.get("message") or ""), status)
                    yield event
        finally:
            response.release_conn()

    def create(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None, subresource: str | None = None,
               dry_run: bool = False, timeout: tuple[float, float] | None = None,
               retry: RetryPolicy | None = None) -> dict[str, Any]:
        """POST ``body``; ``subresource`` names one of an object (``body``'s name), e.g. a
        ServiceAccount's ``token``. ``dry_run``: every admission and validation runs,
        nothing is stored."""
        name = (body.get("metadata") or {}).get("name") if subresource else None
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return self._object("POST", path + query_string({"dryRun": "All" if dry_run else None}), body=body,
                             timeout=timeout, retry=retry)

    def apply(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None, subresource: str | None = None,
              force: bool = False, field_manager: str | None = None, timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        """Server-side apply of ``body`` (its ``metadata.name``) as ``field_manager``: the
        fields it names become ours, the fields it leaves out that we owned are removed.
        ``force`` takes over fields another manager owns instead of a 409 Conflict."""
        name = (body.get("metadata") or {}).get("name") or ""
        query = {"fieldManager": field_manager or self.field_manager, "force": force}
        return self._object("PATCH", resource.path(namespace=namespace, name=name, subresource=subresource)
                             + query_string(query), body=body, content_type=APPLY_PATCH, timeout=timeout)

    def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None,
              subresource: str | None = None, content_type: str = MERGE_PATCH, resource_version: str | None = None,
              dry_run: bool = False, timeout: tuple[float, float] | None = None,
              retry: RetryPolicy | None = None) -> dict[str, Any]:
        """PATCH with ``content_type`` (merge by default; strategic merge for built-in kinds
        merges lists by key; JSON patch). ``resource_version``: only if the object has not
        changed since (:func:`with_resource_version`)."""
        if content_type not in PATCH_TYPES:
            raise ValueError(f"patch content type {content_type!r}: use one of {', '.join(PATCH_TYPES)}")
        body = with_resource_version(patch, content_type, resource_version)
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return self._object("PATCH", path + query_string({"dryRun": "All" if dry_run else None}), body=body,
                             content_type=content_type, timeout=timeout, retry=retry)

    def replace(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
                subresource: str | None = None, timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        """PUT ``body`` whole (an update): conditional on its ``metadata.resourceVersion``
        when it carries one, as the API server makes every update."""
        name = (body.get("metadata") or {}).get("name") or ""
        return self._object("PUT", resource.path(namespace=namespace, name=name, subresource=subresource),
                             body=body, timeout=timeout)

    def delete(self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None,
               resource_version: str | None = None, grace_period_seconds: int | None = None,
               propagation_policy: str | None = None, timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        """DELETE, with UID and resourceVersion preconditions (:func:`delete_options`).
        Raises ApiError 404 (gone) and 409 (a precondition failed) like any other."""
        body = delete_options(uid=uid, resource_version=resource_version,
                              grace_period_seconds=grace_period_seconds, propagation_policy=propagation_policy)
        return self._object("DELETE", resource.path(namespace=namespace, name=name), body=body, timeout=timeout)

    def list_func(self, resource: Resource, *, namespace: str | None = None) -> Callable[..., Any]:
        """``resource``'s list and watch, called as the Informer calls a generated list
        method (``limit``, ``_continue``, ``watch``, ``resource_version``...,
        ``_preload_content=False``): the informers keep their paging, resume and 410 logic,
        and their requests go through this layer (kind, timeouts, metrics)."""

        def list_or_watch(
            *,
            label_selector: str | None = None,
            field_selector: str | None = None,
            limit: int | None = None,
            _continue: str | None = None,
            watch: bool = False,
            resource_version: str | None = None,
            allow_watch_bookmarks: bool = False,
            timeout_seconds: int | None = None,
            _preload_content: bool = False,
            _request_timeout: tuple[float, float] | float | None = None,
        ) -> Any:
            if _preload_content:
                raise ValueError("Kube.list_func answers unread (raw JSON): call it with _preload_content=False")
            query = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit,
                     "continue": _continue, "watch": watch, "resourceVersion": resource_version,
                     "allowWatchBookmarks": allow_watch_bookmarks, "timeoutSeconds": timeout_seconds}
            timeout = (_request_timeout, _request_timeout) if isinstance(_request_timeout, (int, float)) else _request_timeout
            response = self.request("GET", resource.path(namespace=namespace) + query_string(query),
                                    timeout=timeout, stream=True)
            if watch:
                return response  # read line by line by the informer, which closes it
            try:
                return _Unread(response.read())
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ApiError(0, "Unreachable", f"reading the answer: {exc}") from exc
            finally:
                response.release_conn()

        return list_or_watch

    def _object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """:meth:`request` for a verb answered with a JSON object (the object, a list, a Status)."""
        answer: dict[str, Any] = self.request(method, path, **kwargs)
        return answer

    # --- the one place every request passes ---------------------------------------------------
    def request(self, method: str, path: str, *, body: Any = None, content_type: str = JSON,
                timeout: tuple[float, float | None] | None = None, retry: RetryPolicy | None = None,
                stream: bool = False, accept: str = JSON) -> Any:
        """Send one request (tried again per :func:`retry_delay`); the answer's JSON as a
        dict, or with ``stream`` the open urllib3 response (a log, a watch: the caller
        reads and releases it). ``timeout``: (connect, read) seconds, read None: none.
        Any failure is an ApiError."""
        policy = retry or self.retry
        attempt = 1
        while True:
            try:
                return self._send(method, path, body, content_type, timeout or self.timeout, stream, accept)
            except ApiError as exc:
                delay = retry_delay(exc, method, attempt, policy)
                if delay is None:
                    raise
                time.sleep(delay)
                attempt += 1

    def _send(self, method: str, path: str, body: Any, content_type: str, timeout: tuple[float, float | None],
              stream: bool, accept: str) -> Any:
        api_client = self.api_client
        headers = dict(api_client.default_headers)
        headers["Accept"] = accept
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":")).encode()
        # Credentials as the official client sends them (a refreshed token included).
        api_client.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
        url = api_client.configuration.host + path
        cluster = self.cluster
        started = time.perf_counter()
        try:
            response = api_client.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, preload_content=False,
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if cluster:
                observe_api_call(cluster, request_verb(method, url), CODE_ERROR, time.perf_counter() - started)
            raise ApiError(0, "Unreachable", str(exc)) from exc
        if cluster:
            observe_api_call(cluster, request_verb(method, url), str(response.status), time.perf_counter() - started)
        if stream and 200 <= response.status <= 299:
            return response
        try:
            payload = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, "Unreachable", f"reading the answer: {exc}") from exc
        finally:
            response.release_conn()
        if not 200 <= response.status <= 299:
            raise ApiError.from_response(response.status, payload, response.reason or "")
        return json.loads(payload) if payload else {}
