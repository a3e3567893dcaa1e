"""Loopback Kubernetes clusters for the demo and the end-to-end tests.

One *local* cluster and N *remote* clusters, each a real kube-apiserver + etcd +
kube-scheduler + kube-controller-manager started by ``kwokctl --runtime binary`` from the
binaries built by :mod:`kube_offload_harness.binaries`, with kwok simulating physical nodes. On top
the harness starts our own components as plain processes: in the local cluster the webhook
(registered with the apiserver by URL) and the scheduler extender (in the scheduler's
configuration), one virtual kubelet per remote cluster; in each remote cluster the enforcer.

Everything lives under one state directory (``--state-dir``, default
``~/.local/state/kube-offload``)::

    kwok/clusters/<name>/kubeconfig.yaml   each cluster's kubeconfig (kwokctl's own)
    kubeconfig-<name>.yaml                 a copy, with a stable documented path
    pki/                                   CA + serving certificate for 127.0.0.1; the local
                                           apiserver's kubelet client certificate and its CA
    logs/<component>.log                   our components' logs
    environment-id                         names the run directory below

and what ``down`` needs to stop it, in a run directory OUTSIDE the state directory
(run_records.py: ``/run/kube-offload/environments/<id>/`` as root), so that an environment
whose state directory vanished (pytest's basetemp rotated away, deleted by hand) is torn
down by the next ``up`` (or ``kube-offload cluster reap``) instead of orphaned::

    processes.json, control-planes.json    PIDs of the processes we and kwokctl started
    topology.json                          what `up` created, for `status` and `down`

Nothing listens on anything but loopback, and the user's ~/.kube/config is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import yaml

import kube_offload
from kube_offload_harness.binaries import Binaries, NodeBinaries, binaries, ensure_binaries, ensure_node_binaries
from kube_offload_harness import identities, run_records, storage
from kube_offload_harness import fabric_gateways, metrics_server
from kube_offload.constants import slice_node_name
from kube_offload_harness.naming import virtual_node_name
from kube_offload_harness.processes import ProcessTable

if TYPE_CHECKING:
    from kube_offload_harness.real_node import RealNode
    from kube_offload_harness.registry import Registry

Say = Callable[[str], None]

# The product package ships the CRD (one source for the chart, the enforcer and this harness).
SHADOWPOD_CRD = Path(kube_offload.__file__).parent / "manifests" / "shadowpod-crd.yaml"
REGION_LABEL = "topology.kubernetes.io/region"
PROVIDER_LABEL = "example.com/provider"  # an operator-chosen label, not part of our contract
REMOTE_REGIONS = ("eu-west", "eu-south", "us-east", "ap-south")
REMOTE_PROVIDERS = ("acme", "globex", "initech", "umbrella")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"
# The local apiserver's identity towards kubelets (--kubelet-client-certificate), named as
# kubeadm names it; the virtual kubelet authenticates it by --kubelet-client-ca and
# authorizes it by SubjectAccessReview, so RBAC binds it like a kubeadm cluster does.
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
KUBELET_API_ADMIN_ROLE = "system:kubelet-api-admin"  # bootstrap ClusterRole: nodes/proxy, log, stats...
# Pod IP remapping (docs/virtual-kubelet.md, "Pod IP remapping"): kwok hands out pod IPs
# from the same range in every cluster, so offloaded pods would show local pods' IPs.
# Each remote's pods are shown locally in their own 10.(100+index).0.0/16, and every remote
# sees the local pods in LOCAL_POD_CIDR_REMAPPED.
KWOK_POD_CIDR = "10.0.0.0/16"
LOCAL_POD_CIDR_REMAPPED = "10.200.0.0/16"
# How the remote clusters are connected (Topology.peering).
PEERING_HARNESS = "harness"  # identities applied from `helm template`, processes started here (e2e)
PEERING_CLI = "cli"  # left unconnected by `up`: `kube-offload peer` connects them (the demo)


def remote_pod_cidr_remapped(topology: "Topology", spec: "ClusterSpec") -> str:
    """Where the local cluster shows the pods of remote ``spec`` (one range per remote; a
    further cluster of a chain, Topology.further, in 10.150+.0.0/16, shown by the middle)."""
    remotes = [remote.cluster_id for remote in topology.remotes]
    if spec.cluster_id in remotes:
        return f"10.{100 + remotes.index(spec.cluster_id)}.0.0/16"
    return f"10.{150 + [f.cluster_id for f in topology.further].index(spec.cluster_id)}.0.0/16"


def pods_on_real_node(topology: "Topology", spec: "ClusterSpec") -> bool:
    """Whether remote ``spec``'s pods run on its real node (untainted, no kwok node beside
    it: validate_topology), whose pod network the fabric joins to the local real node's."""
    return topology.real_nodes and spec.role == "remote" and not spec.real_node_tainted


def local_pod_cidr_remapped(topology: "Topology", spec: "ClusterSpec") -> str:
    """Where remote ``spec`` reaches the local cluster's pods: the gateways' remapped CIDR of
    the local real node when the remote's pods run on its real node (fabric_gateways.py), kwok's
    stand-in range otherwise. The vkubelet translates reflected endpoints into it and the
    provider policy admits it (identities.e2e_policy), so both follow from here."""
    if pods_on_real_node(topology, spec):
        return fabric_gateways.remapped_pod_cidr(topology.local.real_node_slot)
    return LOCAL_POD_CIDR_REMAPPED


def pod_ip_remapping_args(topology: "Topology", spec: "ClusterSpec") -> list[str]:
    """The vkubelet flags of remote ``spec``'s pod IP remapping when its pods run on kwok's
    nodes (both clusters hand out KWOK_POD_CIDR; no data plane behind the addresses)."""
    return [
        "--remote-pod-cidr", KWOK_POD_CIDR, "--remote-pod-cidr-remapped", remote_pod_cidr_remapped(topology, spec),
        "--local-pod-cidr", KWOK_POD_CIDR, "--local-pod-cidr-remapped", LOCAL_POD_CIDR_REMAPPED,
    ]


class ClusterError(RuntimeError):
    """Bringing up or driving a loopback cluster failed; the message says what and where."""


# The provider's node label that makes a pool in the harness's topologies (NodePool): the
# Consumer's pool selects its nodes by it, as a provider's admin would by any label.
POOL_LABEL = "pool"


@dataclass
class NodePool:
    """remote: kwok nodes of one provider pool (docs/slices.md), beside the cluster's
    ``nodes``, and the pool of that name in the Consumer's spec.pools (selecting them by
    ``pool=<name>``), so a consumer may ask slices of it."""

    name: str
    nodes: int = 1
    # Extra labels of the pool's nodes (the pool label is always there).
    labels: dict[str, str] = field(default_factory=dict)
    # Extended resources of each node on top of the cluster's cpu/memory/pods, e.g.
    # {"nvidia.com/gpu": "4"}.
    resources: dict[str, str] = field(default_factory=dict)
    # Labels the pool suggests for its slices' virtual nodes (Consumer spec.pools[].nodeLabels).
    node_labels: dict[str, str] = field(default_factory=dict)

    def node_names(self, cluster_id: str) -> list[str]:
        return [f"{cluster_id}-{self.name}-node-{i}" for i in range(self.nodes)]

    def consumer_pool(self) -> dict:
        """The pool as the remote chart's consumers[].pools[] writes it."""
        pool: dict = {"name": self.name, "nodeSelector": {POOL_LABEL: self.name}}
        if self.node_labels:
            pool["nodeLabels"] = dict(self.node_labels)
        return pool


@dataclass
class SliceSpec:
    """remote: one slice the local cluster asks of this remote, served by its own vkubelet
    process (``kube-offload vkubelet --slice``, docs/slices.md)."""

    value: str  # the --slice value, NAME=POOL:RESOURCE=QUANTITY,...
    kubelet_port: int = 0  # its virtual node's kubelet API port on 127.0.0.1
    health_port: int = 0  # its --health-bind port

    @property
    def name(self) -> str:
        return self.value.partition("=")[0]


@dataclass
class ClusterSpec:
    name: str  # kwokctl cluster name (also the kubeconfig context, prefixed "kwok-")
    cluster_id: str
    role: str  # "local" | "remote"
    nodes: int = 2
    node_cpu: str = "4"
    node_memory: str = "16Gi"
    node_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)  # remote: labels of its virtual node
    kubelet_port: int = 0  # remote: the virtual node's kubelet API port on 127.0.0.1
    enforcer_webhook_port: int = 0  # remote: the enforcer's ShadowPod webhook on 127.0.0.1
    # remote: the health/metrics ports (--health-bind) of its vkubelet and its enforcer
    vkubelet_health_port: int = 0
    enforcer_health_port: int = 0
    # The slot of this cluster's real node (real_node_config.NodePlan), -1: none.
    real_node_slot: int = -1
    # The real node carries the kube-offload.io/real-node NoSchedule taint (the default: only
    # pods that ask land there). False only on a remote with no kwok node (nodes=0): its
    # real node is where every offloaded pod lands, and the vkubelet is told the fabric's
    # addresses (pods_on_real_node).
    real_node_tainted: bool = True
    # The slot whose pod CIDR its real node hands out (-1: its own): the local node's for a
    # remote whose pods run on its real node when Topology.overlapping_pod_cidrs.
    real_node_pod_cidr_slot: int = -1
    # local, real nodes, charts as processes: the apiserver verifies kubelets' serving
    # certificates, which the cluster CA signs (real_node_config.kubelet_verification_flags).
    verify_kubelets: bool = False
    # The apiserver writes an audit log (AUDIT_POLICY) to kwok/clusters/<name>/logs/audit.log:
    # the benchmarks attribute requests to clients with it (bench/apirequests.py). Off by
    # default: a JSON line per request costs the apiserver CPU and disk.
    audit: bool = False
    # remote: node pools (kwok nodes + the Consumer's spec.pools), the Consumer's quota
    # (resource -> quantity; empty: none) and the slices the local cluster asks of it.
    pools: list[NodePool] = field(default_factory=list)
    quota: dict[str, str] = field(default_factory=dict)
    slices: list[SliceSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Read back from topology.json as plain objects.
        self.pools = [p if isinstance(p, NodePool) else NodePool(**p) for p in self.pools]
        self.slices = [s if isinstance(s, SliceSpec) else SliceSpec(**s) for s in self.slices]
    # The middle cluster of a chain (Topology.further): its own webhook's and scheduler
    # extender's ports on 127.0.0.1, as the local cluster has in Topology.
    webhook_port: int = 0
    extender_port: int = 0


# Every request once, when its response is complete, with who sent it and on what
# (Metadata: no bodies). Watches are logged when they end, as apiserver_request_total
# counts them, so the two sources agree over a window.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}


@dataclass
class Topology:
    prefix: str
    local: ClusterSpec
    remotes: list[ClusterSpec]
    webhook_port: int = 0
    extender_port: int = 0
    virtual_kubelets: bool = True
    # Run every component under the ServiceAccount its chart creates (identities.py).
    # False only for debugging RBAC itself: the same objects are installed, but the
    # components get the admin kubeconfigs.
    chart_identities: bool = True
    # PEERING_HARNESS: `up` wires each remote itself, and tests may restart the processes
    # with other flags. PEERING_CLI: `up` leaves the remotes bare (no CRDs, no enforcer, no
    # virtual kubelet) for `kube-offload peer` (kube_offload_harness.peer_driver).
    peering: str = PEERING_HARNESS
    # One real node (kubelet + containerd in a network namespace, real_node.py) per
    # cluster, beside kwok's (docs/real-nodes.md).
    real_nodes: bool = False
    # With real nodes: the port of the environment's OCI registry (registry.py) on
    # 127.0.0.1, which every real node pulls its images from.
    registry_port: int = 0
    # The charts' Deployments run as pods on the real nodes, installed with Helm by `up`
    # (local chart) and `kube-offload peer` (remote chart, vkubelets); no component runs
    # as a harness process (chart_pods.py). Needs real_nodes.
    chart_pods: bool = False
    # Each remote whose pods run on its real node hands out the local real node's pod
    # CIDR, as clusters built alike do: the fabric's remapping is what tells them apart
    # (pod_cidr_overlap.py, docs/real-nodes.md "Overlapping pod CIDRs").
    overlapping_pod_cidrs: bool = False
    # A chain (docs/multihop.md): clusters the first remote offloads to in its turn. Each is
    # a remote of remotes[0], which then runs the local components too (its webhook, its
    # scheduler with the extender, one virtual kubelet per further cluster) besides its
    # enforcer: A (local) -> B (remotes[0]) -> C (further[0]). Each further cluster admits
    # B as its consumer, with the tests' provider policy; whether B may offload A's pods
    # further is A's Consumer on B (spec.furtherOffloading, off as everywhere: tests set it).
    further: list[ClusterSpec] = field(default_factory=list)
    # The charts as pods: more values for each chart, merged over chart_pods' own:
    # {"local": {...}, "remote": {...}}, e.g. the charts' default two replicas and the
    # vkubelet's CSR serving certificate (which makes the local apiserver verify kubelets:
    # chart_pods.verifies_kubelets), as tests/realnode/test_day2.py asks.
    chart_values: dict = field(default_factory=dict)
    # The charts as pods: install first the previous release made from this git revision
    # ("" none; previous_release.py: its image and charts), for a test to upgrade.
    previous_release: str = ""
    # Set by up: the version both charts were installed at ("" the checkout's).
    chart_version: str = ""

    def clusters(self) -> list[ClusterSpec]:
        return [self.local, *self.remotes, *self.further]

    @property
    def middle(self) -> ClusterSpec | None:
        """The cluster that is both a provider (of local) and a consumer (of further)."""
        return self.remotes[0] if self.further and self.remotes else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Topology":
        data = json.loads(text)
        return cls(
            prefix=data["prefix"],
            local=ClusterSpec(**data["local"]),
            remotes=[ClusterSpec(**r) for r in data["remotes"]],
            webhook_port=data.get("webhook_port", 0),
            extender_port=data.get("extender_port", 0),
            virtual_kubelets=data.get("virtual_kubelets", True),
            chart_identities=data.get("chart_identities", True),
            peering=data.get("peering", PEERING_HARNESS),
            real_nodes=data.get("real_nodes", False),
            registry_port=data.get("registry_port", 0),
            chart_pods=data.get("chart_pods", False),
            overlapping_pod_cidrs=data.get("overlapping_pod_cidrs", False),
            further=[ClusterSpec(**f) for f in data.get("further", [])],
            chart_values=data.get("chart_values", {}),
            previous_release=data.get("previous_release", ""),
            chart_version=data.get("chart_version", ""),
        )


def default_topology(
    *,
    prefix: str = "ko",
    remotes: int = 1,
    local_nodes: int = 2,
    remote_nodes: int = 2,
    node_cpu: str = "4",
    node_memory: str = "16Gi",
    node_pods: int = 110,
) -> Topology:
    """A local cluster and ``remotes`` remote clusters labelled with distinct regions and
    providers, so cluster selectors have something to choose between."""
    local = ClusterSpec(f"{prefix}-local", "local", "local", local_nodes, node_cpu, node_memory, node_pods)
    remote_specs = []
    for index in range(remotes):
        cluster_id = f"remote-{index + 1}"
        labels = {
            REGION_LABEL: REMOTE_REGIONS[index % len(REMOTE_REGIONS)],
            PROVIDER_LABEL: REMOTE_PROVIDERS[index % len(REMOTE_PROVIDERS)],
        }
        remote_specs.append(
            ClusterSpec(f"{prefix}-{cluster_id}", cluster_id, "remote", remote_nodes, node_cpu, node_memory, node_pods, labels)
        )
    return Topology(prefix=prefix, local=local, remotes=remote_specs)


def chain_topology(*, prefix: str = "chain", nodes: int = 2) -> Topology:
    """Three clusters in a chain (docs/multihop.md): ``a`` (local) offloads to ``b``, which
    offloads to ``c``. Every cluster has ``nodes`` kwok nodes; b's and c's virtual nodes
    carry distinct regions."""
    local = ClusterSpec(f"{prefix}-a", "a", "local", nodes)
    middle = ClusterSpec(f"{prefix}-b", "b", "remote", nodes, labels={REGION_LABEL: REMOTE_REGIONS[0]})
    far = ClusterSpec(f"{prefix}-c", "c", "remote", nodes, labels={REGION_LABEL: REMOTE_REGIONS[1 % len(REMOTE_REGIONS)]})
    return Topology(prefix=prefix, local=local, remotes=[middle], further=[far])


def validate_topology(topology: Topology) -> None:
    """Refuse shapes whose addresses would lie: an untainted real node only on a remote,
    with real nodes on, and alone there (with kwok nodes beside it the remote scheduler
    would place offloaded pods on either, and kwok's pod addresses are not the fabric's)."""
    for spec in topology.clusters():
        if spec.real_node_tainted:
            continue
        where = f"cluster {spec.name}: real_node_tainted=False"
        if not topology.real_nodes:
            raise ClusterError(f"{where} needs real_nodes=True (`--real-nodes true`)")
        if spec.role != "remote":
            raise ClusterError(f"{where} is for a remote cluster only: local pods would land on the real node unasked")
        if spec.nodes:
            raise ClusterError(f"{where} needs nodes=0 (it has {spec.nodes} kwok nodes): offloaded pods must all "
                               "land on the real node, whose pod network the fabric joins")
    if topology.further and (topology.real_nodes or topology.chart_pods or topology.peering != PEERING_HARNESS
                             or not topology.remotes or not topology.virtual_kubelets):
        raise ClusterError("a chain (further clusters) is wired by the harness on kwok nodes only: it needs a remote, "
                           "virtual kubelets and peering=harness, and no real nodes or chart pods")
    if topology.overlapping_pod_cidrs and not any(pods_on_real_node(topology, s) for s in topology.remotes):
        raise ClusterError("overlapping_pod_cidrs needs a remote whose pods run on its real node "
                           "(real_nodes=True, real_node_tainted=False, nodes=0): only their addresses are remapped")


def real_pods_topology(*, prefix: str = "ko") -> Topology:
    """A local cluster and one remote, each with a real node, the remote's untainted and
    alone (no kwok node): every offloaded pod runs there as a container, its addresses
    reached through the fabric (docs/real-nodes.md, "Offloaded pods on a remote's real
    node"). The local cluster keeps one kwok node beside its tainted real node. Both real
    nodes hand out the same pod CIDR (overlapping_pod_cidrs)."""
    topology = default_topology(prefix=prefix, remotes=1, local_nodes=1, remote_nodes=0)
    topology.real_nodes = True
    topology.remotes[0].real_node_tainted = False
    topology.overlapping_pod_cidrs = True
    return topology


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kube-offload"


_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port, never one this process handed out before: a topology's ports
    are all chosen before any is bound, and the kernel may give the port of a socket just
    closed to the next bind (seen: the webhook's port handed out again as an enforcer's
    health port)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise ClusterError("no free loopback port that was not handed out already")


def kwok_node_manifest(name: str, spec: ClusterSpec, pool: NodePool | None = None) -> dict:
    """A physical node simulated by kwok (kwokctl's controller manages nodes annotated
    ``kwok.x-k8s.io/node=fake``; our virtual node carries no such annotation); a node of
    ``pool`` carries its labels and extended resources too."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    if spec.role == "remote":
        labels.update({k: v for k, v in spec.labels.items() if k == REGION_LABEL})
    resources = {"cpu": spec.node_cpu, "memory": spec.node_memory, "pods": str(spec.node_pods)}
    if pool is not None:
        labels.update({**pool.labels, POOL_LABEL: pool.name})
        resources.update(pool.resources)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                # Where kwok serves this node's resource metrics (metrics_server.py).
                metrics_server.RESOURCE_METRICS_PATH_ANNOTATION: metrics_server.resource_metrics_path(name),
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


class Cluster:
    """A handle on one running kwokctl cluster: kubectl, apply, stop/start."""

    def __init__(self, spec: ClusterSpec, *, state_dir: Path, bins: Binaries,
                 control_planes: ProcessTable | None = None) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.bins = bins
        # Where the PIDs of this cluster's control-plane processes are recorded as well as
        # in kwokctl's pid files (under the state dir): an Environment's run directory
        # (run_records.py), so that they can be stopped when the state dir is gone.
        self.control_planes = control_planes

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kwok_workdir(self) -> Path:
        return self.state_dir / "kwok"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / f"kubeconfig-{self.name}.yaml"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        env["KWOK_KUBECTL_BINARY"] = str(self.bins.kubectl)
        env["PATH"] = os.pathsep.join([str(self.bins.kubectl.parent), str(self.bins.kwokctl.parent), env.get("PATH", "")])
        # The apiserver's outbound transports (webhook, aggregated APIs) honour proxy
        # variables; our webhook is on loopback and must never go through a proxy.
        no_proxy = "127.0.0.1,localhost"
        env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [no_proxy, env.get("NO_PROXY", "")]))
        return env

    @property
    def kwokctl_config(self) -> Path:
        """kwokctl binds every component to 0.0.0.0 by default; ours stay on loopback.
        Each apiserver also gets a kubelet client certificate (kwokctl passes none).
        One file per role, since kwokctl reads only the first KwokctlConfiguration, and one
        of its own for a cluster with a real node (its advertise address is its slot's)."""
        local = self.spec.role == "local"
        real_node = self.spec.real_node_slot >= 0
        if real_node:
            path = self.state_dir / f"kwokctl-config-{self.name}.yaml"
        else:
            path = self.state_dir / ("kwokctl-config-local.yaml" if local else "kwokctl-config.yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        patches = [{
            # The binary runtime starts kwok with --manage-all-nodes=true: it would hold
            # our virtual node's lease and write the status of the pods bound to it.
            # Only nodes annotated kwok.x-k8s.io/node=fake (our physical ones) are kwok's.
            "name": "kwok-controller",
            "extraArgs": [
                {"key": "manage-all-nodes", "value": "false", "override": True},
                # override only replaces an existing flag; this one is new, so appended
                {"key": "manage-nodes-with-annotation-selector", "value": KWOK_NODE_SELECTOR, "override": False},
                # A second config file: the stage completing local-path-provisioner's
                # helper pods, on top of kwokctl's default stages (storage.py).
                {"key": "config", "value": str(storage.write_stages(self.state_dir)), "override": False},
                # Simulated resource usage and each node's /metrics/resource, for
                # metrics-server and kubectl top (metrics_server.py).
                {"key": "config", "value": str(metrics_server.write_kwok_config(self.state_dir)), "override": False},
            ],
        }]
        # One instance each, and nothing restarts them: with leader election on, a
        # test that freezes the API server (SIGSTOP) for longer than the renew deadline
        # (10 s, easily reached on a loaded machine) makes them exit for good, and every
        # later test waits for a ServiceAccount or a scheduling that never comes.
        # (kube-scheduler honours the flag even with --config.)
        apiserver_verification: dict[str, str] = {}
        signing: dict[str, str] = {}
        if real_node and self.spec.verify_kubelets:
            from kube_offload_harness import real_node_config

            apiserver_verification, signing = real_node_config.kubelet_verification_flags(
                self.kwok_workdir / "clusters" / self.name / "pki")
        for component in ("kube-controller-manager", "kube-scheduler"):
            extra = signing if component == "kube-controller-manager" else {}
            patches.append({
                "name": component,
                "extraArgs": [{"key": "leader-elect", "value": "false", "override": False},
                              *({"key": k, "value": v, "override": False} for k, v in extra.items())],
            })
        # Every apiserver of an Environment presents the harness's kubelet client
        # certificate: the virtual node's kubelet API (local) and a real node's kubelet
        # (any cluster, real_node.py) refuse anonymous callers. A cluster a test makes on
        # its own (test_enforcer.py, the informer tests) has no such certificate and only
        # kwok's nodes: naming a missing file would keep its apiserver from starting.
        pki = self.state_dir / "pki"
        client_cert = pki / "apiserver-kubelet-client.crt"
        kubelet_client = [
            {"key": "kubelet-client-certificate", "value": str(client_cert), "override": False},
            {"key": "kubelet-client-key", "value": str(pki / "apiserver-kubelet-client.key"), "override": False},
        ] if client_cert.exists() else []
        patches.append({
            "name": "kube-apiserver",
            "extraArgs": [
                *kubelet_client,
                # kubeadm's order. The default puts Hostname first, and a real node's
                # hostname is resolved through the machine's DNS server: an address the
                # harness must never send to. kwok's and the virtual nodes report an
                # InternalIP already (127.0.0.1), so they are reached as before.
                {"key": "kubelet-preferred-address-types", "value": "InternalIP,ExternalIP,Hostname", "override": False},
                *self._real_node_apiserver_args(),
                *({"key": k, "value": v, "override": False} for k, v in apiserver_verification.items()),
            ],
        })
        options: dict[str, object] = {"bindAddress": "127.0.0.1"}
        if real_node:
            from kube_offload_harness import real_node_config

            # Read when kwokctl makes the cluster's pki (create): pods verify the serving
            # certificate at 10.0.0.1 and at the advertised address.
            options["kubeApiserverCertSANs"] = real_node_config.apiserver_cert_sans(self.spec.real_node_slot)
        content = yaml.safe_dump({
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
            "componentsPatches": patches,
        })
        # Rewritten when it differs: a state dir kept from an older harness must not keep
        # flags this one relies on (the kubelet client certificate, InternalIP first).
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
        return path

    def _real_node_apiserver_args(self) -> list[dict]:
        """docs/real-nodes.md, "Addresses": only a cluster with a real node (its pods call
        the apiserver, the apiserver calls its pods); the others keep kwokctl's flags."""
        if self.spec.real_node_slot < 0:
            return []
        from kube_offload_harness import real_node_config

        flags = real_node_config.apiserver_flags(self.spec.real_node_slot)
        return [{"key": key, "value": value, "override": False} for key, value in flags.items()]

    def kwokctl(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bins.kwokctl), "--config", str(self.kwokctl_config), *args]
        result = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ClusterError(f"`kwokctl {' '.join(args)}` failed (exit {result.returncode}):\n{result.stderr.strip()[-3000:]}")
        return result

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        argv = [str(self.bins.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False, env=self.env())
        if check and result.returncode != 0:
            raise ClusterError(f"`kubectl {' '.join(args)}` on {self.name} failed (exit {result.returncode}): {result.stderr.strip()}")
        return result

    def kubectl_as(
        self, kubeconfig: Path, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """kubectl against this cluster as another identity (``kubeconfig``: a ServiceAccount's,
        e.g. the consumer's), never raising: tests read the refusal."""
        argv = [str(self.bins.kubectl), "--kubeconfig", str(kubeconfig), *args]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False, env=self.env())

    def kubectl_json(self, *args: str, timeout: float = 60) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def apply(self, objects: dict | Iterable[dict]) -> None:
        items = [objects] if isinstance(objects, dict) else list(objects)
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(items))

    def create(self, scheduler_config: Path | None = None, extra_configs: Iterable[Path] = ()) -> None:
        b = self.bins
        configs: list[str] = []
        for extra in extra_configs:
            configs += ["--config", str(extra)]
        args = [*configs,
            "create", "cluster", "--name", self.name, "--runtime", "binary", "--kubeconfig", "",
            "--kube-admission=true", "--kube-authorization=true",
            "--kube-apiserver-binary", str(b.kube_apiserver),
            "--kube-controller-manager-binary", str(b.kube_controller_manager),
            "--kube-scheduler-binary", str(b.kube_scheduler),
            "--kwok-controller-binary", str(b.kwok),
            "--etcd-binary", str(b.etcd),
            "--wait", "120s",
        ]
        if scheduler_config is not None:
            args += ["--kube-scheduler-config", str(scheduler_config)]
        if self.spec.audit:
            policy = self.state_dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(AUDIT_POLICY))
            args += ["--kube-audit-policy", str(policy)]
        self.kwokctl(*args, timeout=300)
        source = self.kwok_workdir / "clusters" / self.name / "kubeconfig.yaml"
        if not source.exists():
            raise ClusterError(f"kwokctl created {self.name} but wrote no kubeconfig at {source}")
        shutil.copyfile(source, self.kubeconfig)
        self.record_control_plane()
        self.wait_ready()
        self.wait_controller_manager()

    @property
    def pids_dir(self) -> Path:
        """kwokctl's pid files of this cluster's components (``<component>.pid``)."""
        return self.kwok_workdir / "clusters" / self.name / "pids"

    def record_control_plane(self) -> list[str]:
        """Record the PIDs kwokctl wrote for this cluster's components (etcd, kube-apiserver,
        ...) in ``control_planes``, under ``<cluster>/<component>``; returns the names."""
        if self.control_planes is None or not self.pids_dir.is_dir():
            return []
        recorded = []
        for pid_file in sorted(self.pids_dir.glob("*.pid")):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            name = f"{self.name}/{pid_file.stem}"
            log = self.pids_dir.parent / "logs" / f"{pid_file.stem}.log"  # kwokctl's
            if self.control_planes.adopt(name, pid, log=str(log)):
                recorded.append(name)
        return recorded

    def stop_control_plane(self) -> list[str]:
        """Stop this cluster's recorded control-plane processes by PID (each only while it
        runs the recorded command line): what is left to do when kwokctl's own records went
        with the state dir."""
        if self.control_planes is None:
            return []
        return self.control_planes.stop_prefixed(f"{self.name}/")

    def wait_controller_manager(self, timeout: float = 60) -> None:
        """Wait until the controller manager works: its ServiceAccount controller has made
        ``default/default``. kube-controller-manager gives the apiserver a fixed few
        seconds to be healthy at start and exits otherwise, which a loaded 2-core machine
        sees; nobody restarts it, and every new namespace then lacks its ``default``
        ServiceAccount, so the provider refuses every pod. Restarted once (the whole
        control plane: kwokctl starts and stops clusters, not components)."""
        for attempt in (1, 2):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False, timeout=10).returncode == 0:
                    return
                time.sleep(1)
            if attempt == 1:
                self.stop()
                self.start()
        raise ClusterError(
            f"the kube-controller-manager of {self.name} made no default ServiceAccount in {timeout:.0f}s, "
            f"even after a restart; see its log under {self.kwok_workdir / 'clusters' / self.name / 'logs'}"
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            result = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
            if result.returncode == 0 and result.stdout.strip() == "ok":
                return
            last = result.stderr.strip() or result.stdout.strip()
            time.sleep(0.5)
        raise ClusterError(f"apiserver of {self.name} not ready after {timeout}s: {last}")

    def exists(self) -> bool:
        return (self.kwok_workdir / "clusters" / self.name / "kwok.yaml").exists()

    def stop(self) -> None:
        """Stop every control-plane process of this cluster (its data stays)."""
        self.kwokctl("stop", "cluster", "--name", self.name, timeout=120)

    def start(self) -> None:
        self.kwokctl("start", "cluster", "--name", self.name, timeout=180)
        self.record_control_plane()
        self.wait_ready()
        # A restarted kwok controller does not take over the leases its previous run held
        # until they expire (minutes), leaving its nodes' pods Pending meanwhile; the
        # leases of kwok's own nodes are safe to drop, it recreates them at once.
        nodes = self.kubectl_json("get", "nodes").get("items", [])
        kwok_nodes = [n["metadata"]["name"] for n in nodes
                      if (n["metadata"].get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake"]
        if kwok_nodes:
            self.kubectl("delete", "lease", "-n", "kube-node-lease", "--ignore-not-found", *kwok_nodes, check=False)

    def delete(self) -> None:
        self.kwokctl("delete", "cluster", "--name", self.name, timeout=180, check=False)
        self.stop_control_plane()  # whatever kwokctl did not stop; forgets the records
        self.kubeconfig.unlink(missing_ok=True)

    def add_physical_nodes(self) -> list[str]:
        names = [f"{self.spec.cluster_id}-node-{i}" for i in range(self.spec.nodes)]
        manifests = [kwok_node_manifest(name, self.spec) for name in names]
        for pool in self.spec.pools:
            pool_names = pool.node_names(self.spec.cluster_id)
            manifests += [kwok_node_manifest(name, self.spec, pool) for name in pool_names]
            names += pool_names
        if manifests:  # none: a cluster whose only node is a real one (kubectl refuses an empty apply)
            self.apply(manifests)
        return names


class Environment:
    """The whole loopback setup: clusters, certificates and our processes."""

    def __init__(self, state_dir: Path | None = None, *, say: Say | None = None, bins: Binaries | None = None,
                 records: run_records.Records | None = None) -> None:
        """``records``: the run directory of an environment whose state dir is gone
        (reap_orphans); otherwise found through the state dir, or made by ``up``."""
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.say: Say = say or (lambda line: print(line, flush=True))
        self._bins = bins
        self._node_bins: NodeBinaries | None = None
        self._records = records
        self._processes: ProcessTable | None = None

    # --- state ------------------------------------------------------------------------
    @property
    def records(self) -> run_records.Records:
        """Where this environment's records are (run_records.py). Once known, kept: the
        state dir may vanish under a running environment, and its ``down`` must still
        find what to stop."""
        if self._records is None or self._records.legacy:
            self._records = run_records.records_of(self.state_dir)
        return self._records

    @property
    def processes(self) -> ProcessTable:
        path = self.records.processes
        if self._processes is None or self._processes.path != path:
            self._processes = ProcessTable(path)
        return self._processes

    @property
    def topology_path(self) -> Path:
        return self.records.topology

    def topology(self) -> Topology | None:
        if not self.topology_path.exists():
            return None
        return Topology.from_json(self.topology_path.read_text())

    @property
    def bins(self) -> Binaries:
        if self._bins is None:
            self._bins = ensure_binaries(say=self.say)
        return self._bins

    def cluster(self, spec: ClusterSpec) -> Cluster:
        return Cluster(spec, state_dir=self.state_dir, bins=self.bins,
                       control_planes=ProcessTable(self.records.control_planes))

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    # --- up ---------------------------------------------------------------------------
    def up(self, topology: Topology) -> None:
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        existing = self.topology()
        if existing is not None:
            raise ClusterError(
                f"an environment already exists in {self.state_dir} ({existing.local.name} + "
                f"{len(existing.remotes)} remote); run `kube-offload cluster down` first or pass another --state-dir"
            )
        self._forget_credentials()  # a previous environment's tokens name clusters that are gone
        if topology.chart_pods and not topology.real_nodes:
            raise ClusterError("chart_pods needs real_nodes: only a real node runs the charts' pods "
                               "(kube-offload cluster up --real-nodes true)")
        validate_topology(topology)
        if topology.real_nodes:
            from kube_offload_harness.real_node import preflight

            problems = preflight()
            if problems:
                raise ClusterError("real nodes need: " + "; ".join(problems) + " (docs/real-nodes.md)")
        self.bins  # noqa: B018 (a cached property: build before anything else, with progress)
        if topology.real_nodes:
            self.node_bins  # noqa: B018 (a cached property: built here, with progress)
        # Environments whose state dir vanished first (their slots and processes), then
        # this one's records, outside its state dir, before it starts or takes anything.
        reap_orphans(say=self.say, bins=self.bins)
        self._records = run_records.create(self.state_dir)
        topology.webhook_port = topology.webhook_port or free_port()
        topology.extender_port = topology.extender_port or free_port()
        if topology.real_nodes:
            self._assign_real_node_slots(topology)
            topology.registry_port = topology.registry_port or free_port()
        for spec in [*topology.remotes, *topology.further]:
            spec.kubelet_port = spec.kubelet_port or free_port()
            spec.enforcer_webhook_port = spec.enforcer_webhook_port or free_port()
            spec.vkubelet_health_port = spec.vkubelet_health_port or free_port()
            spec.enforcer_health_port = spec.enforcer_health_port or free_port()
            for slice_spec in spec.slices:
                slice_spec.kubelet_port = slice_spec.kubelet_port or free_port()
                slice_spec.health_port = slice_spec.health_port or free_port()
        middle = topology.middle
        if middle is not None:
            middle.webhook_port = middle.webhook_port or free_port()
            middle.extender_port = middle.extender_port or free_port()
        self.topology_path.write_text(topology.to_json())
        self._write_certificates()
        if topology.real_nodes:
            self.start_registry(topology)

        local = self.cluster(topology.local)
        if topology.chart_pods:
            # The chart runs a kube-scheduler of its own that calls the extender; the
            # cluster's must not (it would wait for an extender that is not there yet).
            self.say(f"- creating local cluster {local.name} (kube-apiserver, etcd, scheduler, controller-manager, kwok)")
            local.create()
        else:
            scheduler_config = self._write_scheduler_config(topology.extender_port)
            self.say(f"- creating local cluster {local.name} (kube-apiserver, etcd, scheduler with our extender, controller-manager, kwok)")
            local.create(scheduler_config=scheduler_config)
        local.add_physical_nodes()
        if topology.real_nodes:
            self.start_real_node(topology.local)
        storage.start_local_path_provisioner(self, local, default_class=False)
        self._authorize_apiserver_kubelet_client(local)
        if topology.chart_pods:
            self._up_chart_pods(topology, local, started)
            return
        self.say("- local cluster: identities and RBAC from charts/kube-offload-local (helm template)")
        wired = topology.peering == PEERING_HARNESS
        # With PEERING_CLI only the webhook's and extender's: the release `peer` installs
        # owns the rest of the chart.
        from kube_offload_harness import real_node_config

        self.install_identities(local, identities.LOCAL_CHART, identities.local_values(
            topology.local.cluster_id, [spec.cluster_id for spec in topology.remotes] if wired else [],
            serving_cert=real_node_config.VKUBELET_SERVING_CERT if topology.local.verify_kubelets else None,
            gateways=[spec.cluster_id for spec in topology.remotes if wired and pods_on_real_node(topology, spec)]),
            components=None if wired else ("webhook", "extender"))
        for spec in topology.remotes:
            remote = self.cluster(spec)
            self.say(f"- creating remote cluster {remote.name} ({', '.join(f'{k}={v}' for k, v in spec.labels.items())})")
            # The middle of a chain schedules with its own extender (as the local cluster does).
            middle_scheduler = (self._write_scheduler_config(spec.extender_port, f"kube-scheduler-config-{spec.cluster_id}.yaml")
                                if spec is middle else None)
            remote.create(scheduler_config=middle_scheduler, extra_configs=[self._remote_kwok_config()])
            remote.add_physical_nodes()
            if topology.real_nodes:
                self.start_real_node(spec)
            storage.start_local_path_provisioner(self, remote, default_class=True)
            if not wired:
                continue
            self.say(f"- {remote.name}: CRDs, enforcer identity and consumer {topology.local.cluster_id!r} from charts/kube-offload-remote (helm template)")
            self.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(
                topology.local.cluster_id, node_labels=spec.labels, quota=spec.quota or None,
                policy=identities.e2e_policy(local_pods_remapped=[local_pod_cidr_remapped(topology, spec)]),
                pools=[pool.consumer_pool() for pool in spec.pools], gateway=pods_on_real_node(topology, spec)))
        if wired:
            for spec in topology.remotes:
                if pods_on_real_node(topology, spec):
                    fabric_gateways.start_processes(self, topology, spec)
        if middle is not None:
            self._up_further(topology, middle)

        self.say(f"- starting webhook on https://127.0.0.1:{topology.webhook_port} and extender on https://127.0.0.1:{topology.extender_port}")
        self.start_webhook(topology, local)
        self.start_extender(topology, local)
        self._wait_https_ready("webhook", topology.webhook_port)
        self._wait_https_ready("extender", topology.extender_port)
        self._register_webhook(topology, local)
        if topology.real_nodes:
            # Pods on the real nodes (the charts') resolve Service names from here on.
            for spec in topology.clusters():
                self.start_cluster_dns(spec)
        if not wired:
            self.say(f"- environment up in {int(time.monotonic() - started)}s; remote clusters not connected yet (kube-offload peer)")
            return
        for spec in [*topology.remotes, *topology.further]:
            self.start_enforcer(spec)
            self._wait_https_ready(f"enforcer-{spec.cluster_id}", spec.enforcer_webhook_port)
            self._register_enforcer_webhook(spec)
        for spec in topology.remotes:
            if topology.virtual_kubelets:
                self.start_vkubelet(topology, spec)
        if middle is not None:
            for spec in topology.further:
                self.start_vkubelet(topology, spec, local_spec=middle)
        if topology.virtual_kubelets:
            for spec in topology.remotes:
                for slice_spec in spec.slices:
                    self.start_slice_vkubelet(topology, spec, slice_spec)
                    # One at a time, in the topology's order: the provider decides a
                    # consumer's slices oldest first (creationTimestamp, in whole seconds,
                    # then name), so slices asked at once would be decided in name order,
                    # not in the order the topology (and a test) lists them.
                    self._wait_slice_asked(topology, spec, slice_spec)
            for spec in topology.remotes:
                self.wait_virtual_node_ready(local, spec)
                for slice_spec in spec.slices:
                    self.wait_virtual_node_ready(local, spec, slice_spec)
        if middle is not None:
            for spec in topology.further:
                self.wait_virtual_node_ready(self.cluster(middle), spec)
        self.say(f"- environment up in {int(time.monotonic() - started)}s")

    def _wait_slice_asked(self, topology: Topology, spec: ClusterSpec, slice_spec: SliceSpec,
                          timeout: float = 90) -> None:
        """Until remote ``spec`` holds the OffloadSlice of ``slice_spec``, then one second
        more, so that the next slice's creationTimestamp is a later second."""
        from kube_offload import constants as c

        remote = self.cluster(spec)
        deadline = time.monotonic() + timeout
        while remote.kubectl("get", f"{c.SLICE_PLURAL}.{c.DOMAIN}", slice_spec.name, "-n",
                             c.tenant_namespace(topology.local.cluster_id), check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise ClusterError(f"slice {slice_spec.name} was not asked of {spec.cluster_id} within {timeout:.0f}s; "
                                   f"see {self.log_path(self.slice_process_name(spec, slice_spec))}")
            name = self.slice_process_name(spec, slice_spec)
            record = self.processes.get(name)
            if record is None or not record.running():
                raise ClusterError(f"{name} exited; see {self.log_path(name)}:\n{_tail(self.log_path(name))}")
            time.sleep(0.5)
        time.sleep(1.1)

    def _up_further(self, topology: Topology, middle: ClusterSpec) -> None:
        """The rest of a chain (Topology.further): the middle cluster gets the local chart's
        identities and its own webhook and extender (its scheduler already calls the
        extender), each further cluster is made a remote of the middle one. Enforcers and
        virtual kubelets start with the others, in ``up``."""
        b = self.cluster(middle)
        further_ids = [spec.cluster_id for spec in topology.further]
        self.say(f"- {b.name}: also a consumer of {', '.join(further_ids)} (local chart identities, webhook, extender)")
        self.install_identities(b, identities.LOCAL_CHART, identities.local_values(middle.cluster_id, further_ids))
        self._authorize_apiserver_kubelet_client(b)
        for spec in topology.further:
            remote = self.cluster(spec)
            self.say(f"- creating further cluster {remote.name}, a remote of {b.name}")
            remote.create(extra_configs=[self._remote_kwok_config()])
            remote.add_physical_nodes()
            self.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(
                middle.cluster_id, node_labels=spec.labels,
                policy=identities.e2e_policy(local_pods_remapped=[LOCAL_POD_CIDR_REMAPPED])))
        suffix = f"-{middle.cluster_id}"
        self._start_webhook(b, middle.webhook_port, f"webhook{suffix}")
        self._start_extender(b, middle.extender_port, f"extender{suffix}")
        self._wait_https_ready(f"webhook{suffix}", middle.webhook_port)
        self._wait_https_ready(f"extender{suffix}", middle.extender_port)
        self._register_webhook_at(b, middle.webhook_port)

    def _up_chart_pods(self, topology: Topology, local: Cluster, started: float) -> None:
        """The rest of ``up`` when the charts run as pods (chart_pods.py): the local chart
        installed with Helm, bare remotes joined to the local real node by the fabric, and
        with PEERING_HARNESS each remote connected by ``kube-offload peer`` (peer_driver),
        which installs the remote chart and the vkubelet Deployment."""
        from kube_offload_harness import chart_pods, peer_driver

        for spec in topology.remotes:
            remote = self.cluster(spec)
            self.say(f"- creating remote cluster {remote.name} ({', '.join(f'{k}={v}' for k, v in spec.labels.items())})")
            remote.create(extra_configs=[self._remote_kwok_config()])
            remote.add_physical_nodes()
            self.start_real_node(spec)
            storage.start_local_path_provisioner(self, remote, default_class=True)
        for spec in topology.remotes:
            # peer --gateway runs the gateways and gives each vkubelet their remapping; the
            # relays are the harness's stand-ins for the UDP load balancers in front of them
            fabric_gateways.start_relays(self, topology, spec)
        # The chart's kube-scheduler calls the extender at its Service name; the vkubelet and
        # the enforcer resolve the kubernetes Service's name too.
        for spec in topology.clusters():
            self.start_cluster_dns(spec)
        chart_pods.push_kube_scheduler_image(self, topology)
        chart_pods.install_local_chart(self, topology, local)
        if topology.peering == PEERING_HARNESS:
            for spec in topology.remotes:
                peer_driver.peer(self, topology, spec, say=self.say)
        self.say(f"- environment up in {int(time.monotonic() - started)}s"
                 + ("" if topology.peering == PEERING_HARNESS else "; remote clusters not connected yet (kube-offload peer)"))

    # --- real nodes (real_node.py, docs/real-nodes.md) -------------------------------------
    @property
    def node_bins(self) -> "NodeBinaries":
        if self._node_bins is None:
            self._node_bins = ensure_node_binaries(say=self.say)
        return self._node_bins

    def registry(self, topology: Topology) -> "Registry":
        from kube_offload_harness.registry import Registry

        return Registry(self.state_dir, topology.registry_port)

    def start_registry(self, topology: Topology) -> None:
        """The OCI registry the real nodes pull from, filled with every image they run and
        with the charts (registry.py)."""
        from kube_offload_harness import registry as reg

        registry = self.registry(topology)
        self.say(f"- OCI registry on {registry.url} (images for the real nodes, charts)")
        try:
            registry.start(binary=self.node_bins.registry, processes=self.processes, log=self.log_path(reg.PROCESS_NAME))
            reg.fill(registry, nbins=self.node_bins, helm=self.bins.helm, say=self.say)
            if topology.previous_release:
                from kube_offload_harness import previous_release

                try:
                    topology.chart_version = previous_release.push(
                        registry, helm=self.bins.helm, commit=topology.previous_release, say=self.say)
                except previous_release.PreviousReleaseError as exc:
                    raise ClusterError(str(exc)) from None
                self.topology_path.write_text(topology.to_json())
        except reg.RegistryError as exc:
            raise ClusterError(str(exc)) from None

    def _registry_port(self) -> int:
        topology = self.topology()
        if topology is None or not topology.registry_port:
            raise ClusterError("no registry in this environment: `kube-offload cluster up --real-nodes true` runs one")
        return topology.registry_port

    def chart_reference(self, chart: str) -> str:
        """Where to install ``chart`` from (``oci://127.0.0.1:<port>/charts/<chart>``, with
        ``--plain-http``); only with real nodes, whose environment runs the registry."""
        from kube_offload_harness.registry import chart_reference

        return chart_reference(self._registry_port(), chart)

    def _assign_real_node_slots(self, topology: Topology) -> None:
        from kube_offload_harness import netns, real_node_config

        # A slot is owned by whoever creates its namespace: made here, before anything else
        # of the node, so that an environment starting at the same time takes another slot
        # (and its `down` never removes ours: RealNode.owns_slot). topology.json is written
        # right after.
        used = netns.list_netns()
        for spec in topology.clusters():
            while spec.real_node_slot < 0:
                slot = real_node_config.free_slot(used)
                used.append(f"{real_node_config.NETNS_PREFIX}{slot}")
                spec.real_node_slot = slot
                if not self.real_node(spec).reserve_slot():
                    spec.real_node_slot = -1
        # The charts as pods run a vkubelet pod whose certificate comes from the chart's
        # default (self-signed): that environment keeps kubelets unverified, unless its
        # values ask for a certificate from the CSR API (chart_pods.verifies_kubelets).
        from kube_offload_harness import chart_pods

        topology.local.verify_kubelets = not topology.chart_pods or chart_pods.verifies_kubelets(topology.chart_values)
        if topology.overlapping_pod_cidrs:
            for spec in topology.remotes:
                if pods_on_real_node(topology, spec):
                    spec.real_node_pod_cidr_slot = topology.local.real_node_slot

    def real_node(self, spec: ClusterSpec) -> "RealNode":
        from kube_offload_harness import real_node, real_node_config

        plan = real_node_config.NodePlan(
            cluster=spec.name, node_name=real_node_config.node_name(spec.cluster_id),
            slot=real_node_config.validate_slot(spec.real_node_slot),
            state_dir=self.state_dir / "real-nodes" / spec.name,
            tainted=spec.real_node_tainted, pod_cidr_slot=spec.real_node_pod_cidr_slot,
        )
        # Paths only: `down` must not start a build (up may have failed on one).
        from kube_offload_harness.binaries import node_binaries

        return real_node.RealNode(plan, nbins=self._node_bins or node_binaries(), processes=self.processes,
                                  log_dir=self.state_dir / "logs", say=self.say,
                                  slot_record=self.records.slot_record(spec.name))

    def start_real_node(self, spec: ClusterSpec) -> None:
        """containerd + kubelet in a namespace of their own, registered with ``spec``'s
        apiserver; returns once the node is Ready."""
        from kube_offload_harness import netns
        from kube_offload_harness.real_node import RealNodeError

        cluster = self.cluster(spec)
        self.node_bins  # noqa: B018 (a cached property: built (or found) before anything is created)
        # What kubeadm binds for the apiserver's kubelet client: logs, exec, stats.
        self._authorize_apiserver_kubelet_client(cluster)
        node = self.real_node(spec)
        from kube_offload_harness.real_node import set_kernel_tunables

        changed = set_kernel_tunables(self.kernel_tunables_record)
        if changed:
            self.say(f"- kernel settings the kubelet requires: {', '.join(f'{k}={v}' for k, v in changed.items())} "
                     "changed (restored by down)")
        try:
            node.up(admin_kubeconfig=cluster.kubeconfig, kwok_pki=cluster.kwok_workdir / "clusters" / spec.name / "pki",
                    client_ca_file=self.pki_dir / "kubelet-client-ca.crt", registry_port=self._registry_port())
            node.wait_ready(cluster.kubectl)
        except (RealNodeError, netns.NetnsError) as exc:
            raise ClusterError(str(exc)) from None
        self.say(f"- {spec.name}: real node {node.plan.node_name} Ready")

    def start_cluster_dns(self, spec: ClusterSpec) -> None:
        """CoreDNS on ``spec``'s real node (cluster_dns.py); returns once it is Ready. Called
        once the local cluster's scheduler extender answers: the scheduler calls it for every
        pod, and fails to place any (CoreDNS too) until it does."""
        from kube_offload_harness import cluster_dns, real_node_config

        try:
            cluster_dns.install(self.cluster(spec))
        except cluster_dns.ClusterDNSError as exc:
            raise ClusterError(f"{spec.name}: {exc}") from None
        self.say(f"- {spec.name}: cluster DNS (CoreDNS) Ready at {real_node_config.CLUSTER_DNS_IP}")

    def remapping_args(self, topology: Topology, spec: ClusterSpec) -> list[str]:
        """The vkubelet's pod IP remapping for remote ``spec``: the gateways' translation
        when its pods run on its real node (real addresses, a real data plane), kwok's
        stand-in ranges otherwise."""
        if pods_on_real_node(topology, spec):
            return fabric_gateways.remapping_args(fabric_gateways.cidrs(self, topology, spec))
        return pod_ip_remapping_args(topology, spec)

    @property
    def kernel_tunables_record(self) -> Path:
        return self.records.kernel_tunables

    def stop_real_nodes(self, topology: Topology) -> None:
        from kube_offload_harness import real_node
        from kube_offload_harness.real_node import restore_kernel_tunables

        try:
            self._stop_real_nodes(topology)
            real_node.remove_empty_machine_dirs()
        finally:
            restored = restore_kernel_tunables(self.kernel_tunables_record)
            if restored:
                self.say(f"- kernel settings restored: {', '.join(f'{k}={v}' for k, v in restored.items())}")

    def _stop_real_nodes(self, topology: Topology) -> None:
        for spec in topology.clusters():
            if spec.real_node_slot < 0:
                continue
            cluster = self.cluster(spec)
            up = cluster.exists() and cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=5).returncode == 0
            done = self.real_node(spec).down(kubectl=cluster.kubectl if up else None)
            self.say(f"- {spec.name}: real node removed ({', '.join(done)})")

    def _write_certificates(self) -> None:
        from certs import pki  # the certs package owns certificate generation

        self.pki_dir.mkdir(parents=True, exist_ok=True)
        ca = pki.generate_ca("kube-offload loopback CA", 30)
        serving = pki.issue_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=30)
        (self.pki_dir / "ca.crt").write_bytes(ca.cert_pem)
        (self.pki_dir / "tls.crt").write_bytes(serving.cert_pem)
        key = self.pki_dir / "tls.key"
        key.write_bytes(serving.key_pem)
        key.chmod(0o600)
        # The local apiserver's kubelet client certificate, from a CA of its own: only
        # certificates meant for calling kubelets are accepted by the kubelet API.
        kubelet_client_ca = pki.generate_ca("kube-offload loopback kubelet client CA", 30)
        client = pki.issue_client_cert(kubelet_client_ca, common_name=APISERVER_KUBELET_CLIENT, days=30)
        (self.pki_dir / "kubelet-client-ca.crt").write_bytes(kubelet_client_ca.cert_pem)
        (self.pki_dir / "apiserver-kubelet-client.crt").write_bytes(client.cert_pem)
        client_key = self.pki_dir / "apiserver-kubelet-client.key"
        client_key.write_bytes(client.key_pem)
        client_key.chmod(0o600)

    def _authorize_apiserver_kubelet_client(self, cluster: Cluster) -> None:
        """What kubeadm does for the same identity: without it a kubelet's (virtual or
        real) SubjectAccessReview refuses the apiserver, and kubectl logs/exec with it."""
        cluster.apply({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"kube-offload-{APISERVER_KUBELET_CLIENT}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBELET_API_ADMIN_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APISERVER_KUBELET_CLIENT}],
        })

    def _remote_kwok_config(self) -> Path:
        """kwok's log/exec simulation for remote pods, so `kubectl logs/exec` on an
        offloaded pod has something real to reach at the end of the chain."""
        from kube_offload_harness import kwok_sim

        path = self.state_dir / "kwok-remote-sim.yaml"
        path.write_text(yaml.safe_dump_all(kwok_sim.remote_config_documents(self.state_dir)))
        return path

    def _ca_bundle_b64(self) -> str:
        from certs import pki

        return pki.ca_bundle_b64((self.pki_dir / "ca.crt").read_bytes())

    def _write_scheduler_config(self, extender_port: int, name: str = "kube-scheduler-config.yaml") -> Path:
        from extender import registration

        config = registration.scheduler_configuration(registration.ExtenderRegistration(
            url=f"https://127.0.0.1:{extender_port}",
            ca_data=(self.pki_dir / "ca.crt").read_bytes(),
        ))
        path = self.state_dir / name
        path.write_text(yaml.safe_dump(config))
        return path

    def _register_webhook(self, topology: Topology, local: Cluster) -> None:
        self._register_webhook_at(local, topology.webhook_port)

    def _register_webhook_at(self, cluster: Cluster, port: int) -> None:
        from kube_offload.opt_in import runtime_class
        from webhook import registration

        target = registration.WebhookTarget(url=f"https://127.0.0.1:{port}", ca_bundle=self._ca_bundle_b64())
        # The per-pod opt-in RuntimeClass too, as the local chart installs it beside the webhook.
        cluster.apply([
            runtime_class(), registration.mutating_configuration(target), registration.validating_configuration(target),
        ])

    def _register_enforcer_webhook(self, spec: ClusterSpec) -> None:
        """The ShadowPod webhook, registered by URL as `kube-offload enforcer configuration`
        prints it for a user (the chart registers it through a Service instead)."""
        argv = self._component_argv(
            "enforcer", "configuration", "--url", f"https://127.0.0.1:{spec.enforcer_webhook_port}",
            "--ca-file", str(self.pki_dir / "ca.crt"),
        )
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self._process_env())
        if result.returncode != 0:
            raise ClusterError(f"`kube-offload enforcer configuration` failed: {result.stderr.strip()[-2000:]}")
        self.cluster(spec).kubectl("apply", "-f", "-", input=result.stdout)

    # --- identities ---------------------------------------------------------------------
    def install_identities(self, cluster: Cluster, chart: Path, values: dict, *, components: Iterable[str] | None = None) -> None:
        """Apply the identity objects of ``chart`` rendered by real helm: CRDs first (and
        wait until they are served), then namespaces, ServiceAccounts, RBAC, Consumers;
        only those of ``components`` when given."""
        rendered = identities.identity_objects(identities.render_chart(self.bins.helm, chart, values, env=cluster.env()))
        if components is not None:
            rendered = identities.of_components(rendered, components)
        objects = [identities.release_namespace(), *rendered]
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        if crds:
            cluster.apply(crds)
            names = [f"crd/{o['metadata']['name']}" for o in crds]
            cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")
        cluster.apply([o for o in objects if o["kind"] != "CustomResourceDefinition"])

    def identity_kubeconfig(self, cluster: Cluster, account: identities.ServiceAccountRef) -> Path:
        """A kubeconfig for ``account`` on ``cluster`` from a TokenRequest token (made once
        per environment; tokens last identities.TOKEN_DURATION)."""
        path = self.state_dir / "identities" / f"{cluster.name}--{account.namespace}--{account.name}.yaml"
        if path.exists():
            return path
        token = cluster.kubectl(
            "create", "token", account.name, "-n", account.namespace, "--duration", identities.TOKEN_DURATION
        ).stdout.strip()
        admin = yaml.safe_load(cluster.kubeconfig.read_text())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(identities.token_kubeconfig(admin, token, account.username)))
        path.chmod(0o600)
        return path

    def component_kubeconfig(self, cluster: Cluster, account: identities.ServiceAccountRef) -> Path:
        """The kubeconfig a component runs with: its chart identity, or the admin one when
        the topology says so (chart_identities=False, for debugging RBAC itself)."""
        topology = self.topology()
        if topology is not None and not topology.chart_identities:
            return cluster.kubeconfig
        return self.identity_kubeconfig(cluster, account)

    def _component_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kube_offload.cli", *args]

    def _process_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start_webhook(self, topology: Topology, local: Cluster) -> None:
        self._start_webhook(local, topology.webhook_port, "webhook")

    def _start_webhook(self, cluster: Cluster, port: int, name: str) -> None:
        argv = self._component_argv(
            "webhook", "--kubeconfig", str(self.component_kubeconfig(cluster, identities.WEBHOOK_SA)), "--bind", f"127.0.0.1:{port}",
            "--tls-cert", str(self.pki_dir / "tls.crt"), "--tls-key", str(self.pki_dir / "tls.key"),
        )
        self.processes.start(name, argv, log=self.log_path(name), env=self._process_env())

    def start_extender(self, topology: Topology, local: Cluster) -> None:
        self._start_extender(local, topology.extender_port, "extender")

    def _start_extender(self, cluster: Cluster, port: int, name: str) -> None:
        argv = self._component_argv(
            "extender", "--kubeconfig", str(self.component_kubeconfig(cluster, identities.EXTENDER_SA)), "--bind", f"127.0.0.1:{port}",
            "--tls-cert", str(self.pki_dir / "tls.crt"), "--tls-key", str(self.pki_dir / "tls.key"),
        )
        self.processes.start(name, argv, log=self.log_path(name), env=self._process_env())

    def start_enforcer(self, spec: ClusterSpec) -> None:
        remote = self.cluster(spec)
        argv = self._component_argv("enforcer", "--kubeconfig", str(self.component_kubeconfig(remote, identities.ENFORCER_SA)))
        argv += [
            "--consumer-twin-role", identities.CONSUMER_TWIN_ROLE,
            "--webhook-bind", f"127.0.0.1:{spec.enforcer_webhook_port}",
            "--webhook-tls-cert", str(self.pki_dir / "tls.crt"),
            "--webhook-tls-key", str(self.pki_dir / "tls.key"),
            "--health-bind", f"127.0.0.1:{spec.enforcer_health_port}",
            # Its own id: a pod whose offload chain went through it is refused (docs/multihop.md).
            "--cluster-id", spec.cluster_id,
        ]
        self.processes.start(f"enforcer-{spec.cluster_id}", argv, log=self.log_path(f"enforcer-{spec.cluster_id}"), env=self._process_env())

    def vkubelet_argv(self, topology: Topology, spec: ClusterSpec, *, slice_spec: SliceSpec | None = None,
                      local_spec: ClusterSpec | None = None) -> list[str]:
        """The flags of remote ``spec``'s vkubelet in ``local_spec`` (default: the local
        cluster; the middle of a chain for a further cluster), or of its slice
        ``slice_spec``'s (its own kubelet and health ports; the virtual storage delegate
        stays with the peering's own vkubelet: one per cluster)."""
        from kube_offload_harness import real_node_config

        local_spec = local_spec or topology.local
        local = self.cluster(local_spec)
        remote = self.cluster(spec)
        argv = self._component_argv(
            "vkubelet",
            "--local-kubeconfig", str(self.component_kubeconfig(local, identities.VKUBELET_SA)),
            "--remote-kubeconfig", str(self.component_kubeconfig(remote, identities.consumer_sa(local_spec.cluster_id))),
            "--cluster-id", spec.cluster_id,
            "--local-cluster-id", local_spec.cluster_id,
            "--kubelet-port", str(slice_spec.kubelet_port if slice_spec else spec.kubelet_port),
            # An apiserver that verifies kubelets (ClusterSpec.verify_kubelets): a certificate
            # from its CSR API (real_node_config.VKUBELET_SERVING_CERT); elsewhere the harness's.
            *(real_node_config.vkubelet_serving_cert_args() if local.spec.verify_kubelets else [
                "--kubelet-tls-cert", str(self.pki_dir / "tls.crt"), "--kubelet-tls-key", str(self.pki_dir / "tls.key")]),
            "--kubelet-client-ca", str(self.pki_dir / "kubelet-client-ca.crt"),
            "--kubelet-metrics-interval", metrics_server.VKUBELET_METRICS_INTERVAL,
            "--health-bind", f"127.0.0.1:{slice_spec.health_port if slice_spec else spec.vkubelet_health_port}",
        )
        for key, value in sorted(spec.labels.items()):
            argv += ["--node-label", f"{key}={value}"]
        argv += self.remapping_args(topology, spec)
        if slice_spec is not None:
            return argv + ["--slice", slice_spec.value]
        if local_spec is topology.local and spec.cluster_id == topology.remotes[0].cluster_id:
            # The physical delegate of the virtual storage class: one vkubelet per cluster.
            argv += ["--virtual-storage-local-class", storage.LOCAL_PATH_CLASS,
                     "--virtual-storage-namespace", identities.RELEASE_NAMESPACE]
        return argv

    def start_vkubelet(self, topology: Topology, spec: ClusterSpec, extra_args: Iterable[str] = (),
                       local_spec: ClusterSpec | None = None) -> None:
        argv = self.vkubelet_argv(topology, spec, local_spec=local_spec) + list(extra_args)
        self.processes.start(f"vkubelet-{spec.cluster_id}", argv, log=self.log_path(f"vkubelet-{spec.cluster_id}"), env=self._process_env())

    @staticmethod
    def slice_process_name(spec: ClusterSpec, slice_spec: SliceSpec) -> str:
        return f"vkubelet-{spec.cluster_id}-{slice_spec.name}"

    def start_slice_vkubelet(
        self, topology: Topology, spec: ClusterSpec, slice_spec: SliceSpec, extra_args: Iterable[str] = ()
    ) -> None:
        """The vkubelet of one slice of remote ``spec`` (one process per slice's node)."""
        name = self.slice_process_name(spec, slice_spec)
        argv = self.vkubelet_argv(topology, spec, slice_spec=slice_spec) + list(extra_args)
        self.processes.start(name, argv, log=self.log_path(name), env=self._process_env())

    def _wait_https_ready(self, name: str, port: int, timeout: float = 60) -> None:
        context = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            record = self.processes.get(name)
            if record is None or not record.running():
                raise ClusterError(f"{name} exited during start-up; see {self.log_path(name)}:\n{_tail(self.log_path(name))}")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except Exception as exc:  # not listening yet, or not ready (503)
                last = str(exc)
            time.sleep(0.3)
        raise ClusterError(f"{name} not ready on 127.0.0.1:{port} after {timeout}s ({last}); see {self.log_path(name)}")

    def wait_virtual_node_ready(
        self, local: Cluster, spec: ClusterSpec, slice_spec: SliceSpec | None = None, timeout: float = 90
    ) -> None:
        """Until the virtual node of ``spec`` (or of its slice ``slice_spec``) is Ready
        (a slice's node is Ready while its remote answers, whatever its slice's phase:
        the phase is a taint)."""
        node = virtual_node_name(spec.cluster_id)
        name = f"vkubelet-{spec.cluster_id}"
        if slice_spec is not None:
            node = slice_node_name(node, slice_spec.name)
            name = self.slice_process_name(spec, slice_spec)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = local.kubectl("get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
            if result.returncode == 0 and result.stdout.strip() == "True":
                return
            record = self.processes.get(name)
            if record is None or not record.running():
                raise ClusterError(f"{name} exited; see {self.log_path(name)}:\n{_tail(self.log_path(name))}")
            time.sleep(0.5)
        raise ClusterError(f"virtual node {node} not Ready after {timeout}s; see {self.log_path(name)}")

    # --- status / down -------------------------------------------------------------------
    def status(self) -> list[str]:
        topology = self.topology()
        if topology is None:
            return [f"no environment in {self.state_dir} (run `kube-offload cluster up`)"]
        lines = [f"state dir: {self.state_dir}"]
        for spec in topology.clusters():
            cluster = self.cluster(spec)
            ready = cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=5)
            state = "ready" if ready.returncode == 0 else "down"
            extra = f" labels: {', '.join(f'{k}={v}' for k, v in spec.labels.items())}" if spec.labels else ""
            lines.append(f"{spec.role:<7} {spec.name:<20} id={spec.cluster_id:<10} apiserver {state:<6} kubeconfig {cluster.kubeconfig}{extra}")
        for record in self.processes.load():
            state = f"running (pid {record.pid})" if record.running() else "not running"
            lines.append(f"process {record.name:<20} {state:<22} log {record.log}")
        if topology.chart_pods:
            from kube_offload_harness import chart_pods

            for spec in topology.clusters():
                cluster = self.cluster(spec)
                if cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=5).returncode == 0:
                    lines += [f"pod     {line} ({spec.name})" for line in chart_pods.pod_summary(cluster)]
        return lines

    def down(self) -> None:
        """Stop everything the environment started. A step that fails does not stop the
        rest (a real node that cannot be removed must not leave the clusters running);
        the failures are raised together at the end, and running ``down`` again retries."""
        failures: list[str] = []

        def step(what: str, action: Callable[[], None]) -> None:
            try:
                action()
            except Exception as exc:  # reported below; the teardown goes on
                failures.append(f"{what}: {exc}")
                self.say(f"- {what} failed: {exc}")

        topology = self.topology()
        if topology is not None and topology.real_nodes:
            # First: its containers, shims and mounts are not in the process table.
            step("stopping the real nodes", lambda: self.stop_real_nodes(topology))

            def stop_registry() -> None:
                done = self.registry(topology).stop(self.processes)
                if done:
                    self.say(f"- {' and '.join(done)} removed")

            step("stopping the registry", stop_registry)

        def stop_processes() -> None:
            stopped = self.processes.stop_all()
            if stopped:
                self.say(f"- stopped {', '.join(stopped)}")

        step("stopping processes", stop_processes)
        if topology is not None:
            for spec in reversed(topology.clusters()):
                cluster = self.cluster(spec)
                if cluster.exists():
                    self.say(f"- deleting cluster {spec.name}")
                    step(f"deleting cluster {spec.name}", cluster.delete)
                else:
                    # kwokctl's workdir went with the state dir: its processes by their PIDs
                    stopped = cluster.stop_control_plane()
                    if stopped:
                        self.say(f"- cluster {spec.name}: its state is gone; stopped {', '.join(stopped)}")
        if failures:
            retry = (f"`kube-offload cluster down --state-dir {self.state_dir}`" if self.records.alive()
                     else "`kube-offload cluster reap`")
            raise ClusterError("`down` left something behind (" + "; ".join(failures) + "); the records are kept, "
                               f"so {retry} retries")
        run_records.forget(self.records)
        self._forget_credentials()

    def _forget_credentials(self) -> None:
        """Remove the kubeconfigs minted for this environment's identities: they are
        tokens of clusters that no longer exist, and identity_kubeconfig() would otherwise
        hand them to the next environment in the same state directory."""
        shutil.rmtree(self.state_dir / "identities", ignore_errors=True)
        for stale in self.state_dir.glob("*-kubeconfig.yaml"):
            stale.unlink(missing_ok=True)


REAP_LOCK = ".reap.lock"


def reap_orphans(*, say: Say | None = None, bins: Binaries | None = None) -> list[str]:
    """Tear down every environment whose state directory vanished (run_records.orphans):
    its real nodes, registry, processes and control planes, found by its run directory
    alone. Returns the state dirs of those torn down; one that cannot be is reported and
    kept for the next try. One reaper at a time on the machine (a lock in the runs dir)."""
    import fcntl

    say = say or (lambda line: print(line, flush=True))
    base = run_records.runs_dir()
    if not base.is_dir():
        return []
    reaped = []
    with open(base / REAP_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for records in run_records.orphans():
            say(f"- environment {records.env_id}: its state dir {records.state_dir} is gone; tearing down what it started")
            # the binaries' paths only, never a build: the orphan was made with them
            env = Environment(records.state_dir, say=lambda line: say("  " + line), bins=bins or binaries(),
                              records=records)
            try:
                env.down()
            except ClusterError as exc:
                say(f"  not all of it: {exc}")
                continue
            reaped.append(str(records.state_dir))
    return reaped


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return "(no log)"
