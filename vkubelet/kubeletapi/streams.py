"""``/exec``, ``/attach`` and ``/portForward``: the kubelet's streams, relayed to the
remote API server's ``pods/exec``, ``pods/attach`` and ``pods/portforward``.

How the request gets here (kube-apiserver v1.37, ``pkg/registry/core/pod/rest/subresources.go``):
kubectl opens a WebSocket to the apiserver. If the feature gate ExtendWebSocketsToKubelet
is on (beta, on by default since 1.36) and the node lists ``ExtendWebSocketsToKubelet``
in ``status.declaredFeatures`` (the virtual kubelet declares it), the apiserver proxies
that upgrade to the kubelet as it is; otherwise it translates it to SPDY/3.1. SPDY also
comes from older clients and from kubectl's SPDY fallback (``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``,
``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``), which the apiserver forwards as is.

* **WebSocket**: exec/attach speak a channel protocol (``v5.channel.k8s.io`` or ``v4``:
  every message is one channel byte - 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize,
  255 close-a-stream in v5 - and the payload); port-forward speaks
  ``SPDY/3.1+portforward.k8s.io`` (an SPDY session tunnelled in binary messages) or the
  legacy ``v4.channel.k8s.io`` port-forward channels. We open a WebSocket of the same
  protocol to the remote API server and relay messages untouched both ways (the one
  translation: a v5 close-stream message is dropped towards a v4 remote), so the remote
  Status on the error channel - exit code included - reaches kubectl as written.
  Pings are answered on each hop; a close on one side closes the other, with its code.
* **SPDY**: the upgrade is forwarded to the remote API server and, after its ``101``,
  bytes are relayed untouched both ways: the SPDY session runs end to end between
  kubectl and the remote kubelet.

Either way each stream has its own connection to the remote (vkubelet/kubeletapi/remote.py),
and a stream with no traffic for the idle timeout is closed.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from kube_offload.runtime.sockets import close_quietly, readable
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.paths import ATTACH, EXEC, PORT_FORWARD, RequestError, query_value
from vkubelet.kubeletapi.remote import RemoteError

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
# Remote command (exec/attach), in preference order when the client offers several.
# v1-v3 are older than any apiserver that proxies WebSockets to a kubelet.
SUPPORTED_PROTOCOLS = (V5, V4)
# Port-forward: what kubectl >= 1.31 sends (client-go tunneling_dialer.go: the SPDY
# protocol name behind the "SPDY/3.1+" prefix), then the kubelet's legacy WebSocket
# port-forward channels (data/error channel pairs per port, ports in the query).
PORT_FORWARD_TUNNEL = "SPDY/3.1+portforward.k8s.io"
PORT_FORWARD_PROTOCOLS = (PORT_FORWARD_TUNNEL, V4, V4_BASE64)
CHANNEL_PROTOCOLS = (V5, V4, V4_BASE64)

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE_STREAM = 255  # v5 only: "this stream is finished" (kubectl: stdin reached EOF)

SELECT_INTERVAL = 1.0
# SPDY upgrade headers passed on to the remote API server (the rest of the request is
# ours to make: path, credentials).
SPDY_PROTOCOL_HEADER = "X-Stream-Protocol-Version"


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


def parse_ports(query: dict[str, list[str]]) -> tuple[int, ...]:
    """The kubelet's ``port`` query parameters (legacy WebSocket port-forward only; SPDY
    and the tunnel name the port in each stream's headers)."""
    ports = []
    for text in query.get("port") or ():
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            if not item.isdigit() or not 1 <= int(item) <= 65535:
                raise RequestError(400, f"query parameter port={item!r} is not a TCP port")
            ports.append(int(item))
    return tuple(ports)


def supported_protocols(endpoint: str) -> tuple[str, ...]:
    return PORT_FORWARD_PROTOCOLS if endpoint == PORT_FORWARD else SUPPORTED_PROTOCOLS


def remote_query(endpoint: str, container: str, options: StreamOptions | None, ports: Sequence[int] = ()) -> list[tuple[str, str]]:
    """The remote API server's query for the stream (pods/exec|attach|portforward take
    ``container``/``stdin``/``stdout``/``stderr``/``tty``/``command`` and ``ports``, where
    the kubelet took ``input``/``output``/``error``/``port``)."""
    if endpoint == PORT_FORWARD or options is None:
        return [("ports", str(port)) for port in ports]
    query = [("container", container)]
    for name, value in (("stdin", options.stdin), ("stdout", options.stdout), ("stderr", options.stderr), ("tty", options.tty)):
        if value:
            query.append((name, "true"))
    query += [("command", part) for part in options.command]
    return query


def remote_subresource(endpoint: str) -> str:
    return {EXEC: "exec", ATTACH: "attach", PORT_FORWARD: "portforward"}[endpoint]


def remote_protocol_offer(local_protocol: str) -> list[str]:
    """What to offer the remote API server: the protocol kubectl got first, then, for
    remote commands, older ones we can still relay (an older remote apiserver may lack
    v5). Port-forward protocols are offered alone: the two ends must speak the same."""
    if local_protocol in SUPPORTED_PROTOCOLS:
        return list(SUPPORTED_PROTOCOLS[SUPPORTED_PROTOCOLS.index(local_protocol):])
    return [local_protocol]


def forward_payload(payload: bytes, *, from_protocol: str = V5, to_protocol: str) -> bytes | None:
    """The data message to pass on, or None to drop it. Between two hops of the same
    protocol everything passes untouched. Channel protocols: an empty message carries no
    channel, and a v5 close-stream message means nothing to a v4 peer (v4 has no way to
    say "stdin is finished"; the stream ends when the connection does)."""
    if from_protocol == to_protocol and from_protocol not in CHANNEL_PROTOCOLS:
        return payload
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


def remote_stream_error(exc: RemoteError, *, cluster_id: str, action: str = "exec") -> tuple[str, str, int]:
    """(message, reason, code) for a stream the remote API server refused or that could
    not reach it. 401/403 are our credentials' problem, not the user's: 500."""
    if not exc.status:
        return (f"remote cluster {cluster_id} is unreachable: {exc.message}", "ServiceUnavailable", 503)
    message = exc.message or f"remote cluster {cluster_id} answered {exc.status}"
    if exc.status in (401, 403):
        return (f"the virtual kubelet may not {action} in remote cluster {cluster_id}: {message}", "InternalError", 500)
    return (message, exc.reason or "BadRequest", exc.status)


# --- the WebSocket relay ----------------------------------------------------------------------
class Activity:
    """When data last went through a stream, for its idle timeout (0: none)."""

    def __init__(self, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()

    def idle(self) -> bool:
        return bool(self.idle_timeout) and time.monotonic() - self.last >= self.idle_timeout

    def wait(self) -> float:
        if not self.idle_timeout:
            return SELECT_INTERVAL
        return max(0.0, min(SELECT_INTERVAL, self.idle_timeout - (time.monotonic() - self.last)))


def relay(local: ws.Peer, remote: ws.Peer, *, stopped: Callable[[], bool] = lambda: False, idle_timeout: float = 0.0) -> str:
    """Pass messages between the two peers until either closes, the stream is idle for
    ``idle_timeout`` seconds, or ``stopped``; return why it ended. Both sockets are
    closed afterwards.

    A write to a peer that has gone away does not end the relay (ws.Peer records it):
    the peer is still read until its close, so nothing it sent before is lost. The remote
    API server needs that at the end of every exec: it writes its close frame and closes
    TCP at once, so our answer to that close can fail, and the close (1000) must still
    reach kubectl, which takes any other code as a cut stream."""
    peers = (local, remote)
    activity = Activity(idle_timeout)
    try:
        for peer in peers:  # messages that came with the handshake
            other = remote if peer is local else local
            ended = _pass_on(peer, other, peer.pending(), activity)
            if ended:
                return ended
        while not stopped():
            if activity.idle():
                reason = f"idle for {activity.idle_timeout:g}s"
                local.send_close(ws.CLOSE_NORMAL, reason)
                remote.send_close(ws.CLOSE_NORMAL, reason)
                return f"closed: {reason}"
            ready: Sequence[ws.Peer] = [peer for peer in peers if peer.has_pending()]
            if not ready:
                ready = readable(peers, activity.wait())
            for peer in ready:
                other = remote if peer is local else local
                ended = _pass_on(peer, other, peer.receive(), activity)
                if ended:
                    return ended
        local.send_close(ws.CLOSE_GOING_AWAY, "virtual kubelet stopping")
        remote.send_close(ws.CLOSE_GOING_AWAY, "virtual kubelet stopping")
        return "stopped"
    except ws.ProtocolError as exc:
        local.send_close(exc.close_code, str(exc))
        remote.send_close(exc.close_code, str(exc))
        return f"protocol error: {exc}"
    except OSError as exc:
        local.send_close(ws.CLOSE_GOING_AWAY)
        remote.send_close(ws.CLOSE_GOING_AWAY)
        return f"connection error: {exc}"
    finally:
        local.shutdown()
        remote.shutdown()


def _pass_on(peer: ws.Peer, other: ws.Peer, messages: list[ws.Message], activity: Activity) -> str | None:
    for message in messages:
        payload = forward_payload(message.data, from_protocol=peer.protocol, to_protocol=other.protocol)
        if payload is not None:
            other.send(ws.Message(payload, text=message.text))
        activity.touch()
    if not peer.closed:
        return None
    code = peer.close_code or ws.CLOSE_ABNORMAL
    other.send_close(code, peer.close_reason)
    detail = f": {peer.close_reason}" if peer.close_reason else ""
    if code == ws.CLOSE_ABNORMAL:
        return f"{peer.name} closed the connection{detail}"
    return f"{peer.name} closed the stream ({code}{detail})"


# --- the SPDY relay ---------------------------------------------------------------------------
def splice(local: socket.socket, remote: socket.socket, *, leftover: bytes = b"", stopped: Callable[[], bool] = lambda: False, idle_timeout: float = 0.0) -> str:
    """Relay bytes both ways, untouched, until either side closes, the stream is idle
    for ``idle_timeout`` seconds, or ``stopped``. Both sockets are closed afterwards
    (both hops are TLS, which has no portable half-close: the first EOF ends the stream,
    as in the apiserver's own upgrade-aware proxy). As in the WebSocket relay, a side
    that cannot be written to any more is still read to its end, and what it sent is
    passed on: the remote's last frames must reach kubectl even when kubectl's own last
    frames crossed the remote's hang-up."""
    activity = Activity(idle_timeout)
    other = {local: remote, remote: local}
    names = {local: "apiserver", remote: "remote apiserver"}
    unwritable: set[socket.socket] = set()
    try:
        if leftover:
            local.sendall(leftover)
        while not stopped():
            if activity.idle():
                return f"closed: idle for {idle_timeout:g}s"
            ready: list[socket.socket] = [sock for sock in other if isinstance(sock, ssl.SSLSocket) and sock.pending()]
            if not ready:
                ready = readable(list(other), activity.wait())
            for sock in ready:
                try:
                    data = sock.recv(ws.RECV_SIZE)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                if not data:
                    return f"{names[sock]} closed the connection"
                target = other[sock]
                if target not in unwritable:
                    try:
                        target.sendall(data)
                    except OSError:
                        unwritable.add(target)  # dropped from now on; still read to its end
                activity.touch()
        return "stopped"
    except OSError as exc:
        return f"connection error: {exc}"
    finally:
        for sock in (local, remote):
            close_quietly(sock)


def serve_stream(
    local: ws.Peer,
    open_remote: Callable[[list[str]], ws.Peer],
    *,
    cluster_id: str,
    description: str,
    stopped: Callable[[], bool],
    idle_timeout: float = 0.0,
) -> str:
    """After the local upgrade of an exec/attach: connect the remote side and relay. A
    remote failure is reported on the error channel (the connection is already a
    WebSocket: an HTTP error can no longer be sent), which kubectl prints as the
    command's error."""
    try:
        remote = open_remote(remote_protocol_offer(local.protocol))
    except RemoteError as exc:
        message, reason, code = remote_stream_error(exc, cluster_id=cluster_id)
        log.info("%s: remote side refused: %s", description, message)
        local.send(ws.Message(status_payload(message, reason=reason, code=code)))  # a failed write is recorded, not raised
        local.send_close(ws.CLOSE_NORMAL)
        local.shutdown()
        return f"remote refused: {message}"
    if remote.protocol not in remote_protocol_offer(local.protocol):
        message = f"remote cluster {cluster_id} answered with unsupported stream protocol {remote.protocol!r}"
        local.send(ws.Message(status_payload(message)))
        local.send_close(ws.CLOSE_NORMAL)
        local.shutdown()
        remote.shutdown()
        return message
    log.debug("%s: relaying %s (local) <-> %s (remote)", description, local.protocol, remote.protocol)
    return relay(local, remote, stopped=stopped, idle_timeout=idle_timeout)
