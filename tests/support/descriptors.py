"""Sockets whose descriptors are above FD_SETSIZE (1024), as in a process that holds over
a thousand connections (a home API relay, a vkubelet's uplinks)."""

from __future__ import annotations

import os
import resource
import socket

import pytest

FD_SETSIZE = 1024


def high_socketpair(base: int = 1500) -> tuple[socket.socket, socket.socket]:
    """A connected pair at descriptors ``base`` and ``base + 1`` (the soft descriptor limit
    raised toward the hard one when needed, as a container runtime gives a relay)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= base + 2:
        if hard != resource.RLIM_INFINITY and hard <= base + 2:
            pytest.fail(f"this test needs a descriptor limit above {base + 2}; the hard limit here is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (base + 64, hard))
    pair = []
    for index, sock in enumerate(socket.socketpair()):
        high = base + index
        os.dup2(sock.fileno(), high)
        sock.close()
        pair.append(socket.socket(fileno=high))
    return pair[0], pair[1]
