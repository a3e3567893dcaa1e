"""The webhook's asyncio worker (kube_offload/runtime/asyncio_worker.py) over real TLS
sockets: keep-alive, what it refuses and how, timeouts, many connections, graceful stop
and certificate renewal. The app's own behaviour is test_webhook_http.py's; these talk raw
HTTP/1.1 to see exactly what goes over the wire."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from component.conftest import LOOPBACK, TlsFiles, free_port, make_tls_files, start_https_server
from kube_offload.admission import build_review
from kube_offload.runtime import asyncio_worker
from webhook.namespace_cache import StaticNamespaceSource
from webhook.settings import DEFAULT_MAX_BODY_BYTES

NAMESPACES = [
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "remote-eu", "labels": {"kube-offload.io/enabled": "true", "kube-offload.io/pod-placement": "Remote"}},
    }
]
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "remote-eu"},
       "spec": {"containers": [{"name": "app", "image": "nginx"}]}}


class SlowSource(StaticNamespaceSource):
    """A namespace cache whose every lookup blocks, like a miss that GETs from the apiserver."""

    def __init__(self, seconds: float) -> None:
        super().__init__(NAMESPACES)
        self._seconds = seconds

    def get_policy(self, name: str) -> Any:
        time.sleep(self._seconds)
        return super().get_policy(name)


def run(port: int, tls: TlsFiles, source_factory: Any, keepalive: int, workers: int) -> None:
    from webhook.server import serve
    from webhook.settings import ServerSettings, WebhookSettings

    serve(
        ServerSettings(tls_cert=str(tls.cert), tls_key=str(tls.key), bind=f"{LOOPBACK}:{port}", workers=workers,
                       worker_class="asyncio", log_level="WARNING", keepalive_seconds=keepalive,
                       graceful_timeout_seconds=3),
        WebhookSettings(enable_echo=True),
        source_factory,
    )


@pytest.fixture
def serve_webhook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``serve_webhook(source_factory=..., keepalive=30, workers=2, read_timeout=...)``: a
    webhook with its own TLS files (the renewal test rewrites them); stopped after the test."""
    started = []

    def start(source_factory: Any = None, *, keepalive: int = 30, workers: int = 2,
              read_timeout: float | None = None) -> tuple[Any, TlsFiles, int]:
        if read_timeout is not None:
            # The server is forked from this process: it inherits the patched constant.
            monkeypatch.setattr(asyncio_worker, "READ_TIMEOUT", read_timeout)
        tls = make_tls_files(tmp_path / f"tls{len(started)}")
        port = free_port()
        server = start_https_server(
            run, port, tls, source_factory or functools.partial(StaticNamespaceSource, NAMESPACES), keepalive, workers,
            port=port, ca_cert=tls.ca_cert, ready_path="/readyz",
        )
        started.append(server)
        return server, tls, port

    yield start
    for server in started:
        server.stop()


def connect(tls: TlsFiles, port: int, timeout: float = 10) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(tls.ca_cert))
    raw = socket.create_connection((LOOPBACK, port), timeout=timeout)
    return context.wrap_socket(raw, server_hostname=LOOPBACK)


class Responses:
    """Reads HTTP/1.1 responses (Content-Length framed, as the server sends) off a socket."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def next(self, *, head_request: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before a response; got {self.buffer!r}")
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = 0 if head_request else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            if not self._fill():
                raise ConnectionError("closed within a response body")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        """True when the server has closed the connection (nothing more comes)."""
        try:
            return not self._fill() and not self.buffer
        except (ConnectionError, ssl.SSLError):
            return True


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    fields = {"Host": "localhost", "Content-Type": "application/json", **(headers or {})}
    if body or method == "POST":
        fields.setdefault("Content-Length", str(len(body)))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode() + body


REVIEW = json.dumps(build_review(POD, uid="u1")).encode()


def test_keep_alive_serves_many_requests_on_one_connection_pipelined_too(serve_webhook) -> None:
    _, tls, port = serve_webhook()
    with connect(tls, port) as sock:
        responses = Responses(sock)
        for _ in range(5):
            sock.sendall(request("POST", "/mutate/pods", REVIEW))
            status, headers, body = responses.next()
            assert status == 200 and headers["connection"] == "keep-alive" and "date" in headers
            assert json.loads(body)["response"]["uid"] == "u1"
        # Three requests in one write: three answers, in order.
        sock.sendall(request("POST", "/echo", b'{"n":1}') + request("GET", "/healthz") + request("POST", "/echo", b'{"n":3}'))
        assert [responses.next()[2] for _ in range(3)] == [b'{"n":1}', b"ok\n", b'{"n":3}']
        # HEAD: the length a GET would get, no body; the connection goes on.
        sock.sendall(request("HEAD", "/healthz") + request("GET", "/healthz"))
        status, headers, body = responses.next(head_request=True)
        assert (status, headers["content-length"], body) == (200, "3", b"")
        assert responses.next()[2] == b"ok\n"
        # Connection: close is honoured.
        sock.sendall(request("GET", "/healthz", headers={"Connection": "close"}))
        status, headers, _ = responses.next()
        assert status == 200 and headers["connection"] == "close"
        assert responses.closed()


def test_chunked_and_expect_continue(serve_webhook) -> None:
    _, tls, port = serve_webhook()
    with connect(tls, port) as sock:
        responses = Responses(sock)
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n")
        assert responses.next()[:3:2] == (200, b'{"a":1}')
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert responses.next()[0] == 100
        sock.sendall(b"{}")
        assert responses.next()[:3:2] == (200, b"{}")


@pytest.mark.parametrize(
    ("wire", "status"),
    [
        (b"\x00\x01garbage that is not HTTP\r\n\r\n", 400),
        (b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\n\r\n", 411),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: " + b"a" * 8000 + b"\r\n" * 9, 431),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ],
)
def test_bad_requests_are_4xx_and_close_and_the_server_goes_on(serve_webhook, wire: bytes, status: int) -> None:
    _, tls, port = serve_webhook(workers=1)
    with connect(tls, port) as sock:
        if status == 431 and wire.endswith(b"\r\n" * 9):
            for _ in range(10):  # a head that never ends: refused once it passes the limit
                sock.sendall(b"X-More: " + b"a" * 8000 + b"\r\n")
        else:
            sock.sendall(wire)
        responses = Responses(sock)
        got, headers, _ = responses.next()
        assert got == status and headers["connection"] == "close"
        assert responses.closed()
    with connect(tls, port) as sock:
        sock.sendall(request("GET", "/healthz"))
        assert Responses(sock).next()[0] == 200


def test_body_over_the_limit_is_413_unread_and_the_connection_closes(serve_webhook) -> None:
    _, tls, port = serve_webhook()
    with connect(tls, port) as sock:
        # Only the head: the answer comes without the body being sent.
        sock.sendall(f"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Length: {DEFAULT_MAX_BODY_BYTES + 1}\r\n"
                     "Expect: 100-continue\r\n\r\n".encode())
        responses = Responses(sock)
        status, headers, body = responses.next()
        assert status == 413 and headers["connection"] == "close"
        assert json.loads(body)["reason"] == "RequestEntityTooLarge"
        assert responses.closed()


def test_slow_and_idle_connections_are_cut_off(serve_webhook) -> None:
    _, tls, port = serve_webhook(keepalive=1, read_timeout=1.0, workers=1)
    with connect(tls, port) as idle:
        started = time.monotonic()
        assert Responses(idle).closed()  # nothing sent: closed after the keep-alive timeout
        assert 0.8 < time.monotonic() - started < 5
    with connect(tls, port) as slow:
        slow.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # and the rest never
        responses = Responses(slow)
        status, _, _ = responses.next()
        assert status == 408 and responses.closed()
    with connect(tls, port) as loris:
        started = time.monotonic()
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            for _ in range(40):  # a byte every 0.1 s: the whole head must come within the timeout
                loris.sendall(b"X")
                time.sleep(0.1)
        assert time.monotonic() - started < 3


def test_many_concurrent_connections_and_a_stalled_one(serve_webhook) -> None:
    _, tls, port = serve_webhook()
    stalled = connect(tls, port)
    stalled.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n{")  # holds its connection
    errors: list[BaseException] = []
    answered = []

    def client(n: int) -> None:
        try:
            with connect(tls, port) as sock:
                responses = Responses(sock)
                for i in range(10):
                    body = json.dumps({"client": n, "i": i}).encode()
                    sock.sendall(request("POST", "/echo", body))
                    status, _, echoed = responses.next()
                    assert status == 200 and echoed == body
                answered.append(n)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stalled.close()
    assert not errors, errors[:3]
    assert sorted(answered) == list(range(40))


def test_graceful_stop_finishes_in_flight_requests_and_closes_idle_ones(serve_webhook) -> None:
    server, tls, port = serve_webhook(functools.partial(SlowSource, 1.5), workers=1)
    idle = connect(tls, port)
    idle.sendall(request("GET", "/healthz"))
    idle_responses = Responses(idle)
    assert idle_responses.next()[0] == 200
    busy = connect(tls, port)
    busy.sendall(request("POST", "/mutate/pods", REVIEW))
    time.sleep(0.5)  # the worker is inside the slow lookup
    stop_sent = time.monotonic()
    os.kill(server.process.pid, signal.SIGTERM)
    status, headers, body = Responses(busy).next()
    assert status == 200 and headers["connection"] == "close"
    assert json.loads(body)["response"]["allowed"] is True
    assert idle_responses.closed()
    server.process.join(10)
    assert not server.process.is_alive() and time.monotonic() - stop_sent < 5
    with pytest.raises(OSError):
        connect(tls, port, timeout=2)
    busy.close()
    idle.close()


def test_renewed_certificate_files_are_used_by_new_connections(serve_webhook, tmp_path: Path) -> None:
    _, tls, port = serve_webhook(workers=1)
    renewed = make_tls_files(tmp_path / "renewed")  # another CA altogether
    with connect(tls, port) as sock:
        sock.sendall(request("GET", "/healthz"))
        assert Responses(sock).next()[0] == 200
    # As `certs renew` does: new files renamed into place, key first.
    for source, target in ((renewed.key, tls.key), (renewed.cert, tls.cert)):
        shutil.copy(source, str(target) + ".new")
        os.replace(str(target) + ".new", target)
    time.sleep(asyncio_worker.CERT_CHECK_SECONDS + 0.2)
    with connect(renewed, port) as sock:  # verified against the new CA only
        sock.sendall(request("GET", "/healthz"))
        assert Responses(sock).next()[0] == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        connect(tls, port)


def test_bodies_wait_for_room_in_the_byte_budget_and_time_out_cleanly(serve_webhook) -> None:
    _, tls, port = serve_webhook(read_timeout=1.0, workers=1)
    big = DEFAULT_MAX_BODY_BYTES
    # Two bodies at the limit, never finished, fill the worker's budget (twice the limit);
    # a third waits for room, and all three end in 408 when their request time is up.
    holders = [connect(tls, port) for _ in range(3)]
    for sock in holders:
        sock.sendall(f"POST /echo HTTP/1.1\r\nContent-Length: {big}\r\n\r\n{{".encode())
        time.sleep(0.1)
    for sock in holders:
        status, _, _ = Responses(sock).next()
        assert status == 408
        sock.close()
    # Everything they held (or waited for) is back: two full bodies fit at once again.
    payload = b"[" + b"0," * ((big - 3) // 2) + b"0]"
    assert len(payload) <= big
    senders = [connect(tls, port) for _ in range(2)]
    for sock in senders:
        sock.sendall(request("POST", "/echo", payload))
    for sock in senders:
        status, _, body = Responses(sock).next()
        assert status == 200 and body == payload
        sock.close()
