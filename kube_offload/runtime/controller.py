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
import time
from typing import Any, Callable, Iterable

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.informer import MODIFIED
from kube_offload.runtime.kube import ApiError, object_key
from kube_offload.runtime.workqueue import ShutDown, WorkQueue


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
        # Key -> monotonic start of its reconcile in progress (metrics, liveness).
        self._running: dict[str, float] = {}
        self._running_lock = threading.Lock()
        rm.track_controller(self)

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    def watch(
        self,
        informer: Cache,
        key_func: Callable[[dict[str, Any]], Iterable[str] | str | None] | None = None,
        *,
        skip: Callable[[dict[str, Any] | None, dict[str, Any]], bool] | None = None,
        urgent: bool | Callable[[str, dict[str, Any] | None, dict[str, Any]], bool] = False,
    ) -> None:
        """Enqueue the key(s) ``key_func`` maps each event's object to (default: its own key).
        An update for which ``skip(old, new)`` is true enqueues nothing (e.g.
        kube_offload/runtime/predicates.py: a change of status only, for a loop that does
        not read status); adds, deletes and resyncs are never skipped. ``urgent`` (a bool,
        or ``urgent(event, old, new)``): the event's keys go to the queue's fast lane
        (:class:`WorkQueue`), for the progress of work already done, which must not wait
        behind a burst of new work."""

        def handler(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            if skip is not None and event == MODIFIED and old is not None and old is not new and skip(old, new):
                return
            hurry = urgent(event, old, new) if callable(urgent) else urgent
            for obj in (old, new):
                if obj is None:
                    continue
                keys = key_func(obj) if key_func else object_key(obj)
                if keys is None:
                    continue
                if isinstance(keys, str):
                    self.queue.add(keys, urgent=hurry)
                else:
                    for key in keys:
                        self.queue.add(key, urgent=hurry)

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
        started = time.monotonic()
        with self._running_lock:
            self._running[key] = started
        outcome = rm.OUTCOME_ERROR  # unless _reconcile_once says otherwise
        try:
            outcome = self._reconcile_once(key)
        finally:
            with self._running_lock:
                self._running.pop(key, None)
            rm.observe_reconcile(self.name, outcome, time.monotonic() - started)

    def _reconcile_once(self, key: str) -> str:
        try:
            self._reconcile(key)
        except Requeue as req:
            self.queue.forget(key)
            self.queue.add_after(key, req.after)
            return rm.OUTCOME_REQUEUE
        except PermanentError as exc:
            self.log.error("[%s] giving up: %s", key, exc)
            self.queue.forget(key)
            return rm.OUTCOME_PERMANENT
        except Exception as exc:
            failures = self.queue.failures(key)
            if failures >= self._max_retries:
                self.log.error("[%s] dropped after %d retries: %s", key, failures, exc)
                self.queue.forget(key)
                return rm.OUTCOME_DROPPED
            delay = self.queue.add_rate_limited(key)
            if isinstance(exc, ApiError):
                self.log.warning("[%s] %s; retry in %.2fs", key, exc, delay)
            else:
                self.log.exception("[%s] reconcile failed; retry in %.2fs", key, delay)
            return rm.OUTCOME_ERROR
        self.queue.forget(key)
        return rm.OUTCOME_SUCCESS

    # --- observability (kube_offload/runtime/metrics.py, kube_offload/runtime/health.py) ----------------
    def queue_figures(self) -> dict[str, float]:
        ready, delayed = self.queue.depths()
        with self._running_lock:
            starts = list(self._running.values())
        longest = time.monotonic() - min(starts) if starts else 0.0
        return {"depth": ready, "delayed": delayed, "in_flight": len(starts), "longest_running": longest}

    def problem(self, stuck_after: float) -> str | None:
        """Why this controller no longer works (a worker died, a reconcile has run longer
        than ``stuck_after`` seconds), or None. Not started yet is not a problem."""
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead and not self.queue.is_shut_down():
            return f"controller {self.name}: worker(s) {', '.join(dead)} exited"
        longest = self.queue_figures()["longest_running"]
        if longest > stuck_after:
            return f"controller {self.name}: a reconcile has been running for {longest:.0f}s (limit {stuck_after:.0f}s)"
        return None

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
