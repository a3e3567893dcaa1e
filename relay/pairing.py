"""Pairing a pod's connection with an idle uplink, and piping bytes between the two.

No Kubernetes here: plain sockets, so the tests run it over loopback. An uplink is a TCP
connection that came in on the uplink port (a port-forward of the consumer's vkubelet) and
waits, idle, in a FIFO. When a pod connects, the oldest uplink still open is taken, one
:data:`GO` byte is written on it (the vkubelet then dials the home API server) and the two
sockets are spliced until either side closes.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from typing import Callable

from kube_offload.runtime.sockets import close_quietly, readable

# What the relay writes on an uplink when a pod is paired with it: "dial home now". The
# only byte the relay ever adds; everything after it is the pod's.
GO = b"\x01"
PUMP_CHUNK = 64 * 1024
SELECT_SECONDS = 1.0


def uplink_open(sock: socket.socket) -> bool:
    """Whether an idle uplink is still usable: open, and silent (the vkubelet writes
    nothing before the go byte, so data or EOF here both mean: drop it)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return True  # nothing to read: open and idle
    except OSError:
        return False
    return False  # b"" (closed) or unexpected bytes


class UplinkPool:
    """Idle uplinks, oldest first. :meth:`take` waits up to ``timeout`` for one that is
    still open and has taken the go byte; closed ones met on the way are dropped."""

    def __init__(self, *, is_open: Callable[[socket.socket], bool] = uplink_open) -> None:
        self._idle: collections.deque[socket.socket] = collections.deque()
        self._cond = threading.Condition()
        self._is_open = is_open
        self._closed = False
        self.dropped = 0  # uplinks found closed (or unwritable) when a pod came

    def add(self, sock: socket.socket) -> None:
        with self._cond:
            if self._closed:
                close_quietly(sock)
                return
            self._idle.append(sock)
            self._cond.notify()

    def idle(self) -> int:
        with self._cond:
            return len(self._idle)

    def prune(self) -> int:
        """Drop the idle uplinks that have closed; how many are left."""
        with self._cond:
            keep = collections.deque(s for s in self._idle if self._is_open(s) or self._drop(s))
            self._idle = keep
            return len(keep)

    def _drop(self, sock: socket.socket) -> bool:
        self.dropped += 1
        close_quietly(sock)
        return False

    def take(self, timeout: float) -> socket.socket | None:
        """The oldest open uplink, the go byte already written on it; None when none
        came within ``timeout`` seconds (or the pool is closed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                while self._idle:
                    sock = self._idle.popleft()
                    if not self._is_open(sock):
                        self._drop(sock)
                        continue
                    try:
                        sock.sendall(GO)
                    except OSError:
                        self._drop(sock)
                        continue
                    return sock
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
        return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            while self._idle:
                close_quietly(self._idle.popleft())
            self._cond.notify_all()


def pump(a: socket.socket, b: socket.socket, *, stop: threading.Event | None = None) -> tuple[int, int]:
    """Copy bytes both ways between ``a`` and ``b``, untouched, until either side closes
    (EOF or an error) or ``stop`` is set; then close both. (bytes a->b, bytes b->a).

    Both directions end together: the pod's protocol (TLS, HTTP) has no use for a half
    close, and an uplink cannot carry one (a port-forward channel has no EOF of its own)."""
    sent = {a: 0, b: 0}
    peer = {a: b, b: a}
    try:
        while stop is None or not stop.is_set():
            readable_now = readable([a, b], SELECT_SECONDS)
            for src in readable_now:
                try:
                    data = src.recv(PUMP_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    return sent[a], sent[b]
                try:
                    peer[src].sendall(data)
                except OSError:
                    return sent[a], sent[b]
                sent[src] += len(data)
        return sent[a], sent[b]
    finally:
        close_quietly(a)
        close_quietly(b)
