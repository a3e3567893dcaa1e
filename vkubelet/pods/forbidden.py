"""A twin namespace the provider no longer lets us read (its RoleBinding
``kube-offload-consumer`` deleted): its remote caches prove no absence, so the pods of
its local namespace are left exactly as they are, said once in the log per revocation
and on each pod by a Warning Event, until a list there is accepted again."""

from __future__ import annotations

import logging
import threading
from typing import Any, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from kube_offload import reasons
from vkubelet.shared.events import EventRecorder
from vkubelet.twins.namespaces import FORBIDDEN_RETRY_SECONDS, TwinNamespaces

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.pods")


class ForbiddenTwins:
    def __init__(
        self,
        settings: Settings,
        twins: TwinNamespaces,
        recorder: EventRecorder,
        shadowpods: MultiNamespaceInformer,
        remote_pods: MultiNamespaceInformer,
    ) -> None:
        self.settings = settings
        self._twins = twins
        self._recorder = recorder
        self._shadowpods = shadowpods
        self._remote_pods = remote_pods
        # Twin namespaces whose 403 was already logged (once per revocation, not per pod).
        self._told: set[str] = set()
        self._lock = threading.Lock()

    def twin_of(self, namespace: str) -> str | None:
        """The twin namespace of local ``namespace`` whose remote caches were answered 403
        (None: readable, or no twin). The twin is found from the namespace's plan and from
        our TwinNamespace requests (a namespace no longer offloaded still has its twin)."""
        forbidden: set[str] = set(self._shadowpods.forbidden_namespaces()) | set(self._remote_pods.forbidden_namespaces())
        self._forget_recovered(forbidden)
        if not forbidden:
            return None
        plan = self._twins.plan(namespace)
        if plan.twin in forbidden:
            return plan.twin
        for twin in sorted(forbidden):
            request = self._twins.requests.get(f"{self.settings.tenant_namespace}/{twin}")
            if request is not None and self._twins.local_namespace_of(request) == namespace:
                return twin
        return None

    def _forget_recovered(self, forbidden: set[str]) -> None:
        with self._lock:
            back = self._told - forbidden
            self._told -= back
        for twin in sorted(back):
            log.info("twin namespace %s on cluster %s can be read again: its pods are managed again", twin, self.settings.cluster_id)

    def message(self, twin: str, namespace: str) -> str:
        reason = self._shadowpods.forbidden_reason(twin) or self._remote_pods.forbidden_reason(twin)
        return (
            f"twin namespace {twin} of namespace {namespace} on cluster {self.settings.cluster_id} cannot be read "
            f"(HTTP 403 Forbidden: {reason or 'forbidden'}): the provider revoked this consumer's access. Its pods are "
            "left as they are (no status mirroring, no offloading, nothing deleted) until access returns; fix on the "
            f"provider: restore RoleBinding {c.TWIN_ROLEBINDING_NAME} in namespace {twin} (the enforcer writes it for a "
            f"Ready TwinNamespace request), or delete the request {self.settings.tenant_namespace}/{twin} to end the "
            "offloading there"
        )

    def hold(self, local: dict[str, Any], twin: str) -> None:
        """Leave ``local`` as it is: told (log once, Event each time), then a Requeue."""
        namespace = local["metadata"]["namespace"]
        message = self.message(twin, namespace)
        with self._lock:
            first = twin not in self._told
            self._told.add(twin)
        if first:
            log.warning("%s", message)
        self._recorder.warning(local, reasons.REASON_TWIN_FORBIDDEN, message)
        raise Requeue(FORBIDDEN_RETRY_SECONDS, f"twin namespace {twin} forbidden")
