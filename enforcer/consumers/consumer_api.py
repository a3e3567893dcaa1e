"""The enforcer's writes (and few live reads) for consumers: TwinNamespace requests, the
namespaces, RoleBindings and ResourceQuotas made for them, and Consumer status. Raw JSON, like
:mod:`enforcer.shadowpods.api`, so no client model stands between a dict and the apiserver.

Every call here is one RBAC rule of the enforcer's ClusterRole (docs/enforcer.md).
"""

from __future__ import annotations

from typing import Any, Protocol

from kubernetes import client

from kube_offload.runtime.kinds import (
    CONSUMERS, NAMESPACES, OFFLOAD_SLICES, PODS, RESOURCE_QUOTAS, ROLE_BINDINGS, ROLES, SHADOWPODS, TWIN_NAMESPACES, Resource,
)
from kube_offload.runtime.kube import ApiError, JSON_PATCH, Kube, MERGE_PATCH

# The kinds of the custom resource grant (enforcer/consumers/twin_grants.py), by plural.
_GRANT_KINDS: dict[str, Resource] = {"roles": ROLES, "rolebindings": ROLE_BINDINGS}


class ConsumerApi(Protocol):
    def set_twin_request_finalizers(self, namespace: str, name: str, finalizers: list[str], resource_version: str) -> dict[str, Any]: ...

    def replace_twin_request_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]: ...

    def get_namespace(self, name: str) -> dict[str, Any] | None: ...

    def create_namespace(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def patch_namespace(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def delete_namespace(self, name: str, uid: str) -> None: ...

    def create_rolebinding(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def update_rolebinding(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_rolebinding(self, namespace: str, name: str, uid: str) -> None: ...

    def create_resourcequota(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def update_resourcequota(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_resourcequota(self, namespace: str, name: str, uid: str) -> None: ...

    def create_grant(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def update_grant(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_grant(self, resource: str, namespace: str, name: str, uid: str) -> None: ...

    def replace_consumer_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]: ...

    def replace_slice_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]: ...

    def delete_shadowpod(self, namespace: str, name: str, uid: str) -> None: ...

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_seconds: int) -> None: ...


class KubeConsumerApi:
    """:class:`ConsumerApi` over a kubernetes ``ApiClient`` (the API layer,
    :class:`kube_offload.runtime.kube.Kube`); errors are ApiError."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._kube = Kube(api_client)

    # --- TwinNamespace (twinnamespaces: patch; twinnamespaces/status: patch) --------------
    def set_twin_request_finalizers(self, namespace: str, name: str, finalizers: list[str], resource_version: str) -> dict[str, Any]:
        # The resourceVersion makes the patch conditional: the list is computed from the
        # cached object, and a finalizer someone else added meanwhile must not be lost.
        return self._kube.patch(
            TWIN_NAMESPACES,
            name,
            {"metadata": {"finalizers": finalizers}},
            namespace=namespace,
            content_type=MERGE_PATCH,
            resource_version=resource_version or None,
        )

    def replace_twin_request_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        # A JSON patch replacing the whole status: a merge patch would keep keys the new
        # status no longer has (the namespace of a request now refused, say).
        body = [{"op": "add", "path": "/status", "value": status}]
        return self._kube.patch(
            TWIN_NAMESPACES, name, body, namespace=namespace, subresource="status", content_type=JSON_PATCH
        )

    # --- namespaces (get, create, patch, delete) -----------------------------------------
    def get_namespace(self, name: str) -> dict[str, Any] | None:
        return self._kube.get_or_none(NAMESPACES, name)

    def create_namespace(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(NAMESPACES, body)

    def patch_namespace(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._kube.patch(NAMESPACES, name, patch, content_type=MERGE_PATCH)

    def delete_namespace(self, name: str, uid: str) -> None:
        """Delete exactly the namespace with ``uid`` (a namespace of that name made by
        someone else meanwhile survives). Already gone is success."""
        self._delete(NAMESPACES, None, name, uid)

    # --- RoleBindings (create, update, delete) -------------------------------------------
    def create_rolebinding(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(ROLE_BINDINGS, body, namespace=namespace)

    def update_rolebinding(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.replace(ROLE_BINDINGS, body, namespace=namespace)

    def delete_rolebinding(self, namespace: str, name: str, uid: str) -> None:
        self._delete(ROLE_BINDINGS, namespace, name, uid)

    # --- twin ResourceQuotas (create, update, delete) ------------------------------------
    def create_resourcequota(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(RESOURCE_QUOTAS, body, namespace=namespace)

    def update_resourcequota(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.replace(RESOURCE_QUOTAS, body, namespace=namespace)

    def delete_resourcequota(self, namespace: str, name: str, uid: str) -> None:
        self._delete(RESOURCE_QUOTAS, namespace, name, uid)

    # --- the custom resource grant: Role or RoleBinding ("roles", "rolebindings") ----------
    def create_grant(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.create(_GRANT_KINDS[resource], body, namespace=namespace)

    def update_grant(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._kube.replace(_GRANT_KINDS[resource], body, namespace=namespace)

    def delete_grant(self, resource: str, namespace: str, name: str, uid: str) -> None:
        self._delete(_GRANT_KINDS[resource], namespace, name, uid)

    # --- Consumer status (consumers/status: patch) ---------------------------------------
    def replace_consumer_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        # Replaced whole: a merge patch would keep a node that left the capacity summary.
        body = [{"op": "add", "path": "/status", "value": status}]
        return self._kube.patch(CONSUMERS, name, body, subresource="status", content_type=JSON_PATCH)

    # --- OffloadSlice status (offloadslices/status: patch) --------------------------------
    def replace_slice_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        # Replaced whole: a merge patch would keep an accepted resource the slice no longer asks.
        body = [{"op": "add", "path": "/status", "value": status}]
        return self._kube.patch(OFFLOAD_SLICES, name, body, namespace=namespace, subresource="status", content_type=JSON_PATCH)

    # --- ShadowPods of a drained consumer past its grace (shadowpods: delete) -------------
    def delete_shadowpod(self, namespace: str, name: str, uid: str) -> None:
        """Delete exactly that ShadowPod (its pod goes with it: the pod's owner reference)."""
        self._delete(SHADOWPODS, namespace, name, uid)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_period_seconds: int) -> None:
        """Delete exactly that pod with an explicit grace (a drained ShadowPod's, whose
        garbage collection would otherwise wait the pod's own grace, however long an older
        enforcer let it be)."""
        self._delete(PODS, namespace, name, uid, grace_period_seconds=grace_period_seconds)

    def _delete(self, resource: Resource, namespace: str | None, name: str, uid: str, *,
                grace_period_seconds: int | None = None) -> None:
        try:
            self._kube.delete(resource, name, namespace=namespace, uid=uid, grace_period_seconds=grace_period_seconds)
        except ApiError as exc:
            if exc.not_found or exc.conflict:  # gone, or that UID is gone (precondition failed)
                return
            raise
