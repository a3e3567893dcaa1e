"""Day-2 operations on real pods (docs/real-nodes.md, "Day-2 operations on real pods").

One environment for the module, the shape of test_charts_as_pods.py (a local and a remote
cluster, each with a real node, the charts' Deployments as pods under their charts'
ServiceAccounts) with what an operator runs in production:

- the charts' default two replicas of the webhook, the extender, the vkubelet and the
  enforcer, the vkubelet and the enforcer electing a leader (docs/high-availability.md);
- the vkubelet's kubelet API serving certificate from the CSR API (``servingCert.mode:
  csr``) and a local kube-apiserver that verifies kubelets (``--kubelet-certificate-
  authority``: chart_pods.verifies_kubelets);
- the serving certificates of the webhook and the extender renewed at every run of the
  chart's certificate job (``renewWithin`` longer than their lifetime), so that a run of
  the renewal CronJob really replaces them;
- installed first from the PREVIOUS release (charts and image of an earlier commit,
  harness previous_release.py), which the first test upgrades with ``helm upgrade``.

The tests run in order, each on what the previous one left: the upgrade, the certificate
renewal job, a ``kill -9`` of the vkubelet's leader, then of the enforcer's, the CSR mode
with a verifying API server and a certificate it refuses. Through all of them the same
offloaded pods run on the remote real node: none is lost, none restarted.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from kube_offload import constants as C
from kube_offload import peering as p
from kube_offload_harness import chart_pods, netns, previous_release
from kube_offload_harness.standin_recipe import BUSYBOX_IMAGE
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Cluster, ClusterSpec, Environment
from kube_offload_harness.naming import virtual_node_name

from .conftest import charts_as_pods_topology, environment, local_and_remote
from support.waiting import wait_for

NAMESPACE = chart_pods.NAMESPACE
RELEASE = p.DEFAULT_RELEASE
FULLNAME = p.chart_fullname(RELEASE)
OFFLOADED = "day2"
REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "kube_offload" / "manifests"  # what the remote chart's crds/ link to (docs/install.md)
IMAGE_REPOSITORY = "ghcr.io/kube-offload/kube-offload"  # both charts' image.repository
REPLICAS = 2
# The production shape; everything else is chart_pods' (placement on the real nodes).
DAY2_VALUES = {
    "local": {
        "webhook": {"replicas": REPLICAS},
        "extender": {"replicas": REPLICAS},
        "vkubelet": {"replicas": REPLICAS, "servingCert": dict(rc.VKUBELET_SERVING_CERT)},
        # longer than the certificates' 365 days: every run of the certificate job reissues
        "certificates": {"renewWithin": "8784h"},
    },
    "remote": {"enforcer": {"replicas": REPLICAS}},
}
LOCAL_COMPONENTS = ("webhook", "extender", "vkubelet")
LEADER_ELECTED = {"vkubelet": "local", "enforcer": "remote"}
HELM_TIMEOUT = 300


@pytest.fixture(scope="module")
def env(tmp_path_factory, request) -> Iterator[Environment]:
    topology = charts_as_pods_topology("d2")
    topology.chart_values = DAY2_VALUES
    topology.previous_release = previous_release.default_ref()
    started = time.monotonic()
    for env in environment(tmp_path_factory, request, topology, "kube-offload-day2"):
        print(f"\nday-2 environment up in {int(time.monotonic() - started)}s "
              f"(previous release {topology.previous_release[:12]}, charts {env.topology().chart_version})")
        yield env


# --- what the tests share ------------------------------------------------------------------------
_clusters = local_and_remote


def _twin(env: Environment) -> str:
    return C.twin_namespace_name(OFFLOADED, env.topology().local.cluster_id)


def _component_pods(cluster: Cluster, component: str) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}")["items"]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _running(pod: dict) -> bool:
    statuses = pod["status"].get("containerStatuses") or []
    return (pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses))


def _image_of(pod: dict) -> str:
    [container] = pod["spec"]["containers"]
    return container["image"]


def _rolled_out(cluster: Cluster, component: str, image: str) -> list[dict] | None:
    """The component's pods once there are exactly REPLICAS, all running ``image``, none
    terminating; for a leader-elected one, one of them Ready (the leader), else all Ready."""
    pods = _component_pods(cluster, component)
    if len(pods) != REPLICAS or not all(_running(q) and _image_of(q) == image for q in pods):
        return None
    ready = [q for q in pods if _ready(q)]
    return pods if (len(ready) >= 1 if component in LEADER_ELECTED else len(ready) == REPLICAS) else None


def _lease_name(env: Environment, component: str) -> str:
    return (f"{FULLNAME}-vkubelet-{env.topology().remotes[0].cluster_id}" if component == "vkubelet"
            else f"{FULLNAME}-enforcer")


def _lease(cluster: Cluster, component: str, env: Environment) -> dict:
    return cluster.kubectl_json("get", "lease", _lease_name(env, component), "-n", NAMESPACE)


def _holder_pod(lease: dict) -> str:
    """The pod name in the holder identity ``<pod>_<random>``."""
    return (lease["spec"].get("holderIdentity") or "").rsplit("_", 1)[0]


def _offloaded_pod(name: str, command: str = "echo started; exec sleep 3600") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": OFFLOADED, "labels": {"day2": "pod"}},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", command],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    }


def _workload() -> list[dict]:
    """What runs offloaded through every test: three bare pods and a Deployment of two
    (whose ReplicaSet would replace a lost pod under a new UID: a loss shows)."""
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "steady", "namespace": OFFLOADED},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "steady"}},
                 "template": {"metadata": {"labels": {"app": "steady", "day2": "pod"}},
                              "spec": _offloaded_pod("x")["spec"]}},
    }
    return [_offloaded_pod(f"steady-{i}") for i in range(3)] + [deployment]


def _offload_namespace(local: Cluster) -> None:
    if local.kubectl("get", "namespace", OFFLOADED, check=False).returncode != 0:
        local.kubectl("create", "namespace", OFFLOADED)
    local.kubectl("label", "namespace", OFFLOADED, "--overwrite", f"{C.LABEL_ENABLED}=true",
                  f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    wait_for(lambda: local.kubectl("get", "serviceaccount", "default", "-n", OFFLOADED, check=False).returncode == 0,
             what=f"the default ServiceAccount of {OFFLOADED}", timeout=60)


@dataclass(frozen=True)
class OffloadedPod:
    """What must not change through a day-2 operation: the pod, its remote pod and its
    ShadowPod (UIDs), how often each container restarted, since when it is Ready."""

    uid: str
    restarts: tuple[int, ...]
    ready_since: str
    shadowpod_uid: str
    remote_uid: str
    remote_restarts: tuple[int, ...]


def _restarts(pod: dict) -> tuple[int, ...]:
    return tuple(s.get("restartCount", 0) for s in sorted(pod["status"].get("containerStatuses") or [], key=lambda s: s["name"]))


def _ready_since(pod: dict) -> str:
    return next((c.get("lastTransitionTime", "") for c in pod["status"].get("conditions") or []
                 if c["type"] == "Ready" and c["status"] == "True"), "")


def _offloaded(env: Environment, selector: str = "day2=pod") -> dict[str, OffloadedPod]:
    """Every offloaded pod of the workload, once each is Ready with its remote pod Running."""
    local, remote = _clusters(env)
    twin = _twin(env)
    pods = local.kubectl_json("get", "pods", "-n", OFFLOADED, "-l", selector)["items"]
    remote_pods = {q["metadata"]["name"]: q for q in remote.kubectl_json("get", "pods", "-n", twin)["items"]}
    shadows = {s["metadata"]["name"]: s["metadata"]["uid"]
               for s in remote.kubectl_json("get", f"{C.SHADOWPOD_PLURAL}.{C.DOMAIN}", "-n", twin)["items"]}
    state = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        theirs = remote_pods.get(name)
        assert theirs is not None and name in shadows, f"{name}: no remote pod or ShadowPod in {twin}"
        state[name] = OffloadedPod(uid=pod["metadata"]["uid"], restarts=_restarts(pod), ready_since=_ready_since(pod),
                                   shadowpod_uid=shadows[name], remote_uid=theirs["metadata"]["uid"],
                                   remote_restarts=_restarts(theirs))
    return state


def _all_ready(env: Environment, count: int) -> dict[str, OffloadedPod] | None:
    local, remote = _clusters(env)
    pods = local.kubectl_json("get", "pods", "-n", OFFLOADED, "-l", "day2=pod")["items"]
    if len(pods) != count or not all(_ready(q) for q in pods):
        return None
    twin_pods = remote.kubectl_json("get", "pods", "-n", _twin(env))["items"]
    names = {q["metadata"]["name"] for q in twin_pods if q["status"].get("phase") == "Running"}
    return _offloaded(env) if {q["metadata"]["name"] for q in pods} <= names else None


def _unchanged(env: Environment, before: dict[str, OffloadedPod], what: str) -> None:
    after = wait_for(lambda: _all_ready(env, len(before)), what=f"every offloaded pod Ready after {what}", timeout=120,
                     interval=2)
    assert set(after) == set(before), f"{what}: pods lost {sorted(set(before) - set(after))}, new {sorted(set(after) - set(before))}"
    changed = {name: (before[name], after[name]) for name in before if before[name] != after[name]}
    assert changed == {}, f"{what} changed offloaded pods (UIDs, restarts, Ready since): {changed}"


def _offload_one(env: Environment, name: str, timeout: float = 240) -> None:
    """A new pod, offloaded and Running on the remote real node: offloading works."""
    local, remote = _clusters(env)
    pod = _offloaded_pod(name)
    pod["metadata"]["labels"] = {"day2": "probe"}
    local.apply(pod)
    local.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", OFFLOADED, f"--timeout={int(timeout)}s",
                  timeout=timeout + 10)
    theirs = remote.kubectl_json("get", "pod", name, "-n", _twin(env))
    assert theirs["spec"]["nodeName"] == env.real_node(env.topology().remotes[0]).plan.node_name
    assert theirs["status"]["phase"] == "Running"


def _helm(env: Environment, cluster: Cluster, *args: str, timeout: float = HELM_TIMEOUT + 60) -> subprocess.CompletedProcess:
    argv = [str(env.bins.helm), "--kubeconfig", str(cluster.kubeconfig), "--namespace", NAMESPACE, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=cluster.env(), check=False)


def _helm_upgrade(env: Environment, cluster: Cluster, chart: str, *extra: str) -> None:
    """``helm upgrade`` of the release to the checkout's chart, the release's own values kept
    and the new chart's defaults under them (docs/install.md, "Upgrading")."""
    result = _helm(env, cluster, "upgrade", RELEASE, *chart_pods.chart_source(env, chart), "--reset-then-reuse-values",
                   *extra, "--wait", "--timeout", f"{HELM_TIMEOUT}s")
    assert result.returncode == 0, f"helm upgrade {chart} on {cluster.name}: {result.stderr[-3000:]}\n{chart_pods.describe_pods(cluster)}"


def _release(env: Environment, cluster: Cluster) -> dict:
    listed = json.loads(_helm(env, cluster, "list", "-o", "json", timeout=60).stdout)
    [release] = [r for r in listed if r["name"] == RELEASE]
    return release


def _wait_rolled_out(env: Environment, image: str) -> None:
    local, remote = _clusters(env)
    for cluster, components in ((local, LOCAL_COMPONENTS), (remote, ("enforcer",))):
        for component in components:
            wait_for(lambda: _rolled_out(cluster, component, image),  # noqa: B023 (called in this iteration)
                     what=f"{component} on {cluster.name}: {REPLICAS} pods of {image}", timeout=300, interval=3)
    for component, side in LEADER_ELECTED.items():
        cluster = local if side == "local" else remote
        names = {q["metadata"]["name"] for q in _component_pods(cluster, component)}
        wait_for(lambda: _holder_pod(_lease(cluster, component, env)) in names,  # noqa: B023
                 what=f"the {component} Lease held by a pod of the new release", timeout=120, interval=2)
    node = virtual_node_name(env.topology().remotes[0].cluster_id)
    local.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=180s", timeout=190)


class LeaseWatch(threading.Thread):
    """Who holds a component's Lease, sampled every second while something happens: how
    long no pod of ``old`` held it before a new pod did (a figure printed, not asserted)."""

    def __init__(self, env: Environment, cluster: Cluster, component: str) -> None:
        super().__init__(daemon=True)
        self.env, self.cluster, self.component = env, cluster, component
        self.old = {q["metadata"]["name"] for q in _component_pods(cluster, component)}
        self.samples: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            result = self.cluster.kubectl("get", "lease", _lease_name(self.env, self.component), "-n", NAMESPACE,
                                          "-o", "jsonpath={.spec.holderIdentity}", check=False, timeout=20)
            if result.returncode == 0:
                self.samples.append((time.monotonic(), result.stdout.strip().rsplit("_", 1)[0]))
            self.stop.wait(1.0)

    def handover(self) -> str:
        last_old = max((t for t, holder in self.samples if holder in self.old), default=None)
        first_new = min((t for t, holder in self.samples if holder and holder not in self.old
                         and (last_old is None or t > last_old)), default=None)
        if last_old is None or first_new is None:
            return "not seen"
        return f"{first_new - last_old:.0f}s without a leader (1 s samples)"


# --- 1. helm upgrade from the previous release --------------------------------------------------
def test_helm_upgrade_from_the_previous_release_loses_and_restarts_no_offloaded_pod(env: Environment):
    local, remote = _clusters(env)
    topology = env.topology()
    previous, current = topology.chart_version, chart_pods.chart_version()
    assert previous.startswith(current.split("-")[0] + "-g") and previous != current, (previous, current)
    for cluster in (local, remote):
        assert _release(env, cluster)["chart"].endswith(previous)
    _wait_rolled_out(env, f"{IMAGE_REPOSITORY}:{previous}")  # the previous release, two of each
    _offload_namespace(local)
    local.apply(_workload())
    before = wait_for(lambda: _all_ready(env, 5), what="the offloaded workload Ready", timeout=240, interval=3)

    # The provider first (its CRDs, which Helm never upgrades, then its chart), then the
    # consumer: docs/install.md, "Upgrading".
    watches = [LeaseWatch(env, local, "vkubelet"), LeaseWatch(env, remote, "enforcer")]
    for watch in watches:
        watch.start()
    started = time.monotonic()
    try:
        remote.kubectl("apply", "-f", str(CRDS))
        _helm_upgrade(env, remote, p.REMOTE_CHART)
        _helm_upgrade(env, local, p.LOCAL_CHART)
        _wait_rolled_out(env, f"{IMAGE_REPOSITORY}:{current}")
    finally:
        for watch in watches:
            watch.stop.set()
            watch.join(timeout=30)
    print(f"\nupgrade {previous} -> {current}: both releases rolled out in {int(time.monotonic() - started)}s; "
          + "; ".join(f"{w.component}: {w.handover()}" for w in watches))
    for cluster in (local, remote):
        release = _release(env, cluster)
        assert release["chart"].endswith(f"-{current}") and release["status"] == "deployed", release
    _unchanged(env, before, "the upgrade")
    _offload_one(env, "after-upgrade")


# --- 2. the certificate renewal job --------------------------------------------------------------
@dataclass
class Probe:
    """Requests sent while something changes underneath, and the ones that failed."""

    sent: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.sent += 1
        if not ok:
            self.failures.append(f"{time.strftime('%H:%M:%S')} {what}: {detail.strip()[-300:]}")


def _tls_secret(local: Cluster) -> dict[str, bytes]:
    data = local.kubectl_json("get", "secret", f"{FULLNAME}-tls", "-n", NAMESPACE)["data"]
    return {key: base64.b64decode(value) for key, value in data.items()}


def _served(ip: str, port: int, ca_pem: bytes, server_name: str, path: str = "/readyz") -> tuple[bytes, int]:
    """GET ``path`` over TLS as kube-apiserver and kube-scheduler call these servers: the
    certificate verified against the chart's CA for the Service's name. Returns the served
    certificate (DER) and the HTTP status."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection((ip, port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=server_name) as tls:
        certificate = tls.getpeercert(binary_form=True) or b""
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
        status = tls.recv(64).split(b" ", 2)
    return certificate, int(status[1]) if len(status) > 1 and status[1].isdigit() else 0


def _endpoints(local: Cluster) -> list[tuple[str, str, int, str]]:
    """(pod, IP, port, Service name) of every webhook and extender pod."""
    found = []
    for component, port in (("webhook", 8443), ("extender", 8080)):
        for pod in _component_pods(local, component):
            found.append((pod["metadata"]["name"], pod["status"]["podIP"], port,
                          f"{FULLNAME}-{component}.{NAMESPACE}.svc"))
    return found


def _probe_loop(env: Environment, probe: Probe, endpoints: list[tuple[str, str, int, str]], ca_pem: bytes) -> None:
    local, _ = _clusters(env)
    dry_run = yaml.safe_dump(_offloaded_pod("dry-run"))
    while not probe.stop.is_set():
        for pod, ip, port, name in endpoints:
            try:
                _, status = _served(ip, port, ca_pem, name)
                probe.check(f"{pod} /readyz", status == 200, f"HTTP {status}")
            except (OSError, ssl.SSLError) as exc:
                probe.check(f"{pod} /readyz", False, repr(exc))
        # the API server calls the webhook (through its Service) for a pod of an offloaded namespace
        created = local.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=dry_run, check=False)
        probe.check("pod create (the webhook)", created.returncode == 0 and C.TAINT_KEY in created.stdout, created.stderr)
        # the kubelet API (the vkubelet leader), for an offloaded pod
        logs = local.kubectl("logs", "steady-0", "-n", OFFLOADED, "--tail=1", check=False)
        probe.check("kubectl logs (the kubelet API)", logs.returncode == 0, logs.stderr)
        probe.stop.wait(0.5)


def test_the_certificate_renewal_job_replaces_the_served_certificates_without_a_failed_request(env: Environment):
    local, _ = _clusters(env)
    before = _offloaded(env)
    restarts = {q["metadata"]["name"]: _restarts(q) for c in ("webhook", "extender") for q in _component_pods(local, c)}
    secret = _tls_secret(local)
    ca_pem = secret["ca.crt"]
    endpoints = _endpoints(local)
    assert len(endpoints) == 2 * REPLICAS
    served_before = {pod: _served(ip, port, ca_pem, name)[0] for pod, ip, port, name in endpoints}
    probe = Probe()
    worker = threading.Thread(target=_probe_loop, args=(env, probe, endpoints, ca_pem), daemon=True)
    worker.start()
    try:
        job = f"renew-{int(time.time())}"
        local.kubectl("create", "job", f"--from=cronjob/{FULLNAME}-certs-renewal", job, "-n", NAMESPACE)
        local.kubectl("wait", "--for=condition=complete", f"job/{job}", "-n", NAMESPACE, "--timeout=240s", timeout=250)
        renewed = _tls_secret(local)
        assert renewed["ca.crt"] == ca_pem, "the renewal must keep the CA (the caBundles stay valid)"
        assert renewed["tls.crt"] != secret["tls.crt"], "the job did not reissue the serving certificate"
        # the kubelet updates the mounted Secret in place (about a minute) and the servers read
        # the files per connection: every pod serves the new certificate, none restarted

        def all_renewed():
            served = {pod: _served(ip, port, ca_pem, name)[0] for pod, ip, port, name in endpoints}
            return served if all(served[pod] != served_before[pod] for pod in served) else None

        served_after = wait_for(all_renewed, what="every webhook and extender pod serving the renewed certificate",
                                timeout=240, interval=3)
        assert len(set(served_after.values())) == 1  # the one renewed pair, everywhere
        time.sleep(5)  # and a few more rounds on the new certificate
    finally:
        probe.stop.set()
        worker.join(timeout=120)
    print(f"\ncertificate renewal: {probe.sent} requests during it, {len(probe.failures)} failed")
    assert probe.sent > 50, probe.sent
    assert probe.failures == [], probe.failures
    # no pod replaced, no container restarted: the servers took the new files as they run
    assert {q["metadata"]["name"]: _restarts(q) for c in ("webhook", "extender") for q in _component_pods(local, c)} \
        == restarts
    _unchanged(env, before, "the certificate renewal")


# --- 3. kill -9 of a leader ----------------------------------------------------------------------
def _container_pid(env: Environment, spec: ClusterSpec, pod: dict) -> int:
    """The PID, in the machine's PID namespace, of the pod's container's process (the one
    runc started, PID 1 of the container): containerd's task list on the pod's real node,
    by the container ID the kubelet reported."""
    [status] = pod["status"]["containerStatuses"]
    container_id = status["containerID"].split("://", 1)[1]
    listed = env.real_node(spec).ctr("tasks", "list")
    assert listed.returncode == 0, listed.stderr
    for line in listed.stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"container {container_id} of {pod['metadata']['name']} not in containerd's tasks:\n{listed.stdout}")


@pytest.mark.parametrize("component", ["vkubelet", "enforcer"])
def test_kill_9_of_the_leader_hands_over_to_the_standby_and_offloading_goes_on(env: Environment, component: str):
    local, remote = _clusters(env)
    topology = env.topology()
    side = LEADER_ELECTED[component]
    cluster, spec = (local, topology.local) if side == "local" else (remote, topology.remotes[0])
    before = _offloaded(env)
    lease = _lease(cluster, component, env)
    pods = {q["metadata"]["name"]: q for q in _component_pods(cluster, component)}
    assert len(pods) == REPLICAS
    leader = _holder_pod(lease)
    assert leader in pods, (leader, sorted(pods))
    [standby] = [name for name in pods if name != leader]
    assert _ready(pods[leader]) and not _ready(pods[standby]), "only the leader is Ready (docs/high-availability.md)"
    pid = _container_pid(env, spec, pods[leader])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"kube-offload" in cmdline[0] or any(part.endswith(b"kube-offload") for part in cmdline), cmdline
    assert component.encode() in cmdline, cmdline
    restarts = _restarts(pods[leader])
    transitions = lease["spec"].get("leaseTransitions", 0)

    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    taken = wait_for(lambda: _holder_pod(_lease(cluster, component, env)) == standby,
                     what=f"the {component} standby {standby} holding the Lease", timeout=90, interval=0.5)
    took = time.monotonic() - killed
    after = _lease(cluster, component, env)
    print(f"\n{component}: leader {leader} killed (pid {pid}); {standby} took the Lease after {took:.1f}s")
    assert taken and after["spec"]["leaseTransitions"] == transitions + 1
    # the killed container came back (the kubelet restarts it) as the standby
    wait_for(lambda: _restarts(cluster.kubectl_json("get", "pod", leader, "-n", NAMESPACE)) > restarts,
             what=f"{leader}'s container restarted", timeout=120, interval=2)
    wait_for(lambda: _ready(cluster.kubectl_json("get", "pod", standby, "-n", NAMESPACE)),
             what=f"the new leader {standby} Ready", timeout=120, interval=1)
    if component == "vkubelet":
        node = local.kubectl_json("get", "node", virtual_node_name(topology.remotes[0].cluster_id))
        new_ip = local.kubectl_json("get", "pod", standby, "-n", NAMESPACE)["status"]["podIP"]
        wait_for(lambda: {"type": "InternalIP", "address": new_ip} in local.kubectl_json(
                     "get", "node", node["metadata"]["name"])["status"]["addresses"],
                 what="the virtual node at the new leader's address", timeout=60, interval=1)
    # nothing lost, and offloading goes on: a new pod after the kill
    _offload_one(env, f"after-{component}-kill")
    _unchanged(env, before, f"the kill of the {component} leader")
    # kubectl logs through the (new) vkubelet leader's kubelet API
    assert "started" in local.kubectl("logs", f"after-{component}-kill", "-n", OFFLOADED, timeout=60).stdout


# --- 4. CSR serving certificates and an API server that verifies kubelets -------------------------
def _apiserver_argv(env: Environment) -> list[str]:
    plan = env.real_node(env.topology().local).plan
    [pid] = netns.pids_with_arg(f"--advertise-address={plan.host_ip}")
    return [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]


def _kwok_ca(env: Environment) -> Path:
    local, _ = _clusters(env)
    return local.kwok_workdir / "clusters" / local.name / "pki" / "ca.crt"


def _kubelet_api_certificate_verifies(ip: str, ca: Path) -> bool:
    """Whether the kubelet API at ``ip``:10250 presents a certificate for ``ip`` that
    ``ca`` signs (what kube-apiserver checks with --kubelet-certificate-authority)."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection((ip, 10250), timeout=5) as raw, context.wrap_socket(raw, server_hostname=ip):
            return True
    except ssl.SSLCertVerificationError:
        return False


def _vkubelet_leader_ip(env: Environment) -> str:
    local, _ = _clusters(env)
    leader = _holder_pod(_lease(local, "vkubelet", env))
    return local.kubectl_json("get", "pod", leader, "-n", NAMESPACE)["status"]["podIP"]


def _set_serving_mode(env: Environment, mode: str) -> None:
    """``helm upgrade`` of the local release with only the vkubelet's serving-certificate mode
    changed; returns once the Lease is held by a pod of the new ReplicaSet and the node
    is Ready at its address."""
    local, _ = _clusters(env)
    _helm_upgrade(env, local, p.LOCAL_CHART, "--set", f"vkubelet.servingCert.mode={mode}")

    def switched():
        pods = _component_pods(local, "vkubelet")
        if len(pods) != REPLICAS or not all(_running(q) for q in pods):
            return None
        if not all(f"--kubelet-serving-cert-mode={mode}" in q["spec"]["containers"][0]["args"] for q in pods):
            return None
        leader = _holder_pod(_lease(local, "vkubelet", env))
        return next((q for q in pods if q["metadata"]["name"] == leader and _ready(q)), None)

    leader = wait_for(switched, what=f"a vkubelet leader in {mode} mode", timeout=300, interval=3)
    node = virtual_node_name(env.topology().remotes[0].cluster_id)
    wait_for(lambda: {"type": "InternalIP", "address": leader["status"]["podIP"]} in local.kubectl_json(
                 "get", "node", node)["status"]["addresses"], what="the virtual node at the new leader's address",
             timeout=90, interval=1)
    local.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=120s", timeout=130)


def test_csr_serving_certificates_pass_an_api_server_that_verifies_kubelets_and_a_wrong_one_is_refused(env: Environment):
    local, _ = _clusters(env)
    before = _offloaded(env)
    argv = _apiserver_argv(env)
    ca = _kwok_ca(env)
    assert f"--kubelet-certificate-authority={ca}" in argv, [a for a in argv if "kubelet" in a]
    # The leader's certificate comes from the CSR API, signed by the cluster CA for its address.
    assert _kubelet_api_certificate_verifies(_vkubelet_leader_ip(env), ca)
    requests = local.kubectl_json("get", "certificatesigningrequests")["items"]
    ours = [r for r in requests if r["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
            and r["spec"]["username"] == f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-vkubelet"]
    assert ours and any(r["status"].get("certificate") for r in ours), [r["spec"]["username"] for r in requests]
    # logs and exec of an offloaded pod, through the verified kubelet API
    assert "started" in local.kubectl("logs", "steady-0", "-n", OFFLOADED, timeout=60).stdout
    exec_ = local.kubectl("exec", "steady-0", "-n", OFFLOADED, "--", "sh", "-c", "echo exec in $(hostname)", timeout=60)
    assert exec_.stdout.strip() == "exec in steady-0", exec_.stdout

    # A certificate the cluster CA did not sign: the vkubelet generating its own. The API
    # server refuses to talk to it, so logs and exec fail; the pods keep running.
    _set_serving_mode(env, "self-signed")
    assert not _kubelet_api_certificate_verifies(_vkubelet_leader_ip(env), ca)

    def refused():
        result = local.kubectl("logs", "steady-0", "-n", OFFLOADED, check=False, timeout=60)
        return result.stderr if result.returncode != 0 else None

    refusal = wait_for(refused, what="kubectl logs refused by the API server", timeout=60, interval=2)
    assert "x509" in refusal or "certificate" in refusal, refusal
    exec_refused = local.kubectl("exec", "steady-0", "-n", OFFLOADED, "--", "true", check=False, timeout=60)
    assert exec_refused.returncode != 0 and ("x509" in exec_refused.stderr or "certificate" in exec_refused.stderr)

    # and back: the CSR mode again, logs work again
    _set_serving_mode(env, "csr")
    assert _kubelet_api_certificate_verifies(_vkubelet_leader_ip(env), ca)
    wait_for(lambda: "started" in local.kubectl("logs", "steady-0", "-n", OFFLOADED, check=False, timeout=60).stdout,
             what="kubectl logs through the CSR certificate again", timeout=90, interval=2)
    _unchanged(env, before, "two upgrades of the vkubelet's serving-certificate mode")
