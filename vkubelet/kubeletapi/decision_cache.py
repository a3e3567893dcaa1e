"""A small, bounded, thread-safe cache of authentication and authorization decisions,
each kept for a time that depends on the decision.

Why cache at all: the local apiserver calls the kubelet API once per ``kubectl logs`` or
``exec``, and a followed log or a shell is one request, but tools that poll (``kubectl logs``
in a loop, a dashboard) would otherwise cost one TokenReview and one SubjectAccessReview
per call on the apiserver. Why two lifetimes: an allowed answer is what makes a request
work and may live a little longer; a denied one is kept short so that a user granted
access a moment ago is not refused for long (the kubelet's own defaults are 2 minutes
for tokens, 5 minutes allowed / 30 seconds denied for authorization). Why bounded: keys
come from callers (tokens, user names), and a stream of distinct ones must not grow the
process without limit; the least recently used entry goes first.

Failed lookups (the apiserver unreachable, RBAC missing) are never cached: the next
request tries again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

DEFAULT_MAX_ENTRIES = 4096


@dataclass(frozen=True)
class CacheTTL:
    """Seconds an answer is kept: ``allowed`` for a positive one, ``denied`` for a
    negative one; 0 disables caching of that kind."""

    allowed: float
    denied: float

    def for_outcome(self, positive: bool) -> float:
        return self.allowed if positive else self.denied


class DecisionCache(Generic[V]):
    def __init__(
        self,
        ttl: CacheTTL,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """(True, value) for a live entry, (False, None) for none or an expired one."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            expires, value = entry
            if expires <= now:
                del self._entries[key]
                return False, None
            self._entries.move_to_end(key)
            return True, value

    def put(self, key: Hashable, value: V, *, positive: bool) -> None:
        ttl = self.ttl.for_outcome(positive)
        if ttl <= 0:
            return
        expires = self._clock() + ttl
        with self._lock:
            self._entries[key] = (expires, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
