"""The state the gunicorn workers of one server share (kube_offload.runtime.workers), without a server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kube_offload.runtime.workers import ENV_DIRECTORY, WorkerGroup


def test_a_configured_directory_is_emptied_of_the_last_run_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    for stale in ("counter_123.db", "histogram_123.db", "ready-123"):
        (directory / stale).touch()
    (directory / "unrelated.txt").touch()
    monkeypatch.setenv(ENV_DIRECTORY, str(directory))
    group = WorkerGroup.create(2, component="webhook")
    assert group.directory == directory and not group.owned
    assert sorted(p.name for p in directory.iterdir()) == ["unrelated.txt"]
    group.close()
    assert directory.is_dir(), "a directory given by the environment is not ours to remove"


def test_an_own_directory_is_removed_only_by_the_process_that_made_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DIRECTORY, raising=False)
    group = WorkerGroup.create(2, component="webhook")
    assert group.owned and group.directory.is_dir()
    as_a_worker = WorkerGroup(group.directory, group.workers, owned=True, arbiter_pid=os.getpid() + 1)
    as_a_worker.close()
    assert group.directory.is_dir()
    group.close()
    assert not group.directory.exists()


def test_ready_once_every_worker_has_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DIRECTORY, str(tmp_path))
    group = WorkerGroup.create(2, component="webhook")
    assert not group.ready(lambda: False)
    assert group.ready_workers() == 0
    assert not group.ready(lambda: True), "this worker alone is not the pod"
    assert group.ready_workers() == 1
    (tmp_path / "ready-99999").touch()  # the other worker
    assert group.ready(lambda: True)
    group.worker_exited(99999)
    assert not group.ready(lambda: True), "an exited worker's readiness does not count"
