"""The process manager (kube_offload/runtime/manager.py) with real threads, a real health
port on 127.0.0.1 and, for signals, a real child process. The informers and the elector
here are small stand-ins whose state the test sets; what is under test - start order,
start-after-sync, /readyz, stop order, the grace period, a failing loop, signals - is the
manager's own code, run as the components run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kube_offload.runtime import health
from kube_offload.runtime.manager import EXIT_LOOP_FAILED, EXIT_OK, Loop, Manager, serve

BIND = "127.0.0.1:0"
WAIT = 10.0


class Journal:
    """What happened, in order, across threads."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self._lock = threading.Lock()

    def add(self, entry: str) -> None:
        with self._lock:
            self.entries.append(entry)

    def __contains__(self, entry: str) -> bool:
        with self._lock:
            return entry in self.entries

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.entries)


class Cache:
    """An informer as the manager sees one: listed once the test says so."""

    def __init__(self, name: str, journal: Journal, synced: bool = False) -> None:
        self.name = name
        self.journal = journal
        self.synced = threading.Event()
        if synced:
            self.synced.set()

    def has_synced(self) -> bool:
        return self.synced.is_set()

    def start(self) -> None:
        self.journal.add(f"start informer {self.name}")

    def stop(self) -> None:
        self.journal.add(f"stop informer {self.name}")


class Election:
    """An elector whose outcome the test decides (the Lease itself is tested in
    test_leader_election.py and tests/e2e/test_leader_election.py)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.won = threading.Event()

    @property
    def leading(self) -> bool:
        return self.won.is_set()

    def start(self) -> None:
        self.journal.add("start election")

    def stop(self) -> None:
        self.journal.add("stop election")

    def ready_problem(self) -> str | None:
        return None if self.leading else "standby: the Lease is held by another replica"

    def alive_problem(self) -> str | None:
        return None


def recording_loop(name: str, journal: Journal, **kw) -> Loop:
    def run(stop: threading.Event) -> None:
        journal.add(f"run {name}")
        stop.wait()
        journal.add(f"stopped {name}")

    return Loop(name=name, run=run, **kw)


def eventually(condition, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Running:
    """``manager.run()`` on a thread of its own; its exit code once it returned."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.manager.run()

    def stop(self, timeout: float = WAIT) -> int | None:
        self.manager.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "manager.run() did not return"
        return self.code


def get(manager: Manager, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{manager.port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# --- start and stop order ------------------------------------------------------------------------
def test_loops_start_in_declaration_order_and_stop_in_reverse_then_informers_then_health() -> None:
    journal = Journal()
    manager = Manager(health_bind=BIND)
    manager.add_informer(Cache("pods", journal, synced=True))
    for name in ("node", "recorder", "controller"):
        manager.add_loop(recording_loop(name, journal))
    running = Running(manager)
    eventually(lambda: "run controller" in journal, "the last loop to run")
    assert manager.started() == ["node", "recorder", "controller"]
    port = manager.port
    assert running.stop() == EXIT_OK
    assert journal.snapshot() == [
        "start informer pods",
        "run node", "run recorder", "run controller",
        "stopped controller", "stopped recorder", "stopped node",
        "stop informer pods",
    ]
    with pytest.raises(OSError):  # the health port is closed last
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_loop_starts_only_once_its_informers_listed_and_readyz_follows() -> None:
    journal = Journal()
    pods = Cache("local-pods", journal)
    manager = Manager(health_bind=BIND)
    manager.add_informer(pods)
    manager.add_loop(recording_loop("node", journal))
    manager.add_loop(recording_loop("pods", journal, informers=[pods]))
    running = Running(manager)
    try:
        eventually(lambda: "run node" in journal, "the loop that needs no cache")
        time.sleep(0.5)
        assert "run pods" not in journal
        assert manager.started() == ["node"]
        assert get(manager, "/healthz") == (200, "ok\n")
        assert get(manager, "/readyz") == (503, "[-]informers failed: not synced yet: local-pods\nreadyz check failed\n")
        pods.synced.set()
        eventually(lambda: "run pods" in journal, "the loop once its cache listed")
        eventually(lambda: get(manager, "/readyz") == (200, "ok\n"), "/readyz 200")
        assert get(manager, "/readyz?verbose")[1] == "[+]informers ok\nreadyz check passed\n"
    finally:
        assert running.stop() == EXIT_OK
    assert journal.snapshot()[-3:] == ["stopped pods", "stopped node", "stop informer local-pods"]


def test_a_loop_declared_after_another_waits_for_it_to_start() -> None:
    journal = Journal()
    shadowpods = Cache("shadowpods", journal)
    manager = Manager(health_bind=BIND)
    manager.add_loop(recording_loop("enforcer", journal, informers=[shadowpods]))
    manager.add_loop(recording_loop("tenants", journal, after=["enforcer"]))
    running = Running(manager)
    try:
        time.sleep(0.5)
        assert manager.started() == []
        assert get(manager, "/readyz")[0] == 503
        shadowpods.synced.set()
        eventually(lambda: "run tenants" in journal, "the later loop")
        assert manager.started() == ["enforcer", "tenants"]
    finally:
        assert running.stop() == EXIT_OK
    assert journal.snapshot()[-2:] == ["stopped tenants", "stopped enforcer"]


def test_declarations_are_checked() -> None:
    manager = Manager(health_bind=BIND)
    try:
        manager.add_loop(Loop(name="a", run=lambda stop: None))
        with pytest.raises(ValueError, match="two loops named 'a'"):
            manager.add_loop(Loop(name="a", run=lambda stop: None))
        with pytest.raises(ValueError, match="comes after later, which must be declared before it"):
            manager.add_loop(Loop(name="b", run=lambda stop: None, after=["later"]))
    finally:
        manager.health.server_close()


def test_a_taken_health_port_names_the_flag() -> None:
    first = Manager(health_bind=BIND)
    try:
        with pytest.raises(health.HealthSetupError, match=r"--health-bind: cannot listen on 127\.0\.0\.1:\d+"):
            Manager(health_bind=f"127.0.0.1:{first.port}")
    finally:
        first.health.server_close()


# --- the grace period ------------------------------------------------------------------------------
def test_a_loop_that_does_not_stop_is_left_behind_after_the_grace_period() -> None:
    journal = Journal()
    release = threading.Event()

    def stubborn(stop: threading.Event) -> None:
        journal.add("run stubborn")
        stop.wait()
        release.wait(30)  # e.g. a close() blocked on a quiet watch

    manager = Manager(health_bind=BIND, grace_period=0.5)
    manager.add_informer(Cache("pods", journal, synced=True))
    manager.add_loop(recording_loop("node", journal))
    manager.add_loop(Loop(name="stubborn", run=stubborn))
    running = Running(manager)
    eventually(lambda: manager.started() == ["node", "stubborn"], "both loops")
    began = time.monotonic()
    try:
        assert running.stop() == EXIT_OK
        took = time.monotonic() - began
    finally:
        release.set()
    assert 0.5 <= took < 3.0, took
    # The grace period is one budget for the whole stop: spent, what comes after is only
    # told to stop (the informers are stopped on a thread of their own).
    eventually(lambda: "stop informer pods" in journal and "stopped node" in journal, "the rest told to stop")
    assert set(journal.snapshot()[-2:]) == {"stopped node", "stop informer pods"}


# --- a failing loop ---------------------------------------------------------------------------------
def test_a_failing_loop_stops_the_others_in_reverse_order_and_the_exit_code_is_1() -> None:
    journal = Journal()
    crash = threading.Event()

    def fragile(stop: threading.Event) -> None:
        journal.add("run fragile")
        crash.wait()
        raise RuntimeError("the watch is gone")

    manager = Manager(health_bind=BIND)
    manager.add_loop(recording_loop("node", journal))
    manager.add_loop(Loop(name="fragile", run=fragile))
    manager.add_loop(recording_loop("last", journal))
    running = Running(manager)
    eventually(lambda: manager.started() == ["node", "fragile", "last"], "every loop")
    crash.set()
    running.thread.join(WAIT)
    assert not running.thread.is_alive(), "a failed loop must stop the manager"
    assert running.code == EXIT_LOOP_FAILED
    assert journal.snapshot()[-2:] == ["stopped last", "stopped node"]


def test_a_loop_that_fails_while_stopping_does_not_change_the_exit_code() -> None:
    journal = Journal()

    def clumsy(stop: threading.Event) -> None:
        stop.wait()
        raise RuntimeError("close failed")

    manager = Manager(health_bind=BIND)
    manager.add_loop(recording_loop("node", journal))
    manager.add_loop(Loop(name="clumsy", run=clumsy))
    running = Running(manager)
    eventually(lambda: manager.started() == ["node", "clumsy"], "both loops")
    assert running.stop() == EXIT_OK
    assert journal.snapshot()[-1] == "stopped node"


def test_a_loop_that_returns_by_itself_has_finished_and_stops_nothing() -> None:
    journal = Journal()
    manager = Manager(health_bind=BIND)
    manager.add_loop(Loop(name="once", run=lambda stop: journal.add("ran once")))
    manager.add_loop(recording_loop("node", journal))
    running = Running(manager)
    eventually(lambda: "run node" in journal and "ran once" in journal, "both loops")
    time.sleep(0.3)
    assert running.thread.is_alive()
    assert running.stop() == EXIT_OK


def test_serve_adapts_start_and_stop() -> None:
    journal = Journal()
    stop = threading.Event()
    thread = threading.Thread(target=serve(lambda: journal.add("start"), lambda: journal.add("stop")), args=(stop,))
    thread.start()
    eventually(lambda: "start" in journal, "start")
    assert "stop" not in journal
    stop.set()
    thread.join(WAIT)
    assert journal.snapshot() == ["start", "stop"]


# --- leader election ------------------------------------------------------------------------------
def test_a_standby_starts_only_what_needs_no_lease_until_it_leads() -> None:
    journal = Journal()
    election = Election(journal)
    manager = Manager(health_bind=BIND, elector=election)
    manager.add_informer(Cache("everyone", journal, synced=True), needs_leader=False)
    manager.add_informer(Cache("leader-only", journal, synced=True))
    manager.add_loop(recording_loop("metrics-sampler", journal, needs_leader=False))
    manager.add_loop(recording_loop("controller", journal))
    running = Running(manager)
    try:
        eventually(lambda: "run metrics-sampler" in journal, "the loop that needs no Lease")
        time.sleep(0.5)
        assert "run controller" not in journal and "start informer leader-only" not in journal
        status, body = get(manager, "/readyz")
        assert status == 503 and body.splitlines() == [
            "[-]leader-election failed: standby: the Lease is held by another replica",
            "[-]informers failed: synced; loop(s) not started yet: controller",
            "readyz check failed",
        ]
        assert get(manager, "/healthz") == (200, "ok\n")
        election.won.set()
        eventually(lambda: "run controller" in journal, "the leader's loop")
        eventually(lambda: get(manager, "/readyz")[0] == 200, "/readyz 200 once leading")
    finally:
        assert running.stop() == EXIT_OK
    assert not manager.was_standby
    entries = journal.snapshot()
    assert entries.index("start election") < entries.index("start informer leader-only") < entries.index("run controller")
    # The Lease is handed back only once no loop of ours writes any more.
    assert entries[-5:] == ["stopped controller", "stopped metrics-sampler",
                            "stop informer leader-only", "stop informer everyone", "stop election"]


def test_a_standby_stopped_before_leading_started_nothing() -> None:
    journal = Journal()
    manager = Manager(health_bind=BIND, elector=Election(journal))
    manager.add_informer(Cache("leader-only", journal, synced=True))
    manager.add_loop(recording_loop("controller", journal))
    running = Running(manager)
    eventually(lambda: "start election" in journal, "the election")
    time.sleep(0.3)
    assert running.stop() == EXIT_OK
    assert manager.was_standby
    assert journal.snapshot() == ["start election", "stop election"]


# --- signals, in a process of its own ---------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import logging, sys, threading
    from kube_offload.runtime.manager import Loop, Manager

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)

    def loop(name):
        def run(stop):
            print(f"run {name}", flush=True)
            stop.wait()
            print(f"stopped {name}", flush=True)
        return Loop(name=name, run=run)

    manager = Manager(health_bind="127.0.0.1:0")
    manager.handle_signals(note=" (the test's note)")
    manager.add_loop(loop("first"))
    manager.add_loop(loop("second"))
    print(f"port {manager.port}", flush=True)
    sys.exit(manager.run())
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_stop_the_loops_in_reverse_order_with_exit_code_0(signum: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with open(out, "w") as sink:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=sink, stderr=subprocess.STDOUT,
                                 cwd=Path(__file__).resolve().parents[4], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        eventually(lambda: "run second" in out.read_text(), "both loops in the child")
        child.send_signal(signum)
        assert child.wait(WAIT) == 0, out.read_text()
    finally:
        if child.poll() is None:
            child.kill()
    lines = out.read_text().splitlines()
    name = signal.Signals(signum).name
    assert f"received {name}; stopping (the test's note)" in lines
    tail = lines[lines.index(f"received {name}; stopping (the test's note)"):]
    assert tail.index("stopped second") < tail.index("stopped first")


# --- metrics --------------------------------------------------------------------------------------
def test_a_registry_added_after_the_manager_was_built_is_served_on_metrics() -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("kube_offload_test_added_late_total", "a series of a registry added late", registry=registry).inc()
    manager = Manager(health_bind=BIND)
    manager.add_registry(registry)  # the enforcer adds its webhook's registry this way
    running = Running(manager)
    try:
        status, body = get(manager, "/metrics")
        assert status == 200
        assert "kube_offload_test_added_late_total 1.0" in body
    finally:
        assert running.stop() == EXIT_OK
