"""The stand-ins for the everyday public images do what their originals do for ordinary
use (docs/real-nodes.md, "Stand-in images"): each image is run the way a user runs it,
`kubectl run --image=<name> -- <command>` or a Deployment with the image's own default
command behind a Service, and every assertion reads what the container printed or served.

The environment is conftest's ``offload_real_env``: the local cluster's real node runs
the local pods (its taint tolerated through ``kubectl run --overrides``, the only
addition to what a user types), and pods created in a namespace labelled for offloading
run through the virtual node on the remote's real node, where busybox resolves names from
the remote's cluster DNS and the reflected Services.

Before issue #40's stand-ins these failed: python:3.11-slim was Debian's Python without a
shell ("exec: sh: executable file not found"), busybox's wget and ping could not resolve
a name (static glibc without NSS), and alpine, nginx, debian and ubuntu were not served.
"""

from __future__ import annotations

import json
import uuid
from typing import Iterator

import pytest

from kube_offload import constants as C
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.chart_pods import real_node_placement
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import virtual_node_name

from support.waiting import wait_for

RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"standins-{RUN}"  # local pods, on the local real node
OFFLOADED = f"standins-off-{RUN}"  # offloaded: on the remote's real node through the virtual node
WELCOME = "Welcome to nginx!"  # the default page of both nginx stand-ins (Debian's nginx-common)
SERVERS = {"web": "nginx:alpine", "web-debian": "nginx"}  # Deployment and Service name -> image
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")  # an image the registry does not serve: fail at once


@pytest.fixture(scope="module")
def local(offload_real_env: Environment) -> Cluster:
    return offload_real_env.cluster(offload_real_env.topology().local)


def _deployment(name: str, image: str, namespace: str, *, placement: bool) -> list[dict]:
    """A Deployment with the image's default command (none given: nginx's CMD) and its
    Service on port 80, as a user writes them."""
    spec: dict = {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]}
    if placement:
        spec.update(real_node_placement())
    labels = {"app": name}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"terminationGracePeriodSeconds": 1, **spec}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 80}]}},
    ]


@pytest.fixture(scope="module")
def servers(local: Cluster) -> Iterator[str]:
    """nginx (Debian) and nginx:alpine on the local real node behind Services, and a
    headless Service naming the alpine one's pod (what `ping <name>` reaches)."""
    local.kubectl("create", "namespace", NAMESPACE)
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-pods", "namespace": NAMESPACE},
                "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}}
    local.apply([obj for name, image in SERVERS.items() for obj in _deployment(name, image, NAMESPACE, placement=True)] + [headless])
    for name in SERVERS:
        local.kubectl("rollout", "status", "-n", NAMESPACE, f"deployment/{name}", "--timeout=150s", timeout=160)
    yield NAMESPACE
    # the environment is shared with the modules after this one (conftest.SHARED)
    local.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _run(cluster: Cluster, image: str, *args: str, namespace: str = "default", local_node: bool = True) -> tuple[str, str]:
    """``kubectl run <pod> --image=<image> --restart=Never -- <args>``, as a user types it
    (on the local cluster with the real node's placement as ``--overrides``: the node is
    tainted); waits for the pod to finish; (phase, logs)."""
    name = f"run-{uuid.uuid4().hex[:8]}"
    argv = ["run", name, "-n", namespace, f"--image={image}", "--restart=Never"]
    if local_node:
        argv.append("--overrides=" + json.dumps({"apiVersion": "v1", "spec": real_node_placement()}))
    cluster.kubectl(*argv, "--", *args)

    def finished() -> str | None:
        pod = json.loads(cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json").stdout)
        status = pod.get("status") or {}
        waiting = [s["state"]["waiting"] for s in status.get("containerStatuses") or [] if "waiting" in s["state"]]
        if any(w.get("reason") in PULL_FAILURES for w in waiting):
            pytest.fail(f"{image}: {waiting[0]['reason']}: {waiting[0].get('message', '')}")
        phase = status.get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, what=f"{image} {' '.join(args)} to finish", timeout=150, interval=1)
    logs = cluster.kubectl("logs", "-n", namespace, name, check=False)
    return phase, logs.stdout + logs.stderr


def _ok(cluster: Cluster, image: str, *args: str, **kwargs) -> str:
    phase, logs = _run(cluster, image, *args, **kwargs)
    assert phase == "Succeeded", f"{image} {' '.join(args)}: {phase}\n{logs}"
    return logs


def _answer(nslookup_output: str) -> list[str]:
    """The addresses busybox's nslookup printed after a ``Name:`` line (its own server's
    address comes first and is not an answer)."""
    return [line.split(":", 1)[1].strip() for line in nslookup_output.split("Name:", 1)[-1].splitlines()
            if line.startswith("Address:")]


# --- busybox ---------------------------------------------------------------------------------------------
def test_busybox_nslookup_asks_the_cluster_dns(local):
    """`nslookup` is busybox's own DNS client, as in the real image: a fully qualified
    name, and a short name through the search path the kubelet wrote. (A dotted partial
    name such as `kubernetes.default` is not searched by busybox 1.35/1.36's nslookup,
    networking/nslookup.c `add_query_with_search`: the original fails on it too.)"""
    logs = _ok(local, "busybox:1.36", "nslookup", f"kubernetes.default.svc.{rc.CLUSTER_DOMAIN}")
    assert _answer(logs) == [rc.KUBERNETES_SERVICE_IP], logs
    _, logs = _run(local, "busybox:1.36", "nslookup", "kubernetes")  # exit 1: the other search domains say NXDOMAIN
    assert f"Name:\tkubernetes.default.svc.{rc.CLUSTER_DOMAIN}\nAddress: {rc.KUBERNETES_SERVICE_IP}" in logs, logs


def test_busybox_wget_and_ping_resolve_service_names_through_the_search_path(local, servers):
    """wget and ping resolve with glibc (the search path, ndots:5), as the original's
    glibc build does: `wget http://<service>.<namespace>` from another namespace, and
    `ping` of a headless Service's name (the pod's address answers)."""
    logs = _ok(local, "busybox:1.36", "wget", "-qO-", f"http://web.{servers}")
    assert WELCOME in logs
    pod_ip = local.kubectl_json("get", "pods", "-n", servers, "-l", "app=web")["items"][0]["status"]["podIP"]
    logs = _ok(local, "busybox:1.36", "ping", "-c", "1", "-W", "5", f"web-pods.{servers}")
    assert f"PING web-pods.{servers} ({pod_ip})" in logs and "1 packets received" in logs, logs
    # the other tag, and a shell line
    logs = _ok(local, "busybox:latest", "sh", "-c", f"wget -qO- http://web-debian.{servers}.svc.{rc.CLUSTER_DOMAIN} | grep -c nginx")
    assert int(logs.strip().splitlines()[-1]) > 0, logs


def test_busybox_wget_honours_a_timeout_as_the_original_does(local, servers):
    """`wget -T SEC` and `--timeout=SEC`, as manifests and NetworkPolicy tutorials write
    them: a Service answers within it; a server that accepts and never answers ends in the
    original's "download timed out" and exit 1 (Debian's busybox has no wget timeout and
    crashed on -T with a segmentation fault, exit 139, before the stand-in's wget)."""
    script = (f"wget -q -T 5 -O- http://web.{servers} | grep -c nginx; "
              f"wget -q --timeout=5 -O- http://web.{servers} | grep -c nginx; "
              "sleep 30 | nc -l -p 9000 >/dev/null & sleep 1; "
              "wget -q -T 1 -O- http://127.0.0.1:9000/; echo timed-out-exit=$?")
    logs = _ok(local, "busybox:1.36", "sh", "-c", script)
    lines = logs.strip().splitlines()
    assert int(lines[0]) > 0 and int(lines[1]) > 0, logs
    # (its stderr and the echo's stdout reach the log in either order)
    assert "wget: download timed out" in lines and "timed-out-exit=1" in lines, logs
    assert "Terminated" not in logs and "Segmentation" not in logs, logs


# --- python ------------------------------------------------------------------------------------------------
def test_python_slim_has_a_shell_coreutils_python_and_pip(local):
    logs = _ok(local, "python:3.11-slim", "sh", "-c", "echo hi from sh; ls /usr/bin/env; id -u; date -u +%Y")
    assert logs.splitlines()[:3] == ["hi from sh", "/usr/bin/env", "0"], logs
    logs = _ok(local, "python:3.11-slim", "python", "-c", "import sys, ssl, sqlite3, zoneinfo; print('python', sys.version_info[:2])")
    assert "python (3, 11)" in logs
    logs = _ok(local, "python:3.11", "python3", "-c", "import json; print(json.dumps({'ok': True}))")
    assert '{"ok": true}' in logs
    assert _ok(local, "python:3.11-slim", "pip", "--version").startswith("pip ")


def test_python_alpine_has_a_shell_busybox_and_python(local, servers):
    logs = _ok(local, "python:alpine", "python", "-c", "import sys; print('python', sys.version_info[:2])")
    assert "python (3, 11)" in logs
    call = f"import urllib.request as u; print(u.urlopen('http://web.{servers}', timeout=10).read().decode())"
    assert WELCOME in _ok(local, "python:3.11-alpine", "python3", "-c", call)
    logs = _ok(local, "python:3.11-alpine", "sh", "-c", "echo hi; busybox | head -1; python3 --version")
    assert logs.splitlines()[0] == "hi" and "BusyBox" in logs and "Python 3.11" in logs


# --- alpine --------------------------------------------------------------------------------------------------
def test_alpine_has_sh_and_the_busybox_tools_and_says_what_it_is(local, servers):
    logs = _ok(local, "alpine:3", "sh", "-c", f". /etc/os-release; echo $ID $VERSION_ID; wget -qO- http://web.{servers}")
    assert logs.splitlines()[0] == "alpine 3.19.0" and WELCOME in logs, logs
    assert "Alpine Linux v3.19" in _ok(local, "alpine:3.19", "cat", "/etc/os-release")
    # apk: no package index and no network, as the original offline, with a line saying so
    phase, logs = _run(local, "alpine:3.19", "apk", "add", "curl")
    assert phase == "Failed" and "nothing can be installed" in logs, logs


# --- nginx --------------------------------------------------------------------------------------------------
def test_nginx_serves_its_default_page_on_80_through_a_service_and_logs_each_request(local, servers):
    """Both nginx stand-ins run their image's own command (`nginx -g 'daemon off;'`, none
    in the Deployment) and answer through their Service; the access log is the
    container's output, as in the official image."""
    for name, image in SERVERS.items():
        [pod] = local.kubectl_json("get", "pods", "-n", servers, "-l", f"app={name}")["items"]
        assert pod["spec"]["containers"][0]["image"] == image and "command" not in pod["spec"]["containers"][0]
        marker = f"standin-check-{uuid.uuid4().hex[:6]}"
        logs = _ok(local, "busybox:1.36", "wget", "-qO-", "-U", marker, f"http://{name}.{servers}")
        assert WELCOME in logs

        def logged(name: str = name, marker: str = marker) -> str | None:
            out = local.kubectl("logs", "-n", servers, f"deployment/{name}").stdout
            return out if marker in out else None

        access = wait_for(logged, what=f"the request in {name}'s log")
        assert '"GET / HTTP/1.1" 200' in access.split(marker)[0].splitlines()[-1], access
        # workers run as the image's nginx user, the master as root
        users = local.kubectl("exec", "-n", servers, f"deployment/{name}", "--", "sh", "-c",
                              "for p in /proc/[0-9]*; do grep -q nginx $p/cmdline 2>/dev/null && stat -c %U $p; done").stdout
        assert {"root", "nginx"} <= set(users.split()), users


# --- debian, ubuntu --------------------------------------------------------------------------------------------
def test_debian_and_ubuntu_run_bash_with_coreutils_and_glibc_resolution(local):
    for image in ("debian:bookworm", "debian:12", "ubuntu:22.04"):
        logs = _ok(local, image, "bash", "-c", 'echo "bash ${BASH_VERSINFO[0]}"; . /etc/os-release; echo "$ID"; '
                                              'ls / | grep -cx usr; getent hosts kubernetes.default | cut -d" " -f1; '
                                              "echo 3 1 2 | tr ' ' '\\n' | sort | tr -d '\\n' | awk '{print $0}'")
        assert logs.split() == ["bash", "5", "debian", "1", rc.KUBERNETES_SERVICE_IP, "123"], f"{image}: {logs}"
    phase, logs = _run(local, "debian:bookworm", "apt-get", "install", "-y", "curl")
    assert phase == "Failed" and "nothing can be installed" in logs, logs


# --- through the virtual node ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def offloaded(offload_real_env: Environment, local: Cluster) -> Iterator[str]:
    """A namespace offloaded to the remote: nginx:alpine serving there behind a Service."""
    local.kubectl("create", "namespace", OFFLOADED)
    local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    local.apply(_deployment("web", "nginx:alpine", OFFLOADED, placement=False))
    local.kubectl("rollout", "status", "-n", OFFLOADED, "deployment/web", "--timeout=150s", timeout=160)
    [pod] = local.kubectl_json("get", "pods", "-n", OFFLOADED, "-l", "app=web")["items"]
    assert pod["spec"]["nodeName"] == virtual_node_name(offload_real_env.topology().remotes[0].cluster_id)
    yield OFFLOADED
    local.kubectl("delete", "namespace", OFFLOADED, "--wait=false", check=False)


def test_an_offloaded_busybox_resolves_names_from_the_remote_cluster_dns(local, offloaded):
    """`kubectl run` in the offloaded namespace: the pod runs on the remote's real node and
    its nslookup and wget ask the remote's cluster DNS, which knows the reflected Service
    by its short name (the namespace there is the twin's)."""
    logs = _ok(local, "busybox:1.36", "nslookup", f"kubernetes.default.svc.{rc.CLUSTER_DOMAIN}",
               namespace=offloaded, local_node=False)
    assert _answer(logs) == [rc.KUBERNETES_SERVICE_IP], logs
    logs = _ok(local, "busybox:1.36", "wget", "-qO-", "http://web", namespace=offloaded, local_node=False)
    assert WELCOME in logs


def test_a_local_busybox_reaches_the_offloaded_nginx_by_its_service_name(local, offloaded):
    """The local cluster DNS answers the Service's ClusterIP, whose endpoint is the
    offloaded pod's remapped address; the fabric carries the request to the remote's real
    node."""
    assert WELCOME in _ok(local, "busybox:1.36", "wget", "-qO-", f"http://web.{offloaded}")
