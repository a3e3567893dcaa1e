"""Reads the offloaded pods' usage from the remote cluster's ``metrics.k8s.io`` API, as
the consumer, into the :class:`~vkubelet.kubeletapi.usage.UsageLedger` the kubelet API
serves ``/stats/summary`` and ``/metrics/resource`` from.

Every ``interval`` seconds (``--kubelet-metrics-interval``), in a thread of its own:

1. the local pods bound to the virtual node are resolved, each to the remote pod *our
   ShadowPod owns in this consumer's twin namespace* (the same
   :class:`~vkubelet.kubeletapi.resolver.PodResolver` as logs and exec: a pod of another
   tenant carrying copied labels is never taken for ours);
2. one ``list`` of ``PodMetrics`` per twin namespace that holds such a pod (the consumer's
   twin role grants exactly ``list`` on ``metrics.k8s.io`` pods there, nothing
   cluster-wide, so no other namespace's figures can even be read);
3. each item whose name is one of the resolved remote pods becomes a sample of the local
   pod (local namespace, name and UID: remote names are never exported), integrated by the
   ledger (see ``usage`` for how averages become counters).

A round that cannot read a namespace keeps what the others gave and sets
``resource_scrape_error``; the first failure of a kind is logged as a warning saying
what to fix, repeats at debug level.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from kubernetes import client

from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import POD_METRICS
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY
from kube_offload.times import parse_time_or_none
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod
from vkubelet.kubeletapi.usage import PodRef, PodSample, RunningPod, SampleError, UsageLedger, UsageSnapshot, pod_sample

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

# A list of PodMetrics is served from metrics-server's memory: quick, or not at all.
METRICS_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 10.0)

Resolve = Callable[[str, str, str], RemotePod]
ListMetrics = Callable[[str], Mapping[str, Any]]


def local_pod_ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""))


def _epoch(text: object) -> float | None:
    moment = parse_time_or_none(text)
    return moment.timestamp() if moment is not None else None


def running_pods(local_pods: Iterable[Mapping[str, Any]], now: float) -> list[RunningPod]:
    """The local pods whose status shows a container running, with each running
    container's start (``state.running.startedAt``, else the pod's ``startTime``, else
    ``now``): what ``/stats/summary`` lists before their first sample."""
    found: list[RunningPod] = []
    for pod in local_pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        pod_start = _epoch(status.get("startTime"))
        containers = []
        for container in status.get("containerStatuses") or []:
            running = (container.get("state") or {}).get("running")
            if running is None:
                continue
            start = _epoch(running.get("startedAt")) or pod_start or now
            containers.append((str(container.get("name") or ""), start))
        if containers:
            found.append(RunningPod(local_pod_ref(pod), tuple(containers)))
    return found


def targets(local_pods: Iterable[Mapping[str, Any]], resolve: Resolve) -> dict[str, dict[str, PodRef]]:
    """twin namespace -> {remote pod name -> local pod} for every local pod that has a
    remote pod of ours now; pods without one (not created yet, no twin) are skipped."""
    found: dict[str, dict[str, PodRef]] = {}
    for pod in local_pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue  # nothing runs: a kubelet reports no usage for them either
        ref = local_pod_ref(pod)
        try:
            remote = resolve(ref.namespace, ref.name, ref.uid)
        except RequestError:
            continue
        found.setdefault(remote.namespace, {})[remote.name] = ref
    return found


def samples_from(listing: Mapping[str, Any], wanted: Mapping[str, PodRef]) -> tuple[list[PodSample], list[str]]:
    """The samples of the ``wanted`` remote pods in one PodMetricsList (items of other
    pods are ignored), and the problems of items that could not be read."""
    samples: list[PodSample] = []
    problems: list[str] = []
    for item in listing.get("items") or []:
        name = (item.get("metadata") or {}).get("name")
        ref = wanted.get(name or "")
        if ref is None:
            continue
        try:
            samples.append(pod_sample(item, ref))
        except SampleError as exc:
            problems.append(str(exc))
    return samples, problems


def explain(exc: ApiError, *, cluster_id: str, namespace: str) -> tuple[str, str]:
    """(kind, message) of a failed PodMetrics list: the kind de-duplicates warnings."""
    where = f"remote cluster {cluster_id}, namespace {namespace}"
    if exc.status == 404 or (exc.status == 503 and "metrics.k8s.io" in exc.message):
        return "unavailable", (
            f"{where}: the metrics.k8s.io API is not served ({exc.status} {exc.message}); kubectl top on "
            "offloaded pods needs metrics-server in the remote cluster"
        )
    if exc.status == 403:
        return "forbidden", (
            f"{where}: the consumer may not list metrics.k8s.io pods ({exc.message}); the provider's "
            "consumer twin role (charts/kube-offload-remote) grants it: upgrade the provider's chart"
        )
    return f"error-{exc.status}", f"{where}: listing PodMetrics failed: {exc}"


@dataclass
class SamplerState:
    """What the last round did (for logs and tests)."""

    rounds: int = 0
    namespaces: int = 0
    samples: int = 0
    errors: int = 0


class UsageSampler:
    def __init__(
        self,
        *,
        local_pods: Informer,
        resolve_pass: Callable[[], Resolve],
        list_metrics: ListMetrics,
        cluster_id: str,
        node_name: str,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._local_pods = local_pods
        # A resolve per round (PodResolver.for_one_pass): each namespace's twin decided once.
        self._resolve_pass = resolve_pass
        self._list_metrics = list_metrics
        self._cluster_id = cluster_id
        self.node_name = node_name
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self.ledger = UsageLedger(started=clock())
        self.state = SamplerState()
        self._warned: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def snapshot(self, *, with_unsampled: bool = False) -> UsageSnapshot:
        """The usage to serve; ``with_unsampled`` adds the running pods without a
        sample yet, with zeros (``/stats/summary``), read from the informer's cache."""
        now = self._clock()
        running = running_pods(self._local_pods.list(), now) if with_unsampled else []
        with self._lock:
            return self.ledger.snapshot(now, running)

    def now(self) -> float:
        return self._clock()

    def sample_once(self) -> SamplerState:
        pods = self._local_pods.list()
        wanted = targets(pods, self._resolve_pass())
        samples: list[PodSample] = []
        errors = 0
        for namespace in sorted(wanted):
            try:
                listing = self._list_metrics(namespace)
            except ApiError as exc:
                errors += 1
                self._warn(*explain(exc, cluster_id=self._cluster_id, namespace=namespace))
                continue
            found, problems = samples_from(listing, wanted[namespace])
            samples += found
            for problem in problems:
                errors += 1
                self._warn("malformed", f"remote cluster {self._cluster_id}: {problem}")
        on_node = [(pod.get("metadata") or {}).get("uid", "") for pod in pods]
        with self._lock:
            self.ledger.record(samples, on_node=on_node, now=self._clock(), scrape_error=errors > 0)
        self.state = SamplerState(self.state.rounds + 1, len(wanted), len(samples), errors)
        if not errors:
            self._warned.clear()  # a problem that comes back is worth a warning again
        return self.state

    def _warn(self, kind: str, message: str) -> None:
        if kind in self._warned:
            log.debug("kubelet API metrics: %s", message)
            return
        self._warned.add(kind)
        log.warning("kubelet API metrics: %s", message)

    # --- thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="kubelet-api-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 15)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # never let one bad round end the sampling
                log.exception("kubelet API metrics: sampling round failed")
            self._stop.wait(self.interval)


def metrics_lister(remote: client.ApiClient) -> ListMetrics:
    """One ``list`` of PodMetrics in a namespace of the remote cluster, raw JSON. Tried
    once: the next sampling round is the retry."""
    kube = Kube(remote, timeout=METRICS_REQUEST_TIMEOUT, retry=NO_RETRY)

    def list_metrics(namespace: str) -> Mapping[str, Any]:
        return kube.list(POD_METRICS, namespace=namespace)

    return list_metrics
