"""The enforcer's writes to (and few live reads from) its own API server, as raw JSON.

Pods and Events are sent as the dicts the reconcile built, not through the client's
models: the generated client validates a dict body against its own V1Pod model and
rejects any field it does not know, and a ShadowPod made from a pod of a newer local
cluster may well carry one. The apiserver is the judge of a pod, not the client.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_offload.constants import SHADOWPOD_GROUP, SHADOWPOD_PLURAL, SHADOWPOD_VERSION
from kube_offload.runtime.kube import ApiError, call_json, MERGE_PATCH, STRATEGIC_MERGE_PATCH

JSON = "application/json"


class EnforcerApi(Protocol):
    """What the reconcile needs from the API server (a real cluster in production and in
    the end-to-end tests; an in-memory record in the reconcile's unit tests)."""

    def get_shadowpod(self, namespace: str, name: str) -> dict | None: ...

    def create_pod(self, namespace: str, pod: dict) -> dict: ...

    def get_pod(self, namespace: str, name: str) -> dict | None: ...

    def delete_pod(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> None: ...

    def patch_pod(self, namespace: str, name: str, patch: dict) -> dict: ...

    def patch_shadowpod_status(self, namespace: str, name: str, status: dict, resource_version: str) -> dict: ...

    def create_event(self, namespace: str, event: dict) -> dict: ...

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict: ...


class KubeEnforcerApi:
    """:class:`EnforcerApi` over a kubernetes ``ApiClient``; errors are ApiError."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)

    def get_shadowpod(self, namespace: str, name: str) -> dict | None:
        try:
            return call_json(
                self._custom.get_namespaced_custom_object,
                SHADOWPOD_GROUP,
                SHADOWPOD_VERSION,
                namespace,
                SHADOWPOD_PLURAL,
                name,
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def patch_shadowpod_status(self, namespace: str, name: str, status: dict, resource_version: str) -> dict:
        # The resourceVersion makes the patch conditional: the status is computed from
        # the cached ShadowPod (recreations counts up from it), so a stale cache must
        # fail with 409 rather than overwrite a newer count.
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return call_json(
            self._custom.patch_namespaced_custom_object_status,
            SHADOWPOD_GROUP,
            SHADOWPOD_VERSION,
            namespace,
            SHADOWPOD_PLURAL,
            name,
            body,
            _content_type=MERGE_PATCH,
        )

    def create_pod(self, namespace: str, pod: dict) -> dict:
        return call_json(raw_request, self._api_client, "POST", f"/api/v1/namespaces/{_q(namespace)}/pods", body=pod)

    def get_pod(self, namespace: str, name: str) -> dict | None:
        try:
            return call_json(raw_request, self._api_client, "GET", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}")
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def delete_pod(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> None:
        """Delete exactly the pod with ``uid``: a pod of the same name created meanwhile
        (by this enforcer, after a restart) must survive. Already gone is success.
        ``grace_period_seconds`` None = the pod's own terminationGracePeriodSeconds."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            call_json(raw_request, self._api_client, "DELETE", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", body=body)
        except ApiError as exc:
            if exc.not_found:
                return
            if exc.conflict:  # precondition failed: that UID is already gone
                return
            raise

    def patch_pod(self, namespace: str, name: str, patch: dict) -> dict:
        """A strategic merge patch: containers merge by name, so an image change names
        only its container (kube_offload.pod_updates.pod_patch)."""
        return call_json(
            raw_request,
            self._api_client,
            "PATCH",
            f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}",
            body=patch,
            content_type=STRATEGIC_MERGE_PATCH,
        )

    def create_event(self, namespace: str, event: dict) -> dict:
        return call_json(raw_request, self._api_client, "POST", f"/api/v1/namespaces/{_q(namespace)}/events", body=event)

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return call_json(
            raw_request,
            self._api_client,
            "PATCH",
            f"/api/v1/namespaces/{_q(namespace)}/events/{_q(name)}",
            body=patch,
            content_type=MERGE_PATCH,
        )


def raw_request(
    api_client: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = JSON,
    _request_timeout: Any = None,
    _preload_content: bool = False,
) -> Any:
    """One request with the client's configuration (host, TLS, auth) and no model in
    between; answers like a generated method called with ``_preload_content=False``, so
    :func:`kube_offload.runtime.kube.call_json` wraps it like any other."""
    method, url, headers, request_body, post_params = api_client.param_serialize(
        method,
        path,
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, headers, request_body, post_params, _request_timeout=_request_timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException(http_resp=response)
    return response.response


def _q(segment: str) -> str:
    return quote(segment, safe="")
