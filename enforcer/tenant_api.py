"""The enforcer's writes (and few live reads) for tenants: TwinNamespace requests, the
namespaces, RoleBindings and ResourceQuotas made for them, and Consumer status. Raw JSON, like
:mod:`enforcer.api`, so no client model stands between a dict and the apiserver.

Every call here is one RBAC rule of the enforcer's ClusterRole (docs/enforcer.md).
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import quote

from kubernetes import client

from enforcer.api import raw_request
from kube_offload import constants as c
from kube_offload.runtime.kube import ApiError, call_json, JSON_PATCH, MERGE_PATCH

GROUP_PATH = f"/apis/{c.DOMAIN}/{c.SHADOWPOD_VERSION}"
RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"


class TenantApi(Protocol):
    def set_twin_request_finalizers(self, namespace: str, name: str, finalizers: list[str], resource_version: str) -> dict: ...

    def replace_twin_request_status(self, namespace: str, name: str, status: dict) -> dict: ...

    def get_namespace(self, name: str) -> dict | None: ...

    def create_namespace(self, body: dict) -> dict: ...

    def patch_namespace(self, name: str, patch: dict) -> dict: ...

    def delete_namespace(self, name: str, uid: str) -> None: ...

    def create_rolebinding(self, namespace: str, body: dict) -> dict: ...

    def update_rolebinding(self, namespace: str, body: dict) -> dict: ...

    def delete_rolebinding(self, namespace: str, name: str, uid: str) -> None: ...

    def create_resourcequota(self, namespace: str, body: dict) -> dict: ...

    def update_resourcequota(self, namespace: str, body: dict) -> dict: ...

    def delete_resourcequota(self, namespace: str, name: str, uid: str) -> None: ...

    def replace_consumer_status(self, name: str, status: dict) -> dict: ...


class KubeTenantApi:
    """:class:`TenantApi` over a kubernetes ``ApiClient``; errors are ApiError."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client

    def _call(self, method: str, path: str, *, body: object = None, content_type: str = "application/json") -> dict:
        return call_json(raw_request, self._api_client, method, path, body=body, content_type=content_type)

    def _get_or_none(self, path: str) -> dict | None:
        try:
            return self._call("GET", path)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    # --- TwinNamespace (twinnamespaces: patch; twinnamespaces/status: patch) --------------
    def set_twin_request_finalizers(self, namespace: str, name: str, finalizers: list[str], resource_version: str) -> dict:
        # The resourceVersion makes the patch conditional: the list is computed from the
        # cached object, and a finalizer someone else added meanwhile must not be lost.
        metadata: dict = {"finalizers": finalizers}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return self._call("PATCH", _twin_path(namespace, name), body={"metadata": metadata}, content_type=MERGE_PATCH)

    def replace_twin_request_status(self, namespace: str, name: str, status: dict) -> dict:
        # A JSON patch replacing the whole status: a merge patch would keep keys the new
        # status no longer has (the namespace of a request now refused, say).
        body = [{"op": "add", "path": "/status", "value": status}]
        return self._call("PATCH", _twin_path(namespace, name) + "/status", body=body, content_type=JSON_PATCH)

    # --- namespaces (get, create, patch, delete) -----------------------------------------
    def get_namespace(self, name: str) -> dict | None:
        return self._get_or_none(f"/api/v1/namespaces/{_q(name)}")

    def create_namespace(self, body: dict) -> dict:
        return self._call("POST", "/api/v1/namespaces", body=body)

    def patch_namespace(self, name: str, patch: dict) -> dict:
        return self._call("PATCH", f"/api/v1/namespaces/{_q(name)}", body=patch, content_type=MERGE_PATCH)

    def delete_namespace(self, name: str, uid: str) -> None:
        """Delete exactly the namespace with ``uid`` (a namespace of that name made by
        someone else meanwhile survives). Already gone is success."""
        _delete(self, f"/api/v1/namespaces/{_q(name)}", uid)

    # --- RoleBindings (create, update, delete) -------------------------------------------
    def create_rolebinding(self, namespace: str, body: dict) -> dict:
        return self._call("POST", f"{RBAC_PATH}/namespaces/{_q(namespace)}/rolebindings", body=body)

    def update_rolebinding(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._call("PUT", f"{RBAC_PATH}/namespaces/{_q(namespace)}/rolebindings/{_q(name)}", body=body)

    def delete_rolebinding(self, namespace: str, name: str, uid: str) -> None:
        _delete(self, f"{RBAC_PATH}/namespaces/{_q(namespace)}/rolebindings/{_q(name)}", uid)

    # --- twin ResourceQuotas (create, update, delete) ------------------------------------
    def create_resourcequota(self, namespace: str, body: dict) -> dict:
        return self._call("POST", f"/api/v1/namespaces/{_q(namespace)}/resourcequotas", body=body)

    def update_resourcequota(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._call("PUT", f"/api/v1/namespaces/{_q(namespace)}/resourcequotas/{_q(name)}", body=body)

    def delete_resourcequota(self, namespace: str, name: str, uid: str) -> None:
        _delete(self, f"/api/v1/namespaces/{_q(namespace)}/resourcequotas/{_q(name)}", uid)

    # --- Consumer status (consumers/status: patch) ---------------------------------------
    def replace_consumer_status(self, name: str, status: dict) -> dict:
        # Replaced whole: a merge patch would keep a node that left the capacity summary.
        body = [{"op": "add", "path": "/status", "value": status}]
        return self._call(
            "PATCH", f"{GROUP_PATH}/{c.CONSUMER_PLURAL}/{_q(name)}/status", body=body, content_type=JSON_PATCH
        )


def _delete(api: KubeTenantApi, path: str, uid: str) -> None:
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    try:
        api._call("DELETE", path, body=body)
    except ApiError as exc:
        if exc.not_found or exc.conflict:  # gone, or that UID is gone (precondition failed)
            return
        raise


def _twin_path(namespace: str, name: str) -> str:
    return f"{GROUP_PATH}/namespaces/{_q(namespace)}/{c.TWIN_NAMESPACE_PLURAL}/{_q(name)}"


def _q(segment: str) -> str:
    return quote(segment, safe="")
