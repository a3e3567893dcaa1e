"""A de-duplicating, rate-limited work queue of object keys.

Semantics (the ones a level-triggered controller needs):
- a key waiting in the queue is held once however often it is added;
- a key being processed is never handed to a second worker; adding it meanwhile marks
  it dirty and it is queued again when the first worker calls ``done``;
- ``add_rate_limited`` retries with per-key exponential backoff, ``forget`` resets it;
- ``add_after`` delays an add (requeue-after); a key has at most one pending delayed add,
  the earliest asked for (as client-go's delaying queue): a key stuck in retry that keeps
  receiving events and resyncs does not grow one more timer chain per event.
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
        # Heap of (deadline, seq, key); an entry is live only while _waiting[key] holds its
        # (deadline, seq): moving a key earlier pushes a new entry and leaves the old one
        # to be skipped when it surfaces (lazy deletion keeps add_after O(log n)).
        self._delayed: list[tuple[float, int, str]] = []
        self._waiting: dict[str, tuple[float, int]] = {}
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
            deadline = time.monotonic() + delay
            pending = self._waiting.get(key)
            if pending is not None and pending[0] <= deadline:
                return  # already due as early or earlier
            entry = (deadline, next(self._counter))
            self._waiting[key] = entry
            heapq.heappush(self._delayed, (*entry, key))
            if len(self._delayed) > 2 * len(self._waiting) + 64:
                self._compact()
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay: float = min(self._base_delay * (2**failures), self._max_delay)
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
                if self._delayed:  # the head is live: _promote_due dropped stale heads
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
            return len(self._queue) + len(self._waiting)

    def depths(self) -> tuple[int, int]:
        """(keys ready to be handed out, delayed adds not yet due), for metrics."""
        with self._cond:
            return len(self._queue), len(self._waiting)

    def is_shut_down(self) -> bool:
        with self._cond:
            return self._shutdown

    def pending_deadline(self, key: str) -> float | None:
        """Monotonic time the key's delayed add is due (None: none pending)."""
        with self._cond:
            pending = self._waiting.get(key)
            return pending[0] if pending else None

    def _compact(self) -> None:
        self._delayed = [(d, seq, key) for d, seq, key in self._delayed if self._waiting.get(key) == (d, seq)]
        heapq.heapify(self._delayed)

    def _promote_due(self) -> None:
        now = time.monotonic()
        # Stale heads (superseded by an earlier deadline) are dropped whatever their time,
        # so the head that get() sleeps on is always a live one.
        while self._delayed and (self._delayed[0][0] <= now or self._waiting.get(self._delayed[0][2]) != self._delayed[0][:2]):
            deadline, seq, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) != (deadline, seq):
                continue  # superseded by an earlier add_after
            del self._waiting[key]
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
