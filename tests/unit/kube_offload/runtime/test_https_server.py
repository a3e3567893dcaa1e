"""BackgroundServing (kube_offload/runtime/https_server.py): the start/stop/port every
in-process server of the project shares (health port, ShadowPod webhook)."""

from __future__ import annotations

import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kube_offload.runtime.https_server import BackgroundServing


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Server(BackgroundServing, ThreadingHTTPServer):
    thread_name = "test-serving"
    daemon_threads = True


def test_serves_on_its_named_thread_until_stopped_and_frees_the_port():
    server = Server(("127.0.0.1", 0), Hello)
    assert server.port > 0
    server.start()
    assert any(t.name == "test-serving" for t in threading.enumerate())
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as answer:
        assert answer.read() == b"hello"
    server.stop()
    assert not any(t.name == "test-serving" and t.is_alive() for t in threading.enumerate())
    # Nothing listens there any more: a new listener can bind it (SO_REUSEADDR only lets
    # it past the closed connection's TIME_WAIT, never past a live listener).
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", server.port))
        probe.listen()


def test_stop_without_start_closes_the_socket():
    server = Server(("127.0.0.1", 0), Hello)
    port = server.port
    server.stop()  # never started: must not block on shutdown()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
