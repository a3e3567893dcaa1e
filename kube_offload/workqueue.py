"""A de-duplicating, rate-limited work queue of object keys.

Semantics (the ones a level-triggered controller needs):
- a key waiting in the queue is held once however often it is added;
- a key being processed is never handed to a second worker; adding it meanwhile marks
  it dirty and it is queued again when the first worker calls ``done``;
- ``add_rate_limited`` retries with per-key exponential backoff, ``forget`` resets it;
- ``add_after`` delays an add (requeue-after).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and drained."""


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.05, max_delay: float = 30.0) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._delayed: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._cond = threading.Condition()
        self._shutdown = False

    def add(self, key: str) -> None:
        with self._cond:
            if self._shutdown:
                return
            if key in self._processing:
                self._dirty.add(key)
                return
            if key in self._queued:
                return
            self._queued.add(key)
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._counter), key))
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self._base_delay * (2**failures), self._max_delay)
        self.add_after(key, delay)
        return delay

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> str:
        """Next key to process; blocks. Raises ShutDown when shut down, TimeoutError on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    raise ShutDown()
                wait = None
                if self._delayed:
                    wait = max(0.0, self._delayed[0][0] - time.monotonic())
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError()
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._delayed)

    def depths(self) -> tuple[int, int]:
        """(keys ready to be handed out, delayed adds not yet due), for metrics."""
        with self._cond:
            return len(self._queue), len(self._delayed)

    def is_shut_down(self) -> bool:
        with self._cond:
            return self._shutdown

    def _promote_due(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
