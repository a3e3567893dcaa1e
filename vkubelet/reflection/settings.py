"""Settings of resource reflection: per resource type a worker count (0 = not reflected)
and a policy, plus what a few types need. Read from flags in flags.py; every field has a
default so tests build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kube_offload.bound_tokens import DEFAULT_RENEW_FRACTION, MIN_EXPIRATION_SECONDS
from vkubelet.reflection.policy import Policy

CONFIGMAPS = "configmaps"
SECRETS = "secrets"
SERVICES = "services"
ENDPOINTSLICES = "endpointslices"
INGRESSES = "ingresses"
PERSISTENTVOLUMECLAIMS = "persistentvolumeclaims"
SERVICEACCOUNTS = "serviceaccounts"
EVENTS = "events"

# Every reflected resource type, by its kubectl plural name (flag names use it).
RESOURCES: tuple[str, ...] = (
    CONFIGMAPS,
    SECRETS,
    SERVICES,
    ENDPOINTSLICES,
    INGRESSES,
    PERSISTENTVOLUMECLAIMS,
    SERVICEACCOUNTS,
    EVENTS,
)
# Types whose objects pods reference by name (usage.py): the only ones "by-use" can select.
BY_USE_RESOURCES: frozenset[str] = frozenset({CONFIGMAPS, SECRETS})
# Types without a policy of their own: a pod's token follows the pod (opt out with the
# pod's own automountServiceAccountToken: false).
WITHOUT_POLICY: frozenset[str] = frozenset({SERVICEACCOUNTS})

DEFAULT_WORKERS = 2
# The kinds a namespace holds by the hundred or thousand (one per app, per Service) get
# more workers: a reconcile spends nearly all its time waiting for the remote apiserver's
# answer to one create (py-spy, bench/bench_reflection.py), so the workers bound the
# reflection rate. At a burst of 1,000 ConfigMaps the p99 from the local write to the
# remote copy went from 4.5 s with 2 workers to 1.7 s with 8, and of 1,000 EndpointSlices
# from 7.2 s to 1.2 s (docs/performance.md, "Reflection latency"). A worker is an idle
# thread until there is work, and the queue never gives one key to two workers.
BULK_WORKERS = 8
BULK_RESOURCES: frozenset[str] = frozenset({CONFIGMAPS, SECRETS, SERVICES, ENDPOINTSLICES})
DEFAULT_TOKEN_SECONDS = 3600
# Key of the storage-class map that stands for every class not named in it.
ANY_STORAGE_CLASS = "*"


@dataclass(frozen=True)
class ResourceSettings:
    workers: int = DEFAULT_WORKERS
    policy: Policy = Policy.DENY_LIST

    @property
    def enabled(self) -> bool:
        return self.workers > 0


def default_workers(resource: str) -> int:
    """The workers of ``resource`` when its flag is not given."""
    return BULK_WORKERS if resource in BULK_RESOURCES else DEFAULT_WORKERS


def _defaults() -> dict[str, ResourceSettings]:
    return {name: ResourceSettings(workers=default_workers(name)) for name in RESOURCES}


@dataclass(frozen=True)
class ReflectionSettings:
    # Resource type -> its settings; a type left out keeps the defaults.
    resources: Mapping[str, ResourceSettings] = field(default_factory=_defaults)
    # Local StorageClass name -> remote one for reflected PVCs ("" = the remote default
    # class, "*" = every class not listed). Classes not mapped are kept as they are.
    storage_classes: Mapping[str, str] = field(default_factory=dict)
    # Lifetime of the service-account tokens requested for offloaded pods.
    token_seconds: int = DEFAULT_TOKEN_SECONDS
    # A token is renewed once this share of its lifetime has passed. Below the default,
    # rotations come sooner: a test forces several within seconds, since the API server
    # issues no token shorter than 10 minutes.
    token_renew_fraction: float = DEFAULT_RENEW_FRACTION  # --reflect-token-renew-after-fraction

    def of(self, resource: str) -> ResourceSettings:
        if resource not in RESOURCES:
            raise KeyError(f"unknown reflected resource {resource!r}")
        return self.resources.get(resource) or ResourceSettings(workers=default_workers(resource))

    def enabled(self, resource: str) -> bool:
        return self.of(resource).enabled

    @property
    def service_account_tokens(self) -> bool:
        """Whether offloaded pods get their token through reflection (translation then
        mounts the reflected token Secret in place of the projected token)."""
        return self.enabled(SERVICEACCOUNTS)

    def problem(self) -> str | None:
        """The first setting that cannot work, worded with its flag; None if all can."""
        for name in self.resources:
            if name not in RESOURCES:
                return f"unknown reflected resource {name!r} (known: {', '.join(RESOURCES)})"
        for name in RESOURCES:
            if self.of(name).workers < 0:
                return f"--reflect-{name}-workers must be 0 (off) or more"
            if self.of(name).policy is Policy.BY_USE and name not in BY_USE_RESOURCES:
                return (
                    f"--reflect-{name}-policy=by-use is only for "
                    f"{' and '.join(sorted(BY_USE_RESOURCES))} (what pods reference by name); "
                    f"use deny-list or allow-list for {name}"
                )
        if self.token_seconds < MIN_EXPIRATION_SECONDS:
            return f"--reflect-token-expiration must be at least {MIN_EXPIRATION_SECONDS}s (the TokenRequest API minimum)"
        if not 0 < self.token_renew_fraction < 1:
            return (
                f"--reflect-token-renew-after-fraction={self.token_renew_fraction} must be between 0 and 1 (exclusive): "
                "the share of a token's lifetime after which it is renewed, e.g. 0.8"
            )
        if self.enabled(SERVICEACCOUNTS) and not self.enabled(CONFIGMAPS):
            return (
                "--reflect-serviceaccounts-workers > 0 needs --reflect-configmaps-workers > 0: the token volume "
                "of an offloaded pod mounts the reflected kube-root-ca.crt"
            )
        return None


def parse_storage_classes(items: list[str]) -> dict[str, str]:
    """``["local=remote", "fast=", "*=standard"]`` (repeated flag or comma-separated env)."""
    mapping: dict[str, str] = {}
    for item in items:
        local, sep, remote = item.partition("=")
        if not sep or not local.strip():
            raise ValueError(f"--reflect-storage-class {item!r} must be local-class=remote-class")
        mapping[local.strip()] = remote.strip()
    return mapping
