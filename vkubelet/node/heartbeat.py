"""The consumer's heartbeat on the provider: a Lease in our tenant namespace, renewed.

The provider holds no credentials in this cluster and cannot ask whether we are still
there. Its enforcer reads this Lease instead: once it has not been renewed for its
``--consumer-unreachable-grace``, the endpoints we reflected there (our local pods,
vkubelet/reflection/endpointslices.py) are held not ready, so the provider's clients stop
sending traffic to pods they can no longer reach; a renewal gives them back
(enforcer/consumers/continuity.py, docs/reflection.md "Service continuity").

One Lease per consumer (:data:`kube_offload.constants.CONSUMER_HEARTBEAT_LEASE`), not per
virtual node: reachability is the consumer's, and every virtual kubelet of the peering may
renew it (``holderIdentity`` says which did last). Renewed by the leader only, as the
node's own Lease is: a standby that is cut off must not pass for a live consumer, and
one that renews while the leader is silent says no more than the truth (the consumer
answers). A provider whose chart predates the heartbeat refuses the write (403): said
once, and tried again every minute.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable

from prometheus_client import Counter

from kube_offload import constants as c
from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE
from kube_offload.runtime.kinds import LEASES
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube
from kube_offload.times import format_micro_time

log = logging.getLogger("kube_offload.vkubelet.heartbeat")

# After a refusal (RBAC missing: an older provider chart), the next try.
FORBIDDEN_RETRY_SECONDS = 60.0

RENEWALS = Counter(
    "vkubelet_provider_heartbeats",
    "Renewals of this consumer's heartbeat Lease on the provider, by result: ok, forbidden (the provider's chart "
    "grants no Lease: its enforcer cannot tell when this consumer is unreachable), error (the provider did not answer).",
    ["result"],
    namespace=NAMESPACE,
    registry=rm.REGISTRY,
)


def heartbeat_lease(tenant_namespace: str, holder: str, duration_seconds: int) -> dict[str, Any]:
    """The Lease as first created (renewTime comes with the first renewal)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": c.CONSUMER_HEARTBEAT_LEASE,
            "namespace": tenant_namespace,
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds},
    }


def heartbeat_renewal(holder: str, duration_seconds: int, now: datetime) -> dict[str, Any]:
    """The merge patch of one renewal."""
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds, "renewTime": format_micro_time(now)}}


class ProviderHeartbeat:
    def __init__(
        self,
        remote: Kube,
        *,
        tenant_namespace: str,
        holder: str,
        period_seconds: float,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._remote = remote
        self._namespace = tenant_namespace
        self._holder = holder
        self._period = period_seconds
        # What the Lease says it is valid for: four periods, as a kubelet's 40 s lease is
        # renewed every 10 s. The provider's grace is its own; this is only informative.
        self._duration = max(1, int(round(period_seconds * 4)))
        self._clock = clock
        self._forbidden_said = False
        self.renewals = 0

    def renew(self) -> None:
        """One renewal (the Lease created first when missing). Raises ApiError."""
        patch = heartbeat_renewal(self._holder, self._duration, self._clock())
        try:
            self._remote.patch(LEASES, c.CONSUMER_HEARTBEAT_LEASE, patch, namespace=self._namespace, retry=NO_RETRY)
        except ApiError as exc:
            if not exc.not_found:
                raise
            try:
                self._remote.create(LEASES, heartbeat_lease(self._namespace, self._holder, self._duration),
                                    namespace=self._namespace, retry=NO_RETRY)
            except ApiError as created:
                if not created.already_exists:
                    raise
            self._remote.patch(LEASES, c.CONSUMER_HEARTBEAT_LEASE, patch, namespace=self._namespace, retry=NO_RETRY)
        self.renewals += 1

    def run(self, stop: threading.Event) -> None:
        """Renew every period until ``stop`` (the manager's ``run`` of a loop)."""
        while not stop.is_set():
            delay = self._period
            try:
                self.renew()
                RENEWALS.labels("ok").inc()
                self._forbidden_said = False
            except ApiError as exc:
                RENEWALS.labels("forbidden" if exc.code == 403 else "error").inc()
                if exc.code == 403:
                    if not self._forbidden_said:
                        log.warning(
                            "heartbeat Lease %s/%s: the provider refuses it (%s); its enforcer cannot tell when this "
                            "consumer is unreachable. Upgrade the provider's chart (its tenant Role grants leases)",
                            self._namespace, c.CONSUMER_HEARTBEAT_LEASE, exc.message)
                        self._forbidden_said = True
                    delay = FORBIDDEN_RETRY_SECONDS
                else:
                    # An outage: the provider sees the silence, which is the point.
                    log.debug("heartbeat Lease %s/%s: renewal failed (%s)", self._namespace, c.CONSUMER_HEARTBEAT_LEASE, exc)
                    delay = min(2.0, self._period)
            except Exception:
                RENEWALS.labels("error").inc()
                log.exception("heartbeat Lease %s/%s: renewal failed", self._namespace, c.CONSUMER_HEARTBEAT_LEASE)
                delay = min(2.0, self._period)
            stop.wait(delay)
