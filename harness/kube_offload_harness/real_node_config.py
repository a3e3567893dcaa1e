"""What a real node of a loopback cluster is made of, as pure data: its addresses, its
paths, and the configuration files of containerd, the CNI plugins and the kubelet.

:mod:`kube_offload_harness.real_node` does the I/O (namespaces, processes); everything it
writes is rendered here, so that each fact (docs/real-nodes.md) is in one place and tested.

Addresses (docs/real-nodes.md, "Addresses"): nothing else on the machine uses 172.31.0.0/16
(checked with ``ip addr``/``ip route``); every address below is assigned by the harness, on
interfaces it creates, and removed by ``down``.

- node link of slot ``k`` (a veth pair between the machine and the node's network
  namespace): ``172.31.250.(4k)/30``; machine side ``.4k+1``, node side ``.4k+2``;
- pods of slot ``k``: ``172.31.k.0/24`` on a bridge inside the node's namespace.

A cluster with a real node advertises its kube-apiserver at the machine end of the node's
link (:func:`apiserver_flags`), where a forwarder (real_node.py) passes connections on to
the apiserver's loopback port: the address the ``kubernetes`` Service's EndpointSlice
names, so pods reach the control plane through ``10.0.0.1:443`` as in any cluster.
"""

from __future__ import annotations

import ipaddress
import json
from typing import TYPE_CHECKING
from dataclasses import dataclass
from pathlib import Path

import yaml

from kube_offload_harness import oci_image

if TYPE_CHECKING:
    from kube_offload_harness.pod_cidr_overlap import Overlap

MAX_SLOTS = 64  # 64 /30 links fill 172.31.250.0/24
LINK_NETWORK = ipaddress.IPv4Network("172.31.250.0/24")
NETNS_PREFIX = "kon-"  # kube-offload node: `ip netns list` shows ours by this prefix
VETH_PREFIX = "kon"
POD_BRIDGE = "konbr0"  # inside the node's namespace only (names are per namespace)
CNI_NETWORK_PREFIX = "kube-offload-pods-"  # + slot: libcni's cache files are named by network
RUNTIME_ROOT = Path("/var/lib/kube-offload")  # NodePlan.runtime_dir: <root>/kon-<slot>
CNI_CACHE_DIR = Path("/var/lib/cni/results")  # libcni's, machine-wide (containerd sets no other)
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet's symlinks, a fixed path
# Directories containerd's shims and libcni create at fixed machine-wide paths; empty once
# every real node is down, then removed (shims' sockets: /run/containerd/s/<hash>).
MACHINE_WIDE_DIRS = (Path("/run/containerd/s"), Path("/run/containerd"), CNI_CACHE_DIR, CNI_CACHE_DIR.parent, RUNTIME_ROOT)
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248  # on the node namespace's own loopback
SANDBOX_IMAGE = oci_image.PAUSE_IMAGE  # containerd pins it; pulled from the local registry
# The public registries whose images containerd pulls from the environment's local registry
# instead (registry.py). Any other registry is unreachable: the node's namespace has no
# route out (docs/real-nodes.md, "Images").
MIRRORED_REGISTRIES = ("docker.io", "registry.k8s.io", "ghcr.io", "quay.io")
RUNC = "/usr/sbin/runc"  # Debian's runc package (scripts/bootstrap.sh)
# Each node's kubelet puts its pods' cgroups under its own root in every v1 hierarchy, so
# two nodes (two clusters) never share /kubepods; `down` removes the tree.
CGROUP_ROOT_PREFIX = "/kube-offload"
# What the kubelet requires of the machine's (not namespaced) kernel settings, as its
# setupKernelTunables has them (pkg/kubelet/cm/container_manager_linux.go): it writes them
# itself unless protectKernelDefaults, then it refuses to start on any other value. The
# harness sets them before the first real node and puts the machine's values back after
# the last (real_node.py), and the kubelet runs with protectKernelDefaults: true, so it
# never writes a machine-wide setting of its own accord.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}

# kube-apiserver's default --service-cluster-ip-range, which kwokctl leaves alone: the
# `kubernetes` Service takes its first address, cluster DNS a fixed one (kubeadm's .10).
SERVICE_CIDR = ipaddress.IPv4Network("10.0.0.0/24")
KUBERNETES_SERVICE_IP = str(SERVICE_CIDR.network_address + 1)
CLUSTER_DNS_IP = str(SERVICE_CIDR.network_address + 10)
CLUSTER_DOMAIN = "cluster.local"

# Real nodes carry this label and a NoSchedule taint of the same key: a workload lands on
# one only when it asks (a toleration and a nodeSelector), so the kwok tiers, the demo and
# the scale tests behave as before, and no pod lands where its image cannot be had.
REAL_NODE_KEY = "kube-offload.io/real-node"


@dataclass(frozen=True)
class NodePlan:
    """Names, addresses and paths of one real node (one slot)."""

    cluster: str  # the kwokctl cluster name
    node_name: str
    slot: int
    state_dir: Path  # the node's configuration files, under the environment's state dir
    # Registered with the REAL_NODE_KEY NoSchedule taint (the default). False only for a
    # remote cluster whose real node is where offloaded pods land: the pods the enforcer
    # makes carry no toleration of ours (docs/real-nodes.md, "Offloaded pods on a remote's
    # real node").
    tainted: bool = True
    # The slot whose pod CIDR this node hands out (-1: its own). A remote's real node gets
    # the local node's to exercise overlapping pod CIDRs (pod_cidr_overlap.py).
    pod_cidr_slot: int = -1

    @property
    def overlap(self) -> "Overlap | None":
        """How the machine reaches this node's pods when they share a CIDR with another
        node's (pod_cidr_overlap.py); None when the CIDR is the node's own."""
        if self.pod_cidr_slot < 0 or self.pod_cidr_slot == self.slot:
            return None
        from kube_offload_harness.pod_cidr_overlap import Overlap

        return Overlap(self.slot, self.pod_cidr, self.node_ip, self.veth_host)

    @property
    def runtime_dir(self) -> Path:
        """Where containerd and the kubelet keep their state, sockets and mounts: a short
        path of its own (a unix socket path has at most 104 characters for containerd, and
        a pytest state dir is longer), named by the slot, removed by ``down``."""
        return RUNTIME_ROOT / self.netns

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.slot}"

    @property
    def veth_host(self) -> str:
        return f"{VETH_PREFIX}{self.slot}h"  # <= 15 characters, the kernel's limit

    @property
    def veth_node(self) -> str:
        return f"{VETH_PREFIX}{self.slot}n"

    @property
    def link(self) -> ipaddress.IPv4Network:
        return link_network(self.slot)

    @property
    def host_ip(self) -> str:
        """The machine end of the node's link: where the apiserver is advertised."""
        return host_ip(self.slot)

    @property
    def node_ip(self) -> str:
        return str(self.link.network_address + 2)

    @property
    def pod_cidr(self) -> str:
        return f"172.31.{self.slot if self.pod_cidr_slot < 0 else self.pod_cidr_slot}.0/24"

    @property
    def pod_gateway(self) -> str:
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 1)

    @property
    def cgroup_root(self) -> str:
        return f"{CGROUP_ROOT_PREFIX}-{self.slot}"

    # paths
    @property
    def containerd_root(self) -> Path:
        return self.runtime_dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.runtime_dir / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.runtime_dir / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.state_dir / "containerd" / "config.toml"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's ``config_path``: one ``<registry>/hosts.toml`` per mirrored registry."""
        return self.state_dir / "containerd" / "hosts"

    @property
    def runc_root(self) -> Path:
        return self.runtime_dir / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state_dir / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.runtime_dir / "cni" / "networks"

    @property
    def kubelet_root(self) -> Path:
        return self.runtime_dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.state_dir / "kubelet-config.yaml"

    @property
    def kubelet_serving_cert(self) -> Path:
        """The kubelet's serving certificate, issued by the cluster's CA for the node's
        address (metrics-server verifies it; a self-signed one it refuses)."""
        return self.state_dir / "kubelet-pki" / "kubelet-serving.crt"

    @property
    def kubelet_serving_key(self) -> Path:
        return self.state_dir / "kubelet-pki" / "kubelet-serving.key"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.state_dir / "kubelet.kubeconfig"

    @property
    def pod_logs_dir(self) -> Path:
        return self.runtime_dir / "pod-logs"

    @property
    def cni_network(self) -> str:
        return f"{CNI_NETWORK_PREFIX}{self.slot}"

    @property
    def kube_proxy_config(self) -> Path:
        return self.state_dir / "kube-proxy-config.yaml"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self.state_dir / "kube-proxy.kubeconfig"

    @property
    def resolv_conf(self) -> Path:
        return self.state_dir / "resolv.conf"


def link_network(slot: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"{LINK_NETWORK.network_address + 4 * slot}/30")


def host_ip(slot: int) -> str:
    return str(link_network(slot).network_address + 1)


def machine_routes(plan: NodePlan) -> list[list[str]]:
    """``ip route`` arguments of the machine's namespace: the node's pods through the node
    end of its link, so the apiserver reaches pod IPs (webhooks, pods/proxy, a virtual
    kubelet's API at its pod IP) and answers pods that call it. The machine only ever
    sends to and receives for its own addresses: its ip_forward stays 0. None for a node
    whose CIDR is another node's: that route goes in a table of its own
    (pod_cidr_overlap.py), and the main table's stays the other node's."""
    if plan.overlap is not None:
        return []
    return [[plan.pod_cidr, "via", plan.node_ip, "dev", plan.veth_host]]


def node_routes(plan: NodePlan) -> list[list[str]]:
    """``ip route`` arguments of the node's namespace: every machine end of every slot's
    link (this cluster's apiserver forwarder, and another cluster's, which a virtual
    kubelet pod calls) through this node's own machine end; and the Service CIDR the same
    way, as a real node's default route would carry it: a process in the node's own
    namespace (a hostNetwork pod such as kube-offload's gateway, calling the API at
    ``10.0.0.1``) needs a route before kube-proxy's OUTPUT rules translate the ClusterIP
    into its endpoint, the machine end itself. Nothing untranslated is sent there: the
    machine does not forward."""
    return [[str(LINK_NETWORK), "via", plan.host_ip, "dev", plan.veth_node],
            [str(SERVICE_CIDR), "via", plan.host_ip, "dev", plan.veth_node]]


def apiserver_cert_sans(slot: int) -> list[str]:
    """What the apiserver's serving certificate must name for in-cluster clients, which
    verify it against the ServiceAccount's ca.crt: the `kubernetes` Service's ClusterIP and
    names, and the advertised address. (kwokctl's own list has the names and loopback,
    not the ClusterIP: kwokctl's kubeApiserverCertSANs adds to it.)"""
    return [
        KUBERNETES_SERVICE_IP, host_ip(slot), "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
    ]


# The local cluster of a real-node environment verifies kubelets as a production cluster
# does (docs/real-nodes.md, "Kubelet serving certificates"): its apiserver trusts only the
# cluster CA for them (--kubelet-certificate-authority), its kube-controller-manager signs
# kubernetes.io/kubelet-serving requests with that CA, and the vkubelet asks for its
# certificate there (--kubelet-serving-cert-mode=csr), approving its own request. A short
# lifetime and an early renewal (600 s, the API's minimum, at half of the 900 s the signer
# makes of it by backdating 5 minutes: 150 s after issue) so a test sees a rotation.
VKUBELET_SERVING_CERT = {"mode": "csr", "approval": "self", "expiration": "10m", "rotation": "0.5"}


def vkubelet_serving_cert_args() -> list[str]:
    """The vkubelet flags of VKUBELET_SERVING_CERT (the chart's vkubelet.servingCert)."""
    cert = VKUBELET_SERVING_CERT
    return [f"--kubelet-serving-cert-mode={cert['mode']}", f"--kubelet-serving-cert-approval={cert['approval']}",
            f"--kubelet-serving-cert-expiration={cert['expiration']}", f"--kubelet-serving-cert-rotation={cert['rotation']}"]


def kubelet_verification_flags(kwok_pki: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(kube-apiserver, kube-controller-manager) flags of a local cluster with a real node:
    kubelets verified against, and kubelet-serving requests signed by, the cluster CA
    (kwokctl's pki/ca.crt and ca.key, which also signs the real node's kubelet
    certificate: real_node.serving_identity)."""
    return (
        {"kubelet-certificate-authority": str(kwok_pki / "ca.crt")},
        {"cluster-signing-cert-file": str(kwok_pki / "ca.crt"), "cluster-signing-key-file": str(kwok_pki / "ca.key")},
    )


def apiserver_flags(slot: int) -> dict[str, str]:
    """kube-apiserver flags of a cluster with a real node in ``slot``.

    advertise-address: by default, with --bind-address 127.0.0.1, the apiserver advertises
    the machine's first interface address in the `kubernetes` EndpointSlice, an address the
    harness must never send to; the machine end of the node's link is the harness's own and
    has a forwarder to the loopback port.
    enable-aggregator-routing: the apiserver resolves a Service named by a webhook (admission
    and CRD conversion), or by an APIService, to an endpoint IP instead of the ClusterIP,
    which exists only inside a node's namespace (kube-proxy's rules): k8s.io/kubernetes
    v1.37 cmd/kube-apiserver/app/server.go buildServiceResolver hands one resolver to the
    admission plugins, apiextensions and the aggregator."""
    return {"advertise-address": host_ip(slot), "enable-aggregator-routing": "true"}


def node_name(cluster_id: str) -> str:
    return f"{cluster_id}-real-node"


def validate_slot(slot: int) -> int:
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"real-node slot {slot} out of range 0..{MAX_SLOTS - 1}")
    return slot


def free_slot(used_netns: list[str]) -> int:
    """The lowest slot whose namespace does not exist (another environment may hold some)."""
    taken = {name[len(NETNS_PREFIX):] for name in used_netns if name.startswith(NETNS_PREFIX)}
    for slot in range(MAX_SLOTS):
        if str(slot) not in taken:
            return slot
    raise ValueError(f"all {MAX_SLOTS} real-node slots are taken (ip netns list shows {NETNS_PREFIX}0..{MAX_SLOTS - 1})")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON's string syntax for our values
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml(tables: dict[str, dict[str, object]], top: dict[str, object]) -> str:
    """The TOML subset containerd's config needs: top-level keys, then flat tables."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in top.items()]
    for table, keys in tables.items():
        lines += ["", f"[{table}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def containerd_config(plan: NodePlan, *, cni_bin_dir: Path) -> str:
    """containerd 2.x (config version 3) with every path under the node's state dir:
    its own root, state, socket, runc root, CNI config and netns mounts, NRI off (its
    socket path is machine-wide), the CRI streaming server on the node's loopback."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    tables: dict[str, dict[str, object]] = {
        "grpc": {"address": str(plan.containerd_socket)},
        "ttrpc": {"address": str(plan.containerd_socket) + ".ttrpc"},
        "debug": {"address": ""},
        "metrics": {"address": ""},
        "plugins.'io.containerd.internal.v1.opt'": {"path": str(plan.runtime_dir / "containerd" / "opt")},
        "plugins.'io.containerd.nri.v1.nri'": {"disable": True},
        "plugins.'io.containerd.cri.v1.images'": {"snapshotter": "overlayfs"},
        "plugins.'io.containerd.cri.v1.images'.pinned_images": {"sandbox": SANDBOX_IMAGE},
        # Set, it replaces the default /etc/containerd/certs.d:/etc/docker/certs.d (the
        # machine's); the CRI hands it to the transfer service that pulls for the kubelet.
        "plugins.'io.containerd.cri.v1.images'.registry": {"config_path": str(plan.registry_hosts_dir)},
        cri_runtime: {
            "netns_mounts_under_state_dir": True,
            # Root here lacks CAP_SYS_RESOURCE (CapEff 0x1fffeffffff): lowering a process's
            # oom_score_adj is refused, and runc then fails every sandbox ("failed to
            # update /proc/self/oom_score_adj: Permission denied", seen by runc as "can't
            # get final child's PID from pipe: EOF"). This clamps pods' values at
            # containerd's own (0) instead.
            "restrict_oom_score_adj": True,
            "enable_unprivileged_ports": True,
            "enable_unprivileged_icmp": True,
            "cdi_spec_dirs": [],
        },
        f"{cri_runtime}.containerd": {"default_runtime_name": "runc"},
        f"{cri_runtime}.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
        f"{cri_runtime}.containerd.runtimes.runc.options": {
            "BinaryName": RUNC, "Root": str(plan.runc_root), "SystemdCgroup": False,
        },
        f"{cri_runtime}.cni": {"bin_dirs": [str(cni_bin_dir)], "conf_dir": str(plan.cni_conf_dir), "max_conf_num": 1},
        "plugins.'io.containerd.grpc.v1.cri'": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
    }
    top = {
        "version": 3,
        "root": str(plan.containerd_root),
        "state": str(plan.containerd_state),
        # snapshotters that cannot work here (no btrfs/zfs, no devmapper pool) stay quiet
        "disabled_plugins": [
            "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
            "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
            "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
        ],
    }
    return toml(tables, top)


def registry_hosts_toml(upstream: str, *, registry_port: int) -> str:
    """containerd's hosts.toml for ``upstream`` (containerd 2.4, core/remotes/docker/config/
    hosts.go): the environment's registry, on the node namespace's loopback (forwarded to
    the machine's), plain HTTP, as the only host. ``server`` (not a ``[host."..."]``
    mirror) because containerd appends ``server`` after the mirrors and, when it is empty,
    the upstream itself (``registry-1.docker.io``): a missing image would then be fetched
    from the internet. ``override_path``: the URL's path is the API root as given (without
    it containerd appends ``/v2``), so ``/v2/<upstream>`` puts every upstream's
    repositories under a prefix of their own (oci_distribution.mirror_repository).
    Capabilities pull and resolve: tags are resolved here too; nothing is pushed."""
    if upstream not in MIRRORED_REGISTRIES:
        raise ValueError(f"{upstream!r} is not a mirrored registry ({', '.join(MIRRORED_REGISTRIES)})")
    if not 0 < registry_port < 65536:
        raise ValueError(f"registry port {registry_port} out of range 1..65535")
    return toml({}, {
        "server": f"http://127.0.0.1:{registry_port}/v2/{upstream}",
        "override_path": True,
        "capabilities": ["pull", "resolve"],
    })


def registry_hosts_files(*, registry_port: int) -> dict[str, str]:
    """Every file of ``config_path``, by path relative to it: ``docker.io/hosts.toml``..."""
    return {f"{upstream}/hosts.toml": registry_hosts_toml(upstream, registry_port=registry_port)
            for upstream in MIRRORED_REGISTRIES}


def cni_conflist(plan: NodePlan) -> dict:
    """One bridge inside the node's namespace; IPs from the slot's pod range, recorded
    under the node's state dir (host-local's default /var/lib/cni is machine-wide); no
    masquerade: pods reach only the node and each other."""
    return {
        "cniVersion": "1.0.0",
        "name": plan.cni_network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": POD_BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(plan.cni_data_dir),
                    "ranges": [[{"subnet": plan.pod_cidr, "gateway": plan.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_configuration(plan: NodePlan, *, client_ca_file: Path) -> dict:
    """KubeletConfiguration for this machine: cgroup v1 only (failCgroupV1: false; the
    kubelet refuses v1 otherwise), the cgroupfs driver (no systemd here), serving on the
    node's own address, the apiserver authenticated by the harness's kubelet client CA and
    authorized by SubjectAccessReview; the cluster DNS at its fixed ClusterIP."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": plan.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{plan.containerd_socket}",
        "address": plan.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        # Pods (dnsPolicy ClusterFirst) ask the cluster DNS (cluster_dns.py); the node's own
        # resolv.conf, for dnsPolicy Default (CoreDNS itself), is empty: the machine's
        # resolver is not an address the harness may send to.
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # Issued by the cluster's CA for the node's address (real_node.serving_identity):
        # without these files the kubelet signs a certificate of its own, which
        # metrics-server (verifying against the cluster CA) refuses, and `kubectl top`
        # then has no figures for the node's pods.
        "tlsCertFile": str(plan.kubelet_serving_cert),
        "tlsPrivateKeyFile": str(plan.kubelet_serving_key),
        "resolvConf": str(plan.resolv_conf),
        # Paths that default to machine-wide directories (/var/log/pods, /usr/libexec/...).
        "podLogsDir": str(plan.pod_logs_dir),
        "volumePluginDir": str(plan.runtime_dir / "volume-plugins"),
        "failSwapOn": False,
        "podCIDR": plan.pod_cidr,
        "registerNode": True,
        "registerWithTaints": [{"key": REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}] if plan.tainted else [],
        # This VM's disk is shared with builds and caches: no evictions or image GC over
        # disk use the node itself did not cause.
        "evictionHard": {"memory.available": "100Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "maxPods": 20,
        "protectKernelDefaults": True,
        # Its own oom_score_adj: -999 by default, refused without CAP_SYS_RESOURCE.
        "oomScoreAdj": 0,
    }


def kubelet_args(plan: NodePlan, *, kubelet: Path) -> list[str]:
    """Flags that have no KubeletConfiguration field."""
    return [
        str(kubelet),
        f"--config={plan.kubelet_config}",
        f"--kubeconfig={plan.kubelet_kubeconfig}",
        f"--root-dir={plan.kubelet_root}",
        f"--cert-dir={plan.state_dir / 'kubelet-pki'}",
        f"--hostname-override={plan.node_name}",
        f"--node-ip={plan.node_ip}",
        f"--node-labels={REAL_NODE_KEY}=true",
        "--v=2",
    ]


KUBE_PROXY_USER = "system:kube-proxy"  # bound to system:node-proxier by the bootstrap RBAC


def kube_proxy_configuration(plan: NodePlan) -> dict:
    """kube-proxy in iptables mode inside the node's namespace (its rules live and die with
    it). It writes no machine-wide setting: nf_conntrack_max is global, so maxPerCore/min
    0 leave it alone, and the TCP timeouts 0s leave the namespace's own; its oom_score_adj
    0 (lowering it needs CAP_SYS_RESOURCE); node ports only on the node's address."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(plan.kube_proxy_kubeconfig)},
        "hostnameOverride": plan.node_name,
        "bindAddress": plan.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": plan.pod_cidr,
        "oomScoreAdj": 0,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "nodePortAddresses": [f"{plan.node_ip}/32"],
    }


def kube_proxy_args(plan: NodePlan, *, kube_proxy: Path) -> list[str]:
    return [str(kube_proxy), f"--config={plan.kube_proxy_config}", "--v=2"]


def node_kubeconfig(admin_kubeconfig: dict, *, client_cert_pem: bytes, client_key_pem: bytes) -> dict:
    """The cluster's own kubeconfig with the node's identity (system:node:<name>, group
    system:nodes: the Node authorizer and NodeRestriction then treat it as a kubelet) in
    place of the admin's. The server stays https://127.0.0.1:<port>: the node namespace's
    loopback, where the harness forwards to the apiserver."""
    import base64

    config = json.loads(json.dumps(admin_kubeconfig))
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    user_name = context["context"]["user"]
    config["users"] = [{
        "name": user_name,
        "user": {
            "client-certificate-data": base64.b64encode(client_cert_pem).decode(),
            "client-key-data": base64.b64encode(client_key_pem).decode(),
        },
    }]
    return config


def dump_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)
