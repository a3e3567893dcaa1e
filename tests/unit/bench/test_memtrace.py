"""bench/memtrace.py: how a traced block is charged (cache by transform, a loop's own
state by file and function) and the difference of two snapshots per pod."""

from __future__ import annotations

import pytest

from support.bench_scripts import load_bench_script

mt = load_bench_script("memtrace.py")
ROOT = mt.ROOT


def line_of(relative: str, text: str) -> int:
    """The line number of the first line of ``relative`` that contains ``text``."""
    for number, line in enumerate((ROOT / relative).read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {relative}")


def frame(relative: str, text: str) -> tuple[str, int]:
    return str(ROOT / relative), line_of(relative, text)


THREAD = ("/usr/lib/python3.11/threading.py", 975)
INFORMER = frame("kube_offload/runtime/informer.py", "def _watch(")
INTERNING = frame("kube_offload/runtime/interning.py", "def interned(")
TRIM_REMOTE_POD = frame("vkubelet/shared/trim.py", "def trim_remote_pod(")
STATUS = frame("vkubelet/pods/status.py", "def first_write_may_wait(")
CONTROLLER = frame("kube_offload/runtime/controller.py", "def process_one(")


def test_function_at_names_the_innermost_function():
    path, line = TRIM_REMOTE_POD
    assert mt.function_at(path, line) == "trim_remote_pod"
    assert mt.function_at(path, 1) == "?"  # the module docstring is in no function


@pytest.mark.parametrize(
    ("frames", "charged"),
    [
        # The parsed event itself, kept by the store: the cache.
        ([THREAD, INFORMER], mt.CACHE),
        # The transform's copy, its strings interned: the cache, by transform.
        ([THREAD, INFORMER, TRIM_REMOTE_POD, INTERNING], "cache: trim_remote_pod"),
        # A handler the informer calls keeps something: charged to the handler.
        ([THREAD, INFORMER, STATUS], "vkubelet/pods/status.py:first_write_may_wait"),
        # A worker's reconcile: the innermost frame of our code.
        ([THREAD, CONTROLLER, STATUS], "vkubelet/pods/status.py:first_write_may_wait"),
        # An interned copy so deep that the informer fell off the traceback.
        ([INTERNING, INTERNING], mt.CACHE),
        ([THREAD], "other: threading.py"),
    ],
)
def test_charge(frames, charged):
    assert mt.charge(frames) == charged


def test_breakdown_is_the_difference_per_charge():
    cached = ((THREAD, INFORMER, TRIM_REMOTE_POD, INTERNING), 1000)
    state = ((THREAD, CONTROLLER, STATUS), 300)
    idle = ((THREAD,), 5000)
    result = mt.breakdown([idle, cached], [idle, cached, cached, cached, state], pods=2)
    assert result.before == 6000 and result.after == 8300
    assert result.by_charge["cache: trim_remote_pod"] == 2000
    assert result.by_charge["vkubelet/pods/status.py:first_write_may_wait"] == 300
    assert result.by_charge["other: threading.py"] == 0
    assert result.cache_bytes == 2000
    lines = mt.report(result)
    assert "1.1 KiB per pod" in lines[0]  # 2300 B over 2 pods
    assert "caches   1.0 KiB" in lines[1]
    assert "rest     0.1 KiB" in lines[2]


def test_breakdown_refuses_no_pods():
    with pytest.raises(ValueError, match="pods must be at least 1"):
        mt.breakdown([], [], pods=0)


def test_frozen_garbage_is_the_frozen_kept_twin_less_what_was_counted(tmp_path):
    """Real snapshots: the hook's ``-frozen-kept`` twin holds more (here: a list kept
    alive) than the snapshot the breakdown counted; without the twin there is no figure."""
    import tracemalloc

    tracemalloc.start(5)
    try:
        counted = tmp_path / "1-scale-running.snap"
        tracemalloc.take_snapshot().dump(str(counted))
        kept_alive = [bytes(1000) for _ in range(200)]
        tracemalloc.take_snapshot().dump(str(tmp_path / ("1-scale-running" + mt.FROZEN_KEPT_SUFFIX)))
    finally:
        tracemalloc.stop()
    result = mt.breakdown_of(counted, counted, pods=1)
    assert result.before == result.after > 0
    frozen = mt.frozen_garbage(counted, result)
    assert frozen is not None and frozen >= 200 * 1000
    assert len(kept_alive) == 200
    assert mt.frozen_garbage(tmp_path / "2-scale-running.snap", result) is None
