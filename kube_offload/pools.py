"""A provider's node pools, as the Consumer's ``spec.pools`` grants them (pure).

A pool is a set of the provider's own nodes (those whose labels include its
``nodeSelector``) and the offloading patch the enforcer adds to every pod of a slice of
that pool: the node selector merged into the pod's, the tolerations appended, the runtime
class set. Everything here is provider-written (the Consumer's spec): the consumer only
names a pool in an OffloadSlice, so nothing here is checked against the provider policy
the consumer's own pod spec is (docs/slices.md "Provider: pools", docs/security.md).

The CRD schema (kube_offload/manifests/consumer-crd.yaml) already keeps pools well formed;
this parser checks again, because a Consumer written before the schema had pools, or an
edit that bypassed it, must refuse rather than grant something the provider did not mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.selector import label_key_problem, label_value_problem

POOLS_FIELD = "spec.pools"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The CRD's enums for a toleration (core/v1 Toleration).
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


class PoolError(ValueError):
    """A Consumer's ``spec.pools`` that cannot be read: the provider's mistake, named by field."""


@dataclass(frozen=True)
class Pool:
    name: str
    node_selector: Mapping[str, str]
    description: str = ""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    runtime_class_name: str | None = None
    node_labels: Mapping[str, str] = field(default_factory=dict)


def parse_pools(spec: Mapping[str, Any]) -> dict[str, Pool]:
    """The pools of a Consumer ``spec`` by name (in the order written); :class:`PoolError`
    naming ``spec.pools[i].<field>`` and the fix when one is malformed."""
    raw = spec.get("pools")
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise PoolError(f"{POOLS_FIELD} must be a list of pools ({{name, nodeSelector, ...}})")
    pools: dict[str, Pool] = {}
    for index, item in enumerate(raw):
        where = f"{POOLS_FIELD}[{index}]"
        pool = _parse_pool(item, where)
        if pool.name in pools:
            raise PoolError(f"{where}.name: pool {pool.name!r} is listed twice; pool names are unique")
        pools[pool.name] = pool
    return pools


def _parse_pool(item: object, where: str) -> Pool:
    if not isinstance(item, Mapping):
        raise PoolError(f"{where} must be an object with name and nodeSelector")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise PoolError(f"{where}.name is required: a DNS label of at most {c.POOL_NAME_MAX} characters")
    if len(name) > c.POOL_NAME_MAX or not _DNS_LABEL.match(name):
        raise PoolError(
            f"{where}.name {name!r} must be a DNS label (lower-case letters, digits, '-') of at most "
            f"{c.POOL_NAME_MAX} characters"
        )
    where = f"{POOLS_FIELD}[{name}]"
    selector = _labels(item.get("nodeSelector"), f"{where}.nodeSelector")
    if not selector:
        raise PoolError(
            f"{where}.nodeSelector is required and not empty: the labels of this provider's nodes the pool "
            "covers (an empty selector would be every node)"
        )
    description = item.get("description") or ""
    if not isinstance(description, str):
        raise PoolError(f"{where}.description must be a string")
    runtime_class = item.get("runtimeClassName")
    if runtime_class is not None and (not isinstance(runtime_class, str) or not runtime_class):
        raise PoolError(f"{where}.runtimeClassName must be a RuntimeClass name, or left out")
    return Pool(
        name=name,
        node_selector=selector,
        description=description,
        tolerations=_tolerations(item.get("tolerations"), f"{where}.tolerations"),
        runtime_class_name=runtime_class,
        node_labels=_labels(item.get("nodeLabels"), f"{where}.nodeLabels"),
    )


def _labels(raw: object, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PoolError(f"{where} must be a map of label key -> value")
    out: dict[str, str] = {}
    for key, value in raw.items():
        problem = label_key_problem(str(key))
        if problem is None:
            problem = label_value_problem(value) if isinstance(value, str) else f"the value of {key!r} is not a string"
        if problem:
            raise PoolError(f"{where}: {problem}")
        out[str(key)] = value
    return out


def _tolerations(raw: object, where: str) -> tuple[Mapping[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PoolError(f"{where} must be a list of tolerations")
    out = []
    for index, toleration in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(toleration, Mapping):
            raise PoolError(f"{at} must be a toleration object (key, operator, value, effect)")
        unknown = sorted(set(map(str, toleration)) - set(_TOLERATION_FIELDS))
        if unknown:
            raise PoolError(f"{at}: unknown field {unknown[0]!r}; a toleration has {', '.join(_TOLERATION_FIELDS)}")
        operator = toleration.get("operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            raise PoolError(f"{at}.operator {operator!r}: use Exists or Equal")
        effect = toleration.get("effect") or ""
        if effect not in TOLERATION_EFFECTS:
            raise PoolError(f"{at}.effect {effect!r}: use NoSchedule, PreferNoSchedule, NoExecute or leave it out")
        out.append(dict(toleration))
    return tuple(out)


def pool_covers(pool: Pool, node: Mapping[str, Any]) -> bool:
    """Whether ``node`` (a provider Node) is one of the pool's: it has every selector label."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in pool.node_selector.items())


# --- the offloading patch ------------------------------------------------------------------
def patch_conflicts(pod_spec: Mapping[str, Any], pool: Pool, *, field_prefix: str = "spec") -> list[str]:
    """Why a consumer's pod spec cannot take ``pool``'s patch, one line per field: a
    nodeSelector key the pool sets to another value, or a runtimeClassName other than the
    pool's (the patch never overrides what the consumer wrote, and never silently drops
    the pool's pinning either)."""
    problems = []
    selector = pod_spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping):
        for key, value in sorted(pool.node_selector.items()):
            if key in selector and selector[key] != value:
                problems.append(
                    f"{field_prefix}.nodeSelector[{key}]={selector[key]!r} conflicts with pool {pool.name!r}, which pins "
                    f"its pods to {key}={value!r}; remove the key (the provider's pool sets it)"
                )
    runtime_class = pod_spec.get("runtimeClassName")
    if runtime_class and pool.runtime_class_name and runtime_class != pool.runtime_class_name:
        problems.append(
            f"{field_prefix}.runtimeClassName={runtime_class!r} conflicts with pool {pool.name!r}, whose pods run "
            f"with runtime class {pool.runtime_class_name!r}; remove runtimeClassName (the provider's pool sets it)"
        )
    return problems


def apply_pool_patch(pod_spec: Mapping[str, Any], pool: Pool) -> dict[str, Any]:
    """A copy of ``pod_spec`` with ``pool``'s patch: nodeSelector merged (the pool's keys
    win; admission refused a conflicting one), tolerations appended (each once), and
    runtimeClassName set when the pool has one."""
    out = dict(pod_spec)
    selector = dict(out.get("nodeSelector") or {})
    selector.update(pool.node_selector)
    out["nodeSelector"] = selector
    if pool.tolerations:
        tolerations = list(out.get("tolerations") or [])
        for toleration in pool.tolerations:
            if dict(toleration) not in tolerations:
                tolerations.append(dict(toleration))
        out["tolerations"] = tolerations
    if pool.runtime_class_name:
        out["runtimeClassName"] = pool.runtime_class_name
    return out
