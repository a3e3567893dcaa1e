"""The request handler of the kubelet API: admission first, then dispatch by endpoint.

Every request is authenticated and authorized (vkubelet/kubeletapi/access.py) before its
method or path is looked at, as on a kubelet. Then each endpoint is served by its module:
``containerLogs`` by vkubelet/kubeletapi/logs.py, ``exec``/``attach``/``portForward`` by
vkubelet/kubeletapi/upgrades.py, ``stats/summary`` and ``metrics/resource`` from the
sampled usage (vkubelet/kubeletapi/stats.py), ``pods`` from the local pod informer and
``runningpods`` from the remote pods of those (vkubelet/kubeletapi/podlists.py),
``healthz`` here. Errors are answered here:
plain text, or a metav1.Status where a client expects a refused upgrade.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Iterator

from vkubelet.kubeletapi import logs, upgrades
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.authn import Credentials
from vkubelet.kubeletapi.limits import REJECT_TIMEOUT, RETRY_AFTER_SECONDS
from vkubelet.kubeletapi.paths import (
    ATTACH,
    CONTAINER_LOGS,
    EXEC,
    HEALTHZ,
    METRICS_RESOURCE,
    PODS,
    PORT_FORWARD,
    RUNNING_PODS,
    STATS_SUMMARY,
    RequestError,
    parse_request_path,
)

if TYPE_CHECKING:
    from vkubelet.kubeletapi.server import KubeletHTTPServer

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

# How long a kept-alive connection may sit idle between requests (and how long a client
# may take to send its request headers).
IDLE_TIMEOUT = 120.0
DISCARD_CHUNK = 64 * 1024


class KubeletRequestHandler(BaseHTTPRequestHandler):
    server: KubeletHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "kube-offload-vkubelet"
    sys_version = ""
    timeout = IDLE_TIMEOUT
    # Unbuffered: after a WebSocket upgrade nothing of the stream may sit in a read buffer.
    rbufsize = 0

    # Every method goes through _handle: as on a kubelet, the caller is authenticated and
    # authorized before the method or path is looked at (SPDY clients send exec/attach
    # as POST; WebSocket handshakes are GETs; the rest is refused with 405 once admitted).
    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet API %s: " + format, self.address_string(), *args)

    # --- dispatch -------------------------------------------------------------------------
    def _handle(self) -> None:
        streaming = False
        self._responded = False
        try:
            self._discard_body()
            if not self._admitted():
                return
            if self.command not in ("GET", "POST"):
                raise RequestError(405, f"{self.command} is not supported by the kubelet API of a kube-offload virtual node")
            request = parse_request_path(self.path)
            streaming = request.endpoint in (EXEC, ATTACH, PORT_FORWARD)
            if request.endpoint == HEALTHZ:
                self._send_text(200, "ok")
            elif request.endpoint == CONTAINER_LOGS:
                if self.command != "GET":
                    raise RequestError(405, "containerLogs takes GET")
                with self._stream_slot(logs.parse_log_query(request.query).follow):
                    logs.serve_logs(self, request)
            elif request.endpoint in (EXEC, ATTACH, PORT_FORWARD):
                with self._stream_slot(True):
                    upgrades.serve_stream(self, request)
            elif request.endpoint in (STATS_SUMMARY, METRICS_RESOURCE):
                if self.command != "GET":
                    raise RequestError(405, f"{request.endpoint} takes GET")
                self._send_body(200, *self.server.app.usage_document(request))
            elif request.endpoint in (PODS, RUNNING_PODS):
                if self.command != "GET":
                    raise RequestError(405, f"{request.endpoint} takes GET")
                self._send_body(200, *self.server.app.pods_document(request))
            else:
                raise RequestError(501, f"{request.endpoint} is not supported by kube-offload virtual nodes")
        except RequestError as exc:
            log.info("kubelet API: %s %s -> %d %s", self.command, self.path.split("?")[0], exc.status, exc.message)
            self._send_error(exc, streaming)
        except Exception:
            log.exception("kubelet API: %s %s failed", self.command, self.path.split("?")[0])
            if not self._responded:
                self._send_error(RequestError(500, "internal error in the virtual kubelet; see its log"), streaming)
            self.close_connection = True

    @contextlib.contextmanager
    def _stream_slot(self, needed: bool) -> Iterator[None]:
        """Hold one of the ``--kubelet-max-streams`` slots while the stream runs."""
        app = self.server.app
        if not needed:
            yield
            return
        if not app.streams.acquire():
            raise RequestError(429, app.busy_message())
        try:
            yield
        finally:
            app.streams.release()

    def _admitted(self) -> bool:
        """Authenticate and authorize (vkubelet/kubeletapi/access.py, which logs the
        reason); a refusal is answered here in plain text, as the kubelet's auth filter
        does, whatever the endpoint."""
        headers = {name: value for name, value in self.headers.items()}
        websocket = ws.is_websocket_request(headers)
        try:
            peercert = self.connection.getpeercert()
        except (AttributeError, ValueError):  # not a TLS socket / no handshake
            peercert = None
        credentials = Credentials(
            peercert=peercert,
            authorization=self.headers.get("Authorization"),
            websocket_protocols=tuple(self.headers.get_all("Sec-WebSocket-Protocol") or ()) if websocket else (),
        )
        try:
            self.server.app.access.admit(self.command, self.path, credentials)
        except RequestError as exc:
            self._send_text(exc.status, exc.message)
            if ws.is_upgrade_request(headers):
                self.close_connection = True  # the client gave up on the upgrade
            return False
        return True

    def _send_error(self, exc: RequestError, streaming: bool) -> None:
        if streaming:
            self._send_status(exc)
        else:
            self._send_text(exc.status, exc.message)

    _responded = False

    def leave_http(self) -> socket.socket:
        """The connection stops being HTTP (an upgrade is answered next): blocking from
        here on, kept alive by TCP, never answered with an HTTP error nor reused."""
        sock: socket.socket = self.connection
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._responded = True
        self.close_connection = True
        return sock

    def send_response(self, code: int, message: str | None = None) -> None:
        self._responded = True
        super().send_response(code, message)

    def _discard_body(self) -> None:
        """No endpoint served here takes a body; one sent anyway is read and dropped (in
        bounded pieces) so the answer reaches the client instead of a connection reset."""
        try:
            remaining = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise RequestError(400, "invalid Content-Length") from None
        while remaining > 0:
            data = self.rfile.read(min(remaining, DISCARD_CHUNK))
            if not data:
                break
            remaining -= len(data)

    # --- responses ------------------------------------------------------------------------
    def _retry_after(self, status: int) -> None:
        if status in (429, 503):
            self.send_header("Retry-After", str(RETRY_AFTER_SECONDS))

    def _send_text(self, status: int, text: str) -> None:
        body = (text.rstrip("\n") + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self._retry_after(status)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_body(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_status(self, exc: RequestError) -> None:
        """A metav1.Status body: what client-go decodes from a refused upgrade (it then
        prints the message, with the reason, as a StatusError)."""
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": exc.message,
                "reason": exc.reason,
                "code": exc.status,
            }
        ).encode("utf-8")
        self.send_response(exc.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self._retry_after(exc.status)
        self.end_headers()
        self.wfile.write(body)
        # After a refused upgrade the apiserver closes its side; so do we.
        self.close_connection = True


class OverCapacityHandler(KubeletRequestHandler):
    """Serves a connection over ``--kubelet-max-connections``: reads the request (within
    a short time) and answers 503 before anything else, authentication included."""

    timeout = REJECT_TIMEOUT

    def _handle(self) -> None:
        self._responded = False
        self.close_connection = True
        exc = RequestError(503, self.server.over_capacity_message())
        headers = {name: value for name, value in self.headers.items()}
        if ws.is_upgrade_request(headers):
            self._send_status(exc)
        else:
            self._send_text(exc.status, exc.message)
