"""Connections of our own to the remote API server, one per stream.

Why not ``kubernetes.stream.stream()``: it upgrades through the *shared* ``ApiClient``
by swapping that instance's ``call_api`` for the duration of the handshake (a known
upstream race), so a watch or a write made meanwhile by another loop on the same client
could go out as a WebSocket request. Each stream here opens its own TLS connection from
the remote kubeconfig's ``Configuration`` (server, CA, client certificate, bearer token
- refreshed through the client's hook when it has one), bounded by a connect timeout, and
touches no shared client state. The upgrade is then done by wsproto (WebSocket) or by
forwarding the SPDY upgrade and relaying bytes (vkubelet/kubeletapi/streams.py).
"""

from __future__ import annotations

import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Sequence, cast
from urllib.parse import urlencode, urlsplit

import h11
from kubernetes import client

from vkubelet.kubeletapi import websocket as ws

HEAD_LIMIT = 64 * 1024


class RemoteError(Exception):
    """The remote API server could not be reached (``status`` 0) or refused the stream
    (``status``, and the metav1.Status ``message``/``reason`` it answered with)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", body: bytes = b"") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.body = body


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach the remote API server, read once from its Configuration."""

    host: str
    port: int
    server_name: str
    path_prefix: str
    context: ssl.SSLContext | None
    configuration: client.Configuration

    def auth_headers(self) -> list[tuple[str, str]]:
        """The credential headers, read at each connection: a token refreshed by the
        kubeconfig's exec plugin (``refresh_api_key_hook``) is the current one."""
        headers = []
        # The client's shape: {name: {"in", "key", "value", "type"}}; its stub says object.
        auth = cast("dict[str, dict[str, Any]]", self.configuration.auth_settings())
        for setting in auth.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers.append((str(setting["key"]), str(setting["value"])))
        return headers


def endpoint_from(configuration: client.Configuration) -> Endpoint:
    parts = urlsplit(configuration.host)
    secure = parts.scheme == "https"
    context = None
    if secure:
        context = ssl.create_default_context()
        if configuration.ssl_ca_cert:
            context.load_verify_locations(cafile=configuration.ssl_ca_cert)
        elif getattr(configuration, "ca_cert_data", None):
            data = configuration.ca_cert_data
            context.load_verify_locations(cadata=data.decode() if isinstance(data, bytes) else data)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        # HTTP/1.1 only: an upgrade cannot go over HTTP/2.
        context.set_alpn_protocols(["http/1.1"])
    host = parts.hostname or "localhost"
    return Endpoint(
        host=host,
        port=parts.port or (443 if secure else 80),
        server_name=getattr(configuration, "tls_server_name", None) or host,
        path_prefix=parts.path.rstrip("/"),
        context=context,
        configuration=configuration,
    )


def connect(endpoint: Endpoint, *, timeout: float) -> socket.socket:
    """A connected (TLS) socket to the remote API server, within ``timeout`` seconds for
    TCP and TLS together; RemoteError(0) otherwise."""
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except OSError as exc:
        raise RemoteError(f"cannot connect to {endpoint.host}:{endpoint.port}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if endpoint.context is None:
        return sock
    try:
        return endpoint.context.wrap_socket(sock, server_hostname=endpoint.server_name)
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise RemoteError(f"TLS with {endpoint.host}:{endpoint.port} failed: {exc}") from None


def pod_path(endpoint: Endpoint, subresource: str, namespace: str, pod: str, query: Sequence[tuple[str, str]]) -> str:
    return f"{endpoint.path_prefix}/api/v1/namespaces/{namespace}/pods/{pod}/{subresource}" + (f"?{urlencode(list(query))}" if query else "")


def _status_error(status: int, body: bytes) -> RemoteError:
    message, reason = "", ""
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict):
            message = str(parsed.get("message") or "")
            reason = str(parsed.get("reason") or "")
    except (ValueError, TypeError):
        message = body.decode("utf-8", "replace").strip()
    return RemoteError(message or f"answered {status}", status=status, reason=reason, body=body)


def open_websocket(endpoint: Endpoint, target: str, protocols: Sequence[str], *, timeout: float, name: str) -> ws.Peer:
    """A WebSocket to ``target`` on the remote API server offering ``protocols``."""
    sock = connect(endpoint, timeout=timeout)
    try:
        connection, protocol = ws.client_handshake(
            sock, host=f"{endpoint.host}:{endpoint.port}", target=target, protocols=protocols, headers=endpoint.auth_headers()
        )
    except ws.HandshakeError as exc:
        sock.close()
        if exc.status:
            raise _status_error(exc.status, exc.body) from None
        raise RemoteError(str(exc)) from None
    except OSError as exc:
        sock.close()
        raise RemoteError(f"WebSocket handshake with {endpoint.host}:{endpoint.port} failed: {exc}") from None
    sock.settimeout(None)
    return ws.Peer(sock, connection, protocol=protocol, name=name)


@dataclass
class RawUpgrade:
    """An upgraded connection the bytes of which are relayed untouched (SPDY)."""

    sock: socket.socket
    headers: list[tuple[str, str]]  # the remote 101's headers worth passing on
    leftover: bytes  # stream bytes that arrived with the 101


def open_upgrade(endpoint: Endpoint, method: str, target: str, headers: Sequence[tuple[str, str]], *, timeout: float) -> RawUpgrade:
    """Forward a (SPDY) upgrade request to the remote API server and read its answer
    with h11; RemoteError with the remote status and body unless it is a ``101``."""
    sock = connect(endpoint, timeout=timeout)
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
    request = h11.Request(
        method=method,
        target=target,
        headers=[("Host", f"{endpoint.host}:{endpoint.port}"), *headers, *endpoint.auth_headers(), ("Content-Length", "0")],
    )
    try:
        sock.sendall(conn.send(request) + conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(ws.RECV_SIZE)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                leftover, _closed = conn.trailing_data
                passed = [
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in event.headers
                    if name.lower() in (b"x-stream-protocol-version",)
                ]
                sock.settimeout(None)
                return RawUpgrade(sock=sock, headers=passed, leftover=bytes(leftover))
            if isinstance(event, h11.Response):
                body = b""
                while len(body) < HEAD_LIMIT:
                    chunk = conn.next_event()
                    if chunk is h11.NEED_DATA:
                        data = sock.recv(ws.RECV_SIZE)
                        if not data:
                            break
                        conn.receive_data(data)
                    elif isinstance(chunk, h11.Data):
                        body += bytes(chunk.data)
                    else:
                        break
                sock.close()
                raise _status_error(event.status_code, body)
            if isinstance(event, h11.ConnectionClosed):
                raise RemoteError("the remote API server closed the connection during the upgrade")
    except h11.RemoteProtocolError as exc:
        sock.close()
        raise RemoteError(f"invalid answer to the upgrade: {exc}") from None
    except OSError as exc:
        sock.close()
        raise RemoteError(f"upgrade with {endpoint.host}:{endpoint.port} failed: {exc}") from None
