"""exec/attach/port-forward: options, protocol choices, error mapping, and the relays
themselves over real sockets (socket pairs stand in for the two TCP connections; the test
plays the local apiserver on one - a wsproto client - and the remote apiserver on the
other - a wsproto server)."""

import json
import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, Request

from certs import pki
from vkubelet.kubeletapi import streams
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.paths import ATTACH, EXEC, PORT_FORWARD, RequestError, parse_request_path
from vkubelet.kubeletapi.remote import RemoteError


# --- options ----------------------------------------------------------------------------------
def _options(endpoint, path_query):
    request = parse_request_path(f"/{endpoint}/demo/web/app?{path_query}")
    return streams.parse_stream_options(endpoint, request.query)


def test_exec_options_as_the_apiserver_sends_them():
    options = _options(EXEC, "command=sh&command=-c&command=exit+3&input=1&output=1&error=1")
    assert options == streams.StreamOptions(stdin=True, stdout=True, stderr=True, tty=False, command=("sh", "-c", "exit 3"))


def test_tty_drops_stderr_like_the_kubelet():
    options = _options(EXEC, "command=sh&input=1&output=1&error=1&tty=1")
    assert (options.tty, options.stderr) == (True, False)


def test_attach_takes_no_command():
    assert _options(ATTACH, "output=1").command == ()
    with pytest.raises(RequestError, match="does not take a command"):
        _options(ATTACH, "output=1&command=ls")


@pytest.mark.parametrize("query, fragment", [("command=ls", "at least 1 of stdin"), ("output=1", "specify a command")])
def test_incomplete_exec_requests_are_400(query, fragment):
    with pytest.raises(RequestError, match=fragment) as info:
        _options(EXEC, query)
    assert info.value.status == 400


def test_remote_offer_starts_with_the_local_protocol():
    assert streams.remote_protocol_offer(streams.V5) == ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    assert streams.remote_protocol_offer(streams.V4) == ["v4.channel.k8s.io"]
    # Port-forward: the two ends must speak the same protocol.
    assert streams.remote_protocol_offer(streams.PORT_FORWARD_TUNNEL) == ["SPDY/3.1+portforward.k8s.io"]


def test_remote_queries_use_the_apiservers_parameter_names():
    options = streams.StreamOptions(stdin=True, stdout=True, stderr=False, tty=True, command=("sh", "-c", "ls"))
    assert streams.remote_query(EXEC, "app", options) == [
        ("container", "app"), ("stdin", "true"), ("stdout", "true"), ("tty", "true"),
        ("command", "sh"), ("command", "-c"), ("command", "ls"),
    ]
    request = parse_request_path("/portForward/demo/web?port=8080&port=9090")
    assert streams.remote_query(PORT_FORWARD, "", None, streams.parse_ports(request.query)) == [("ports", "8080"), ("ports", "9090")]
    assert streams.remote_subresource(PORT_FORWARD) == "portforward"


def test_bad_ports_are_400():
    with pytest.raises(RequestError, match="port='http'") as info:
        streams.parse_ports({"port": ["http"]})
    assert info.value.status == 400


@pytest.mark.parametrize(
    "payload, from_protocol, to_protocol, expected",
    [
        (b"\x00ls\n", streams.V5, streams.V4, b"\x00ls\n"),
        (b"\x04{\"Width\":80,\"Height\":24}", streams.V5, streams.V5, b"\x04{\"Width\":80,\"Height\":24}"),
        (b"\xff\x00", streams.V5, streams.V5, b"\xff\x00"),
        (b"\xff\x00", streams.V5, streams.V4, None),
        (b"", streams.V5, streams.V5, None),
        # A tunnelled SPDY session is opaque: everything passes.
        (b"\xff\x00", streams.PORT_FORWARD_TUNNEL, streams.PORT_FORWARD_TUNNEL, b"\xff\x00"),
        (b"", streams.PORT_FORWARD_TUNNEL, streams.PORT_FORWARD_TUNNEL, b""),
    ],
)
def test_forwarding_rules(payload, from_protocol, to_protocol, expected):
    assert streams.forward_payload(payload, from_protocol=from_protocol, to_protocol=to_protocol) == expected


def test_status_payload_is_an_error_channel_status():
    payload = streams.status_payload("no such container", reason="BadRequest", code=400)
    assert payload[0] == streams.ERROR
    status = json.loads(payload[1:])
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "no such container",
        "reason": "BadRequest",
        "code": 400,
    }


# --- remote errors ------------------------------------------------------------------------
def test_remote_handshake_refusal_keeps_the_remote_status():
    exc = RemoteError("container nope is not valid for pod web", status=400, reason="BadRequest")
    assert streams.remote_stream_error(exc, cluster_id="r1") == ("container nope is not valid for pod web", "BadRequest", 400)


def test_remote_forbidden_is_our_problem_not_the_users():
    message, _reason, code = streams.remote_stream_error(RemoteError("denied", status=403), cluster_id="r1", action="port-forward")
    assert code == 500 and "may not port-forward in remote cluster r1: denied" in message


def test_unreachable_remote():
    message, reason, code = streams.remote_stream_error(RemoteError("cannot connect to 127.0.0.1:1: Connection refused"), cluster_id="r1")
    assert (reason, code) == ("ServiceUnavailable", 503)
    assert message.startswith("remote cluster r1 is unreachable: cannot connect")


# --- the WebSocket relay over real sockets -----------------------------------------------------
class End:
    """A wsproto endpoint the test drives on one socket of a pair."""

    def __init__(self, sock, connection):
        self.sock = sock
        self.connection = connection
        self.events = []

    def send(self, event):
        self.sock.sendall(self.connection.send(event))

    def read(self):
        """The next event (None at EOF)."""
        while not self.events:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.connection.receive_data(data)
            self.events += list(self.connection.events())
        return self.events.pop(0)


def _tls_pair():
    """A socket pair with TLS on top (ours the client, theirs the server), as the relay's
    hop to the remote apiserver is."""
    ours, theirs = socket.socketpair()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pair = pki.issue_serving_cert(pki.generate_ca(), ip_addresses=["127.0.0.1"])
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        server.load_cert_chain(cert, key)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    accepted = {}
    thread = threading.Thread(target=lambda: accepted.update(sock=server.wrap_socket(theirs, server_side=True)), daemon=True)
    thread.start()
    ours = client.wrap_socket(ours)
    thread.join(5)
    return ours, accepted["sock"]


def _hop(protocol, *, local, tls=False):
    """(the Peer the relay uses, the End the test drives) over a handshaken socket pair."""
    ours, theirs = _tls_pair() if tls else socket.socketpair()
    theirs.settimeout(5)
    client = WSConnection(ConnectionType.CLIENT)
    if local:  # the test is the apiserver (client), the relay the server
        theirs.sendall(client.send(Request(host="h", target="/exec", subprotocols=[protocol])))
        connection, response = ws.accept(ours.recv(65536), protocol)
        ours.sendall(response)
        client.receive_data(theirs.recv(65536))
        assert isinstance(next(client.events()), AcceptConnection)
        return ws.Peer(ours, connection, protocol=protocol, name="apiserver"), End(theirs, client)
    server = WSConnection(ConnectionType.SERVER)
    done = threading.Event()

    def remote():
        server.receive_data(theirs.recv(65536))
        next(server.events())
        theirs.sendall(server.send(AcceptConnection(subprotocol=protocol)))
        done.set()

    threading.Thread(target=remote, daemon=True).start()
    connection, accepted = ws.client_handshake(ours, host="h", target="/x", protocols=[protocol], headers=[])
    done.wait(5)
    ours.settimeout(None)
    return ws.Peer(ours, connection, protocol=accepted, name="remote apiserver"), End(theirs, server)


class Relay:
    def __init__(self, local_protocol=streams.V5, remote_protocol=streams.V5, idle_timeout=0.0, *, tls=False, start=True):
        local, self.apiserver = _hop(local_protocol, local=True)
        remote, self.remote = _hop(remote_protocol, local=False, tls=tls)
        self.outcome = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(local, remote, idle_timeout), daemon=True)
        if start:
            self.thread.start()

    def _run(self, local, remote, idle_timeout):
        self.outcome = streams.relay(local, remote, stopped=self.stop.is_set, idle_timeout=idle_timeout)

    def join(self):
        self.thread.join(5)
        assert not self.thread.is_alive()
        return self.outcome


def test_messages_pass_untouched_both_ways_and_the_remote_close_ends_it():
    relay = Relay()
    relay.apiserver.send(BytesMessage(b"\x00echo hi\n"))
    assert relay.remote.read().data == b"\x00echo hi\n"
    relay.remote.send(BytesMessage(b"\x01hi\n"))
    relay.remote.send(BytesMessage(b'\x03{"metadata":{},"status":"Success"}'))
    relay.remote.send(CloseConnection(code=1000))
    assert relay.apiserver.read().data == b"\x01hi\n"
    assert relay.apiserver.read().data == b'\x03{"metadata":{},"status":"Success"}'
    close = relay.apiserver.read()
    assert isinstance(close, CloseConnection) and close.code == 1000
    assert "remote apiserver closed the stream (1000)" in relay.join()
    # The remote got the closing handshake's answer.
    assert isinstance(relay.remote.read(), CloseConnection)


STATUS = b'\x03{"metadata":{},"status":"Success"}'


def _read_through_close(end):
    """(data messages, the close event) as the local apiserver receives them."""
    data = []
    while True:
        event = end.read()
        if not isinstance(event, BytesMessage):
            return data, event
        data.append(event.data)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_remote_hanging_up_right_after_its_close_frame_still_ends_the_stream_normally(tls):
    # What the remote apiserver does at the end of every exec (x/net/websocket's Close:
    # the close frame, then the TCP connection closed at once): our answer to its close
    # cannot be written, and kubectl must still get the 1000 (any other code it reports as
    # "next reader: websocket: close 1001 (going away)").
    relay = Relay(tls=tls, start=False)
    relay.remote.send(BytesMessage(b"\x01got:hello\n"))
    relay.remote.send(BytesMessage(STATUS))
    relay.remote.send(CloseConnection(code=1000))
    relay.remote.sock.close()
    relay.thread.start()
    data, close = _read_through_close(relay.apiserver)
    assert data == [b"\x01got:hello\n", STATUS]
    assert isinstance(close, CloseConnection) and close.code == ws.CLOSE_NORMAL
    assert relay.join() == "remote apiserver closed the stream (1000)"


def test_a_failed_write_to_the_remote_does_not_lose_what_it_sent_before():
    # kubectl's stdin close-stream message crosses the remote's Status, close and hang-up:
    # the write fails (the remote is gone) but all the remote sent still reaches kubectl.
    relay = Relay(start=False)
    relay.remote.send(BytesMessage(STATUS))
    relay.remote.send(CloseConnection(code=1000))
    relay.remote.sock.close()
    relay.apiserver.send(BytesMessage(b"\xff\x00"))
    time.sleep(0.1)  # both hops readable before the relay looks: the local one goes first
    relay.thread.start()
    data, close = _read_through_close(relay.apiserver)
    assert data == [STATUS]
    assert isinstance(close, CloseConnection) and close.code == ws.CLOSE_NORMAL
    assert relay.join() == "remote apiserver closed the stream (1000)"


def test_a_remote_dropping_the_connection_without_a_close_frame_is_a_cut_stream():
    relay = Relay(tls=True)
    relay.remote.send(BytesMessage(b"\x01partial"))
    relay.remote.sock.close()  # no close frame, no TLS close_notify
    data, close = _read_through_close(relay.apiserver)
    assert data == [b"\x01partial"]
    assert isinstance(close, CloseConnection) and close.code == ws.CLOSE_GOING_AWAY
    assert relay.join().startswith("remote apiserver closed the connection")


def test_a_peer_that_cannot_be_written_is_still_read_to_its_close():
    peer, end = _hop(streams.V5, local=False)
    end.send(BytesMessage(b"\x01last words"))
    end.sock.close()
    peer.send(ws.Message(b"\x00into the void"))  # the socket pair is broken: EPIPE
    assert isinstance(peer.write_error, OSError)
    peer.send(ws.Message(b"\x00again"))  # dropped, not raised
    messages = []
    for _ in range(3):  # the data, then the EOF (one or two reads)
        messages += peer.receive()
        if peer.closed:
            break
    assert [message.data for message in messages] == [b"\x01last words"]
    assert peer.closed and peer.close_code == ws.CLOSE_ABNORMAL


def test_large_and_fragmented_messages_arrive_whole():
    relay = Relay()
    big = b"\x01" + bytes(i % 256 for i in range(300_000))
    relay.remote.send(BytesMessage(big[:1000], message_finished=False))
    relay.remote.send(BytesMessage(big[1000:], message_finished=True))
    received = b""
    while True:
        event = relay.apiserver.read()
        received += event.data
        if event.message_finished:
            break
    assert received == big
    relay.remote.send(CloseConnection(code=1000))
    relay.join()


def test_pings_are_answered_on_each_hop_not_forwarded():
    relay = Relay()
    relay.apiserver.send(Ping(b"hb"))
    assert relay.apiserver.read() == Pong(b"hb")
    relay.remote.send(Ping(b"r"))
    assert relay.remote.read() == Pong(b"r")
    relay.apiserver.send(BytesMessage(b"\x00x"))
    assert relay.remote.read().data == b"\x00x"  # no ping in between
    relay.apiserver.send(CloseConnection(code=1000))
    relay.join()


def test_stdin_close_reaches_a_v5_remote_but_not_a_v4_one():
    relay = Relay(remote_protocol=streams.V4)
    relay.apiserver.send(BytesMessage(b"\xff\x00"))
    relay.apiserver.send(BytesMessage(b"\x00after"))
    assert relay.remote.read().data == b"\x00after"
    relay.apiserver.send(CloseConnection(code=1000))
    relay.join()
    v5 = Relay()
    v5.apiserver.send(BytesMessage(b"\xff\x00"))
    assert v5.remote.read().data == b"\xff\x00"
    v5.apiserver.send(CloseConnection(code=1000))
    v5.join()


def test_a_tunnelled_port_forward_passes_opaque_bytes():
    relay = Relay(streams.PORT_FORWARD_TUNNEL, streams.PORT_FORWARD_TUNNEL)
    spdy_bytes = bytes([0x80, 0x03, 0x00, 0x01, 0xFF]) + b"\x00" * 20
    relay.apiserver.send(BytesMessage(spdy_bytes))
    assert relay.remote.read().data == spdy_bytes
    relay.remote.send(BytesMessage(b"\xff"))
    assert relay.apiserver.read().data == b"\xff"
    relay.apiserver.send(CloseConnection(code=1000))
    relay.join()


def test_client_hanging_up_closes_the_remote_side():
    relay = Relay()
    relay.apiserver.sock.close()
    assert isinstance(relay.remote.read(), CloseConnection)
    assert "apiserver closed the connection" in relay.join()


def test_a_protocol_violation_closes_both_sides():
    relay = Relay()
    # An unmasked frame from a client is forbidden (RFC 6455 5.1).
    relay.apiserver.sock.sendall(bytes([0x82, 0x02]) + b"\x00x")
    for end in (relay.apiserver, relay.remote):
        close = end.read()
        assert isinstance(close, CloseConnection) and close.code == ws.CLOSE_PROTOCOL_ERROR
    relay.join()


def test_stopping_closes_both_sides_as_going_away():
    relay = Relay()
    relay.stop.set()
    for end in (relay.apiserver, relay.remote):
        assert end.read().code == ws.CLOSE_GOING_AWAY
    assert relay.join() == "stopped"


def test_an_idle_stream_is_closed_and_traffic_keeps_it_open():
    relay = Relay(idle_timeout=0.6)
    for _ in range(3):  # traffic every 0.3s: not idle
        time.sleep(0.3)
        relay.apiserver.send(BytesMessage(b"\x00k"))
        assert relay.remote.read().data == b"\x00k"
    assert relay.thread.is_alive()
    for end in (relay.apiserver, relay.remote):
        close = end.read()
        assert isinstance(close, CloseConnection) and "idle" in close.reason
    assert relay.join() == "closed: idle for 0.6s"


def test_serve_stream_reports_a_refused_remote_on_the_error_channel():
    local, apiserver = _hop(streams.V5, local=True)

    def refuse(_offer):
        raise RemoteError('pods "web" not found', status=404, reason="NotFound")

    outcome = streams.serve_stream(local, refuse, cluster_id="r1", description="t", stopped=lambda: False)
    assert 'pods "web" not found' in outcome
    error = apiserver.read()
    assert error.data[0] == streams.ERROR
    assert json.loads(error.data[1:])["message"] == 'pods "web" not found'
    assert json.loads(error.data[1:])["code"] == 404
    assert isinstance(apiserver.read(), CloseConnection)


# --- the SPDY relay -----------------------------------------------------------------------------
def test_splice_relays_bytes_both_ways_with_the_leftover_first():
    apiserver, local = socket.socketpair()
    remote_far, remote = socket.socketpair()
    for sock in (apiserver, remote_far):
        sock.settimeout(5)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(r=streams.splice(local, remote, leftover=b"early")), daemon=True)
    thread.start()
    assert apiserver.recv(100) == b"early"
    apiserver.sendall(b"\x80\x03\x00\x01spdy-syn")
    assert remote_far.recv(100) == b"\x80\x03\x00\x01spdy-syn"
    remote_far.sendall(b"reply")
    assert apiserver.recv(100) == b"reply"
    remote_far.close()
    assert apiserver.recv(100) == b""  # the other side is closed too
    thread.join(5)
    assert outcome["r"] == "remote apiserver closed the connection"


def test_splice_still_passes_on_what_a_side_sent_before_it_went_away():
    # kubectl's last SPDY frames cross the remote's last frames and hang-up: the write to
    # the remote fails, and the remote's frames must still reach kubectl.
    apiserver, local = socket.socketpair()
    remote_far, remote = socket.socketpair()
    apiserver.settimeout(5)
    remote_far.sendall(b"last frames")
    remote_far.close()
    apiserver.sendall(b"late")  # both sides readable before the splice looks: local first
    outcome = streams.splice(local, remote)
    assert outcome == "remote apiserver closed the connection"
    assert apiserver.recv(100) == b"last frames"
    assert apiserver.recv(100) == b""


def test_an_idle_splice_ends():
    apiserver, local = socket.socketpair()
    remote_far, remote = socket.socketpair()
    started = time.monotonic()
    assert streams.splice(local, remote, idle_timeout=0.3) == "closed: idle for 0.3s"
    assert time.monotonic() - started < 3
