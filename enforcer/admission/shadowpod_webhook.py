"""The ShadowPod validating webhook, apart from HTTP: gather what the decision needs from
the caches, decide (:mod:`enforcer.admission.validation`, pure), reserve the admitted requests in
the ledger (:mod:`enforcer.admission.ledger`), then let the API server judge the Pod itself with a
dry run (:mod:`enforcer.admission.dry_run`).

The quota decision and the reservation happen under the ledger's lock, so two concurrent
admissions of one consumer see each other; the dry run (a network round trip) happens
after it, and a refusal there gives the reservation back.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Protocol

from enforcer.admission import dry_run, validation
from enforcer.admission.caches import ProviderCaches
from enforcer.admission.ledger import Ledger
from enforcer.admission.verdict_cache import VerdictCache
from enforcer.consumers.quota import ConsumerUsage, twin_owner
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.resources import ResourceList, add

log = logging.getLogger("kube_offload.enforcer.webhook")

DryRun = Callable[[str, Mapping, str, bool], Decision]
"""(namespace, ShadowPod, operation, probe) -> the API server's verdict on the Pod it stands
for; ``probe``: the ShadowPod write is itself a dry run (``kubectl --dry-run=server``), a
question about now, never answered from the verdict cache."""


class ShadowPodCache(Protocol):
    def get(self, key: str) -> dict | None: ...

    def list(self) -> list[dict]: ...

    def has_synced(self) -> bool: ...


class ShadowPodValidator:
    def __init__(
        self,
        *,
        shadowpods: ShadowPodCache,
        caches: ProviderCaches,
        dry_run: DryRun,
        ledger: Ledger | None = None,
        pods: object | None = None,
        verdicts: VerdictCache | None = None,
        cluster_id: str = "",
    ) -> None:
        self._shadowpods = shadowpods
        self.cluster_id = cluster_id  # ours, for the offload chain's loop check
        self.verdicts = verdicts  # read for the metrics; ``dry_run`` uses it
        self._caches = caches
        self._dry_run = dry_run
        self.ledger = ledger or Ledger(shadowpods.get)
        add_handler = getattr(shadowpods, "add_handler", None)
        if add_handler is not None:  # an Informer: settle reservations on its events
            add_handler(self.ledger.on_event)
        # Informers: usage from running sums kept with the caches (quota.py); any other
        # cache (a plain list in a unit test) is walked whole, the same sum. ``pods``: the
        # enforcer's managed pods, which count until they are gone (quota.py).
        self._usage_of = ConsumerUsage(shadowpods, caches.namespaces, pods)

    @classmethod
    def for_cluster(
        cls,
        api_client,
        *,
        shadowpods: ShadowPodCache,
        caches: ProviderCaches,
        pods: object | None = None,
        verdicts: VerdictCache | None = None,
        cluster_id: str = "",
    ) -> "ShadowPodValidator":
        """``verdicts``: keep the dry run's verdict per pod template (None: a dry run for
        every ShadowPod); ``caches`` must then have been built with ``admission_inputs``."""
        judged = None
        if verdicts is not None:
            judged = dry_run.Verdicts(
                cache=verdicts,
                namespace=caches.namespace,
                limit_ranges=lambda ns: caches.in_namespace(caches.limit_ranges, ns),
                resource_quotas=lambda ns: caches.in_namespace(caches.resource_quotas, ns),
            )
        return cls(
            shadowpods=shadowpods,
            caches=caches,
            pods=pods,
            verdicts=verdicts,
            cluster_id=cluster_id,
            dry_run=lambda namespace, shadowpod, operation, probe: dry_run.check(
                api_client, namespace, shadowpod, operation=operation, verdicts=judged, fresh=probe
            ),
        )

    def ready(self) -> bool:
        """Every cache the decision reads has synced once (usage from a half-listed cache
        would admit over quota)."""
        return self._shadowpods.has_synced() and self._caches.has_synced()

    def review(self, request: AdmissionRequest) -> Decision:
        kind = request.kind
        if kind.group != c.SHADOWPOD_GROUP or kind.kind != c.SHADOWPOD_KIND:
            # Not ours to judge: refusing would block that kind cluster-wide under
            # failurePolicy Fail because of a wiring mistake in the registration.
            return Decision.allow(warnings=[f"the ShadowPod webhook does not validate {kind}; check its registration"])
        if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
            return Decision.allow()
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable", "could not verify the ShadowPod: the enforcer's caches are not synced yet; retry later")

        namespace_name = request.namespace
        namespace = self._caches.namespace(namespace_name) if namespace_name else None
        owner = twin_owner(namespace)
        consumer = self._caches.consumer(owner) if owner else None
        metadata_only = request.operation == "UPDATE" and request.old_object is not None and validation.spec_unchanged(request)

        with self.ledger.lock:
            # A consumer is found only under an owner's name.
            usage = self._usage(owner) if owner and consumer is not None and not metadata_only else {}
            decision = validation.decide(
                request,
                namespace=namespace,
                consumer=consumer,
                usage=usage,
                service_account=lambda name: self._caches.service_account(namespace_name, name),
                cluster_id=self.cluster_id,
            )
            if not decision.allowed or metadata_only:
                return decision
            token = None
            if not request.dry_run:  # a dry-run admission creates nothing to count
                meta = (request.object or {}).get("metadata") or {}
                token = self.ledger.reserve(
                    key=f"{namespace_name}/{meta.get('name') or request.name}",
                    consumer_id=owner or "",
                    uid=str(meta.get("uid") or ""),
                    generation=_int(meta.get("generation"), default=1),
                    requests=validation.requests_delta(request),
                )

        verdict = self._dry_run(namespace_name, request.object or {}, request.operation, request.dry_run)
        if not verdict.allowed:
            self.ledger.release(token)
        return verdict

    def _usage(self, consumer_id: str) -> ResourceList:
        # The ledger first, then the informer: see Ledger.pending.
        pending = self.ledger.pending(consumer_id)
        return add(self._usage_of.used(consumer_id), pending)


def _int(value: object, *, default: int) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
