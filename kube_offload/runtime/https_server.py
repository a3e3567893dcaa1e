"""An HTTPS server that lives inside a component's process, next to the informers it
reads: the virtual kubelet's kubelet API and the enforcer's ShadowPod webhook.

Why not gunicorn, which serves the local webhook and the extender
(:mod:`kube_offload.runtime.serving`): its pre-fork model builds the app in a worker process, so
the caches an answer reads would be a second copy of the controllers' (a second watch on
the apiserver that syncs at another moment). Here the caches are the controllers' own.
And the kubelet API needs the raw socket after a WebSocket upgrade, which WSGI does not
give. ``http.server.ThreadingHTTPServer`` does both with no dependency: a thread per
connection, cheap at the rates an apiserver calls.

The TLS handshake runs in the connection's thread, not in the accepting one, so a slow
or stuck client cannot hold up the others. The certificate files are re-read when they
change on disk, so a rotated certificate is used without a restart.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("kube_offload.runtime.https_server")

HANDSHAKE_TIMEOUT = 10.0


class TLSSetupError(RuntimeError):
    """The serving certificate cannot be used; the message names the file or flag."""


@dataclass(frozen=True)
class ServingFiles:
    cert: Path
    key: Path
    # Set when the pair was generated at start-up: its private directory, removed once
    # loaded (see ServerContext).
    generated_dir: Path | None = None

    def cleanup(self) -> None:
        if self.generated_dir is not None:
            shutil.rmtree(self.generated_dir, ignore_errors=True)


class ServerContext:
    """The server's SSLContext, rebuilt when the certificate, key or client CA files
    change on disk (checked at each new connection: one stat per file). A generated pair
    never changes: it is loaded once and its files are removed at once, so no key is
    left on disk, whatever way the process ends.

    ``name`` is what log lines and errors call the server ("kubelet", "ShadowPod webhook").
    With ``client_ca``, a client certificate it did not sign ends the handshake; without
    one a client may still connect when ``require_client_certificate`` is False (the
    kubelet API also takes bearer tokens, checked after the handshake).
    """

    def __init__(
        self,
        files: ServingFiles,
        client_ca: str = "",
        *,
        name: str = "kubelet",
        require_client_certificate: bool = True,
    ) -> None:
        self._files = files
        self._client_ca = client_ca
        self._require_client_certificate = require_client_certificate
        self._name = name
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int] | None, ...] = ()
        self._context = self._build()
        # (The client CA, if any, is then not re-read either: rotate by restarting.)
        self._static = files.generated_dir is not None
        if files.generated_dir is not None:
            files.cleanup()

    def _paths(self) -> list[str]:
        return [str(self._files.cert), str(self._files.key)] + ([self._client_ca] if self._client_ca else [])

    def _current_stamp(self) -> tuple[tuple[int, int, int] | None, ...]:
        stamp: list[tuple[int, int, int] | None] = []
        for path in self._paths():
            try:
                info = os.stat(path)
                stamp.append((info.st_mtime_ns, info.st_size, info.st_ino))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def _build(self) -> ssl.SSLContext:
        stamp = self._current_stamp()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # HTTP/1.1 only: what http.server speaks (and the kubelet API's WebSocket upgrade
        # and chunked log streams need); Go's client falls back to it when h2 is not offered.
        context.set_alpn_protocols(["http/1.1"])
        try:
            context.load_cert_chain(str(self._files.cert), str(self._files.key))
        except (OSError, ssl.SSLError) as exc:
            raise TLSSetupError(f"cannot load the {self._name} serving certificate {self._files.cert}: {exc}") from None
        if self._client_ca:
            try:
                context.load_verify_locations(cafile=self._client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise TLSSetupError(f"client CA {self._client_ca} of the {self._name} server: {exc}") from None
            context.verify_mode = ssl.CERT_REQUIRED if self._require_client_certificate else ssl.CERT_OPTIONAL
        self._stamp = stamp
        return context

    def get(self) -> ssl.SSLContext:
        if self._static:
            return self._context
        stamp = self._current_stamp()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._context = self._build()
                        log.info("%s: serving certificate reloaded from %s", self._name, self._files.cert)
                    except TLSSetupError as exc:
                        # Half-written files during a rotation: keep serving the old pair.
                        log.warning("%s: %s; keeping the previous certificate", self._name, exc)
                        self._stamp = stamp
        return self._context


class BackgroundServing:
    """Serving on a thread of its own, for a ``socketserver`` server that lives in a
    component's process (the health port, the ShadowPod webhook): ``start()``, ``stop()``
    and the bound :attr:`port` (port 0 in the bind picks a free one). Mixed in before the
    server class; ``thread_name`` names the thread in dumps and profiles."""

    thread_name = "server"
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        port: int = self.server_address[1]  # type: ignore[attr-defined]  # a mixin: the server class has it
        return port

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name=self.thread_name, daemon=True  # type: ignore[attr-defined]
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (when started) and close the listening socket."""
        if self._thread is not None:
            self.shutdown()  # type: ignore[attr-defined]
        self.server_close()  # type: ignore[attr-defined]


class ThreadingHTTPSServer(ThreadingHTTPServer):
    """A thread per connection, TLS in that thread. Subclasses add what their handlers
    read from ``self.server``."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], tls: ServerContext) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.tls = tls
        super().__init__(address, handler)

    def finish_request(self, request: socket.socket, client_address: Any) -> None:  # type: ignore[override]  # TCP: a socket
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            conn = self.tls.get().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            request.close()
            return
        try:
            self.RequestHandlerClass(conn, client_address, self)  # type: ignore[arg-type]  # typeshed: Self in an attribute
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("request from %s failed", client_address)


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::]:9443`` for IPv6) -> (host, port); ValueError naming the
    expected shape otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 0.0.0.0:9443 or [::]:9443)")
    number = int(port)
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} of {text!r} is out of range")
    return host.strip("[]"), number
