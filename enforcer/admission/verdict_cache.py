"""The dry run's verdict for one pod *template*, reused for the next pod of that template.

A Deployment's replicas differ only in their identity (names, UIDs); the provider's
admission judges the Pod, and the Pod it judges is the same for each of them but for
those fields. So the verdict of the dry run (:mod:`enforcer.admission.dry_run`) is kept
under a key made of everything the provider's admission can read, with the per-pod
identity normalised out (:func:`template_key`), and the next ShadowPod of that template
gets it without a request. What the key holds:

* the Pod exactly as the enforcer would create it (:func:`enforcer.admission.dry_run.pod_for`),
  built from the ShadowPod with its identity replaced by placeholders first: its name,
  UID, generateName, the ``origin-name``/``origin-uid`` annotations the vkubelet stamps,
  and the per-pod token Secret (``kube-offload-token-<origin name>``) of a reflected
  identity, and the name of the ``kube-api-access-<random>`` token volume (and its mounts)
  the local API server gave the pod. Only these exact fields: a string elsewhere that happens to contain the name
  is kept as it is, so no two different templates can meet under one key;
* the namespace's name, UID and resourceVersion (its labels decide Pod Security
  admission; any change of the namespace misses);
* the name and resourceVersion of every LimitRange in the namespace (LimitRanger
  defaults and refuses by them).

A namespace with a ResourceQuota that counts pods or their resources is never cached
(:func:`quota_binds_pods`): there the verdict depends on what is used, which every pod
changes. Everything else admission may read (validating/mutating webhooks and admission
policies, PriorityClasses, RuntimeClasses, the ServiceAccount's existence) is outside the
key: a verdict lives at most ``ttl`` seconds, so a change there is seen that much later
by the webhook, and at once by the real create, which runs the full admission anyway
(docs/security.md "The verdict cache"). ``--no-verdict-cache`` turns it off.

Refusals are cached too (4xx: the provider's word about the Pod); "could not verify"
(503, the server or the network) never is.

One dry run per template at a time (:meth:`VerdictCache.lead`): when a template's verdict
is missing or has expired, the first admission of it dry-runs and the others of that
template arriving meanwhile wait for its answer instead of each sending their own (at
40 creates/s a verdict's expiry sent a burst of identical dry runs, each on a new TLS
connection, docs/performance.md). A waiter that finds no verdict after (a 503, or the
leader's time ran out) dry-runs itself.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping

import orjson

from kube_offload import constants as c
from kube_offload.admission import Decision
from kube_offload.consumer_quota import is_object_quota_key
from kube_offload.views import pod_template

# Placeholders for the per-pod identity. Not valid in a DNS name, so no real value equals them.
NAME_PLACEHOLDER = "<name>"
UID_PLACEHOLDER = "<uid>"
# The vkubelet's per-pod token Secret (vkubelet/shared/names.py token_secret_name; the
# enforcer may not import the vkubelet, the names must agree): prefix + origin pod name.
TOKEN_SECRET_PREFIX = "kube-offload-token-"
# The token volume Kubernetes' ServiceAccount admission adds to every pod, with a random suffix.
API_ACCESS_VOLUME_PREFIX = "kube-api-access-"

DEFAULT_MAX_ENTRIES = c.VERDICT_CACHE_ENTRIES
DEFAULT_TTL_SECONDS = c.VERDICT_CACHE_TTL_SECONDS

def quota_binds_pods(quota: Mapping[str, Any]) -> bool:
    """Whether ResourceQuota ``quota`` can refuse a Pod by what is already used."""
    # Object counts and claimed storage (the twin quota's keys) never count a Pod; any
    # other key (pods, count/pods, cpu, requests.*, limits.*, extended resources) may.
    hard = ((quota.get("spec") or {}).get("hard") or {}).keys()
    return any(not is_object_quota_key(str(key)) for key in hard)


def normalised_shadowpod(shadowpod: Mapping[str, Any]) -> dict[str, Any]:
    """``shadowpod`` with its per-pod identity replaced by placeholders (module docstring)."""
    obj = copy.deepcopy(dict(shadowpod))
    meta = obj.setdefault("metadata", {})
    meta["name"] = NAME_PLACEHOLDER
    meta["uid"] = UID_PLACEHOLDER
    meta.pop("generateName", None)
    for volatile in ("resourceVersion", "generation", "creationTimestamp", "managedFields"):
        meta.pop(volatile, None)  # set by the API server, never copied into the Pod
    pod = pod_template(obj)
    if not isinstance(pod, dict):  # the copy's own template, changed in place below
        return obj
    annotations = (pod.get("metadata") or {}).get("annotations")
    origin_name = ""
    if isinstance(annotations, dict):
        origin_name = str(annotations.get(c.ANNOTATION_ORIGIN_NAME) or "")
        if c.ANNOTATION_ORIGIN_NAME in annotations:
            annotations[c.ANNOTATION_ORIGIN_NAME] = NAME_PLACEHOLDER
        if c.ANNOTATION_ORIGIN_UID in annotations:
            annotations[c.ANNOTATION_ORIGIN_UID] = UID_PLACEHOLDER
    _normalise_api_access_volume(pod.get("spec"))
    if origin_name:
        token_secret = TOKEN_SECRET_PREFIX + origin_name
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            for source in ((volume or {}).get("projected") or {}).get("sources") or []:
                secret = (source or {}).get("secret")
                if isinstance(secret, dict) and secret.get("name") == token_secret:
                    secret["name"] = TOKEN_SECRET_PREFIX + NAME_PLACEHOLDER
    return obj


def _normalise_api_access_volume(spec: Any) -> None:
    """The local API server's ServiceAccount admission names each pod's token volume
    ``kube-api-access-<5 random characters>``; the name only ties the volume to its mounts.
    Renamed (volume and mounts) when exactly one volume has that prefix, so two such
    volumes never merge into one."""
    if not isinstance(spec, dict):
        return
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    matching = [v for v in volumes if str(v.get("name") or "").startswith(API_ACCESS_VOLUME_PREFIX)]
    if len(matching) != 1:
        return
    old = matching[0]["name"]
    new = API_ACCESS_VOLUME_PREFIX + NAME_PLACEHOLDER
    matching[0]["name"] = new
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            for mount in (container or {}).get("volumeMounts") or []:
                if isinstance(mount, dict) and mount.get("name") == old:
                    mount["name"] = new


def template_key(
    pod: Mapping[str, Any], namespace: Mapping[str, Any] | None, limit_ranges: Iterable[Mapping[str, Any]],
    slice_name: str = "",
) -> str:
    """The cache key of ``pod`` (the enforcer's Pod built from a :func:`normalised_shadowpod`)
    in ``namespace`` with ``limit_ranges``: a digest of everything the provider's
    admission reads that this process can see. ``slice_name``: the ShadowPod's resource
    slice (its pool's patch is in ``pod`` already; the slice is kept apart too, so a pod of
    one slice is never answered with another's verdict)."""
    ns_meta = (namespace or {}).get("metadata") or {}
    ranges = sorted(
        (str((lr.get("metadata") or {}).get("name") or ""), str((lr.get("metadata") or {}).get("resourceVersion") or ""))
        for lr in limit_ranges
    )
    material = {
        "namespace": [ns_meta.get("name"), ns_meta.get("uid"), ns_meta.get("resourceVersion")],
        "limitRanges": ranges,
        "pod": pod,
    }
    if slice_name:
        material["slice"] = slice_name
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


def cacheable(decision: Decision) -> bool:
    """Acceptances and the provider's refusals of the Pod; never "could not verify"."""
    return decision.allowed or 400 <= decision.code < 500


RESULTS = ("hit", "miss", "bypass")
"""hit: answered from the cache (also after waiting for the dry run another admission of
the same template had in flight); miss: dry-run, then kept; bypass: dry-run, not cacheable
(a namespace with a pod-counting ResourceQuota, a 503, an update of a running pod)."""


class VerdictCache:
    """At most ``max_entries`` verdicts (least recently used out first), each for at most
    ``ttl`` seconds. Thread-safe: the webhook serves reviews on many threads."""

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or ttl <= 0:
            raise ValueError("the verdict cache needs max_entries >= 1 and ttl > 0")
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, Decision]] = OrderedDict()
        # Templates with a dry run in flight: set when its leader is done.
        self._in_flight: dict[str, threading.Event] = {}
        self.counts: dict[str, int] = dict.fromkeys(RESULTS, 0)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Decision | None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= now:
                if entry is not None:
                    del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def lead(self, key: str) -> threading.Event | None:
        """None: the caller leads ``key``'s dry run and must call :meth:`landed` once it
        has put (or not) the answer. Else the Event the leader in flight sets: wait on it,
        then :meth:`get`."""
        with self._lock:
            flight = self._in_flight.get(key)
            if flight is None:
                self._in_flight[key] = threading.Event()
            return flight

    def landed(self, key: str) -> None:
        """The leader of ``key``'s dry run is done: release its waiters."""
        with self._lock:
            flight = self._in_flight.pop(key, None)
        if flight is not None:
            flight.set()

    def put(self, key: str, decision: Decision) -> None:
        if not cacheable(decision):
            return
        expires = self._clock() + self.ttl
        with self._lock:
            self._entries[key] = (expires, decision)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def count(self, result: str) -> None:
        with self._lock:
            self.counts[result] += 1
