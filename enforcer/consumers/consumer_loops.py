"""Wiring of the enforcer's provider-side loops: the TwinNamespace controller, the
OffloadSlice controller and the Consumer status loop, with the cluster-wide informers
they read.

They start after the ShadowPod controller is running and wait for their own caches on
their own threads, so their initial lists (every pod and node of the cluster) never
delay a ShadowPod's pod, and their workers are not the ShadowPod workers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import logging
import threading
from dataclasses import dataclass

from kubernetes import client

from enforcer.consumers.consumer_status_loop import ConsumerStatusLoop, Recorder
from enforcer.consumers.consumer_api import KubeConsumerApi
from enforcer.consumers.continuity_loop import ContinuityLoop
from enforcer.consumers.passes import wait_synced
from enforcer.consumers.slices import NAMESPACE_INDEX, SliceReconciler, namespace_of
from enforcer.consumers.trim import content_changed, trim_namespace, trim_node, trim_pod
from enforcer.consumers.twins import TwinReconciler, consumer_spec_changed
from kube_offload import constants as c
from kube_offload.runtime.controller import Controller
from kube_offload.runtime.informer import Handler, Informer
from kube_offload.runtime.kinds import (
    CONSUMERS,
    ENDPOINT_SLICES,
    LEASES,
    NAMESPACES,
    NODES,
    OFFLOAD_SLICES,
    PODS,
    RESOURCE_QUOTAS,
    ROLE_BINDINGS,
    ROLES,
    TWIN_NAMESPACES,
)
from kube_offload.runtime.kube import Kube

# The name is in every log line of these loops: kept from before "consumer" was the one word.
log = logging.getLogger("kube_offload.enforcer.tenants")


@dataclass(frozen=True)
class AdmissionInformers:
    """The caches of these loops that the enforcer's webhooks read too: built here once,
    shared with the webhooks in the enforcer's process, or built alone in the webhooks' own
    process (enforcer/webhook_process.py), the same definitions either way."""

    namespaces: Informer
    consumers: Informer
    # By tenant namespace too: the tenant-objects webhook counts a consumer's requests.
    requests: Informer
    nodes: Informer
    # Every consumer's OffloadSlices, by tenant namespace (docs/slices.md).
    slices: Informer

    @classmethod
    def build(cls, api_client: client.ApiClient, resync_seconds: float) -> "AdmissionInformers":
        kube = Kube(api_client)
        return cls(
            namespaces=Informer(name="namespaces", list_func=kube.list_func(NAMESPACES), resync_seconds=resync_seconds,
                                transform=trim_namespace),
            consumers=Informer(name="consumers", list_func=kube.list_func(CONSUMERS), resync_seconds=resync_seconds),
            requests=Informer(name="twinnamespaces", list_func=kube.list_func(TWIN_NAMESPACES), resync_seconds=resync_seconds,
                              indexers={NAMESPACE_INDEX: namespace_of}),
            nodes=Informer(name="capacity-nodes", list_func=kube.list_func(NODES), resync_seconds=resync_seconds,
                           transform=trim_node),
            slices=Informer(name="offloadslices", list_func=kube.list_func(OFFLOAD_SLICES), resync_seconds=resync_seconds,
                            indexers={NAMESPACE_INDEX: namespace_of}),
        )

    def all(self) -> list[Informer]:
        return [self.namespaces, self.consumers, self.requests, self.nodes, self.slices]


class ConsumerLoops:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        shadowpods: Informer,
        twin_role: str,
        managed_pods: Informer | None = None,
        release_namespace: str = "",
        status_period: float,
        resync_seconds: float,
        workers: int = 2,
        recorder: Recorder | None = None,
        unreachable_grace: float = 0.0,
    ) -> None:
        kube = Kube(api_client)

        admission = AdmissionInformers.build(api_client, resync_seconds)
        self.namespaces = admission.namespaces
        self.consumers = admission.consumers
        self.requests = admission.requests
        # Only the twin RoleBindings (one name, every namespace), not all of them.
        self.rolebindings = Informer(
            name="twin-rolebindings",
            list_func=kube.list_func(ROLE_BINDINGS),
            list_kwargs={"field_selector": f"metadata.name={c.TWIN_ROLEBINDING_NAME}"},
            resync_seconds=resync_seconds,
        )
        # Only the twin ResourceQuotas (one name, every namespace).
        self.resourcequotas = Informer(
            name="twin-resourcequotas",
            list_func=kube.list_func(RESOURCE_QUOTAS),
            list_kwargs={"field_selector": f"metadata.name={c.TWIN_RESOURCEQUOTA_NAME}"},
            resync_seconds=resync_seconds,
        )
        # The custom resource grant of each twin: its Role and its RoleBinding (one name).
        self.grant_roles = Informer(
            name="twin-custom-resource-roles",
            list_func=kube.list_func(ROLES),
            list_kwargs={"field_selector": f"metadata.name={c.TWIN_CUSTOM_RESOURCES_NAME}"},
            resync_seconds=resync_seconds,
        )
        self.grant_bindings = Informer(
            name="twin-custom-resource-rolebindings",
            list_func=kube.list_func(ROLE_BINDINGS),
            list_kwargs={"field_selector": f"metadata.name={c.TWIN_CUSTOM_RESOURCES_NAME}"},
            resync_seconds=resync_seconds,
        )
        self.nodes = admission.nodes
        self.pods = Informer(
            name="capacity-pods", list_func=kube.list_func(PODS), resync_seconds=resync_seconds, transform=trim_pod
        )
        # Not among the readiness caches: an install whose CRD predates slices still serves the rest.
        self.slices = admission.slices
        self._informers = [
            self.namespaces, self.consumers, self.requests, self.rolebindings, self.resourcequotas, self.nodes, self.pods,
            self.grant_roles, self.grant_bindings,
            self.slices,
        ]

        api = KubeConsumerApi(api_client)
        self.reconciler = TwinReconciler(
            requests=self.requests,
            namespaces=self.namespaces,
            consumers=self.consumers,
            rolebindings=self.rolebindings,
            api=api,
            twin_role=twin_role,
            release_namespace=release_namespace,
            resourcequotas=self.resourcequotas,
            grant_roles=self.grant_roles,
            grant_bindings=self.grant_bindings,
        )
        self.twins = Controller(name="twin-namespaces", reconcile=self.reconciler, workers=workers, logger=log)
        self.twins.watch(self.requests)
        self.namespaces.add_handler(self._fan_out(self.reconciler.keys_for_namespace))

        def departed(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            for key in self.reconciler.keys_for_departed(event, old, new):
                self.twins.enqueue(key)

        self.requests.add_handler(departed)
        self.rolebindings.add_handler(self._fan_out(self.reconciler.keys_for_rolebinding))
        self.resourcequotas.add_handler(self._fan_out(self.reconciler.keys_for_resourcequota))
        self.grant_roles.add_handler(self._fan_out(self.reconciler.keys_for_rolebinding))
        self.grant_bindings.add_handler(self._fan_out(self.reconciler.keys_for_rolebinding))
        consumer_keys = self._fan_out(self.reconciler.keys_for_consumer)
        self.consumers.add_handler(
            lambda event, old, new: consumer_keys(event, old, new) if consumer_spec_changed(event, old, new) else None
        )

        self.slice_reconciler = SliceReconciler(
            slices=self.slices, namespaces=self.namespaces, consumers=self.consumers, nodes=self.nodes, api=api,
            recorder=recorder,  # an Event on each OffloadSlice whose decision changes
        )
        self.slice_controller = Controller(name="offload-slices", reconcile=self.slice_reconciler, workers=1, logger=log)
        # One key per tenant namespace: its slices are decided together.
        self.slice_controller.watch(self.slices, lambda obj: namespace_of(obj))

        def slices_of_consumer(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            if consumer_spec_changed(event, old, new):
                for key in self.slice_reconciler.keys_for_consumer(new):
                    self.slice_controller.enqueue(key)

        def slices_of_nodes(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            if content_changed(old, new):  # a heartbeat changes nothing the nodes' cache keeps
                for key in self.slice_reconciler.all_keys():
                    self.slice_controller.enqueue(key)

        self.consumers.add_handler(slices_of_consumer)
        self.nodes.add_handler(slices_of_nodes)
        def slices_of_namespace(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            # A tenant namespace's label decides whose slices they are.
            name = str((new.get("metadata") or {}).get("name") or "")
            if self.slices.by_index(NAMESPACE_INDEX, name):
                self.slice_controller.enqueue(name)

        self.namespaces.add_handler(slices_of_namespace)

        self.status = ConsumerStatusLoop(
            consumers=self.consumers,
            shadowpods=shadowpods,
            managed_pods=managed_pods,
            namespaces=self.namespaces,
            nodes=self.nodes,
            pods=self.pods,
            api=api,
            period=status_period,
            resync_seconds=resync_seconds,
            recorder=recorder,  # Events on Consumers: a drain's deletions and its end
        )
        for informer in (self.consumers, shadowpods, self.namespaces, *([managed_pods] if managed_pods else [])):
            informer.add_handler(self.status.on_event)
        for informer in (self.nodes, self.pods):
            informer.add_handler(self.status.on_trimmed_event)

        # Service continuity (continuity_loop.py): the consumers' heartbeat Leases (one name,
        # every tenant namespace) and the EndpointSlices consumers reflected (by label).
        self.continuity: ContinuityLoop | None = None
        if unreachable_grace > 0:
            leases = Informer(
                name="consumer-heartbeats",
                list_func=kube.list_func(LEASES),
                list_kwargs={"field_selector": f"metadata.name={c.CONSUMER_HEARTBEAT_LEASE}"},
                resync_seconds=resync_seconds,
            )
            slices = Informer(
                name="reflected-endpointslices",
                list_func=kube.list_func(ENDPOINT_SLICES),
                list_kwargs={"label_selector": f"{c.LABEL_REFLECTOR}={c.REFLECTOR_ENDPOINTSLICES},{c.LABEL_ORIGIN_CLUSTER_ID}"},
                resync_seconds=resync_seconds,
            )
            self.continuity = ContinuityLoop(
                kube=kube,
                consumers=self.consumers,
                namespaces=self.namespaces,
                leases=leases,
                endpoint_slices=slices,
                grace_seconds=unreachable_grace,
                period=status_period,
                resync_seconds=resync_seconds,
                recorder=recorder,
            )
            self._informers += [leases, slices]
            for informer in (self.consumers, self.namespaces, leases, slices):
                informer.add_handler(self.continuity.on_event)

        self._stopped = threading.Event()
        self._starter: threading.Thread | None = None

    def _fan_out(self, key_func: Callable[[dict[str, Any]], Iterable[str]]) -> Handler:
        def handler(_event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            for obj in (old, new):
                if obj is not None:
                    for key in key_func(obj):
                        self.twins.enqueue(key)

        return handler

    def start(self) -> None:
        for informer in self._informers:
            informer.start()
        self.status.start()
        if self.continuity is not None:
            self.continuity.start()
        self._starter = threading.Thread(target=self._start_twins, name="twin-namespaces-start", daemon=True)
        self._starter.start()

    def _start_twins(self) -> None:
        # A request served from a half-filled namespace cache could be refused for a
        # namespace not listed yet, or a namespace created twice.
        caches = (self.namespaces, self.consumers, self.requests, self.rolebindings, self.resourcequotas,
                  self.grant_roles, self.grant_bindings)
        if not wait_synced(self._stopped, lambda: all(cache.has_synced() for cache in caches), lambda: log.warning(
                "TwinNamespace controller still waiting for caches: %s (are the Consumer and TwinNamespace CRDs "
                "installed?)", ", ".join(cache.name for cache in caches if not cache.has_synced()))):
            return
        self.twins.start()
        log.info("caches synced; TwinNamespace controller running")
        # Slices are decided from a full view of the nodes and of every slice of a tenant:
        # a half-listed cache would accept more than is there, or shrink nothing it should.
        slice_caches = (self.namespaces, self.consumers, self.slices, self.nodes)
        if not wait_synced(self._stopped, lambda: all(cache.has_synced() for cache in slice_caches), lambda: log.warning(
                "OffloadSlice controller still waiting for caches: %s (is the OffloadSlice CRD installed? "
                "kube_offload/manifests/offloadslice-crd.yaml)",
                ", ".join(cache.name for cache in slice_caches if not cache.has_synced()))):
            return
        self.slice_controller.start()
        log.info("caches synced; OffloadSlice controller running")

    def stop(self, timeout: float = 2.0) -> None:
        self._stopped.set()
        self.twins.stop()
        self.slice_controller.stop()
        self.status.stop()
        if self.continuity is not None:
            self.continuity.stop()
        # As in Enforcer.stop: closing a quiet watch can block; never hang on it.
        closer = threading.Thread(target=self._stop_informers, name="stop-tenant-informers", daemon=True)
        closer.start()
        closer.join(timeout)

    def _stop_informers(self) -> None:
        for informer in self._informers:
            informer.stop()
