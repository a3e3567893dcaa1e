"""Small socket helpers shared by the byte relays (the kubelet API's streams, the home
API relay and its uplinks)."""

from __future__ import annotations

import socket


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
