"""Container logs, exec and attach for the pods of a loopback (kwok) cluster.

kwok simulates pods: nothing runs, so by default a kwok "kubelet" has no logs to serve and
nothing to exec into, and ``kubectl logs`` / ``kubectl exec`` on such a pod fail. kwok can
be told to serve a file as every container's log and to run exec commands on the host;
the end-to-end tests and the demo need exactly that in each REMOTE cluster, to show that
``kubectl logs/exec`` on an offloaded pod in the LOCAL cluster really reach the remote one.

:func:`remote_config_documents` returns the kwok configuration documents
(``kwok.x-k8s.io/v1alpha1``) that do it; the harness writes them to a YAML file and passes
it to ``kwokctl create cluster`` as an extra ``--config``. kwokctl copies them into the
cluster's own ``kwok.yaml``, which the kwok controller reads with ``--config`` (kwok v0.8.0:
``pkg/kwokctl/runtime/cluster.go`` ``Save``; types in ``pkg/apis/v1alpha1/cluster_logs_types.go``,
``cluster_exec_types.go``, ``cluster_attach_types.go``).

What kwok then does (kwok v0.8.0, ``pkg/kwok/server/debugging_*.go``):

* **logs**: the file is read with the kubelet's own CRI log reader
  (``k8s.io/cri-client/pkg/logs.ReadLogs``), so it must be in the CRI log format
  (``<RFC3339Nano> <stdout|stderr> F <text>``) and tailLines, timestamps, sinceSeconds,
  sinceTime, limitBytes and follow all behave as on a real node; ``previous`` reads a
  second file. Follow never ends by itself (kwok cannot say the container stopped).
* **exec**: the command runs on the host, in a working directory under the state
  directory. kwok reports a non-zero exit as an internal error whose message ends in
  ``exit status <n>`` (its exec helper wraps the error, so the kubelet streaming code does
  not see an exit code): ``kubectl exec`` then exits 1 with that message, where a real
  kubelet would make it exit ``<n>``.
* **attach**: streams the lines appended to the log file from the moment of attaching.
* **port-forward**: every port of every pod is forwarded to one TCP address on the host,
  ``127.0.0.1:<port>`` with a port chosen once per state directory
  (:func:`port_forward_target`); a test serves there what it wants to reach
  (``ClusterPortForward``, ``pkg/kwok/server/debugging_port_forword.go``).
* **tar** (``kubectl cp``): kwok never closes an exec'd command's stdin
  (``pkg/utils/exec/exec.go``: the stdin copy is never closed), and GNU tar reading an
  archive from a pipe waits for a full 10 KiB record - i.e. for EOF - after kubectl's
  end-of-archive blocks. ``TAR_OPTIONS=--blocking-factor=1`` in the exec environment
  makes it read 512-byte records and stop at the end-of-archive marker, so
  ``kubectl cp`` into a pod finishes. Relative paths land under the exec directory.

The same files serve every pod of every remote cluster of one state directory; the lines
say they are simulated. Only for loopback test clusters: exec runs commands on the host.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable

KWOK_API_VERSION = "kwok.x-k8s.io/v1alpha1"
SIM_DIR_NAME = "kwok-sim"

# Lines written when the files are created. The first two carry a timestamp far in the
# past so that ``kubectl logs --since`` / ``--since-time`` visibly drop them.
OLD_LINES = ("kube-offload simulated log: old line 1", "kube-offload simulated log: old line 2")
OLD_LINES_TIME = datetime(2001, 1, 1, tzinfo=timezone.utc)
CURRENT_LINES = (
    "kube-offload simulated log: line 1",
    "kube-offload simulated log: line 2",
    "kube-offload simulated log: line 3",
)
STDERR_LINE = "kube-offload simulated log: a line on stderr"
PREVIOUS_LINES = (
    "kube-offload simulated log: previous instance line 1",
    "kube-offload simulated log: previous instance line 2",
)
# Set in the environment of every simulated exec, so a test can tell the command ran
# through kwok (e.g. ``sh -c 'echo $KUBE_OFFLOAD_SIMULATED_EXEC'``).
EXEC_ENV_NAME = "KUBE_OFFLOAD_SIMULATED_EXEC"
EXEC_ENV_VALUE = "kwok"
# See the module docstring (tar).
TAR_ENV = {"name": "TAR_OPTIONS", "value": "--blocking-factor=1"}
PORT_FORWARD_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class SimulatedFiles:
    """Where the simulated logs of one state directory live."""

    root: Path
    logs: Path
    previous_logs: Path
    exec_workdir: Path
    port_forward_target: Path  # holds the host port every pod port is forwarded to


def simulated_files(state_dir: Path) -> SimulatedFiles:
    root = Path(state_dir).resolve() / SIM_DIR_NAME
    return SimulatedFiles(
        root=root,
        logs=root / "container.log",
        previous_logs=root / "previous-container.log",
        exec_workdir=root / "exec",
        port_forward_target=root / "port-forward-target",
    )


def cri_log_line(moment: datetime, text: str, stream: str = "stdout") -> str:
    """One line in the CRI log format kwok (and the kubelet) read: nanosecond RFC 3339
    time in UTC, the stream, ``F`` (a full line, not a partial one), the text."""
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"stream must be stdout or stderr, got {stream!r}")
    if "\n" in text:
        raise ValueError("one log line cannot contain a newline")
    moment = moment.astimezone(timezone.utc)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond:06d}000Z {stream} F {text}\n"


def initial_log_text(now: datetime) -> str:
    """The container log as created: two old lines, three current stdout lines and one
    stderr line, one millisecond apart so their order survives any re-sorting."""
    lines = [cri_log_line(OLD_LINES_TIME + timedelta(seconds=i), text) for i, text in enumerate(OLD_LINES)]
    step = timedelta(milliseconds=1)
    lines += [cri_log_line(now + i * step, text) for i, text in enumerate(CURRENT_LINES)]
    lines.append(cri_log_line(now + len(CURRENT_LINES) * step, STDERR_LINE, "stderr"))
    return "".join(lines)


def previous_log_text(now: datetime) -> str:
    step = timedelta(milliseconds=1)
    start = now - timedelta(minutes=1)
    return "".join(cri_log_line(start + i * step, text) for i, text in enumerate(PREVIOUS_LINES))


def write_simulated_files(state_dir: Path, *, now: datetime | None = None) -> SimulatedFiles:
    """Create the log files (once: existing ones are kept, since a running kwok may be
    following them) and the exec working directory."""
    files = simulated_files(state_dir)
    now = now or datetime.now(timezone.utc)
    files.root.mkdir(parents=True, exist_ok=True)
    files.exec_workdir.mkdir(exist_ok=True)
    if not files.logs.exists():
        files.logs.write_text(initial_log_text(now))
    if not files.previous_logs.exists():
        files.previous_logs.write_text(previous_log_text(now))
    return files


def append_log_lines(path: Path, texts: Iterable[str], *, stream: str = "stdout", now: datetime | None = None) -> None:
    """Append lines to a simulated log (what a running container would do): kwok's
    follow and attach streams pick them up."""
    now = now or datetime.now(timezone.utc)
    step = timedelta(milliseconds=1)
    block = "".join(cri_log_line(now + i * step, text, stream) for i, text in enumerate(texts))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(block)
        handle.flush()


def port_forward_target(state_dir: Path) -> int:
    """The host port every remote pod's ports are forwarded to (``kubectl port-forward``),
    chosen free once per state directory and kept in a file, so a test started later
    serves on the port the running kwok was configured with."""
    files = simulated_files(state_dir)
    if files.port_forward_target.exists():
        return int(files.port_forward_target.read_text().strip())
    with socket.socket() as sock:
        sock.bind((PORT_FORWARD_ADDRESS, 0))
        port = sock.getsockname()[1]
    files.root.mkdir(parents=True, exist_ok=True)
    files.port_forward_target.write_text(f"{port}\n")
    return port


def remote_config_documents(state_dir: Path) -> list[dict]:
    """The kwok ``ClusterLogs``, ``ClusterExec``, ``ClusterAttach`` and ``ClusterPortForward`` documents for a
    remote loopback cluster (every pod, every container), after creating the files they
    point at under ``state_dir``. Write them as one multi-document YAML file and pass it
    to ``kwokctl create cluster`` with an extra ``--config``."""
    files = write_simulated_files(state_dir)
    logs = str(files.logs)
    return [
        {
            "apiVersion": KWOK_API_VERSION,
            "kind": "ClusterLogs",
            "metadata": {"name": "kube-offload-simulated-logs"},
            # No selector and no container list: the default for every container of
            # every pod (kwok: findLogInLogs takes an entry without containers as default).
            "spec": {"logs": [{"logsFile": logs, "previousLogsFile": str(files.previous_logs), "follow": True}]},
        },
        {
            "apiVersion": KWOK_API_VERSION,
            "kind": "ClusterExec",
            "metadata": {"name": "kube-offload-simulated-exec"},
            "spec": {
                "execs": [
                    {
                        "local": {
                            "workDir": str(files.exec_workdir),
                            "envs": [{"name": EXEC_ENV_NAME, "value": EXEC_ENV_VALUE}, dict(TAR_ENV)],
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": KWOK_API_VERSION,
            "kind": "ClusterAttach",
            "metadata": {"name": "kube-offload-simulated-attach"},
            "spec": {"attaches": [{"logsFile": logs}]},
        },
        {
            "apiVersion": KWOK_API_VERSION,
            "kind": "ClusterPortForward",
            "metadata": {"name": "kube-offload-simulated-port-forward"},
            # No ports: every port (kwok: findPortInForwards takes it as the default).
            "spec": {"forwards": [{"target": {"address": PORT_FORWARD_ADDRESS, "port": port_forward_target(state_dir)}}]},
        },
    ]


def remote_kwok_config_note() -> str:
    """How the harness uses :func:`remote_config_documents` (for docs and ``--help``)."""
    return (
        "Each remote loopback cluster is created with an extra kwokctl --config file holding "
        "kwok ClusterLogs, ClusterExec, ClusterAttach and ClusterPortForward documents "
        "(kube_offload_harness.kwok_sim.remote_config_documents): every pod's containers serve "
        f"<state dir>/{SIM_DIR_NAME}/container.log as their log (CRI format; "
        "previous-container.log for --previous), attach streams what is appended to it, and "
        f"exec runs the command on the host in <state dir>/{SIM_DIR_NAME}/exec with "
        f"{EXEC_ENV_NAME}={EXEC_ENV_VALUE} and TAR_OPTIONS=--blocking-factor=1 set (kubectl cp), and every pod "
        f"port is forwarded to {PORT_FORWARD_ADDRESS}:<port in {SIM_DIR_NAME}/port-forward-target>. kwok reports a non-zero exit of an exec'd "
        "command as an internal error ending in 'exit status <n>' rather than as exit code <n>."
    )
