"""The uplinks against the real relay (relay/) over loopback.

What stands between the vkubelet and the relay in a cluster - the provider's API server
and the relay pod's kubelet, which turn a ``pods/portforward`` WebSocket into a TCP
connection to 127.0.0.1:<uplink port> in the pod - is played here by :class:`PortForwarder`,
a loopback WebSocket server speaking the kubelet's ``v4.channel.k8s.io`` port-forward
framing (the port number first on each channel, then channel-prefixed data). The real
path through a real API server and kubelet is proven on the real-node tier
(tests/realnode/test_charts_as_pods.py).
"""

from __future__ import annotations

import select
import socket
import struct
import threading

import pytest
from kubernetes import client

from relay.server import Relay, RelaySettings
from support.waiting import wait_for
from vkubelet.home_api.discovery import Discovery
from vkubelet.home_api.settings import HomeAPISettings
from vkubelet.home_api.uplinks import GO, V4, ChannelReader, UplinkError, Uplinks, backoff, data_message, home_address
from vkubelet.kubeletapi import remote
from vkubelet.kubeletapi import websocket as ws


# --- pure ---------------------------------------------------------------------------------------
def test_channel_reader_skips_each_channels_port_number_then_splits_data_and_errors():
    reader = ChannelReader()
    port = struct.pack("<H", 6444)
    assert reader.feed(b"\x00" + port) == (b"", b"")
    assert reader.feed(b"\x01" + port) == (b"", b"")
    assert reader.feed(b"\x00" + GO + b"hello") == (GO + b"hello", b"")
    assert reader.feed(b"\x01connection refused") == (b"", b"connection refused")
    assert reader.feed(b"") == (b"", b"")
    with pytest.raises(UplinkError, match="channel 2"):
        reader.feed(b"\x02x")


def test_channel_reader_port_number_split_across_messages():
    reader = ChannelReader()
    assert reader.feed(b"\x00\x2c") == (b"", b"")
    assert reader.feed(b"\x00\x19data") == (b"data", b"")


def test_data_message_and_home_address_and_backoff():
    assert data_message(b"abc") == ws.Message(b"\x00abc")
    assert home_address("https://10.96.0.1:443") == ("10.96.0.1", 443)
    assert home_address("https://kubernetes.default.svc") == ("kubernetes.default.svc", 443)
    assert home_address("https://[::1]:6443") == ("::1", 6443)
    with pytest.raises(ValueError, match="no host"):
        home_address("/just/a/path")
    assert [round(d := backoff(x), 1) for x in (0, 1, 2, 32, 60)] == [1.0, 2.0, 4.0, 60.0, 60.0] and d == 60.0


# --- over loopback ----------------------------------------------------------------------------
def _read_head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        head += chunk
    return head


class PortForwarder:
    """The kubelet's end of ``pods/<relay>/portforward`` for one port: accepts the WebSocket,
    dials ``target`` (the relay's uplink port) and relays channel 0 to and from it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        head = _read_head(sock)
        self.requests.append(head)
        connection, answer = ws.accept(head, V4)
        sock.sendall(answer)
        peer = ws.Peer(sock, connection, protocol=V4, name="kubelet")
        pod_side = socket.create_connection(self.target)
        port = struct.pack("<H", self.target[1])
        peer.send(ws.Message(b"\x00" + port))
        peer.send(ws.Message(b"\x01" + port))
        try:
            while True:
                readable, _, _ = select.select([peer.sock, pod_side], [], [], 1)
                if peer.sock in readable:
                    for message in peer.receive():
                        assert message.data[:1] == b"\x00"
                        pod_side.sendall(message.data[1:])
                    if peer.closed:
                        return
                if pod_side in readable:
                    data = pod_side.recv(65536)
                    if not data:
                        return
                    peer.send(ws.Message(b"\x00" + data))
        finally:
            pod_side.close()
            peer.send_close(ws.CLOSE_NORMAL)
            peer.shutdown()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close alone would not
        except OSError:
            pass
        self.listener.close()


class EchoHome:
    """A TCP server standing for the home API server: echoes what it gets, upper-cased."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(sock,), daemon=True).start()

    @staticmethod
    def _echo(sock: socket.socket) -> None:
        with sock:
            while data := sock.recv(65536):
                sock.sendall(data.upper())


@pytest.fixture
def path():
    relay = Relay(RelaySettings(serve=("127.0.0.1", 0), uplink=("127.0.0.1", 0), pair_timeout=5))
    relay.start()
    forwarder = PortForwarder(("127.0.0.1", relay.uplink_port))
    home = EchoHome()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{forwarder.port}"
    configuration.api_key = {"authorization": "Bearer consumer-token"}
    discovery = Discovery(None, "kube-offload-tenant-local")  # type: ignore[arg-type]  # not refreshed here
    uplinks = Uplinks(HomeAPISettings(uplinks=2, max_connections=3), discovery, remote.endpoint_from(configuration),
                      home.address)
    yield relay, forwarder, home, uplinks
    uplinks._stop.set()
    relay.stop()
    forwarder.close()


def _exchange(relay: Relay, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", relay.serve_port), timeout=10) as pod:
        pod.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = pod.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_a_pod_reaches_home_through_an_uplink_and_the_uplink_is_replaced(path):
    relay, forwarder, home, uplinks = path
    uplinks.top_up(("relay-0",))
    assert wait_for(lambda: relay.pool.idle() == 2, timeout=10)
    # The port-forward asked for the relay's uplink port on the relay pod, with our credential.
    request = forwarder.requests[0].decode()
    assert request.startswith("GET /api/v1/namespaces/kube-offload-tenant-local/pods/relay-0/portforward?ports=6444 ")
    assert "Bearer consumer-token" in request and V4 in request

    payload = bytes(range(256)) * 400  # more than one port-forward chunk
    assert _exchange(relay, payload) == payload.upper()
    assert home.connections == 1
    # The used uplink is replaced at once (top_up is what the loop calls when woken).
    uplinks.top_up(("relay-0",))
    assert wait_for(lambda: relay.pool.idle() == 2, timeout=10)


def test_the_cap_counts_idle_and_active_uplinks(path):
    relay, forwarder, home, uplinks = path
    uplinks.top_up(("relay-0", "relay-1"))  # 2 each wanted, 3 at most in all
    assert wait_for(lambda: relay.pool.idle() == 3, timeout=10)
    assert uplinks._open_count() == 3


def test_an_uplink_that_cannot_be_opened_backs_off(path):
    relay, forwarder, home, uplinks = path
    forwarder.close()  # the provider's API server is unreachable
    uplinks.top_up(("relay-0",))
    assert wait_for(lambda: uplinks._pods["relay-0"].delay > 0 and uplinks._pods["relay-0"].idle == 0, timeout=10)
    uplinks.top_up(("relay-0",))
    assert uplinks._pods["relay-0"].idle == 0  # not retried before the backoff ends


def test_an_uplink_that_fails_unexpectedly_backs_off_too(path, monkeypatch):
    """An error none of the known kinds (here from opening the port-forward): the thread
    must not die and be replaced at once, a tight loop; it backs off as any failure."""
    relay, forwarder, home, uplinks = path
    calls = []

    def broken(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("an answer no one foresaw")

    monkeypatch.setattr(remote, "open_websocket", broken)
    uplinks.top_up(("relay-0",))
    assert wait_for(lambda: uplinks._pods["relay-0"].delay > 0 and uplinks._pods["relay-0"].idle == 0, timeout=10)
    uplinks.top_up(("relay-0",))
    assert uplinks._pods["relay-0"].idle == 0 and len(calls) == 2  # the two first uplinks, no more
