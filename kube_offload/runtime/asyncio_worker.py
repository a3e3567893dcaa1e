"""A gunicorn worker that serves HTTP/1.1 (over TLS, or plain) from one asyncio event loop and calls
the WSGI app inline, in the loop: no thread hand-off per request.

Why: with gunicorn's ``gthread`` worker every request goes from the main thread (which
polls the sockets) to a pool thread and back (a queue, a pipe write to wake the main
thread, the GIL changing hands twice). On the webhook's small requests that hand-off was
37 % of the server's busy CPU samples and TLS 20 %, the route code 15 %
(docs/performance.md, "Webhook"). Here one loop reads, parses, calls the app and writes.

What stays gunicorn's: the arbiter (worker count, respawn, signals, graceful timeout),
``load`` and the post-fork hooks (the app and its cache are built in the worker), the
heartbeat (:meth:`notify` once a second from the loop), the listening sockets and the TLS
context (``gunicorn.sock.ssl_context``: the same versions, ciphers and client-certificate
options as ``gthread``).

Per connection (:mod:`kube_offload.runtime.http11` parses): keep-alive HTTP/1.1 (1.0
on request), heads within gunicorn's ``limit_request_*`` and :data:`MAX_HEAD` bytes,
``Content-Length`` or chunked (other codings 501; a POST/PUT/PATCH with neither 411),
``Expect: 100-continue``. A ``Content-Length`` over the app's body limit
(:attr:`GunicornServer.max_body_bytes`) is not read: the app sees the length and an empty
stream, answers its own 413, and the connection is closed. Timeouts: ``keepalive`` seconds
for an idle connection's next request, then :data:`READ_TIMEOUT` for the rest of that
request (head and body, against slowloris), :data:`WRITE_TIMEOUT` to get an answer out;
the heartbeat ticker enforces them, to the second (no timer per read).
Bodies are read whole before the app is called; all connections' bodies together are
bounded by :class:`ByteBudget` (a connection whose body does not fit waits).

**The app runs in the loop**, so while it runs nothing else in this worker does. That is
the point (no hand-off), and it is what an app must allow: it must not block for long.
The webhook's one blocking call is the namespace cache's fallback GET on a miss (a
namespace created moments before its first pod, not yet delivered by the watch), bounded
by ``FALLBACK_TIMEOUT`` (1 s connect, 2 s read; milliseconds in practice): for that long
this worker's other requests wait, the other workers are unaffected, and the heartbeat
(gunicorn's ``timeout``, 30 s) is far away. The apiserver's own timeout for the call is
longer than that bound.

TLS certificate renewal: the listening context's SNI callback (called for every client
hello, with or without SNI) swaps in a context built afresh when the certificate or key
file changed (checked at most once a second), so renewed files are used for new
connections without a restart, as with ``gthread`` (which builds a context per
connection). A pair that does not load (caught between two renames) keeps the previous
context until the next check.

Graceful stop (SIGTERM from the arbiter): stop accepting, close idle keep-alive
connections, let in-flight requests finish (answered with ``Connection: close``), and give
up on the rest after ``graceful_timeout``. SIGINT/SIGQUIT stop at once, as gunicorn's own
workers do.
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import os
import signal
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable

from gunicorn import sock as gunicorn_sock
from gunicorn.workers.base import Worker

from kube_offload.runtime.body_limit import APISERVER_MAX_REQUEST_BODY_BYTES
from kube_offload.runtime.http11 import (
    ChunkedDecoder,
    HttpError,
    body_framing,
    error_response,
    parse_head,
    response_head,
    wsgi_environ,
)

# Largest request head (request line and fields) read before a 431.
MAX_HEAD = 64 * 1024
READ_SIZE = 64 * 1024
# From a request's first byte to its last: a client that trickles slower is cut off (408).
READ_TIMEOUT = 10.0
WRITE_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 10.0
# When the app declares no body limit (GunicornServer.max_body_bytes None): the
# apiserver's own request limit, the project's default everywhere (body_limit.py).
DEFAULT_MAX_BODY = APISERVER_MAX_REQUEST_BODY_BYTES
# How often the loop tells the arbiter it is alive and looks at its parent.
TICK_SECONDS = 1.0
CERT_CHECK_SECONDS = 1.0


class ByteBudget:
    """Bytes of request bodies held by all connections of this worker together: a body is
    read only once its length fits; else its connection waits (first come, first served)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def acquire(self, size: int) -> None:
        size = min(size, self.capacity)
        if not self._waiters and self.used + size <= self.capacity:
            self.used += size
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif waiter.done() and not waiter.cancelled():
                self.release(size)  # granted, but the connection went away meanwhile
            raise

    def release(self, size: int) -> None:
        self.used -= min(size, self.capacity)
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            size, waiter = self._waiters.pop(0)
            if not waiter.done():
                self.used += size
                waiter.set_result(None)


class TlsContexts:
    """The listening TLS context, and fresh ones when the certificate files change."""

    def __init__(self, cfg: Any, log: Any) -> None:
        self._cfg = cfg
        self._log = log
        self._stamp = self._files_stamp()
        self._checked = time.monotonic()
        self.listening = gunicorn_sock.ssl_context(cfg)
        self.current = self.listening
        self.listening.sni_callback = self._on_hello

    def _files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self._cfg.certfile, self._cfg.keyfile):
            try:
                st = os.stat(path)
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append((0, 0, 0))
        return tuple(stamps)

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < CERT_CHECK_SECONDS:
            return
        self._checked = now
        stamp = self._files_stamp()
        if stamp == self._stamp:
            return
        try:
            context = gunicorn_sock.ssl_context(self._cfg)
        except (ssl.SSLError, OSError) as exc:
            self._log.warning("TLS certificate files changed but do not load (yet): %s", exc)
            return
        self._stamp = stamp
        self.current = context
        self._log.info("TLS certificate files changed: new connections use them")

    def _on_hello(self, sslobj: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        self.refresh()
        if self.current is not self.listening:
            sslobj.context = self.current


@dataclass
class _Connection:
    idle: bool = True  # waiting for the first byte of its next request
    # Loop time by which the current wait (next request, rest of a request, the answer
    # going out) must be over; the ticker cancels the connection's task past it.
    deadline: float = float("inf")
    expired: bool = False  # cancelled by the ticker, not by the graceful stop


class _Dates:
    """The Date header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._text = email.utils.formatdate(second, usegmt=True)
        return self._text


class AsyncioWorker(Worker):
    """gunicorn worker class ``kube_offload.runtime.asyncio_worker.AsyncioWorker``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections: dict[asyncio.Task[Any], _Connection] = {}
        self._stopping: asyncio.Event | None = None
        self._dates = _Dates()
        self._tls: TlsContexts | None = None
        # gunicorn's settings, read once (its Config looks each one up per access).
        cfg = self.cfg
        self._limits = {
            "max_line": cfg.limit_request_line or MAX_HEAD,
            "max_fields": cfg.limit_request_fields,
            "max_field_size": cfg.limit_request_field_size or MAX_HEAD,
        }
        self._keepalive = cfg.keepalive
        self._max_connections = cfg.worker_connections
        self._url_scheme = "https" if cfg.is_ssl else "http"
        self._multiprocess = cfg.workers > 1
        max_body = getattr(self.app, "max_body_bytes", None)
        self.max_body = int(max_body) if max_body else DEFAULT_MAX_BODY
        # Two bodies at the limit, or many small ones, at a time.
        self._budget = ByteBudget(2 * self.max_body + 1)

    # --- gunicorn's entry point (after init_process: signals set, app loaded) ----------------
    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        # A Python-level handler, not loop.add_signal_handler: it runs at once even while
        # the app is running inline, so the answer in flight already says "Connection: close".
        def on_term(_signum: int, _frame: Any) -> None:
            self.alive = False
            loop.call_soon_threadsafe(self._stop)

        signal.signal(signal.SIGTERM, on_term)
        ssl_context = None
        if self.cfg.is_ssl:
            self._tls = TlsContexts(self.cfg, self.log)
            ssl_context = self._tls.listening
        # Plain HTTP (the extender without a certificate): asyncio refuses a handshake
        # timeout without TLS.
        tls: dict[str, Any] = {"ssl": ssl_context, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT} if ssl_context else {}
        servers = []
        for listener in self.sockets:
            servers.append(await asyncio.start_server(
                self._serve_connection, sock=getattr(listener, "sock", listener),
                backlog=self.cfg.backlog, limit=READ_SIZE, **tls,
            ))
        ticker = asyncio.create_task(self._tick())
        await self._stopping.wait()
        # Stop accepting; idle connections go now, busy ones after their answer.
        for server in servers:
            server.close()
        for task, connection in list(self._connections.items()):
            if connection.idle:
                task.cancel()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=self.cfg.graceful_timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        ticker.cancel()

    def _stop(self) -> None:
        self.alive = False
        if self._stopping is not None:
            self._stopping.set()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                self._stop()
            if not self.alive:
                self._stop()
            # Timeouts are enforced here, to the tick (a second): no timer per read.
            now = loop.time()
            for task, connection in list(self._connections.items()):
                if connection.deadline < now and not connection.expired:
                    connection.expired = True
                    task.cancel()
            await asyncio.sleep(TICK_SECONDS)

    # --- one connection ---------------------------------------------------------------------
    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self._max_connections or (self._stopping and self._stopping.is_set()):
            writer.transport.abort()
            return
        connection = _Connection()
        self._connections[task] = connection
        try:
            await self._requests(reader, writer, connection)
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # timed out, or the graceful stop closing idle and, after it, late connections
        except Exception:
            self.log.exception("connection failed unexpectedly")
        finally:
            del self._connections[task]
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        server = _address(writer.get_extra_info("sockname"))
        client = _address(writer.get_extra_info("peername"))
        limits = self._limits
        keepalive = self._keepalive
        buffer = bytearray()
        stopping = self._stopping
        assert stopping is not None
        while True:
            # --- the head: idle until its first byte, then READ_TIMEOUT for the whole request
            connection.idle = True
            connection.deadline = loop.time() + keepalive
            while True:
                while buffer[:2] == b"\r\n":  # empty lines before a request are ignored
                    del buffer[:2]
                end = buffer.find(b"\r\n\r\n")
                if end >= 0:
                    break
                if len(buffer) > MAX_HEAD:
                    return await self._refuse(writer, HttpError(431, f"request head over {MAX_HEAD} bytes"))
                if not buffer and stopping.is_set():
                    return
                try:
                    data = await reader.read(READ_SIZE)
                except asyncio.CancelledError:
                    if connection.expired and buffer:
                        return await self._refuse(writer, HttpError(408, "request not received in time"))
                    raise
                if not data:
                    return
                if connection.idle:
                    connection.idle = False
                    connection.deadline = loop.time() + READ_TIMEOUT
                buffer += data
            connection.idle = False
            try:
                head = parse_head(bytes(buffer[:end]), **limits)
                framing = body_framing(head)
            except HttpError as exc:
                return await self._refuse(writer, exc)
            del buffer[:end + 4]
            keep_alive = framing.keep_alive and keepalive > 0

            # --- the body
            held = 0
            length = framing.length
            try:
                if length is not None and length > self.max_body:
                    body = b""  # not read: the app answers 413 from the length alone
                    keep_alive = False
                elif length is not None:
                    if len(buffer) >= length:  # the usual case: it came with the head
                        body = bytes(buffer[:length])
                        del buffer[:length]
                    else:
                        await self._budget.acquire(length)
                        held = length  # only once taken: a cancelled wait took nothing
                        if framing.expect_continue:
                            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                        while len(buffer) < length:
                            data = await reader.read(max(READ_SIZE, length - len(buffer)))
                            if not data:
                                return
                            buffer += data
                        body = bytes(buffer[:length])
                        del buffer[:length]
                else:
                    await self._budget.acquire(self.max_body + 1)
                    held = self.max_body + 1
                    if framing.expect_continue:
                        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    body, rest, complete = await self._read_chunked(reader, buffer)
                    buffer = bytearray(rest)
                    if not complete:  # over the limit: the app says 413 ("chunked"); the rest is not read
                        keep_alive = False
            except asyncio.CancelledError:
                self._budget.release(held)
                if connection.expired:
                    return await self._refuse(writer, HttpError(408, "request body not received in time"))
                raise
            except HttpError as exc:
                self._budget.release(held)
                return await self._refuse(writer, exc)
            except BaseException:
                self._budget.release(held)
                raise

            # --- the app, inline
            try:
                environ = wsgi_environ(
                    head, io.BytesIO(body), content_length=length, server=server, client=client,
                    url_scheme=self._url_scheme, multiprocess=self._multiprocess,
                )
                body = b""
                status, headers, chunks = self._call_app(environ)
            finally:
                self._budget.release(held)
            self.nr += 1
            if self.nr >= self.max_requests:
                self.log.info("Autorestarting worker after current request.")
                self._stop()
            keep_alive = keep_alive and self.alive and not stopping.is_set()
            out = b"".join(chunks)
            body_length = len(out)
            if head.method == "HEAD":  # the length of the body a GET would get, without it
                declared = next((value for name, value in headers if name.lower() == "content-length"), "")
                body_length = int(declared) if declared.isdigit() else body_length
                out = b""
            try:
                answer = response_head(status, headers, body_length=body_length, keep_alive=keep_alive,
                                       date=self._dates.now())
            except ValueError as exc:
                self.log.error("%s %s: the app's response is not valid HTTP: %s", head.method, head.target, exc)
                return await self._refuse(writer, HttpError(500, "the server failed to form an answer"))
            if len(out) < 65536:
                writer.write(answer + out)
            else:
                writer.write(answer)
                writer.write(out)
            connection.deadline = loop.time() + WRITE_TIMEOUT
            await writer.drain()
            if not keep_alive:
                return

    async def _read_chunked(self, reader: asyncio.StreamReader, buffer: bytearray) -> tuple[bytes, bytes, bool]:
        """The decoded body, what followed it, and whether it ended within the limit (else
        the first ``max_body + 1`` bytes, and the rest of the stream is left unread)."""
        decoder = ChunkedDecoder()
        body = bytearray(decoder.feed(bytes(buffer)))
        while not decoder.done and len(body) <= self.max_body:
            data = await reader.read(READ_SIZE)
            if not data:
                raise ConnectionResetError("client closed during a chunked body")
            body += decoder.feed(data)
        if len(body) > self.max_body:
            return bytes(body[:self.max_body + 1]), b"", False
        return bytes(body), decoder.rest, True

    def _call_app(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[bytes]]:
        answer: dict[str, Any] = {}
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            if exc_info is not None and answer:
                pass  # nothing is sent before the app returns: the new status replaces the old
            answer["status"] = status
            answer["headers"] = headers
            return chunks.append

        try:
            wsgi: Any = self.wsgi
            result = wsgi(environ, start_response)
            try:
                for chunk in result:
                    if chunk:
                        chunks.append(chunk)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
            if "status" not in answer:
                raise RuntimeError("the app returned without calling start_response")
        except Exception:
            self.log.exception("Error handling request %s %s", environ.get("REQUEST_METHOD"), environ.get("RAW_URI"))
            body = b"Internal Server Error\n"
            return "500 Internal Server Error", [("Content-Type", "text/plain")], [body]
        return answer["status"], answer["headers"], chunks

    async def _refuse(self, writer: asyncio.StreamWriter, error: HttpError) -> None:
        """Answer a request the server itself refuses, then the connection ends."""
        if error.status >= 500:
            self.log.warning("refused a request: %s %s", error.status, error.message)
        else:
            self.log.debug("refused a request: %s %s", error.status, error.message)
        writer.write(error_response(error.status, error.message, date=self._dates.now()))
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await writer.drain()
        except (TimeoutError, ConnectionError, OSError):
            pass


def _address(value: Any) -> tuple[str, int]:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return ("", 0)  # a Unix socket
