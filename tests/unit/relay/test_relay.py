"""The relay over loopback: real sockets, no API server (relay/pairing.py, relay/server.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from relay.pairing import GO, UplinkPool, pump, uplink_open
from relay.server import Relay, RelaySettings
from support.descriptors import high_socketpair
from support.waiting import wait_for


def _pair() -> tuple[socket.socket, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    return client, accepted


def _recv_exactly(sock: socket.socket, size: int, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_uplink_open_is_false_once_the_other_end_closed():
    ours, theirs = _pair()
    assert uplink_open(ours)
    theirs.close()
    assert wait_for(lambda: not uplink_open(ours), timeout=5)


def test_take_skips_closed_uplinks_and_writes_the_go_byte_on_the_oldest_open_one():
    pool = UplinkPool()
    closed_ours, closed_theirs = _pair()
    first_ours, first_theirs = _pair()
    second_ours, second_theirs = _pair()
    for sock in (closed_ours, first_ours, second_ours):
        pool.add(sock)
    closed_theirs.close()
    time.sleep(0.1)
    taken = pool.take(timeout=1)
    assert taken is first_ours
    assert _recv_exactly(first_theirs, 1) == GO
    assert pool.dropped == 1
    assert pool.idle() == 1  # the second one still waits
    second_theirs.setblocking(False)
    with pytest.raises(BlockingIOError):
        second_theirs.recv(1)  # no go byte for an uplink not taken


def test_take_waits_for_an_uplink_then_gives_up_after_the_timeout():
    pool = UplinkPool()
    started = time.monotonic()
    assert pool.take(timeout=0.3) is None
    assert time.monotonic() - started >= 0.3
    ours, theirs = _pair()
    threading.Timer(0.2, pool.add, args=(ours,)).start()
    assert pool.take(timeout=5) is ours


def test_pump_copies_both_ways_untouched_and_closes_both_when_one_side_closes():
    a_client, a = _pair()
    b, b_client = _pair()
    result: list[tuple[int, int]] = []
    thread = threading.Thread(target=lambda: result.append(pump(a, b)))
    thread.start()
    payload = bytes(range(256)) * 1000
    a_client.sendall(payload)
    assert _recv_exactly(b_client, len(payload)) == payload
    b_client.sendall(b"answer")
    assert _recv_exactly(a_client, 6) == b"answer"
    a_client.close()
    thread.join(5)
    assert result == [(len(payload), 6)]
    assert _recv_exactly(b_client, 1) == b""  # the other side was closed too


@pytest.fixture
def relay():
    relay = Relay(RelaySettings(serve=("127.0.0.1", 0), uplink=("127.0.0.1", 0), pair_timeout=0.5))
    relay.start()
    yield relay
    relay.stop()


def test_a_pod_connection_is_paired_with_the_first_uplink_and_piped(relay):
    uplinks = [socket.create_connection(("127.0.0.1", relay.uplink_port)) for _ in range(2)]
    assert wait_for(lambda: relay.pool.idle() == 2, timeout=5)
    pod = socket.create_connection(("127.0.0.1", relay.serve_port))
    assert _recv_exactly(uplinks[0], 1) == GO
    pod.sendall(b"\x16\x03\x01 client hello")
    assert _recv_exactly(uplinks[0], 16) == b"\x16\x03\x01 client hello"
    uplinks[0].sendall(b"server hello")
    assert _recv_exactly(pod, 12) == b"server hello"
    uplinks[0].close()
    assert _recv_exactly(pod, 1) == b""  # the uplink closed: so is the pod's connection
    assert relay.pool.idle() == 1
    assert relay.metrics.connections.labels("paired")._value.get() == 1


def test_a_pod_connection_without_uplink_is_closed_after_the_pair_timeout(relay):
    pod = socket.create_connection(("127.0.0.1", relay.serve_port))
    started = time.monotonic()
    assert _recv_exactly(pod, 1, timeout=5) == b""
    assert time.monotonic() - started >= 0.4
    assert relay.metrics.connections.labels("no_uplink")._value.get() == 1


def test_an_uplink_that_closed_while_idle_is_not_used(relay):
    dead = socket.create_connection(("127.0.0.1", relay.uplink_port))
    assert wait_for(lambda: relay.pool.idle() == 1, timeout=5)
    dead.close()
    live = socket.create_connection(("127.0.0.1", relay.uplink_port))
    assert wait_for(lambda: relay.pool.idle() == 2, timeout=5)
    socket.create_connection(("127.0.0.1", relay.serve_port))
    assert _recv_exactly(live, 1) == GO


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_command_serves_readiness_and_its_counts_on_the_health_port(tmp_path):
    """`kube-offload relay` as the chart runs it (loopback here): ready once listening, with
    its connection counts on /metrics beside the process's own."""
    import re
    import subprocess
    import sys
    import urllib.request

    uplink_port = _free_port()
    log = (tmp_path / "relay.log").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "kube_offload.cli", "relay", "--serve-bind", "127.0.0.1:0", "--uplink-port", str(uplink_port),
         "--health-bind", "127.0.0.1:0", "--pair-timeout", "0.2s"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def logged(pattern: str):
            log.seek(0)
            return re.search(pattern, log.read())

        health = wait_for(lambda: logged(r"health and metrics on (http://[0-9.:]+)"), timeout=30).group(1)
        serve_port = int(wait_for(lambda: logged(r"pods on 127\.0\.0\.1:(\d+)"), timeout=30).group(1))
        assert wait_for(lambda: urllib.request.urlopen(f"{health}/readyz", timeout=5).status == 200, timeout=30)
        pod = socket.create_connection(("127.0.0.1", serve_port))
        assert _recv_exactly(pod, 1) == b""  # no uplink: closed after the pair timeout
        metrics = urllib.request.urlopen(f"{health}/metrics", timeout=5).read().decode()
        assert 'kube_offload_relay_connections_total{result="no_uplink"} 1.0' in metrics, metrics
        with socket.create_connection(("127.0.0.1", uplink_port)):  # the uplink port, on loopback
            pass
    finally:
        process.terminate()
        assert process.wait(15) == 0


def test_connections_past_the_consumers_bound_are_refused_and_logged(caplog):
    relay = Relay(RelaySettings(serve=("127.0.0.1", 0), uplink=("127.0.0.1", 0), pair_timeout=5, max_connections=2))
    relay.start()
    try:
        held = [socket.create_connection(("127.0.0.1", relay.serve_port)) for _ in range(2)]
        assert wait_for(lambda: relay._active == 2, timeout=5)  # both wait for an uplink, holding their slots
        third = socket.create_connection(("127.0.0.1", relay.serve_port))
        assert _recv_exactly(third, 1, timeout=5) == b""  # closed at once, not after the pair timeout
        assert relay.metrics.connections.labels("over_limit")._value.get() == 1
        assert "refused a pod's connection from 127.0.0.1: 2 connections of this consumer's pods are open already " \
               "(--max-connections)" in caplog.text
        for sock in held:
            sock.close()
    finally:
        relay.stop()


def test_one_pod_cannot_take_every_slot():
    relay = Relay(RelaySettings(serve=("127.0.0.1", 0), uplink=("127.0.0.1", 0), max_connections=10, max_connections_per_source=2))
    assert relay.admit("10.0.0.7") == "paired" and relay.admit("10.0.0.7") == "paired"
    assert relay.admit("10.0.0.7") == "over_source_limit"
    assert relay.admit("10.0.0.8") == "paired"  # another pod still gets in
    relay.release("10.0.0.7")
    assert relay.admit("10.0.0.7") == "paired"
    relay.stop()


def test_uplinks_past_the_bound_are_closed_on_arrival():
    relay = Relay(RelaySettings(serve=("127.0.0.1", 0), uplink=("127.0.0.1", 0), max_uplinks=2))
    relay.start()
    try:
        kept = [socket.create_connection(("127.0.0.1", relay.uplink_port)) for _ in range(2)]
        assert wait_for(lambda: relay.pool.idle() == 2, timeout=5)
        extra = socket.create_connection(("127.0.0.1", relay.uplink_port))
        assert _recv_exactly(extra, 1, timeout=5) == b""
        assert relay.pool.idle() == 2 and relay.metrics.uplinks_refused._value.get() == 1
        for sock in kept:
            sock.close()
    finally:
        relay.stop()


def test_pump_relays_sockets_whose_descriptors_are_above_fd_setsize():
    # A relay holding 1,000 pod connections has over 2,000 descriptors: select() refused
    # every one above 1023 (ValueError), so connections past ~500 died at once.
    a_client, a = high_socketpair(1500)
    b, b_client = high_socketpair(1510)
    result: list[tuple[int, int]] = []
    thread = threading.Thread(target=lambda: result.append(pump(a, b)))
    thread.start()
    a_client.sendall(b"to home")
    assert _recv_exactly(b_client, 7) == b"to home"
    b_client.sendall(b"to pod")
    assert _recv_exactly(a_client, 6) == b"to pod"
    a_client.close()
    thread.join(5)
    assert result == [(7, 6)]
