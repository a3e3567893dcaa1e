"""The tenant-objects validating webhook, apart from HTTP: how many TwinNamespace requests
and OffloadSlices a consumer holds in its tenant namespace, from the enforcer's informers
plus what it admitted that they do not show yet, and the decision (pure,
:mod:`enforcer.admission.tenant_objects`).

The API server calls the webhook concurrently: two creates admitted at the same count
would both pass. So an admission reserves its name under a lock until the informer shows
the object (or a short while passes: a create the API server then failed for another
reason), and the count is the cached names and the reserved ones together: bounded exactly.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from enforcer.admission import tenant_objects as policy
from enforcer.admission.caches import ProviderCaches
from enforcer.consumers.slices import NAMESPACE_INDEX
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision

# How long an admitted name counts without the informer showing it.
RESERVATION_SECONDS = 30.0


class TenantObjectValidator:
    def __init__(self, caches: ProviderCaches, informers: dict[str, Any], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``informers``: resource plural -> its informer (indexed by namespace)."""
        self._caches = caches
        self._informers = informers
        self._clock = clock
        self._lock = threading.Lock()
        # (resource, namespace) -> name -> until when it counts without the informer
        self._reserved: dict[tuple[str, str], dict[str, float]] = {}

    def ready(self) -> bool:
        return self._caches.has_synced() and all(i.has_synced() for i in self._informers.values())

    def review(self, request: AdmissionRequest) -> Decision:
        if request.operation != "CREATE" or request.resource not in self._informers:
            return Decision.allow()
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable",
                                 "could not verify the request: the enforcer's caches are not synced yet; retry later")
        namespace = self._caches.namespace(request.namespace) if request.namespace else None
        owner = (((namespace or {}).get("metadata") or {}).get("labels") or {}).get(c.LABEL_TENANT)
        consumer = self._caches.consumer(owner) if owner else None
        name = request.name or str(((request.object or {}).get("metadata") or {}).get("name") or "")
        with self._lock:
            held = self._held(request.resource, request.namespace)
            decision = policy.decide(request, namespace=namespace, consumer=consumer, held=len(held - {name}))
            if decision.allowed and not request.dry_run and name:
                self._reserved.setdefault((request.resource, request.namespace), {})[name] = self._clock() + RESERVATION_SECONDS
        return decision

    def _held(self, resource: str, namespace: str) -> set[str]:
        """The names of ``resource`` in ``namespace``: cached, and reserved (dropping the
        reservations the informer now shows or that ran out)."""
        cached = {str((o.get("metadata") or {}).get("name")) for o in self._informers[resource].by_index(NAMESPACE_INDEX, namespace)}
        key = (resource, namespace)
        reserved = self._reserved.get(key, {})
        now = self._clock()
        for name in [n for n, until in reserved.items() if n in cached or until <= now]:
            del reserved[name]
        if not reserved:
            self._reserved.pop(key, None)
        return cached | set(reserved)
