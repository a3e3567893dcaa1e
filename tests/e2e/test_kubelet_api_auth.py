"""Issue 12, part 1: the virtual node's kubelet API authenticates and authorizes like a
kubelet in webhook mode, against the real local kube-apiserver (TokenReview,
SubjectAccessReview, RBAC), while ``kubectl logs``/``exec`` through that apiserver, whose
kubelet client certificate the harness configures (``--kubelet-client-certificate``), keep
working.

The kubelet API is called directly here, as any pod that can reach the node's port could:
no credentials, ServiceAccount tokens with and without ``nodes/proxy``, the apiserver's
own client certificate and a certificate from another CA."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid
from urllib.parse import urlencode

import pytest
import websocket  # websocket-client, a dependency of the kubernetes client

from certs import pki
from kube_offload import constants as C
from kube_offload_harness import kwok_sim
from kube_offload_harness.cluster import APISERVER_KUBELET_CLIENT
from support.clusters import offloaded_namespace, running_on

VIRTUAL_NODE = f"{C.VIRTUAL_NODE_PREFIX}remote-1"
POD = "guarded"
CONTAINER = "app"


@pytest.fixture(scope="module")
def kubelet_port(offload_env) -> int:
    return offload_env.topology().remotes[0].kubelet_port


@pytest.fixture(scope="module")
def pod(local, wait):
    """An offloaded pod Running on the virtual node, and two ServiceAccounts in its
    namespace: ``viewer`` (no kubelet rights) and ``operator`` (nodes/proxy on this node)."""
    namespace = f"ka-{uuid.uuid4().hex[:8]}"
    offloaded_namespace(local, namespace)
    role = f"{namespace}-kubelet-proxy"
    local.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "resourceNames": [VIRTUAL_NODE],
                       "verbs": ["get", "create"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": namespace},
            "spec": {"containers": [{"name": CONTAINER, "image": "busybox"}]},
        },
    ])

    wait(lambda: running_on(local, namespace, POD, VIRTUAL_NODE), timeout=90, what=f"{namespace}/{POD} Running on {VIRTUAL_NODE}")
    yield namespace
    local.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    local.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found", check=False)


def token(local, namespace: str, service_account: str) -> str:
    return local.kubectl("create", "token", "-n", namespace, service_account).stdout.strip()


def tls_context(cert=None, key=None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # as the apiserver, which does not verify kubelets here
    if cert:
        context.load_cert_chain(str(cert), str(key))
    return context


def call(port: int, method: str, path: str, *, bearer: str | None = None, context: ssl.SSLContext | None = None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context or tls_context(), timeout=30)
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    body = response.read().decode(errors="replace")
    conn.close()
    return response.status, body


def logs_path(namespace: str) -> str:
    return f"/containerLogs/{namespace}/{POD}/{CONTAINER}"


def exec_path(namespace: str, script: str) -> str:
    query = urlencode([("command", "sh"), ("command", "-c"), ("command", script), ("output", "1"), ("error", "1")])
    return f"/exec/{namespace}/{POD}/{CONTAINER}?{query}"


def websocket_exec(port: int, path: str, bearer: str) -> tuple[str, dict]:
    """Exec over the v5.channel.k8s.io WebSocket protocol, as the apiserver proxies it:
    (stdout, the Status from the error channel)."""
    ws = websocket.create_connection(
        f"wss://127.0.0.1:{port}{path}",
        header=[f"Authorization: Bearer {bearer}"],
        subprotocols=["v5.channel.k8s.io"],
        sslopt={"cert_reqs": ssl.CERT_NONE, "check_hostname": False},
        timeout=30,
    )
    stdout, status = b"", {}
    try:
        while True:
            opcode, data = ws.recv_data()
            if opcode == websocket.ABNF.OPCODE_CLOSE or not data:
                break
            if data[0] == 1:
                stdout += data[1:]
            elif data[0] == 3:
                status = json.loads(data[1:])
    except websocket.WebSocketConnectionClosedException:
        pass
    finally:
        ws.close()
    return stdout.decode(), status


# --- authentication ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/healthz", "/containerLogs/default/x/y", "/exec/default/x/y?command=ls", "/pods"])
def test_no_credentials_is_401(kubelet_port, path):
    assert call(kubelet_port, "GET", path) == (401, "Unauthorized\n")


def test_a_token_the_apiserver_does_not_know_is_401(kubelet_port):
    assert call(kubelet_port, "GET", "/healthz", bearer="not-a-real-token")[0] == 401


def test_a_client_certificate_from_another_ca_is_refused(offload_env, kubelet_port, tmp_path):
    stranger = pki.issue_client_cert(pki.generate_ca("not the apiserver's kubelet client CA"), common_name=APISERVER_KUBELET_CLIENT)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(stranger.cert_pem)
    key.write_bytes(stranger.key_pem)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        call(kubelet_port, "GET", "/healthz", context=tls_context(cert, key))


def test_the_apiservers_kubelet_client_certificate_is_authorized_by_rbac(offload_env, kubelet_port, pod):
    pki_dir = offload_env.pki_dir
    context = tls_context(pki_dir / "apiserver-kubelet-client.crt", pki_dir / "apiserver-kubelet-client.key")
    status, body = call(kubelet_port, "GET", logs_path(pod), context=context)
    assert status == 200, body
    assert kwok_sim.CURRENT_LINES[0] in body


# --- authorization ----------------------------------------------------------------------------------------
def test_a_token_without_nodes_proxy_is_403_on_logs_and_exec(local, kubelet_port, pod):
    viewer = token(local, pod, "viewer")
    user = f"system:serviceaccount:{pod}:viewer"
    assert call(kubelet_port, "GET", logs_path(pod), bearer=viewer) == (
        403, f"Forbidden (user={user}, verb=get, resource=nodes, subresource=proxy)\n"
    )
    # SPDY-style exec (POST -> create) and WebSocket exec (GET -> get): both refused.
    assert call(kubelet_port, "POST", exec_path(pod, "echo hi"), bearer=viewer) == (
        403, f"Forbidden (user={user}, verb=create, resource=nodes, subresource=proxy)\n"
    )
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        websocket_exec(kubelet_port, exec_path(pod, "echo hi"), viewer)
    assert info.value.status_code == 403


def test_a_token_with_nodes_proxy_reads_logs_and_execs(local, kubelet_port, pod):
    operator = token(local, pod, "operator")
    status, body = call(kubelet_port, "GET", logs_path(pod), bearer=operator)
    assert status == 200, body
    through_apiserver = local.kubectl("logs", "-n", pod, POD, "-c", CONTAINER).stdout
    assert body == through_apiserver
    stdout, status = websocket_exec(kubelet_port, exec_path(pod, "echo direct-$((6*7))"), operator)
    assert stdout == "direct-42\n"
    assert status.get("status") == "Success", status


def test_nodes_proxy_does_not_grant_the_other_subresources(local, kubelet_port, pod):
    # /stats is nodes/stats for a kubelet, which the operator does not hold.
    operator = token(local, pod, "operator")
    assert call(kubelet_port, "GET", "/stats/summary", bearer=operator)[0] == 403


# --- /pods, /runningpods/, /stats/summary (issue 23, item 2) -------------------------------------------
def apiserver_context(offload_env) -> ssl.SSLContext:
    pki_dir = offload_env.pki_dir
    return tls_context(pki_dir / "apiserver-kubelet-client.crt", pki_dir / "apiserver-kubelet-client.key")


def test_pods_and_runningpods_list_the_offloaded_pod_as_a_kubelet_does(local, kubelet_port, pod):
    operator = token(local, pod, "operator")  # nodes/proxy: the fallback of nodes/pods
    status, body = call(kubelet_port, "GET", "/pods", bearer=operator)
    assert status == 200, body
    pods = json.loads(body)
    assert (pods["kind"], pods["apiVersion"]) == ("PodList", "v1")
    mine = [p for p in pods["items"] if p["metadata"]["namespace"] == pod]
    assert [p["metadata"]["name"] for p in mine] == [POD]
    assert mine[0]["spec"]["nodeName"] == VIRTUAL_NODE
    assert mine[0]["metadata"]["uid"] == local.kubectl_json("get", "pod", "-n", pod, POD)["metadata"]["uid"]

    status, body = call(kubelet_port, "GET", "/runningpods/", bearer=operator)
    assert status == 200, body
    running = [p for p in json.loads(body)["items"] if p["metadata"]["namespace"] == pod]
    assert running == [{
        "metadata": {"name": POD, "namespace": pod, "uid": mine[0]["metadata"]["uid"], "creationTimestamp": None},
        "spec": {"containers": [{"name": CONTAINER, "image": running[0]["spec"]["containers"][0]["image"], "resources": {}}]},
        "status": {},
    }]
    assert "busybox" in running[0]["spec"]["containers"][0]["image"]


def test_pods_and_runningpods_are_refused_without_nodes_pods_or_proxy(local, kubelet_port, pod):
    viewer = token(local, pod, "viewer")
    user = f"system:serviceaccount:{pod}:viewer"
    for path in ("/pods", "/runningpods/"):
        assert call(kubelet_port, "GET", path, bearer=viewer) == (
            403, f"Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=pods,proxy)\n"
        )


def test_a_pod_is_in_stats_summary_as_soon_as_it_runs(offload_env, local, kubelet_port, pod, wait):
    name = f"fresh-{uuid.uuid4().hex[:6]}"
    local.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": pod},
                  "spec": {"containers": [{"name": CONTAINER, "image": "busybox"}]}}])
    wait(lambda: running_on(local, pod, name, VIRTUAL_NODE), timeout=90, what=f"{pod}/{name} Running on {VIRTUAL_NODE}")
    wait(lambda: any(s.get("state", {}).get("running") for s in
                     (local.kubectl_json("get", "pod", "-n", pod, name).get("status") or {}).get("containerStatuses") or []),
         timeout=30, what=f"{pod}/{name}'s container running in its status")
    # At once: no waiting for a sampling round (every 15 s, and only where a remote
    # metrics-server answers); without a sample the pod is there with zeros.
    status, body = call(kubelet_port, "GET", "/stats/summary", context=apiserver_context(offload_env))
    assert status == 200, body
    listed = [p for p in json.loads(body)["pods"] if p["podRef"]["namespace"] == pod and p["podRef"]["name"] == name]
    assert len(listed) == 1, body
    assert [c["name"] for c in listed[0]["containers"]] == [CONTAINER]


# --- through the apiserver -------------------------------------------------------------------------------
def test_kubectl_logs_and_exec_through_the_apiserver_keep_working(local, pod):
    logs = local.kubectl("logs", "-n", pod, POD, "-c", CONTAINER, check=False)
    assert logs.returncode == 0, logs.stderr
    assert kwok_sim.CURRENT_LINES[0] in logs.stdout
    result = local.kubectl("exec", "-n", pod, POD, "-c", CONTAINER, "--", "sh", "-c", "echo via-apiserver", check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "via-apiserver\n"


def test_the_token_never_shows_in_an_answer(local, kubelet_port, pod):
    viewer = token(local, pod, "viewer")
    protocol = "base64url.bearer.authorization.k8s.io." + base64.urlsafe_b64encode(viewer.encode()).decode().rstrip("=")
    conn = http.client.HTTPSConnection("127.0.0.1", kubelet_port, context=tls_context(), timeout=30)
    conn.request("GET", exec_path(pod, "true"), headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(),
        "Sec-WebSocket-Protocol": f"v5.channel.k8s.io, {protocol}",
    })
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    # The token authenticates the WebSocket (no Authorization header) as the viewer.
    assert response.status == 403
    assert f"user=system:serviceaccount:{pod}:viewer" in body
    assert viewer not in body
