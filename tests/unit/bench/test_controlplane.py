"""bench/controlplane.py: the CPU lists of --server-cpus / --client-cpus, and pinning a
process tree (this test's own child process, on the CPUs it already may use)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[3] / "bench" / "controlplane.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_controlplane_for_tests", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cp = _load()
ALL = set(range(8))


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("1", {1}), ("0,2", {0, 2}), ("0-3,6", {0, 1, 2, 3, 6}), (" 4 , 5-5 ", {4, 5}), ("2,2,1-2", {1, 2})],
)
def test_parse_cpus_reads_taskset_lists(text, cpus):
    assert cp.parse_cpus(text, ALL) == cpus


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "is empty"), (",", "is empty"), ("a", "'a' is not a CPU number"), ("1-x", "'1-x' is not a CPU number"),
     ("3-1", "'3-1' is not a range from low to high"), ("-1", "'-1' is not a CPU number")],
)
def test_parse_cpus_names_the_bad_part(text, message):
    with pytest.raises(ValueError, match=message):
        cp.parse_cpus(text, ALL)


def test_parse_cpus_refuses_cpus_outside_the_allowed_set():
    with pytest.raises(ValueError, match=r"CPU\(s\) \[8, 9\] are not among this process's allowed CPUs"):
        cp.parse_cpus("7-9", ALL)


def test_pin_tree_pins_every_process_and_thread_of_the_tree():
    cpus = {min(os.sched_getaffinity(0))}
    # A parent with a child, each with a second thread: 2 processes, 4 threads.
    child = ("import threading, time\n"
             "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
             "time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, threading, time\n"
                               "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                               f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
                               "time.sleep(30)\n"])
    try:
        deadline = time.monotonic() + 10
        while True:
            tree = cp.tree_pids(parent.pid)
            threads = sum(len(list(Path(f"/proc/{p}/task").iterdir())) for p in tree)
            if (len(tree), threads) == (2, 4) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert cp.pin_tree(parent.pid, cpus) == (2, 4)
        for pid in tree:
            for task in Path(f"/proc/{pid}/task").iterdir():
                assert os.sched_getaffinity(int(task.name)) == cpus
    finally:
        for pid in reversed(cp.tree_pids(parent.pid)):
            os.kill(pid, 9)
        parent.wait(5)
