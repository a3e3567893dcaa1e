"""The TwinNamespace controller: a consumer asks, the provider creates its namespace.

Keys are TwinNamespace keys (``<tenant ns>/<name>``). Every event that can change the
answer for a request enqueues it: the request itself, the namespace of that name, the
tenant namespace it lives in, its Consumer (spec changes only: the Consumer status loop
writes status every few seconds) and the twin RoleBinding. One reconcile reads the
caches, asks :func:`enforcer.consumers.twin_plan.plan_twin` what to do and does it; running it
again, or after a crash at any line, converges to the same state (creates meet
AlreadyExists, deletes carry the UID, the finalizer patch carries the resourceVersion).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Protocol

from kube_offload.consumers import consumer_name, requesting_consumer, service_account_of
from enforcer.consumers import twin_grants
from enforcer.consumers.twin_names import request_key
from enforcer.consumers.twin_objects import is_ours
from enforcer.consumers.consumer_api import ConsumerApi
from enforcer.consumers.twin_objects import ResourceQuotaAction, RoleBindingAction
from enforcer.consumers.twin_plan import (
    TwinPlan,
    finalizers_with,
    finalizers_without,
    has_finalizer,
    plan_twin,
    status_changed,
)
from kube_offload import constants as c
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.informer import ADDED, DELETED
from kube_offload.runtime.kube import ApiError, split_key
from kube_offload.runtime.logs import ObjectLogger

log = logging.getLogger("kube_offload.enforcer.twins")

# After a write the cache has not caught up with yet: its event is about to come.
STALE_CACHE_RECHECK_SECONDS = 0.5


class Cache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def keys(self) -> list[str]: ...


class TwinReconciler:
    def __init__(
        self,
        *,
        requests: Cache,
        namespaces: Cache,
        consumers: Cache,
        rolebindings: Cache,
        api: ConsumerApi,
        twin_role: str,
        release_namespace: str = "",
        resourcequotas: Cache | None = None,
        grant_roles: Cache | None = None,
        grant_bindings: Cache | None = None,
    ) -> None:
        self._requests = requests
        self._namespaces = namespaces
        self._consumers = consumers
        self._rolebindings = rolebindings
        # The twin ResourceQuotas (one name, every namespace); None: none are ever seen.
        self._resourcequotas = resourcequotas
        # The custom resource Role and RoleBinding of each twin (twin_grants.py); None:
        # never kept (a caller without those informers).
        self._grant_roles = grant_roles
        self._grant_bindings = grant_bindings
        self._api = api
        self._twin_role = twin_role
        # The enforcer's own namespace: never a twin (enforcer/consumers/twin_names.py).
        self._release_namespace = release_namespace

    # --- keys: which requests an event concerns (informer handlers: cheap) ---------------
    def keys_for_namespace(self, namespace: dict[str, Any]) -> list[str]:
        """The request that made it, every request asking for its name (one may be waiting
        for a foreign namespace to go), and every request in it (a tenant namespace)."""
        metadata = namespace.get("metadata") or {}
        name = metadata.get("name") or ""
        keys = set()
        made_for = (metadata.get("annotations") or {}).get(c.ANNOTATION_TWIN_REQUEST)
        if made_for:
            keys.add(made_for)
        for key in self._requests.keys():
            request_namespace, request_name = split_key(key)
            if request_name == name or request_namespace == name:
                keys.add(key)
        return sorted(keys)

    def keys_for_rolebinding(self, binding: dict[str, Any]) -> list[str]:
        metadata = binding.get("metadata") or {}
        made_for = (metadata.get("annotations") or {}).get(c.ANNOTATION_TWIN_REQUEST)
        if made_for:
            return [made_for]
        namespace = metadata.get("namespace") or ""
        return [k for k in self._requests.keys() if split_key(k)[1] == namespace]

    def keys_for_resourcequota(self, quota: dict[str, Any]) -> list[str]:
        """The request whose twin holds this ResourceQuota: re-created if deleted, put
        back if edited (only the provider's admin can: the consumer has no rights on it)."""
        return self.keys_for_rolebinding(quota)

    def keys_for_consumer(self, consumer: Mapping[str, Any]) -> list[str]:
        """Requests in the namespaces this Consumer may speak from: its tenant namespace
        and its ServiceAccount's namespace."""
        homes = {c.tenant_namespace(consumer_name(consumer)), service_account_of(consumer)[0]}
        return [k for k in self._requests.keys() if split_key(k)[0] in homes]

    def keys_for_departed(self, event: str, _old: dict[str, Any] | None, request: dict[str, Any]) -> list[str]:
        """When a request is gone, the refused requests beside it: one refused for the
        consumer's maximum may now have a place (a request event otherwise concerns only
        itself)."""
        if event != DELETED:
            return []
        home = (request.get("metadata") or {}).get("namespace") or ""
        keys = []
        for key in self._requests.keys():
            if split_key(key)[0] != home:
                continue
            sibling = self._requests.get(key) or {}
            if (sibling.get("status") or {}).get("phase") == c.TWIN_PHASE_REFUSED:
                keys.append(key)
        return keys

    # --- reconcile ----------------------------------------------------------------------
    def __call__(self, key: str) -> None:
        request_namespace, name = split_key(key)
        if request_namespace is None:
            return  # TwinNamespaces are namespaced; nothing else is ever enqueued
        logger = ObjectLogger(log, {"key": key})
        cached = self._requests.get(key)
        if cached is None:
            # Gone: its finalizer made sure its namespace went first. A namespace left by
            # a finalizer removed by hand is left alone: deleting a namespace on the word
            # of labels anyone with namespace rights can write would be the one
            # destructive guess this controller makes (docs/enforcer.md).
            return
        request = {**cached, "metadata": dict(cached.get("metadata") or {})}
        deleting = bool((request.get("metadata") or {}).get("deletionTimestamp"))
        # Deleting: the live namespace, so a namespace the cache has not seen yet can never
        # be left behind when the finalizer goes.
        namespace = self._api.get_namespace(name) if deleting else self._namespaces.get(name)
        plan = self._plan(request, namespace)
        if plan.create_namespace is not None:
            try:
                self._prepare(request, plan, logger)
                self._api.create_namespace(plan.create_namespace)
                logger.info("created namespace %s", name)
            except ApiError as exc:
                if not exc.already_exists:
                    raise
                # The cache was behind, or someone else took the name just now: decide
                # again from the live namespace.
                plan = self._plan(request, self._api.get_namespace(name))
                if plan.create_namespace is not None:
                    raise Requeue(STALE_CACHE_RECHECK_SECONDS, f"namespace {name} appeared and vanished") from exc
        self._carry_out(request, plan, logger, grants_in=name if not deleting and namespace is not None else None)

    def _plan(self, request: dict[str, Any], namespace: dict[str, Any] | None) -> TwinPlan:
        metadata = request.get("metadata") or {}
        name = metadata.get("name") or ""
        return plan_twin(
            request,
            tenant_namespace=self._namespaces.get(metadata.get("namespace") or ""),
            consumers=self._consumers.get,
            namespace=namespace,
            rolebinding=self._rolebindings.get(f"{name}/{c.TWIN_ROLEBINDING_NAME}"),
            twin_role=self._twin_role,
            resourcequota=self._twin_resourcequota(name),
            siblings=self._requests_of,
            namespace_of=self._namespaces.get,
            release_namespace=self._release_namespace,
        )

    def _twin_resourcequota(self, namespace: str) -> dict[str, Any] | None:
        if self._resourcequotas is None:
            return None
        return self._resourcequotas.get(f"{namespace}/{c.TWIN_RESOURCEQUOTA_NAME}")

    def _requests_of(self, consumer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The consumer's TwinNamespaces (what its maximum counts)."""
        found = (self._requests.get(key) for key in self.keys_for_consumer(consumer))
        return [request for request in found if request is not None]

    def _prepare(self, request: dict[str, Any], plan: TwinPlan, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """The finalizer, before anything is created for the request."""
        if not plan.add_finalizer or has_finalizer(request):
            return
        metadata = request["metadata"]
        finalizers = finalizers_with(request)
        try:
            updated = self._api.set_twin_request_finalizers(
                metadata["namespace"], metadata["name"], finalizers, metadata.get("resourceVersion", "")
            )
        except ApiError as exc:
            if exc.conflict or exc.not_found:
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "request changed meanwhile") from exc
            raise
        # The rest of this reconcile works on what was written, never on the stale copy
        # (a copy: the cached object itself is never changed).
        request["metadata"] = {
            **metadata,
            "finalizers": finalizers,
            "resourceVersion": (updated.get("metadata") or {}).get("resourceVersion"),
        }
        logger.debug("finalizer added")

    def _carry_out(self, request: dict[str, Any], plan: TwinPlan, logger: logging.LoggerAdapter[logging.Logger], *, grants_in: str | None = None) -> None:
        metadata = request["metadata"]
        request_namespace, name = metadata["namespace"], metadata["name"]
        self._prepare(request, plan, logger)
        if plan.namespace_patch is not None:
            self._api.patch_namespace(name, plan.namespace_patch)
            logger.info("namespace %s relabelled: %s", name, plan.namespace_patch["metadata"])
        # The bounds first, then the rights: the consumer never holds rights in a twin
        # whose ResourceQuota is not there yet.
        if plan.resourcequota_action is not ResourceQuotaAction.NONE:
            self._bound(name, plan, logger)
        if plan.rolebinding is not None:
            self._bind(name, plan, logger)
        if grants_in is not None:
            self._grant_custom_resources(grants_in, request, logger)
        if plan.delete_namespace_uid is not None:
            self._api.delete_namespace(name, plan.delete_namespace_uid)
            logger.info("deleting namespace %s (uid %s): its request is being deleted", name, plan.delete_namespace_uid)
        if plan.status is not None and status_changed(request, plan.status):
            try:
                self._api.replace_twin_request_status(request_namespace, name, plan.status)
            except ApiError as exc:
                if not exc.not_found:  # gone meanwhile: its DELETED event brings us back
                    raise
            if plan.status.get("phase") in (c.TWIN_PHASE_READY, c.TWIN_PHASE_REFUSED):
                logger.info("%s: %s", plan.status["phase"], plan.status.get("message"))
        if plan.remove_finalizer:
            try:
                self._api.set_twin_request_finalizers(
                    request_namespace, name, finalizers_without(request), metadata.get("resourceVersion", "")
                )
            except ApiError as exc:
                if exc.not_found:
                    return
                if exc.conflict:
                    raise Requeue(STALE_CACHE_RECHECK_SECONDS, "request changed meanwhile") from exc
                raise
            logger.info("namespace %s is gone; request released", name)
        if plan.requeue_after is not None:
            raise Requeue(plan.requeue_after, "; ".join(plan.notes) or "waiting")

    def _bind(self, namespace: str, plan: TwinPlan, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        assert plan.rolebinding is not None
        existing = self._rolebindings.get(f"{namespace}/{c.TWIN_ROLEBINDING_NAME}")
        try:
            if plan.rolebinding_action is RoleBindingAction.CREATE:
                self._api.create_rolebinding(namespace, plan.rolebinding)
                logger.info("bound ClusterRole %s in %s", self._twin_role, namespace)
            elif plan.rolebinding_action is RoleBindingAction.UPDATE and existing is not None:
                body = dict(plan.rolebinding)
                body["metadata"] = {**plan.rolebinding["metadata"], "resourceVersion": existing["metadata"].get("resourceVersion")}
                self._api.update_rolebinding(namespace, body)
                logger.info("RoleBinding %s in %s corrected", c.TWIN_ROLEBINDING_NAME, namespace)
            elif plan.rolebinding_action is RoleBindingAction.RECREATE and existing is not None:
                # roleRef cannot change: delete (this very one) and create on the next pass.
                self._api.delete_rolebinding(namespace, c.TWIN_ROLEBINDING_NAME, existing["metadata"].get("uid", ""))
                logger.info("RoleBinding %s in %s bound the wrong role; replacing it", c.TWIN_ROLEBINDING_NAME, namespace)
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "RoleBinding deleted; recreate it")
        except ApiError as exc:
            if exc.already_exists or exc.conflict:
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "RoleBinding changed meanwhile") from exc
            raise


    def _grant_custom_resources(self, namespace: str, request: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """The Role and RoleBinding of the kinds the Consumer grants (twin_grants.py), in a
        twin that is ours: created, corrected, or deleted when nothing is granted."""
        if self._grant_roles is None or self._grant_bindings is None:
            return
        metadata = request.get("metadata") or {}
        consumer, _ = requesting_consumer(metadata.get("namespace") or "", self._namespaces.get(metadata.get("namespace") or ""),
                                          self._consumers.get)
        if consumer is None or not is_ours(self._namespaces.get(namespace), consumer_name(consumer), request_key(request)):
            return
        key = f"{namespace}/{c.TWIN_CUSTOM_RESOURCES_NAME}"
        # The Role before its binding when granting, the binding first when withdrawing.
        steps = [
            ("roles", self._grant_roles.get(key), twin_grants.desired_role(namespace, request, consumer), "rules"),
            ("rolebindings", self._grant_bindings.get(key), twin_grants.desired_binding(namespace, request, consumer), "subjects"),
        ]
        if steps[0][2] is None:
            steps.reverse()
        try:
            for resource, existing, desired, field in steps:
                act = twin_grants.action(existing, desired, field=field)
                if act is twin_grants.GrantAction.CREATE and desired is not None:
                    self._api.create_grant(resource, namespace, desired)
                elif act is twin_grants.GrantAction.UPDATE and desired is not None and existing is not None:
                    body = {**desired, "metadata": {**desired["metadata"], "resourceVersion": existing["metadata"].get("resourceVersion")}}
                    self._api.update_grant(resource, namespace, body)
                elif act is twin_grants.GrantAction.DELETE and existing is not None:
                    self._api.delete_grant(resource, namespace, c.TWIN_CUSTOM_RESOURCES_NAME, existing["metadata"].get("uid", ""))
                else:
                    continue
                logger.info("custom resource grant in %s: %s %s", namespace, resource, act.value)
        except ApiError as exc:
            if exc.already_exists or exc.conflict:
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "custom resource grant changed meanwhile") from exc
            raise

    def _bound(self, namespace: str, plan: TwinPlan, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        existing = self._twin_resourcequota(namespace)
        try:
            if plan.resourcequota_action is ResourceQuotaAction.CREATE and plan.resourcequota is not None:
                self._api.create_resourcequota(namespace, plan.resourcequota)
                logger.info("ResourceQuota %s in %s: %s", c.TWIN_RESOURCEQUOTA_NAME, namespace, plan.resourcequota["spec"]["hard"])
            elif plan.resourcequota_action is ResourceQuotaAction.UPDATE and plan.resourcequota is not None and existing:
                body = dict(plan.resourcequota)
                body["metadata"] = {**plan.resourcequota["metadata"], "resourceVersion": existing["metadata"].get("resourceVersion")}
                self._api.update_resourcequota(namespace, body)
                logger.info("ResourceQuota %s in %s now: %s", c.TWIN_RESOURCEQUOTA_NAME, namespace, plan.resourcequota["spec"]["hard"])
            elif plan.resourcequota_action is ResourceQuotaAction.DELETE and plan.resourcequota_uid:
                self._api.delete_resourcequota(namespace, c.TWIN_RESOURCEQUOTA_NAME, plan.resourcequota_uid)
                logger.info("ResourceQuota %s in %s deleted: the Consumer's spec.quota has no object key", c.TWIN_RESOURCEQUOTA_NAME, namespace)
        except ApiError as exc:
            if exc.already_exists or exc.conflict or exc.not_found:
                raise Requeue(STALE_CACHE_RECHECK_SECONDS, "ResourceQuota changed meanwhile") from exc
            raise


def consumer_spec_changed(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Only a Consumer's arrival, departure or spec change concerns its requests; its
    status changes every few seconds and must not requeue them all."""
    if event in (ADDED, DELETED) or old is None:
        return True
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("generation") is not None and old_meta.get("generation") == new_meta.get("generation"):
        return False
    return old.get("spec") != new.get("spec")
