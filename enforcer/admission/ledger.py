"""ShadowPods admitted but not yet in the informer's cache: what closes the window in
which two concurrent creates could both take a consumer's last slot.

The webhook computes a consumer's usage from the ShadowPod informer, which learns of an
admitted object only after the apiserver has stored it and the watch has delivered it
(milliseconds to seconds). Two admissions in that window would both see the old usage.
So every admission that adds requests records them here, under the same lock as the
quota decision, and every decision counts what is recorded and not yet cached.

An entry is *settled* (dropped) once the informer delivers that object (same UID) at the
admitted generation or later, or its deletion - seen as an event (:meth:`Ledger.on_event`,
an informer handler), because an object created and deleted between two admissions is
never in the cache when the next one looks - so it is never counted twice for long, nor
after it is gone; and it *expires*
after ``ttl`` seconds in any case, which covers an admission that never became an object
(a later webhook or the apiserver refused it, or it was deleted before the watch saw it).
Until then it is counted: erring towards refusing, never towards over-admitting.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kube_offload.runtime.informer import DELETED
from kube_offload.resources import ResourceList

DEFAULT_TTL_SECONDS = 60.0

CacheLookup = Callable[[str], "Mapping[str, Any] | None"]
"""``namespace/name`` -> the informer's cached ShadowPod, or None."""


@dataclass
class Reservation:
    key: str  # namespace/name
    consumer_id: str
    uid: str
    generation: int
    requests: ResourceList  # what the admission added (positive amounts only)
    expires: float
    token: int = field(default=0)
    slice: str = ""  # the ShadowPod's resource slice (kube-offload.io/slice), if any


class Ledger:
    def __init__(self, cached: CacheLookup, *, ttl: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._cached = cached
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[int, Reservation] = {}
        self._next_token = 1
        # Held by the webhook across "read usage, decide, reserve": that sequence must be
        # atomic for two admissions of one consumer. Re-entrant so the methods below can
        # be called with it held.
        self.lock = threading.RLock()

    def pending(self, consumer_id: str, slice_name: str | None = None) -> ResourceList:
        """Sum of the unsettled, unexpired reservations of ``consumer_id`` (of its slice
        ``slice_name`` only, when given).

        Call this *before* reading the informer: an object that lands in the cache in
        between is then counted twice for one decision (a refusal at worst), never zero
        times."""
        total: ResourceList = {}
        with self.lock:
            self._prune()
            for entry in self._entries.values():
                if entry.consumer_id != consumer_id or (slice_name is not None and entry.slice != slice_name):
                    continue
                for name, amount in entry.requests.items():
                    total[name] = total.get(name, 0) + amount
        return total

    def reserve(
        self, *, key: str, consumer_id: str, uid: str, generation: int, requests: Mapping[str, int], slice_name: str = ""
    ) -> int | None:
        """Record an admission; returns a token for :meth:`release`, or None when it adds
        nothing (a decrease is not credited before the cache shows it)."""
        positive = {name: amount for name, amount in requests.items() if amount > 0}
        if not positive:
            return None
        with self.lock:
            token = self._next_token
            self._next_token += 1
            self._entries[token] = Reservation(
                key=key,
                consumer_id=consumer_id,
                uid=uid,
                generation=generation,
                requests=positive,
                expires=self._clock() + self._ttl,
                token=token,
                slice=slice_name,
            )
            return token

    def on_event(self, event: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        """Informer handler: settle the entries this ShadowPod event answers."""
        meta = new.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self.lock:
            for token, entry in list(self._entries.items()):
                if entry.key == key and entry.uid == uid and (event == DELETED or _generation(meta) >= entry.generation):
                    del self._entries[token]

    def release(self, token: int | None) -> None:
        """Forget a reservation whose admission was refused after all (the dry run)."""
        if token is None:
            return
        with self.lock:
            self._entries.pop(token, None)

    def __len__(self) -> int:
        with self.lock:
            self._prune()
            return len(self._entries)

    def _prune(self) -> None:
        now = self._clock()
        for token, entry in list(self._entries.items()):
            if now >= entry.expires or self._settled(entry):
                del self._entries[token]

    def _settled(self, entry: Reservation) -> bool:
        if not entry.uid:
            return False  # cannot tell which object it is: let it expire
        cached = self._cached(entry.key)
        meta = (cached or {}).get("metadata") or {}
        return meta.get("uid") == entry.uid and _generation(meta) >= entry.generation


def _generation(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("generation") or 0)
    except (TypeError, ValueError):
        return 0
