"""Settings of resource reflection: per resource type a worker count (0 = not reflected)
and a policy, plus what a few types need. Read from flags in flags.py; every field has a
default so tests build them directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from kube_offload.bound_tokens import DEFAULT_RENEW_FRACTION, MIN_EXPIRATION_SECONDS
from kube_offload.provider_policy import NEVER_GRANTED_GROUPS, never_granted_group
from kube_offload.runtime.kinds import Resource
from vkubelet.reflection.policy import POLICIES, Policy

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


# --- custom resources -----------------------------------------------------------------------
CUSTOM_RESOURCE_FLAG = "--reflect-custom-resource"
# Top-level fields an outgoing path may not start with: the metadata reflection forges
# itself, and status, which comes back and never goes out.
_NOT_OUT = ("apiVersion", "kind", "metadata", "status")
_PATH_SEGMENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")
_PLURAL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_GROUP = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")


@dataclass(frozen=True)
class CustomResource:
    """One custom resource kind the consumer's admin opts in to reflection (a
    ``--reflect-custom-resource`` flag): its local objects go out with only ``out`` (spec
    paths), and ``back`` (status paths) of the remote copy comes back to the local object's
    status subresource."""

    group: str
    version: str
    plural: str
    kind: str
    # Dotted paths copied out, each under spec ("spec" alone: the whole spec).
    out: tuple[str, ...] = ("spec",)
    # Dotted paths of the remote status copied back ("status" alone: all of it; empty: none).
    back: tuple[str, ...] = ("status",)
    workers: int = DEFAULT_WORKERS
    policy: Policy = Policy.DENY_LIST

    @property
    def key(self) -> str:
        """``<plural>.<group>``: the reflector's name (LABEL_REFLECTOR, metrics, logs)."""
        return f"{self.plural}.{self.group}"

    @property
    def api_kind(self) -> Resource:
        return Resource(self.group, self.version, self.kind, self.plural, True)


def _paths(text: str, what: str, item: str) -> tuple[str, ...]:
    paths = tuple(dict.fromkeys(p.strip() for p in text.split(";") if p.strip()))
    for path in paths:
        if not all(_PATH_SEGMENT.match(part) for part in path.split(".")):
            raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: {what} path {path!r} is not a dotted field path such as spec.size")
    return paths


def parse_custom_resource(item: str) -> CustomResource:
    """``PLURAL.VERSION.GROUP:KIND[:out=PATH;PATH][:back=PATH;PATH][:policy=P][:workers=N]``,
    e.g. ``widgets.v1.example.com:Widget:out=spec.size;spec.color:back=status.phase``
    (the resource as kubectl names it fully, then its kind). Raises ValueError naming the
    flag and what to write instead."""
    usage = "write PLURAL.VERSION.GROUP:KIND[:out=spec.a;spec.b][:back=status.x], e.g. widgets.v1.example.com:Widget"
    parts = item.split(":")
    if len(parts) < 2:
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: {usage}")
    plural, _, rest = parts[0].strip().partition(".")
    version, _, group = rest.partition(".")
    kind = parts[1].strip()
    if not _PLURAL.match(plural) or not _VERSION.match(version) or not _GROUP.match(group):
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: {parts[0]!r} is not PLURAL.VERSION.GROUP; {usage}")
    if never_granted_group(group):
        raise ValueError(
            f"{CUSTOM_RESOURCE_FLAG} {item!r}: group {group} is Kubernetes' or kube-offload's own "
            f"({', '.join(NEVER_GRANTED_GROUPS)}): those kinds have reflectors of their own or are never sent"
        )
    if not _KIND.match(kind):
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: {kind!r} is not a kind such as Widget; {usage}")
    options: dict[str, str] = {}
    for option in parts[2:]:
        name, sep, value = option.partition("=")
        if not sep or name not in ("out", "back", "policy", "workers") or name in options:
            raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: {option!r} is not one of out=, back=, policy=, workers= (each once)")
        options[name] = value
    out = _paths(options.get("out", "spec"), "an out", item)
    back = _paths(options.get("back", "status"), "a back", item)
    for path in out:
        if path.split(".")[0] != "spec":
            raise ValueError(
                f"{CUSTOM_RESOURCE_FLAG} {item!r}: out path {path!r} must be under spec (the provider grants spec fields; "
                f"{', '.join(_NOT_OUT)} are reflection's own)"
            )
    if not out:
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: out= names no path; write out=spec for the whole spec")
    for path in back:
        if path.split(".")[0] != "status":
            raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: back path {path!r} must be under status (only status comes back)")
    policy = options.get("policy", Policy.DENY_LIST.value)
    if policy not in (Policy.DENY_LIST.value, Policy.ALLOW_LIST.value):
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: policy={policy} must be deny-list or allow-list (of {', '.join(POLICIES)})")
    workers_text = options.get("workers", str(DEFAULT_WORKERS))
    if not workers_text.isdigit() or int(workers_text) < 1:
        raise ValueError(f"{CUSTOM_RESOURCE_FLAG} {item!r}: workers={workers_text} must be a whole number >= 1 (leave the flag out for none)")
    return CustomResource(group=group, version=version, plural=plural, kind=kind, out=out, back=back,
                          workers=int(workers_text), policy=Policy(policy))


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
    # Custom resource kinds opted in (--reflect-custom-resource), each its own reflector.
    custom_resources: tuple[CustomResource, ...] = ()
    # A slice's vkubelet (docs/slices.md): the twins' ConfigMaps, kube-root-ca.crt among
    # them, are reflected by the peering's own vkubelet, so token reflection here does not
    # need ConfigMap reflection of its own.
    configmaps_by_peering: bool = False
    # Likewise the claims (the virtual storage class of a slice's node needs them reflected).
    claims_by_peering: bool = False

    def of(self, resource: str) -> ResourceSettings:
        custom = self.custom_resource(resource)
        if custom is not None:
            return ResourceSettings(workers=custom.workers, policy=custom.policy)
        if resource not in RESOURCES:
            raise KeyError(f"unknown reflected resource {resource!r}")
        return self.resources.get(resource) or ResourceSettings(workers=default_workers(resource))

    def custom_resource(self, key: str) -> CustomResource | None:
        """The opted-in custom resource named ``<plural>.<group>``, or None."""
        return next((cr for cr in self.custom_resources if cr.key == key), None)

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
        keys = [cr.key for cr in self.custom_resources]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            return f"{CUSTOM_RESOURCE_FLAG}: {', '.join(twice)} given more than once; one flag per kind"
        if self.token_seconds < MIN_EXPIRATION_SECONDS:
            return f"--reflect-token-expiration must be at least {MIN_EXPIRATION_SECONDS}s (the TokenRequest API minimum)"
        if not 0 < self.token_renew_fraction < 1:
            return (
                f"--reflect-token-renew-after-fraction={self.token_renew_fraction} must be between 0 and 1 (exclusive): "
                "the share of a token's lifetime after which it is renewed, e.g. 0.8"
            )
        if self.enabled(SERVICEACCOUNTS) and not (self.enabled(CONFIGMAPS) or self.configmaps_by_peering):
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
    """What a slice's vkubelet reflects (docs/slices.md): only what is its own pods': their
    Events and their service-account token Secrets (each process selects the token
    Secrets of its own slice: serviceaccounts.token_secret_selector). Objects of a
    namespace (ConfigMaps, Services...) are the peering's, reflected once by the
    peering's own vkubelet: a second writer per slice would fight over the same remote
    objects and each would delete the others' as orphans."""
    off = ResourceSettings(workers=0)
    kept = {name: (settings.of(name) if name in (EVENTS, SERVICEACCOUNTS) else off) for name in RESOURCES}
    return ReflectionSettings(
        resources=kept,
        storage_classes=settings.storage_classes,
        token_seconds=settings.token_seconds,
        token_renew_fraction=settings.token_renew_fraction,
        configmaps_by_peering=settings.enabled(CONFIGMAPS),
        claims_by_peering=settings.enabled(PERSISTENTVOLUMECLAIMS),
    )
