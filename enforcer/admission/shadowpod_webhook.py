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
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, SupportsIndex, SupportsInt

from enforcer.admission import dry_run, slice_rules, validation
from enforcer.admission.caches import ProviderCaches
from enforcer.admission.ledger import Ledger
from enforcer.admission.verdict_cache import VerdictCache
from enforcer.consumers.consumer_status_loop import SHADOWPODS_BY_NAMESPACE, namespace_of
from enforcer.consumers.quota import ConsumerUsage, live_shadowpod, shadowpod_requests, twin_owner
from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.consumers import ConsumerError, consumer_terms, service_account_of
from kube_offload.policy_rules import Context, Kind
from kube_offload.rule_book import check
from kube_offload.pools import Pool, PoolError, parse_pools
from kube_offload.resources import ResourceList, add, subtract

if TYPE_CHECKING:
    from kubernetes import client

# The ShadowPod informer's index of a resource slice's ShadowPods (by the slice label's value).
SLICE_INDEX = "slice"


def _slice_index(shadowpod: dict[str, Any]) -> list[str]:
    name = slice_rules.slice_of(shadowpod)
    return [name] if name else []

log = logging.getLogger("kube_offload.enforcer.webhook")

DryRun = Callable[..., Decision]
"""(namespace, ShadowPod, operation, probe[, pool=...]) -> the API server's verdict on the Pod
it stands for; ``probe``: the ShadowPod write is itself a dry run (``kubectl
--dry-run=server``), a question about now, never answered from the verdict cache;
``pool``, given for a resource slice's ShadowPod only: the pool whose patch the Pod gets."""


class ShadowPodCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def list(self) -> list[dict[str, Any]]: ...

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
        add_indexer = getattr(shadowpods, "add_indexer", None)
        if add_indexer is not None:  # an Informer: a slice's (a twin's) ShadowPods without walking them all
            add_indexer(SLICE_INDEX, _slice_index)
            add_indexer(SHADOWPODS_BY_NAMESPACE, namespace_of)

    @classmethod
    def for_cluster(
        cls,
        api_client: client.ApiClient,
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
            dry_run=lambda namespace, shadowpod, operation, probe, pool=None: dry_run.check(
                api_client, namespace, shadowpod, operation=operation, verdicts=judged, fresh=probe, pool=pool
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

        # Before the metadata-only shortcut: the slice label is metadata, and immutable.
        relabelled = slice_rules.label_change(request) or slice_rules.template_label(request)
        if relabelled is not None:
            return relabelled
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
            too_many = self._count_decision(request, owner, consumer)
            if too_many is not None:
                return too_many
            slice_name = slice_rules.slice_of(request.object) if live_shadowpod(request.object or {}) else None
            pool = None
            if slice_name is not None and owner and consumer is not None:
                recorded = _slice_pool_of(request.old_object) if request.operation == "UPDATE" else ""
                refused, pool = self._slice_decision(request, owner, consumer, slice_name, recorded_pool=recorded)
                if refused is not None:
                    return refused
            token = None
            if not request.dry_run:  # a dry-run admission creates nothing to count
                meta = (request.object or {}).get("metadata") or {}
                token = self.ledger.reserve(
                    key=f"{namespace_name}/{meta.get('name') or request.name}",
                    consumer_id=owner or "",
                    uid=str(meta.get("uid") or ""),
                    generation=_int(meta.get("generation"), default=1),
                    requests=validation.requests_delta(request),
                    slice_name=slice_name or "",
                )

        extra = {"pool": pool} if pool is not None else {}  # the Pod judged carries the pool's patch
        verdict = self._dry_run(namespace_name, request.object or {}, request.operation, request.dry_run, **extra)
        if not verdict.allowed:
            self.ledger.release(token)
        return verdict

    def judge_pod(self, shadowpod: Mapping[str, Any]) -> Decision:
        """Whether the enforcer may create a pod for ``shadowpod`` now, its first or any
        later one: :func:`enforcer.admission.validation.judge_pod_create` and the slice rules
        (enforcer/admission/slice_rules.py), from the same caches, usage and ledger as an
        admission, with this ShadowPod's own charges judged against the rest of the
        consumer's (and of its slice's) use. 503 while the caches are not synced."""
        if not self.ready():
            return Decision.deny(503, "ServiceUnavailable", "the enforcer's caches are not synced yet")
        meta = shadowpod.get("metadata") or {}
        namespace_name = str(meta.get("namespace") or "")
        namespace = self._caches.namespace(namespace_name) if namespace_name else None
        owner = twin_owner(namespace)
        consumer = self._caches.consumer(owner) if owner else None
        counted = live_shadowpod(shadowpod)
        own = shadowpod_requests(shadowpod) if counted else {}
        with self.ledger.lock:
            usage = subtract(self._usage(owner), own) if owner and consumer is not None else {}
            decision = validation.judge_pod_create(
                shadowpod,
                namespace=namespace,
                consumer=consumer,
                usage=usage,
                service_account=lambda name: self._caches.service_account(namespace_name, name),
                cluster_id=self.cluster_id,
            )
            slice_name = slice_rules.slice_of(shadowpod)
            if not decision.allowed or slice_name is None or not owner or consumer is None:
                return decision
            request = validation.pod_create_request(shadowpod)
            refused, _pool = self._slice_decision(request, owner, consumer, slice_name, own=own,
                                                  recorded_pool=_slice_pool_of(shadowpod))
            return refused if refused is not None else decision

    def _count_decision(self, request: AdmissionRequest, owner: str | None, consumer: Mapping[str, Any] | None) -> Decision | None:
        """A CREATE past the ShadowPods a consumer may keep in one twin (``twinNamespaces.maxObjects``
        of ShadowPods, the rule book's count row; finished ones count: each is etcd storage):
        the refusal, else None. Counted here, with the ledger's lock held, not by a
        ResourceQuota: one on a custom kind refuses every create until the quota controller's
        next full resync. The ledger's unsettled admissions count (concurrent creates)."""
        if request.operation != "CREATE" or not owner or consumer is None:
            return None
        try:
            terms = consumer_terms(consumer)
        except ConsumerError:
            return None  # validation.decide refused it already
        name = str(((request.object or {}).get("metadata") or {}).get("name") or request.name)
        pending = self.ledger.pending_names(request.namespace)
        # By the index's own key set (namespace/name), copied in C: reading every cached
        # ShadowPod of the twin to collect its name was most of an admission's time at
        # 10,000 held (docs/performance.md, "The webhooks in a process of
        # their own": the profile and the cut).
        key_set = getattr(self._shadowpods, "index_key_set", None)
        if key_set is not None:
            prefix = f"{request.namespace}/"
            held_keys = key_set(SHADOWPODS_BY_NAMESPACE, request.namespace) | {prefix + p for p in pending}
            held_count = len(held_keys) - (prefix + name in held_keys)
        else:
            cached = [sp for sp in self._shadowpods.list() if namespace_of(sp) == [request.namespace]]
            held_count = len(({str((sp.get("metadata") or {}).get("name") or "") for sp in cached} | pending) - {name})
        ctx = Context(policy=terms.policy, consumer_id=owner, namespace=request.namespace)
        subject = {"counted": "twinNamespaces.maxObjects", "kind": pp.SHADOWPOD_COUNT_KIND, "held": held_count}
        violations = check(Kind.TENANT_COUNT, subject, ctx)
        if not violations:
            return None
        return Decision.deny(403, "Forbidden", "; ".join(f"{v.problem}; {v.fix}" for v in violations))

    def _slice_decision(
        self, request: AdmissionRequest, owner: str, consumer: Mapping[str, Any], slice_name: str, *, own: ResourceList | None = None,
        recorded_pool: str = "",
    ) -> tuple[Decision | None, Pool | None]:
        """The slice rules (enforcer/admission/slice_rules.py) for a ShadowPod of
        ``slice_name``, with the ledger's lock held: the refusal (None: admitted) and the
        pool its pod gets (``recorded_pool``, its status.slicePool, once its first pod was
        made; else the slice's). ``own``: what the slice's use counts of this very ShadowPod
        already (judging its pod: left out, as its charges are the request judged)."""
        tenant, _ = service_account_of(consumer)
        offload_slice = self._caches.offload_slice(tenant, slice_name)
        pool = None
        if offload_slice is not None:
            try:
                named = recorded_pool or str((offload_slice.get("spec") or {}).get("pool") or "")
                pool = parse_pools(consumer.get("spec") or {}).get(named)
            except PoolError as exc:
                return Decision.deny(403, "Forbidden", f'Consumer "{owner}" is misconfigured ({exc}); the provider must fix it'), None
        return slice_rules.decide(
            request,
            slice_name=slice_name,
            tenant=tenant,
            offload_slice=offload_slice,
            pool=pool,
            # The ledger first, then the informer: see Ledger.pending. On an UPDATE the old
            # object is in ``used`` and ``delta`` is new minus old, as for the quota.
            used=subtract(add(self.ledger.pending(owner, slice_name), self._slice_used(owner, slice_name)), own or {}),
            delta=validation.requests_delta(request),
            recorded_pool=recorded_pool,
        ), pool

    def _slice_used(self, owner: str, slice_name: str) -> ResourceList:
        """The requests of the live ShadowPods of ``owner``'s slice ``slice_name``."""
        by_index = getattr(self._shadowpods, "by_index", None)
        if by_index is not None:
            candidates = by_index(SLICE_INDEX, slice_name)
        else:
            candidates = [sp for sp in self._shadowpods.list() if slice_rules.slice_of(sp) == slice_name]
        mine = []
        for shadowpod in candidates:
            meta = shadowpod.get("metadata") or {}
            if not live_shadowpod(shadowpod):
                continue
            if twin_owner(self._caches.namespaces.get(str(meta.get("namespace") or ""))) != owner:
                continue
            mine.append(shadowpod)
        return slice_rules.slice_usage(mine, shadowpod_requests)

    def _usage(self, consumer_id: str) -> ResourceList:
        # The ledger first, then the informer: see Ledger.pending.
        pending = self.ledger.pending(consumer_id)
        return add(self._usage_of.used(consumer_id), pending)


def _slice_pool_of(shadowpod: Mapping[str, Any] | None) -> str:
    """The pool a ShadowPod's first pod was made on (status.slicePool), "" before it was."""
    return str(((shadowpod or {}).get("status") or {}).get("slicePool") or "")


def _int(value: object, *, default: int) -> int:
    if not isinstance(value, (str, bytes, bytearray, SupportsInt, SupportsIndex)):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
