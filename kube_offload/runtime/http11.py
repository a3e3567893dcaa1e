"""HTTP/1.1 requests and responses as pure functions over bytes: what the asyncio worker
(:mod:`kube_offload.runtime.asyncio_worker`) needs to serve a WSGI app, and no more.

- :func:`parse_head`: the request line and header fields of one request, within limits,
  or :class:`HttpError` with the status to answer (4xx/5xx, never an exception escaping);
- :func:`body_framing`: how the body is delimited (``Content-Length``, chunked, none) and
  whether the connection stays open after it;
- :class:`ChunkedDecoder`: an incremental ``Transfer-Encoding: chunked`` decoder;
- :func:`wsgi_environ`, :func:`response_head`: the WSGI side.

Strict where leniency lets two parsers disagree about where a request ends (request
smuggling): a ``Content-Length`` that is not digits, two different ones, both
``Content-Length`` and ``Transfer-Encoding``, a transfer coding other than ``chunked``,
obsolete line folding and whitespace before a field's colon are all refused.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable
from urllib.parse import unquote_to_bytes

# The limits gunicorn applies by default (its limit_request_line, limit_request_fields,
# limit_request_field_size settings); the worker passes gunicorn's configured values.
MAX_REQUEST_LINE = 4094
MAX_FIELDS = 100
MAX_FIELD_SIZE = 8190
# A chunk-size line (hex size and extensions) or a trailer field longer than this is refused.
MAX_CHUNK_LINE = 4096

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# One header field line: a token name, a colon, the value (RFC 9110 field-value: visible
# characters, spaces and tabs, obs-text) without the whitespace around it.
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?)[ \t]*")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
# Visible characters, spaces and tabs (RFC 9110 field-value), plus obs-text.
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_HEX = re.compile(rb"[0-9A-Fa-f]+")

REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A request the server answers with ``status`` (and then closes the connection)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str  # as sent (latin-1), e.g. "/mutate/pods?timeout=10s"
    version: tuple[int, int]
    # Field names lower-cased, values stripped, in the order sent (duplicates kept).
    fields: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        """The value of field ``name`` (lower case); repeated fields joined with ", "."""
        values = [value for key, value in self.fields if key == name]
        return ", ".join(values) if values else None


def parse_head(
    data: bytes,
    *,
    max_line: int = MAX_REQUEST_LINE,
    max_fields: int = MAX_FIELDS,
    max_field_size: int = MAX_FIELD_SIZE,
) -> RequestHead:
    """The request head ``data``: the bytes before the blank line that ends it (without
    that ``CRLF CRLF``). Raises :class:`HttpError` for anything malformed or too large."""
    lines = data.split(b"\r\n")
    request_line = lines[0]
    if len(request_line) > max_line:
        raise HttpError(414, f"request line longer than {max_line} bytes")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(400, "malformed method")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "malformed request target")
    match = _VERSION.fullmatch(version)
    if not match:
        raise HttpError(400, "malformed HTTP version")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 1:
        raise HttpError(505, f"HTTP/{major}.{minor} is not supported (HTTP/1.x only)")
    if len(lines) - 1 > max_fields:
        raise HttpError(431, f"more than {max_fields} header fields")
    fields: list[tuple[str, str]] = []
    field = _FIELD.fullmatch
    for line in lines[1:]:
        if len(line) > max_field_size:
            raise HttpError(431, f"a header field longer than {max_field_size} bytes")
        match = field(line)
        if match is None:
            if line[:1] in (b" ", b"\t"):
                raise HttpError(400, "obsolete line folding in the header")
            raise HttpError(400, "malformed header field")
        fields.append((match.group(1).decode("ascii").lower(), match.group(2).decode("latin-1")))
    return RequestHead(method.decode("ascii"), target.decode("ascii"), (major, minor), fields)


@dataclass(slots=True)
class Framing:
    """How a request's body is delimited and what follows it."""

    length: int | None  # bytes of body (0: none); None: chunked
    keep_alive: bool  # the client allows the connection to stay open after the answer
    expect_continue: bool  # the client waits for "100 Continue" before sending the body


# Methods whose requests carry a body by definition: without a length they are refused
# (411) rather than read until the client closes.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def body_framing(head: RequestHead) -> Framing:
    """How ``head``'s body is framed (RFC 9112 section 6); :class:`HttpError` for framing
    the server refuses (conflicting, unsupported, or missing where a body is expected)."""
    lengths = [value for name, value in head.fields if name == "content-length"]
    codings = head.get("transfer-encoding")
    if codings is not None:
        if lengths:
            raise HttpError(400, "both Content-Length and Transfer-Encoding")
        if head.version < (1, 1):
            raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if codings.lower() != "chunked":
            raise HttpError(501, f"transfer coding {codings!r} is not supported (chunked only)")
        length: int | None = None
    elif lengths:
        if len(lengths) == 1 and "," not in lengths[0]:
            raw = lengths[0]
        else:
            values = {part.strip() for value in lengths for part in value.split(",")}
            if len(values) != 1:
                raise HttpError(400, "conflicting Content-Length values")
            (raw,) = values
        if not raw.isdigit() or not raw.isascii():
            raise HttpError(400, f"Content-Length {raw!r} is not a number of bytes")
        length = int(raw)
    elif head.method in _BODY_METHODS:
        raise HttpError(411, f"{head.method} without Content-Length")
    else:
        length = 0
    connection = {token.strip().lower() for token in (head.get("connection") or "").split(",")}
    if head.version >= (1, 1):
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection
    expect = head.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        raise HttpError(417, f"expectation {expect!r} is not supported")
    return Framing(length, keep_alive, expect is not None and head.version >= (1, 1))


class ChunkedDecoder:
    """Decode a chunked body fed in pieces: :meth:`feed` returns the decoded bytes of that
    piece; once :attr:`done`, :attr:`rest` holds what followed the body (the next request
    of a pipelining client). Chunk extensions and trailer fields are read and dropped."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._remaining = 0  # data bytes left in the current chunk
        self._state = "size"  # size | data | data-end | trailer
        self.done = False
        self.rest = b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            raise ValueError("the chunked body has ended")
        buffer = self._buffer
        buffer += data
        out = bytearray()
        position = 0
        while True:
            if self._state == "data":
                take = min(self._remaining, len(buffer) - position)
                out += buffer[position:position + take]
                position += take
                self._remaining -= take
                if self._remaining:
                    break
                self._state = "data-end"
                continue
            if self._state == "data-end":
                if len(buffer) - position < 2:
                    break
                if buffer[position:position + 2] != b"\r\n":
                    raise HttpError(400, "chunk data not followed by CRLF")
                position += 2
                self._state = "size"
                continue
            end = buffer.find(b"\r\n", position)
            if end < 0:
                if len(buffer) - position > MAX_CHUNK_LINE:
                    raise HttpError(400, "chunk-size line or trailer field too long")
                break
            line = bytes(buffer[position:end])
            position = end + 2
            if self._state == "size":
                size = line.split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(size) or len(size) > 16:
                    raise HttpError(400, "malformed chunk size")
                self._remaining = int(size, 16)
                self._state = "data" if self._remaining else "trailer"
                continue
            # trailer: fields until an empty line
            if not line:
                self.done = True
                self.rest = bytes(buffer[position:])
                position = len(buffer)
                break
            if b":" not in line:
                raise HttpError(400, "malformed trailer field")
        del buffer[:position]
        return bytes(out)


def wsgi_environ(
    head: RequestHead,
    body: Any,
    *,
    content_length: int | None,
    server: tuple[str, int],
    client: tuple[str, int],
    url_scheme: str = "https",
    multiprocess: bool = True,
) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of a request whose body is the file-like ``body``.
    ``content_length`` None: a chunked body, already decoded (``wsgi.input_terminated``)."""
    path, _, query = head.target.partition("?")
    if path.startswith(("http://", "https://")):  # absolute form: keep the path only
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
    environ: dict[str, Any] = {
        "REQUEST_METHOD": head.method,
        "SCRIPT_NAME": "",
        # WSGI: PATH_INFO is percent-decoded bytes as latin-1.
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1") if "%" in path else path,
        "QUERY_STRING": query,
        "RAW_URI": head.target,
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{head.version[0]}.{head.version[1]}",
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url_scheme,
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        # The server ends the stream at the body's end (as gunicorn says it does).
        "wsgi.input_terminated": True,
    }
    if content_length is not None:
        environ["CONTENT_LENGTH"] = str(content_length)
    for name, value in head.fields:
        if name == "content-length":
            continue
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
            continue
        if "_" in name:  # ambiguous with "-" once mapped: dropped, as gunicorn does
            continue
        key = "HTTP_" + name.upper().replace("-", "_")
        environ[key] = f"{environ[key]}, {value}" if key in environ else value
    return environ


_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


def response_head(
    status: str,
    headers: Iterable[tuple[str, str]],
    *,
    body_length: int,
    keep_alive: bool,
    date: str,
) -> bytes:
    """The HTTP/1.1 status line and header block of a response whose whole body (already
    collected) is ``body_length`` bytes. The server owns framing and the connection: the
    app's own ``Content-Length``, ``Connection`` and ``Transfer-Encoding`` are replaced."""
    lines = [f"HTTP/1.1 {status}"]
    for name, value in headers:
        if name.lower() in _HOP_BY_HOP:
            continue
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"response header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    code = status[:3]
    if not (code.startswith("1") or code in ("204", "304")):
        lines.append(f"Content-Length: {body_length}")
    lines.append(f"Date: {date}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def error_response(status: int, message: str, *, date: str) -> bytes:
    """A complete plain-text error response that closes the connection."""
    body = (message + "\n").encode("latin-1", "replace")
    head = response_head(
        f"{status} {REASONS.get(status, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8")],
        body_length=len(body),
        keep_alive=False,
        date=date,
    )
    return head + body
