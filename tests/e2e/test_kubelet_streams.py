"""Issue 12, parts 2, 3 and 5: ``kubectl port-forward``, ``attach`` (with and without a
TTY) and ``cp`` (both ways) on an offloaded pod, through the real local kube-apiserver,
the virtual node's kubelet API and the real remote kube-apiserver down to kwok; and the
kubelet API's bounds: 50 concurrent ``kubectl exec`` sessions and a burst of connections
past ``--kubelet-max-connections`` leave the vkubelet healthy and its other loops working.

kwok on the remote side (harness/kube_offload_harness/kwok_sim.py) forwards every pod
port to one address on the host (``kwok_sim.port_forward_target``), where the tests here
serve a TCP echo; runs exec commands - ``tar`` for ``kubectl cp`` - on the host in its
exec directory; and serves the simulated log file to attach."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import uuid

import pytest

from kube_offload import constants as C
from kube_offload_harness import kwok_sim
from vkubelet.kubeletapi.limits import StreamLimits
from support.clusters import offloaded_namespace, running_on
from support.port_forward import FORWARDING, EchoServer, round_trip

VIRTUAL_NODE = f"{C.VIRTUAL_NODE_PREFIX}remote-1"
POD = "streamer"
CONTAINER = "app"


def offloaded_pod(local, namespace: str, name: str) -> dict:
    # stdin + tty: what `kubectl attach -it` asks of the container (as on any node).
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": CONTAINER, "image": "busybox", "stdin": True, "tty": True,
                                 "ports": [{"containerPort": 8080}]}]},
    }


@pytest.fixture(scope="module")
def sim(offload_env, remote):
    kwok_config = (remote.kwok_workdir / "clusters" / remote.name / "kwok.yaml").read_text()
    if "kind: ClusterPortForward" not in kwok_config or "TAR_OPTIONS" not in kwok_config:
        pytest.fail(
            "the remote kwok has no ClusterPortForward / TAR_OPTIONS: the harness must create remote clusters "
            "with kube_offload_harness.kwok_sim.remote_config_documents(state_dir)"
        )
    return kwok_sim.simulated_files(offload_env.state_dir)


@pytest.fixture(scope="module")
def namespace(local, wait, sim):
    namespace = f"ks-{uuid.uuid4().hex[:8]}"
    offloaded_namespace(local, namespace)
    local.apply(offloaded_pod(local, namespace, POD))
    wait(lambda: running_on(local, namespace, POD, VIRTUAL_NODE), timeout=90, what=f"{namespace}/{POD} Running on {VIRTUAL_NODE}")
    yield namespace
    local.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def kubectl_argv(cluster, *args: str) -> list[str]:
    return [str(cluster.bins.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args]


# --- port-forward -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def echo(offload_env):
    server = EchoServer(kwok_sim.port_forward_target(offload_env.state_dir))
    yield server
    server.close()


@pytest.mark.parametrize("transport", ["websocket", "spdy"])
def test_port_forward_reaches_the_remote_pods_port(local, namespace, echo, transport, offload_env):
    env = local.env()
    # kubectl >= 1.31 tunnels SPDY in a WebSocket (SPDY/3.1+portforward.k8s.io); with the
    # gate off it upgrades to SPDY directly, which the apiserver forwards as it is.
    env["KUBECTL_PORT_FORWARD_WEBSOCKETS"] = "true" if transport == "websocket" else "false"
    process = subprocess.Popen(
        kubectl_argv(local, "port-forward", "-n", namespace, f"pod/{POD}", ":8080", "-v=4"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = process.stdout.readline()
        match = FORWARDING.search(line)
        assert match, f"kubectl port-forward printed {line!r}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
        port = int(match.group(1))
        before = echo.connections
        assert round_trip(port, b"hello through the virtual node\n") == b"hello through the virtual node\n"
        big = os.urandom(512 * 1024)
        results = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, round_trip(port, big[i:] + big[:i]))) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert all(results[i] == big[i:] + big[:i] for i in range(3)), "port-forwarded data came back altered"
        assert echo.connections - before == 4  # each connection reached the remote side's target
        assert process.poll() is None
    finally:
        process.terminate()
        process.communicate(timeout=30)
    # The vkubelet says which way the stream reached it.
    protocol = "SPDY/3.1+portforward.k8s.io" if transport == "websocket" else "SPDY/3.1"
    log = offload_env.log_path("vkubelet-remote-1").read_text(errors="replace")
    assert re.search(rf"portForward {namespace}/{POD} -> remote-1:\S+: started \({re.escape(protocol)}\)", log), protocol


def test_port_forward_to_a_pod_not_offloaded_here_fails_clearly(local, namespace):
    result = local.kubectl("port-forward", "-n", namespace, "pod/nope", ":8080", check=False, timeout=30)
    assert result.returncode != 0
    assert 'pods "nope" not found' in result.stderr


# --- attach -----------------------------------------------------------------------------------
def _append_until_seen(sim, marker: str, output: list[str], wait) -> None:
    def seen():
        kwok_sim.append_log_lines(sim.logs, [marker])
        return any(marker in chunk for chunk in output)

    wait(seen, timeout=30, interval=1.0, what=f"{marker!r} through kubectl attach")


def test_attach_without_a_tty(local, namespace, sim, wait):
    process = subprocess.Popen(
        kubectl_argv(local, "attach", "-n", namespace, POD, "-c", CONTAINER, "-q"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=local.env(),
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(iter(process.stdout.readline, "")), daemon=True).start()
    try:
        _append_until_seen(sim, f"attached plain {uuid.uuid4().hex[:8]}", output, wait)
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_attach_with_a_tty(local, namespace, sim, wait):
    assert shutil.which("script"), "script(1) is needed to give kubectl a terminal: install util-linux"
    kubectl = " ".join(kubectl_argv(local, "attach", "-it", "-n", namespace, POD, "-c", CONTAINER))
    # script(1) gives kubectl a terminal; the feeder keeps its stdin open meanwhile.
    process = subprocess.Popen(
        ["sh", "-c", f"(sleep 40) | script -qec '{kubectl}' /dev/null"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=local.env(), start_new_session=True,
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(iter(process.stdout.readline, "")), daemon=True).start()
    try:
        _append_until_seen(sim, f"attached tty {uuid.uuid4().hex[:8]}", output, wait)
        assert "Unable to use a TTY" not in "".join(output)  # it really was a terminal session
    finally:
        os.killpg(process.pid, 15)
        process.communicate(timeout=30)


# --- cp ---------------------------------------------------------------------------------------
@pytest.fixture
def cp_dir(sim):
    """A directory of its own in kwok's exec directory (where the "container" runs tar);
    paths inside the pod are given relative to it."""
    name = f"cp-{uuid.uuid4().hex[:8]}"
    path = sim.exec_workdir / name
    path.mkdir()
    yield name, path
    shutil.rmtree(path, ignore_errors=True)


def test_cp_into_the_pod(local, namespace, cp_dir, tmp_path):
    name, host_dir = cp_dir
    source = tmp_path / "upload.bin"
    source.write_bytes(os.urandom(300 * 1024))
    result = local.kubectl("cp", str(source), f"{namespace}/{POD}:{name}/uploaded.bin", "-c", CONTAINER, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (host_dir / "uploaded.bin").read_bytes() == source.read_bytes()


def test_cp_out_of_the_pod(local, namespace, cp_dir, tmp_path):
    name, host_dir = cp_dir
    (host_dir / "tree").mkdir()
    (host_dir / "tree" / "a.txt").write_text("first file\n")
    (host_dir / "tree" / "b.bin").write_bytes(os.urandom(200 * 1024))
    target = tmp_path / "downloaded"
    result = local.kubectl("cp", f"{namespace}/{POD}:{name}/tree", str(target), "-c", CONTAINER, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (target / "a.txt").read_text() == "first file\n"
    assert (target / "b.bin").read_bytes() == (host_dir / "tree" / "b.bin").read_bytes()


# --- bounds -----------------------------------------------------------------------------------
def vkubelet_running(offload_env) -> bool:
    record = offload_env.processes.get("vkubelet-remote-1")
    return record is not None and record.running()


def new_pod_is_offloaded_and_mirrored(local, remote, offload_env, wait, namespace: str, name: str) -> None:
    local.apply(offloaded_pod(local, namespace, name))
    wait(lambda: running_on(local, namespace, name, VIRTUAL_NODE), timeout=120, what=f"{namespace}/{name} offloaded and Running")
    pod = local.kubectl_json("get", "pod", "-n", namespace, name)
    assert pod["status"].get("podIP"), "the remote pod's status (its IP) is mirrored"


def test_fifty_concurrent_execs_while_a_pod_is_offloaded(local, remote, namespace, offload_env, wait):
    sessions = 50
    processes = [
        subprocess.Popen(
            kubectl_argv(local, "exec", "-n", namespace, POD, "-c", CONTAINER, "--", "sh", "-c", f"sleep 6; echo session-{i}"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=local.env(),
        )
        for i in range(sessions)
    ]
    try:
        # Meanwhile the vkubelet's other loops keep working: a new pod is offloaded and
        # its status mirrored.
        new_pod_is_offloaded_and_mirrored(local, remote, offload_env, wait, namespace, "during-execs")
        outcomes = [process.communicate(timeout=240) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    failures = [(i, p.returncode, err) for i, (p, (_, err)) in enumerate(zip(processes, outcomes, strict=True)) if p.returncode != 0]
    assert not failures, f"{len(failures)} of {sessions} exec sessions failed, e.g. {failures[:3]}"
    assert [out for out, _ in outcomes] == [f"session-{i}\n" for i in range(sessions)]
    assert vkubelet_running(offload_env)


def test_a_burst_past_the_connection_cap_is_refused_and_leaves_the_vkubelet_healthy(local, remote, namespace, offload_env, wait):
    port = offload_env.topology().remotes[0].kubelet_port
    cap = StreamLimits().max_connections  # the harness runs the vkubelet with the defaults
    extra = 40
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    held: list[ssl.SSLSocket] = []
    answers: dict[str, int] = {}
    refusal = ""
    try:
        for _ in range(cap + extra):
            try:
                sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
            except OSError:
                answers["closed unanswered"] = answers.get("closed unanswered", 0) + 1
                continue
            held.append(sock)
            # No credentials: within the cap that is a 401; past it, a 503 before any check.
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: vk\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            status = data.split(b" ", 2)[1].decode() if data else "closed unanswered"
            answers[status] = answers.get(status, 0) + 1
            if status == "503" and not refusal:
                refusal = (data + sock.recv(4096)).decode(errors="replace")
    finally:
        for sock in held:
            sock.close()
    assert set(answers) <= {"401", "503"}, answers
    # The apiserver may hold a few connections of its own: at least `extra` were refused.
    assert answers.get("503", 0) >= extra, answers
    assert "Retry-After: 1" in refusal and "(--kubelet-max-connections)" in refusal
    # Healthy afterwards: still running, still serving, its other loops still working.
    assert vkubelet_running(offload_env)
    wait(lambda: local.kubectl("exec", "-n", namespace, POD, "-c", CONTAINER, "--", "echo", "still-here",
                               check=False).stdout == "still-here\n", timeout=60, what="kubectl exec after the burst")
    logs = local.kubectl("logs", "-n", namespace, POD, "-c", CONTAINER, "--tail=1", check=False)
    assert logs.returncode == 0, logs.stderr
    new_pod_is_offloaded_and_mirrored(local, remote, offload_env, wait, namespace, "after-burst")
