"""Flags of the home API access (docs/virtual-kubelet.md, docs/home-api.md)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from kube_offload.runtime.flags import add_flag, non_negative_int, positive_duration, positive_int


@dataclass(frozen=True)
class HomeAPISettings:
    # Idle uplinks held open to each Ready relay pod; 0: none (pods of this remote cannot
    # reach their home API server through the relay).
    uplinks: int = 4
    # Uplinks open at once, idle or piping a pod's connection, over every relay pod.
    max_connections: int = 256
    # How often the relay's Service and pods are read again.
    refresh_period: float = 10.0


def add_home_api_flags(parser: Any, component: str) -> None:
    group = parser.add_argument_group("home API access (docs/home-api.md)")
    add_flag(group, component, "--home-api-uplinks", default=4, type=non_negative_int,
             help="idle uplinks held open to each relay pod of the provider (0: none)")
    add_flag(group, component, "--home-api-max-connections", default=256, type=positive_int,
             help="offloaded pods' connections to the home API server open at once, idle uplinks included")
    add_flag(group, component, "--home-api-refresh-period", default="10s", type=positive_duration,
             help="how often the relay's Service and pods are read on the provider")


def home_api_settings_from_args(args: argparse.Namespace) -> HomeAPISettings:
    return HomeAPISettings(uplinks=args.home_api_uplinks, max_connections=args.home_api_max_connections,
                           refresh_period=float(args.home_api_refresh_period))
