"""What a virtual kubelet's memory per offloaded pod is made of: tracemalloc snapshots of
the live process, before a burst and once its pods all run, and where the difference was
allocated (issue 39: "vkubelet <= 30 KiB per pod", explained by a profile).

How the snapshots are taken: :func:`enable` puts ``bench/memtrace_hook`` on the
``PYTHONPATH`` of the processes the harness starts (its ``sitecustomize`` starts
``tracemalloc`` in a vkubelet only); :func:`take` asks one vkubelet for a snapshot and waits
for it (a full collection first, so garbage awaiting the collector is not counted).
``bench/bench_scale.py --tracemalloc DIR`` takes ``before`` (the burst's first apply) and
``running`` (all pods Running, before the scale-down) and prints :func:`report`, and
how much garbage ``gc.freeze`` kept (the hook's ``-frozen-kept`` snapshot, taken before it
unfreezes: kube_offload/runtime/gc_freeze.py).

How a block is charged (:func:`charge`), from its allocation traceback: a block allocated
on an informer's thread inside the informer, its store, index or a cache transform is
**cache** (what the caches hold; by transform where one is on the stack:
vkubelet/shared/trim.py says what each keeps); anything else is charged to the innermost
frame of the project's own code, named ``file:function``: the per-pod state of a loop,
or in-flight work. Tracing costs the process time (2-4x) and memory of its own: the
figures here are Python allocations (tracemalloc), not RSS; bench_scale's RSS readings
in the same run are not the goal's readings.

Usage on two snapshots: ``.venv/bin/python bench/memtrace.py BEFORE.snap RUNNING.snap --pods N [--top 30]``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import functools
import os
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
HOOK_DIR = Path(__file__).resolve().parent / "memtrace_hook"
ENV_DIR = "KUBE_OFFLOAD_BENCH_TRACEMALLOC"
ENV_DEPTH = "KUBE_OFFLOAD_BENCH_TRACEMALLOC_DEPTH"
OURS = ("kube_offload/", "vkubelet/")
# The informer's own machinery: a block allocated under these on an informer thread is
# what the cache holds (the parsed object, its transformed copy, interned strings, index).
INFORMERS = ("kube_offload/runtime/informer.py", "kube_offload/runtime/namespaced_informer.py")
STORES = ("kube_offload/runtime/indexer.py", "kube_offload/runtime/interning.py")
CACHE_MACHINERY = INFORMERS + STORES
# What the hook names the snapshot taken before it unfreezes (memtrace_hook/sitecustomize.py).
FROZEN_KEPT_SUFFIX = "-frozen-kept.snap"
TRANSFORMS = ("vkubelet/shared/trim.py", "vkubelet/reflection/events.py", "vkubelet/reflection/serviceaccounts.py")
CACHE = "cache"


def enable(directory: Path, depth: int = 40) -> None:
    """Make the vkubelets this process starts from now on traceable (see the module doc)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_DIR] = str(directory)
    os.environ[ENV_DEPTH] = str(depth)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), os.environ.get("PYTHONPATH", "")) if p)


def take(directory: Path, pid: int, label: str, timeout: float = 300.0) -> Path:
    """Ask vkubelet ``pid`` for a snapshot named ``label`` and wait for the file."""
    target = directory / f"{pid}-{label}.snap"
    trigger = directory / f"{pid}.take"
    trigger.write_text(label)
    deadline = time.monotonic() + timeout
    while not target.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"vkubelet {pid} wrote no snapshot {target.name} in {timeout:.0f}s "
                               f"(started without the hook? see bench/memtrace.py)")
        time.sleep(0.5)
    return target


@functools.lru_cache(maxsize=None)
def _functions(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, name) of every function in the file at ``path``."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return ()
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.lineno, node.end_lineno or node.lineno, node.name))
    return tuple(spans)


def function_at(path: str, line: int) -> str:
    """The innermost function of ``path`` containing ``line`` ("?" if none)."""
    best: tuple[int, int, str] | None = None
    for start, end, name in _functions(path):
        if start <= line <= end and (best is None or start >= best[0]):
            best = (start, end, name)
    return best[2] if best else "?"


@functools.lru_cache(maxsize=None)
def _relative(filename: str) -> str | None:
    """The project-relative path of a frame in the project's own code, else None."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return relative if relative.startswith(OURS) else None


def charge(frames: Sequence[tuple[str, int]]) -> str:
    """What a block is charged to, from its traceback (oldest frame first, as tracemalloc
    gives it): ``cache`` or ``cache: <transform>``, else ``<file>:<function>`` of the
    innermost frame of our code, else ``other: <file>``."""
    ours = [(rel, line) for rel, line in ((_relative(f), n) for f, n in frames) if rel is not None]
    if any(rel in INFORMERS for rel, _ in ours):
        # On an informer's thread: below the informer, either its machinery (the cache)
        # or a handler it calls (charged as any other code).
        below = [(rel, line) for rel, line in ours if not rel.startswith(CACHE_MACHINERY)]
        transforms = [(rel, line) for rel, line in below if rel in TRANSFORMS]
        if transforms:
            rel, line = transforms[0]
            return f"{CACHE}: {function_at(str(ROOT / rel), line)}"
        if not below:
            return CACHE
        rel, line = below[-1]
        return f"{rel}:{function_at(str(ROOT / rel), line)}"
    if ours:
        rel, line = ours[-1]
        if rel in STORES:
            return CACHE  # deeper than the traceback's depth reaches: an interned or indexed copy
        return f"{rel}:{function_at(str(ROOT / rel), line)}"
    return "other: " + os.path.basename(frames[-1][0]) if frames else "other: ?"


@dataclass
class Breakdown:
    pods: int
    before: int  # bytes traced in each snapshot
    after: int
    by_charge: dict[str, int] = field(default_factory=dict)  # the difference, by charge

    def per_pod(self, nbytes: int) -> float:
        return nbytes / self.pods / 1024

    @property
    def cache_bytes(self) -> int:
        return sum(v for k, v in self.by_charge.items() if k == CACHE or k.startswith(CACHE + ":"))


def breakdown(before: Iterable[tuple[Sequence[tuple[str, int]], int]],
              after: Iterable[tuple[Sequence[tuple[str, int]], int]], pods: int) -> Breakdown:
    """The difference between two snapshots' blocks (traceback, size), by :func:`charge`."""
    if pods < 1:
        raise ValueError(f"pods must be at least 1, not {pods}")
    sums: dict[str, int] = collections.Counter()
    totals = [0, 0]
    for sign, index, blocks in ((-1, 0, before), (1, 1, after)):
        for frames, size in blocks:
            sums[charge(frames)] += sign * size
            totals[index] += size
    return Breakdown(pods=pods, before=totals[0], after=totals[1], by_charge=dict(sums))


def blocks_in(path: Path) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """(traceback as (file, line) oldest first, size) of every block of the snapshot at
    ``path``, tracemalloc's own allocations left out."""
    snapshot = tracemalloc.Snapshot.load(str(path)).filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    return [(tuple((frame.filename, frame.lineno) for frame in trace.traceback), trace.size)
            for trace in snapshot.traces]


def breakdown_of(before: Path, after: Path, pods: int) -> Breakdown:
    """:func:`breakdown` of the snapshots at ``before`` and ``after``."""
    return breakdown(blocks_in(before), blocks_in(after), pods)


def frozen_garbage(after: Path, result: Breakdown) -> int | None:
    """The bytes of garbage ``gc.freeze`` kept at ``after``: its frozen-kept twin (taken
    before the hook unfroze) minus what ``result`` counted there; None without the twin."""
    kept = after.with_name(after.name.removesuffix(".snap") + FROZEN_KEPT_SUFFIX)
    if not kept.is_file():
        return None
    return sum(size for _, size in blocks_in(kept)) - result.after


def report(result: Breakdown, top: int = 25) -> list[str]:
    added = result.after - result.before
    lines = [
        f"vkubelet Python allocations (tracemalloc, after a full collection): {result.before / 2**20:.1f} MiB before, "
        f"{result.after / 2**20:.1f} MiB with {result.pods} pods running: {result.per_pod(added):.1f} KiB per pod, of which",
        f"  caches {result.per_pod(result.cache_bytes):5.1f} KiB (informer stores, transforms, interned strings, indexes)",
        f"  rest   {result.per_pod(added - result.cache_bytes):5.1f} KiB (per-pod state of the loops, work in flight)",
    ]
    ranked = sorted(result.by_charge.items(), key=lambda kv: -abs(kv[1]))[:top]
    lines += [f"  {value / result.pods:8.0f} B/pod  {key}" for key, value in ranked]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="snapshot before the pods (e.g. <pid>-before.snap)")
    parser.add_argument("after", type=Path, help="snapshot with the pods running (e.g. <pid>-running.snap)")
    parser.add_argument("--pods", type=int, required=True, help="pods the vkubelet gained between the two")
    parser.add_argument("--top", type=int, default=25, help="charges to list (default 25)")
    args = parser.parse_args(argv)
    for path in (args.before, args.after):
        if not path.is_file():
            parser.error(f"{path}: no such snapshot file")
    print("\n".join(report(breakdown_of(args.before, args.after, args.pods), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
