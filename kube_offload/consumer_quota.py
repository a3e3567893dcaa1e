"""What a pod is charged against a consumer's quota, and what a quota key limits (pure).

The rules the ShadowPod webhook, the Consumer status loop (enforcer/consumers/quota.py sums them)
and ``kubectl offload explain`` share; docs/security.md "Quota" says what counts.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload.provider_policy import QUOTA_MODE_HARD, ProviderPolicyError, parse_policy
from kube_offload.resources import (
    QuantityError,
    ResourceList,
    containers_without_limit,
    format_quantity,
    limits_unequal_to_requests,
    parse_quantity,
    pod_limits,
    pod_requests,
    uses_binary_format,
)

# --- what a pod is charged, and what a quota key limits -------------------------------------
LIMITS_PREFIX = "limits."
REQUESTS_PREFIX = "requests."
PODS = "pods"
# The quota modes (spec.policy.quotaMode) under which a plain key bounds requests, and limits.
MODES_COUNTING_REQUESTS = frozenset({"requests", "both", QUOTA_MODE_HARD})
MODES_COUNTING_LIMITS = frozenset({"limits", "both", QUOTA_MODE_HARD})
# Quota keys Kubernetes' ResourceQuota knows that are not a pod's compute resources: object
# counts and claimed storage. A ShadowPod never adds to them, so the ShadowPod webhook
# never refuses for them. They bound each twin namespace, not the consumer as a whole:
# the enforcer writes them (and only them) into a ResourceQuota in every twin namespace
# (:func:`twin_object_quota`, enforcer/consumers/twin_objects.py), which the API server enforces
# atomically, also while the enforcer is down (docs/security.md "Quota: what counts").
# This is the one list of those keys.
OBJECT_QUOTA_KEYS: tuple[str, ...] = (
    "services",
    "services.nodeports",
    "services.loadbalancers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "requests.storage",
)
# count/<resource>[.<group>] (any kind, as ResourceQuota reads it; count/pods excepted: a
# pod is the enforcer's to count, per consumer).
OBJECT_QUOTA_PREFIXES: tuple[str, ...] = ("count/",)
# <class>.storageclass.storage.k8s.io/requests.storage and .../persistentvolumeclaims.
STORAGE_CLASS_QUOTA_MARK = ".storageclass.storage.k8s.io/"


def is_object_quota_key(key: str) -> bool:
    """Whether a spec.quota key counts objects or claimed storage (not pod resources)."""
    if key in ("count/pods",):
        return False
    return key in OBJECT_QUOTA_KEYS or key.startswith(OBJECT_QUOTA_PREFIXES) or STORAGE_CLASS_QUOTA_MARK in key


def twin_object_quota(quota: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``spec.hard`` of the ResourceQuota the enforcer keeps in each twin namespace of
    a consumer whose ``spec.quota`` is ``quota``: its object-count and storage keys
    (:func:`is_object_quota_key`), each figure as written; never cpu, memory or any other
    compute key (a ResourceQuota on those would make every pod set them; compute is the
    enforcer's per-consumer count). {} when there are none: then no ResourceQuota.
    Raises QuantityError naming ``spec.quota[<key>]`` of a figure that does not parse."""
    if quota is None:
        return {}
    if not isinstance(quota, Mapping):
        raise QuantityError("spec.quota: must be an object of resource name -> quantity")
    hard: dict[str, str] = {}
    for key, raw in quota.items():
        key = str(key)
        if not is_object_quota_key(key):
            continue
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            raise QuantityError(f"spec.quota[{key}]: {exc}") from None
        if amount < 0:
            raise QuantityError(f"spec.quota[{key}]: must not be negative")
        hard[key] = str(raw)
    return hard


def twin_count_quota(quota: Mapping[str, Any] | None, max_objects: Mapping[str, int]) -> dict[str, str]:
    """:func:`twin_object_quota` with the provider policy's per-twin object bounds
    (``twinNamespaces.maxObjects``) added as ``count/<kind>`` for every built-in kind: no kind
    the consumer writes into a twin is unbounded by default. A kind ``spec.quota`` bounds
    too keeps the lower figure; custom kinds (ShadowPods) are left out, counted by the
    enforcer's webhook (a ResourceQuota on a custom kind refuses every create until the
    quota controller's next full resync). Raises QuantityError as :func:`twin_object_quota`."""
    hard = twin_object_quota(quota)
    for kind, most in max_objects.items():
        if "." in kind and not kind.endswith(".k8s.io"):
            continue  # a custom kind: not the API server's to count
        key = f"count/{kind}"
        written = hard.get(key)
        if written is None or parse_quantity(written) > most * 1000:
            hard[key] = str(most)
    return hard


def pod_charges(pod: Mapping[str, Any]) -> ResourceList:
    """What ``pod`` (a Pod, or a ShadowPod's ``spec.pod`` template) is charged: its
    requests under the plain resource names (``pods`` = 1000), its limits under
    ``limits.<name>`` (:func:`kube_offload.resources.pod_limits`); overhead in both.
    Raises QuantityError on a malformed pod."""
    charges = pod_requests(pod)
    for name, amount in pod_limits(pod).items():
        charges[LIMITS_PREFIX + name] = amount
    return charges


def quota_limits(quota: Mapping[str, Any] | None, mode: str = "requests") -> ResourceList:
    """``spec.quota`` in the names :func:`pod_charges` uses, in milli-units: what the
    webhook compares usage against. ``requests.cpu`` and (in mode ``requests``) ``cpu``
    limit the requests; ``limits.cpu`` and (mode ``limits``) ``cpu`` the limits; modes
    ``both`` and ``hard`` make a plain ``cpu`` limit both (``hard`` also refuses pods whose
    limits differ from their requests: enforcer/admission/quota_rules.py). ``pods`` and ``count/pods`` the pod count.
    Object-count and storage keys are kept under their own names (nothing a pod adds).
    Two keys for one figure (``cpu`` and ``requests.cpu``): the lower holds. Raises
    QuantityError naming the key of a quantity that does not parse."""
    out: ResourceList = {}

    def put(name: str, amount: int) -> None:
        out[name] = min(amount, out[name]) if name in out else amount

    if quota is None:
        return out
    if not isinstance(quota, Mapping):
        raise QuantityError("must be an object of resource name -> quantity")
    for key, raw in quota.items():
        key = str(key)
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            raise QuantityError(f"{key}: {exc}") from None
        if key in (PODS, "count/pods"):
            put(PODS, amount)
        elif is_object_quota_key(key):
            put(key, amount)
        elif key.startswith(REQUESTS_PREFIX):
            put(key[len(REQUESTS_PREFIX):], amount)
        elif key.startswith(LIMITS_PREFIX):
            put(key, amount)
        else:
            if mode in MODES_COUNTING_REQUESTS:
                put(key, amount)
            if mode in MODES_COUNTING_LIMITS:
                put(LIMITS_PREFIX + key, amount)
    return out


def consumer_quota(spec: Mapping[str, Any]) -> ResourceList:
    """A Consumer spec's quota as :func:`quota_limits` reads it under its
    ``spec.policy.quotaMode``. Raises QuantityError naming the key (spec.quota[...] or
    spec.policy...) when either does not parse: the provider's mistake."""
    try:
        mode = parse_policy(spec.get("policy")).quota_mode
    except ProviderPolicyError as exc:
        raise QuantityError(str(exc)) from None  # names its spec.policy key already
    try:
        return quota_limits(spec.get("quota"), mode)
    except QuantityError as exc:
        raise QuantityError(f"spec.quota: {exc}") from None


def limited_resources(quota: Mapping[str, int]) -> list[str]:
    """The resources whose limits a quota (:func:`quota_limits` output) counts: a pod must
    then set a limit for each (as ResourceQuota requires), or its limit is unbounded."""
    return sorted(name[len(LIMITS_PREFIX):] for name in quota if name.startswith(LIMITS_PREFIX))


def counted_resources(quota: Mapping[str, int]) -> list[str]:
    """The compute resources a quota (:func:`quota_limits` output) counts in any form
    (``cpu`` from ``cpu``, ``requests.cpu`` or ``limits.cpu``), sorted; never the pod count
    nor object-count and storage keys: what quota mode ``hard`` makes every container set
    limits equal to requests for."""
    names = set()
    for name in quota:
        if name == PODS or is_object_quota_key(name):
            continue
        names.add(name[len(LIMITS_PREFIX):] if name.startswith(LIMITS_PREFIX) else name)
    return sorted(names)


def limit_problems(pod: Mapping[str, Any], quota: Mapping[str, int], mode: str, consumer_id: str, *, field_prefix: str = "") -> list[str]:
    """Why ``pod`` (a Pod, or a ShadowPod's ``spec.pod``; field paths start with
    ``field_prefix``) may not run under a consumer's ``quota`` (:func:`quota_limits` output)
    for its limits, one line per container and resource, naming the field and the fix:

    * a resource whose limit the quota counts (:func:`limited_resources`) needs a limit in
      every container, as ResourceQuota requires (a container without one is unbounded);
    * under mode ``hard``, every container and init container (and pod-level resources,
      when they name it) must set a limit equal to its request for each resource the quota
      counts in any spelling (:func:`counted_resources`).

    The ShadowPod webhook refuses with these (enforcer/admission/quota_rules.py);
    ``kubectl offload explain`` shows them. Raises QuantityError on a malformed pod."""
    if mode == QUOTA_MODE_HARD:
        return _unequal_limits(pod, quota, consumer_id, field_prefix)
    problems = []
    for name in limited_resources(quota):
        for path in containers_without_limit(pod, name):
            problems.append(
                f"{field_prefix}{path}.resources.limits.{name}: must be set: the quota of consumer \"{consumer_id}\" "
                f"counts limits.{name} (Consumer spec.quota, read under spec.policy.quotaMode), and a container "
                f"without a {name} limit is unbounded; set a {name} limit"
            )
    return problems


def _unequal_limits(pod: Mapping[str, Any], quota: Mapping[str, int], consumer_id: str, field_prefix: str) -> list[str]:
    resources = counted_resources(quota)
    if not resources:
        return []
    why = (
        f"consumer \"{consumer_id}\" is under quota mode hard (Consumer spec.policy.quotaMode), which admits only "
        f"pods whose containers set limits equal to requests for every resource its quota counts ({', '.join(resources)})"
    )
    problems = []
    for name in resources:
        binary = uses_binary_format(name)
        for path, container, requested, limit in limits_unequal_to_requests(pod, name):
            who = f" (container \"{container}\")" if container else " (pod-level resources)"
            if limit is None and requested is None:
                got, fix = "must be set", f"set requests.{name} and limits.{name} to the same amount"
            elif limit is None:
                got = "must be set"
                fix = f"set limits.{name} to the request, {format_quantity(requested or 0, binary=binary)}"
            else:
                got = (
                    f"must equal requests.{name} (limit {format_quantity(limit, binary=binary)}, "
                    f"request {format_quantity(requested or 0, binary=binary)})"
                )
                fix = f"set limits.{name} and requests.{name} to the same amount"
            problems.append(f"{field_prefix}{path}.resources.limits.{name}{who}: {got}: {why}; {fix}")
    return problems
