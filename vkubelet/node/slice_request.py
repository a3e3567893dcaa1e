"""A slice's node and its OffloadSlice (docs/slices.md): ask the provider for the slice
(create the object, or update its spec to what ``--slice`` asks: the flag is the consumer's
source of truth), read its answer from the cache, and say each new answer in the log and
as an Event on the node (docs/slices.md "Events")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from kube_offload import constants as c
from kube_offload import slice_requests as slices
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import OFFLOAD_SLICES
from kube_offload.runtime.kube import ApiError, Kube
from vkubelet.node import forge

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.node")


class Recorder(Protocol):
    def normal(self, obj: dict[str, Any], reason: str, message: str) -> None: ...

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None: ...


class NodeSlice:
    def __init__(self, settings: Settings, informer: Informer, remote: Kube, recorder: Recorder | None) -> None:
        assert settings.slice is not None, "a slice's node only"
        self.request = settings.slice
        self.settings = settings
        self.informer = informer  # our OffloadSlice on the provider
        self._remote = remote
        self._recorder = recorder
        self.answer: slices.SliceAnswer | None = None  # None: not read yet
        # The Event saying the latest answer, written once the node exists (its uid is how
        # `kubectl describe node` finds its Events).
        self._event: slices.DecisionEvent | None = None

    def listed(self) -> bool:
        return self.informer.has_synced()

    def read(self) -> None:
        """Re-read our OffloadSlice from its cache; log what the provider's answer changed."""
        name = self.request.name
        obj = self.informer.get(f"{self.settings.tenant_namespace}/{name}")
        fresh = slices.read_answer(obj)
        previous, self.answer = self.answer, fresh
        if previous is not None and (previous.phase, previous.accepted, previous.message, previous.stale) == (
            fresh.phase, fresh.accepted, fresh.message, fresh.stale
        ):
            return
        if fresh.usable:
            log.info(
                "slice %s is %s: node %s offers %s%s", name, fresh.phase, self.settings.node_name,
                forge.resources_text(fresh.accepted), f" ({fresh.message})" if fresh.message else "",
            )
        elif obj is not None:
            log.warning(
                "%s: node %s keeps the taint %s:%s and offers nothing", slices.not_accepted_message(name, fresh),
                self.settings.node_name, c.TAINT_SLICE_NOT_ACCEPTED_KEY, c.TAINT_SLICE_NOT_ACCEPTED_EFFECT,
            )
        for problem in fresh.problems:
            log.warning("OffloadSlice %s: %s", name, problem)
        if obj is not None and (previous is None or (previous.phase, previous.reason, previous.message) != (
            fresh.phase, fresh.reason, fresh.message
        )):
            self._event = slices.decision_event(name, self.request.pool, fresh.phase, fresh.reason, fresh.message)

    def record_event(self, node: dict[str, Any]) -> None:
        """Write the Event of a new answer on ``node`` (as just written), once it has a uid."""
        event, uid = self._event, (node.get("metadata") or {}).get("uid")
        if event is None or not uid:
            return
        self._event = None
        if self._recorder is not None:
            involved = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.settings.node_name, "uid": uid}}
            (self._recorder.warning if event.warning else self._recorder.normal)(involved, event.reason, event.message)

    def ensure(self) -> None:
        """Create our OffloadSlice, or update its spec to what --slice asks (the provider
        re-decides on the new generation)."""
        if not self.informer.has_synced():
            return
        request, namespace = self.request, self.settings.tenant_namespace
        current = self.informer.get(f"{namespace}/{request.name}")
        desired = slices.desired_slice(request, namespace=namespace, local_cluster_id=self.settings.local_cluster_id)
        if current is None:
            try:
                self._remote.create(OFFLOAD_SLICES, desired, namespace=namespace)
                log.info("asked cluster %s for slice %s: pool %s, %s", self.settings.cluster_id, request.name,
                         request.pool, forge.resources_text(request.resources))
            except ApiError as exc:
                if not exc.already_exists:
                    raise
            return
        if slices.spec_differs(current, request):
            body = {**current, "spec": desired["spec"]}
            self._remote.replace(OFFLOAD_SLICES, body, namespace=namespace)
            log.info("updated slice %s: pool %s, %s", request.name, request.pool, forge.resources_text(request.resources))
