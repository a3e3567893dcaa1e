"""CPU and memory usage of the offloaded pods, with the cumulative CPU counters a kubelet
serves, built from the remote cluster's ``metrics.k8s.io`` samples (pure: no I/O).

A kubelet reads cumulative counters (core-seconds since the container started) from the
container runtime, and metrics-server derives usage rates from two readings. The remote
cluster's ``metrics.k8s.io`` API gives the opposite: for each container, the *average*
usage over a window (``usage.cpu`` over ``window`` ending at ``timestamp``) and the
current working set. To serve ``/metrics/resource`` and ``/stats/summary`` the virtual
kubelet integrates those averages back into counters, one per local container:

* the first sample of a container opens its counter at ``timestamp - window`` with
  ``rate × window`` core-nanoseconds (exact: that is what an average over the window
  means), and at least one (an idle container's rate is 0, and metrics-server drops a
  pod any of whose counters reads 0, as no kubelet's ever does), and that moment is reported as the container's ``startTime``: the origin where
  the counter was zero, which is what metrics-server assumes of a start time;
* each later sample with a newer timestamp adds ``rate × (timestamp - previous
  timestamp)``. When samples tile the time line (the remote window equals the sampling
  period) this is exact; after a gap (missed samples, a remote metrics-server restart) the
  newest average stands for the whole gap;
* a sample whose timestamp is not newer changes nothing (the remote API had nothing new);
* the counters are keyed by the *local* pod's UID and the container name, so they stay
  monotonic when the enforcer replaces the remote pod (same local pod, new remote pod);
  a vkubelet restart starts them again, with a later ``startTime``, which metrics-server
  reads as a restarted container rather than as a counter that went backwards.

The virtual node's figures are the sums over the offloaded pods (the virtual node has no
usage of its own: it is a view of this consumer's pods in the remote cluster, not of the
remote nodes, whose other tenants' usage is none of the consumer's business): working set
and current rate over the pods with a fresh sample; its cumulative counter is the sum of
every counter ever kept, those of pods that have gone included, so it never decreases.

A pod whose samples stop (gone from the remote metrics API) is no longer reported once its
last new sample is older than ``stale_after`` seconds (local clock), and its counters are
dropped when the local pod leaves the node.

A pod that runs but has no sample yet (the remote metrics-server samples every 15 s or so,
we every ``--kubelet-metrics-interval``) is in ``/stats/summary`` at once, as on a kubelet,
which lists every running pod: :meth:`UsageLedger.snapshot` given the ``running`` pods
adds those without any counter with zero usage at ``now`` (not to the node's figures, and
not to ``/metrics/resource``, where metrics-server would read a zero counter as a broken
pod and drop it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kube_offload.resources import QuantityError, parse_quantity, parse_quantity_nano
from kube_offload.times import parse_duration, parse_time

NANO = 1_000_000_000
# How long a pod's last new sample counts as current (local clock): a few remote
# metric resolutions (15 s by default) and sampling periods, so one missed round does not
# make a pod vanish from `kubectl top`, but a pod the remote stopped measuring does.
DEFAULT_STALE_AFTER = 90.0

# The least a counter opens with (UsageLedger.record): a started container has used CPU.
MIN_CORE_NANOSECONDS = 1


@dataclass(frozen=True)
class PodRef:
    """The local pod a sample is about (the remote pod's name is never exported)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ContainerSample:
    name: str
    cpu_nanocores: int  # average over the sample's window
    memory_bytes: int  # working set at the sample's timestamp


@dataclass(frozen=True)
class PodSample:
    """One ``PodMetrics`` item of the remote metrics API, mapped to its local pod."""

    pod: PodRef
    timestamp: float  # seconds since the epoch (remote clock)
    window: float  # seconds
    containers: tuple[ContainerSample, ...]


class SampleError(ValueError):
    """A PodMetrics item that cannot be read (the message says which field)."""


def parse_timestamp(text: str) -> float:
    """RFC 3339 (``2026-11-23T10:00:00Z``, fractions allowed) -> seconds since the epoch."""
    try:
        return parse_time(text).timestamp()
    except ValueError:
        raise SampleError(f"timestamp {text!r} is not an RFC 3339 time") from None


def parse_window(text: str) -> float:
    """A Go duration as metav1.Duration serializes it (``15.003s``, ``1m0.5s``, ``500ms``)
    -> seconds; Go always writes a unit, so a bare number is not its output."""
    try:
        return parse_duration(text, unit_required=True)
    except ValueError:
        raise SampleError(f"window {text!r} is not a duration") from None


def pod_sample(item: Mapping[str, Any], pod: PodRef) -> PodSample:
    """A remote ``PodMetrics`` object as a :class:`PodSample` of local pod ``pod``."""
    where = f"PodMetrics {(item.get('metadata') or {}).get('namespace')}/{(item.get('metadata') or {}).get('name')}"
    try:
        containers = []
        for container in item.get("containers") or []:
            usage = container.get("usage") or {}
            containers.append(ContainerSample(
                name=str(container["name"]),
                cpu_nanocores=max(0, parse_quantity_nano(usage.get("cpu", "0"))),
                memory_bytes=max(0, parse_quantity(usage.get("memory", "0")) // 1000),
            ))
        return PodSample(
            pod=pod,
            timestamp=parse_timestamp(item.get("timestamp") or ""),
            window=parse_window(item.get("window") or "0s"),
            containers=tuple(sorted(containers, key=lambda c: c.name)),
        )
    except (KeyError, QuantityError, SampleError) as exc:
        raise SampleError(f"{where}: {exc}") from None


@dataclass
class Counter:
    """One container's integrated CPU time and latest readings."""

    start: float  # where the counter was 0 (seconds since the epoch)
    core_nanoseconds: int
    timestamp: float  # of the last sample integrated
    cpu_nanocores: int
    memory_bytes: int
    updated_at: float  # local clock: when a newer sample last arrived


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    start: float
    timestamp: float
    cpu_nanocores: int
    core_nanoseconds: int
    memory_bytes: int


@dataclass(frozen=True)
class PodUsage:
    pod: PodRef
    containers: tuple[ContainerUsage, ...]

    @property
    def start(self) -> float:
        return min(c.start for c in self.containers)

    @property
    def timestamp(self) -> float:
        return max(c.timestamp for c in self.containers)

    @property
    def cpu_nanocores(self) -> int:
        return sum(c.cpu_nanocores for c in self.containers)

    @property
    def core_nanoseconds(self) -> int:
        return sum(c.core_nanoseconds for c in self.containers)

    @property
    def memory_bytes(self) -> int:
        return sum(c.memory_bytes for c in self.containers)


@dataclass(frozen=True)
class NodeUsage:
    start: float
    timestamp: float | None  # None while no pod has a current sample
    cpu_nanocores: int
    core_nanoseconds: int
    memory_bytes: int


@dataclass(frozen=True)
class RunningPod:
    """A local pod whose status shows containers running: ``containers`` is
    ``(name, started at)`` of each."""

    pod: PodRef
    containers: tuple[tuple[str, float], ...]


def unsampled_usage(running: RunningPod, now: float) -> PodUsage:
    """Zero usage of a running pod without a sample yet, measured ``now``."""
    return PodUsage(
        running.pod,
        tuple(
            ContainerUsage(name=name, start=start, timestamp=now, cpu_nanocores=0, core_nanoseconds=0, memory_bytes=0)
            for name, start in sorted(running.containers)
        ),
    )


@dataclass(frozen=True)
class UsageSnapshot:
    node: NodeUsage
    pods: tuple[PodUsage, ...]
    # The last sampling round could not read every twin namespace (resource_scrape_error).
    scrape_error: bool = False


@dataclass
class UsageLedger:
    """The counters of one virtual node; :meth:`record` after each sampling round,
    :meth:`snapshot` to serve. Not thread-safe: the caller holds a lock."""

    started: float  # the node's counter origin (the vkubelet's start)
    stale_after: float = DEFAULT_STALE_AFTER
    counters: dict[tuple[str, str], Counter] = field(default_factory=dict)  # (local uid, container)
    pods: dict[str, PodRef] = field(default_factory=dict)  # local uid -> pod
    retired_core_nanoseconds: int = 0  # of the counters dropped with their pods
    scrape_error: bool = False

    def record(self, samples: Iterable[PodSample], *, on_node: Iterable[str], now: float, scrape_error: bool = False) -> None:
        """Integrate ``samples``; forget the pods whose local UID is not in ``on_node``
        (deleted, or no longer bound to this node), keeping their CPU time in the node's."""
        self.scrape_error = scrape_error
        for sample in samples:
            self.pods[sample.pod.uid] = sample.pod
            for container in sample.containers:
                key = (sample.pod.uid, container.name)
                counter = self.counters.get(key)
                if counter is None:
                    window = max(0.0, sample.window)
                    self.counters[key] = Counter(
                        start=sample.timestamp - window,
                        # Never 0: metrics-server drops a container whose counter reads 0,
                        # and the whole pod with it (v0.9.0 decode.go checkContainerMetrics),
                        # and an idle container's remote rate is 0 (a real `sleep`). A
                        # kubelet's counter is never 0 (starting took CPU); one nanosecond
                        # changes no rate, which metrics-server takes from differences.
                        core_nanoseconds=max(MIN_CORE_NANOSECONDS, round(container.cpu_nanocores * window)),
                        timestamp=sample.timestamp,
                        cpu_nanocores=container.cpu_nanocores,
                        memory_bytes=container.memory_bytes,
                        updated_at=now,
                    )
                elif sample.timestamp > counter.timestamp:
                    counter.core_nanoseconds += round(container.cpu_nanocores * (sample.timestamp - counter.timestamp))
                    counter.timestamp = sample.timestamp
                    counter.cpu_nanocores = container.cpu_nanocores
                    counter.memory_bytes = container.memory_bytes
                    counter.updated_at = now
        keep = set(on_node)
        for key in [k for k in self.counters if k[0] not in keep]:
            self.retired_core_nanoseconds += self.counters.pop(key).core_nanoseconds
        for uid in [u for u in self.pods if u not in keep]:
            del self.pods[uid]

    def snapshot(self, now: float, running: Iterable[RunningPod] = ()) -> UsageSnapshot:
        """The pods with a current sample and the node's sums; plus, with zeros, the
        ``running`` pods that have no counter at all (a pod whose samples went stale is
        left out, not reset to zero)."""
        by_pod: dict[str, list[ContainerUsage]] = {}
        for (uid, name), counter in sorted(self.counters.items()):
            if now - counter.updated_at > self.stale_after:
                continue
            by_pod.setdefault(uid, []).append(ContainerUsage(
                name=name,
                start=counter.start,
                timestamp=counter.timestamp,
                cpu_nanocores=counter.cpu_nanocores,
                core_nanoseconds=counter.core_nanoseconds,
                memory_bytes=counter.memory_bytes,
            ))
        pods = tuple(
            sorted(
                (PodUsage(self.pods[uid], tuple(containers)) for uid, containers in by_pod.items() if uid in self.pods),
                key=lambda p: (p.pod.namespace, p.pod.name),
            )
        )
        node = NodeUsage(
            start=self.started,
            timestamp=max((p.timestamp for p in pods), default=None),
            cpu_nanocores=sum(p.cpu_nanocores for p in pods),
            core_nanoseconds=self.retired_core_nanoseconds + sum(c.core_nanoseconds for c in self.counters.values()),
            memory_bytes=sum(p.memory_bytes for p in pods),
        )
        counted = {uid for uid, _ in self.counters}
        unsampled = [unsampled_usage(r, now) for r in running if r.containers and r.pod.uid not in counted]
        if unsampled:
            pods = tuple(sorted((*pods, *unsampled), key=lambda p: (p.pod.namespace, p.pod.name)))
        return UsageSnapshot(node=node, pods=pods, scrape_error=self.scrape_error)
