"""What the gunicorn workers of one server share, so that a pod with several worker
processes still has one set of metrics and one readiness.

Each worker keeps its own cache (a namespace watch costs the API server little and the
cache a few kilobytes per namespace) but must not look like a separate server:

- **metrics**: prometheus-client's multiprocess mode. Every worker writes its counters
  and histograms to memory-mapped files in one directory; ``/metrics``, whichever worker
  answers it, merges the files of all workers, dead ones included, so counters never go
  backwards when gunicorn replaces a worker.
- **readiness**: a worker whose cache has synced leaves a marker file ``ready-<pid>`` in
  the same directory; the pod is ready once there are as many markers as workers. A
  worker that exits loses its marker (the arbiter removes it), so its replacement must
  sync before the pod counts as ready again.

The directory is ``$PROMETHEUS_MULTIPROC_DIR`` when set (the chart mounts an emptyDir
there: the root file system is read-only), else a fresh one under ``$TMPDIR``; either way
it is emptied when the server starts, as prometheus-client requires. The arbiter creates
it before forking, the workers switch prometheus-client to multiprocess values before
they create any metric.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("kube_offload.runtime.workers")

ENV_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"
_READY_PREFIX = "ready-"
# How often a worker checks whether its cache has synced, until it has.
SYNC_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class WorkerGroup:
    directory: Path
    workers: int
    owned: bool  # created here (removed at exit) rather than given by the environment
    arbiter_pid: int  # the process that created it: only that one removes it

    # --- in the arbiter -----------------------------------------------------------------
    @classmethod
    def create(cls, workers: int, *, component: str) -> WorkerGroup:
        configured = os.environ.get(ENV_DIRECTORY)
        if configured:
            directory = Path(configured)
            directory.mkdir(parents=True, exist_ok=True)
            # An emptyDir outlives a container restart: the files of the last run's
            # workers would be summed into this run's counters.
            for entry in directory.iterdir():
                if entry.is_file() and (entry.suffix == ".db" or entry.name.startswith(_READY_PREFIX)):
                    entry.unlink()
        else:
            directory = Path(tempfile.mkdtemp(prefix=f"kube-offload-{component}-metrics-"))
        return cls(directory=directory, workers=workers, owned=not configured, arbiter_pid=os.getpid())

    def worker_exited(self, pid: int) -> None:
        """Forget a worker that exited (gunicorn's ``child_exit`` hook)."""
        multiprocess.mark_process_dead(pid, str(self.directory))
        (self.directory / f"{_READY_PREFIX}{pid}").unlink(missing_ok=True)

    def close(self) -> None:
        # A worker leaves gunicorn by SystemExit through the frames it inherited from the
        # arbiter, so cleanup code that wraps the server runs in every worker as well.
        if self.owned and os.getpid() == self.arbiter_pid:
            shutil.rmtree(self.directory, ignore_errors=True)

    # --- in a worker --------------------------------------------------------------------
    def enable_shared_metrics(self) -> None:
        """From now on, metrics created in this process write to the shared directory.

        prometheus-client picks its value class when it is imported, from the
        environment; the server imported it before the directory existed, so the class
        is switched here, in the fresh worker, before any metric exists."""
        os.environ[ENV_DIRECTORY] = str(self.directory)
        values.ValueClass = values.MultiProcessValue()

    def mark_ready_when(self, synced: Callable[[], bool], stopped: threading.Event) -> None:
        """Leave this worker's marker once ``synced()`` (polled in a daemon thread)."""

        def wait() -> None:
            while not stopped.is_set():
                if synced():
                    self._mark_ready()
                    return
                stopped.wait(SYNC_POLL_SECONDS)

        threading.Thread(target=wait, name="mark-ready", daemon=True).start()

    def ready(self, synced: Callable[[], bool]) -> bool:
        """True once every worker's cache has synced (``synced``: this worker's)."""
        if synced():
            self._mark_ready()  # do not make a probe wait for the polling thread
        return self.ready_workers() >= self.workers

    def ready_workers(self) -> int:
        try:
            return sum(1 for name in os.listdir(self.directory) if name.startswith(_READY_PREFIX))
        except FileNotFoundError:
            return 0

    def _mark_ready(self) -> None:
        marker = self.directory / f"{_READY_PREFIX}{os.getpid()}"
        if not marker.exists():
            marker.touch()

    def exposition(self, extra: Iterable[Collector] = ()) -> tuple[bytes, str]:
        """Every worker's metrics merged, plus ``extra`` collectors (read at scrape time)."""
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(self.directory))
        for collector in extra:
            registry.register(collector)
        return generate_latest(registry), CONTENT_TYPE_LATEST


class FunctionGauge(Collector):
    """A gauge whose value is read when scraped, for an exposition assembled per scrape
    (multiprocess mode has no function gauges)."""

    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self._name = name
        self._documentation = documentation
        self._read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._documentation, value=self._read())

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # no describe-time read of the value
