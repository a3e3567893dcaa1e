"""Command-line flags that can also come from the environment.

Every flag of every component is declared through :func:`add_flag`, so each has exactly one
environment variable (``KUBE_OFFLOAD_<COMPONENT>_<FLAG>``) and its default shows in
``--help``. Precedence: command line > environment > default.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable

# The one duration parser is the contract's; flag modules reach it through this one.
from kube_offload.times import parse_duration as parse_duration


def env_name(component: str, flag: str) -> str:
    """``("webhook", "--tls-cert")`` -> ``KUBE_OFFLOAD_WEBHOOK_TLS_CERT``."""
    parts = ["KUBE_OFFLOAD", component, flag.lstrip("-")]
    return "_".join(p.upper().replace("-", "_") for p in parts if p)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    component: str,
    flag: str,
    *,
    default: Any,
    help: str,
    type: Callable[[str], Any] = str,
    choices: list[str] | tuple[str, ...] | None = None,
    action: str | None = None,
) -> None:
    """Add ``flag`` with its environment variable; a bad environment value exits like a
    bad command-line value would (argparse names the flag)."""
    env = env_name(component, flag)
    raw = os.environ.get(env)
    value = default
    if action == "append":
        value = list(default or [])
        if raw:
            value = [item for item in raw.split(",") if item]
        parser.add_argument(
            flag,
            action="append",
            default=None,
            help=f"{help} (env {env}, comma-separated; default: {default or 'none'})",
        )
        parser.set_defaults(**{flag.lstrip("-").replace("-", "_") + "_env_default": value})
        return
    converter = _parse_bool if type is bool else type
    if raw is not None:
        try:
            value = converter(raw)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise SystemExit(f"kube-offload: environment variable {env}={raw!r} is invalid: {exc}") from None
        if choices is not None and value not in choices:
            raise SystemExit(
                f"kube-offload: environment variable {env}={raw!r} is invalid: "
                f"choose one of {', '.join(choices)}"
            )
    shown = "none" if default in (None, "") else default
    parser.add_argument(
        flag,
        type=converter,
        default=value,
        choices=choices,
        metavar=None if choices else flag.lstrip("-").upper().replace("-", "_"),
        help=f"{help} (env {env}; default: {shown})",
    )


def appended(args: argparse.Namespace, flag: str) -> list[str]:
    """The value of an ``action="append"`` flag: command line if given, else env/default."""
    dest = flag.lstrip("-").replace("-", "_")
    given = getattr(args, dest, None)
    if given:
        return list(given)
    return list(getattr(args, dest + "_env_default", []) or [])


# --- flags several components share ---------------------------------------------------------
# Objects per LIST page of an informer: client-go's reflector default, small enough that one
# page of Pods stays a few MiB, large enough that a list of a big cluster is a handful of
# requests. Here (not in informer.py) so that --help does not import the API client.
DEFAULT_LIST_PAGE_SIZE = 500


def add_list_page_size_flag(parser: Any, component: str) -> None:
    """``--list-page-size``: objects per LIST page of every informer of the process
    (applied with ``informer.set_default_page_size`` before the informers are built)."""
    add_flag(parser, component, "--list-page-size", default=DEFAULT_LIST_PAGE_SIZE, type=positive_int,
             help="objects per page when an informer lists (limit/continue); larger: fewer requests on a big "
                  "cluster, smaller: less memory per page in the API server and here")



def add_gc_thaw_period_flag(parser: Any, component: str) -> None:
    """``--gc-thaw-period``: ``gc.freeze`` after each full collection, everything walked
    again once per period (kube_offload/runtime/gc_freeze.py; 0 turns it off). For the
    processes that hold large caches: the enforcer, the virtual kubelet."""
    add_flag(
        parser,
        component,
        "--gc-thaw-period",
        default="30m",
        type=non_negative_duration,
        help="after each full garbage collection, keep what survived (the caches, mostly) out of the next "
        "ones, so a full pass walks only what is new; every this long, walk everything once to reclaim any "
        "cycle kept meanwhile (kube_offload/runtime/gc_freeze.py); 0 turns this off: every full pass walks "
        "every cached object, a pause that grows with them (~1 s at 10,000 pods' worth)",
    )

# --- argparse value types shared by every component's flags ---------------------------------
def positive_duration(text: str) -> float:
    """argparse type: a duration > 0 (see :func:`parse_duration`), errors worded for the flag."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return seconds


def non_negative_duration(text: str) -> float:
    """argparse type: a duration >= 0 (0 usually turns something off, e.g. a cache)."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return seconds


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a count of workers, a page size)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0, where 0 has a meaning of its own (turns a loop
    off, or takes the default): distinct from :func:`positive_int` on purpose."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def non_negative_seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds >= 0")
    return value


_BYTES = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi)?\s*$")
_BYTE_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, None: 1}


def byte_size(text: str) -> int:
    """argparse type: a size in bytes > 0, as a number of bytes or with a binary suffix as
    Kubernetes quantities write it (``262144``, ``256Ki``, ``3Mi``)."""
    match = _BYTES.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size in bytes (a whole number, optionally with Ki, Mi or Gi: e.g. 262144, 256Ki, 3Mi)"
        )
    value = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be at least 1 byte, got {text!r}")
    return value
