"""A de-duplicating, rate-limited work queue of object keys.

Semantics (the ones a level-triggered controller needs):
- a key waiting in the queue is held once however often it is added;
- a key being processed is never handed to a second worker; adding it meanwhile marks
  it dirty and it is queued again when the first worker calls ``done``;
- ``add_rate_limited`` retries with per-key exponential backoff, ``forget`` resets it;
- ``add_after`` delays an add (requeue-after); a key has at most one pending delayed add,
  the earliest asked for (as client-go's delaying queue): a key stuck in retry that keeps
  receiving events and resyncs does not grow one more timer chain per event;
- ``add(key, urgent=True)`` puts the key in a second lane that ``get`` empties first (a
  key already waiting in the normal lane moves up). A controller uses it for the
  progress of work it has already done (the vkubelet: a remote pod's status to mirror),
  so that a burst of new work (5,000 ShadowPods to create) does not hold every status
  update behind it: one FIFO lane made pods show Running only once the whole burst was
  created (issue 27). Delayed adds, retries and dirty re-adds keep the lane they had.
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
        # Two FIFO lanes. _queued maps each waiting key to its lane (True: urgent); an entry
        # in a lane's deque whose key is no longer waiting in that lane is stale (the key
        # moved up, or was handed out) and skipped when it surfaces.
        self._queue: deque[str] = deque()
        self._urgent: deque[str] = deque()
        self._queued: dict[str, bool] = {}
        self._processing: set[str] = set()
        # Keys added while being processed -> whether any of those adds was urgent.
        self._dirty: dict[str, bool] = {}
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

    def add(self, key: str, *, urgent: bool = False) -> None:
        with self._cond:
            if self._shutdown:
                return
            if key in self._processing:
                self._dirty[key] = self._dirty.get(key, False) or urgent
                return
            self._enqueue(key, urgent)

    def _enqueue(self, key: str, urgent: bool) -> None:
        """Queue ``key`` in its lane (caller holds the lock; the key is not processing)."""
        lane = self._queued.get(key)
        if lane is not None and (lane or not urgent):
            return  # waiting already, in a lane at least as fast
        self._queued[key] = urgent
        (self._urgent if urgent else self._queue).append(key)
        if len(self._queue) + len(self._urgent) > 2 * len(self._queued) + 64:
            self._compact_lanes()
        self._cond.notify()

    def _compact_lanes(self) -> None:
        self._queue = deque(k for k in self._queue if self._queued.get(k) is False)
        self._urgent = deque(k for k in self._urgent if self._queued.get(k) is True)

    def _pop_ready(self) -> str | None:
        """The next waiting key, urgent lane first; stale entries are dropped."""
        for lane, urgent in ((self._urgent, True), (self._queue, False)):
            while lane:
                key = lane.popleft()
                if self._queued.get(key) is urgent:
                    del self._queued[key]
                    return key
        return None

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
                key = self._pop_ready()
                if key is not None:
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
                self._enqueue(key, self._dirty.pop(key))

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queued) + len(self._waiting)

    def depths(self) -> tuple[int, int]:
        """(keys ready to be handed out, delayed adds not yet due), for metrics."""
        with self._cond:
            return len(self._queued), len(self._waiting)

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
                self._dirty.setdefault(key, False)
            else:
                self._enqueue(key, False)
