"""One process manager for the long-running components (the vkubelet, the enforcer): what
runs, in which order, and how the process stops.

A component *declares* its loops (:class:`Loop`: a name, whether it needs the leader
Lease, the informers it needs, a ``run(stop_event)`` callable) and the informers the
process shares; :meth:`Manager.run` does the rest, the same way for every component:

- **health and metrics**: ``/healthz``, ``/readyz`` and ``/metrics`` on the health port
  (kube_offload/runtime/health.py), served from before the election to the end.
  *healthz*: the election loop and every controller are alive, plus the component's
  checks. *readyz*: leading (with an election), every loop's informers listed and every
  loop started (one check, ``informers``), plus the component's checks.
- **leader election** (optional; kube_offload/runtime/leader_election.py): a standby
  starts no loop that needs the Lease and none of the shared informers that do (no watch
  load on the API server). Losing the Lease is the elector's business: it restarts the
  process as a clean standby.
- **start-after-sync**: a loop's ``run`` is called only once every informer it needs has
  listed and every loop it comes ``after`` has started; loops that are due at the same
  moment start in the order they were declared.
- **stop order**: SIGTERM/SIGINT (or :meth:`Manager.stop`) stops the loops one at a time in
  the reverse of the order they started, each given what is left of one grace period;
  then the shared informers, then the election (a leader hands its Lease back at once),
  then the health port. A loop still running when the grace period ends is left behind
  (every thread here is a daemon: it ends with the process).
- **a loop that fails** (its ``run`` raises) stops the whole process in that same order,
  and :meth:`Manager.run` returns 1: half a component must not keep running (a reconcile
  loop gone while its health says ok), as controller-runtime's manager stops when one of
  its runnables returns an error. A loop that returns while not told to stop has simply
  finished; one that raises once told to stop is logged (``stop failed``) and the stop
  goes on.

The manager knows nothing of Kubernetes objects: an informer is anything with ``name``
and ``has_synced()`` (and ``start()``/``stop()`` when the manager owns it), so its tests
run with real threads and sockets and no API server.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from prometheus_client import CollectorRegistry

from kube_offload.runtime import health
from kube_offload.runtime import metrics as rm

log = logging.getLogger("kube_offload.runtime.manager")

# Long enough for a recorder to write its last Events and the node's loops to finish a
# probe (each bounded by a few seconds), short of the 30 s the charts' pods are given.
GRACE_PERIOD = 10.0
# How often the manager looks for loops that are due, and repeats a waiting loop's warning.
POLL_SECONDS = 0.1
WAITING_WARNING_SECONDS = 30.0

EXIT_OK = 0
EXIT_LOOP_FAILED = 1


class Synced(Protocol):
    name: str

    def has_synced(self) -> bool: ...


class Startable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class Elector(Protocol):
    """What the manager needs of kube_offload.runtime.leader_election.LeaderElector."""

    @property
    def leading(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def ready_problem(self) -> str | None: ...

    def alive_problem(self) -> str | None: ...


@dataclass(frozen=True)
class Loop:
    """One unit of work of a component, as declared to the manager.

    ``run(stop)`` does the work and returns once ``stop`` is set (after cleaning up what
    it started); raising stops the process. ``informers`` must have listed before ``run``
    is called; ``readiness_informers`` are caches the loop starts and waits for itself,
    which ``/readyz`` waits for too. ``after``: names of loops that must have started
    first (e.g. so that their first lists are not slowed down by this one's).
    ``waiting_message``: logged every 30 s while the loop waits for its informers (say
    what is likely missing); ``logger``: where the loop's start and stop lines go."""

    name: str
    run: Callable[[threading.Event], None]
    needs_leader: bool = True
    informers: Sequence[Synced] = ()
    readiness_informers: Sequence[Synced] = ()
    after: Sequence[str] = ()
    waiting_message: str = ""
    logger: logging.Logger = field(default=log, compare=False)


def serve(start: Callable[[], None], stop: Callable[[], None]) -> Callable[[threading.Event], None]:
    """``run`` for something with its own threads: ``start()``, wait to be told to stop, ``stop()``."""

    def run(stop_event: threading.Event) -> None:
        start()
        try:
            stop_event.wait()
        finally:
            stop()

    return run


@dataclass
class _Running:
    loop: Loop
    stop: threading.Event
    thread: threading.Thread


class Manager:
    """Build it (it binds the health port: :class:`~kube_offload.runtime.health.HealthSetupError`
    names the flag), declare informers, loops and checks, then :meth:`run` until stopped."""

    def __init__(
        self,
        *,
        health_bind: str,
        elector: Elector | None = None,
        grace_period: float = GRACE_PERIOD,
        logger: logging.Logger = log,
        health_flag: str = health.FLAG,
    ) -> None:
        self.elector = elector
        self.grace_period = grace_period
        self.log = logger
        self._loops: list[Loop] = []
        self._informers: list[tuple[Startable, bool]] = []
        self._live: list[health.Check] = []
        self._ready: list[health.Check] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._running: list[_Running] = []  # in start order
        self._started_informers: list[Startable] = []
        self._failed: list[str] = []
        self._leading_seen = False
        self._stopping_note = ""
        self._caches_check = health.caches_check(self._readiness_caches)
        self.health = health.HealthServer(health_bind, live=[], ready=[], registries=[rm.REGISTRY], flag=health_flag)
        rm.track_gc_pauses()

    # --- declarations ------------------------------------------------------------------------
    def add_informer(self, informer: Startable, *, needs_leader: bool = True) -> None:
        """An informer (or a set of them) the process shares: started before the loops that
        may need it (after the election when ``needs_leader``), stopped after every loop."""
        self._informers.append((informer, needs_leader))

    def add_loop(self, loop: Loop) -> None:
        if any(known.name == loop.name for known in self._loops):
            raise ValueError(f"two loops named {loop.name!r}: loop names must be unique")
        unknown = [name for name in loop.after if all(known.name != name for known in self._loops)]
        if unknown:
            raise ValueError(f"loop {loop.name!r} comes after {', '.join(unknown)}, which must be declared before it")
        self._loops.append(loop)

    def add_live_check(self, check: health.Check) -> None:
        self._live.append(check)

    def add_ready_check(self, check: health.Check) -> None:
        self._ready.append(check)

    def add_registry(self, registry: CollectorRegistry) -> None:
        """Serve ``registry``'s series on ``/metrics`` too (beside the process registry).
        The health server holds its own list: append there, or a registry added after the
        manager was built (the enforcer's webhook series) is never served."""
        self.health.registries.append(registry)

    # --- state -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.health.port

    def started(self) -> list[str]:
        """Names of the loops started so far, in start order."""
        with self._lock:
            return [r.loop.name for r in self._running]

    @property
    def was_standby(self) -> bool:
        """True after :meth:`run` when this replica never led (an election was configured)."""
        return self.elector is not None and not self._leading_seen

    # --- signals -----------------------------------------------------------------------------
    def handle_signals(self, note: str = "") -> None:
        """SIGTERM and SIGINT stop the manager (in order). Call from the main thread, as
        early as the process may be told to stop; ``note`` ends the log line."""
        self._stopping_note = note

        def on_signal(signum: int, _frame: object) -> None:
            self.log.info("received %s; stopping%s", signal.Signals(signum).name, self._stopping_note)
            self._stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def stop(self) -> None:
        """Ask :meth:`run` to stop (from any thread)."""
        self._stop.set()

    # --- running -----------------------------------------------------------------------------
    def run(self) -> int:
        """Serve health, elect, start the loops as they become due, and on stop (signal,
        :meth:`stop`, a failed loop) stop everything in reverse order. Returns the exit
        code: 0, or 1 when a loop failed."""
        self._assemble_health()
        self.health.start()  # /healthz answers at once, /readyz once leading and the caches listed
        if self.elector is not None:
            self.elector.start()
        try:
            self._schedule()
        finally:
            self._shutdown()
        return EXIT_LOOP_FAILED if self._failed else EXIT_OK

    def _assemble_health(self) -> None:
        live: list[health.Check] = []
        ready: list[health.Check] = []
        if self.elector is not None:
            live.append(health.Check("leader-election", self.elector.alive_problem))
            ready.append(health.Check("leader-election", self.elector.ready_problem))
        live += self._live
        live.append(health.controllers_check())
        ready.append(health.Check("informers", self._informers_problem))
        ready += self._ready
        self.health.live = live
        self.health.ready = ready

    def _readiness_caches(self) -> list[Synced]:
        return [inf for loop in self._loops for inf in (*loop.informers, *loop.readiness_informers)]

    def _informers_problem(self) -> str | None:
        # One check for both halves of start-after-sync (the check's name and lines are
        # what probes and the docs know): the caches, then the loops they hold back,
        # which start within a poll of their caches.
        problem = self._caches_check.run()
        if problem:
            return problem
        started = set(self.started())
        waiting = [loop.name for loop in self._loops if loop.name not in started]
        return f"synced; loop(s) not started yet: {', '.join(waiting)}" if waiting else None

    def _leading(self) -> bool:
        if self.elector is None:
            return True
        if self.elector.leading:
            self._leading_seen = True
            return True
        return False

    def _schedule(self) -> None:
        pending = list(self._loops)
        warn_at: dict[str, float] = {}  # from when each loop's turn came (leading, after its predecessors)
        self._start_informers(needs_leader=False)
        while not self._stop.is_set():
            leading = self._leading()
            if leading:
                self._start_informers(needs_leader=True)
            for loop in list(pending):
                if loop.needs_leader and not leading:
                    continue
                started = set(self.started())
                if any(name not in started for name in loop.after):
                    continue
                if loop.name not in warn_at:
                    warn_at[loop.name] = time.monotonic() + WAITING_WARNING_SECONDS
                    if loop.informers:
                        loop.logger.info("%s: waiting for caches", loop.name)
                if not all(inf.has_synced() for inf in loop.informers):
                    if time.monotonic() >= warn_at[loop.name]:
                        warn_at[loop.name] += WAITING_WARNING_SECONDS
                        missing = ", ".join(sorted(i.name for i in loop.informers if not i.has_synced()))
                        loop.logger.warning("%s", loop.waiting_message or f"{loop.name}: still waiting for caches: {missing}")
                    continue
                self._start_loop(loop)
                pending.remove(loop)
            # A timed wait keeps the main thread responsive to signals.
            self._stop.wait(POLL_SECONDS if pending else 1.0)

    def _start_informers(self, *, needs_leader: bool) -> None:
        for informer, leader_only in self._informers:
            if leader_only == needs_leader and not any(informer is s for s in self._started_informers):
                informer.start()
                self._started_informers.append(informer)

    def _start_loop(self, loop: Loop) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=self._run_loop, args=(loop, stop), name=loop.name, daemon=True)
        with self._lock:
            self._running.append(_Running(loop, stop, thread))
        thread.start()
        loop.logger.info("%s: started", loop.name)

    def _run_loop(self, loop: Loop, stop: threading.Event) -> None:
        try:
            loop.run(stop)
        except BaseException:
            if stop.is_set():  # failed while stopping: the process stops anyway
                loop.logger.exception("%s: stop failed", loop.name)
                return
            loop.logger.exception("%s: failed; stopping the process", loop.name)
            with self._lock:
                self._failed.append(loop.name)
            self._stop.set()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.grace_period
        with self._lock:
            running = list(self._running)
        for entry in reversed(running):
            entry.stop.set()
            entry.thread.join(max(0.0, deadline - time.monotonic()))
            if entry.thread.is_alive():
                entry.loop.logger.warning(
                    "%s: still stopping after the %gs grace period; left behind", entry.loop.name, self.grace_period
                )
        # Informer.stop closes each watch's response; with an SSL socket that another thread
        # is blocked reading, close() can wait until the server sends something (up to the
        # watch timeout). Informer threads are daemons: a shutdown must not hang on them.
        stopper = threading.Thread(target=self._stop_informers, name="stop-informers", daemon=True)
        stopper.start()
        stopper.join(max(0.0, deadline - time.monotonic()))
        if self.elector is not None:
            self.elector.stop()  # after the loops stopped: hands the Lease to a standby at once
        self.health.stop()

    def _stop_informers(self) -> None:
        for informer in reversed(self._started_informers):
            try:
                informer.stop()
            except Exception:
                log.exception("stopping an informer failed")
