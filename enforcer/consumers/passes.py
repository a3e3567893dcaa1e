"""The pass loop the consumer loops share (consumer status, service continuity): one full
pass over every consumer whenever something changed, at most once per ``period`` (a burst
of events is one pass), at least once per ``resync``, and at a deadline no event announces
(a drain's grace, a heartbeat Lease going stale)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable


def run_passes(
    *,
    stopped: threading.Event,
    dirty: threading.Event,
    sync: Callable[[], None],
    period: float,
    resync: float,
    next_deadline: Callable[[], float | None],
    slack: float,
    log: logging.Logger,
    what: str,
) -> None:
    """Run ``sync`` until ``stopped``: after ``dirty`` is set, at most once per ``period``
    seconds; otherwise every ``resync`` seconds, or ``slack`` seconds after the wait
    ``next_deadline()`` names (seconds from the last pass, which computed it). A pass that raises is logged as ``what`` failing and
    retried at the next period: a bug in one pass must not end the loop."""
    last_pass = float("-inf")
    while not stopped.is_set():
        pending = next_deadline()
        dirty.wait(resync if pending is None else max(0.0, min(resync, pending + slack)))
        if stopped.is_set():
            return
        wait = last_pass + period - time.monotonic()
        if wait > 0 and stopped.wait(wait):
            return
        dirty.clear()
        last_pass = time.monotonic()
        try:
            sync()
        except Exception:
            log.exception("%s pass failed", what)
            dirty.set()


def wait_synced(stopped: threading.Event, synced: Callable[[], bool], still_waiting: Callable[[], None],
                *, warn_every: float = 30.0) -> bool:
    """Until ``synced()``, checking every 0.2 s and calling ``still_waiting()`` (a warning
    that says what is missing) every ``warn_every`` seconds; False if ``stopped`` first.
    A loop that decided from half-listed caches would act on what is not listed yet."""
    waited = 0.0
    while not synced():
        if stopped.wait(0.2):
            return False
        waited += 0.2
        if waited >= warn_every:
            waited = 0.0
            still_waiting()
    return True
