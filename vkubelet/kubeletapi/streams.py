"""``/exec`` and ``/attach``: the kubelet's remote-command streams, relayed over WebSocket
to the remote API server's ``pods/exec`` / ``pods/attach``.

How the request gets here (kube-apiserver v1.37, ``pkg/registry/core/pod/rest/subresources.go``
ExecREST.Connect): kubectl opens a WebSocket (``v5.channel.k8s.io``) to the apiserver. If
the feature gate ExtendWebSocketsToKubelet is on (beta, on by default since 1.36) and the
node lists ``ExtendWebSocketsToKubelet`` in ``status.declaredFeatures``, the apiserver
proxies that upgrade to the kubelet as it is; otherwise it translates it to SPDY/3.1.
The virtual kubelet declares the feature, so it only ever has to speak WebSocket.

Both ends speak the same Kubernetes channel protocol (v5, or v4): every data message is
one channel byte (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize, 255 close-a-stream in
v5) and the payload. So messages are relayed untouched, in both directions: the remote
side's Status on the error channel (exit code included) reaches kubectl exactly as the
remote kubelet wrote it. Control frames are answered on each hop (ping -> pong), and a
close on one side closes the other.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.paths import ATTACH, EXEC, RequestError, query_value

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
# Preference order when the client offers several. v1-v3 (and the base64 variants) are
# older than any apiserver that proxies WebSockets to a kubelet; nobody sends them here.
SUPPORTED_PROTOCOLS = (V5, V4)

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE_STREAM = 255  # v5 only: "this stream is finished" (kubectl: stdin reached EOF)

RECV_SIZE = 64 * 1024
SELECT_INTERVAL = 1.0


@dataclass(frozen=True)
class StreamOptions:
    """The remotecommand options of one exec/attach request (the kubelet's NewOptions)."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: tuple[str, ...] = ()


def _flag(query: dict[str, list[str]], name: str) -> bool:
    # The apiserver sends "1" (streamParams in pod/strategy.go); the kubelet accepts only
    # that. "true" is accepted too, for hand-made requests.
    return query_value(query, name) in ("1", "true", "True")


def parse_stream_options(endpoint: str, query: dict[str, list[str]]) -> StreamOptions:
    stdin = _flag(query, "input")
    stdout = _flag(query, "output")
    stderr = _flag(query, "error")
    tty = _flag(query, "tty")
    if tty and stderr:
        stderr = False  # as the kubelet: with a TTY, stderr is merged into stdout
    if not (stdin or stdout or stderr):
        raise RequestError(400, "you must specify at least 1 of stdin, stdout, stderr")
    command = tuple(query.get("command") or ())
    if endpoint == EXEC and not command:
        raise RequestError(400, "you must specify a command to exec")
    if endpoint == ATTACH and command:
        raise RequestError(400, "attach does not take a command")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty, command=command)


def remote_protocol_offer(local_protocol: str) -> str:
    """What to offer the remote API server: the protocol kubectl got first, then older
    ones we can still relay (an older remote apiserver may lack v5)."""
    index = SUPPORTED_PROTOCOLS.index(local_protocol)
    return ",".join(SUPPORTED_PROTOCOLS[index:])


def forward_payload(payload: bytes, *, to_protocol: str) -> bytes | None:
    """The data message to pass on, or None to drop it: an empty message carries no
    channel, and a v5 close-stream message means nothing to a v4 peer (v4 has no way to
    say "stdin is finished"; the stream ends when the connection does)."""
    if not payload:
        return None
    if payload[0] == CLOSE_STREAM and to_protocol != V5:
        return None
    return payload


def status_payload(message: str, *, reason: str = "InternalError", code: int = 500) -> bytes:
    """An error-channel message: a metav1.Status, as the kubelet writes one when a
    stream cannot run (kubectl prints its message)."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return bytes([ERROR]) + json.dumps(status).encode("utf-8")


class Peer:
    """One WebSocket connection of the relay, on a connected (TLS) socket.

    ``server``: True when we are the server on this socket (the apiserver's side: its
    frames are masked, ours are not); False for our client connection to the remote API
    server. Reads happen only from the relay thread; writes from that thread too, so no
    TLS object is ever used by two threads at once."""

    def __init__(self, sock: socket.socket, *, server: bool, protocol: str, name: str) -> None:
        self.sock = sock
        self.server = server
        self.protocol = protocol
        self.name = name
        self._parser = ws.FrameParser(expect_masked=server)
        self._assembler = ws.MessageAssembler()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def has_pending(self) -> bool:
        """Bytes already decrypted by TLS but not read by us: select() cannot see them."""
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

    def receive(self) -> list[ws.Message] | None:
        """What one read brings (maybe nothing yet: a partial frame); None at EOF."""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (ssl.SSLWantReadError, BlockingIOError):
            return []
        if not data:
            return None
        self._parser.feed(data)
        messages = []
        while True:
            frame = self._parser.next_frame()
            if frame is None:
                return messages
            message = self._assembler.add(frame)
            if message is not None:
                messages.append(message)

    def send(self, opcode: int, payload: bytes = b"") -> None:
        mask = None if self.server else ws.new_mask_key()
        self.sock.sendall(ws.encode_frame(opcode, payload, mask_key=mask))

    def send_close(self, code: int | None, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.send(ws.OP_CLOSE, ws.encode_close_payload(code, reason))
        except OSError:
            pass

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def relay(local: Peer, remote: Peer, *, stopped: Callable[[], bool] = lambda: False) -> str:
    """Pass messages between the two peers until either closes; return why it ended.
    Both sockets are closed afterwards."""
    peers = (local, remote)
    try:
        while not stopped():
            ready: Sequence[Peer] = [peer for peer in peers if peer.has_pending()]
            if not ready:
                ready, _, _ = select.select(peers, [], [], SELECT_INTERVAL)
            for peer in ready:
                other = remote if peer is local else local
                ended = _relay_once(peer, other)
                if ended:
                    return ended
        local.send_close(ws.CLOSE_GOING_AWAY, "virtual kubelet stopping")
        remote.send_close(ws.CLOSE_GOING_AWAY, "virtual kubelet stopping")
        return "stopped"
    except ws.ProtocolError as exc:
        local.send_close(exc.close_code, str(exc)[:100])
        remote.send_close(exc.close_code, str(exc)[:100])
        return f"protocol error: {exc}"
    except OSError as exc:
        local.send_close(ws.CLOSE_ABNORMAL)
        remote.send_close(ws.CLOSE_ABNORMAL)
        return f"connection error: {exc}"
    finally:
        local.shutdown()
        remote.shutdown()


def _relay_once(peer: Peer, other: Peer) -> str | None:
    messages = peer.receive()
    if messages is None:
        other.send_close(ws.CLOSE_NORMAL)
        return f"{peer.name} closed the connection"
    for message in messages:
        if message.opcode == ws.OP_PING:
            peer.send(ws.OP_PONG, message.payload)
        elif message.opcode == ws.OP_PONG:
            continue
        elif message.opcode == ws.OP_CLOSE:
            code, reason = ws.decode_close_payload(message.payload)
            other.send_close(code, reason)
            peer.send_close(code, reason)  # the closing handshake's answer
            return f"{peer.name} closed the stream ({code}{': ' + reason if reason else ''})"
        else:
            payload = forward_payload(message.payload, to_protocol=other.protocol)
            if payload is not None:
                other.send(message.opcode, payload)
    return None


# --- the remote side ---------------------------------------------------------------------------
@dataclass
class RemoteStream:
    """An open WebSocket to the remote API server (what :func:`open_remote_stream` made)."""

    sock: socket.socket
    protocol: str
    client: Any  # kubernetes.stream.ws_client.WSClient, kept so nothing closes the socket early


def open_remote_stream(
    core_api: Any, endpoint: str, namespace: str, pod: str, container: str, options: StreamOptions, *, offer: str
) -> RemoteStream:
    """Open ``pods/exec`` or ``pods/attach`` on the remote API server with the official
    client's WebSocket support (kubeconfig auth and TLS included) and take its socket:
    from here on frames are read and written by :class:`Peer`. websocket-client reads
    the handshake response byte by byte, so nothing of the stream is left buffered in
    it when it hands over."""
    from kubernetes.stream import stream

    method = core_api.connect_get_namespaced_pod_exec if endpoint == EXEC else core_api.connect_get_namespaced_pod_attach
    kwargs: dict[str, Any] = {
        "container": container,
        "stdin": options.stdin,
        "stdout": options.stdout,
        "stderr": options.stderr,
        "tty": options.tty,
        "_preload_content": False,
        "binary": True,
        "_headers": {"sec-websocket-protocol": offer},
    }
    if endpoint == EXEC:
        kwargs["command"] = list(options.command)
    client = stream(method, pod, namespace, **kwargs)
    protocol = client.subprotocol or ""
    sock = client.sock.sock
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return RemoteStream(sock=sock, protocol=protocol, client=client)


def remote_stream_error(exc: BaseException, *, cluster_id: str) -> tuple[str, str, int]:
    """(message, reason, code) for an exec/attach the remote API server refused.

    ``kubernetes.stream`` turns every failure into ApiException(status=0); the handshake
    response it failed on (websocket-client's WebSocketBadStatusException, with the
    remote metav1.Status as body) is the exception's context."""
    cause = exc.__context__ or exc.__cause__
    status_code = getattr(cause, "status_code", None)
    body = getattr(cause, "resp_body", None)
    if status_code:
        message = ""
        reason = ""
        if body:
            try:
                parsed = json.loads(body)
                if isinstance(parsed, dict):
                    message = str(parsed.get("message") or "")
                    reason = str(parsed.get("reason") or "")
            except (ValueError, TypeError):
                message = body.decode("utf-8", "replace").strip() if isinstance(body, bytes) else str(body)
        message = message or f"remote cluster {cluster_id} answered {status_code}"
        if status_code in (401, 403):
            return (f"the virtual kubelet may not exec in remote cluster {cluster_id}: {message}", "InternalError", 500)
        return (message, reason or "BadRequest", int(status_code))
    detail = getattr(exc, "reason", None) or str(exc)
    return (f"remote cluster {cluster_id} is unreachable: {detail}", "ServiceUnavailable", 503)


def serve_stream(
    local_sock: socket.socket,
    local_protocol: str,
    open_remote: Callable[[str], RemoteStream],
    *,
    cluster_id: str,
    description: str,
    stopped: Callable[[], bool],
) -> str:
    """After the local upgrade: connect the remote side and relay. A remote failure is
    reported on the error channel (the connection is already a WebSocket: an HTTP error
    can no longer be sent), which kubectl prints as the command's error."""
    local = Peer(local_sock, server=True, protocol=local_protocol, name="apiserver")
    try:
        remote_stream = open_remote(remote_protocol_offer(local_protocol))
    except Exception as exc:  # the client raises ApiException, socket and SSL errors alike
        message, reason, code = remote_stream_error(exc, cluster_id=cluster_id)
        log.info("%s: remote side refused: %s", description, message)
        try:
            local.send(ws.OP_BINARY, status_payload(message, reason=reason, code=code))
        except OSError:
            pass
        local.send_close(ws.CLOSE_NORMAL)
        local.shutdown()
        return f"remote refused: {message}"
    if remote_stream.protocol not in SUPPORTED_PROTOCOLS:
        message = f"remote cluster {cluster_id} answered with unsupported stream protocol {remote_stream.protocol!r}"
        local.send(ws.OP_BINARY, status_payload(message))
        local.send_close(ws.CLOSE_NORMAL)
        local.shutdown()
        Peer(remote_stream.sock, server=False, protocol="", name="remote").shutdown()
        return message
    remote = Peer(remote_stream.sock, server=False, protocol=remote_stream.protocol, name="remote apiserver")
    log.debug("%s: relaying %s (local) <-> %s (remote)", description, local_protocol, remote_stream.protocol)
    return relay(local, remote, stopped=stopped)

