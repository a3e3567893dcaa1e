"""Reconcile loops: informers feed keys into a work queue, N workers call an idempotent
``reconcile(key)`` that re-reads the caches and converges.

A reconcile says what should happen next through its outcome:
- return normally: done, the key's backoff is reset;
- raise :class:`Requeue` (``after`` seconds): check again later, not an error;
- raise :class:`PermanentError`: log it, do not retry (the next event or resync will);
- anything else (an unreachable API server, a conflict): retry with per-key exponential
  backoff, at most ``max_retries`` times in a row, then drop until the next event/resync.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from kube_offload.informer import Informer
from kube_offload.kube import ApiError, object_key
from kube_offload.workqueue import ShutDown, WorkQueue


class Requeue(Exception):
    def __init__(self, after: float = 1.0, reason: str = "") -> None:
        super().__init__(reason or f"requeue after {after}s")
        self.after = after


class PermanentError(Exception):
    """The request cannot succeed as it stands; retrying would only repeat the failure."""


Reconcile = Callable[[str], None]


class Controller:
    def __init__(
        self,
        *,
        name: str,
        reconcile: Reconcile,
        workers: int = 2,
        max_retries: int = 12,
        logger: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.queue = WorkQueue()
        self._reconcile = reconcile
        self._workers = max(1, workers)
        self._max_retries = max_retries
        self._threads: list[threading.Thread] = []
        self.log = logger or logging.getLogger(f"kube_offload.{name}")

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    def watch(self, informer: Informer, key_func: Callable[[dict], Iterable[str] | str | None] | None = None) -> None:
        """Enqueue the key(s) ``key_func`` maps each event's object to (default: its own key)."""

        def handler(_event: str, old: dict | None, new: dict) -> None:
            for obj in (old, new):
                if obj is None:
                    continue
                keys = key_func(obj) if key_func else object_key(obj)
                if keys is None:
                    continue
                if isinstance(keys, str):
                    self.queue.add(keys)
                else:
                    for key in keys:
                        self.queue.add(key)

        informer.add_handler(handler)

    def start(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"{self.name}-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.queue.shutdown()

    def process_one(self, key: str) -> None:
        """Run one reconcile of ``key`` and apply the retry policy (also used by tests)."""
        try:
            self._reconcile(key)
        except Requeue as req:
            self.queue.forget(key)
            self.queue.add_after(key, req.after)
        except PermanentError as exc:
            self.log.error("[%s] giving up: %s", key, exc)
            self.queue.forget(key)
        except Exception as exc:
            failures = self.queue.failures(key)
            if failures >= self._max_retries:
                self.log.error("[%s] dropped after %d retries: %s", key, failures, exc)
                self.queue.forget(key)
                return
            delay = self.queue.add_rate_limited(key)
            if isinstance(exc, ApiError):
                self.log.warning("[%s] %s; retry in %.2fs", key, exc, delay)
            else:
                self.log.exception("[%s] reconcile failed; retry in %.2fs", key, delay)
        else:
            self.queue.forget(key)

    def _work(self) -> None:
        while True:
            try:
                key = self.queue.get()
            except ShutDown:
                return
            try:
                self.process_one(key)
            finally:
                self.queue.done(key)
