"""The kubelet API's WebSocket layer (vkubelet/kubeletapi/websocket.py): the header
helpers that route a request, and wsproto doing the handshake and framing on both hops,
over real socket pairs."""

import os
import socket
import threading

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, Request, TextMessage

from vkubelet.kubeletapi import websocket as ws

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 section 1.3


def _request_head(method="GET", **overrides):
    headers = {
        "Host": "127.0.0.1",
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-Websocket-Version": "13",
        "Sec-Websocket-Key": KEY,
        "Sec-Websocket-Protocol": "v5.channel.k8s.io, v4.channel.k8s.io",
    }
    headers.update(overrides)
    return ws.request_bytes(f"{method} /exec/ns/pod/c?command=ls HTTP/1.1", [(k, v) for k, v in headers.items() if v is not None])


def test_accept_answers_the_rfc_example_with_the_chosen_protocol():
    _connection, response = ws.accept(_request_head(), "v5.channel.k8s.io")
    head = response.decode().lower()
    assert head.startswith("http/1.1 101")
    assert "sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=" in head
    assert "sec-websocket-protocol: v5.channel.k8s.io" in head


@pytest.mark.parametrize(
    "method, overrides",
    [
        ("POST", {}),
        ("GET", {"Sec-Websocket-Version": "8"}),
        ("GET", {"Sec-Websocket-Key": None}),
        ("GET", {"Upgrade": "h2c"}),
    ],
)
def test_invalid_handshakes_are_refused(method, overrides):
    with pytest.raises(ws.HandshakeError) as info:
        ws.accept(_request_head(method, **overrides), "v5.channel.k8s.io")
    assert info.value.status == 400
    assert str(info.value) != ws.NO_PROTOCOL


def test_no_acceptable_protocol_is_checked_after_the_handshake():
    with pytest.raises(ws.HandshakeError, match=ws.NO_PROTOCOL):
        ws.accept(_request_head(), None)


def test_upgrade_kinds():
    websocket = {"connection": "keep-alive, Upgrade", "UPGRADE": "websocket"}
    spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    assert ws.is_websocket_request(websocket) and not ws.is_spdy_request(websocket)
    assert ws.is_spdy_request(spdy) and not ws.is_websocket_request(spdy)
    assert ws.is_upgrade_request(spdy)
    assert not ws.is_upgrade_request({"Upgrade": "websocket"})  # no Connection: Upgrade


def test_protocols_are_read_from_repeated_comma_separated_headers_in_client_order():
    assert ws.offered_protocols(["v5.channel.k8s.io, v4.channel.k8s.io", "v4.channel.k8s.io,x"]) == [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "x",
    ]
    assert ws.choose_protocol(["x", "v4.channel.k8s.io", "v5.channel.k8s.io"], ("v5.channel.k8s.io", "v4.channel.k8s.io")) == "v4.channel.k8s.io"
    assert ws.choose_protocol(["x"], ("v5.channel.k8s.io",)) is None


# --- both hops over a socket pair -------------------------------------------------------------
def _pair(max_message=ws.DEFAULT_MAX_MESSAGE):
    """(our server Peer, a raw wsproto client on the other socket)."""
    server_sock, client_sock = socket.socketpair()
    client_sock.settimeout(5)
    client = WSConnection(ConnectionType.CLIENT)
    client_sock.sendall(client.send(Request(host="h", target="/x", subprotocols=["v5.channel.k8s.io"])))
    head = server_sock.recv(65536)
    connection, response = ws.accept(head, "v5.channel.k8s.io")
    server_sock.sendall(response)
    client.receive_data(client_sock.recv(65536))
    assert isinstance(next(client.events()), AcceptConnection)
    return ws.Peer(server_sock, connection, protocol="v5.channel.k8s.io", name="apiserver", max_message=max_message), client, client_sock


def _client_events(client, sock):
    client.receive_data(sock.recv(65536))
    return list(client.events())


def test_fragmented_messages_are_reassembled_and_pings_answered():
    peer, client, sock = _pair()
    sock.sendall(client.send(BytesMessage(b"\x00he", message_finished=False)))
    sock.sendall(client.send(Ping(b"hb")))
    sock.sendall(client.send(BytesMessage(b"llo", message_finished=True)))
    messages = []
    while not messages:
        messages += peer.receive()
    assert messages == [ws.Message(b"\x00hello")]
    assert any(isinstance(e, Pong) and e.payload == b"hb" for e in _client_events(client, sock))


def test_text_messages_keep_their_kind():
    peer, client, sock = _pair()
    sock.sendall(client.send(TextMessage("AGhp")))
    messages = []
    while not messages:
        messages += peer.receive()
    assert messages == [ws.Message(b"AGhp", text=True)]
    peer.send(messages[0])
    assert [e.data for e in _client_events(client, sock)] == ["AGhp"]


def test_invalid_utf8_in_a_text_frame_is_a_protocol_error():
    peer, _client, sock = _pair()
    # A masked text frame (client to server) whose payload is not UTF-8.
    mask = os.urandom(4)
    payload = b"\xff\xfe"
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    while not peer.closed:
        assert peer.receive() == []
    assert peer.close_code == 1007  # invalid frame payload data
    frame = sock.recv(65536)  # and the client was told so: an unmasked close frame, code 1007
    assert frame[0] == 0x88 and int.from_bytes(frame[2:4], "big") == 1007


def test_oversized_messages_are_refused_with_1009():
    peer, client, sock = _pair(max_message=1000)
    threading.Thread(target=lambda: sock.sendall(client.send(BytesMessage(b"x" * 5000))), daemon=True).start()
    with pytest.raises(ws.ProtocolError) as info:
        while True:
            peer.receive()
    assert info.value.close_code == ws.CLOSE_TOO_BIG


def test_a_close_is_answered_and_reported():
    peer, client, sock = _pair()
    sock.sendall(client.send(BytesMessage(b"\x01last")) + client.send(CloseConnection(code=1000, reason="bye")))
    assert peer.receive() == [ws.Message(b"\x01last")]  # what came before the close is kept
    assert peer.closed
    assert (peer.close_code, peer.close_reason) == (1000, "bye")
    assert any(isinstance(e, CloseConnection) for e in _client_events(client, sock))


def test_eof_without_a_close_frame_is_abnormal():
    peer, _client, sock = _pair()
    sock.close()
    assert peer.receive() == [] and peer.closed
    assert peer.close_code == ws.CLOSE_ABNORMAL


def test_reserved_close_codes_are_never_sent():
    peer, client, sock = _pair()
    peer.send_close(ws.CLOSE_ABNORMAL, "gone")
    (event,) = [e for e in _client_events(client, sock) if isinstance(e, CloseConnection)]
    assert event.code == ws.CLOSE_GOING_AWAY


def test_client_handshake_reports_a_refusal_with_the_remote_body():
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    body = b'{"kind":"Status","message":"pods \\"x\\" not found","code":404}'

    def remote():
        theirs.recv(65536)
        theirs.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    threading.Thread(target=remote, daemon=True).start()
    with pytest.raises(ws.HandshakeError) as info:
        ws.client_handshake(ours, host="h", target="/x", protocols=["v5.channel.k8s.io"], headers=[("Authorization", "Bearer t")])
    assert (info.value.status, info.value.body) == (404, body)


def test_client_handshake_keeps_frames_that_came_with_the_101():
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    server = WSConnection(ConnectionType.SERVER)

    def remote():
        server.receive_data(theirs.recv(65536))
        request = next(server.events())
        assert dict(request.extra_headers)[b"authorization"] == b"Bearer t"
        # The answer and a first message in one write.
        theirs.sendall(server.send(AcceptConnection(subprotocol="v4.channel.k8s.io")) + server.send(BytesMessage(b"\x01early")))

    threading.Thread(target=remote, daemon=True).start()
    connection, protocol = ws.client_handshake(ours, host="h", target="/x", protocols=["v5.channel.k8s.io", "v4.channel.k8s.io"], headers=[("Authorization", "Bearer t")])
    assert protocol == "v4.channel.k8s.io"
    peer = ws.Peer(ours, connection, protocol=protocol, name="remote")
    assert peer.pending() == [ws.Message(b"\x01early")]

