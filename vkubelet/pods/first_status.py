"""The deadlines of the local pods' first status writes held back (status.first_write_may_wait):
in memory, one per local pod key, from the first reconcile that could have written.

In memory is enough: the hold only folds two writes into one. A vkubelet that restarts
forgets its deadlines and holds a still-Pending pod's first write again, for at most
:data:`~vkubelet.pods.status.FIRST_WRITE_HOLD_SECONDS` more; nothing is lost, the next
reconcile writes what the remote pod shows then. An entry goes when the pod's status is
written, when the hold no longer applies, or when the local pod is gone, so the map holds
only pods whose remote pod is Pending right now.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class FirstWriteHolds:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self._deadlines: dict[str, float] = {}
        self._lock = threading.Lock()

    def left(self, key: str) -> float:
        """Seconds the first status write of ``key`` may still wait (0: write it now); the
        first call for a key starts its hold."""
        if self._seconds <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            deadline = self._deadlines.setdefault(key, now + self._seconds)
        return max(0.0, deadline - now)

    def forget(self, key: str) -> None:
        with self._lock:
            self._deadlines.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._deadlines)
