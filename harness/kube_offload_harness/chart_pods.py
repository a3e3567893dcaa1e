"""The charts' Deployments as real pods on the real nodes (docs/real-nodes.md, "The charts
as pods").

With ``Topology.chart_pods`` (implied by ``kube-offload cluster up --real-nodes true``)
nothing of kube-offload runs as a harness process: ``up`` installs the local chart
(webhook, extender, the chart's own kube-scheduler) with Helm and waits for its pods,
and ``kube-offload peer`` installs the remote chart (enforcer) and adds each remote's
vkubelet Deployment, as a user does. Only values differ from the chart's defaults, and
the pure functions below say which and why:

- every pod (hook Jobs included) selects the real node and tolerates its taint: kwok's
  nodes would only pretend to run them;
- one replica of each Deployment: two cores for everything on this machine (a topology's
  ``chart_values`` may ask for the charts' default two, as the day-2 tests do);
- the vkubelet trusts the CA of the apiserver's kubelet client certificate (the harness
  signs it with a CA of its own, kwokctl gives it none) from a ConfigMap it mounts, where
  kubeadm clusters use the cluster CA the chart's default names;
- the gateways (and the route agent) run on the real node too; ``peer --gateway``
  (fabric_gateways.peer_flags) sets their values and the vkubelet's remapping from the
  four CIDRs, as a user does when two clusters' pod CIDRs overlap (docs/networking.md).

How each caller reaches each pod: the apiserver calls the webhook through its Service
(resolved to the pod's address, which the machine routes to the node); the chart's
kube-scheduler, itself a pod, calls the extender at its Service name; the apiserver
reaches the vkubelet's kubelet API at the pod IP the vkubelet advertises as its node's
InternalIP; the vkubelet reaches the remote API server at the address ``peer
--remote-server`` names (the remote's apiserver on the machine end of its node link).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import yaml

from kube_offload import peering as p
from kube_offload_harness import oci_image, versions
from kube_offload_harness.real_node_config import REAL_NODE_KEY

if TYPE_CHECKING:  # cluster.py imports this module lazily; avoid the cycle at run time
    from kube_offload_harness.cluster import Cluster, Environment, Topology

NAMESPACE = p.DEFAULT_NAMESPACE
RELEASE = p.DEFAULT_RELEASE
# The vkubelet's --kubelet-client-ca in a pod: the harness's kubelet client CA, mounted.
KUBELET_CLIENT_CA_CONFIGMAP = "kube-offload-kubelet-client-ca"
KUBELET_CLIENT_CA_DIR = "/etc/kube-offload/kubelet-client-ca"
KUBELET_CLIENT_CA_KEY = "ca.crt"
# Sections of each chart's values that place a pod (nodeSelector, tolerations, affinity).
LOCAL_POD_SECTIONS = ("webhook", "extender", "scheduler", "vkubelet", "certificates", "gateway")
REMOTE_POD_SECTIONS = ("enforcer", "certificates", "homeAPIRelay", "gateway")
# Deployments of the local chart with a replicas value (the vkubelet's is per remote).
LOCAL_REPLICATED = ("webhook", "extender", "scheduler", "vkubelet")
HELM_TIMEOUT_SECONDS = 300
# The local chart's own kube-scheduler (scheduler.image): the stock image's name, made here
# from the kube-scheduler binary the control plane runs (a static Go binary, one layer).
KUBE_SCHEDULER_IMAGE = f"registry.k8s.io/kube-scheduler:{versions.KUBERNETES}"
KUBE_SCHEDULER_PATH = "usr/local/bin/kube-scheduler"  # the chart's command


# --- pure: values ---------------------------------------------------------------------------
def real_node_placement() -> dict[str, Any]:
    """Select the real node and tolerate its taint (real_node_config registers both)."""
    return {
        "nodeSelector": {REAL_NODE_KEY: "true"},
        "tolerations": [{"key": REAL_NODE_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    }


def local_values(local_cluster_id: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The local chart's values for pods on the real node (merged by ``peer`` with the
    remoteClusters entries it adds), ``overrides`` (Topology.chart_values["local"]) on top."""
    return p.deep_merge(_local_values(local_cluster_id), overrides or {})


def _local_values(local_cluster_id: str) -> dict[str, Any]:
    values: dict[str, Any] = {"localClusterId": local_cluster_id}
    for section in LOCAL_POD_SECTIONS:
        values[section] = dict(real_node_placement())
    for section in LOCAL_REPLICATED:
        values[section]["replicas"] = 1
    values["gateway"]["routeAgent"] = dict(real_node_placement())
    values["vkubelet"]["kubeletClientCA"] = f"{KUBELET_CLIENT_CA_DIR}/{KUBELET_CLIENT_CA_KEY}"
    values["vkubelet"]["extraVolumes"] = [
        {"name": "kubelet-client-ca", "configMap": {"name": KUBELET_CLIENT_CA_CONFIGMAP}}]
    values["vkubelet"]["extraVolumeMounts"] = [
        {"name": "kubelet-client-ca", "mountPath": KUBELET_CLIENT_CA_DIR, "readOnly": True}]
    return values


def remote_values(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The remote chart's values for pods on the real node, ``overrides``
    (Topology.chart_values["remote"]) on top."""
    values: dict[str, Any] = {section: dict(real_node_placement()) for section in REMOTE_POD_SECTIONS}
    values["enforcer"]["replicas"] = 1
    values["gateway"]["routeAgent"] = dict(real_node_placement())
    return p.deep_merge(values, overrides or {})


def verifies_kubelets(chart_values: Mapping[str, Any]) -> bool:
    """Whether the local apiserver verifies kubelets (``--kubelet-certificate-authority``):
    only when the vkubelet pods get a certificate the cluster CA signs, i.e. the local
    chart's ``vkubelet.servingCert.mode`` is ``csr``; the chart's default (self-signed)
    would be refused."""
    serving = ((chart_values.get("local") or {}).get("vkubelet") or {}).get("servingCert") or {}
    return serving.get("mode") == "csr"


def kube_scheduler_image_entries(binary: bytes) -> list[oci_image.Entry]:
    """The stock image's layout: the binary where the chart's command names it, executable
    by the chart's non-root user, and /tmp."""
    return [*oci_image.base_directories(), oci_image.Entry("usr/local", "dir", mode=0o755),
            oci_image.Entry("usr/local/bin", "dir", mode=0o755),
            oci_image.Entry(KUBE_SCHEDULER_PATH, data=binary, mode=0o755)]


def kubelet_client_ca_configmap(ca_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUBELET_CLIENT_CA_CONFIGMAP, "namespace": NAMESPACE},
        "data": {KUBELET_CLIENT_CA_KEY: ca_pem.decode()},
    }


def apiserver_url_for_pods(host_ip: str, port: int) -> str:
    """Where pods reach an apiserver of this machine: its port on the machine end of that
    cluster's node link (docs/real-nodes.md, "Addresses")."""
    return f"https://{host_ip}:{port}"


# --- I/O ------------------------------------------------------------------------------------
def kube_scheduler_image(binary: Path) -> bytes:
    layer = oci_image.layer_tar(kube_scheduler_image_entries(binary.read_bytes()))
    return oci_image.oci_archive(KUBE_SCHEDULER_IMAGE, [layer], oci_image.ImageConfig(entrypoint=[f"/{KUBE_SCHEDULER_PATH}"]))


def push_kube_scheduler_image(env: "Environment", topology: "Topology") -> None:
    """The chart's kube-scheduler image into the environment's registry, where containerd
    finds registry.k8s.io's images (registry.py)."""
    sent = env.registry(topology).push_archive(KUBE_SCHEDULER_IMAGE, kube_scheduler_image(env.bins.kube_scheduler))
    env.say(f"- registry: {KUBE_SCHEDULER_IMAGE} ({sent / 1e6:.1f} MB uploaded)")


def values_file(env: "Environment", name: str, values: dict[str, Any]) -> Path:
    path = env.state_dir / f"chart-pods-{name}-values.yaml"
    path.write_text("# kube-offload harness: the charts' pods on the real nodes (chart_pods.py)\n" + yaml.safe_dump(values))
    return path


def local_values_file(env: "Environment", topology: "Topology") -> Path:
    return values_file(env, "local", local_values(topology.local.cluster_id, topology.chart_values.get("local")))


def remote_values_file(env: "Environment", topology: "Topology") -> Path:
    return values_file(env, "remote", remote_values(topology.chart_values.get("remote")))


def install_local_chart(env: "Environment", topology: "Topology", local: "Cluster") -> None:
    """``helm upgrade --install`` the local chart (no remote clusters yet) and wait for
    its hook Jobs and Deployments; the release is the one ``peer`` upgrades later."""
    local.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                 kubelet_client_ca_configmap((env.pki_dir / "kubelet-client-ca.crt").read_bytes())])
    chart = chart_source(env, p.LOCAL_CHART, installed_version(topology))
    argv = [str(env.bins.helm), "--kubeconfig", str(local.kubeconfig), "--namespace", NAMESPACE,
            "upgrade", "--install", RELEASE, *chart, "--values", str(local_values_file(env, topology)),
            "--wait", "--timeout", f"{HELM_TIMEOUT_SECONDS}s"]
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HELM_TIMEOUT_SECONDS + 60, env=local.env())
    if result.returncode != 0:
        from kube_offload_harness.cluster import ClusterError

        raise ClusterError(f"`helm upgrade --install {RELEASE} {' '.join(chart)}` on {local.name} failed: "
                           f"{result.stderr.strip()[-3000:]}\n{describe_pods(local)}")
    env.say(f"- {local.name}: chart {p.LOCAL_CHART} installed as pods on the real node "
            f"({int(time.monotonic() - started)}s): {', '.join(pod_summary(local))}")


def chart_source(env: "Environment", chart: str, version: str | None = None) -> list[str]:
    """The chart argument(s) of ``helm upgrade``: the chart as ``up`` pushed it to the
    environment's registry, as users install it (peer: :func:`peer_flags`), at
    ``version`` (default: the checkout's)."""
    from kube_offload.peer import helm

    return helm.chart_args(env.chart_reference(chart), version or chart_version(), plain_http=True)


def chart_version() -> str:
    """The checkout's charts' version."""
    from kube_offload_harness import registry

    return registry.chart_version(registry.REPO / "charts" / p.LOCAL_CHART)


def installed_version(topology: "Topology") -> str:
    """The version ``up`` installs both charts at: the previous release's when the topology
    asks for one (previous_release.py), else the checkout's."""
    return topology.chart_version or chart_version()


def peer_flags(env: "Environment", topology: "Topology") -> list[tuple[str, str]]:
    """``kube-offload peer``'s flags to install both charts from the registry."""
    repository = env.chart_reference(p.LOCAL_CHART).rsplit("/", 1)[0]
    return [("--chart-repository", repository), ("--chart-version", installed_version(topology)), ("--plain-http", "true")]


def pods(cluster: "Cluster", namespace: str = NAMESPACE) -> list[dict]:
    return cluster.kubectl_json("get", "pods", "-n", namespace).get("items") or []


def pod_summary(cluster: "Cluster", namespace: str = NAMESPACE) -> list[str]:
    return [f"{pod['metadata']['name']} {pod['status'].get('phase')} on {pod['spec'].get('nodeName', '-')}"
            for pod in pods(cluster, namespace)]


def describe_pods(cluster: "Cluster", namespace: str = NAMESPACE) -> str:
    """What a person would look at when a chart's pods do not come up."""
    lines = []
    for pod in pods(cluster, namespace):
        statuses = pod["status"].get("containerStatuses") or []
        states = "; ".join(f"{s['name']}: {json.dumps(s.get('state'))}" for s in statuses)
        conditions = "; ".join(f"{c['type']}={c['status']} {c.get('message', '')}".strip()
                               for c in pod["status"].get("conditions") or [])
        lines.append(f"pod {pod['metadata']['name']} {pod['status'].get('phase')} on {pod['spec'].get('nodeName', '-')}: "
                     f"{states or conditions}")
    events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout
    return "\n".join(lines + ["events:", *events.splitlines()[-25:]])
