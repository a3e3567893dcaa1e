"""An environment's records live outside its state directory, and an environment whose
state directory vanished is torn down from them (harness/kube_offload_harness/run_records.py,
docs/testing.md "When the state directory vanishes").

Real processes (``sleep``) stand for what an environment starts: the claim is about the
harness finding and stopping them by PID, not about Kubernetes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kube_offload_harness import run_records
from kube_offload_harness.cluster import ClusterSpec, Environment, Topology, reap_orphans
from kube_offload_harness.processes import ProcessTable, command_line


@pytest.fixture
def runs(tmp_path: Path, monkeypatch) -> Path:
    directory = tmp_path / "runs"
    monkeypatch.setenv(run_records.RUNS_DIR_ENV, str(directory))
    return directory


@pytest.fixture
def started() -> list:
    """Processes a test starts (Popen objects, or the harness's ProcessRecords), killed at
    its end whatever happened: exactly those, each only while it runs what it was started as."""
    processes: list = []
    yield processes
    for process in processes:
        if isinstance(process, subprocess.Popen):
            if process.poll() is None:
                process.kill()
                process.wait()
        elif process.running():
            os.kill(process.pid, signal.SIGKILL)


def _sleeper(started: list[subprocess.Popen]) -> subprocess.Popen:
    argv = [sys.executable, "-c", "import time; time.sleep(300)"]
    process = subprocess.Popen(argv, start_new_session=True)
    started.append(process)
    deadline = time.monotonic() + 10
    while command_line(process.pid) != argv and time.monotonic() < deadline:
        time.sleep(0.02)  # until it execs (right after the fork it runs our command line)
    return process


def _gone(process: subprocess.Popen, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return True
        time.sleep(0.05)
    return False


def _started(record):
    """The record once its process runs the recorded command (right after the fork it still
    runs ours, and reads as not running)."""
    deadline = time.monotonic() + 10
    while not record.running() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert record.running(), record
    return record


def _topology() -> Topology:
    return Topology(prefix="rr", local=ClusterSpec(name="rr-local", cluster_id="local", role="local"), remotes=[])


def test_the_records_live_outside_the_state_dir_which_names_them(runs: Path, tmp_path: Path):
    state = tmp_path / "basetemp" / "kube-offload-e2e0"
    records = run_records.create(state)
    assert records.directory.parent == runs and not records.directory.is_relative_to(state)
    assert (state / run_records.ID_FILE).read_text().strip() == records.env_id
    about = json.loads((records.directory / run_records.ENVIRONMENT_FILE).read_text())
    assert about["state_dir"] == str(state) and about["id"] == records.env_id and about["pid"] == os.getpid()
    assert run_records.records_of(state) == records and records.alive()
    # everything down needs is there, nothing of it in the state dir
    env = Environment(state, say=lambda line: None, bins=object())
    assert env.processes.path == records.directory / "processes.json"
    assert env.topology_path == records.directory / "topology.json"
    assert env.records.slot_record("rr-local").is_relative_to(records.directory)
    assert env.kernel_tunables_record.is_relative_to(records.directory)


def test_a_vanished_or_reused_state_dir_makes_an_orphan(runs: Path, tmp_path: Path):
    kept, deleted, reused = (run_records.create(tmp_path / name) for name in ("kept", "deleted", "reused"))
    shutil.rmtree(deleted.state_dir)
    # the path made again by another environment (a new pytest-0 after /tmp/pytest-of-root went)
    shutil.rmtree(reused.state_dir)
    newer = run_records.create(reused.state_dir)
    orphans = {records.env_id for records in run_records.orphans()}
    assert orphans == {deleted.env_id, reused.env_id}
    assert kept.alive() and newer.alive() and not deleted.alive() and not reused.alive()


def test_an_environment_made_before_run_directories_keeps_its_records_in_the_state_dir(runs: Path, tmp_path: Path):
    state = tmp_path / "old"
    state.mkdir()
    (state / "processes.json").write_text("[]")
    records = run_records.records_of(state)
    assert records.legacy and records.processes == state / "processes.json"
    assert records.slot_record("c") == state / "real-nodes" / "c" / "netns-inode"
    assert run_records.orphans() == []  # not in the runs dir: never reaped


def test_an_environment_whose_state_dir_vanished_is_torn_down_by_the_next_reap(runs: Path, tmp_path: Path, started):
    state = tmp_path / "basetemp" / "env0"
    records = run_records.create(state)
    env = Environment(state, say=lambda line: None, bins=object())
    env.topology_path.write_text(_topology().to_json())
    # a process of ours (the table) and a control-plane process kwokctl started (its pid file)
    ours = env.processes.start("webhook", [sys.executable, "-c", "import time; time.sleep(300)"],
                               log=env.log_path("webhook"))
    started.append(ours)
    _started(ours)
    etcd = _sleeper(started)
    cluster = env.cluster(env.topology().local)
    cluster.pids_dir.mkdir(parents=True)
    (cluster.pids_dir / "etcd.pid").write_text(str(etcd.pid))
    assert cluster.record_control_plane() == ["rr-local/etcd"]

    shutil.rmtree(state)  # pytest's rotation, or rm -rf by hand
    assert [r.env_id for r in run_records.orphans()] == [records.env_id]
    said: list[str] = []
    assert reap_orphans(say=said.append, bins=object()) == [str(state)]
    assert _gone(etcd), "the control-plane process kwokctl started is still running"
    assert not ours.running(), "the harness's own process is still running"
    assert not records.directory.exists() and run_records.orphans() == []
    assert any("its state dir" in line and "is gone" in line for line in said), said
    # nothing left to do the next time
    assert reap_orphans(say=said.append, bins=object()) == []


def test_down_of_a_running_environment_whose_state_dir_vanished_stops_what_it_started(runs: Path, tmp_path: Path,
                                                                                       started):
    """The fixture's own ``down`` at the end of a module, after its basetemp was deleted."""
    state = tmp_path / "env1"
    env = Environment(state, say=lambda line: None, bins=object())
    env._records = run_records.create(state)  # what up() does first
    env.topology_path.write_text(_topology().to_json())
    record = env.processes.start("extender", [sys.executable, "-c", "import time; time.sleep(300)"],
                                 log=tmp_path / "extender.log")
    started.append(record)
    _started(record)
    shutil.rmtree(state)
    env.down()
    assert not record.running()
    assert not env.records.directory.exists()


def test_a_record_never_stops_a_process_that_reused_the_pid(runs: Path, tmp_path: Path, started):
    table = ProcessTable(tmp_path / "control-planes.json")
    other = _sleeper(started)
    record = table.adopt("c/etcd", other.pid)
    assert record is not None and record.argv[0] == sys.executable
    # the recorded command line is not what the PID runs now: left alone
    table._save([type(record)(name="c/etcd", pid=other.pid, argv=["etcd", "--data-dir", "/gone"], log="")])
    assert table.stop_prefixed("c/") == []
    assert other.poll() is None
    os.kill(other.pid, signal.SIGKILL)
    other.wait()
    assert table.adopt("c/etcd", other.pid) is None  # gone: nothing to record
