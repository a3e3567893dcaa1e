"""Each environment's records of what it started, kept OUTSIDE its state directory
(docs/testing.md, "When the state directory vanishes").

The tiers keep an environment's state directory under pytest's basetemp
(``/tmp/pytest-of-<user>/pytest-<n>/``), which pytest deletes by rotation (it keeps the
newest three) and people delete by hand. The records of what the environment started
must outlive it: with them inside it, a vanished directory left etcd, the kube-apiservers,
kubelets, containerd, containers, network namespaces and mounts running with nothing
that could find them again. So each environment made by ``up`` has a run directory of
its own under :func:`runs_dir` (``/run/kube-offload/environments/<id>/`` as root: the
machine's lifetime, like the namespaces and processes it describes)::

    environment.json     whose records these are: id, state dir, when, by which PID
    processes.json       every process the harness started (processes.ProcessTable)
    control-planes.json  each cluster's control-plane processes, read from kwokctl's
                         pid files (kwokctl keeps them under the state dir)
    topology.json        what ``up`` made (clusters, real-node slots, ports)
    slots/<cluster>.netns-inode   each real node's namespace, as ``up`` made it
    kernel-tunables-before.json   the machine's values the kubelets changed

and the state directory names its run directory in ``environment-id``. An environment is
alive while its state directory holds that id; otherwise it is an orphan (deleted, or the
path reused by another environment), and :func:`kube_offload_harness.cluster.reap_orphans`
tears it down from these records alone (every ``up`` does first; so does ``kube-offload
cluster reap``). An environment made before this layout keeps its records in the state
directory itself (:attr:`Records.legacy`), where ``down`` finds them as before.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

RUNS_DIR_ENV = "KUBE_OFFLOAD_RUNS_DIR"
ID_FILE = "environment-id"
ENVIRONMENT_FILE = "environment.json"


def runs_dir() -> Path:
    """Where run directories live: ``$KUBE_OFFLOAD_RUNS_DIR``; as root ``/run/kube-offload/
    environments`` (tmpfs: gone at reboot with everything it describes); otherwise under
    ``$XDG_RUNTIME_DIR``, else ``~/.local/state/kube-offload-environments``. Never under
    a pytest basetemp."""
    override = os.environ.get(RUNS_DIR_ENV)
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/run/kube-offload/environments")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "kube-offload" / "environments"
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "kube-offload-environments"


@dataclass(frozen=True)
class Records:
    """Where one environment's records are: ``directory`` (its run directory, or its state
    directory for an environment made before run directories: ``legacy``)."""

    directory: Path
    state_dir: Path
    env_id: str = ""

    @property
    def legacy(self) -> bool:
        return not self.env_id

    @property
    def processes(self) -> Path:
        return self.directory / "processes.json"

    @property
    def control_planes(self) -> Path:
        return self.directory / "control-planes.json"

    @property
    def topology(self) -> Path:
        return self.directory / "topology.json"

    def slot_record(self, cluster: str) -> Path:
        """The inode of ``cluster``'s real-node namespace (real_node.RealNode.owns_slot)."""
        if self.legacy:
            return self.state_dir / "real-nodes" / cluster / "netns-inode"
        return self.directory / "slots" / f"{cluster}.netns-inode"

    @property
    def kernel_tunables(self) -> Path:
        if self.legacy:
            return self.state_dir / "real-nodes" / "kernel-tunables-before.json"
        return self.directory / "kernel-tunables-before.json"

    def alive(self) -> bool:
        """Whether the state directory is still this environment's (holds its id)."""
        if self.legacy:
            return self.state_dir.is_dir()
        return read_id(self.state_dir) == self.env_id


def read_id(state_dir: Path) -> str:
    try:
        return (state_dir / ID_FILE).read_text().strip()
    except OSError:
        return ""


def records_of(state_dir: Path) -> Records:
    """The records of the environment in ``state_dir``: its run directory when the state
    directory names one that exists, else the state directory itself (legacy, or nothing
    made yet)."""
    env_id = read_id(state_dir)
    if env_id:
        directory = runs_dir() / env_id
        if directory.is_dir():
            return Records(directory, state_dir, env_id)
    return Records(state_dir, state_dir)


def create(state_dir: Path) -> Records:
    """A new run directory for the environment ``up`` is making in ``state_dir``; the
    state directory names it. Written in that order: a run directory whose state directory
    does not name it yet reads as an orphan, so the id goes in first."""
    env_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}"
    directory = runs_dir() / env_id
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / ID_FILE).write_text(env_id + "\n")
    directory.mkdir(parents=True, exist_ok=False)
    about = {"id": env_id, "state_dir": str(state_dir), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
    temp = directory / (ENVIRONMENT_FILE + ".tmp")
    temp.write_text(json.dumps(about, indent=2))
    os.replace(temp, directory / ENVIRONMENT_FILE)
    return Records(directory, state_dir, env_id)


def all_records() -> list[Records]:
    """Every run directory on this machine (of the runs dir in effect), oldest first."""
    base = runs_dir()
    if not base.is_dir():
        return []
    found = []
    for directory in sorted(base.iterdir()):
        try:
            about = json.loads((directory / ENVIRONMENT_FILE).read_text())
        except (OSError, ValueError):
            continue  # being written (create), or not ours
        found.append(Records(directory, Path(about["state_dir"]), str(about["id"])))
    return found


def orphans() -> list[Records]:
    """The environments whose state directory vanished or names another environment."""
    return [records for records in all_records() if not records.alive()]


def forget(records: Records) -> None:
    """Remove the records once everything they name is gone (``down`` succeeded)."""
    if records.legacy:
        for path in (records.processes, records.topology):
            path.unlink(missing_ok=True)
        return
    shutil.rmtree(records.directory, ignore_errors=True)
    if read_id(records.state_dir) == records.env_id:
        (records.state_dir / ID_FILE).unlink(missing_ok=True)
