"""The charts run for real: kube-offload's components are pods of the charts' Deployments.

One environment for the module: a local and a remote cluster, each with a real node, made
by the code of `kube-offload cluster up --real-nodes true` (Topology.chart_pods): `up`
installs the local chart with Helm, `kube-offload peer` installs the remote chart and the
vkubelet Deployment (harness chart_pods.py, peer_driver.py). The remote has no kwok node,
so whatever it runs, it runs on its real node.

What is checked is what kwok and host processes could only pretend: the pods run from the
image on the real nodes under the charts' ServiceAccounts with a read-only root, their
probes pass, no harness process plays their part, the API server calls the webhook through
its Service, the chart's kube-scheduler calls the extender at its Service name, the virtual
node is Ready at the pod IP its vkubelet advertises, an offloaded pod's own output
comes back through `kubectl logs`, and a local pod calls it through a local Service across
the fabric, at the remapped address `kube-offload peer`'s values gave the vkubelet.
And the home API path (docs/home-api.md): the remote chart's relay runs on the remote real
node, an offloaded pod reaches its HOME API server with nothing but the standard in-cluster
configuration (and its home RBAC decides), through a rotation of its token; a pod that
opts out gets no token, and one asking for the provider's API gets it only once the
provider grants it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from typing import Iterator

import pytest

from kube_offload import constants as C
from kube_offload import peering as p
from kube_offload_harness import chart_pods, fabric_gateways as fabric
from kube_offload_harness.standin_recipe import BUSYBOX_IMAGE, PYTHON_IMAGE
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import virtual_node_name

from .conftest import charts_as_pods_topology, environment, local_and_remote
from support.waiting import wait_for

NAMESPACE = chart_pods.NAMESPACE
OFFLOADED = "offload-real"
GREETING = "kube-offload offloaded container says hello"
IMAGE = "ghcr.io/kube-offload/kube-offload:"  # the charts' default repository
# The charts' components and the processes the harness would otherwise run for them.
LOCAL_COMPONENTS = ("webhook", "extender", "scheduler", "vkubelet")
REMOTE_COMPONENTS = ("enforcer",)
PROCESS_ROLES = re.compile(r"^(webhook|extender|vkubelet-.*|enforcer-.*)$")
COMPONENT_COMMANDS = {"webhook", "extender", "vkubelet", "enforcer"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, request) -> Iterator[Environment]:
    yield from environment(tmp_path_factory, request, charts_as_pods_topology("cp"))


_clusters = local_and_remote


def _component_pods(cluster: Cluster, component: str) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}")["items"]


def _settled(cluster: Cluster, component: str) -> list[dict] | None:
    """The component's pods once each is Running and Ready, else None."""
    pods = _component_pods(cluster, component)
    return pods if pods and all(q["status"].get("phase") == "Running" and _ready(q) for q in pods) else None


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_the_components_run_as_pods_of_the_charts_on_the_real_nodes(env: Environment):
    topology = env.topology()
    for spec, components in ((topology.local, LOCAL_COMPONENTS), (topology.remotes[0], REMOTE_COMPONENTS)):
        cluster = env.cluster(spec)
        real_node = env.real_node(spec).plan
        for component in components:
            [deployment] = cluster.kubectl_json(
                "get", "deployments", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}")["items"]
            template = deployment["spec"]["template"]["spec"]
            account = cluster.kubectl_json("get", "serviceaccount", template["serviceAccountName"], "-n", NAMESPACE)
            # made by the chart's release, not by the harness
            assert account["metadata"]["annotations"]["meta.helm.sh/release-name"] == p.DEFAULT_RELEASE, component
            # `up` returns once the virtual node is Ready, which the vkubelet reports before the
            # kubelet's first readiness probe of its pod has passed (seen in CI: 10 s apart)
            pods = wait_for(lambda: _settled(cluster, component), what=f"{component}'s pods Running and Ready "  # noqa: B023 (called in this iteration)
                            f"on {cluster.name}", timeout=120, interval=2)
            assert len(pods) == deployment["spec"]["replicas"] == 1, (component, [q["metadata"]["name"] for q in pods])
            [pod] = pods
            where = f"{cluster.name} {pod['metadata']['name']}"
            assert pod["status"]["phase"] == "Running" and _ready(pod), (where, pod["status"])
            assert pod["spec"]["nodeName"] == real_node.node_name, where
            assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(real_node.pod_cidr), where
            assert pod["spec"]["serviceAccountName"] == template["serviceAccountName"], where
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, where
            assert pod["spec"]["securityContext"]["runAsUser"] == 65532, where
            [container] = pod["spec"]["containers"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
            # the probes the chart declares are the ones that made the pod Ready
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", where
            [status] = pod["status"]["containerStatuses"]
            assert status["ready"] and status["restartCount"] == 0, (where, status)
            if component != "scheduler":
                assert container["image"].startswith(IMAGE), where
                assert container["args"][0] == component, where
            else:
                assert container["image"] == chart_pods.KUBE_SCHEDULER_IMAGE, where


def test_no_harness_process_serves_a_component(env: Environment):
    records = env.processes.load()
    assert records, "the environment's process table is empty: the real nodes' own processes should be listed"
    roles = [r.name for r in records if PROCESS_ROLES.match(r.name)]
    assert roles == [], f"harness processes serving a component: {roles}"
    commands = [r.name for r in records
                if "kube_offload.cli" in r.argv and COMPONENT_COMMANDS & set(r.argv[r.argv.index("kube_offload.cli") + 1:][:1])]
    assert commands == [], f"harness processes running a component's command: {commands}"


def test_the_virtual_node_is_ready_at_the_address_its_vkubelet_pod_advertises(env: Environment):
    local, _ = _clusters(env)
    spec = env.topology().remotes[0]
    node = local.kubectl_json("get", "node", virtual_node_name(spec.cluster_id))
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]), node["status"]
    [pod] = _component_pods(local, "vkubelet")
    assert {"type": "InternalIP", "address": pod["status"]["podIP"]} in node["status"]["addresses"]
    # the kubelet endpoint the apiserver dials for logs/exec is the pod's own port
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250


def _offloaded_pod(name: str, command: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": OFFLOADED},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX_IMAGE,
                "command": ["sh", "-c", command],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    }


def _extender_filter_calls(local: Cluster) -> float:
    """The extender pod's count of answered filter calls, read through the API server's
    proxy to the pod (HTTPS, the chart's serving certificate)."""
    [pod] = _component_pods(local, "extender")
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    text = local.kubectl("get", "--raw",
                         f"/api/v1/namespaces/{NAMESPACE}/pods/https:{pod['metadata']['name']}:{port}/proxy/metrics").stdout
    total = 0.0
    for line in text.splitlines():
        if line.startswith("kube_offload_extender_requests_total{") and 'endpoint="filter"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_pod_is_mutated_by_the_webhook_and_placed_through_the_extender(env: Environment):
    local, _ = _clusters(env)
    spec = env.topology().remotes[0]
    local.kubectl("create", "namespace", OFFLOADED)
    # the validating webhook, through its Service, refuses a bad policy label
    refused = local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_POD_PLACEMENT}=Everywhere", check=False)
    assert refused.returncode != 0 and "denied the request" in refused.stderr, refused.stderr
    local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    before = _extender_filter_calls(local)
    local.apply(_offloaded_pod("placed", "echo placed; exec sleep 3600"))
    pod = local.kubectl_json("get", "pod", "placed", "-n", OFFLOADED)
    # the mutating webhook's work: the virtual node's toleration, its affinity, the
    # chart's scheduler
    assert any(t.get("key") == C.TAINT_KEY for t in pod["spec"]["tolerations"]), pod["spec"]["tolerations"]
    assert "nodeAffinity" in (pod["spec"].get("affinity") or {}), pod["spec"]
    assert pod["spec"]["schedulerName"] == "kube-offload-scheduler"
    node = virtual_node_name(spec.cluster_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not pod["spec"].get("nodeName"):
        time.sleep(1)
        pod = local.kubectl_json("get", "pod", "placed", "-n", OFFLOADED)
    assert pod["spec"].get("nodeName") == node, local.kubectl("describe", "pod", "placed", "-n", OFFLOADED).stdout
    scheduled = local.kubectl_json("get", "events", "-n", OFFLOADED, "--field-selector",
                                   "involvedObject.name=placed,reason=Scheduled")["items"]
    # (the remote scheduler's Scheduled event comes back too, reflected by the vkubelet)
    ours = [e for e in scheduled if (e.get("reportingComponent") or e["source"].get("component")) == "kube-offload-scheduler"]
    assert len(ours) == 1 and node in ours[0]["message"], scheduled
    # kube-scheduler asked the extender, at its Service name, before binding
    assert _extender_filter_calls(local) > before


def test_an_offloaded_pod_runs_on_the_remote_real_node_and_kubectl_logs_and_exec_reach_it(env: Environment):
    local, remote = _clusters(env)
    spec = env.topology().remotes[0]
    if not local.kubectl("get", "namespace", OFFLOADED, check=False).returncode == 0:
        local.kubectl("create", "namespace", OFFLOADED)
        local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    local.apply(_offloaded_pod("hello", f'echo "{GREETING} from $(hostname)"; exec sleep 3600'))
    local.kubectl("wait", "--for=condition=Ready", "pod/hello", "-n", OFFLOADED, "--timeout=180s", timeout=190)
    twin = f"{OFFLOADED}-{env.topology().local.cluster_id}"
    remote_pod = remote.kubectl_json("get", "pod", "hello", "-n", twin)  # the enforcer keeps the name
    assert remote_pod["spec"]["nodeName"] == env.real_node(spec).plan.node_name
    assert remote_pod["status"]["phase"] == "Running"
    deadline = time.monotonic() + 30
    logs = ""
    while time.monotonic() < deadline and GREETING not in logs:
        result = local.kubectl("logs", "hello", "-n", OFFLOADED, check=False)
        logs = result.stdout + result.stderr
        time.sleep(1)
    # printed by the container itself, on the remote's real node: its hostname is the
    # remote pod's, not the machine's
    assert f"{GREETING} from {remote_pod['metadata']['name']}" in logs, logs
    # kubectl exec, through the vkubelet pod's kubelet API, runs in the remote container:
    # its PID 1 is the pod's command and its address is in the remote node's pod range
    result = local.kubectl("exec", "hello", "-n", OFFLOADED, "--", "sh", "-c",
                           "tr '\\0' ' ' </proc/1/cmdline; echo; ip -4 addr show eth0 | grep inet", timeout=60)
    first, address = result.stdout.splitlines()[:2]
    assert first.strip() == "sleep 3600", result.stdout
    ip = address.split()[1].split("/")[0]  # "inet 172.31.k.n/24 brd ..."
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(env.real_node(spec).plan.pod_cidr), result.stdout
    assert remote_pod["status"]["podIP"] == ip


def test_a_local_pod_calls_the_offloaded_pod_through_its_service_at_the_address_peer_configured(env: Environment):
    """The vkubelet pod shows the offloaded pod at the fabric's remapped address (the values
    peer was given: chart_pods.peer_local_values_file); the local Service's EndpointSlice
    names it; a pod on the local real node resolves the Service's name and reads what the
    container on the remote's real node serves."""
    local, remote = _clusters(env)
    spec = env.topology().remotes[0]
    if not local.kubectl("get", "namespace", OFFLOADED, check=False).returncode == 0:
        local.kubectl("create", "namespace", OFFLOADED)
        local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    server = _offloaded_pod("served", "mkdir -p /www; echo served-by-$(hostname) > /www/index.html; exec httpd -f -v -p 8080 -h /www")
    server["metadata"]["labels"] = {"app": "served"}
    client = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "caller", "namespace": "default"},
              "spec": {**chart_pods.real_node_placement(), "terminationGracePeriodSeconds": 1,
                       "containers": [{"name": "main", "image": "python:3.11-slim",
                                       "command": ["python3", "-c", "import time; time.sleep(3600)"]}]}}
    local.apply([server, client, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "served", "namespace": OFFLOADED},
                                  "spec": {"selector": {"app": "served"}, "ports": [{"port": 80, "targetPort": 8080}]}}])
    local.kubectl("wait", "--for=condition=Ready", "pod/served", "-n", OFFLOADED, "--timeout=120s", timeout=130)
    local.kubectl("wait", "--for=condition=Ready", "pod/caller", "-n", "default", "--timeout=120s", timeout=130)
    remote_plan, local_plan = env.real_node(spec).plan, env.real_node(env.topology().local).plan
    local_ip = ipaddress.ip_address(local.kubectl_json("get", "pod", "served", "-n", OFFLOADED)["status"]["podIP"])
    twin = f"{OFFLOADED}-{env.topology().local.cluster_id}"
    real_ip = ipaddress.ip_address(remote.kubectl_json("get", "pod", "served", "-n", twin)["status"]["podIP"])
    remapped, real = ipaddress.ip_network(fabric.remapped_pod_cidr(remote_plan.slot)), ipaddress.ip_network(remote_plan.pod_cidr)
    assert real_ip in real and local_ip in remapped
    assert int(local_ip) - int(remapped.network_address) == int(real_ip) - int(real.network_address)
    call = ("import urllib.request as u; "
            f"print(u.urlopen('http://served.{OFFLOADED}.svc.{rc.CLUSTER_DOMAIN}', timeout=5).read().decode(), end='')")

    def answer():
        result = local.kubectl("exec", "-n", "default", "caller", "--", "python3", "-c", call, check=False)
        return result.stdout if result.returncode == 0 else None

    assert wait_for(answer, timeout=60, what="caller -> served (the local Service)").strip() == "served-by-served"
    # the container saw the call come from the caller's remapped address (httpd -v logs it)
    caller_ip = ipaddress.ip_address(local.kubectl_json("get", "pod", "caller", "-n", "default")["status"]["podIP"])
    local_real, local_remapped = ipaddress.ip_network(local_plan.pod_cidr), ipaddress.ip_network(fabric.remapped_pod_cidr(local_plan.slot))
    seen_as = local_remapped.network_address + (int(caller_ip) - int(local_real.network_address))
    assert f"[::ffff:{seen_as}]:" in local.kubectl("logs", "served", "-n", OFFLOADED).stdout


# The offloaded pod's side of the home API path (docs/home-api.md), with nothing but the
# standard in-cluster configuration, as client-go's rest.InClusterConfig and the official
# clients read it: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the server's
# certificate verified against ca.crt under that host name, the token file as the bearer.
HOME_API_CALL = """
import http.client, json, os, ssl, sys
pod = sys.argv[1]
host, port = os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
token = open(sa + "token").read().strip()
namespace = open(sa + "namespace").read().strip()
context = ssl.create_default_context(cafile=sa + "ca.crt")
def get(path):
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    connection.request("GET", path, headers={"Authorization": "Bearer " + token})
    answer = connection.getresponse()
    return answer.status, json.loads(answer.read() or b"{}")
status, own = get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
secrets, _ = get(f"/api/v1/namespaces/{namespace}/secrets")
print(json.dumps({"host": host, "port": port, "namespace": namespace, "own": status,
                  "nodeName": own.get("spec", {}).get("nodeName"), "uid": own.get("metadata", {}).get("uid"),
                  "secrets": secrets, "token": token[-16:]}))
"""


READ_HOSTS = "print(open('/etc/hosts').read())"  # the image has no cat


def _home_api_call(local: Cluster, pod: str) -> dict | None:
    result = local.kubectl("exec", pod, "-n", OFFLOADED, "--", "python3", "-c", HOME_API_CALL, pod, check=False, timeout=60)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode == 0 and lines:
        return json.loads(lines[-1])
    print(f"(not yet) {result.stdout}{result.stderr}")  # shown if the wait fails
    return None


def _python_pod(name: str, annotations: dict | None = None, service_account: str = "home-reader") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": OFFLOADED, "annotations": annotations or {}},
        "spec": {"serviceAccountName": service_account, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": PYTHON_IMAGE,
                                 "command": ["python3", "-c", "import time; time.sleep(3600)"],
                                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}]},
    }


def test_an_offloaded_pod_reads_its_own_pod_from_its_home_api_server_through_the_relay(env: Environment):
    local, remote = _clusters(env)
    spec = env.topology().remotes[0]
    tenant = C.tenant_namespace(env.topology().local.cluster_id)
    # The consumer's relay runs on the remote's real node, Ready, behind its Service.
    def relay_pods():
        pods = remote.kubectl_json("get", "pods", "-n", tenant, "-l", C.HOME_API_RELAY_SELECTOR)["items"]
        return pods if pods and all(q["status"].get("phase") == "Running" and _ready(q) for q in pods) else None

    [relay] = wait_for(relay_pods, what=f"the home API relay Running and Ready in {tenant}", timeout=120, interval=2)
    assert relay["spec"]["nodeName"] == env.real_node(spec).plan.node_name
    assert relay["spec"]["automountServiceAccountToken"] is False
    [container] = relay["spec"]["containers"]
    assert container["args"][0] == "relay" and container["image"].startswith(IMAGE)
    service = remote.kubectl_json("get", "service", C.HOME_API_SERVICE, "-n", tenant)
    address = service["spec"]["clusterIP"]
    # The home RBAC: the pod's ServiceAccount may read pods in its namespace, nothing else.
    if not local.kubectl("get", "namespace", OFFLOADED, check=False).returncode == 0:
        local.kubectl("create", "namespace", OFFLOADED)
        local.kubectl("label", "namespace", OFFLOADED, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    local.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "home-reader", "namespace": OFFLOADED}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "home-reader", "namespace": OFFLOADED},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "home-reader", "namespace": OFFLOADED},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "home-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "home-reader", "namespace": OFFLOADED}]},
    ])
    local.apply(_python_pod("home-api"))
    local.kubectl("wait", "--for=condition=Ready", "pod/home-api", "-n", OFFLOADED, "--timeout=180s", timeout=190)
    home = local.kubectl_json("get", "pod", "home-api", "-n", OFFLOADED)
    # The in-cluster configuration names the home API server: the standard files
    # (service-account reflection, docs/reflection.md), the environment pointing at
    # kubernetes.default.svc, and that name (with its short forms) resolving to the relay.
    files = local.kubectl("exec", "home-api", "-n", OFFLOADED, "--", "python3", "-c",
                          "import os; print(sorted(os.listdir('/var/run/secrets/kubernetes.io/serviceaccount')))",
                          timeout=60).stdout
    assert "'ca.crt'" in files and "'namespace'" in files and "'token'" in files, files
    hosts = local.kubectl("exec", "home-api", "-n", OFFLOADED, "--", "python3", "-c", READ_HOSTS, timeout=60).stdout
    aliased = {name for line in hosts.splitlines() if line.split()[:1] == [address] for name in line.split()[1:]}
    assert {"kubernetes", "kubernetes.default", "kubernetes.default.svc",
            f"kubernetes.default.svc.{rc.CLUSTER_DOMAIN}"} <= aliased, hosts

    answer = wait_for(lambda: _home_api_call(local, "home-api"), what="the home API server through the relay", timeout=90, interval=3)
    # TLS verified against the home CA as kubernetes.default.svc, the token accepted: the
    # pod reads its HOME Pod (its uid, bound to the virtual node), and the home Role decides.
    assert (answer["host"], answer["port"]) == ("kubernetes.default.svc", C.HOME_API_SERVICE_PORT), answer
    assert answer["namespace"] == OFFLOADED
    assert answer["own"] == 200 and answer["uid"] == home["metadata"]["uid"], answer
    assert answer["nodeName"] == virtual_node_name(spec.cluster_id), answer
    assert answer["secrets"] == 403, answer
    # ... and it went through the relay: paired with an uplink, counted on the relay pod.
    health = next(port["containerPort"] for port in container["ports"] if port["name"] == "health")
    metrics = remote.kubectl("get", "--raw", f"/api/v1/namespaces/{tenant}/pods/{relay['metadata']['name']}:{health}/proxy/metrics").stdout
    paired = [line for line in metrics.splitlines() if line.startswith('kube_offload_relay_connections_total{result="paired"}')]
    assert paired and float(paired[0].rsplit(" ", 1)[1]) >= 2, paired  # two requests, one connection each


def test_a_pod_that_opts_out_gets_no_home_token_and_no_home_address(env: Environment):
    local, _ = _clusters(env)
    local.apply(_python_pod("no-api", {C.ANNOTATION_API_SERVER: C.API_SERVER_DISABLED}))
    local.kubectl("wait", "--for=condition=Ready", "pod/no-api", "-n", OFFLOADED, "--timeout=180s", timeout=190)
    probe = ("import os, json; print(json.dumps({'host': os.environ.get('KUBERNETES_SERVICE_HOST'), "
             "'token': os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount/token')}))")
    seen = json.loads(local.kubectl("exec", "no-api", "-n", OFFLOADED, "--", "python3", "-c", probe, timeout=60).stdout)
    # no token at all, and the address the provider's kubelet gives (its own API server),
    # which this pod has no credential for
    assert seen["token"] is False, seen
    assert seen["host"] != "kubernetes.default.svc" and ipaddress.ip_address(seen["host"]), seen
    hosts = local.kubectl("exec", "no-api", "-n", OFFLOADED, "--", "python3", "-c", READ_HOSTS, timeout=60).stdout
    assert "kubernetes.default.svc" not in hosts, hosts


def test_the_pods_token_rotates_and_the_pod_keeps_reaching_its_home_api_server(env: Environment):
    local, _ = _clusters(env)
    # Tokens of 10 minutes (the TokenRequest minimum) renewed after 2 % of it, ~12 s: the
    # vkubelet Deployment changed as a user would, so its pod restarts with these.
    [deployment] = local.kubectl_json("get", "deployments", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=vkubelet")["items"]
    name = deployment["metadata"]["name"]
    local.kubectl("set", "env", f"deployment/{name}", "-n", NAMESPACE,
                  "KUBE_OFFLOAD_VKUBELET_REFLECT_TOKEN_EXPIRATION=10m",
                  "KUBE_OFFLOAD_VKUBELET_REFLECT_TOKEN_RENEW_AFTER_FRACTION=0.02")
    local.kubectl("rollout", "status", f"deployment/{name}", "-n", NAMESPACE, "--timeout=240s", timeout=250)
    node = virtual_node_name(env.topology().remotes[0].cluster_id)
    local.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=180s", timeout=190)
    first = wait_for(lambda: _home_api_call(local, "home-api"), what="the home API server after the vkubelet restart", timeout=120, interval=3)
    assert first["own"] == 200, first

    def rotated():
        answer = _home_api_call(local, "home-api")
        return answer if answer and answer["token"] != first["token"] else None

    # the remote kubelet refreshes the pod's Secret-backed volume within about a minute
    after = wait_for(rotated, what="a rotated token in the offloaded pod", timeout=240, interval=5)
    assert after["own"] == 200 and after["secrets"] == 403, after
    assert local.kubectl_json("get", "pod", "home-api", "-n", OFFLOADED)["status"]["phase"] == "Running"


# The provider's API, as the twin namespace's default account: its answer names who it took
# the caller for (a 403 from the provider's RBAC: that account has no role there).
PROVIDER_API_CALL = """
import http.client, json, os, ssl
host, port = os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
token = open(sa + "token").read().strip()
namespace = open(sa + "namespace").read().strip()
connection = http.client.HTTPSConnection(host, port, context=ssl.create_default_context(cafile=sa + "ca.crt"), timeout=10)
connection.request("GET", f"/api/v1/namespaces/{namespace}/secrets", headers={"Authorization": "Bearer " + token})
answer = connection.getresponse()
print(json.dumps({"host": host, "namespace": namespace, "status": answer.status, "message": json.loads(answer.read()).get("message", "")}))
"""


def test_a_pod_asking_for_the_providers_api_gets_it_only_once_the_provider_grants_it(env: Environment):
    local, remote = _clusters(env)
    consumer = env.topology().local.cluster_id
    twin = C.twin_namespace_name(OFFLOADED, consumer)
    local.apply(_python_pod("provider-api", {C.ANNOTATION_API_SERVER: C.API_SERVER_REMOTE}))

    def refused():
        events = local.kubectl_json("get", "events", "-n", OFFLOADED, "--field-selector", "involvedObject.name=provider-api")["items"]
        return [e for e in events if e["reason"] == "ProviderPolicyRefused" and "remoteAPIAccess" in e["message"]] or None

    # Without the grant it is not sent, and the user is told which key the provider lacks.
    wait_for(refused, what="ProviderPolicyRefused naming remoteAPIAccess", timeout=120, interval=3)
    assert local.kubectl_json("get", "pod", "provider-api", "-n", OFFLOADED)["status"]["phase"] == "Pending"
    # The provider grants it (an admin editing the Consumer): the pod runs, with the
    # provider's address and a token of the twin namespace's default account there.
    remote.kubectl("patch", f"{C.CONSUMER_PLURAL}.{C.DOMAIN}", consumer, "--type=merge", "-p",
                   json.dumps({"spec": {"policy": {"pods": {"remoteAPIAccess": True}}}}))
    local.kubectl("wait", "--for=condition=Ready", "pod/provider-api", "-n", OFFLOADED, "--timeout=240s", timeout=250)
    result = local.kubectl("exec", "provider-api", "-n", OFFLOADED, "--", "python3", "-c", PROVIDER_API_CALL, timeout=60).stdout
    answer = json.loads([line for line in result.splitlines() if line.startswith("{")][-1])
    assert answer["host"] != "kubernetes.default.svc" and ipaddress.ip_address(answer["host"]), answer
    assert answer["namespace"] == twin, answer
    assert answer["status"] == 403 and f"system:serviceaccount:{twin}:default" in answer["message"], answer


def test_an_offloaded_pods_token_secret_is_there_before_its_pod_no_failed_mount(env: Environment):
    """The service-account token of an offloaded pod is a Secret the vkubelet writes into
    the twin namespace (docs/reflection.md); the pod's ShadowPod waits for it, so the
    remote kubelet finds every volume at once: no FailedMount Warning on the provider,
    nor reflected back to the local pod. The first pods of a namespace just offloaded are
    the ones that raced their token (seen on every offloaded pod before)."""
    local, remote = _clusters(env)
    namespace = "mounts"
    local.kubectl("create", "namespace", namespace)
    local.kubectl("label", "namespace", namespace, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    wait_for(lambda: local.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
             what=f"the default ServiceAccount of {namespace}", timeout=60)
    names = ("mounted-0", "mounted-1")
    for name in names:
        pod = _offloaded_pod(name, "echo mounted; exec sleep 3600")
        pod["metadata"]["namespace"] = namespace
        local.apply(pod)
    for name in names:
        local.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=180s", timeout=190)
    twin = C.twin_namespace_name(namespace, env.topology().local.cluster_id)
    for name in names:
        mounted = remote.kubectl_json("get", "pod", name, "-n", twin)
        assert any((v.get("secret") or {}).get("secretName", "").startswith("kube-offload-token")
                   or any((s.get("secret") or {}).get("name", "").startswith("kube-offload-token")
                          for s in (v.get("projected") or {}).get("sources") or [])
                   for v in mounted["spec"]["volumes"]), mounted["spec"]["volumes"]
    # the token is there, as the pod's own files
    files = local.kubectl("exec", names[0], "-n", namespace, "--", "ls", "/var/run/secrets/kubernetes.io/serviceaccount",
                          timeout=60).stdout.split()
    assert "token" in files, files
    time.sleep(5)  # Events are written (and reflected) after the fact
    remote_events = remote.kubectl_json("get", "events", "-n", twin)["items"]
    local_events = local.kubectl_json("get", "events", "-n", namespace)["items"]
    failed = [f"{where}: {e['involvedObject'].get('name')}: {e['message']}"
              for where, events in (("remote", remote_events), ("local", local_events))
              for e in events if e["reason"] == "FailedMount"]
    assert failed == [], failed
    # (the check can fail: the Events are there, of other reasons)
    assert any(e["reason"] == "Started" and e["involvedObject"].get("name") in names for e in remote_events), \
        [e["reason"] for e in remote_events]
