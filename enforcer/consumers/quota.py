"""What a consumer uses of this provider: what its pods hold, counted until they are gone.

One definition for the two readers that must agree: the Consumer status loop (which
publishes ``status.used``) and the ShadowPod validating webhook (which refuses a pod that
would take the consumer over its quota). Pure apart from :class:`DetachedPods`, which
keeps a running sum from informer events.

What counts (docs/security.md "Quota"):

* every live ShadowPod (not being deleted, not Succeeded/Failed): the *charges* of the
  pod it stands for (:func:`pod_charges`: requests under the plain resource names, the
  same as Kubernetes' ``requests.<name>``, limits under ``limits.<name>``, overhead in
  both, ``pods`` = 1000 per pod);
* every pod the enforcer made that is not finished and that no live ShadowPod counts for
  (its ShadowPod is being deleted, or gone: deleted with ``--cascade=orphan``, or before
  the garbage collector came by), with that pod's own charges: a ShadowPod counts until
  its pod is gone, not until its deletionTimestamp;
* of a pod its live ShadowPod counts for, whatever the pod holds beyond the ShadowPod
  (overhead a RuntimeClass added, requests a LimitRange defaulted, the old figures of a
  resize down that its kubelet has not applied yet): quota counts what runs.

``spec.quota`` keys (:func:`quota_limits`): ``requests.<name>`` and ``limits.<name>`` as
in a ResourceQuota; a plain ``<name>`` (``cpu``) is what ``spec.policy.quotaMode`` says:
the requests (the default, as ResourceQuota reads it), the limits, or both (``both``, or
``hard``, which also makes limits equal requests); ``pods`` (or
``count/pods``) the number of pods.

A ShadowPod counts for consumer ``<id>`` when its *namespace* is a twin of ``<id>``
(labelled origin-cluster-id=<id> and managed-by=enforcer, labels only the enforcer
writes); the ShadowPod's own origin label is the consumer's to set, so it is never
trusted for accounting.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from kube_offload.constants import LABEL_MANAGED_BY, LABEL_ORIGIN_CLUSTER_ID, MANAGED_BY_ENFORCER
from kube_offload.resources import (
    MILLI,
    TERMINATED_PHASES,
    QuantityError,
    ResourceList,
    pod_is_terminated,
)
from kube_offload.consumer_quota import (
    PODS,
    pod_charges,
)
from kube_offload.pod_resize import held_pod
from kube_offload.runtime.informer import DELETED
from kube_offload.shadowpod import controller_ref
from kube_offload.views import pod_template

log = logging.getLogger("kube_offload.enforcer.quota")

NamespaceLookup = Callable[[str], "Mapping[str, Any] | None"]
"""Namespace name -> Namespace object (or None): e.g. a namespace informer's ``get``."""


def twin_owner(namespace: Mapping[str, Any] | None) -> str | None:
    """The consumer id a namespace is a twin of, or None when the enforcer did not make
    it a twin (no managed-by=enforcer label, or no origin label)."""
    if not namespace:
        return None
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_ENFORCER:
        return None
    owner = labels.get(LABEL_ORIGIN_CLUSTER_ID)
    return owner or None


def twin_namespaces_of(namespaces: Iterable[Mapping[str, Any]], consumer_id: str) -> list[str]:
    """Names of the namespaces the enforcer made for ``consumer_id``, sorted."""
    return sorted(
        str((ns.get("metadata") or {}).get("name")) for ns in namespaces if twin_owner(ns) == consumer_id
    )


def live_shadowpod(shadowpod: Mapping[str, Any]) -> bool:
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


def shadowpod_requests(shadowpod: Mapping[str, Any]) -> ResourceList:
    """The charges (:func:`pod_charges`: requests, ``limits.*``, ``pods``) of the Pod a
    ShadowPod stands for.

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


def _compute_requests(shadowpod: Mapping[str, Any]) -> ResourceList:
    pod = pod_template(shadowpod) or {}
    try:
        return pod_charges(pod)
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


def live_requests(shadowpod: Mapping[str, Any]) -> tuple[str | None, ResourceList]:
    """Tally function: (namespace, requests) of a live ShadowPod; (None, {}) for one
    that holds nothing (deleting, or in a final phase)."""
    if not live_shadowpod(shadowpod):
        return None, {}
    namespace = (shadowpod.get("metadata") or {}).get("namespace") or None
    return namespace, shadowpod_requests(shadowpod)


def twin_owner_index(namespace: Mapping[str, Any]) -> str | None:
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


# Pods' charges, cached like ShadowPods' (same reasons, same bound).
_POD_CHARGES_CACHE: dict[str, tuple[str, ResourceList]] = {}


def running_pod_charges(pod: Mapping[str, Any]) -> ResourceList:
    """:func:`pod_charges` of a Pod the enforcer made, of what it holds
    (:func:`kube_offload.pod_resize.held_pod`: during a resize, the larger of what it asks
    and what its status reports); {} once it is Succeeded/Failed
    (it holds nothing any more). A pod whose quantities do not parse (the apiserver
    validated it, so: our limitation) counts as one pod."""
    if pod_is_terminated(pod):
        return {}
    metadata = pod.get("metadata") or {}
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    cached = _POD_CHARGES_CACHE.get(uid) if uid else None
    if cached is not None and cached[0] == version:
        return dict(cached[1])
    try:
        # A resize that lowers a container frees nothing until the kubelet applied it.
        charges = pod_charges(held_pod(pod))
    except QuantityError:
        charges = {PODS: MILLI}
    if uid and version:
        if len(_POD_CHARGES_CACHE) >= _REQUESTS_CACHE_MAX:
            _POD_CHARGES_CACHE.clear()
        _POD_CHARGES_CACHE[uid] = (version, charges)
    return dict(charges)


def uncounted_charges(pod: Mapping[str, Any], shadowpod: Mapping[str, Any] | None) -> ResourceList:
    """What a pod the enforcer made holds that its ShadowPod does not count (positive
    amounts only): all of it when no live ShadowPod of that name and UID controls it
    (being deleted, gone, orphaned, or replaced by a new one of the same name), else
    whatever the pod holds beyond its ShadowPod's charges. ``shadowpod`` is the
    ShadowPod of the pod's namespace and name (None: none)."""
    held = running_pod_charges(pod)
    if not held:
        return {}
    ref = controller_ref(pod) or {}
    owner_meta = (shadowpod or {}).get("metadata") or {}
    if shadowpod is None or not live_shadowpod(shadowpod) or not ref.get("uid") or ref.get("uid") != owner_meta.get("uid"):
        return held
    counted = shadowpod_requests(shadowpod)
    beyond = {name: amount - counted.get(name, 0) for name, amount in held.items()}
    return {name: amount for name, amount in beyond.items() if amount > 0}


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def consumer_usage(
    shadowpods: Iterable[Mapping[str, Any]],
    consumer_id: str,
    *,
    namespace_of: NamespaceLookup,
    pods: Iterable[Mapping[str, Any]] = (),
) -> ResourceList:
    """What ``consumer_id`` uses, in milli-units (``pods`` always present: 1000 × count):
    the charges of its live ShadowPods plus :func:`uncounted_charges` of the pods the
    enforcer made (``pods``) in its twin namespaces.

    ``namespace_of`` resolves a namespace name to its object (a cache lookup), so that
    ownership is decided by the namespace's enforcer-written labels.
    """
    used: ResourceList = {"pods": 0}
    owners: dict[str, str | None] = {}
    by_key: dict[str, Mapping[str, Any]] = {}

    def mine(obj: Mapping[str, Any]) -> bool:
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        if namespace not in owners:
            owners[namespace] = twin_owner(namespace_of(namespace))
        return owners[namespace] == consumer_id

    for shadowpod in shadowpods:
        by_key[_key(shadowpod)] = shadowpod
        if not mine(shadowpod) or not live_shadowpod(shadowpod):
            continue
        for name, amount in shadowpod_requests(shadowpod).items():
            used[name] = used.get(name, 0) + amount
    for pod in pods:
        if not mine(pod):
            continue
        for name, amount in uncounted_charges(pod, by_key.get(_key(pod))).items():
            used[name] = used.get(name, 0) + amount
    return used


class DetachedPods:
    """Per namespace, the running sum of :func:`uncounted_charges` over the pods the
    enforcer made: the half of a consumer's usage the ShadowPod tally cannot see (a pod
    whose ShadowPod is being deleted or gone still holds its node's resources).

    Kept from the events of both informers (a pod event, or an event of the ShadowPod of
    the same name, recomputes that one name), so a read costs O(namespaces). Informer
    handlers run just after the store changed; between the two, for a moment, a ShadowPod
    that stopped counting is not yet replaced by its pod here."""

    def __init__(self, shadowpods: object, pods: object) -> None:
        self._shadowpods = shadowpods
        self._lock = threading.Lock()
        self._pods: dict[str, Mapping[str, Any]] = {}
        self._counted: dict[str, tuple[str, ResourceList]] = {}  # key -> (namespace, charges)
        self._sums: dict[str, ResourceList] = {}
        pods.add_handler(self.on_pod_event)  # type: ignore[attr-defined]
        shadowpods.add_handler(self.on_shadowpod_event)  # type: ignore[attr-defined]
        for pod in pods.list():  # type: ignore[attr-defined]
            self.on_pod_event("ADDED", None, pod)

    def on_pod_event(self, event: str, _old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        key = _key(new)
        with self._lock:
            if event == DELETED or pod_is_terminated(new):
                self._pods.pop(key, None)
            else:
                self._pods[key] = new
            self._recount(key)

    def on_shadowpod_event(self, _event: str, _old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        key = _key(new)
        with self._lock:
            if key in self._pods or key in self._counted:
                self._recount(key)

    def _recount(self, key: str) -> None:
        previous = self._counted.pop(key, None)
        if previous is not None:
            namespace, charges = previous
            sums = self._sums.get(namespace, {})
            for name, amount in charges.items():
                sums[name] = sums.get(name, 0) - amount
                if not sums[name]:
                    del sums[name]
            if not sums:
                self._sums.pop(namespace, None)
        pod = self._pods.get(key)
        if pod is None:
            return
        charges = uncounted_charges(pod, self._shadowpods.get(key))  # type: ignore[attr-defined]
        if not charges:
            return
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        self._counted[key] = (namespace, charges)
        sums = self._sums.setdefault(namespace, {})
        for name, amount in charges.items():
            sums[name] = sums.get(name, 0) + amount

    def namespace_sums(self, namespace: str) -> ResourceList:
        with self._lock:
            return dict(self._sums.get(namespace, {}))


# One join per (ShadowPod informer, pod informer): the webhook and the status loop share it.
_JOINS: dict[tuple[int, int], DetachedPods] = {}
_JOINS_LOCK = threading.Lock()


def detached_pods(shadowpods: object, pods: object) -> DetachedPods:
    with _JOINS_LOCK:
        key = (id(shadowpods), id(pods))
        join = _JOINS.get(key)
        if join is None:
            join = _JOINS[key] = DetachedPods(shadowpods, pods)
        return join


class ConsumerUsage:
    """A consumer's usage and twin namespaces, read from the caches: from the tally and
    the index above when the caches are informers (registered here; registering again is
    a no-op, so the webhook and the status loop share them), else by walking every cached
    object (a plain list in a unit test), which gives the same answer. ``pods``: the
    enforcer's managed pods (None: ShadowPods alone are counted)."""

    def __init__(self, shadowpods: object, namespaces: object, pods: object | None = None) -> None:
        self._shadowpods = shadowpods
        self._namespaces = namespaces
        self._pods = pods
        self.tallied = hasattr(shadowpods, "add_tally") and hasattr(namespaces, "add_indexer")
        self._detached: DetachedPods | None = None
        if self.tallied:
            shadowpods.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)  # type: ignore[attr-defined]
            namespaces.add_indexer(TWIN_NAMESPACES_BY_CONSUMER, twin_owner_index)  # type: ignore[attr-defined]
            if pods is not None and hasattr(pods, "add_handler"):
                self._detached = detached_pods(shadowpods, pods)

    def twin_namespaces(self, consumer_id: str) -> list[str]:
        """Names of the consumer's twin namespaces, sorted."""
        if self.tallied:
            return sorted(self._namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, consumer_id))  # type: ignore[attr-defined]
        return twin_namespaces_of(self._namespaces.list(), consumer_id)  # type: ignore[attr-defined]

    def used(self, consumer_id: str) -> ResourceList:
        """What the consumer holds, in milli-units (``pods`` always): its live
        ShadowPods, and the pods the enforcer made that they no longer count for."""
        if self.tallied:
            # Per admission: the index's keys as they are (a sum needs no order).
            twins = self._namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, consumer_id)  # type: ignore[attr-defined]
            tally = self._shadowpods.tally  # type: ignore[attr-defined]
            used = usage_of_namespaces(lambda namespace: tally(LIVE_REQUESTS_BY_NAMESPACE, namespace), twins)
            if self._detached is not None:
                for name, amount in usage_of_namespaces(self._detached.namespace_sums, twins).items():
                    used[name] = used.get(name, 0) + amount
            return used
        pods = self._pods.list() if self._pods is not None else ()  # type: ignore[attr-defined]
        return consumer_usage(
            self._shadowpods.list(), consumer_id, namespace_of=self._namespaces.get, pods=pods  # type: ignore[attr-defined]
        )
