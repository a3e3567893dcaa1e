"""Bounds of the kubelet API server: how many connections and streams it serves at once,
how long a stream may sit idle, how long the remote API server may take to connect.

Why: every connection is a thread in the vkubelet process, next to the loops that
offload pods and mirror their status. Without a cap, a burst of connections (a runaway
script, 10 000 ``kubectl exec`` at once, or a client that opens sockets and says
nothing) would starve those loops of memory and CPU. Past the caps the server answers at
once with a clear error instead: ``503`` (too many connections) and ``429`` (too many
streams), each with a ``Retry-After`` and a message naming the flag to raise.

The flags (``--kubelet-max-connections`` ...) are declared here and read into
:class:`StreamLimits`, one field of the vkubelet's Settings.
"""

from __future__ import annotations

import argparse
import functools
import threading
from dataclasses import dataclass

from kube_offload.runtime.flags import add_flag, non_negative_duration, positive_duration, positive_int

# Connections over the cap get an answer from a few extra threads; past those they are
# closed without one (a burst must not create threads without bound either).
REJECTING_CONNECTIONS = 16
# How long an over-the-cap connection may take to handshake and send its request.
REJECT_TIMEOUT = 5.0
RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class StreamLimits:
    """``0`` in a timeout means "none"."""

    # Connections served at once (each is a thread).
    max_connections: int = 256
    # exec, attach, port-forward and followed logs at once (each holds a connection to
    # the remote API server too).
    max_streams: int = 128
    # An exec/attach/port-forward with no data either way, or a followed log with no new
    # line, for this long is closed (the kubelet's --streaming-connection-idle-timeout,
    # whose default is 4h).
    stream_idle_timeout: float = 4 * 3600.0
    # TCP + TLS + the answer to the upgrade or log request, from the remote API server.
    remote_connect_timeout: float = 10.0

    def problems(self) -> list[str]:
        problems = []
        if self.max_connections < 1:
            problems.append(f"--kubelet-max-connections={self.max_connections} must be at least 1")
        if self.max_streams < 1:
            problems.append(f"--kubelet-max-streams={self.max_streams} must be at least 1")
        if self.max_streams > self.max_connections:
            problems.append(
                f"--kubelet-max-streams={self.max_streams} cannot exceed --kubelet-max-connections="
                f"{self.max_connections}: every stream is a connection"
            )
        if self.remote_connect_timeout <= 0:
            problems.append("--kubelet-remote-connect-timeout must be positive")
        return problems


def add_limit_flags(parser: argparse.ArgumentParser, component: str) -> None:
    flag = functools.partial(add_flag, parser, component)
    defaults = StreamLimits()
    flag("--kubelet-max-connections", default=defaults.max_connections, type=positive_int,
         help="connections the kubelet API serves at once; past it: 503 with Retry-After")
    flag("--kubelet-max-streams", default=defaults.max_streams, type=positive_int,
         help="exec/attach/port-forward/followed-log streams at once; past it: 429 with Retry-After")
    flag("--kubelet-stream-idle-timeout", default="4h", type=non_negative_duration,
         help="close an exec/attach/port-forward or followed log idle this long; 0: never")
    flag("--kubelet-remote-connect-timeout", default="10s", type=positive_duration,
         help="how long the remote API server may take to accept a stream or log request")


def limits_from_args(args: argparse.Namespace) -> StreamLimits:
    return StreamLimits(
        max_connections=int(args.kubelet_max_connections),
        max_streams=int(args.kubelet_max_streams),
        stream_idle_timeout=float(args.kubelet_stream_idle_timeout),
        remote_connect_timeout=float(args.kubelet_remote_connect_timeout),
    )


class Slots:
    """A counter with a ceiling: ``acquire`` takes a slot if one is free (never waits)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    def acquire(self) -> bool:
        with self._lock:
            if self._used >= self.capacity:
                return False
            self._used += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._used = max(0, self._used - 1)

    @property
    def used(self) -> int:
        return self._used
