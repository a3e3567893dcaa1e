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


def _defaults() -> dict[str, ResourceSettings]:
    return {name: ResourceSettings() for name in RESOURCES}


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
        return self.resources.get(resource) or ResourceSettings()

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


def slice_reflection(settings: ReflectionSettings) -> ReflectionSettings:
    """What a slice's vkubelet reflects (docs/slices.md): only its pods' Events. Objects of
    a namespace (ConfigMaps, Services...) are the peering's, reflected once by the
    peering's own vkubelet: a second writer per slice would fight over the same remote
    objects and each would delete the others' as orphans. Service-account tokens are per
    pod but share one remote selector, so they stay off here too (the pods of a slice
    run without a home API identity: docs/slices.md says so)."""
    off = ResourceSettings(workers=0)
    kept = {name: (settings.of(name) if name == EVENTS else off) for name in RESOURCES}
    return ReflectionSettings(
        resources=kept,
        storage_classes=settings.storage_classes,
        token_seconds=settings.token_seconds,
        token_renew_fraction=settings.token_renew_fraction,
    )
