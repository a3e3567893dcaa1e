"""``kubectl port-forward`` to a pod of a kwok cluster: kwok forwards every pod port to one
address on the host (``kwok_sim.port_forward_target``), where :class:`EchoServer` answers;
:func:`round_trip` sends through the forwarded local port and reads the echo back
(tests/e2e/test_kubelet_streams.py, test_multihop.py)."""

from __future__ import annotations

import re
import socket
import threading

import pytest

from kube_offload_harness import kwok_sim

FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080")


class EchoServer:
    """A TCP echo on the address kwok forwards every pod port to; counts connections."""

    def __init__(self, port: int) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((kwok_sim.PORT_FORWARD_ADDRESS, port))
        except OSError as exc:
            pytest.fail(f"cannot serve on the kwok port-forward target 127.0.0.1:{port} ({exc}); something else took it")
        self.listener.listen(16)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()


def round_trip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        threading.Thread(target=sock.sendall, args=(payload,), daemon=True).start()
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received
