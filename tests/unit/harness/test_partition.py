"""The harness's network partition (kube_offload_harness/partition.py) over real loopback
sockets: a link forwards, cut drops open connections and refuses new ones, heal forwards
again; and the kubeconfig/argv rewriting it does to put a vkubelet behind it."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import yaml

from kube_offload_harness.partition import Link, _flag_value, kubeconfig_through, remote_server_port


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1024):
            conn.sendall(data)


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    return sock.recv(1024)


def test_link_forwards_cuts_and_heals(echo_port):
    link = Link("127.0.0.1", echo_port)
    try:
        before = socket.create_connection(("127.0.0.1", link.port), timeout=5)
        assert roundtrip(before) == b"ping"

        link.cut()
        assert link.is_cut
        try:
            assert before.recv(1024) == b""  # the open connection was dropped
        except OSError:
            pass  # or reset: dropped either way
        during = socket.create_connection(("127.0.0.1", link.port), timeout=5)
        try:
            assert roundtrip(during) == b""  # accepted, then closed at once: nothing comes back
        except OSError:
            pass

        link.heal()
        after = socket.create_connection(("127.0.0.1", link.port), timeout=5)
        assert roundtrip(after, b"again") == b"again"
        for sock in (before, during, after):
            sock.close()
    finally:
        link.close()


def test_link_forwards_to_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        Link("10.0.0.1", 443)


def test_kubeconfig_through_points_every_cluster_at_the_link(tmp_path: Path):
    source = tmp_path / "kubeconfig.yaml"
    source.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "remote", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "consumer", "user": {"token": "t"}}],
    }))
    assert remote_server_port(source) == ("127.0.0.1", 6443)
    target = kubeconfig_through(source, tmp_path / "through.yaml", 40000)
    config = yaml.safe_load(target.read_text())
    assert config["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:40000", "certificate-authority-data": "Q0E="}
    assert config["users"] == [{"name": "consumer", "user": {"token": "t"}}]
    assert target.stat().st_mode & 0o077 == 0


def test_flag_value_reads_both_spellings_and_the_last_wins():
    assert _flag_value(["vkubelet", "--remote-kubeconfig", "/a"], "--remote-kubeconfig") == "/a"
    assert _flag_value(["--remote-kubeconfig=/a", "--remote-kubeconfig", "/b"], "--remote-kubeconfig") == "/b"
    assert _flag_value(["--remote-kubeconfig-x", "/a"], "--remote-kubeconfig") is None


def test_health_url_is_the_last_one_logged():
    from kube_offload_harness.partition import health_url

    text = ("=== starting\n2026 INFO kube_offload.runtime.health: health and metrics on http://127.0.0.1:41987 (/healthz, ...)\n"
            "=== starting\n2026 INFO kube_offload.runtime.health: health and metrics on http://127.0.0.1:35897 (/healthz, ...)\n")
    assert health_url(text) == "http://127.0.0.1:35897"
    assert health_url("=== starting\nno port yet\n") is None


def test_wait_ready_waits_for_the_new_process_readyz(tmp_path):
    """Only the segment after ``offset`` counts: the old process's port must not satisfy it."""
    import http.server
    import threading

    from kube_offload_harness.partition import wait_ready

    answers = iter([503, 503, 200])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(next(answers, 200))
            self.end_headers()
            self.wfile.write(b"[-]remote failed" if self.path.startswith("/readyz") else b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = tmp_path / "vkubelet.log"
    log.write_text("health and metrics on http://127.0.0.1:1 (old process)\n")
    offset = log.stat().st_size
    with log.open("a") as handle:
        handle.write(f"health and metrics on http://127.0.0.1:{server.server_address[1]} (/healthz)\n")
    try:
        wait_ready(log, offset, timeout=20)
        assert next(answers, "done") == "done"  # it polled through both 503s
        with pytest.raises(TimeoutError, match="not ready"):
            wait_ready(log, log.stat().st_size, timeout=1)  # nothing logged after that
    finally:
        server.shutdown()


def test_the_pod_partition_cuts_both_directions_of_one_apiserver_only():
    from kube_offload_harness.partition import PARTITION_COMMENT, pod_partition_rules

    to_server, from_server = pod_partition_rules("172.31.250.5", 32766, "remote-1")
    assert to_server[:6] == ["-d", "172.31.250.5/32", "-p", "tcp", "--dport", "32766"]
    assert to_server[-4:] == ["-j", "REJECT", "--reject-with", "tcp-reset"]
    assert from_server[:6] == ["-s", "172.31.250.5/32", "-p", "tcp", "--sport", "32766"]
    assert from_server[-2:] == ["-j", "DROP"]
    # heal deletes exactly these rules: found by their comment, which names the remote
    for rule in (to_server, from_server):
        assert rule[rule.index("--comment") + 1] == f"{PARTITION_COMMENT} remote-1"
