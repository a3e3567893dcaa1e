"""The custom resource validating webhook, apart from HTTP: the twin namespace and the
Consumer from the enforcer's caches, and the decision (pure,
:mod:`enforcer.admission.custom_resource_policy`)."""

from __future__ import annotations

from enforcer.admission import custom_resource_policy as policy
from enforcer.admission.caches import ProviderCaches
from enforcer.consumers.quota import twin_owner
from kube_offload.admission import AdmissionRequest, Decision


class CustomResourceValidator:
    def __init__(self, caches: ProviderCaches) -> None:
        self._caches = caches

    def ready(self) -> bool:
        return self._caches.has_synced()

    def review(self, request: AdmissionRequest) -> Decision:
        if request.operation not in ("CREATE", "UPDATE"):
            return Decision.allow()
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable",
                                 "could not verify the custom resource: the enforcer's caches are not synced yet; retry later")
        namespace = self._caches.namespace(request.namespace) if request.namespace else None
        owner = twin_owner(namespace)
        consumer = self._caches.consumer(owner) if owner else None
        return policy.decide(request, namespace=namespace, consumer=consumer)
