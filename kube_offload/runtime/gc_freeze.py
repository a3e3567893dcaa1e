"""Keep long-lived objects out of Python's full garbage collections (``gc.freeze``).

A process that holds a large cache (the enforcer at 10,000 ShadowPods: ~480,000 container
objects in its informers) pays for every full (generation 2) collection with a pause that
walks all of them, 0.5-1 s on a loaded machine, during which every thread waits: the
webhook's requests too (docs/performance.md "Admission at a fixed rate"). The objects a
full pass leaves alive are, almost all, the caches: they stay until an informer replaces
them, and then reference counting frees them, frozen or not (they hold no cycles).

:class:`FreezeAfterFullCollection` is a ``gc.callbacks`` hook: when a full collection ends,
it moves what survived into the permanent generation (``gc.freeze()``), so the next full
pass walks only what was promoted since. What a frozen object costs: if it is part of a
reference cycle that becomes garbage later, no collection finds it; a cycle that was alive
at the freeze (in-flight work: an exception kept in a local of the frame it was raised
from holds every caller's frame and what they hold) is kept with all it refers to. So hot
paths must not make cycles (vkubelet/kubeletapi/resolver.py; ``bench/bench_scale.py
--tracemalloc`` prints the garbage freezing kept). And every ``thaw_every``
seconds the hook does the opposite at a full collection's end (``gc.unfreeze()``): the next
full pass walks everything once, reclaims any such cycle, and its end freezes again. One
long pause per ``thaw_every`` instead of one per full collection; the frozen count is
served as ``kube_offload_python_gc_frozen_objects`` to watch in a soak.

Why in the callback: ``gc.freeze()`` only splices the collector's lists, which are
consistent when a collection's ``stop`` callbacks run, and no other collection can start
meanwhile (the collector does not nest); a thread doing it later would freeze whatever was
allocated in between, in-flight requests included.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any, Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.http_metrics import NAMESPACE

DEFAULT_THAW_SECONDS = 1800.0
FULL_GENERATION = 2


class FreezeAfterFullCollection(Collector):
    """The ``gc.callbacks`` hook (module docstring); also a collector of the frozen count."""

    def __init__(
        self,
        thaw_every: float = DEFAULT_THAW_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        freeze: Callable[[], None] = gc.freeze,
        unfreeze: Callable[[], None] = gc.unfreeze,
        frozen_count: Callable[[], int] = gc.get_freeze_count,
    ) -> None:
        if thaw_every <= 0:
            raise ValueError("thaw_every must be > 0 seconds")
        self.thaw_every = thaw_every
        self._clock = clock
        self._freeze = freeze
        self._unfreeze = unfreeze
        self._frozen_count = frozen_count
        self._last_thaw = clock()
        self.freezes = 0
        self.thaws = 0

    def __call__(self, phase: str, info: Mapping[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != FULL_GENERATION:
            return
        now = self._clock()
        if now - self._last_thaw >= self.thaw_every:
            # The next full pass walks everything again: any cycle frozen since is found.
            self._unfreeze()
            self._last_thaw = now
            self.thaws += 1
            return
        self._freeze()
        self.freezes += 1

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            f"{NAMESPACE}_python_gc_frozen_objects",
            "Objects kept out of full garbage collections (gc.freeze after each full pass; "
            "all of them thawed and walked once per thaw period).",
            value=float(self._frozen_count()),
        )


_installed: FreezeAfterFullCollection | None = None
_lock = threading.Lock()


def freeze_after_full_collections(thaw_every: float = DEFAULT_THAW_SECONDS) -> FreezeAfterFullCollection:
    """Install the hook in this process (idempotent: the first call's period stays)."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = FreezeAfterFullCollection(thaw_every)
            gc.callbacks.append(_installed)
            rm.REGISTRY.register(_installed)
        return _installed


def freeze_from_flag(thaw_period: float) -> FreezeAfterFullCollection | None:
    """What ``--gc-thaw-period`` asks (kube_offload/runtime/flags.py): the hook installed
    with that period, or nothing at 0."""
    return freeze_after_full_collections(float(thaw_period)) if thaw_period > 0 else None
