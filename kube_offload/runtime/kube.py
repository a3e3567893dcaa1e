"""Thin I/O edge to the Kubernetes API: client loading, one error type, raw-JSON calls.

Objects travel through kube-offload as plain dicts in the API's own JSON shape (camelCase),
exactly as the apiserver sends them in AdmissionReviews, watches and extender calls, so a
pure function never has to care whether its input came from a model or the wire.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

# The patch content types our components send (one place; the API server picks the patch
# semantics from the Content-Type header alone).
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Seconds to wait for a TCP connection and for a (non-watch) response. Without a read
# timeout a request to an apiserver that went away can hang forever and stall a worker.
DEFAULT_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)


class ApiError(Exception):
    """An error answered by (or on the way to) an API server, with the parsed Status."""

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

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
        body: dict = {}
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
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except ConfigException:
        return config.new_client_from_config(context=context)


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


def call_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
    """Like :func:`call` but returns the response body as the API's raw JSON dict,
    skipping the (slow, snake_case) model deserialisation."""
    kwargs["_preload_content"] = False
    response = call(fn, *args, **kwargs)
    data = response.data
    return json.loads(data) if data else {}


def object_key(obj: dict) -> str:
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
