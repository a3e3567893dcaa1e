"""Background processes started by the cluster harness, recorded so that exactly those
processes (by PID, and only if the PID still runs the same command) are stopped later."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class ProcessRecord:
    name: str
    pid: int
    argv: list[str]
    log: str

    def running(self) -> bool:
        return _same_process(self.pid, self.argv)


def command_line(pid: int) -> list[str]:
    """``pid``'s command line, [] when it runs nothing (gone, or a zombie)."""
    try:
        parts = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    return [part.decode(errors="replace") for part in parts if part]


def _same_process(pid: int, argv: list[str]) -> bool:
    """True if ``pid`` is alive and still runs ``argv`` (guards against PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False  # a zombie has exited; only its parent's wait() is missing
    except (OSError, IndexError):
        return False
    decoded = [part.decode(errors="replace") for part in cmdline if part]
    return decoded[: len(argv)] == argv[: len(decoded)] and len(decoded) > 0


class ProcessTable:
    """A JSON file listing the processes one harness instance started."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[ProcessRecord]:
        if not self.path.exists():
            return []
        return [ProcessRecord(**entry) for entry in json.loads(self.path.read_text())]

    def _save(self, records: list[ProcessRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_suffix(".tmp")
        temp.write_text(json.dumps([asdict(r) for r in records], indent=2))
        os.replace(temp, self.path)

    def start(
        self, name: str, argv: list[str], *, log: Path, env: dict[str, str] | None = None, netns: Path | None = None,
    ) -> ProcessRecord:
        """Start ``argv`` detached (own session, so it outlives the CLI that started it);
        inside the network namespace at ``netns`` if given (entered between fork and exec,
        so the PID and command line are the program's own, as the record needs)."""
        existing = self.get(name)
        if existing and existing.running():
            return existing
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            out.flush()
            preexec = None
            if netns is not None:
                from kube_offload_harness.netns import setns

                def preexec() -> None:
                    setns(netns)
            process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=preexec,
            )
        record = ProcessRecord(name=name, pid=process.pid, argv=argv, log=str(log))
        # Keep the Popen object referenced so Python reaps it when it exits in this process.
        _CHILDREN[process.pid] = process
        records = [r for r in self.load() if r.name != name] + [record]
        self._save(records)
        return record

    def get(self, name: str) -> ProcessRecord | None:
        return next((r for r in self.load() if r.name == name), None)

    def adopt(self, name: str, pid: int, *, log: str = "") -> ProcessRecord | None:
        """Record a running process someone else started (kwokctl's control planes), with
        the command line it runs now, so that it can be stopped like ours; None if ``pid``
        runs nothing (it exited meanwhile)."""
        argv = command_line(pid)
        if not argv:
            return None
        record = ProcessRecord(name=name, pid=pid, argv=argv, log=log)
        self._save([r for r in self.load() if r.name != name] + [record])
        return record

    def stop_prefixed(self, prefix: str) -> list[str]:
        """Stop every recorded process whose name starts with ``prefix``; returns the names
        of those that were running."""
        stopped = []
        for record in reversed(self.load()):
            if record.name.startswith(prefix) and self.stop(record.name):
                stopped.append(record.name)
        return stopped

    def stop(self, name: str, *, sig: int = signal.SIGTERM, timeout: float = 10.0) -> bool:
        """Stop the named process; SIGKILL after ``timeout``. Returns whether it was running."""
        record = self.get(name)
        if record is None:
            return False
        was_running = record.running()
        if was_running:
            _signal_and_wait(record, sig, timeout)
        self._save([r for r in self.load() if r.name != name])
        return was_running

    def kill(self, name: str) -> None:
        """SIGKILL without cleanup, for crash tests; the record stays so it can be restarted."""
        record = self.get(name)
        if record and record.running():
            os.kill(record.pid, signal.SIGKILL)
            _wait_gone(record, 10)

    def stop_all(self) -> list[str]:
        stopped = []
        for record in reversed(self.load()):
            if record.running():
                _signal_and_wait(record, signal.SIGTERM, 10)
                stopped.append(record.name)
        self._save([])
        return stopped


_CHILDREN: dict[int, subprocess.Popen] = {}


def _signal_and_wait(record: ProcessRecord, sig: int, timeout: float) -> None:
    try:
        os.kill(record.pid, sig)
    except ProcessLookupError:
        return
    if not _wait_gone(record, timeout):
        try:
            os.kill(record.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        _wait_gone(record, 5)


def _wait_gone(record: ProcessRecord, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child = _CHILDREN.get(record.pid)
        if child is not None and child.poll() is not None:
            _CHILDREN.pop(record.pid, None)
            return True
        if not record.running():
            return True
        time.sleep(0.05)
    return not record.running()
