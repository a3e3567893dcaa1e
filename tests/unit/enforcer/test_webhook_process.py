"""The webhooks' own process as the enforcer runs it (enforcer/webhook_process.py): real
child processes and pipes, a stand-in child that speaks the same protocol (``ready`` on
stdout once synced, stop at the end of stdin); the real child over a real API server is
the e2e modules' (tests/e2e/test_shadowpod_validation.py runs the enforcer's defaults)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from enforcer.webhook_process import READY_LINE, WebhookProcess, WebhookProcessExited, watch_lifeline

REPO = Path(__file__).resolve().parents[3]

# Waits as the child does: ready after a moment, then until its stdin ends; exit code 3 on
# "die" in the environment, to show the parent noticing a child gone on its own.
CHILD = f"""
import os, sys, threading, time
sys.path.insert(0, {str(REPO)!r})
from enforcer.webhook_process import watch_lifeline
stop = threading.Event()
watch_lifeline(stop)
time.sleep(0.3)
sys.stdout.write("a line of its own\\n")
sys.stdout.buffer.write({READY_LINE!r})
sys.stdout.flush()
if os.environ.get("CHILD_DIES"):
    sys.exit(3)
stop.wait()
# Written aside, then renamed: a reader polling for the mark never sees it empty (the
# parent-killed test once read it between open() and write()).
with open(os.environ["CHILD_MARK"] + ".part", "w") as mark:
    mark.write("stopped cleanly")
os.replace(os.environ["CHILD_MARK"] + ".part", os.environ["CHILD_MARK"])
"""


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_child_is_ready_when_it_says_so_and_stops_with_the_loop(tmp_path, monkeypatch):
    mark = tmp_path / "mark"
    monkeypatch.setenv("CHILD_MARK", str(mark))
    loop = WebhookProcess([sys.executable, "-c", CHILD])
    stop = threading.Event()
    runner = threading.Thread(target=loop.run, args=(stop,))
    runner.start()
    assert not loop.readiness.has_synced()
    assert wait_for(loop.readiness.has_synced), "the ready line never reached the parent"
    pid = loop.pid
    assert pid is not None and Path(f"/proc/{pid}").exists()
    stop.set()
    runner.join(timeout=10)
    assert not runner.is_alive()
    # It stopped on the end of its stdin (not killed): it wrote its mark on the way out.
    assert mark.read_text() == "stopped cleanly"


def test_a_child_that_exits_on_its_own_fails_the_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("CHILD_MARK", str(tmp_path / "mark"))
    monkeypatch.setenv("CHILD_DIES", "1")
    loop = WebhookProcess([sys.executable, "-c", CHILD])
    with pytest.raises(WebhookProcessExited, match="exited with 3"):
        loop.run(threading.Event())


def test_a_child_stopped_by_a_signal_exits_cleanly_while_its_lifeline_still_reads(tmp_path):
    """SIGTERM to the child (a terminal's Ctrl-C, a process group signalled): it stops while
    its lifeline thread is blocked reading stdin, and must still exit 0, not abort."""
    code = f"""
import signal, sys, threading
sys.path.insert(0, {str(REPO)!r})
from enforcer.webhook_process import watch_lifeline
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda n, f: stop.set())
watch_lifeline(stop)
print("waiting", flush=True)
stop.wait()
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"waiting\n"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=10) == 0
    assert child.stdin is not None
    child.stdin.close()


def test_a_child_deaf_to_its_lifeline_is_killed_after_the_grace(tmp_path):
    loop = WebhookProcess([sys.executable, "-c", "import time; time.sleep(60)"], stop_seconds=0.5)
    stop = threading.Event()
    runner = threading.Thread(target=loop.run, args=(stop,))
    runner.start()
    assert wait_for(lambda: loop.pid is not None)
    started = time.monotonic()
    stop.set()
    runner.join(timeout=10)
    assert not runner.is_alive() and time.monotonic() - started < 5
    assert not Path(f"/proc/{loop.pid}").exists() or "Z" in Path(f"/proc/{loop.pid}/stat").read_text().split()[2]


def test_the_child_stops_when_its_parent_is_killed(tmp_path):
    """The parent SIGKILLed (no chance to close anything): the child reads the end of its
    stdin and exits, so the next enforcer can bind the webhook port."""
    mark = tmp_path / "mark"
    parent_code = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
while child.stdout.readline() != {READY_LINE!r}:
    pass
print(child.pid, flush=True)
time.sleep(60)
"""
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, CHILD_MARK=str(mark)))
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert wait_for(mark.exists), "the child outlived its parent"
    assert mark.read_text() == "stopped cleanly"
    assert child_pid != parent.pid


def test_the_lifeline_ends_on_end_of_file():
    read_end, write_end = os.pipe()
    stop = threading.Event()
    try:
        watch_lifeline(stop, read_end)
        os.write(write_end, b"anything the parent writes is ignored")
        assert not stop.wait(0.2)
        os.close(write_end)
        assert stop.wait(5)
    finally:
        os.close(read_end)
