"""readable(): select()'s answer without select()'s descriptor limit (kube_offload/runtime/sockets.py)."""

from __future__ import annotations

import select
import socket

import pytest

from kube_offload.runtime.sockets import readable
from support.descriptors import high_socketpair


def test_select_itself_refuses_such_descriptors():
    # What the relays used before: the reason readable() exists.
    a, b = high_socketpair()
    try:
        with pytest.raises(ValueError):
            select.select([a, b], [], [], 0)
    finally:
        a.close()
        b.close()


def test_readable_answers_for_descriptors_above_fd_setsize():
    a, b = high_socketpair()
    try:
        assert readable([a, b], 0) == []
        b.sendall(b"x")
        assert readable([a, b], 1) == [a]
        b.close()
        assert readable([a], 1) == [a]  # EOF reads as readable, as select says
        assert a.recv(1) == b"x" and a.recv(1) == b""
    finally:
        a.close()


def test_readable_waits_up_to_the_timeout_and_reports_a_closed_socket_at_once():
    a, b = socket.socketpair()
    try:
        assert readable([a], 0.05) == []
        b.close()
        a.close()
        assert readable([a], None) == [a]  # fileno() -1: its recv will say it ended
    finally:
        b.close()
