"""The TCP forwarder without a namespace (the apiserver's, on the machine end of a node's
link): bytes go through both ways. Loopback only here; the real-node tier runs it on the link."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

from kube_offload_harness.cluster import free_port


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(b"echo:" + data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_forwards_to_the_target_in_its_own_namespace_when_given_none():
    server, target = _echo_server()
    listen = free_port()
    forwarder = subprocess.Popen(
        [sys.executable, "-m", "kube_offload_harness.netns_forward", "--listen", f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{target}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", listen), timeout=5)
                break
            except ConnectionRefusedError:
                assert forwarder.poll() is None, forwarder.stdout.read()
                assert time.monotonic() < deadline, "the forwarder never listened"
                time.sleep(0.1)
        with client:
            client.sendall(b"hello")
            assert client.recv(4096) == b"echo:hello"
    finally:
        forwarder.terminate()
        forwarder.wait(10)
        server.close()
