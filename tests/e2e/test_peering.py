"""`kube-offload peer` then `kube-offload unpeer`, end to end, with real Helm.

The local cluster is the shared session's (conftest.py); the remote is a SECOND remote
cluster made here (``e2e-peer``, id ``remote-peer``) and deleted at the end, so the
session's own remote stays as it is. Both commands run as the real CLI in a subprocess,
with the cached Helm (``--helm``) and the checkout's charts, against the admin kubeconfigs,
exactly as a user runs them.

What kwok cannot do, and what this module does instead (and only that):

- kwok only *pretends* to run the charts' pods, so the vkubelet Deployment the local chart
  creates cannot make its node Ready, nor the enforcer Deployment of the remote chart
  serve anything. While `peer` waits, this module starts both as processes with the
  exact arguments of those Deployments, under the ServiceAccounts the charts made for
  them, as the demo does (kube_offload_harness.chart_processes, which says what changes:
  addresses, serving certificates, mounted files). The vkubelet's remote kubeconfig is the
  one `peer` stored in Secret ``remote-peer-kubeconfig``, the service-account ``ca.crt``
  the namespace's ``kube-root-ca.crt``.
- A real pod's process ends before its pod object goes (the kubelet stops it first).
  The vkubelet's pod gets a finalizer here; when that pod is being deleted (unpeer
  removes the Deployment), this module stops the process and then drops the finalizer.
- The remote chart registers the ShadowPod webhook through a Service no loopback
  apiserver can reach; this module points that registration at the enforcer process by
  URL (as ``kube-offload enforcer configuration --url`` would) after `peer` installed it,
  and puts the chart's own registration back before `unpeer` (whose ``helm upgrade``
  would otherwise merge the chart's Service into the URL, which the API refuses). While
  the twin namespaces are deleted the webhook is therefore unreachable; deletions are not
  validated, so that is what a provider whose enforcer is down would see too.
- The local chart is installed with its webhook, extender and scheduler disabled
  (``--local-values``) under its own release name and namespace, so it does not break
  admission or scheduling for the session's other tests (the harness runs those as
  processes).

The consumer's identity is a bound token (TokenRequest) of 10 minutes, the API server's
minimum; the vkubelet's ``--remote-token-renew-fraction`` is 0.05 here (through the local
chart's value), so it renews every 30 seconds for the whole scenario: every step after
`peer` runs across rotations, and one test watches one happen.

The tests run in file order and build on each other, like one scenario.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import shadowpod
from kube_offload_harness import chart_processes
from kube_offload_harness.cluster import Cluster, ClusterSpec, Environment, free_port
from support.clusters import offloaded_namespace

REPO = Path(__file__).resolve().parents[2]
LOCAL_ID = "local"  # the session's local cluster id (default_topology)
REMOTE_ID = "remote-peer"
NAMESPACE = "kube-offload-peering"  # both releases' namespace
LOCAL_RELEASE = "kube-offload-peering"  # not the harness's "kube-offload": its identities may be applied by kubectl
REMOTE_RELEASE = "kube-offload"
NODE = f"{c.VIRTUAL_NODE_PREFIX}{REMOTE_ID}"
TENANT = c.tenant_namespace(LOCAL_ID)
DEMO = "peer-demo"
TWIN = f"{DEMO}-{LOCAL_ID}"
FINALIZER = "e2e.kube-offload.io/process-running"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
TIMEOUT = "3m"
# Events are the cluster's history and expire on their own; everything else counts.
NOT_COUNTED = {"events", "events.events.k8s.io"}
TOKEN_EXPIRATION = 600  # seconds: the shortest the API server grants
RENEW_FRACTION = 0.05  # renewed every 30 s
KUBECONFIG_SECRET = f"{REMOTE_ID}-kubeconfig"
# A slice (docs/slices.md) of the pool "general" the remote release grants the consumer
# (through --remote-values), on one of the remote's nodes.
SLICE = "web"
SLICE_FLAG = f"{SLICE}=general:cpu=500m,memory=1Gi,pods=4"
SLICE_NODE = c.slice_node_name(NODE, SLICE)
SLICE_DEPLOYMENT = f"{LOCAL_RELEASE}-vkubelet-{REMOTE_ID}-{SLICE}"


class Pair:
    """The session's local cluster, this module's remote, and what runs for them."""

    def __init__(self, env: Environment, local: Cluster, remote: Cluster) -> None:
        self.env = env
        self.local = local
        self.remote = remote
        self.values = env.state_dir / "peering-local-values.yaml"
        self.values.write_text(yaml.safe_dump({
            "webhook": {"enabled": False}, "extender": {"enabled": False}, "scheduler": {"enabled": False},
            # The session's harness already applied the chart's cluster-wide virtual
            # StorageClass, which a second release must not claim.
            "storage": {"virtualClass": {"create": False}},
            # ... and the per-pod opt-in RuntimeClass (a fixed name: pods name it), applied
            # with the harness's webhook registration.
            "optIn": {"runtimeClass": False},
            "vkubelet": {"remoteTokenRenewFraction": RENEW_FRACTION},
        }))
        self.remote_values = env.state_dir / "peering-remote-values.yaml"
        self.remote_values.write_text(yaml.safe_dump({
            "consumers": [{"name": LOCAL_ID, "pools": [{"name": "general", "nodeSelector": {"pool": "general"}}]}],
        }))
        self.stop_watching = threading.Event()
        self.processes: list[str] = []  # the vkubelet processes started, each tied to its Deployment's pod
        self.chart_client_config: list[dict] = []  # the remote chart's registration of the enforcer's webhooks

    # --- the CLI ---------------------------------------------------------------------------
    def argv(self, command: str, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "kube_offload.cli", command,
            "--local-kubeconfig", str(self.local.kubeconfig), "--remote-kubeconfig", str(self.remote.kubeconfig),
            "--local-cluster-id", LOCAL_ID, "--remote-cluster-id", REMOTE_ID,
            "--namespace", NAMESPACE, "--local-release", LOCAL_RELEASE, "--remote-release", REMOTE_RELEASE,
            "--helm", str(self.env.bins.helm), "--charts-dir", str(REPO / "charts"), "--timeout", TIMEOUT,
            *extra,
        ]

    def peer_args(self) -> list[str]:
        # The vkubelet runs as a process here (chart_processes), so the remote's loopback
        # address is what it reaches; peer refuses a loopback server it is not given.
        server = yaml.safe_load(self.remote.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return ["--remote-server", server, "--token-expiration", f"{TOKEN_EXPIRATION}s",
                "--quota", "cpu=2,memory=4Gi,pods=10", "--pod-security-level", "baseline",
                "--node-label", "topology.kubernetes.io/region=eu-peer", "--local-values", str(self.values),
                "--remote-values", str(self.remote_values),
                "--grant-priority-classes", "e2e-peer-batch", "--grant-storage-classes", "local-path"]

    def run(self, command: str, *extra: str, timeout: float = 400) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(command, *extra), capture_output=True, text=True, timeout=timeout,
                              env=self.env._process_env())

    def helm_revision(self, cluster: Cluster, release: str) -> int | None:
        out = subprocess.run(
            [str(self.env.bins.helm), "--kubeconfig", str(cluster.kubeconfig), "-n", NAMESPACE, "list", "--all",
             "--filter", f"^{release}$", "-o", "json"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        entries = json.loads(out or "[]")
        return int(entries[0]["revision"]) if entries else None

    # --- what kwok cannot run: the enforcer and the vkubelet as processes ---------------------
    def start_enforcer(self) -> int:
        """The remote chart's enforcer Deployment, as a process; returns its webhook port."""
        port = free_port()
        chart_processes.start_enforcer(self.env, self.remote, namespace=NAMESPACE, deployment="kube-offload-enforcer",
                                       process=f"enforcer-{REMOTE_ID}", webhook_port=port)
        return port

    def register_enforcer_webhook(self, port: int) -> None:
        self.chart_client_config = chart_processes.register_enforcer_webhook(self.env, self.remote, port)

    def restore_enforcer_webhook(self) -> None:
        """Back to the chart's own registration (a Service), so Helm's three-way merge
        on the next upgrade does not meet a url it never wrote."""
        chart_processes.set_enforcer_webhook_client_config(self.remote, self.chart_client_config)

    def start_vkubelet(self, pod: str, deployment: str = f"{LOCAL_RELEASE}-vkubelet-{REMOTE_ID}",
                       process: str = f"vkubelet-{REMOTE_ID}") -> None:
        chart_processes.start_vkubelet(
            self.env, self.local, namespace=NAMESPACE, deployment=deployment,
            process=process, kubelet_port=free_port(),
            service_account_ca=chart_processes.service_account_ca(self.env, self.local, NAMESPACE),
        )
        self.processes.append(process)
        threading.Thread(target=self._tie_process_to_pod, args=(pod, process), daemon=True).start()

    def _tie_process_to_pod(self, pod: str, process: str) -> None:
        """Stop the vkubelet process once its pod is being deleted, then let the pod go."""
        while not self.stop_watching.wait(0.3):
            result = self.local.kubectl("get", "pod", pod, "-n", NAMESPACE, "-o", "json", check=False)
            if result.returncode != 0 and "NotFound" not in result.stderr:
                continue
            if result.returncode == 0 and not json.loads(result.stdout)["metadata"].get("deletionTimestamp"):
                continue
            self.env.processes.stop(process)
            if result.returncode == 0:
                self.drop_finalizer(pod)
            return

    def drop_finalizer(self, pod: str) -> None:
        self.local.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=merge", "-p",
                           json.dumps({"metadata": {"finalizers": None}}), check=False)

    def vkubelet_pods(self, selector: str = f"{c.LABEL_CLUSTER_ID}={REMOTE_ID}") -> list[dict]:
        return self.local.kubectl_json(
            "get", "pods", "-n", NAMESPACE,
            "-l", f"app.kubernetes.io/instance={LOCAL_RELEASE},app.kubernetes.io/component=vkubelet,{selector}",
        )["items"]

    def stop(self) -> None:
        self.stop_watching.set()
        for name in (*self.processes, f"vkubelet-{REMOTE_ID}", f"enforcer-{REMOTE_ID}"):
            self.env.processes.stop(name)


@pytest.fixture(scope="module")
def pair(offload_env: Environment, local: Cluster) -> Iterator[Pair]:
    spec = ClusterSpec("e2e-peer", REMOTE_ID, "remote", nodes=2)
    remote = offload_env.cluster(spec)
    remote.create()
    remote.add_physical_nodes()
    # The pool "general" the remote values grant: one of its nodes.
    first = remote.kubectl_json("get", "nodes")["items"][0]["metadata"]["name"]
    remote.kubectl("label", "node", first, "pool=general")
    pair = Pair(offload_env, local, remote)
    try:
        yield pair
    finally:
        pair.stop()
        for item in [*pair.vkubelet_pods(), *pair.vkubelet_pods(f"{c.LABEL_SLICE_NODE}={SLICE_NODE}")]:
            pair.drop_finalizer(item["metadata"]["name"])
        local.kubectl("delete", "namespace", DEMO, "--ignore-not-found", "--wait=false", check=False)
        subprocess.run([str(offload_env.bins.helm), "--kubeconfig", str(local.kubeconfig), "-n", NAMESPACE,
                        "uninstall", LOCAL_RELEASE, "--ignore-not-found"], capture_output=True, timeout=120)
        local.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
        local.kubectl("delete", "node", NODE, SLICE_NODE, "--ignore-not-found", check=False)
        remote.delete()


# --- helpers --------------------------------------------------------------------------------
def stored_kubeconfig(local: Cluster) -> tuple[dict, dict]:
    """The kubeconfig Secret `peer` wrote (and the vkubelet renews), and its kubeconfig."""
    secret = local.kubectl_json("get", "secret", KUBECONFIG_SECRET, "-n", NAMESPACE)
    return secret, yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))


def as_kubeconfig(pair: "Pair", kubeconfig: dict, name: str) -> Path:
    path = pair.env.state_dir / f"peering-{name}.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def node_ready(local: Cluster) -> bool:
    result = local.kubectl("get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return result.returncode == 0 and result.stdout.strip() == "True"


def exists(cluster: Cluster, *what: str) -> bool:
    return cluster.kubectl("get", *what, check=False).returncode == 0


def consumer_footprint(remote: Cluster, twin_namespaces: set[str]) -> list[str]:
    """Every object in the remote cluster that belongs to consumer LOCAL_ID, of every
    listable kind: anything in its tenant or twin namespaces, anything carrying its origin
    or tenant label, its Consumer, and RBAC naming it or binding its ServiceAccount."""
    kinds = remote.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    kinds = [k for k in kinds if k not in NOT_COUNTED]
    items = remote.kubectl_json("get", ",".join(kinds), "-A", timeout=120).get("items", [])
    namespaces = {TENANT, *twin_namespaces}
    username = f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"
    found = []
    for item in items:
        meta = item.get("metadata") or {}
        labels = meta.get("labels") or {}
        kind = item.get("kind")
        subjects = item.get("subjects") or []
        mine = (
            meta.get("namespace") in namespaces
            or (kind == "Namespace" and meta.get("name") in namespaces)
            or labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == LOCAL_ID
            or labels.get(c.LABEL_TENANT) == LOCAL_ID
            or (kind == c.CONSUMER_KIND and meta.get("name") == LOCAL_ID)
            or (kind in ("ClusterRole", "ClusterRoleBinding") and f"consumer-{LOCAL_ID}" in meta.get("name", ""))
            or any(s.get("namespace") == TENANT or s.get("name") == username for s in subjects)
        )
        if mine:
            found.append(f"{kind} {meta.get('namespace', '')}/{meta.get('name')}")
    return sorted(found)


# --- the scenario ---------------------------------------------------------------------------
def test_dry_run_changes_nothing(pair: Pair):
    result = pair.run("peer", *pair.peer_args(), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "dry run: nothing was changed" in result.stdout
    assert "install chart kube-offload-remote" in result.stdout and "install chart kube-offload-local" in result.stdout
    assert pair.helm_revision(pair.remote, REMOTE_RELEASE) is None
    assert pair.helm_revision(pair.local, LOCAL_RELEASE) is None
    assert not exists(pair.remote, "namespace", TENANT)
    assert not exists(pair.local, "namespace", NAMESPACE)
    assert not exists(pair.local, "node", NODE)


def test_peer_makes_the_virtual_node_ready_and_a_pod_offloads(pair: Pair, wait):
    process = subprocess.Popen(pair.argv("peer", *pair.peer_args()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=pair.env._process_env())
    try:
        # The remote chart is installed: run its enforcer, reachable by its webhook.
        wait(lambda: exists(pair.remote, "deployment", "kube-offload-enforcer", "-n", NAMESPACE)
             or process.poll() is not None, timeout=180, what="the remote release's enforcer Deployment")
        assert process.poll() is None, process.communicate()
        port = pair.start_enforcer()
        pair.register_enforcer_webhook(port)
        # The local chart is installed: run its vkubelet, bound to the Deployment's pod.
        pods = wait(lambda: [p for p in pair.vkubelet_pods() if not p["metadata"].get("deletionTimestamp")]
                    or process.poll() is not None, timeout=180, what="the vkubelet Deployment's pod")
        assert process.poll() is None, process.communicate()
        pod = pods[0]["metadata"]["name"]
        pair.local.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=merge", "-p",
                           json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
        pair.start_vkubelet(pod)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, f"peer failed:\n{stdout}\n{stderr}"
    assert f"node {NODE} is Ready" in stdout and "peered:" in stdout
    assert node_ready(pair.local)

    # What peer built: the consumer on the remote with its quota, its kubeconfig locally.
    consumer = pair.remote.kubectl_json("get", "consumers.kube-offload.io", LOCAL_ID)
    assert consumer["spec"]["quota"] == {"cpu": "2", "memory": "4Gi", "pods": "10"}
    assert consumer["spec"]["nodeLabels"] == {"topology.kubernetes.io/region": "eu-peer"}
    # The grants reach the Consumer's provider policy; every other key shows its safe default.
    policy = consumer["spec"]["policy"]
    assert policy["pods"]["priorityClasses"] == ["e2e-peer-batch"] and policy["storage"]["classes"] == ["local-path"]
    assert policy["services"]["types"] == [] and policy["pods"]["tolerations"] == [] and policy["quotaMode"] == "requests"
    secret, kubeconfig = stored_kubeconfig(pair.local)
    assert kubeconfig["clusters"][0]["cluster"]["server"] == yaml.safe_load(pair.remote.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert set(kubeconfig["users"][0]["user"]) == {"token"}
    # No long-lived token: no service-account-token Secret in the tenant namespace...
    tenant_secrets = pair.remote.kubectl_json("get", "secrets", "-n", TENANT)["items"]
    assert [s["metadata"]["name"] for s in tenant_secrets if s.get("type") == "kubernetes.io/service-account-token"] == []
    # ...the stored token is a bound one, of the lifetime asked (its claims, and the
    # remote API server's own word: TokenReview), recorded on the Secret.
    token = kubeconfig["users"][0]["user"]["token"]
    lifetime = bt.lifetime(token)
    assert lifetime is not None and 0 < lifetime.seconds <= TOKEN_EXPIRATION, bt.claims(token)
    assert lifetime.expires > time.time()
    assert {c.ANNOTATION_TOKEN_ISSUED_AT, c.ANNOTATION_TOKEN_EXPIRES_AT} <= set(secret["metadata"].get("annotations") or {})
    review = json.loads(pair.remote.kubectl("create", "-o", "json", "-f", "-", input=json.dumps({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})).stdout)
    assert review["status"]["authenticated"] is True, review
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"

    # A pod of an offloaded namespace that selects this cluster runs there.
    offloaded_namespace(pair.local, DEMO, selector=f"{c.LABEL_CLUSTER_ID}={REMOTE_ID}")
    pair.local.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": DEMO},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                     "terminationGracePeriodSeconds": 5},
        }},
    })

    def running_on_node():
        items = pair.local.kubectl_json("get", "pods", "-n", DEMO, "-l", "app=web")["items"]
        return [p for p in items if p["spec"].get("nodeName") == NODE and (p.get("status") or {}).get("phase") == "Running"]

    wait(running_on_node, timeout=180, what=f"the web pod Running on {NODE}")
    shadowpods = pair.remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", TWIN)["items"]
    assert len(shadowpods) == 1
    remote_pods = pair.remote.kubectl_json("get", "pods", "-n", TWIN, "-l", f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_ID}")["items"]
    assert len(remote_pods) == 1


def test_peer_tells_the_provider_its_own_id_so_a_loop_is_refused(pair: Pair):
    """Issue 37, item 7: peer sets the remote chart's clusterId, so the enforcer (run from the
    chart's own Deployment arguments) refuses a pod whose offload chain already went through
    this provider, as the consumer writes it with the identity peer gave it."""
    values = json.loads(subprocess.run(
        [str(pair.env.bins.helm), "--kubeconfig", str(pair.remote.kubeconfig), "-n", NAMESPACE, "get", "values",
         REMOTE_RELEASE, "-o", "json"], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert values["clusterId"] == REMOTE_ID
    args = chart_processes.pod_template(pair.remote, NAMESPACE, "kube-offload-enforcer")["containers"][0]["args"]
    assert f"--cluster-id={REMOTE_ID}" in args, args
    _, kubeconfig = stored_kubeconfig(pair.local)
    consumer = as_kubeconfig(pair, kubeconfig, "consumer-loop")
    body = shadowpod.build_shadowpod(
        name="loop", namespace=TWIN,
        pod_metadata={"labels": {"app": "loop"}, "annotations": {c.ANNOTATION_OFFLOAD_CHAIN: f"{REMOTE_ID},{LOCAL_ID}"}},
        pod_spec={"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m"}}}]},
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID},
    )
    refused = pair.remote.kubectl_as(consumer, "create", "--dry-run=server", "-f", "-", input=json.dumps(body))
    assert refused.returncode != 0, refused.stdout
    assert f"{REMOTE_ID} -> {LOCAL_ID} -> {REMOTE_ID}" in refused.stderr, refused.stderr
    honest = json.loads(json.dumps(body))
    del honest["spec"]["pod"]["metadata"]["annotations"][c.ANNOTATION_OFFLOAD_CHAIN]
    admitted = pair.remote.kubectl_as(consumer, "create", "--dry-run=server", "-f", "-", input=json.dumps(honest))
    assert admitted.returncode == 0, admitted.stderr


def test_a_second_peer_changes_nothing(pair: Pair):
    before = (pair.helm_revision(pair.remote, REMOTE_RELEASE), pair.helm_revision(pair.local, LOCAL_RELEASE))
    result = pair.run("peer", *pair.peer_args())
    assert result.returncode == 0, result.stderr
    # The vkubelet keeps the token fresh, so peer plans no new one (nor anything else).
    assert "nothing to change" in result.stdout and "already peered" in result.stdout
    assert "request a bound token" not in result.stdout
    assert (pair.helm_revision(pair.remote, REMOTE_RELEASE), pair.helm_revision(pair.local, LOCAL_RELEASE)) == before


def test_the_token_rotates_while_pods_keep_running_and_offloading(pair: Pair, wait):
    """The leader renews the bound token at 5% of its 10 minutes: the Secret gets a fresher
    one, the running process switches to it (no restart), the offloaded pod stays Running
    and a new pod still offloads."""
    web = pair.local.kubectl_json("get", "pods", "-n", DEMO, "-l", "app=web")["items"]
    assert [(p["spec"].get("nodeName"), p["status"].get("phase")) for p in web] == [(NODE, "Running")]
    _, kubeconfig = stored_kubeconfig(pair.local)
    first = kubeconfig["users"][0]["user"]["token"]
    first_life = bt.lifetime(first)
    assert first_life is not None
    log = pair.env.log_path(f"vkubelet-{REMOTE_ID}")
    renewals_before = log.read_text().count("now using the token from a renewal")

    def rotated():
        token = stored_kubeconfig(pair.local)[1]["users"][0]["user"]["token"]
        life = bt.lifetime(token)
        return token if token != first and life is not None and life.expires > first_life.expires else None

    second = wait(rotated, timeout=TOKEN_EXPIRATION * RENEW_FRACTION + 60, what="the vkubelet to renew its token")
    assert bt.lifetime(second).seconds == first_life.seconds  # the same lifetime asked again
    wait(lambda: log.read_text().count("now using the token from a renewal") > renewals_before, timeout=30,
         what="the vkubelet process to switch to a renewed token")
    assert pair.local.kubectl_json("get", "secret", KUBECONFIG_SECRET, "-n", NAMESPACE)["metadata"]["annotations"][
        c.ANNOTATION_TOKEN_EXPIRES_AT] >= bt.rfc3339(bt.lifetime(second).expires)
    wait(lambda: pair.local.kubectl_json("get", "events", "-n", "default", "--field-selector",
                                         f"involvedObject.name={NODE},reason=RemoteCredentialsRenewed")["items"],
         timeout=60, what="a RemoteCredentialsRenewed Event on the node")
    # The renewed token works on the remote API server as the consumer.
    whoami = pair.remote.kubectl_as(as_kubeconfig(pair, stored_kubeconfig(pair.local)[1], "renewed"), "auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"

    # Nothing was lost: the same pod, still Running, never restarted; one ShadowPod.
    after = pair.local.kubectl_json("get", "pods", "-n", DEMO, "-l", "app=web")["items"]
    assert [(p["metadata"]["uid"], p["status"].get("phase")) for p in after] == [(web[0]["metadata"]["uid"], "Running")]
    assert len(pair.remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", TWIN)["items"]) == 1
    # A pod made after the rotation still offloads (the watches and writes carry the new token).
    pair.local.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-rotation", "namespace": DEMO},
        "spec": {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                 "terminationGracePeriodSeconds": 5},
    })
    wait(lambda: (pair.local.kubectl_json("get", "pod", "after-rotation", "-n", DEMO).get("status") or {}).get("phase") == "Running",
         timeout=120, what="a pod made after the rotation Running on the virtual node")
    assert pair.local.kubectl_json("get", "pod", "after-rotation", "-n", DEMO)["spec"]["nodeName"] == NODE
    assert len(pair.remote.kubectl_json("get", "shadowpods.kube-offload.io", "-n", TWIN)["items"]) == 2


def offload_status(pair: Pair) -> dict:
    """`kube-offload status -o json`'s row of this module's remote."""
    result = subprocess.run(
        [sys.executable, "-m", "kube_offload.cli", "status", "--kubeconfig", str(pair.local.kubeconfig),
         "--remote-kubeconfig", f"{REMOTE_ID}={pair.remote.kubeconfig}", "-o", "json"],
        capture_output=True, text=True, timeout=120, env=pair.env._process_env())
    assert "Traceback" not in result.stderr, result.stderr
    [row] = [r for r in json.loads(result.stdout)["remotes"] if r["cluster"] == REMOTE_ID]
    return row


def test_a_slice_removed_with_peer_leaves_nothing_behind(pair: Pair, wait):
    """Issue 41: `peer` without a slice it had (here `--slice none`) left the slice's node
    (NotReady: `kubectl offload status` unhealthy), its leader Lease and its OffloadSlice
    behind. Now it drains the node while its vkubelet runs, then deletes them all."""
    added = pair.run("peer", *pair.peer_args(), "--slice", SLICE_FLAG)
    assert added.returncode == 0, f"peer --slice failed:\n{added.stdout}\n{added.stderr}"
    assert f"local: upgrade release {NAMESPACE}/{LOCAL_RELEASE}" in added.stdout, added.stdout
    pods = wait(lambda: [p for p in pair.vkubelet_pods(f"{c.LABEL_SLICE_NODE}={SLICE_NODE}")
                         if not p["metadata"].get("deletionTimestamp")], timeout=120, what=f"the pod of {SLICE_DEPLOYMENT}")
    pod = pods[0]["metadata"]["name"]
    pair.local.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=merge", "-p",
                       json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
    pair.start_vkubelet(pod, deployment=SLICE_DEPLOYMENT, process=f"vkubelet-{REMOTE_ID}-{SLICE}")

    def accepted():
        obj = pair.remote.kubectl("get", f"{c.SLICE_PLURAL}.{c.DOMAIN}", SLICE, "-n", TENANT, "-o", "json", check=False)
        return obj.returncode == 0 and (json.loads(obj.stdout).get("status") or {}).get("phase") == c.SLICE_PHASE_ACCEPTED

    wait(accepted, timeout=120, what=f"OffloadSlice {SLICE} Accepted")
    wait(lambda: pair.local.kubectl("get", "node", SLICE_NODE, "-o", "jsonpath={.status.allocatable.pods}",
                                    check=False).stdout.strip() == "4", timeout=120, what=f"node {SLICE_NODE} sized")
    # A pod on the slice's node: the removal must take it home, not strand it.
    pair.local.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-slice", "namespace": DEMO},
        "spec": {"nodeSelector": {c.LABEL_SLICE: SLICE}, "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}}]},
    })
    wait(lambda: (pair.local.kubectl_json("get", "pod", "on-slice", "-n", DEMO).get("status") or {}).get("phase") == "Running",
         timeout=120, what=f"a pod Running on {SLICE_NODE}")
    assert pair.local.kubectl_json("get", "pod", "on-slice", "-n", DEMO)["spec"]["nodeName"] == SLICE_NODE
    assert exists(pair.remote, f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}", "on-slice", "-n", TWIN)
    leader_lease = c.vkubelet_leader_lease_name(REMOTE_ID, SLICE)
    wait(lambda: exists(pair.local, "lease", leader_lease, "-n", NAMESPACE), timeout=60, what=f"Lease {leader_lease}")
    assert exists(pair.local, "lease", SLICE_NODE, "-n", c.NODE_LEASE_NAMESPACE)
    assert [s["name"] for s in offload_status(pair)["slices"]] == [SLICE]

    removed = pair.run("peer", *pair.peer_args(), "--slice", "none")
    assert removed.returncode == 0, f"peer --slice none failed:\n{removed.stdout}\n{removed.stderr}"
    assert "local: evict the 1 pod(s) on the removed slices' node(s)" in removed.stdout, removed.stdout
    assert "deleted at once" not in removed.stdout, removed.stdout  # it left through its vkubelet

    assert not exists(pair.local, "pod", "on-slice", "-n", DEMO)
    assert not exists(pair.local, "deployment", SLICE_DEPLOYMENT, "-n", NAMESPACE)
    assert not exists(pair.local, "node", SLICE_NODE)
    assert not exists(pair.local, "lease", SLICE_NODE, "-n", c.NODE_LEASE_NAMESPACE)
    assert not exists(pair.local, "lease", leader_lease, "-n", NAMESPACE)
    assert exists(pair.local, "lease", c.vkubelet_leader_lease_name(REMOTE_ID), "-n", NAMESPACE)  # the peering's own stays
    assert not exists(pair.remote, f"{c.SLICE_PLURAL}.{c.DOMAIN}", SLICE, "-n", TENANT)
    assert pair.remote.kubectl_json("get", f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}", "-A", "-l", c.LABEL_SLICE)["items"] == []
    row = offload_status(pair)
    assert row["health"] == "healthy" and row["slices"] == [], (row["problems"], row["slices"])
    # The peering itself is untouched, and peering again changes nothing.
    assert node_ready(pair.local)
    again = pair.run("peer", *pair.peer_args())
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr


def test_unpeer_leaves_nothing_of_the_consumer(pair: Pair, wait):
    twins = {
        n["metadata"]["name"]
        for n in pair.remote.kubectl_json("get", "namespaces", "-l", f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_ID}")["items"]
    }
    assert TWIN in twins
    before = consumer_footprint(pair.remote, twins)
    # The listing sees every kind the consumer had, so "nothing left" below means something.
    for expected in (f"Namespace /{TENANT}", f"Namespace /{TWIN}", f"{c.CONSUMER_KIND} /{LOCAL_ID}",
                     f"ServiceAccount {TENANT}/{c.CONSUMER_SERVICE_ACCOUNT}",
                     f"TwinNamespace {TENANT}/{TWIN}", f"RoleBinding {TWIN}/{c.TWIN_ROLEBINDING_NAME}",
                     f"ClusterRole /{REMOTE_RELEASE}-consumer-{LOCAL_ID}", f"ClusterRoleBinding /{REMOTE_RELEASE}-consumer-{LOCAL_ID}"):
        assert expected in before, f"{expected} missing from {before}"
    assert any(item.startswith(f"ShadowPod {TWIN}/") for item in before), before
    assert any(item.startswith(f"Pod {TWIN}/") for item in before), before
    web_uid = pair.local.kubectl_json("get", "pods", "-n", DEMO, "-l", "app=web")["items"][0]["metadata"]["uid"]

    dry = pair.run("unpeer", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert consumer_footprint(pair.remote, twins) == before

    # The consumer's credentials as they are before unpeer: they work.
    credentials = as_kubeconfig(pair, stored_kubeconfig(pair.local)[1], "before-unpeer")
    assert pair.remote.kubectl_as(credentials, "get", "--raw", "/api").returncode == 0

    pair.restore_enforcer_webhook()
    result = pair.run("unpeer")
    assert result.returncode == 0, f"unpeer failed:\n{result.stdout}\n{result.stderr}"
    assert "unpeered:" in result.stdout
    # The identity was revoked explicitly, and said so; its token is refused from then on.
    assert f"revoked: ServiceAccount {TENANT}/{c.CONSUMER_SERVICE_ACCOUNT}" in result.stdout, result.stdout
    refused = pair.remote.kubectl_as(credentials, "get", "--raw", "/api")
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr, (refused.stdout, refused.stderr)
    # the pod left through its virtual kubelet (not deleted at the deadline)
    assert "deleted at once" not in result.stdout, result.stdout

    assert not exists(pair.local, "node", NODE)
    assert not exists(pair.local, "secret", f"{REMOTE_ID}-kubeconfig", "-n", NAMESPACE)
    assert not exists(pair.local, "deployment", f"{LOCAL_RELEASE}-vkubelet-{REMOTE_ID}", "-n", NAMESPACE)
    assert consumer_footprint(pair.remote, twins) == []
    # the pod went back through its controller: a new one, not on the gone node
    pods = wait(lambda: [p for p in pair.local.kubectl_json("get", "pods", "-n", DEMO, "-l", "app=web")["items"]
                         if p["metadata"]["uid"] != web_uid], timeout=60, what="the Deployment's replacement pod")
    assert all(p["spec"].get("nodeName") != NODE for p in pods)
    # the remote release stays (other consumers may use it), without this consumer
    values = json.loads(subprocess.run(
        [str(pair.env.bins.helm), "--kubeconfig", str(pair.remote.kubeconfig), "-n", NAMESPACE, "get", "values",
         REMOTE_RELEASE, "-o", "json"], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [e.get("name") for e in values.get("consumers") or []] == []

    again = pair.run("unpeer")
    assert again.returncode == 0, again.stderr
    assert "nothing to change" in again.stdout
