"""Pause Python's cyclic garbage collector while a request builds a large acyclic document.

Parsing a 5,000-node ExtenderArgs allocates about a million dicts, lists and strings. Each
700 new containers start a young collection, and as the survivors pile up the collector
runs full passes over everything alive: measured here, more than half of the CPU of
``orjson.loads`` on that payload was the collector walking objects that are freed by
reference counting a moment later anyway (JSON documents contain no cycles).

The pause is process-wide (``gc.disable``), so it is counted: overlapping requests keep it
paused until the last one leaves, then the collector is enabled again (if it was before)
and catches up on its next threshold. It is meant for calls that come one at a time, as
kube-scheduler's calls to its extender do (one scheduling cycle at a time); under
requests that overlap without pause the collector would stay off, so do not wrap cheap,
frequent calls in it.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off (reference counting still frees)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
