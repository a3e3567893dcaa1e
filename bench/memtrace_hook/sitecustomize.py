"""Bench-only: trace the Python allocations of a virtual kubelet started by a bench.

bench/memtrace.py puts this directory on ``PYTHONPATH`` and names a directory in
``KUBE_OFFLOAD_BENCH_TRACEMALLOC``; every Python process the harness then starts imports
this module at start-up, and only a virtual kubelet (``kube_offload.cli vkubelet``) acts on
it: ``tracemalloc`` from its first line, and a thread that, when the bench drops a file
``<pid>.take`` holding a label, runs a full collection (so only what is really held is
counted, not garbage awaiting the collector) and writes ``<pid>-<label>-frozen-kept.snap``,
then unfreezes (``gc.freeze`` hides garbage in the permanent generation from a
collection), collects again and writes ``<pid>-<label>.snap``: the two differ by the
garbage that freezing kept.
Nothing here is part of the product; the product never reads these variables.
"""

import os

_DIR = os.environ.get("KUBE_OFFLOAD_BENCH_TRACEMALLOC")


def _is_vkubelet() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return argv[1:4] == [b"-m", b"kube_offload.cli", b"vkubelet"]


if _DIR and _is_vkubelet():
    import gc
    import threading
    import time
    import tracemalloc

    tracemalloc.start(int(os.environ.get("KUBE_OFFLOAD_BENCH_TRACEMALLOC_DEPTH", "40")))

    def _serve(directory: str) -> None:
        pid = os.getpid()
        trigger = os.path.join(directory, f"{pid}.take")
        while True:
            time.sleep(0.5)
            try:
                with open(trigger) as handle:
                    label = handle.read().strip()
            except OSError:
                continue
            # First as the process holds it: a full collection does not look at what
            # gc.freeze (kube_offload/runtime/gc_freeze.py) put in the permanent generation.
            gc.collect()
            _dump(os.path.join(directory, f"{pid}-{label}-frozen-kept.snap"))  # memtrace.FROZEN_KEPT_SUFFIX
            # Then what is really referenced: frozen garbage too is collected. The
            # process's own hook freezes again at its next full collection.
            gc.unfreeze()
            gc.collect()
            _dump(os.path.join(directory, f"{pid}-{label}.snap"))
            os.unlink(trigger)

    def _dump(target: str) -> None:
        tracemalloc.take_snapshot().dump(target + ".part")
        os.replace(target + ".part", target)

    threading.Thread(target=_serve, args=(_DIR,), name="bench-tracemalloc", daemon=True).start()
