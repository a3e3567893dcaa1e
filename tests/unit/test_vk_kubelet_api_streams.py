"""exec/attach: options, protocol choices, error mapping, and the relay itself over real
sockets (socket pairs stand in for the two TCP connections; the test plays the local
apiserver on one and the remote apiserver on the other, byte for byte)."""

import json
import socket
import threading

import pytest
from websocket import WebSocketBadStatusException

from vkubelet.kubeletapi import streams
from vkubelet.kubeletapi import websocket as ws
from vkubelet.kubeletapi.paths import ATTACH, EXEC, RequestError, parse_request_path


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
    assert streams.remote_protocol_offer(streams.V5) == "v5.channel.k8s.io,v4.channel.k8s.io"
    assert streams.remote_protocol_offer(streams.V4) == "v4.channel.k8s.io"


@pytest.mark.parametrize(
    "payload, to_protocol, expected",
    [
        (b"\x00ls\n", streams.V4, b"\x00ls\n"),
        (b"\x04{\"Width\":80,\"Height\":24}", streams.V5, b"\x04{\"Width\":80,\"Height\":24}"),
        (b"\xff\x00", streams.V5, b"\xff\x00"),
        (b"\xff\x00", streams.V4, None),
        (b"", streams.V5, None),
    ],
)
def test_forwarding_rules(payload, to_protocol, expected):
    assert streams.forward_payload(payload, to_protocol=to_protocol) == expected


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
def _client_error(cause):
    """What kubernetes.stream raises: ApiException(status=0) with the cause as context."""
    from kubernetes.client.rest import ApiException

    try:
        try:
            raise cause
        except Exception as exc:
            raise ApiException(status=0, reason=str(exc))
    except ApiException as wrapped:
        return wrapped


def test_remote_handshake_refusal_keeps_the_remote_status():
    body = b'{"kind":"Status","status":"Failure","message":"container nope is not valid for pod web","reason":"BadRequest","code":400}'
    exc = _client_error(WebSocketBadStatusException("Handshake status %d %s", 400, "Bad Request", {}, body))
    assert streams.remote_stream_error(exc, cluster_id="r1") == ("container nope is not valid for pod web", "BadRequest", 400)


def test_remote_forbidden_is_our_problem_not_the_users():
    exc = _client_error(WebSocketBadStatusException("Handshake status %d %s", 403, "Forbidden", {}, b'{"message":"denied"}'))
    message, _reason, code = streams.remote_stream_error(exc, cluster_id="r1")
    assert code == 500 and "may not exec in remote cluster r1: denied" in message


def test_unreachable_remote():
    exc = _client_error(ConnectionRefusedError(111, "Connection refused"))
    message, reason, code = streams.remote_stream_error(exc, cluster_id="r1")
    assert (reason, code) == ("ServiceUnavailable", 503)
    assert message.startswith("remote cluster r1 is unreachable")


# --- the relay over real sockets -------------------------------------------------------------
class Relay:
    """local_peer <-> remote_peer, relayed in a thread; ``apiserver`` and ``remote`` are
    the far ends the test drives (a WebSocket client and a WebSocket server)."""

    def __init__(self, local_protocol=streams.V5, remote_protocol=streams.V5):
        self.apiserver, local_end = socket.socketpair()
        self.remote, remote_end = socket.socketpair()
        for sock in (self.apiserver, self.remote):
            sock.settimeout(5)
        local = streams.Peer(local_end, server=True, protocol=local_protocol, name="apiserver")
        remote = streams.Peer(remote_end, server=False, protocol=remote_protocol, name="remote apiserver")
        self.outcome = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(local, remote), daemon=True)
        self.thread.start()
        self._from_local = ws.FrameParser(expect_masked=False)  # we read server frames from the relay
        self._from_remote = ws.FrameParser(expect_masked=True)  # the relay is a client to "remote"

    def _run(self, local, remote):
        self.outcome = streams.relay(local, remote, stopped=self.stop.is_set)

    def apiserver_sends(self, opcode, payload):
        self.apiserver.sendall(ws.encode_frame(opcode, payload, mask_key=ws.new_mask_key()))

    def remote_sends(self, opcode, payload):
        self.remote.sendall(ws.encode_frame(opcode, payload))

    @staticmethod
    def _read(sock, parser):
        while True:
            frame = parser.next_frame()
            if frame is not None:
                return frame
            data = sock.recv(65536)
            if not data:
                return None
            parser.feed(data)

    def apiserver_reads(self):
        return self._read(self.apiserver, self._from_local)

    def remote_reads(self):
        return self._read(self.remote, self._from_remote)

    def join(self):
        self.thread.join(5)
        assert not self.thread.is_alive()
        return self.outcome


def test_messages_pass_untouched_both_ways_and_the_remote_close_ends_it():
    relay = Relay()
    relay.apiserver_sends(ws.OP_BINARY, b"\x00echo hi\n")
    assert relay.remote_reads() == ws.Frame(ws.OP_BINARY, b"\x00echo hi\n")
    relay.remote_sends(ws.OP_BINARY, b"\x01hi\n")
    relay.remote_sends(ws.OP_BINARY, b'\x03{"metadata":{},"status":"Success"}')
    relay.remote_sends(ws.OP_CLOSE, ws.encode_close_payload(1000))
    assert relay.apiserver_reads() == ws.Frame(ws.OP_BINARY, b"\x01hi\n")
    assert relay.apiserver_reads() == ws.Frame(ws.OP_BINARY, b'\x03{"metadata":{},"status":"Success"}')
    close = relay.apiserver_reads()
    assert close.opcode == ws.OP_CLOSE and ws.decode_close_payload(close.payload)[0] == 1000
    assert "remote apiserver closed the stream (1000)" in relay.join()
    # The remote got the closing handshake's answer.
    assert relay.remote_reads().opcode == ws.OP_CLOSE


def test_large_and_fragmented_messages_arrive_whole():
    relay = Relay()
    big = b"\x01" + bytes(i % 256 for i in range(300_000))
    relay.remote.sendall(ws.encode_frame(ws.OP_BINARY, big[:1000], fin=False) + ws.encode_frame(ws.OP_CONTINUATION, big[1000:]))
    assert relay.apiserver_reads() == ws.Frame(ws.OP_BINARY, big)
    relay.remote_sends(ws.OP_CLOSE, b"")
    relay.join()


def test_pings_are_answered_on_each_hop_not_forwarded():
    relay = Relay()
    relay.apiserver_sends(ws.OP_PING, b"hb")
    assert relay.apiserver_reads() == ws.Frame(ws.OP_PONG, b"hb")
    relay.remote_sends(ws.OP_PING, b"r")
    assert relay.remote_reads() == ws.Frame(ws.OP_PONG, b"r")
    relay.apiserver_sends(ws.OP_BINARY, b"\x00x")
    assert relay.remote_reads() == ws.Frame(ws.OP_BINARY, b"\x00x")  # no ping in between
    relay.apiserver_sends(ws.OP_CLOSE, ws.encode_close_payload(1000))
    relay.join()


def test_stdin_close_reaches_a_v5_remote_but_not_a_v4_one():
    relay = Relay(remote_protocol=streams.V4)
    relay.apiserver_sends(ws.OP_BINARY, b"\xff\x00")
    relay.apiserver_sends(ws.OP_BINARY, b"\x00after")
    assert relay.remote_reads() == ws.Frame(ws.OP_BINARY, b"\x00after")
    relay.apiserver_sends(ws.OP_CLOSE, b"")
    relay.join()
    v5 = Relay()
    v5.apiserver_sends(ws.OP_BINARY, b"\xff\x00")
    assert v5.remote_reads() == ws.Frame(ws.OP_BINARY, b"\xff\x00")
    v5.apiserver_sends(ws.OP_CLOSE, b"")
    v5.join()


def test_client_hanging_up_closes_the_remote_side():
    relay = Relay()
    relay.apiserver.close()
    frame = relay.remote_reads()
    assert frame.opcode == ws.OP_CLOSE
    assert relay.remote_reads() is None  # and the connection is gone
    assert "apiserver closed the connection" in relay.join()


def test_a_protocol_violation_closes_both_sides_with_1002():
    relay = Relay()
    relay.apiserver.sendall(ws.encode_frame(ws.OP_BINARY, b"\x00x"))  # unmasked: forbidden for a client
    for read in (relay.apiserver_reads, relay.remote_reads):
        frame = read()
        assert frame.opcode == ws.OP_CLOSE
        assert ws.decode_close_payload(frame.payload)[0] == ws.CLOSE_PROTOCOL_ERROR
    assert relay.join().startswith("protocol error")


def test_stopping_closes_both_sides_as_going_away():
    relay = Relay()
    relay.stop.set()
    for read in (relay.apiserver_reads, relay.remote_reads):
        assert ws.decode_close_payload(read().payload)[0] == ws.CLOSE_GOING_AWAY
    assert relay.join() == "stopped"


def test_serve_stream_reports_a_refused_remote_on_the_error_channel():
    apiserver, local_end = socket.socketpair()
    apiserver.settimeout(5)

    def refuse(_offer):
        raise _client_error(WebSocketBadStatusException("Handshake status %d %s", 404, "Not Found", {}, b'{"message":"pods \\"web\\" not found","reason":"NotFound"}'))

    outcome = streams.serve_stream(local_end, streams.V5, refuse, cluster_id="r1", description="t", stopped=lambda: False)
    assert "pods \"web\" not found" in outcome
    parser = ws.FrameParser(expect_masked=False)
    data = b""
    while True:
        chunk = apiserver.recv(65536)
        if not chunk:
            break
        data += chunk
    parser.feed(data)
    error = parser.next_frame()
    assert error.payload[0] == streams.ERROR
    assert json.loads(error.payload[1:])["message"] == 'pods "web" not found'
    assert json.loads(error.payload[1:])["code"] == 404
    assert parser.next_frame().opcode == ws.OP_CLOSE
