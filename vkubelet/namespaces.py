"""Twin namespaces: for each local namespace offloaded to this remote cluster, one remote
namespace that holds its pods (loop 1 of ARCHITECTURE.md).

Ownership rule: a remote namespace is ours only if it carries
``kube-offload.io/origin-cluster-id=<local id>``. One that exists without it (created by
the remote cluster's users, or by another consumer cluster) is never taken over nor
deleted; the local namespace gets a Warning Event saying so. A twin is deleted when its
namespace stops being offloaded here, and only if it is ours.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from kubernetes import client

from kube_offload import constants as c
from kube_offload.controller import Controller, Requeue
from kube_offload.kube import ApiError, call_json
from kube_offload.logs import ObjectLogger
from kube_offload.policy import PolicyError, policy_from_namespace
from vkubelet import events as ev
from vkubelet.events import EventRecorder
from vkubelet.informers import SharedInformers
from vkubelet.naming import twin_namespace_name
from vkubelet.node_forge import node_labels
from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.namespaces")


# --- pure decisions ------------------------------------------------------------------------
@dataclass(frozen=True)
class TwinPlan:
    """What the remote side of one local namespace should be."""

    twin: str | None  # the remote namespace wanted; None = no twin here
    reason: str  # why (for logs and Events)
    policy_error: PolicyError | None = None  # a bad policy: leave everything as it is


def plan_twin(namespace: Mapping | None, *, name: str, virtual_node_labels: Mapping[str, str], local_cluster_id: str) -> TwinPlan:
    """Whether local namespace ``name`` (``namespace`` = its object, None when deleted)
    is offloaded to the cluster whose virtual node has ``virtual_node_labels``."""
    if namespace is None:
        return TwinPlan(None, f"namespace {name} was deleted")
    if (namespace.get("metadata") or {}).get("deletionTimestamp"):
        return TwinPlan(None, f"namespace {name} is being deleted")
    try:
        policy = policy_from_namespace(dict(namespace))
    except PolicyError as exc:
        return TwinPlan(None, str(exc), policy_error=exc)
    if not policy.enabled:
        return TwinPlan(None, f"namespace {name} is not offloaded ({c.LABEL_ENABLED} is not {c.ENABLED_VALUE})")
    if policy.placement == c.PLACEMENT_LOCAL:
        return TwinPlan(None, f"namespace {name} has {c.LABEL_POD_PLACEMENT}={c.PLACEMENT_LOCAL}")
    if not policy.cluster_selector.matches(virtual_node_labels):
        return TwinPlan(None, f"the cluster selector \"{policy.cluster_selector}\" of namespace {name} does not match this cluster")
    return TwinPlan(twin_namespace_name(name, local_cluster_id, policy.mapping), "offloaded")


def is_our_twin(remote_namespace: Mapping, local_namespace: str, local_cluster_id: str) -> bool:
    meta = remote_namespace.get("metadata") or {}
    return (meta.get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id and (
        meta.get("annotations") or {}
    ).get(c.ANNOTATION_TWIN_OF) == local_namespace


def build_twin(twin: str, local_namespace: str, local_cluster_id: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": twin,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: local_cluster_id},
            "annotations": {c.ANNOTATION_TWIN_OF: local_namespace},
        },
    }


# --- the loop --------------------------------------------------------------------------------
class TwinNamespaces:
    """Reconciles twins, and answers the pod loop's question "where do this namespace's
    pods go?" from the same caches and the same rule."""

    # How soon to look again at a name held by a namespace that is not ours.
    CONFLICT_RETRY_SECONDS = 60.0

    def __init__(self, settings: Settings, informers: SharedInformers, recorder: EventRecorder) -> None:
        self.settings = settings
        self._remote = client.CoreV1Api(informers.remote_client)
        self._recorder = recorder
        self._labels = node_labels(settings)
        self.local_namespaces = informers.local_namespaces()
        self.remote_namespaces = informers.remote_namespaces()
        self.controller = Controller(name="twin-namespaces", reconcile=self.reconcile, workers=max(1, settings.workers // 2))
        self.controller.watch(self.local_namespaces)
        self.controller.watch(self.remote_namespaces, self._local_name_of)

    def informers(self) -> list:
        return [self.local_namespaces, self.remote_namespaces]

    def plan(self, name: str) -> TwinPlan:
        return plan_twin(
            self.local_namespaces.get(name),
            name=name,
            virtual_node_labels=self._labels,
            local_cluster_id=self.settings.local_cluster_id,
        )

    def twin_for(self, name: str) -> tuple[str | None, str]:
        """The remote namespace for pods of local namespace ``name`` if it is ready to take
        them (offloaded here, twin exists, ours, not terminating); else None and why."""
        plan = self.plan(name)
        if plan.twin is None:
            return None, plan.reason
        remote = self.remote_namespaces.get(plan.twin)
        if remote is None or not is_our_twin(remote, name, self.settings.local_cluster_id):
            return None, f"the remote namespace {plan.twin} does not exist yet or is not managed by kube-offload"
        if (remote.get("metadata") or {}).get("deletionTimestamp"):
            return None, f"the remote namespace {plan.twin} is being deleted"
        return plan.twin, ""

    def resync_all(self) -> None:
        for name in self.local_namespaces.keys():
            self.controller.enqueue(name)
        for remote in self.remote_namespaces.list():
            key = self._local_name_of(remote)
            if key:
                self.controller.enqueue(key)

    def _local_name_of(self, remote: dict) -> str | None:
        return ((remote.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_TWIN_OF)

    def reconcile(self, name: str) -> None:
        logger = ObjectLogger(log, {"key": f"namespace {name}"})
        plan = self.plan(name)
        if plan.policy_error is not None:
            # A typo in a label must not delete a twin full of running pods: keep things
            # as they are until the policy reads again (the webhook refuses most typos).
            namespace = self.local_namespaces.get(name)
            logger.warning("invalid offloading policy, leaving the twin namespace as it is: %s", plan.reason)
            if namespace is not None:
                self._recorder.warning(_with_kind(namespace), ev.REASON_POLICY_INVALID, plan.reason)
            return

        for remote in self.remote_namespaces.list():
            remote_name = remote["metadata"]["name"]
            if remote_name == plan.twin or self._local_name_of(remote) != name:
                continue
            if not is_our_twin(remote, name, self.settings.local_cluster_id):
                continue
            self._delete(remote, logger, plan.reason)

        if plan.twin is None:
            return
        existing = self.remote_namespaces.get(plan.twin)
        if existing is not None and is_our_twin(existing, name, self.settings.local_cluster_id):
            if (existing.get("metadata") or {}).get("deletionTimestamp"):
                raise Requeue(2.0, f"twin namespace {plan.twin} is still terminating")
            return
        try:
            call_json(self._remote.create_namespace, build_twin(plan.twin, name, self.settings.local_cluster_id))
            logger.info("created twin namespace %s in cluster %s", plan.twin, self.settings.cluster_id)
            return
        except ApiError as exc:
            if not exc.already_exists:
                raise
        current = call_json(self._remote.read_namespace, plan.twin)
        if is_our_twin(current, name, self.settings.local_cluster_id):
            return  # ours; the cache had not seen it yet
        owner = ((current.get("metadata") or {}).get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID)
        message = (
            f"cannot offload to cluster {self.settings.cluster_id}: the remote namespace {plan.twin} already exists and "
            + (f"belongs to cluster {owner}" if owner else "was not created by kube-offload")
            + "; it is never taken over (use another name or the DefaultName mapping)"
        )
        logger.warning(message)
        namespace = self.local_namespaces.get(name)
        if namespace is not None:
            self._recorder.warning(_with_kind(namespace), ev.REASON_TWIN_CONFLICT, message)
        raise Requeue(self.CONFLICT_RETRY_SECONDS, message)

    def _delete(self, remote: dict, logger: logging.LoggerAdapter, why: str) -> None:
        meta = remote["metadata"]
        if meta.get("deletionTimestamp"):
            return
        try:
            call_json(self._remote.delete_namespace, meta["name"], body={"preconditions": {"uid": meta["uid"]}})
            logger.info("deleted twin namespace %s (%s)", meta["name"], why)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # gone, or another namespace of that name now: not the one we meant
            raise


def _with_kind(namespace: Mapping) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", **namespace}
