"""The threaded HTTPS server of the kubelet endpoint and its request handler.

Built on :class:`kube_offload.runtime.https_server.ThreadingHTTPSServer` (shared with the
enforcer's ShadowPod webhook). Why not Flask/gunicorn like the local webhook: an exec
turns the HTTP connection into a WebSocket, and the relay needs the raw TLS socket after
the ``101`` - the standard library hands it over as ``self.connection``, a WSGI server
does not (WSGI has no upgrade). A followed log is one long response per request, which a
thread per connection serves simply; the requests come from one client (the local
apiserver), a few at a time, so a thread each is cheap. And the server lives inside the
vkubelet process, next to the informers it reads, where gunicorn's pre-fork model would
not fit. The TLS handshake runs in the connection's thread.

Bounded (vkubelet/kubeletapi/limits.py): at most ``max_connections`` connections are
served at once - past that a few extra threads answer ``503`` with ``Retry-After``
before authentication (it costs the apiserver no review), and beyond those the socket is
closed - and at most ``max_streams`` exec/attach/port-forward/followed-log streams
(``429``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Iterator

from kubernetes import client

from kube_offload.runtime.https_server import ThreadingHTTPSServer
from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi import logs, stats, streams
from vkubelet.kubeletapi import remote as remote_api
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.limits import REJECT_TIMEOUT, REJECTING_CONNECTIONS, RETRY_AFTER_SECONDS, Slots, StreamLimits
from vkubelet.kubeletapi.access import AccessControl
from vkubelet.kubeletapi.authn import WEBSOCKET_TOKEN_PROTOCOL_PREFIX, Credentials
from vkubelet.kubeletapi.paths import (
    ATTACH,
    CONTAINER_LOGS,
    EXEC,
    HEALTHZ,
    METRICS_RESOURCE,
    PORT_FORWARD,
    STATS_SUMMARY,
    KubeletRequest,
    RequestError,
    parse_request_path,
)
from vkubelet.kubeletapi.resolver import PodResolver, RemotePod
from vkubelet.kubeletapi.sampler import UsageSampler
from vkubelet.kubeletapi.tls import ServerContext

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

# How long a kept-alive connection may sit idle between requests (and how long a client
# may take to send its request headers).
IDLE_TIMEOUT = 120.0
HANGUP_POLL_MS = 500
DISCARD_CHUNK = 64 * 1024
_POLL_HANGUP = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR


@dataclass
class LogStream:
    raw: Any  # urllib3 response of the remote pods/log, unread
    description: str


class KubeletApi:
    """What the endpoints do, apart from HTTP: admit the caller (authentication and
    authorization, before anything else), resolve the pod, open the remote side."""

    def __init__(
        self,
        *,
        resolver: PodResolver,
        remote: client.ApiClient,
        cluster_id: str,
        access: AccessControl,
        usage: UsageSampler | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self.access = access
        self.usage = usage
        self.resolver = resolver
        self.remote = remote
        # Streams open connections of their own from the same kubeconfig (remote.py).
        self.endpoint = _remote_endpoint(remote)
        self.cluster_id = cluster_id
        self.limits = limits or StreamLimits()
        self.streams = Slots(self.limits.max_streams)
        self.stopping = threading.Event()

    def resolve(self, request: KubeletRequest) -> RemotePod:
        return self.resolver.resolve(request.namespace, request.pod, request.pod_uid)

    def open_logs(self, request: KubeletRequest) -> LogStream:
        query = logs.parse_log_query(request.query)
        target = self.resolve(request)
        params = logs.remote_log_params(query, request.container)
        try:
            raw = logs.open_remote_log(
                self.remote,
                target.namespace,
                target.name,
                params,
                follow=query.follow,
                connect_timeout=self.limits.remote_connect_timeout,
                idle_timeout=self.limits.stream_idle_timeout,
            )
        except ApiError as exc:
            raise logs.remote_error(exc, cluster_id=self.cluster_id, remote_pod=str(target)) from exc
        return LogStream(raw, f"logs {request.pod_key}/{request.container} -> {self.cluster_id}:{target}")

    def usage_document(self, request: KubeletRequest) -> tuple[str, bytes]:
        """(content type, body) of ``/stats/summary`` or ``/metrics/resource``, from the
        usage sampled from the remote metrics API (vkubelet/kubeletapi/sampler.py)."""
        if self.usage is None or not self.usage.enabled:
            raise RequestError(
                404, f"/{request.endpoint} is not served: resource metrics are off on this virtual node "
                "(--kubelet-metrics-interval=0)"
            )
        snapshot = self.usage.snapshot()
        if request.endpoint == STATS_SUMMARY:
            return stats.JSON_CONTENT_TYPE, stats.summary_json(snapshot, node_name=self.usage.node_name, now=self.usage.now())
        return stats.PROMETHEUS_CONTENT_TYPE, stats.resource_metrics(snapshot).encode("utf-8")

    def remote_target(self, request: KubeletRequest, target: RemotePod, options: streams.StreamOptions | None) -> str:
        query = streams.remote_query(request.endpoint, request.container, options, streams.parse_ports(request.query))
        return remote_api.pod_path(self.endpoint, streams.remote_subresource(request.endpoint), target.namespace, target.name, query)

    def remote_opener(self, target_path: str) -> Callable[[list[str]], ws.Peer]:
        def open_remote(offer: list[str]) -> ws.Peer:
            return remote_api.open_websocket(
                self.endpoint, target_path, offer, timeout=self.limits.remote_connect_timeout, name="remote apiserver"
            )

        return open_remote

    def busy_message(self) -> str:
        return (
            f"the virtual kubelet of remote cluster {self.cluster_id} is serving its maximum of "
            f"{self.limits.max_streams} streams (exec, attach, port-forward, followed logs; "
            "--kubelet-max-streams); try again shortly"
        )


def _remote_endpoint(api_client: client.ApiClient) -> remote_api.Endpoint:
    return remote_api.endpoint_from(api_client.configuration)


class KubeletHTTPServer(ThreadingHTTPSServer):
    def __init__(self, address: tuple[str, int], app: KubeletApi, tls: ServerContext) -> None:
        self.app = app
        self._closers: dict[int, Callable[[], None]] = {}
        self._closers_lock = threading.Lock()
        self.connections = Slots(app.limits.max_connections)
        self.rejecting = Slots(REJECTING_CONNECTIONS)
        super().__init__(address, KubeletRequestHandler, tls)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("kubelet API: request from %s failed", client_address)

    # --- the connection cap -----------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if self.connections.acquire():
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread: the slot is ours to give back
                self.connections.release()
                raise
            return
        if self.rejecting.acquire():
            threading.Thread(target=self._reject, args=(request, client_address), name="kubelet-api-reject", daemon=True).start()
            return
        log.warning(
            "kubelet API: %d connections and %d refusals in progress; closing a new one from %s unanswered",
            self.connections.capacity,
            self.rejecting.capacity,
            client_address,
        )
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def _reject(self, request: socket.socket, client_address: Any) -> None:
        """Answer one connection over the cap with a 503, within a short time."""
        try:
            request.settimeout(REJECT_TIMEOUT)
            try:
                conn = self.tls.get().wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
            try:
                OverCapacityHandler(conn, client_address, self)
            except Exception:  # the client went away meanwhile
                pass
            finally:
                try:
                    conn.close()
                except OSError:
                    pass
        finally:
            self.shutdown_request(request)
            self.rejecting.release()

    def over_capacity_message(self) -> str:
        return (
            f"the virtual kubelet of remote cluster {self.app.cluster_id} is serving its maximum of "
            f"{self.connections.capacity} connections (--kubelet-max-connections); try again shortly"
        )

    # --- shutdown of long-lived requests ----------------------------------------------------
    def register_closer(self, close: Callable[[], None]) -> int:
        with self._closers_lock:
            token = id(close)
            self._closers[token] = close
            return token

    def unregister_closer(self, token: int) -> None:
        with self._closers_lock:
            self._closers.pop(token, None)

    def close_streams(self) -> None:
        """End every followed log and exec relay (the server is stopping)."""
        self.app.stopping.set()
        with self._closers_lock:
            closers = list(self._closers.values())
        for close in closers:
            try:
                close()
            except Exception:  # a stream that ended meanwhile
                pass


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
                    self._serve_logs(request)
            elif request.endpoint in (EXEC, ATTACH, PORT_FORWARD):
                with self._stream_slot(True):
                    self._serve_stream(request)
            elif request.endpoint in (STATS_SUMMARY, METRICS_RESOURCE):
                if self.command != "GET":
                    raise RequestError(405, f"{request.endpoint} takes GET")
                self._send_body(200, *self.server.app.usage_document(request))
            else:
                raise RequestError(
                    501, f"{request.endpoint} is not supported by kube-offload virtual nodes (only logs, exec and attach)"
                )
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

    # --- logs -----------------------------------------------------------------------------
    def _serve_logs(self, request: KubeletRequest) -> None:
        stream = self.server.app.open_logs(request)
        raw = stream.raw
        hung_up = threading.Event()
        done = threading.Event()
        complete = False

        def close_upstream() -> None:
            hung_up.set()
            _shutdown_response(raw)

        token = self.server.register_closer(close_upstream)
        watcher = threading.Thread(
            target=_watch_hangup, args=(self.connection, done, close_upstream), name="kubelet-api-hangup", daemon=True
        )
        try:
            self.connection.settimeout(None)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            watcher.start()
            log.debug("kubelet API: %s: streaming", stream.description)
            chunks = logs.iter_chunks(raw, stopped=hung_up.is_set)
            while True:
                try:
                    chunk = next(chunks, None)
                except Exception as exc:  # the remote stream broke, or we shut it down
                    if logs.is_read_timeout(exc):
                        # --kubelet-stream-idle-timeout: no new line for that long. A clean
                        # end, as the kubelet ends an idle stream.
                        log.info("kubelet API: %s: closed: idle for %gs", stream.description, self.server.app.limits.stream_idle_timeout)
                        break
                    if not hung_up.is_set():
                        log.info("kubelet API: %s: remote stream ended with an error: %s", stream.description, exc)
                    # No final chunk: the client must see a truncated stream, not a clean end.
                    self.close_connection = True
                    return
                if chunk is None:
                    break
                # An OSError here means the client went away: handled below.
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if hung_up.is_set():
                self.close_connection = True
                return
            complete = True
            self.wfile.write(b"0\r\n\r\n")
        except OSError as exc:  # the client went away while we wrote
            log.debug("kubelet API: %s: client gone: %s", stream.description, exc)
            self.close_connection = True
        finally:
            done.set()
            self.server.unregister_closer(token)
            try:
                if not complete:
                    raw.close()  # an interrupted stream's connection must not be reused
                raw.release_conn()
            except Exception:
                pass
            log.debug("kubelet API: %s: ended%s", stream.description, " (client hung up)" if hung_up.is_set() else "")

    # --- exec / attach / port-forward ----------------------------------------------------
    def _serve_stream(self, request: KubeletRequest) -> None:
        app = self.server.app
        options = None if request.endpoint == PORT_FORWARD else streams.parse_stream_options(request.endpoint, request.query)
        target = app.resolve(request)
        headers = {name: value for name, value in self.headers.items()}
        description = f"{request.endpoint} {request.pod_key}{'/' + request.container if request.container else ''} -> {app.cluster_id}:{target}"
        remote_path = app.remote_target(request, target, options)
        if ws.is_spdy_request(headers):
            self._serve_spdy(remote_path, description)
            return
        if not ws.is_websocket_request(headers):
            raise RequestError(
                400,
                f"{request.endpoint} needs an upgrade to a WebSocket ({', '.join(streams.supported_protocols(request.endpoint))}) "
                "or to SPDY/3.1",
            )
        supported = streams.supported_protocols(request.endpoint)
        offered = [
            protocol
            for protocol in ws.offered_protocols(self.headers.get_all("Sec-WebSocket-Protocol") or [])
            if not protocol.startswith(WEBSOCKET_TOKEN_PROTOCOL_PREFIX)  # a credential: never echoed
        ]
        protocol = ws.choose_protocol(offered, supported)
        try:
            # wsproto validates the handshake (method, headers, version, key) first.
            connection, accepted = ws.accept(ws.request_bytes(self.requestline, self.headers.items()), protocol)
        except ws.HandshakeError as exc:
            if protocol is None and str(exc) == ws.NO_PROTOCOL:
                raise RequestError(
                    400,
                    f"none of the offered stream protocols ({', '.join(offered) or 'none'}) is supported; "
                    f"use one of {', '.join(supported)}",
                ) from None
            raise RequestError(400, str(exc)) from None
        assert protocol is not None  # accept() refused None
        open_remote = app.remote_opener(remote_path)
        remote_peer = None
        if request.endpoint == PORT_FORWARD:
            # Port-forward speaks no channel of its own for errors (the tunnel is SPDY):
            # open the remote first, so that a refusal is still an HTTP answer kubectl prints.
            try:
                remote_peer = open_remote(streams.remote_protocol_offer(protocol))
            except remote_api.RemoteError as exc:
                message, reason, code = streams.remote_stream_error(exc, cluster_id=app.cluster_id, action="port-forward")
                raise RequestError(code, message, reason) from None
        sock = self.connection
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._responded = True
        self.close_connection = True
        try:
            self.wfile.write(accepted)
        except OSError:
            if remote_peer is not None:
                remote_peer.shutdown()
            raise
        local = ws.Peer(sock, connection, protocol=protocol, name="apiserver")
        log.info("kubelet API: %s: started (%s)", description, protocol)
        token = self.server.register_closer(lambda: _shutdown_socket(sock))
        try:
            if remote_peer is not None:
                outcome = streams.relay(local, remote_peer, stopped=app.stopping.is_set, idle_timeout=app.limits.stream_idle_timeout)
            else:
                outcome = streams.serve_stream(
                    local,
                    open_remote,
                    cluster_id=app.cluster_id,
                    description=description,
                    stopped=app.stopping.is_set,
                    idle_timeout=app.limits.stream_idle_timeout,
                )
        finally:
            self.server.unregister_closer(token)
        log.info("kubelet API: %s: ended: %s", description, outcome)

    def _serve_spdy(self, remote_path: str, description: str) -> None:
        """Forward the SPDY upgrade to the remote API server; after its ``101``, relay
        bytes: the SPDY session runs end to end between the client and the remote kubelet."""
        app = self.server.app
        forwarded = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]
        forwarded += [(streams.SPDY_PROTOCOL_HEADER, value) for value in self.headers.get_all(streams.SPDY_PROTOCOL_HEADER) or ()]
        try:
            upgraded = remote_api.open_upgrade(
                app.endpoint, self.command, remote_path, forwarded, timeout=app.limits.remote_connect_timeout
            )
        except remote_api.RemoteError as exc:
            message, reason, code = streams.remote_stream_error(exc, cluster_id=app.cluster_id, action="stream")
            raise RequestError(code, message, reason) from None
        sock = self.connection
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._responded = True
        self.close_connection = True
        head = ["HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: SPDY/3.1"]
        head += [f"{name}: {value}" for name, value in upgraded.headers]
        try:
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        except OSError:
            _shutdown_socket(upgraded.sock)
            raise
        log.info("kubelet API: %s: started (SPDY/3.1)", description)
        token = self.server.register_closer(lambda: _shutdown_socket(sock))
        try:
            outcome = streams.splice(
                sock, upgraded.sock, leftover=upgraded.leftover, stopped=app.stopping.is_set, idle_timeout=app.limits.stream_idle_timeout
            )
        finally:
            self.server.unregister_closer(token)
        log.info("kubelet API: %s: ended: %s", description, outcome)


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


def _shutdown_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _watch_hangup(conn: socket.socket, done: threading.Event, on_hangup: Callable[[], None]) -> None:
    """Call ``on_hangup`` when the client closes its side of the connection while a
    log is being relayed: a followed log of a quiet container would otherwise keep the
    remote stream open until its next line. Polls for hang-up only (POLLRDHUP), never
    reads, so the TLS object is left to the thread that writes."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), _POLL_HANGUP)
    except (OSError, ValueError):
        return
    while not done.is_set():
        try:
            events = poller.poll(HANGUP_POLL_MS)
        except OSError:
            return
        if events and not done.is_set():
            on_hangup()
            return


def _shutdown_response(raw: Any) -> None:
    """Interrupt a read blocked on the remote response (urllib3 >= 2.3: shutdown())."""
    shutdown = getattr(raw, "shutdown", None)
    try:
        if shutdown is not None:
            shutdown()
        else:
            raw.release_conn()
    except Exception:
        pass
