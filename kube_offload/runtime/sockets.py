"""Small socket helpers shared by the byte relays (the kubelet API's streams, the home
API relay and its uplinks)."""

from __future__ import annotations

import math
import select
import socket
from typing import Protocol, Sequence, TypeVar


class HasFileno(Protocol):
    def fileno(self) -> int: ...


T = TypeVar("T", bound=HasFileno)

# What makes a descriptor "readable" as select() reports it: data, the peer's EOF or
# hang-up, an error (the next recv says which), a descriptor closed under us.
_READ_EVENTS = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL


def close_quietly(sock: socket.socket) -> None:
    """Shut down both directions (so a peer blocked in recv wakes up) and close; a socket
    the other side already closed raises nothing."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def readable(sources: Sequence[T], timeout: float | None) -> list[T]:
    """Those of ``sources`` (sockets, or anything with ``fileno()``) that can be read now
    or become so within ``timeout`` seconds (None: wait until one does), as
    ``select.select(sources, [], [], timeout)[0]`` but without its limit: select() takes
    only descriptors below FD_SETSIZE (1024) and raises ValueError for any other, and a
    relay holding 1,000 connections holds over 2,000 descriptors (docs/performance.md,
    "Home API relay at scale"). poll() has no such limit. A source already closed
    (``fileno() < 0``) is reported readable at once: its recv then says it ended."""
    closed = [source for source in sources if source.fileno() < 0]
    if closed:
        return closed
    poller = select.poll()
    by_fd: dict[int, T] = {}
    for source in sources:
        by_fd[source.fileno()] = source
        poller.register(source.fileno(), select.POLLIN | select.POLLPRI)
    wait_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return [by_fd[fd] for fd, events in poller.poll(wait_ms) if events & _READ_EVENTS]
