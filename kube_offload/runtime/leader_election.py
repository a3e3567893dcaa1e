"""Leader election through a coordination.k8s.io Lease, as client-go's leaderelection does.

Several replicas of a component (the vkubelet of one remote cluster, the enforcer) run;
only the holder of the Lease runs the loops that write. The others wait as standbys.

- *Pure core* (:func:`decide`, :func:`observe`, :class:`Timing`): what to do with the
  Lease as last read. Expiry is judged on this process's own monotonic clock from the
  moment it last SAW the record change (client-go's ``observedTime``), never from the
  ``renewTime`` another machine wrote: clocks of two hosts need not agree.
- *Thin I/O* (:class:`LeaderElector`): GET, then CREATE or a full UPDATE carrying the
  resourceVersion that was read. The API server refuses an update against a stale
  resourceVersion with 409 Conflict (and a second create with 409 AlreadyExists): that
  answer means another replica wrote first, so it won this round.

Timing (client-go's defaults): a leader renews every ``retry_period`` (2 s); if it has
not renewed for ``renew_deadline`` (10 s) it gives up; a standby takes over once it has
seen no change for ``lease_duration`` (15 s). ``renew_deadline < lease_duration`` is what
keeps two leaders apart: the old one stops before anyone may take over. On losing the
Lease the process starts over as a clean standby (``on_stopped_leading``: it execs
itself, where client-go users usually exit), with no half-stopped loop still writing.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from kube_offload.runtime.flags import add_flag, positive_duration
from kube_offload.runtime.kinds import LEASES
from kube_offload.times import format_micro_time

log = logging.getLogger("kube_offload.runtime.leader_election")

LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0

# In a pod the ServiceAccount's namespace; outside one (tests, a laptop) the charts' default.
SERVICEACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
FALLBACK_NAMESPACE = "kube-offload"


# --- the pure core -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def problem(self) -> str | None:
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            return "--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive"
        if self.renew_deadline >= self.lease_duration:
            return (
                f"--leader-elect-renew-deadline ({self.renew_deadline:g}s) must be shorter than "
                f"--leader-elect-lease-duration ({self.lease_duration:g}s): a leader must give up before a standby may take over"
            )
        if self.retry_period >= self.renew_deadline:
            return (
                f"--leader-elect-retry-period ({self.retry_period:g}s) must be shorter than "
                f"--leader-elect-renew-deadline ({self.renew_deadline:g}s): a leader needs more than one try to renew"
            )
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads of a Lease (its spec and resourceVersion)."""

    holder: str
    lease_duration: float
    transitions: int
    resource_version: str
    acquire_time: str = ""  # MicroTime text, kept as is on renewal


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet: create it holding it
    TAKE = "take"  # free or expired: update it to hold it (transitions + 1)
    RENEW = "renew"  # ours: update renewTime
    WAIT = "wait"  # someone else holds it and it has not expired


def observe(previous: LeaseRecord | None, previous_at: float, current: LeaseRecord | None, now: float) -> float:
    """When (on our monotonic clock) the Lease was last seen to change: ``now`` when
    ``current`` differs from ``previous``, else ``previous_at``."""
    if previous is None or current is None or current.resource_version != previous.resource_version:
        return now
    return previous_at


def decide(current: LeaseRecord | None, identity: str, observed_at: float, now: float) -> Action:
    """What ``identity`` does with the Lease as last read (``observed_at``: see :func:`observe`)."""
    if current is None:
        return Action.CREATE
    if current.holder == identity:
        return Action.RENEW
    if not current.holder:
        return Action.TAKE
    if now >= observed_at + current.lease_duration:
        return Action.TAKE
    return Action.WAIT


def lost(last_renewed: float, now: float, timing: Timing) -> bool:
    """A leader that has not renewed for the renew deadline gives up."""
    return now - last_renewed >= timing.renew_deadline


def lease_body(
    name: str, namespace: str, identity: str, action: Action, current: LeaseRecord | None, timing: Timing, now: datetime
) -> dict[str, Any]:
    """The full Lease to CREATE or UPDATE (with ``current``'s resourceVersion as precondition)."""
    stamp = format_micro_time(now)
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, int(round(timing.lease_duration))),
        "renewTime": stamp,
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if action is Action.CREATE or current is None:
        spec.update(acquireTime=stamp, leaseTransitions=0)
    else:
        metadata["resourceVersion"] = current.resource_version
        if action is Action.TAKE:
            spec.update(acquireTime=stamp, leaseTransitions=current.transitions + 1)
        else:
            spec["leaseTransitions"] = current.transitions
            if current.acquire_time:  # an UPDATE replaces the whole spec
                spec["acquireTime"] = current.acquire_time
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}




def default_identity() -> str:
    """Unique per process, readable in ``kubectl get lease``: the pod's name (hostname) and a
    random suffix, so a restarted process never mistakes its predecessor's Lease for its own."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    namespace = os.environ.get("POD_NAMESPACE", "")
    if namespace:
        return namespace
    try:
        with open(SERVICEACCOUNT_NAMESPACE_FILE, encoding="utf-8") as fh:
            return fh.read().strip() or FALLBACK_NAMESPACE
    except OSError:
        return FALLBACK_NAMESPACE


# --- flags ---------------------------------------------------------------------------------------
def add_leader_election_flags(parser: Any, component: str) -> None:
    def flag(name: str, **kw: Any) -> None:
        add_flag(parser, component, name, **kw)

    flag("--leader-elect", default=True, type=bool,
         help="hold a coordination.k8s.io Lease before running the loops that write, so that several "
              "replicas can run with one active (docs/high-availability.md); false: run at once")
    flag("--leader-elect-namespace", default="",
         help=f"namespace of the Lease; unset: $POD_NAMESPACE, the pod's namespace, else {FALLBACK_NAMESPACE}")
    flag("--leader-elect-lease-duration", default=f"{LEASE_DURATION:g}s", type=positive_duration,
         help="a standby takes over a Lease not renewed for this long")
    flag("--leader-elect-renew-deadline", default=f"{RENEW_DEADLINE:g}s", type=positive_duration,
         help="the leader exits when it could not renew for this long (shorter than the lease duration)")
    flag("--leader-elect-retry-period", default=f"{RETRY_PERIOD:g}s", type=positive_duration,
         help="how often the leader renews and a standby tries to acquire")


def timing_from_args(args: Any) -> Timing:
    return Timing(
        lease_duration=float(args.leader_elect_lease_duration),
        renew_deadline=float(args.leader_elect_renew_deadline),
        retry_period=float(args.leader_elect_retry_period),
    )


# --- the I/O edge ----------------------------------------------------------------------------------
class LeaderElector:
    """Runs the election in a daemon thread: ``on_started_leading`` once the Lease is ours,
    ``on_stopped_leading`` once it is lost (default: the process execs itself afresh, as a standby)."""

    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        timing: Timing = Timing(),
        identity: str | None = None,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kube_offload.runtime.kube import NO_RETRY, Kube

        # No retry inside a round: the loop itself tries again every retry period, and
        # a round must not outlast the renew deadline.
        self.api = Kube(api_client, retry=NO_RETRY)
        self.name = name
        self.namespace = namespace
        self.timing = timing
        self.identity = identity or default_identity()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading or _exit_process
        self._clock = clock
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._thread: threading.Thread | None = None

    # --- state for /readyz and the logs ---
    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    @property
    def holder(self) -> str:
        return self._observed.holder if self._observed else ""

    def describe(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def ready_problem(self) -> str | None:
        """None when leading; else why this replica does not work (a standby)."""
        if self.leading:
            return None
        holder = self.holder or "nobody yet"
        return f"standby: {self.describe()} is held by {holder} (this replica is {self.identity})"

    def alive_problem(self) -> str | None:
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "the leader election loop exited"
        return None

    # --- running ---
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop the loop; a leader hands the Lease back (holder empty) so that a standby
        takes over at once rather than after the lease duration."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timing.retry_period + 5)
        if release and self._leading.is_set():
            self._leading.clear()
            self._release()

    def _run(self) -> None:
        log.info("leader election: %s, this replica is %s; waiting to acquire", self.describe(), self.identity)
        while not self._stop.is_set():
            if self._try():
                break
            self._stop.wait(self.timing.retry_period)
        if self._stop.is_set():
            return
        self._leading.set()
        log.info("leader election: acquired %s as %s", self.describe(), self.identity)
        try:
            self._on_started()
        except Exception:
            log.exception("leader election: on_started_leading failed")
        last_renewed = self._clock()
        while not self._stop.wait(self.timing.retry_period):
            if self._try():
                last_renewed = self._clock()
                continue
            if self._observed is not None and self._observed.holder not in ("", self.identity):
                reason = f"{self._observed.holder} holds it now"
            elif lost(last_renewed, self._clock(), self.timing):
                reason = f"not renewed for {self.timing.renew_deadline:g}s"
            else:
                continue
            if self._stop.is_set():
                return
            self._leading.clear()
            log.error("leader election: lost %s (%s); stopping", self.describe(), reason)
            self._on_stopped()
            return

    def _try(self) -> bool:
        """One round: read, decide, write. True when we hold the Lease afterwards."""
        try:
            current = self._get()
        except Exception as exc:
            log.warning("leader election: cannot read %s: %s", self.describe(), _short(exc))
            return False
        now = self._clock()
        self._observed_at = observe(self._observed, self._observed_at, current, now)
        self._observed = current
        action = decide(current, self.identity, self._observed_at, now)
        if action is Action.WAIT:
            return False
        body = lease_body(self.name, self.namespace, self.identity, action, current, self.timing, datetime.now(timezone.utc))
        try:
            if action is Action.CREATE:
                written = self.api.create(LEASES, body, namespace=self.namespace)
            else:
                written = self.api.replace(LEASES, body, namespace=self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 409:
                log.info("leader election: %s was written by another replica first", self.describe())
            else:
                log.warning("leader election: cannot %s %s: %s", action.value, self.describe(), _short(exc))
            return False
        self._observed = _record(written)
        self._observed_at = self._clock()
        if action is Action.TAKE and current is not None and current.holder:
            log.info("leader election: took over %s from %s (not renewed for %gs)", self.describe(), current.holder, current.lease_duration)
        return True

    def _get(self) -> LeaseRecord | None:
        try:
            lease = self.api.get(LEASES, self.name, namespace=self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return _record(lease)

    def _release(self) -> None:
        try:
            current = self._get()
            if current is None or current.holder != self.identity:
                return
            body = lease_body(self.name, self.namespace, self.identity, Action.RENEW, current, self.timing, datetime.now(timezone.utc))
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            self.api.replace(LEASES, body, namespace=self.namespace)
            log.info("leader election: released %s", self.describe())
        except Exception as exc:  # the standby takes over after the lease duration instead
            log.warning("leader election: cannot release %s: %s", self.describe(), _short(exc))


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        lease_duration=float(spec.get("leaseDurationSeconds") or LEASE_DURATION),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion") or "",
        # The server's MicroTime as it sent it (six fraction digits): written back as is.
        acquire_time=spec.get("acquireTime") or "",
    )


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    return f"{status} {reason}" if status else str(exc)


def _exit_process() -> None:
    """Start over as a clean standby: no loop of ours may write once another replica may
    lead (client-go's OnStoppedLeading usually exits for the same reason).

    The process replaces itself (exec, same PID) rather than exiting: a leader loses the
    Lease mostly when its API server did not answer for ``renew_deadline``, and an exit
    would then wait out the container's restart back-off (or, run outside Kubernetes, stay
    down for good). Exec ends every thread and closes every socket (Python's descriptors
    are not inheritable), so what starts is the same as a restart. Exit status 1 if the
    exec itself fails."""
    logging.shutdown()
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    try:
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    except OSError:
        pass
    os._exit(1)
