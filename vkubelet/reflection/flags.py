"""The ``kube-offload vkubelet`` flags of resource reflection (each with its environment
variable, through kube_offload.runtime.flags) and the settings they make."""

from __future__ import annotations

import argparse

from kube_offload.bound_tokens import DEFAULT_RENEW_FRACTION
from kube_offload.runtime.flags import add_flag, appended, non_negative_int
from vkubelet.reflection.policy import POLICIES, Policy
from vkubelet.reflection.settings import (
    DEFAULT_TOKEN_SECONDS,
    BY_USE_RESOURCES,
    CUSTOM_RESOURCE_FLAG,
    EVENTS,
    RESOURCES,
    SERVICEACCOUNTS,
    WITHOUT_POLICY,
    ReflectionSettings,
    ResourceSettings,
    default_workers,
    parse_custom_resource,
    parse_storage_classes,
)
from kube_offload.runtime.flags import parse_duration
from vkubelet.shared.settings_error import SettingsError

_WORKERS_HELP = {
    SERVICEACCOUNTS: "offloaded pods whose service-account token is requested and refreshed in parallel; "
    "0: pods run without a token",
    EVENTS: "remote Events of offloaded pods copied to the local pod in parallel; 0: none copied",
}
_POLICY_HELP = {
    EVENTS: "which offloaded pods get their remote Events copied (the annotations are read on the local pod)",
}


def _seconds(text: str) -> int:
    try:
        return int(parse_duration(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number such as 0.8") from None


def add_reflection_flags(parser: argparse.ArgumentParser, component: str) -> None:
    group = parser.add_argument_group("resource reflection (docs/reflection.md)")
    for name in RESOURCES:
        add_flag(
            group,
            component,
            f"--reflect-{name}-workers",
            default=default_workers(name),
            type=non_negative_int,
            help=_WORKERS_HELP.get(name, f"local {name} reflected in parallel; 0: {name} are not reflected"),
        )
        if name in WITHOUT_POLICY:
            continue
        add_flag(
            group,
            component,
            f"--reflect-{name}-policy",
            default=Policy.DENY_LIST.value,
            choices=POLICIES,
            help=_POLICY_HELP.get(
                name,
                f"which {name} are reflected: deny-list = all but those annotated kube-offload.io/skip-reflection, "
                "allow-list = only those annotated kube-offload.io/allow-reflection"
                + (
                    ", by-use = only those an offloaded pod references (env, envFrom, volumes, image pull secrets), "
                    "withdrawn when none does"
                    if name in BY_USE_RESOURCES
                    else " (by-use: configmaps and secrets only)"
                ),
            ),
        )
    add_flag(
        group,
        component,
        "--reflect-storage-class",
        default=[],
        action="append",
        help="StorageClass of reflected PVCs, local=remote, repeatable; remote empty = the remote default class, "
        "local * = every class not listed; classes not listed are kept",
    )
    add_flag(
        group,
        component,
        CUSTOM_RESOURCE_FLAG,
        default=[],
        action="append",
        help="a custom resource kind to reflect, repeatable: PLURAL.VERSION.GROUP:KIND[:out=PATHS][:back=PATHS]"
        "[:policy=deny-list|allow-list][:workers=N], paths ;-separated, e.g. "
        "widgets.v1.example.com:Widget:out=spec.size;spec.color:back=status.phase. out (default spec): the spec "
        "fields sent; back (default status): the remote status fields written to the local object's status. The "
        "provider must grant the kind and fields (Consumer spec.policy.customResources; docs/reflection.md)",
    )
    add_flag(
        group,
        component,
        "--reflect-token-expiration",
        default=f"{DEFAULT_TOKEN_SECONDS}s",
        type=_seconds,
        help="lifetime of the service-account tokens requested for offloaded pods (at least 10m); "
        "renewed at --reflect-token-renew-after-fraction of it",
    )
    add_flag(
        group,
        component,
        "--reflect-token-renew-after-fraction",
        default=DEFAULT_RENEW_FRACTION,
        type=_fraction,
        help="share of a service-account token's lifetime after which it is renewed (0 < x < 1; the kubelet's 0.8); "
        "lower values rotate tokens sooner",
    )


def reflection_settings_from_args(args: argparse.Namespace) -> ReflectionSettings:
    resources = {}
    for name in RESOURCES:
        workers = getattr(args, f"reflect_{name}_workers")
        policy = getattr(args, f"reflect_{name}_policy", Policy.DENY_LIST.value)
        resources[name] = ResourceSettings(workers=workers, policy=Policy(policy))
    try:
        storage_classes = parse_storage_classes(appended(args, "--reflect-storage-class"))
        custom_resources = tuple(parse_custom_resource(item) for item in appended(args, CUSTOM_RESOURCE_FLAG))
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    token_seconds = args.reflect_token_expiration
    if isinstance(token_seconds, str):  # the default, unconverted by argparse
        token_seconds = _seconds(token_seconds)
    return ReflectionSettings(
        resources=resources,
        storage_classes=storage_classes,
        token_seconds=int(token_seconds),
        token_renew_fraction=float(args.reflect_token_renew_after_fraction),
        custom_resources=custom_resources,
    )
