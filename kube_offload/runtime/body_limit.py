"""The request-body limit of the webhook and the extender: reading within it, the 413 past it,
and the memory budget it is sized to.

Both read their request bodies through :func:`read_body`: a ``Content-Length`` over the
limit is refused before a byte is read, and a chunked body (no length: gunicorn
de-chunks it and marks its input terminated) as soon as the read passes the limit, so at
most the limit plus one read of 64 KiB is ever held. Either way ``RequestEntityTooLarge``
is raised, and :func:`too_large_message` words the 413: how big, what the limit is, and
which flag sets it. (Flask's ``MAX_CONTENT_LENGTH`` alone is not enough: on a chunked
body werkzeug stops reading AT the limit and hands the truncated body on, a 400 for
"not JSON" instead of a 413.) Why the limits are what they are:
bench/bench_parse_memory.py and docs/performance.md.
"""

from __future__ import annotations

from typing import Any, Mapping

from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

READ_SIZE = 64 * 1024

# Bytes of memory that reading and parsing a request takes per body byte, at worst: a body
# dense in small JSON objects (``[{}, {}, ...]``) through either app, measured by
# bench/bench_parse_memory.py (37.0 by tracemalloc, 31.5 by peak RSS; docs/performance.md).
PARSE_AMPLIFICATION = 37
# What the chart's budget keeps aside for the production caches and fragmentation.
MEMORY_RESERVE = 0.10


def peak_memory(*, baseline: int, concurrency: int, limit: int) -> int:
    """Bytes a server holds with ``concurrency`` requests of ``limit`` bytes being parsed
    at once, on top of ``baseline`` at rest."""
    return baseline + concurrency * limit * PARSE_AMPLIFICATION


def fits(*, memory_limit: int, baseline: int, concurrency: int, limit: int) -> bool:
    """Whether that peak stays within the memory limit less the reserve."""
    return peak_memory(baseline=baseline, concurrency=concurrency, limit=limit) <= memory_limit * (1 - MEMORY_RESERVE)


def too_large_message(component: str, limit: int, content_length: int | None) -> str:
    """The message of a 413 for a body over ``limit`` bytes (``content_length`` when the
    client announced it, None for a chunked body stopped while reading)."""
    size = f"of {content_length} bytes" if content_length is not None else "(chunked)"
    return (
        f"request body {size} is over the kube-offload {component}'s limit of {limit} bytes; "
        f"the limit bounds the memory a request can take (--max-body-bytes, chart value "
        f"{component}.maxBodyBytes; raise it only with the memory limit)"
    )


def read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    """The request body of a WSGI ``environ``, at most ``limit`` bytes; raises
    ``RequestEntityTooLarge`` past it (see the module doc)."""
    stream = environ["wsgi.input"]
    raw_length = environ.get("CONTENT_LENGTH") or ""
    if raw_length.strip():
        try:
            length = int(raw_length)
        except ValueError:
            length = -1
        if length < 0:  # gunicorn refuses these before the app; other servers may not
            raise BadRequest(f"Content-Length {raw_length!r} is not a number of bytes")
        if length > limit:
            raise RequestEntityTooLarge()
        expected: int | None = length
    elif environ.get("wsgi.input_terminated"):
        expected = None  # chunked: read until the server says the body ended
    else:
        return b""  # no length and a server that does not end the stream: no body (as werkzeug)
    out = bytearray()
    while expected is None or len(out) < expected:
        want = READ_SIZE if expected is None else min(READ_SIZE, expected - len(out))
        data = stream.read(want)
        if not data:
            break
        out += data
        if len(out) > limit:
            raise RequestEntityTooLarge()
    return bytes(out)
