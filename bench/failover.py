"""Leader failover under load, for ``bench_scale.py --failover vkubelet|enforcer``: a
second replica of the component waits as a standby (started as the e2e test starts it,
kube_offload_harness.standby); once a given fraction of the burst's pods have ShadowPods,
the leader is killed with SIGKILL, and this thread times the handover from its side:

- ``handover_s``: kill -> the Lease's holderIdentity is the standby's (polled every
  POLL_SECONDS, so up to that much late);
- ``ready_s``: kill -> the standby's ``/readyz`` is 200 (leading, caches listed);
- ``webhook_s`` (enforcer): kill -> the ShadowPod webhook routed to the new leader, as the
  chart's Service does once it is Ready (the harness registers the webhook by URL);
- ``resumed_s``: kill -> the first ShadowPod created after the handover (the count rises
  above what it was when the Lease changed hands). Nothing creates ShadowPods in between:
  the vkubelet is dead, or the webhook has no endpoint. Later than ``ready_s`` by the
  vkubelet's informer sync, or by the backoff of its refused creations.

It never decides anything on time: what goes wrong (the leader was not running, the burst
finished before the kill) is reported as a problem; a slow handover is only a figure.

Imported by bench_scale.py (``sys.path[0]`` is this directory when it runs).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from kube_offload import constants as C
from kube_offload_harness import standby as ha
from kube_offload_harness.cluster import Environment, Topology
from kube_offload_harness.identities import RELEASE_NAMESPACE

COMPONENTS = ("vkubelet", "enforcer")
POLL_SECONDS = 0.5
READY_TIMEOUT = 300.0


@dataclass
class FailoverFigures:
    component: str
    fraction: float
    shadowpods_at_kill: int | None = None
    killed_at_s: float | None = None  # since the burst was applied
    handover_s: float | None = None
    ready_s: float | None = None
    webhook_s: float | None = None
    resumed_s: float | None = None
    shadowpods_at_handover: int | None = None
    lease_transitions: tuple[int, int] | None = None  # before, after
    problems: list[str] = field(default_factory=list)


class Failover(threading.Thread):
    """Kills the leader of ``component`` for ``topology``'s first remote during a burst."""

    def __init__(self, env: Environment, topology: Topology, component: str, *, pods: int, fraction: float,
                 namespace: str, log) -> None:
        super().__init__(name=f"failover-{component}", daemon=True)
        if component not in COMPONENTS:
            raise ValueError(f"--failover must be one of {', '.join(COMPONENTS)}")
        self.env, self.topology, self.component = env, topology, component
        self.spec = topology.remotes[0]
        self.local = env.cluster(topology.local)
        self.remote = env.cluster(self.spec)
        self.pods = pods
        self.threshold = max(1, int(pods * fraction))
        self.twin = f"{namespace}-{topology.local.cluster_id}"  # DefaultName mapping
        self.log = log
        self.figures = FailoverFigures(component=component, fraction=fraction)
        self.standby: ha.Standby | None = None
        self._burst_started = 0.0
        self.done = threading.Event()  # set by the burst when it converged or gave up

    # --- before the burst ---------------------------------------------------------------
    def prepare(self) -> None:
        """Start the standby and wait until it reports itself one (it never leads before the kill)."""
        if self.component == "vkubelet":
            self.standby = ha.start_vkubelet_standby(self.env, self.topology, self.spec)
        else:
            self.standby = ha.start_enforcer_standby(self.env, self.spec)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            code, text = ha.readyz(self.standby.health_port)
            if code == 503 and "standby" in text:
                self.log(f"{self.standby.name} is a standby: {text.strip().splitlines()[0] if text.strip() else ''}")
                return
            time.sleep(1)
        raise RuntimeError(f"{self.standby.name} did not report itself a standby within 120s")

    def begin(self, burst_started: float) -> None:
        self._burst_started = burst_started
        self.start()

    # --- during the burst ---------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a bench thread: report, never crash the run
            self.figures.problems.append(f"failover driver: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        figures = self.figures
        leader_name = ha.vkubelet_name(self.spec) if self.component == "vkubelet" else ha.enforcer_name(self.spec)
        record = self.env.processes.get(leader_name)
        if record is None or not record.running():
            figures.problems.append(f"{leader_name} was not running before the kill")
            return
        holder_before, transitions_before = self._lease()
        count = 0
        while not self.done.is_set():
            count = self._shadowpods()
            if count >= self.threshold:
                break
            time.sleep(POLL_SECONDS)
        else:
            figures.problems.append(f"the burst ended before {self.threshold} ShadowPods existed: the leader was never killed")
            return
        os.kill(record.pid, signal.SIGKILL)
        killed = time.monotonic()
        figures.shadowpods_at_kill = count
        figures.killed_at_s = killed - self._burst_started
        self.log(f"failover: kill -9 {leader_name} (pid {record.pid}) at {count} ShadowPods, "
                 f"{figures.killed_at_s:.1f}s into the burst")

        while time.monotonic() - killed < READY_TIMEOUT:
            holder, transitions = self._lease()
            if holder and holder != holder_before:
                figures.handover_s = time.monotonic() - killed
                figures.lease_transitions = (transitions_before, transitions)
                figures.shadowpods_at_handover = self._shadowpods()
                self.log(f"failover: Lease taken by {holder} after {figures.handover_s:.1f}s "
                         f"(transitions {transitions_before} -> {transitions})")
                break
            time.sleep(POLL_SECONDS)
        else:
            figures.problems.append(f"the standby did not take the Lease within {READY_TIMEOUT:.0f}s")
            return
        assert self.standby is not None
        while time.monotonic() - killed < READY_TIMEOUT:
            if ha.readyz(self.standby.health_port)[0] == 200:
                figures.ready_s = time.monotonic() - killed
                self.log(f"failover: new leader ready after {figures.ready_s:.1f}s")
                break
            time.sleep(POLL_SECONDS)
        else:
            figures.problems.append(f"the new leader was not ready within {READY_TIMEOUT:.0f}s")
            return
        if self.component == "enforcer":
            ha.route_shadowpod_webhook(self.env, self.spec, self.standby.webhook_port)
            figures.webhook_s = time.monotonic() - killed
            self.log(f"failover: ShadowPod webhook routed to the new leader after {figures.webhook_s:.1f}s")
        stalled = figures.shadowpods_at_handover or 0
        while stalled < self.pods and not self.done.is_set() and time.monotonic() - killed < READY_TIMEOUT:
            if self._shadowpods() > stalled:
                figures.resumed_s = time.monotonic() - killed
                self.log(f"failover: ShadowPods created again after {figures.resumed_s:.1f}s (stalled at {stalled})")
                break
            time.sleep(POLL_SECONDS)

    def _lease(self) -> tuple[str, int]:
        if self.component == "vkubelet":
            cluster, name = self.local, f"{C.VKUBELET_LEADER_LEASE_PREFIX}{self.spec.cluster_id}"
        else:
            cluster, name = self.remote, C.ENFORCER_LEADER_LEASE
        out = cluster.kubectl("get", "lease", "-n", RELEASE_NAMESPACE, name, "-o",
                              "jsonpath={.spec.holderIdentity}{\"\\t\"}{.spec.leaseTransitions}", check=False).stdout
        holder, _, transitions = out.partition("\t")
        return holder.strip(), int(transitions) if transitions.strip().isdigit() else 0

    def _shadowpods(self) -> int:
        out = self.remote.kubectl("get", "shadowpods", "-n", self.twin, "--no-headers", "-o", "name", check=False,
                                  timeout=120).stdout
        return sum(1 for line in out.splitlines() if line.strip())
