"""Serve the extender from a JSON snapshot of nodes and namespaces instead of informers.

The real server (gunicorn, HTTP or HTTPS, the same app) with :class:`StaticCaches`
loaded from a file, so the component tests, the HTTP benchmark and offline experiments
need no API server::

    python -m extender.offline snapshot.json --bind 127.0.0.1:18080

The snapshot is ``{"nodes": [Node, ...], "namespaces": [Namespace, ...]}`` in the API's
JSON shape. :func:`running_server` starts one in a child process and waits until it
answers; gunicorn must own a main thread for its signal handling, hence the process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterator

from dataclasses import replace

from kube_offload.runtime.flags import add_flag
from kube_offload.runtime.serving import add_server_flags, read_server_flags

from kube_offload import node_filter
from extender.caches import StaticCaches
from extender.settings import SERVING_FLAGS, ExtenderSettings, ServerSettings

COMPONENT = "extender-offline"
# The extender's serving flags, on loopback, quieter.
OFFLINE_FLAGS = replace(SERVING_FLAGS, component=COMPONENT,
                        defaults=ServerSettings(bind="127.0.0.1:8080", threads=4, log_level="WARNING"))


class SnapshotCaches(StaticCaches):
    """Static caches that report "not synced" until ``gate`` exists (when given): lets a
    test watch /readyz and the filter before and after the sync."""

    def __init__(self, *, gate: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gate = gate

    def synced(self) -> bool:
        return self._gate is None or os.path.exists(self._gate)


def load_caches(path: str, *, node_cache: bool, gate: str | None) -> SnapshotCaches:
    with open(path, encoding="utf-8") as handle:
        snapshot = json.load(handle)
    return SnapshotCaches(
        gate=gate, nodes=snapshot.get("nodes", []), namespaces=snapshot.get("namespaces", []), node_cache=node_cache
    )


def main(argv: list[str] | None = None) -> int:
    from extender.server import serve

    parser = argparse.ArgumentParser(prog="python -m extender.offline", description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", help="JSON file with nodes and namespaces")
    add_flag(parser, COMPONENT, "--node-cache-capable", default=True, type=bool,
             help="answer NodeNames requests from the snapshot's nodes")
    add_flag(parser, COMPONENT, "--strategy", default=node_filter.DEFAULT_STRATEGY, choices=node_filter.STRATEGIES,
             help="prioritize strategy")
    add_flag(parser, COMPONENT, "--sync-gate", default=None,
             help="report caches not synced until this file exists")
    add_flag(parser, COMPONENT, "--bench-passthrough", default=False, type=bool,
             help="serve POST /bench/passthrough (benchmark baseline)")
    add_server_flags(parser, OFFLINE_FLAGS)
    args = parser.parse_args(argv)

    from kube_offload.runtime.logs import setup_logging

    setup_logging(args.log_level)
    serve(
        read_server_flags(args, OFFLINE_FLAGS),
        ExtenderSettings(strategy=args.strategy, bench_passthrough=args.bench_passthrough,
                         max_body_bytes=args.max_body_bytes, parse_memory_budget=args.parse_memory_budget),
        lambda: load_caches(args.snapshot, node_cache=args.node_cache_capable, gate=args.sync_gate),
    )
    return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running_server(
    snapshot: str,
    *,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    ca_file: str | None = None,
    extra_args: tuple[str, ...] = (),
    startup_timeout: float = 30.0,
    pids: list[int] | None = None,
    python_path: str | None = None,
) -> Iterator[str]:
    """Start ``python -m extender.offline`` on a free loopback port; yields its base URL
    once /healthz answers, and stops the process (only that one) afterwards. ``pids``
    receives the server's process id (the gunicorn arbiter); ``python_path``: the checkout
    to run instead of this one (a benchmark's baseline)."""
    port = free_port()
    command = [sys.executable, "-m", "extender.offline", snapshot, "--bind", f"127.0.0.1:{port}", *extra_args]
    if tls_cert:
        command += ["--tls-cert", tls_cert, "--tls-key", tls_key or ""]
    scheme = "https" if tls_cert else "http"
    base = f"{scheme}://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=ca_file) if tls_cert else None
    # A file, not a pipe: nobody reads the pipe while the server runs, and a full pipe
    # would block the server on its next log line.
    log_file = tempfile.TemporaryFile()
    env = None if python_path is None else {**os.environ, "PYTHONPATH": python_path}
    # -m puts the working directory first on sys.path: the other checkout's, then.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log_file, env=env, cwd=python_path)
    if pids is not None:
        pids.append(process.pid)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                log_file.seek(0)
                raise RuntimeError(
                    f"extender exited with {process.returncode}: {log_file.read().decode(errors='replace')}"
                )
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2, context=context) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"extender did not answer on {base} within {startup_timeout}s")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_file.close()


if __name__ == "__main__":
    sys.exit(main())
