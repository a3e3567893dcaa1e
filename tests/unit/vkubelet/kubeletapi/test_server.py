"""The kubelet API server over real HTTPS sockets: routing, error bodies, the WebSocket
upgrade, TLS (generated certificate, client CA, reload). The remote API server is a
closed loopback port here, so every path that would reach it meets a real connection
failure; the successful relays are covered end to end in tests/e2e/test_logs_exec.py.
Every request here is authenticated with a bearer token an admin holds (the reviews are
answered in the API's JSON by the ``kubelet_auth`` fixture of tests/unit/conftest.py); authentication and
authorization themselves are tested in test_access.py."""

import base64
import http.client
import json
import os
import socket
import ssl
import threading
import time

import pytest
import websocket  # websocket-client (a dependency of the kubernetes client): an independent client
from kubernetes import client

from certs import pki
from vkubelet.kubeletapi.limits import StreamLimits
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.tls import ServerContext, TLSSetupError, serving_files, subject_names


class Resolver:
    """Pods the test says are offloaded; everything else is not on this node."""

    def __init__(self, served):
        self.served = served

    def resolve(self, namespace, pod, pod_uid=""):
        key = f"{namespace}/{pod}"
        if key not in self.served:
            raise RequestError(404, f"pod {key} is not bound to virtual node kube-offload-r1")
        return RemotePod(f"{namespace}-local", pod)


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The admin's token (tests/unit/conftest.py, kubelet_auth), sent by every request here.
ADMIN_TOKEN = "admin-token"


@pytest.fixture
def server(tmp_path, kubelet_auth):
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{closed_port()}"
    configuration.verify_ssl = False
    remote = client.ApiClient(configuration)
    files = serving_files("", "", node_address="127.0.0.1", node_name="kube-offload-r1")
    app = KubeletApi(resolver=Resolver({"demo/web"}), remote=remote, cluster_id="r1", access=kubelet_auth.access_control(kubelet_auth.Reviews()))
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.close_streams()
    srv.server_close()
    files.cleanup()
    assert not files.cert.exists()


def insecure():
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # as the apiserver without --kubelet-certificate-authority
    return context


def request(srv, method, path, headers=None, *, token=ADMIN_TOKEN, context=None):
    conn = http.client.HTTPSConnection("127.0.0.1", srv.server_address[1], context=context or insecure(), timeout=10)
    headers = dict(headers or {})
    if token:
        headers.setdefault("Authorization", f"Bearer {token}")
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body


def test_healthz(server):
    response, body = request(server, "GET", "/healthz")
    assert (response.status, body) == (200, b"ok\n")


def test_keep_alive_serves_several_requests_on_one_connection(server):
    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], context=insecure(), timeout=10)
    for _ in range(3):
        conn.request("GET", "/healthz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert conn.getresponse().read() == b"ok\n"
    conn.close()


def test_logs_of_a_pod_not_on_this_node_are_404_with_a_plain_message(server):
    response, body = request(server, "GET", "/containerLogs/demo/other/app")
    assert response.status == 404
    assert response.getheader("Content-Type").startswith("text/plain")
    assert body.decode().strip() == "pod demo/other is not bound to virtual node kube-offload-r1"


def test_bad_log_query_is_400(server):
    response, body = request(server, "GET", "/containerLogs/demo/web/app?tailLines=-3")
    assert response.status == 400
    assert b"tailLines" in body


def test_logs_with_the_remote_cluster_down_are_503(server):
    response, body = request(server, "GET", "/containerLogs/demo/web/app?follow=true")
    assert response.status == 503
    assert body.decode().startswith("remote cluster r1 is unreachable")


def test_unknown_paths_and_methods(server):
    assert request(server, "GET", "/stats/summary")[0].status == 404
    assert request(server, "PUT", "/containerLogs/demo/web/app")[0].status == 405
    assert request(server, "POST", "/containerLogs/demo/web/app")[0].status == 405


def test_a_request_body_is_dropped_and_the_connection_stays_usable(server):
    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], context=insecure(), timeout=10)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    conn.request("POST", "/healthz", body=b"x" * (200 * 1024), headers=auth)
    assert conn.getresponse().read() == b"ok\n"
    conn.request("GET", "/healthz", headers=auth)
    assert conn.getresponse().read() == b"ok\n"
    conn.close()


def test_port_forward_without_an_upgrade_is_a_400_status(server):
    response, body = request(server, "GET", "/portForward/demo/web")
    assert response.status == 400
    assert "needs an upgrade to a WebSocket (SPDY/3.1+portforward.k8s.io" in json.loads(body)["message"]


def test_port_forward_with_the_remote_down_is_a_503_before_the_upgrade(server):
    # Port-forward opens the remote first: its failure is still an HTTP answer.
    response, body = request(server, "GET", "/portForward/demo/web", _ws_headers("SPDY/3.1+portforward.k8s.io"))
    status = json.loads(body)
    assert (response.status, status["reason"]) == (503, "ServiceUnavailable")
    assert status["message"].startswith("remote cluster r1 is unreachable: cannot connect to 127.0.0.1")


def test_spdy_is_forwarded_and_a_remote_failure_is_a_status_kubectl_decodes(server):
    response, body = request(
        server, "POST", "/exec/demo/web/app?command=ls&output=1",
        {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"},
    )
    status = json.loads(body)
    assert response.status == 503
    assert (status["kind"], status["status"], status["code"]) == ("Status", "Failure", 503)
    assert status["message"].startswith("remote cluster r1 is unreachable")


def test_exec_of_a_pod_not_on_this_node_is_a_404_status_before_any_upgrade(server):
    response, body = request(server, "GET", "/exec/demo/other/app?command=ls&output=1", _ws_headers())
    assert response.status == 404
    assert json.loads(body)["reason"] == "NotFound"


def _ws_headers(protocols="v5.channel.k8s.io, v4.channel.k8s.io"):
    return {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-Websocket-Version": "13",
        "Sec-Websocket-Key": base64.b64encode(os.urandom(16)).decode(),
        "Sec-Websocket-Protocol": protocols,
    }


def test_unsupported_stream_protocols_are_refused(server):
    response, body = request(server, "GET", "/exec/demo/web/app?command=ls&output=1", _ws_headers("channel.k8s.io"))
    assert response.status == 400
    assert "none of the offered stream protocols (channel.k8s.io) is supported" in json.loads(body)["message"]


def test_an_invalid_handshake_is_refused_by_wsproto(server):
    headers = _ws_headers()
    headers["Sec-Websocket-Version"] = "8"
    response, body = request(server, "GET", "/exec/demo/web/app?command=ls&output=1", headers)
    assert response.status == 400
    assert "invalid WebSocket handshake" in json.loads(body)["message"]


def test_websocket_exec_upgrades_then_reports_the_unreachable_remote_on_the_error_channel(server):
    conn = websocket.create_connection(
        f"wss://127.0.0.1:{server.server_address[1]}/exec/demo/web/app?command=ls&output=1",
        header=[f"Authorization: Bearer {ADMIN_TOKEN}"],
        subprotocols=["v5.channel.k8s.io", "v4.channel.k8s.io"],
        sslopt={"cert_reqs": ssl.CERT_NONE, "check_hostname": False},
        timeout=10,
    )
    assert conn.getsubprotocol() == "v5.channel.k8s.io"
    opcode, error = conn.recv_data()
    assert opcode == websocket.ABNF.OPCODE_BINARY and error[0] == 3  # the error channel
    status = json.loads(error[1:])
    assert (status["status"], status["code"]) == ("Failure", 503)
    assert status["message"].startswith("remote cluster r1 is unreachable")
    assert conn.recv_data(control_frame=True)[0] == websocket.ABNF.OPCODE_CLOSE  # then a close
    conn.close()


# --- limits ---------------------------------------------------------------------------------------
@pytest.fixture
def limited(tmp_path, kubelet_auth):
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{closed_port()}"
    files = serving_files("", "", node_address="127.0.0.1", node_name="kube-offload-r1")
    app = KubeletApi(
        resolver=Resolver({"demo/web"}),
        remote=client.ApiClient(configuration),
        cluster_id="r1",
        access=kubelet_auth.access_control(kubelet_auth.Reviews()),
        limits=StreamLimits(max_connections=3, max_streams=1),
    )
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.close_streams()
    srv.server_close()


def _tls_connection(srv):
    return insecure().wrap_socket(socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=10))


def _get(sock, path, headers=""):
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n{headers}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def test_connections_past_the_cap_get_a_503_and_the_server_recovers(limited):
    held = [_tls_connection(limited) for _ in range(3)]
    try:
        wait_until(lambda: limited.connections.used == 3)
        refused = _tls_connection(limited)
        answer = _get(refused, "/healthz")
        assert answer.startswith("HTTP/1.1 503")
        assert "Retry-After: 1" in answer
        assert "serving its maximum of 3 connections (--kubelet-max-connections)" in answer + refused.recv(4096).decode()
        refused.close()
        # A held connection is still served normally.
        assert _get(held[0], "/healthz").startswith("HTTP/1.1 200")
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: limited.connections.used == 0)
    assert request(limited, "GET", "/healthz")[0].status == 200
    assert limited.rejecting.used == 0


def test_streams_past_the_cap_get_a_429(limited):
    assert limited.app.streams.acquire()  # one stream in progress: the cap (1) is reached
    try:
        response, body = request(limited, "GET", "/exec/demo/web/app?command=ls&output=1", _ws_headers())
        status = json.loads(body)
        assert (response.status, status["reason"]) == (429, "TooManyRequests")
        assert response.getheader("Retry-After") == "1"
        assert "maximum of 1 streams" in status["message"] and "--kubelet-max-streams" in status["message"]
        text_response, text = request(limited, "GET", "/containerLogs/demo/web/app?follow=true")
        assert text_response.status == 429 and b"--kubelet-max-streams" in text
        # Logs that do not follow are not streams.
        assert request(limited, "GET", "/containerLogs/demo/web/app")[0].status == 503  # (remote down)
    finally:
        limited.app.streams.release()
    response, _ = request(limited, "GET", "/containerLogs/demo/web/app?follow=true")
    assert response.status == 503  # past the cap again: the remote is what fails now
    assert limited.app.streams.used == 0


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_silent_client_does_not_block_the_others(server):
    silent = socket.create_connection(("127.0.0.1", server.server_address[1]))  # no TLS handshake
    try:
        assert request(server, "GET", "/healthz")[0].status == 200
    finally:
        silent.close()


# --- TLS ----------------------------------------------------------------------------------------
def test_generated_certificate_names_the_node_address_and_name():
    files = serving_files("", "", node_address="10.0.0.7", node_name="kube-offload-r1")
    try:
        names = pki.subject_names(files.cert.read_bytes())
        assert names.ip_addresses == ("10.0.0.7",)
        assert names.dns_names == ("kube-offload-r1",)
        assert oct(files.key.stat().st_mode & 0o777) == "0o600"
        assert oct(files.generated_dir.stat().st_mode & 0o777) == "0o700"
    finally:
        files.cleanup()


def test_a_generated_key_does_not_stay_on_disk():
    files = serving_files("", "", node_address="127.0.0.1", node_name="kube-offload-r1")
    context = ServerContext(files)
    assert not files.generated_dir.exists()
    assert context.get() is context.get()


def test_subject_names_default_to_loopback_for_a_dns_address():
    assert subject_names("vk.example", "kube-offload-r1") == (["vk.example", "kube-offload-r1"], ["127.0.0.1"])


def _pair(tmp_path, name, ca):
    pair = pki.issue_serving_cert(ca, ip_addresses=["127.0.0.1"])
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return cert, key


def test_given_files_are_checked(tmp_path):
    ca = pki.generate_ca()
    cert, key = _pair(tmp_path, "a", ca)
    other_cert, other_key = _pair(tmp_path, "b", ca)
    assert serving_files(str(cert), str(key), node_address="127.0.0.1", node_name="n").generated_dir is None
    with pytest.raises(TLSSetupError, match="does not belong"):
        serving_files(str(cert), str(other_key), node_address="127.0.0.1", node_name="n")
    with pytest.raises(TLSSetupError, match="together"):
        serving_files(str(cert), "", node_address="127.0.0.1", node_name="n")
    with pytest.raises(TLSSetupError):
        serving_files(str(tmp_path / "missing.crt"), str(key), node_address="127.0.0.1", node_name="n")


def test_context_reloads_rotated_files(tmp_path):
    ca = pki.generate_ca()
    cert, key = _pair(tmp_path, "tls", ca)
    files = serving_files(str(cert), str(key), node_address="127.0.0.1", node_name="n")
    context = ServerContext(files)
    first = context.get()
    assert context.get() is first  # unchanged files: same context
    time.sleep(0.01)
    new_cert, new_key = _pair(tmp_path, "next", ca)
    os.replace(new_key, key)
    os.replace(new_cert, cert)
    assert context.get() is not first


def test_client_ca_admits_its_certificates_and_still_lets_token_clients_connect(tmp_path, kubelet_auth):
    ca = pki.generate_ca()
    cert, key = _pair(tmp_path, "tls", ca)
    client_ca = pki.generate_ca("clients")
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(client_ca.cert_pem)
    files = serving_files(str(cert), str(key), node_address="127.0.0.1", node_name="n")
    reviews = kubelet_auth.Reviews()
    app = KubeletApi(
        resolver=Resolver(set()),
        remote=client.ApiClient(client.Configuration()),
        cluster_id="r1",
        access=kubelet_auth.access_control(reviews),
    )
    srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files, str(ca_file), require_client_certificate=False))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    try:
        # No certificate: the connection is accepted, the request needs a token.
        assert request(srv, "GET", "/healthz", token="")[0].status == 401
        assert request(srv, "GET", "/healthz")[0].status == 200
        # A client certificate from that CA (like the apiserver's kubelet client cert)
        # authenticates as its CN; the admin role is bound to that user in Reviews.
        pair = pki.issue_client_cert(client_ca, common_name="kube-apiserver-kubelet-client")
        leaf_cert, leaf_key = tmp_path / "client.crt", tmp_path / "client.key"
        leaf_cert.write_bytes(pair.cert_pem)
        leaf_key.write_bytes(pair.key_pem)
        context = insecure()
        context.load_cert_chain(str(leaf_cert), str(leaf_key))
        assert request(srv, "GET", "/healthz", token="", context=context)[0].status == 200
        assert reviews.sar_users[-1] == ("kube-apiserver-kubelet-client", ("system:authenticated",))
        # A certificate from another CA never gets an answer: the handshake fails.
        stranger = pki.issue_client_cert(pki.generate_ca("other"), common_name="kube-apiserver-kubelet-client")
        leaf_cert.write_bytes(stranger.cert_pem)
        leaf_key.write_bytes(stranger.key_pem)
        context = insecure()
        context.load_cert_chain(str(leaf_cert), str(leaf_key))
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            request(srv, "GET", "/healthz", context=context)
    finally:
        srv.shutdown()
        srv.server_close()
