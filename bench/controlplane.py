"""What the benchmarks need to know about the processes of a loopback environment: the
control-plane processes kwokctl started for each cluster (it writes their PIDs under
``kwok/clusters/<name>/pids/``), the CPU time and peak memory of a process and its
children, and pinning a cluster's control plane to chosen cores.

Imported by the scripts in bench/ (``sys.path[0]`` is this directory when they run).
"""

from __future__ import annotations

import os
from pathlib import Path

from kube_offload_harness.cluster import Cluster

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def control_plane_pids(cluster: Cluster) -> dict[str, int]:
    """component name (kube-apiserver, etcd, kube-scheduler, ...) -> PID, of the running ones."""
    pids_dir = cluster.kwok_workdir / "clusters" / cluster.name / "pids"
    found: dict[str, int] = {}
    for path in sorted(pids_dir.glob("*.pid")):
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            found[path.stem] = pid
    return found


def _stat_fields(pid: int) -> list[str]:
    # The command name (field 2) may contain spaces and parentheses: split after the last ")".
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants (gunicorn's workers under the webhook's arbiter)."""
    result, pending = [], [pid]
    while pending:
        current = pending.pop()
        result.append(current)
        try:
            pending += _children(current)
        except OSError:
            continue
    return result


def cpu_seconds(pid: int, *, children: bool = True) -> float:
    """User + system CPU of ``pid`` (and its live descendants, plus the children it reaped)."""
    total = 0.0
    for current in tree_pids(pid) if children else [pid]:
        try:
            fields = _stat_fields(current)
        except OSError:
            continue
        # utime, stime, cutime, cstime are fields 14-17 (1-based), i.e. 11-14 after the ")".
        ticks = int(fields[11]) + int(fields[12])
        if children:
            ticks += int(fields[13]) + int(fields[14])
        total += ticks / _CLOCK_TICKS
    return total


def on_cpu_seconds(pid: int) -> float:
    """Seconds ``pid`` and its live descendants, every thread of each, have run on a CPU so
    far (the scheduler's own count, ``/proc/<pid>/task/<tid>/schedstat``, in nanoseconds):
    fine enough to tell one short request's cost, where :func:`cpu_seconds` counts clock
    ticks (10 ms). Threads that exited are not counted."""
    total = 0
    for current in tree_pids(pid):
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (VmRSS, VmHWM), 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pin(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` to ``cpus`` (what ``taskset -a -p`` does; threads started
    later inherit the affinity of the thread that starts them). Returns the threads pinned."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
        except (ProcessLookupError, OSError):
            continue
    return pinned


def pin_cluster(cluster: Cluster, cpus: set[int]) -> dict[str, int]:
    """Pin all of ``cluster``'s control-plane processes (apiserver, etcd, scheduler,
    controller-manager, kwok) to ``cpus``; component -> threads pinned."""
    return {name: pin(pid, cpus) for name, pid in control_plane_pids(cluster).items()}


def parse_cpus(text: str, allowed: set[int]) -> set[int]:
    """A CPU list as taskset and cpusets write it ("1", "0,2", "0-3,6") -> the set of CPU
    numbers, each checked against ``allowed`` (this process's affinity: a CPU outside it
    would be refused by the kernel with a bare EINVAL)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a CPU number or a range like 0-3") from None
        if low < 0 or high < low:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a range from low to high")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError(f"CPU list {text!r} is empty: give CPU numbers such as 1 or 0-1")
    outside = cpus - allowed
    if outside:
        raise ValueError(f"CPU list {text!r}: CPU(s) {sorted(outside)} are not among this process's "
                         f"allowed CPUs {sorted(allowed)}")
    return cpus


def pin_tree(pid: int, cpus: set[int]) -> tuple[int, int]:
    """Pin ``pid``, its live descendants and all their threads to ``cpus`` (gunicorn's
    arbiter and its workers); (processes, threads) pinned."""
    processes = tree_pids(pid)
    return len(processes), sum(pin(p, cpus) for p in processes)
