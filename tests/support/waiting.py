"""One poller for the tiers that wait on real clusters (e2e, real node)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, what: str = "condition", timeout: float = 60, interval: float = 0.5) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail the test
    naming ``what`` and the last value otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
