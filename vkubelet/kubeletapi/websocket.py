"""WebSocket connections of the kubelet API's relays, on ``wsproto``.

Both hops of a stream are WebSockets: the local apiserver -> us (we are the server; the
request was already read by ``http.server``) and us -> the remote API server (we are the
client, on a connection of our own: vkubelet/kubeletapi/remote.py). ``wsproto`` does the
RFC 6455 work - handshake validation, masking, fragments, close codes, UTF-8 of text
messages - and leaves the socket to us, which the relay needs: it waits on both sockets
in one thread and never lets two threads use one TLS object.

What is ours here: header helpers that decide how a request is served (WebSocket, SPDY
or plain), message reassembly with a size cap, and the close handshake.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

# Close codes (RFC 6455 section 7.4.1).
CLOSE_NORMAL = CloseReason.NORMAL_CLOSURE.value
CLOSE_GOING_AWAY = CloseReason.GOING_AWAY.value
CLOSE_PROTOCOL_ERROR = CloseReason.PROTOCOL_ERROR.value
CLOSE_ABNORMAL = CloseReason.ABNORMAL_CLOSURE.value
CLOSE_TOO_BIG = CloseReason.MESSAGE_TOO_BIG.value
CLOSE_INTERNAL_ERROR = CloseReason.INTERNAL_ERROR.value

# A Kubernetes stream message is at most a few dozen KiB (client-go buffers 32 KiB); far
# larger ones can only be an error or an attack, and must not make us buffer without end.
DEFAULT_MAX_MESSAGE = 16 * 1024 * 1024
RECV_SIZE = 64 * 1024


class ProtocolError(Exception):
    """The peer broke RFC 6455 (or a limit); ``close_code`` is what to close with."""

    def __init__(self, message: str, close_code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.close_code = close_code


# --- headers (pure) ---------------------------------------------------------------------------
def offered_protocols(header_values: Iterable[str]) -> list[str]:
    """The subprotocols a client offers, in its order of preference (the header may be
    repeated and each value is a comma-separated list)."""
    offered: list[str] = []
    for value in header_values:
        for item in value.split(","):
            item = item.strip()
            if item and item not in offered:
                offered.append(item)
    return offered


def choose_protocol(offered: Sequence[str], supported: Sequence[str]) -> str | None:
    """The first protocol the client offers that we support (the client ranks them)."""
    for protocol in offered:
        if protocol in supported:
            return protocol
    return None


def _header_has_token(value: str | None, token: str) -> bool:
    return token in [item.strip().lower() for item in (value or "").split(",")]


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    # Header names are case-insensitive; Go sends "Sec-Websocket-Key", browsers
    # "Sec-WebSocket-Key".
    return {name.lower(): value for name, value in headers.items()}


def is_upgrade_request(headers: Mapping[str, str]) -> bool:
    """Any HTTP upgrade (WebSocket or SPDY): ``Connection: Upgrade`` and an ``Upgrade``."""
    lowered = _lowered(headers)
    return _header_has_token(lowered.get("connection"), "upgrade") and bool(lowered.get("upgrade"))


def is_websocket_request(headers: Mapping[str, str]) -> bool:
    return is_upgrade_request(headers) and _header_has_token(_lowered(headers).get("upgrade"), "websocket")


def is_spdy_request(headers: Mapping[str, str]) -> bool:
    """An SPDY/3.1 upgrade (client-go's SPDY executors and port-forward dialer)."""
    return is_upgrade_request(headers) and _header_has_token(_lowered(headers).get("upgrade"), "spdy/3.1")


def request_bytes(request_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """The request head as it came in, rebuilt from what ``http.server`` parsed, so that
    wsproto validates the handshake from the real request."""
    lines = [request_line] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --- connections ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    """One whole data message: ``text`` for a text frame (UTF-8 checked), else binary."""

    data: bytes
    text: bool = False


class HandshakeError(Exception):
    """The opening handshake is invalid (server side) or was refused (client side:
    ``status`` and ``body`` are the remote answer; status 0 = not HTTP at all)."""

    def __init__(self, message: str, *, status: int = 400, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


NO_PROTOCOL = "none of the offered subprotocols is supported"


def accept(request_head: bytes, protocol: str | None) -> tuple[WSConnection, bytes]:
    """Server side of the opening handshake for a request already read off the socket:
    (connection, the 101 response to write) accepting ``protocol``. HandshakeError(400)
    when the request is not a valid WebSocket handshake, or (checked after it) when
    ``protocol`` is None: nothing offered is acceptable (message :data:`NO_PROTOCOL`)."""
    connection = WSConnection(ConnectionType.SERVER)
    try:
        connection.receive_data(request_head)
        event = next(connection.events(), None)
    except RemoteProtocolError as exc:
        raise HandshakeError(f"invalid WebSocket handshake: {exc}") from None
    if not isinstance(event, Request):
        raise HandshakeError("invalid WebSocket handshake: incomplete request")
    if protocol is None:
        raise HandshakeError(NO_PROTOCOL)
    return connection, connection.send(AcceptConnection(subprotocol=protocol))


def client_handshake(sock: socket.socket, *, host: str, target: str, protocols: Sequence[str], headers: Sequence[tuple[str, str]]) -> tuple[WSConnection, str]:
    """Client side of the opening handshake on a connected socket (blocking, bounded by
    the socket's timeout): (connection, accepted subprotocol). Frames that arrived with
    the ``101`` stay in the connection (:meth:`Peer.pending`). HandshakeError with the
    remote status and body when refused."""
    connection = WSConnection(ConnectionType.CLIENT)
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    sock.sendall(connection.send(Request(host=host, target=target, subprotocols=list(protocols), extra_headers=extra)))
    rejected: RejectConnection | None = None
    body = b""
    while True:
        data = sock.recv(RECV_SIZE)
        try:
            connection.receive_data(data or None)
            for event in connection.events():
                if isinstance(event, AcceptConnection):
                    return connection, event.subprotocol or ""
                if isinstance(event, RejectConnection):
                    rejected = event
                    if not event.has_body:
                        raise HandshakeError(f"answered {event.status_code}", status=event.status_code)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished and rejected is not None:
                        raise HandshakeError(f"answered {rejected.status_code}", status=rejected.status_code, body=body)
        except RemoteProtocolError as exc:
            raise HandshakeError(f"invalid handshake answer: {exc}", status=0) from None
        if not data:
            if rejected is not None:
                raise HandshakeError(f"answered {rejected.status_code}", status=rejected.status_code, body=body)
            raise HandshakeError("connection closed during the WebSocket handshake", status=0)


class Peer:
    """One WebSocket hop of a relay, on a connected (TLS) socket, after the handshake.

    Reads and writes happen only from the relay's thread, so no TLS object is ever used
    by two threads at once. ``receive`` returns whole messages (reassembled from
    fragments, at most ``max_message`` bytes); pings are answered here and the close
    handshake is completed here."""

    def __init__(self, sock: socket.socket, connection: WSConnection, *, protocol: str, name: str, max_message: int = DEFAULT_MAX_MESSAGE) -> None:
        self.sock = sock
        self.connection = connection
        self.protocol = protocol
        self.name = name
        self.max_message = max_message
        self._parts: list[bytes] = []
        self._size = 0
        self._text = False
        # Set once the peer has closed (a close frame, EOF, a connection lost, or a
        # protocol error wsproto reported as a close): ``close_code``/``close_reason`` say how.
        self.closed = False
        self.close_code: int | None = None
        self.close_reason = ""
        # The first failed write: the peer can no longer be written to, but what it sent
        # before going away can still be read, and must be (its close frame, for one: the
        # apiserver closes TCP right after sending it, so answering it can fail).
        self.write_error: OSError | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def open(self) -> bool:
        return self.connection.state == ConnectionState.OPEN

    def has_pending(self) -> bool:
        """Bytes already decrypted by TLS but not read by us: select() cannot see them."""
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

    def pending(self) -> list[Message]:
        """Messages already received but not yet returned (those that came with the
        handshake answer): select() will not wake up for them."""
        try:
            return self._messages()
        except RemoteProtocolError as exc:
            raise ProtocolError(str(exc), _close_code(exc)) from None

    def receive(self) -> list[Message]:
        """The whole messages one read brings (maybe none yet). Check ``closed`` after
        passing them on: the same read may also have brought the peer's close."""
        if self.closed or self.connection.state == ConnectionState.CLOSED:
            self.closed = True
            return []
        lost = ""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (ssl.SSLWantReadError, BlockingIOError):
            return []
        except OSError as exc:
            # The connection is gone without a close frame (a reset, or TCP closed with
            # no TLS close_notify: SSLEOFError). To WebSocket that is an abnormal closure
            # (1006), as a plain EOF is; what the peer sent before was returned already.
            data, lost = b"", str(exc)
        try:
            self.connection.receive_data(data or None)
            messages = self._messages()
        except RemoteProtocolError as exc:
            raise ProtocolError(str(exc), _close_code(exc)) from None
        if lost:
            self.close_reason = lost
        return messages

    def _messages(self) -> list[Message]:
        messages: list[Message] = []
        for event in self.connection.events():
            if isinstance(event, (BytesMessage, TextMessage)):
                chunk = event.data.encode("utf-8") if isinstance(event, TextMessage) else bytes(event.data)
                self._size += len(chunk)
                if self._size > self.max_message:
                    raise ProtocolError(f"message larger than {self.max_message} bytes", CLOSE_TOO_BIG)
                self._parts.append(chunk)
                self._text = isinstance(event, TextMessage)
                if event.message_finished:
                    messages.append(Message(b"".join(self._parts), text=self._text))
                    self._parts, self._size = [], 0
            elif isinstance(event, Ping):
                self._write(self.connection.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_code, self.close_reason = event.code, event.reason or ""
                if self.connection.state == ConnectionState.REMOTE_CLOSING:
                    self._write(self.connection.send(event.response()))
                elif self.connection.state == ConnectionState.OPEN:
                    # wsproto found a protocol error (bad UTF-8 in a text message, a bad
                    # close code, ...) and reports it as this close: we send it.
                    self.send_close(event.code, event.reason or "")
                self.closed = True
                return messages
        return messages

    def send(self, message: Message) -> None:
        event = TextMessage(data=message.data.decode("utf-8")) if message.text else BytesMessage(data=message.data)
        self._write(self.connection.send(event))

    def send_close(self, code: int, reason: str = "") -> None:
        """Start (or complete) the closing handshake; a no-op once closing."""
        if self.connection.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return
        if code in (CLOSE_ABNORMAL, 1005, 1015):
            code = CLOSE_GOING_AWAY  # reserved: never sent on the wire (RFC 6455 7.4.1)
        try:
            self._write(self.connection.send(CloseConnection(code=code, reason=reason[:100] or None)))
        except LocalProtocolError:  # a failed write is recorded by _write, not raised
            pass

    def _write(self, data: bytes) -> None:
        """Write, or drop the bytes once a write has failed (``write_error``): the relay
        goes on reading this peer until it reports its close, so that nothing it sent
        before going away is lost."""
        if not data or self.write_error is not None:
            return
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.write_error = exc

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _close_code(exc: RemoteProtocolError) -> int:
    hint = getattr(exc, "event_hint", None)
    code = getattr(hint, "code", None)
    return int(code) if code else CLOSE_PROTOCOL_ERROR


