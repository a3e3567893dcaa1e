"""Times and durations as the Kubernetes API and our flags write them (pure): part of the
contract with :mod:`kube_offload.constants` and :mod:`kube_offload.views`.

One parser and one writer per format, so that every component reads a ``creationTimestamp``,
a heartbeat, an annotation's time or a ``30d`` flag the same way:

- ``metav1.Time``: RFC 3339 in UTC, second precision (``2026-11-26T18:40:00Z``);
- ``metav1.MicroTime`` (Lease renewals, ``eventTime``): exactly six fraction digits, which
  the API server requires and ``datetime.isoformat`` omits at ``.000000``;
- durations: Go's syntax (``5s``, ``1m0.5s``, ``1h30m``) through durationpy, the parser the
  official client already depends on, plus bare seconds and leading days for flags.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

import durationpy

_METAV1_TIME = "%Y-%m-%dT%H:%M:%SZ"
_METAV1_MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


class MissingOffset(ValueError):
    """An RFC 3339 time without ``Z`` or an offset, where the caller asked for one."""


# --- RFC 3339 -----------------------------------------------------------------------------
def parse_time(text: str, *, require_offset: bool = False) -> datetime:
    """An API timestamp (RFC 3339: ``Z``/``z`` or an offset, with or without fractions) ->
    an aware datetime in UTC; ValueError otherwise.

    A time without an offset is read as UTC (what the API server means; it never writes
    one), unless ``require_offset``, for documents we define whose writers must say it
    (:class:`MissingOffset`)."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        if require_offset:
            raise MissingOffset(f"{text!r} carries no time zone (e.g. Z)")
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def parse_time_or_none(text: object) -> datetime | None:
    """:func:`parse_time`, or None for an absent (None, empty) or unreadable value: for
    fields read from objects, where a bad time must not stop a reconcile."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def format_time(moment: datetime) -> str:
    """``metav1.Time``: RFC 3339 in UTC, second precision, as Kubernetes writes timestamps."""
    return moment.astimezone(timezone.utc).strftime(_METAV1_TIME)


def format_micro_time(moment: datetime) -> str:
    """``metav1.MicroTime``: the API refuses it without exactly six fraction digits."""
    return moment.astimezone(timezone.utc).strftime(_METAV1_MICRO_TIME)


def format_epoch(seconds: float) -> str:
    """``metav1.Time`` of a time in seconds since the epoch (``time.time()``), the fraction
    dropped as metav1.Time marshals it."""
    return datetime.fromtimestamp(math.floor(seconds), tz=timezone.utc).strftime(_METAV1_TIME)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def now_time() -> str:
    """``metav1.Time`` of now."""
    return format_time(utc_now())


# --- durations ----------------------------------------------------------------------------
_BARE_SECONDS = re.compile(r"^\d+(?:\.\d+)?$")
_DAYS = re.compile(r"^(\d+)d")


def parse_duration(text: str, *, unit_required: bool = False) -> float:
    """Seconds from a duration as Go writes it (``5s``, ``500ms``, ``1m0.5s``, ``1h30m``),
    with leading days (``30d``, ``1d12h``) or, unless ``unit_required``, as a bare number
    of seconds (``30``); ValueError (which argparse reports against the flag) otherwise,
    negative durations included.

    ``unit_required`` where a bare number is not what the writer means: Go's
    ``metav1.Duration`` always writes a unit, and a certificate lifetime of ``720`` could be
    hours or seconds.

    The one duration parser of the project: flags, certificate lifetimes and the
    ``window`` of a metrics.k8s.io sample all come through here."""
    compact = str(text).strip().replace(" ", "")
    if _BARE_SECONDS.match(compact):
        if unit_required:
            raise ValueError(f"{text!r} has no unit (e.g. 5s, 500ms, 2m, 1h30m, 30d)")
        return float(compact)
    if unit_required and not compact:
        raise ValueError(f"{text!r} is not a duration (e.g. 5s, 500ms, 2m, 1h30m, 30d)")
    days = 0.0
    match = _DAYS.match(compact)
    if match:
        days, compact = float(match.group(1)) * 86400.0, compact[match.end():]
        if not compact:
            return days
    try:
        seconds = durationpy.from_str(compact).total_seconds()
    except (durationpy.DurationError, ValueError, TypeError):
        raise ValueError(f"{text!r} is not a duration (e.g. 5s, 500ms, 2m, 1h30m, 30d)") from None
    if seconds < 0 or compact.startswith(("-", "+")):
        raise ValueError(f"{text!r}: a duration must not be negative")
    return days + seconds


def doubling_delay(attempt: int, *, start: float, cap: float) -> float:
    """Seconds to wait after the ``attempt``-th failure in a row (1-based): start,
    2*start, 4*start ... capped; 0 before the first. One schedule for every doubling
    backoff (the Kube client's retries, the vkubelet's refusals and twin-namespace requests,
    the handback's node refusal)."""
    if attempt < 1:
        return 0.0
    # 2**n overflows nothing in Python but would be absurd past the cap: stop doubling.
    exponent = min(attempt - 1, 32)
    return min(cap, start * float(2**exponent))
