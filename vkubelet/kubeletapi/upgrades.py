"""``/exec``, ``/attach`` and ``/portForward`` on the HTTP side: the request that becomes a
stream. A WebSocket upgrade is accepted here (after the remote one is open, for a
port-forward) and an SPDY one forwarded to the remote API server; from the ``101`` on,
the connection is no HTTP any more and vkubelet/kubeletapi/streams.py relays it.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Callable

from vkubelet.kubeletapi import remote as remote_api
from vkubelet.kubeletapi import streams
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.authn import WEBSOCKET_TOKEN_PROTOCOL_PREFIX
from vkubelet.kubeletapi.paths import PORT_FORWARD, KubeletRequest, RequestError
from vkubelet.kubeletapi.resolver import RemotePod

if TYPE_CHECKING:
    from vkubelet.kubeletapi.handler import KubeletRequestHandler
    from vkubelet.kubeletapi.server import KubeletApi

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")


def serve_stream(handler: KubeletRequestHandler, request: KubeletRequest) -> None:
    """Answer ``exec``, ``attach`` or ``portForward``: accept the WebSocket upgrade (or
    forward the SPDY one) and relay the stream until either side ends it."""
    app = handler.server.app
    options = None if request.endpoint == PORT_FORWARD else streams.parse_stream_options(request.endpoint, request.query)
    target = app.resolve(request)
    headers = {name: value for name, value in handler.headers.items()}
    description = f"{request.endpoint} {request.pod_key}{'/' + request.container if request.container else ''} -> {app.cluster_id}:{target}"
    remote_path = remote_target(app, request, target, options)
    if ws.is_spdy_request(headers):
        serve_spdy(handler, remote_path, description)
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
        for protocol in ws.offered_protocols(handler.headers.get_all("Sec-WebSocket-Protocol") or [])
        if not protocol.startswith(WEBSOCKET_TOKEN_PROTOCOL_PREFIX)  # a credential: never echoed
    ]
    protocol = ws.choose_protocol(offered, supported)
    try:
        # wsproto validates the handshake (method, headers, version, key) first.
        connection, accepted = ws.accept(ws.request_bytes(handler.requestline, handler.headers.items()), protocol)
    except ws.HandshakeError as exc:
        if protocol is None and str(exc) == ws.NO_PROTOCOL:
            raise RequestError(
                400,
                f"none of the offered stream protocols ({', '.join(offered) or 'none'}) is supported; "
                f"use one of {', '.join(supported)}",
            ) from None
        raise RequestError(400, str(exc)) from None
    assert protocol is not None  # accept() refused None
    open_remote = remote_opener(app, remote_path)
    remote_peer = None
    if request.endpoint == PORT_FORWARD:
        # Port-forward speaks no channel of its own for errors (the tunnel is SPDY):
        # open the remote first, so that a refusal is still an HTTP answer kubectl prints.
        try:
            remote_peer = open_remote(streams.remote_protocol_offer(protocol))
        except remote_api.RemoteError as exc:
            message, reason, code = streams.remote_stream_error(exc, cluster_id=app.cluster_id, action="port-forward")
            raise RequestError(code, message, reason) from None
    sock = handler.leave_http()
    try:
        handler.wfile.write(accepted)
    except OSError:
        if remote_peer is not None:
            remote_peer.shutdown()
        raise
    local = ws.Peer(sock, connection, protocol=protocol, name="apiserver")
    log.info("kubelet API: %s: started (%s)", description, protocol)
    token = handler.server.register_closer(lambda: shutdown_socket(sock))
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
        handler.server.unregister_closer(token)
    log.info("kubelet API: %s: ended: %s", description, outcome)


def serve_spdy(handler: KubeletRequestHandler, remote_path: str, description: str) -> None:
    """Forward the SPDY upgrade to the remote API server; after its ``101``, relay
    bytes: the SPDY session runs end to end between the client and the remote kubelet."""
    app = handler.server.app
    forwarded = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]
    forwarded += [(streams.SPDY_PROTOCOL_HEADER, value) for value in handler.headers.get_all(streams.SPDY_PROTOCOL_HEADER) or ()]
    try:
        upgraded = remote_api.open_upgrade(
            app.endpoint, handler.command, remote_path, forwarded, timeout=app.limits.remote_connect_timeout
        )
    except remote_api.RemoteError as exc:
        message, reason, code = streams.remote_stream_error(exc, cluster_id=app.cluster_id, action="stream")
        raise RequestError(code, message, reason) from None
    sock = handler.leave_http()
    head = ["HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: SPDY/3.1"]
    head += [f"{name}: {value}" for name, value in upgraded.headers]
    try:
        handler.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    except OSError:
        shutdown_socket(upgraded.sock)
        raise
    log.info("kubelet API: %s: started (SPDY/3.1)", description)
    token = handler.server.register_closer(lambda: shutdown_socket(sock))
    try:
        outcome = streams.splice(
            sock, upgraded.sock, leftover=upgraded.leftover, stopped=app.stopping.is_set, idle_timeout=app.limits.stream_idle_timeout
        )
    finally:
        handler.server.unregister_closer(token)
    log.info("kubelet API: %s: ended: %s", description, outcome)


def remote_target(app: KubeletApi, request: KubeletRequest, target: RemotePod, options: streams.StreamOptions | None) -> str:
    query = streams.remote_query(request.endpoint, request.container, options, streams.parse_ports(request.query))
    return remote_api.pod_path(app.endpoint, streams.remote_subresource(request.endpoint), target.namespace, target.name, query)


def remote_opener(app: KubeletApi, target_path: str) -> Callable[[list[str]], ws.Peer]:
    def open_remote(offer: list[str]) -> ws.Peer:
        return remote_api.open_websocket(
            app.endpoint, target_path, offer, timeout=app.limits.remote_connect_timeout, name="remote apiserver"
        )

    return open_remote


def shutdown_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
