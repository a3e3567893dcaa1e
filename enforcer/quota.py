"""What a consumer uses of this provider: the sum of requests over its live ShadowPods.

One definition for the two readers that must agree: the Consumer status loop (which
publishes ``status.used``) and the ShadowPod validating webhook (which refuses a pod that
would take the consumer over its quota). Pure: no I/O.

A ShadowPod counts for consumer ``<id>`` when its *namespace* is a twin of ``<id>``
(labelled origin-cluster-id=<id> and managed-by=enforcer, labels only the enforcer
writes); the ShadowPod's own origin label is the consumer's to set, so it is never
trusted for accounting.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping

from kube_offload.constants import LABEL_MANAGED_BY, LABEL_ORIGIN_CLUSTER_ID, MANAGED_BY_ENFORCER
from kube_offload.resources import MILLI, TERMINATED_PHASES, QuantityError, ResourceList, pod_requests

log = logging.getLogger("kube_offload.enforcer.quota")

NamespaceLookup = Callable[[str], "Mapping | None"]
"""Namespace name -> Namespace object (or None): e.g. a namespace informer's ``get``."""


def twin_owner(namespace: Mapping | None) -> str | None:
    """The consumer id a namespace is a twin of, or None when the enforcer did not make
    it a twin (no managed-by=enforcer label, or no origin label)."""
    if not namespace:
        return None
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_ENFORCER:
        return None
    owner = labels.get(LABEL_ORIGIN_CLUSTER_ID)
    return owner or None


def twin_namespaces_of(namespaces: Iterable[Mapping], consumer_id: str) -> list[str]:
    """Names of the namespaces the enforcer made for ``consumer_id``, sorted."""
    return sorted(
        str((ns.get("metadata") or {}).get("name")) for ns in namespaces if twin_owner(ns) == consumer_id
    )


def live_shadowpod(shadowpod: Mapping) -> bool:
    """A ShadowPod that holds (or will hold) resources: not being deleted and not in a
    final phase. A Succeeded/Failed pod frees its node's resources, so it frees quota too."""
    metadata = shadowpod.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return False
    status = shadowpod.get("status") or {}
    return status.get("phase") not in TERMINATED_PHASES


# uid -> (resourceVersion, requests) of the ShadowPods seen. Every admission of a ShadowPod
# sums the requests of all the consumer's ShadowPods (consumer_usage): parsing each one's
# quantities again made an admission O(n) in parsing work, and a burst of n O(n^2) — the
# largest share of the enforcer's CPU with 3,000+ ShadowPods (docs/performance.md, "Scale").
# A (uid, resourceVersion) pair names one immutable version of an object, so the cached
# answer is exact; a new version replaces its entry. Entries of deleted ShadowPods stay
# until the cache reaches _REQUESTS_CACHE_MAX entries and is emptied (a few tens of MiB at most).
_REQUESTS_CACHE: dict[str, tuple[str, ResourceList]] = {}
_REQUESTS_CACHE_MAX = 100_000


def shadowpod_requests(shadowpod: Mapping) -> ResourceList:
    """The effective requests of the Pod a ShadowPod stands for (``pods`` included).

    A ShadowPod whose quantities do not parse counts as one pod and nothing else: the
    apiserver would refuse the Pod it stands for, so it cannot hold cpu or memory, but
    it still takes a slot so a flood of broken objects cannot escape the pods quota.
    Returns a new dict each call (callers may modify it).
    """
    metadata = shadowpod.get("metadata") or {}
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not uid or not version:  # not a stored object: nothing names this version
        return _compute_requests(shadowpod)
    cached = _REQUESTS_CACHE.get(uid)
    if cached is not None and cached[0] == version:
        return dict(cached[1])
    requests = _compute_requests(shadowpod)
    if len(_REQUESTS_CACHE) >= _REQUESTS_CACHE_MAX:
        _REQUESTS_CACHE.clear()
    _REQUESTS_CACHE[uid] = (version, requests)
    return dict(requests)


def _compute_requests(shadowpod: Mapping) -> ResourceList:
    pod = (shadowpod.get("spec") or {}).get("pod") or {}
    try:
        return pod_requests(pod)
    except QuantityError as exc:
        metadata = shadowpod.get("metadata") or {}
        log.debug("ShadowPod %s/%s: %s; counted as one pod", metadata.get("namespace"), metadata.get("name"), exc)
        return {"pods": MILLI}


# The ShadowPod informer's tally of live requests per namespace and the namespace
# informer's index of twin namespaces by consumer: with both, a consumer's usage costs
# O(its twin namespaces) instead of a walk over every cached ShadowPod on each admission
# (at 3,333 ShadowPods per provider that walk was the enforcer's largest O(n) per pod:
# docs/performance.md, "Scale").
LIVE_REQUESTS_BY_NAMESPACE = "live-requests-by-namespace"
TWIN_NAMESPACES_BY_CONSUMER = "twin-namespaces-by-consumer"


def live_requests(shadowpod: Mapping) -> tuple[str | None, ResourceList]:
    """Tally function: (namespace, requests) of a live ShadowPod; (None, {}) for one
    that holds nothing (deleting, or in a final phase)."""
    if not live_shadowpod(shadowpod):
        return None, {}
    namespace = (shadowpod.get("metadata") or {}).get("namespace") or None
    return namespace, shadowpod_requests(shadowpod)


def twin_owner_index(namespace: Mapping) -> str | None:
    """Index function for the namespace informer: the consumer a namespace is a twin of."""
    return twin_owner(namespace)


def usage_of_namespaces(namespace_sums: Callable[[str], Mapping[str, int]], namespaces: Iterable[str]) -> ResourceList:
    """Sum of per-namespace sums (a :data:`LIVE_REQUESTS_BY_NAMESPACE` tally read through
    ``namespace_sums``) over ``namespaces``; ``pods`` is always present. Equal to
    :func:`consumer_usage` when ``namespaces`` are the consumer's twin namespaces."""
    used: ResourceList = {"pods": 0}
    for namespace in namespaces:
        for name, amount in namespace_sums(namespace).items():
            used[name] = used.get(name, 0) + amount
    return used


def consumer_usage(shadowpods: Iterable[Mapping], consumer_id: str, *, namespace_of: NamespaceLookup) -> ResourceList:
    """Sum of :func:`shadowpod_requests` over the live ShadowPods in twin namespaces of
    ``consumer_id``, in milli-units; ``pods`` is always present (``pods`` = 1000 × count).

    ``namespace_of`` resolves a namespace name to its object (a cache lookup), so that
    ownership is decided by the namespace's enforcer-written labels.
    """
    used: ResourceList = {"pods": 0}
    owners: dict[str, str | None] = {}
    for shadowpod in shadowpods:
        namespace = (shadowpod.get("metadata") or {}).get("namespace") or ""
        if namespace not in owners:
            owners[namespace] = twin_owner(namespace_of(namespace))
        if owners[namespace] != consumer_id or not live_shadowpod(shadowpod):
            continue
        for name, amount in shadowpod_requests(shadowpod).items():
            used[name] = used.get(name, 0) + amount
    return used


class ConsumerUsage:
    """A consumer's usage and twin namespaces, read from the caches: from the tally and
    the index above when the caches are informers (registered here; registering again is
    a no-op, so the webhook and the status loop share them), else by walking every cached
    object (a plain list in a unit test), which gives the same answer."""

    def __init__(self, shadowpods: object, namespaces: object) -> None:
        self._shadowpods = shadowpods
        self._namespaces = namespaces
        self.tallied = hasattr(shadowpods, "add_tally") and hasattr(namespaces, "add_indexer")
        if self.tallied:
            shadowpods.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)  # type: ignore[attr-defined]
            namespaces.add_indexer(TWIN_NAMESPACES_BY_CONSUMER, twin_owner_index)  # type: ignore[attr-defined]

    def twin_namespaces(self, consumer_id: str) -> list[str]:
        """Names of the consumer's twin namespaces, sorted."""
        if self.tallied:
            return sorted(self._namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, consumer_id))  # type: ignore[attr-defined]
        return twin_namespaces_of(self._namespaces.list(), consumer_id)  # type: ignore[attr-defined]

    def used(self, consumer_id: str) -> ResourceList:
        """What the consumer's live ShadowPods request, in milli-units (``pods`` always)."""
        if self.tallied:
            # Per admission: the index's keys as they are (a sum needs no order).
            twins = self._namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, consumer_id)  # type: ignore[attr-defined]
            tally = self._shadowpods.tally  # type: ignore[attr-defined]
            return usage_of_namespaces(lambda namespace: tally(LIVE_REQUESTS_BY_NAMESPACE, namespace), twins)
        return consumer_usage(self._shadowpods.list(), consumer_id, namespace_of=self._namespaces.get)  # type: ignore[attr-defined]
