"""RFC 6455 WebSocket framing and the server side of the opening handshake (pure).

Written here rather than taken from a library because the relay needs three things the
common Python WebSocket libraries do not give together: the server handshake on a socket
that ``http.server`` already parsed the request from, frame-level access (control frames
answered locally, data messages passed on untouched) and the same code for the client
side, whose connection the official Kubernetes client opens (``kubernetes.stream``). The
protocol subset is small: no extensions (the Kubernetes channel protocols negotiate
none), messages reassembled from fragments, control frames interleaved.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

# RFC 6455 section 1.3.
_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
_DATA_OPCODES = (OP_TEXT, OP_BINARY)
_CONTROL_OPCODES = (OP_CLOSE, OP_PING, OP_PONG)

# Close codes (RFC 6455 section 7.4.1).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

# A Kubernetes stream message is at most a few dozen KiB (client-go buffers 32 KiB); far
# larger ones can only be an error or an attack, and must not make us buffer without end.
DEFAULT_MAX_MESSAGE = 16 * 1024 * 1024


class ProtocolError(Exception):
    """The peer broke RFC 6455; ``close_code`` is what to close the connection with."""

    def __init__(self, message: str, close_code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.close_code = close_code


# --- handshake --------------------------------------------------------------------------------
def accept_key(client_key: str) -> str:
    """``Sec-WebSocket-Accept`` for a ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1(client_key.strip().encode("ascii") + _ACCEPT_GUID).digest()
    return base64.b64encode(digest).decode("ascii")


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


def client_key(headers: Mapping[str, str]) -> str:
    return (_lowered(headers).get("sec-websocket-key") or "").strip()


def handshake_problem(method: str, headers: Mapping[str, str]) -> str | None:
    """Why this is not a valid WebSocket opening handshake (RFC 6455 section 4.2.1),
    or None when it is."""
    if method != "GET":
        return f"a WebSocket handshake must be a GET, not {method}"
    if not is_websocket_request(headers):
        return "not a WebSocket upgrade (Connection: Upgrade and Upgrade: websocket are required)"
    if (_lowered(headers).get("sec-websocket-version") or "").strip() != "13":
        return "only WebSocket version 13 is supported"
    key = client_key(headers)
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError
    except ValueError:
        return "Sec-WebSocket-Key must be 16 bytes, base64-encoded"
    return None


def handshake_response(client_key: str, protocol: str) -> bytes:
    """The raw ``101 Switching Protocols`` response accepting the upgrade."""
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {accept_key(client_key)}",
        f"Sec-WebSocket-Protocol: {protocol}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


# --- frames -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    opcode: int
    payload: bytes
    fin: bool = True


def mask_bytes(key: bytes, data: bytes) -> bytes:
    """XOR ``data`` with the 4-byte masking key (masking and unmasking are the same)."""
    if len(key) != 4:
        raise ValueError("a masking key is 4 bytes")
    if not data:
        return b""
    # One big-integer XOR instead of a Python loop per byte: ~100x faster for 32 KiB.
    length = len(data)
    repeated = (key * (length // 4 + 1))[:length]
    return (int.from_bytes(data, "big") ^ int.from_bytes(repeated, "big")).to_bytes(length, "big")


def encode_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, mask_key: bytes | None = None) -> bytes:
    """One frame. Clients must mask (``mask_key``: 4 bytes, normally random); servers
    must not."""
    if opcode in _CONTROL_OPCODES and (len(payload) > 125 or not fin):
        raise ValueError("control frames carry at most 125 bytes and cannot be fragmented")
    first = (0x80 if fin else 0) | opcode
    length = len(payload)
    mask_bit = 0x80 if mask_key is not None else 0
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if mask_key is None:
        return header + payload
    return header + mask_key + mask_bytes(mask_key, payload)


def new_mask_key() -> bytes:
    return os.urandom(4)


def encode_close_payload(code: int | None, reason: str = "") -> bytes:
    if code is None or code in (CLOSE_NO_STATUS, CLOSE_ABNORMAL):
        return b""  # 1005 and 1006 must never be sent on the wire (section 7.4.1)
    data = struct.pack("!H", code) + reason.encode("utf-8")
    return data[:125]


def decode_close_payload(payload: bytes) -> tuple[int, str]:
    """(code, reason) of a close frame; 1005 when it carries no code."""
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) == 1:
        raise ProtocolError("a close frame payload cannot be 1 byte")
    code = struct.unpack("!H", payload[:2])[0]
    return code, payload[2:].decode("utf-8", "replace")


class FrameParser:
    """Incremental frame decoder: feed bytes as they arrive, take whole frames out.

    ``expect_masked``: True on a server (client frames must be masked), False on a
    client (server frames must not be)."""

    def __init__(self, *, expect_masked: bool, max_payload: int = DEFAULT_MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self._expect_masked = expect_masked
        self._max_payload = max_payload

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def buffered(self) -> int:
        return len(self._buffer)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive."""
        buf = self._buffer
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        if first & 0x70:
            raise ProtocolError("reserved bits set but no extension was negotiated")
        opcode = first & 0x0F
        fin = bool(first & 0x80)
        if opcode not in _DATA_OPCODES and opcode not in _CONTROL_OPCODES and opcode != OP_CONTINUATION:
            raise ProtocolError(f"unknown opcode {opcode:#x}")
        masked = bool(second & 0x80)
        if masked != self._expect_masked:
            raise ProtocolError("client frames must be masked" if self._expect_masked else "server frames must not be masked")
        length = second & 0x7F
        offset = 2
        if length == 126:
            if len(buf) < 4:
                return None
            length = struct.unpack_from("!H", buf, 2)[0]
            offset = 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length = struct.unpack_from("!Q", buf, 2)[0]
            if length >> 63:
                raise ProtocolError("the most significant bit of a 64-bit length must be 0")
            offset = 10
        if opcode in _CONTROL_OPCODES and (length > 125 or not fin):
            raise ProtocolError("control frames carry at most 125 bytes and cannot be fragmented")
        if length > self._max_payload:
            raise ProtocolError(f"frame of {length} bytes is larger than {self._max_payload}", CLOSE_TOO_BIG)
        key = b""
        if masked:
            if len(buf) < offset + 4:
                return None
            key = bytes(buf[offset : offset + 4])
            offset += 4
        if len(buf) < offset + length:
            return None
        payload = bytes(buf[offset : offset + length])
        del buf[: offset + length]
        if masked:
            payload = mask_bytes(key, payload)
        return Frame(opcode, payload, fin)


@dataclass(frozen=True)
class Message:
    """A whole data message (fragments joined) or one control frame."""

    opcode: int
    payload: bytes

    @property
    def is_control(self) -> bool:
        return self.opcode in _CONTROL_OPCODES


class MessageAssembler:
    """Joins fragmented data messages; control frames pass straight through (they may
    arrive between the fragments of a data message)."""

    def __init__(self, max_message: int = DEFAULT_MAX_MESSAGE) -> None:
        self._opcode: int | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._max = max_message

    def add(self, frame: Frame) -> Message | None:
        if frame.opcode in _CONTROL_OPCODES:
            return Message(frame.opcode, frame.payload)
        if frame.opcode == OP_CONTINUATION:
            if self._opcode is None:
                raise ProtocolError("continuation frame without a message to continue")
        else:
            if self._opcode is not None:
                raise ProtocolError("new data message before the previous one was finished")
            self._opcode = frame.opcode
        self._parts.append(frame.payload)
        self._size += len(frame.payload)
        if self._size > self._max:
            raise ProtocolError(f"message larger than {self._max} bytes", CLOSE_TOO_BIG)
        if not frame.fin:
            return None
        message = Message(self._opcode, b"".join(self._parts))
        self._opcode, self._parts, self._size = None, [], 0
        return message
