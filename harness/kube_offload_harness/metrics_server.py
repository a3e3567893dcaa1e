"""metrics-server in a loopback cluster, so that ``kubectl top`` works there: in the remote
cluster over kwok's simulated resource usage, in the local one over kwok's nodes *and the
virtual node's kubelet API* (which serves the offloaded pods' remote figures,
docs/metrics.md).

What a real cluster has and a kwokctl binary cluster lacks, made here:

* **usage to measure.** kwok serves a kubelet's ``/metrics/resource`` for its nodes when it
  is given a ``Metric`` (the kubelet's resource metrics, kwok's
  ``kustomize/metrics/resource``) and computes the figures from a
  ``ClusterResourceUsage`` (here: ``kwok.x-k8s.io/usage-cpu`` / ``usage-memory`` pod
  annotations, else 1m / 1Mi per container, kwok's ``usage-from-annotation``). Both go in
  a kwok config file the harness adds to the kwok controller's ``--config``; each kwok node
  carries ``metrics.k8s.io/resource-metrics-path`` (kwok serves one path per node), which
  metrics-server reads instead of ``/metrics/resource``.
* **metrics-server itself**, built from its Go module into the binary cache, run as a
  process on 127.0.0.1 under the ServiceAccount ``kube-system/metrics-server`` with the RBAC
  of metrics-server's own manifests (``system:metrics-server``: nodes/metrics get, pods and
  nodes read; ``system:auth-delegator``; the ``extension-apiserver-authentication``
  reader). Its token is what the virtual node's kubelet API authenticates (TokenReview) and
  authorizes (``get nodes/metrics``, SubjectAccessReview) when metrics-server scrapes it.
* **its registration.** The aggregator reaches an APIService only through a Service: an
  ``ExternalName`` Service naming 127.0.0.1 (as kwokctl does for its own metrics-server),
  the APIService's port being the process's. In a cluster with a real node (aggregator routing on)
  a selector-less Service and an EndpointSlice at the machine end of the node's link,
  where the process then listens (registration_objects). Its serving certificate, from a CA of its own
  given as the APIService's ``caBundle``, names ``metrics-server.kube-system.svc`` (the
  name the aggregator verifies) and 127.0.0.1.
* **kubelet certificates.** metrics-server verifies every kubelet it scrapes against one CA
  file: kwokctl's cluster CA (kwok serves with kwokctl's admin certificate, valid for
  127.0.0.1 and localhost; a real node's kubelet with a certificate that CA issued for
  the node's address, real_node.serving_identity) followed by the harness's loopback CA
  (the virtual node's).

Not like a production install: kwokctl sets no front-proxy CA (``--requestheader-*``), so
the aggregator's calls authenticate to metrics-server with kwokctl's admin client
certificate, and metrics-server authorizes that identity rather than the end user's. The
kube-apiserver has already authorized the end user (``get``/``list`` on
``metrics.k8s.io``) before it proxies, which is what the tests rely on.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kube_offload_harness.identities import ServiceAccountRef

if TYPE_CHECKING:  # cluster.py imports this module
    from kube_offload_harness.cluster import Cluster, Environment

KWOK_API_VERSION = "kwok.x-k8s.io/v1alpha1"
USAGE_CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
USAGE_MEMORY_ANNOTATION = "kwok.x-k8s.io/usage-memory"
# metrics-server scrapes this path of a node instead of /metrics/resource when it is set
# (metrics-server pkg/scraper/client/resource, AnnotationResourceMetricsPath).
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"

NAMESPACE = "kube-system"
NAME = "metrics-server"
SERVICE_ACCOUNT = ServiceAccountRef(NAMESPACE, NAME)
API_GROUP = "metrics.k8s.io"
APISERVICE = f"v1beta1.{API_GROUP}"
SERVICE_DNS_NAME = f"{NAME}.{NAMESPACE}.svc"  # what the aggregator verifies
# metrics-server's minimum; its kubelet timeout must stay below 90 % of it.
METRIC_RESOLUTION = "10s"
KUBELET_REQUEST_TIMEOUT = "5s"
# What the virtual kubelets in the harness run with (--kubelet-metrics-interval): a
# fraction of the resolution, so the local metrics-server sees every remote reading.
VKUBELET_METRICS_INTERVAL = "5s"


def process_name(cluster_id: str) -> str:
    return f"metrics-server-{cluster_id}"


def resource_metrics_path(node_name: str) -> str:
    """The path kwok serves a node's resource metrics at (the Metric's ``{nodeName}``)."""
    return f"/metrics/nodes/{node_name}/metrics/resource"


# --- kwok: usage to measure ------------------------------------------------------------------
def _metric(name: str, dimension: str, kind: str, help_text: str, value: str, labels: tuple[str, ...]) -> dict:
    sources = {"container": "container.name", "namespace": "pod.metadata.namespace", "pod": "pod.metadata.name"}
    metric: dict = {"name": name, "dimension": dimension, "kind": kind, "help": help_text, "value": value}
    if labels:
        metric["labels"] = [{"name": label, "value": sources[label]} for label in labels]
    return metric


def kwok_documents() -> list[dict]:
    """kwok's ``Metric`` serving a kubelet's resource metrics for every kwok node, and the
    ``ClusterResourceUsage`` that says how much each pod uses (kwok v0.8.0's own
    ``kustomize/metrics/resource`` and ``kustomize/metrics/usage``)."""
    container, pod = ("container", "namespace", "pod"), ("namespace", "pod")
    metrics = [
        _metric("scrape_error", "node", "gauge", "1 if there was an error while getting container metrics, 0 otherwise", "0", ()),
        _metric("container_start_time_seconds", "container", "gauge", "Start time of the container since unix epoch in seconds",
                "pod.SinceSecond()", container),
        _metric("container_cpu_usage_seconds_total", "container", "counter",
                "Cumulative cpu time consumed by the container in core-seconds", 'pod.CumulativeUsage("cpu", container.name)', container),
        _metric("container_memory_working_set_bytes", "container", "gauge", "Current working set of the container in bytes",
                'pod.Usage("memory", container.name)', container),
        _metric("pod_cpu_usage_seconds_total", "pod", "counter", "Cumulative cpu time consumed by the pod in core-seconds",
                'pod.CumulativeUsage("cpu")', pod),
        _metric("pod_memory_working_set_bytes", "pod", "gauge", "Current working set of the pod in bytes", 'pod.Usage("memory")', pod),
        _metric("node_cpu_usage_seconds_total", "node", "counter", "Cumulative cpu time consumed by the node in core-seconds",
                'node.CumulativeUsage("cpu")', ()),
        _metric("node_memory_working_set_bytes", "node", "gauge", "Current working set of the node in bytes", 'node.Usage("memory")', ()),
    ]
    usage = {
        resource: {"expression": (
            f'"{annotation}" in pod.metadata.annotations\n'
            f'? Quantity(pod.metadata.annotations["{annotation}"])\n'
            f': Quantity("{default}")\n'
        )}
        for resource, annotation, default in (
            ("cpu", USAGE_CPU_ANNOTATION, "1m"),
            ("memory", USAGE_MEMORY_ANNOTATION, "1Mi"),
        )
    }
    return [
        {"apiVersion": KWOK_API_VERSION, "kind": "Metric", "metadata": {"name": "metrics-resource"},
         "spec": {"path": resource_metrics_path("{nodeName}"), "metrics": metrics}},
        {"apiVersion": KWOK_API_VERSION, "kind": "ClusterResourceUsage", "metadata": {"name": "usage-from-annotation"},
         "spec": {"usages": [{"usage": usage}]}},
    ]


def write_kwok_config(state_dir: Path) -> Path:
    """The kwok config file with :func:`kwok_documents` (an extra ``--config`` of the kwok
    controller: kwokctl would keep a Metric in its own only with its metrics-server on)."""
    path = Path(state_dir) / "kwok-metrics-usage.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(kwok_documents()))
    return path


# --- metrics-server: identity, registration, process -----------------------------------------
def identity_objects() -> list[dict]:
    """metrics-server's ServiceAccount and RBAC, as its release manifests
    (``manifests/base/rbac.yaml``) make them."""
    rbac = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "system:metrics-server"}, "rules": [
            {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
        ]},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {
            "name": "system:aggregated-metrics-reader",
            "labels": {f"rbac.authorization.k8s.io/aggregate-to-{r}": "true" for r in ("view", "edit", "admin")},
        }, "rules": [{"apiGroups": [API_GROUP], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "system:metrics-server"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:metrics-server"},
         "subjects": subject},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "metrics-server:system:auth-delegator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
         "subjects": subject},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "metrics-server-auth-reader", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "extension-apiserver-authentication-reader"},
         "subjects": subject},
    ]


def registration_objects(port: int, ca_bundle_pem: bytes, *, address: str | None = None) -> list[dict]:
    """The Service and APIService the aggregator proxies through. Without ``address``: an
    ExternalName Service naming 127.0.0.1 (as kwokctl does for its own metrics-server).
    With it (a cluster with a real node, whose apiserver runs with
    ``--enable-aggregator-routing``): that resolver refuses ExternalName Services
    ("unsupported service type", k8s.io/apiserver pkg/util/proxy ResolveEndpoint) and
    dials an endpoint's IP, so a selector-less ClusterIP Service and an EndpointSlice
    naming ``address``, where metrics-server then listens."""
    if address is None:
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": NAMESPACE},
                   "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}}
        endpoints: list[dict] = []
    else:
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": NAMESPACE},
                   "spec": {"ports": [{"name": "https", "port": port, "targetPort": port}]}}
        endpoints = [{
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": NAME}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }]
    return [
        service,
        *endpoints,
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE}, "spec": {
            "group": API_GROUP, "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"name": NAME, "namespace": NAMESPACE, "port": port},
            "caBundle": base64.b64encode(ca_bundle_pem).decode(),
        }},
    ]


def argv(binary: Path, *, kubeconfig: Path, port: int, cert: Path, key: Path, kubelet_ca: Path | None,
         bind_address: str = "127.0.0.1") -> list[str]:
    """``kubelet_ca`` None: kubelets' certificates are not verified (kubelet_ca_verifiable)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={bind_address}",
        f"--secure-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        # InternalIP first: a real node publishes its address (172.31.250.x) as InternalIP
        # and its name as Hostname, which would be resolved through the machine's DNS
        # server (an address the harness must never send to). kwok's nodes publish only
        # Hostname "localhost", the virtual node its --node-address (127.0.0.1) as both.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--kubelet-use-node-status-port",
        f"--kubelet-certificate-authority={kubelet_ca}" if kubelet_ca is not None else "--kubelet-insecure-tls",
        f"--metric-resolution={METRIC_RESOLUTION}",
        f"--kubelet-request-timeout={KUBELET_REQUEST_TIMEOUT}",
    ]


def _write_certificates(directory: Path, kubelet_cas: list[Path]) -> tuple[Path, Path, Path, Path]:
    from certs import pki

    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.generate_ca("kube-offload loopback metrics-server CA", 30)
    serving = pki.issue_serving_cert(ca, dns_names=[SERVICE_DNS_NAME, "localhost"], ip_addresses=["127.0.0.1"], days=30)
    ca_path, cert, key, kubelet_ca = (directory / n for n in ("ca.crt", "tls.crt", "tls.key", "kubelet-ca.crt"))
    ca_path.write_bytes(ca.cert_pem)
    cert.write_bytes(serving.cert_pem)
    key.write_bytes(serving.key_pem)
    key.chmod(0o600)
    kubelet_ca.write_bytes(b"".join(path.read_bytes().rstrip(b"\n") + b"\n" for path in kubelet_cas))
    return ca_path, cert, key, kubelet_ca


def kubelet_ca_verifiable(chart_pods: bool, role: str) -> bool:
    """Whether every kubelet metrics-server scrapes in this cluster has a certificate from a
    CA the harness knows. Not the local cluster's when the charts run as pods: the vkubelet
    pod serves a certificate it generates at start-up for the address it gets (from a
    throw-away CA: vkubelet/kubeletapi/tls.py), as a kubelet without serverTLSBootstrap
    does, and metrics-server is then run as such clusters run it, --kubelet-insecure-tls
    (docs/real-nodes.md, "Not yet")."""
    return not (chart_pods and role == "local")


def start(env: "Environment", cluster: "Cluster", *, timeout: float = 90) -> None:
    """Run metrics-server for ``cluster`` and wait until its APIService is Available."""
    from kube_offload_harness.cluster import free_port

    name = process_name(cluster.spec.cluster_id)
    cluster.apply(identity_objects())
    kubeconfig = env.identity_kubeconfig(cluster, SERVICE_ACCOUNT)
    kwok_ca = cluster.kwok_workdir / "clusters" / cluster.name / "pki" / "ca.crt"
    ca, cert, key, kubelet_ca = _write_certificates(env.pki_dir / name, [kwok_ca, env.pki_dir / "ca.crt"])
    port = free_port()
    topology = env.topology()
    chart_pods = topology is not None and topology.chart_pods
    # A cluster with a real node routes the aggregator to endpoint IPs (registration_objects):
    # metrics-server listens on the machine end of the node's link, an address the harness
    # assigned, instead of loopback.
    address = None
    if cluster.spec.real_node_slot >= 0:
        from kube_offload_harness import real_node_config

        address = real_node_config.host_ip(cluster.spec.real_node_slot)
    env.processes.start(
        name, argv(env.bins.metrics_server, kubeconfig=kubeconfig, port=port, cert=cert, key=key,
                   kubelet_ca=kubelet_ca if kubelet_ca_verifiable(chart_pods, cluster.spec.role) else None,
                   bind_address=address or "127.0.0.1"),
        log=env.log_path(name), env=env._process_env(),
    )
    cluster.apply(registration_objects(port, ca.read_bytes(), address=address))
    deadline = time.monotonic() + timeout
    while True:
        record = env.processes.get(name)
        if record is None or not record.running():
            raise RuntimeError(f"{name} exited during start-up; see {env.log_path(name)}")
        done = cluster.kubectl("wait", "--for=condition=Available", f"apiservice/{APISERVICE}", "--timeout=5s", check=False)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"APIService {APISERVICE} of {cluster.name} not Available after {timeout}s: "
                               f"{done.stderr.strip()}; see {env.log_path(name)}")


def ensure_running(env: "Environment", cluster: "Cluster") -> None:
    """Start metrics-server for ``cluster`` unless it already serves (an environment
    reused, or `cluster up` started it); a failure is the ClusterError the callers report."""
    from kube_offload_harness.cluster import ClusterError

    record = env.processes.get(process_name(cluster.spec.cluster_id))
    if record is not None and record.running():
        return
    env.say(f"- starting metrics-server for {cluster.name}")
    try:
        start(env, cluster)
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from exc


def stop(env: "Environment", cluster: "Cluster") -> None:
    """Unregister first (an APIService whose server is gone blocks namespace deletion and
    makes every discovery call warn), then stop the process."""
    cluster.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "service", NAME, "-n", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "endpointslice", NAME, "-n", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
    env.processes.stop(process_name(cluster.spec.cluster_id))
