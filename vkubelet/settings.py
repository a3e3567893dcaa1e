"""Settings of one virtual kubelet (one remote cluster), read from flags/environment in
vkubelet/cli.py only; every tunable has a default so tests build them directly.

They compose each loop's own settings (the kubelet API's limits, reflection's, the
virtual storage class's, the IP remapping), so they sit with the wiring, above the
loops: a loop is handed them and names their type for the type checker only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload.runtime.flags import parse_duration  # noqa: F401  (re-exported: settings speak durations)
from kube_offload.selector import label_key_problem, label_value_problem
from kube_offload.slice_requests import SliceRequest
from vkubelet.shared.ip_remapping import RemappingSettings
from vkubelet.shared.settings_error import SettingsError
from vkubelet.kubeletapi import serving_csr as sc
from vkubelet.kubeletapi.limits import StreamLimits
from vkubelet.reflection.settings import ReflectionSettings
from vkubelet.storage.settings import StorageSettings

# A cluster id ends up in a node name, in label values and in namespace names
# (``<ns>-<local id>``), so it must be a DNS-1123 label, the strictest of the three.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CLUSTER_ID_MAX = 63 - len(c.VIRTUAL_NODE_PREFIX)


@dataclass(frozen=True)
class Settings:
    """Everything one virtual kubelet needs to know about its two clusters."""

    # The REMOTE cluster's id: names the virtual node and its cluster-id label.
    cluster_id: str
    # The LOCAL cluster's id: the origin label on every remote object and the suffix of
    # twin namespace names.
    local_cluster_id: str
    local_kubeconfig: str | None = None
    remote_kubeconfig: str | None = None
    # ``namespace/name`` of the local Secret holding the remote kubeconfig (the one peer
    # wrote; the file above is its mounted copy): its bound token is renewed there by the
    # leader and followed by every replica (vkubelet/credentials.py). Empty: the token of
    # the file is used as it is, never renewed.
    remote_kubeconfig_secret: str = ""
    remote_kubeconfig_secret_key: str = "kubeconfig"
    # Renew at this share of the token's lifetime (the kubelet's rule for projected tokens).
    remote_token_renew_fraction: float = bt.DEFAULT_RENEW_FRACTION
    # Empty = ``kube-offload-<cluster_id>`` (the contract name).
    node_name: str = ""
    # Our tenant namespace on the provider, where we ask for twin namespaces
    # (TwinNamespace objects). Empty = ``kube-offload-tenant-<local_cluster_id>``.
    tenant_namespace: str = ""
    # Operator-configured labels of the virtual node (region, provider, ...), on top of
    # the contract labels; namespace cluster selectors are matched against all of them.
    node_labels: dict[str, str] = field(default_factory=dict)
    sharing_percentage: int = c.DEFAULT_SHARING_PERCENTAGE
    # How often the remote API server is probed, and how long it may stay silent before
    # the virtual node turns NotReady.
    ping_interval: float = 5.0
    ping_timeout: float = 20.0
    # A pod deleted while the remote cluster is unreachable is deleted locally (grace 0)
    # this long after its grace period ended (vkubelet/pods/termination.py).
    unreachable_deletion_margin: float = 30.0
    # Full resync of every informer (level-triggered safety net).
    resync_period: float = 300.0
    workers: int = 4
    # DaemonSet pods bound to the virtual node are left Pending, not offloaded
    # (vkubelet/pods/daemonsets.py); True offloads them like any pod.
    offload_daemonset_pods: bool = False
    # InternalIP and Hostname of the virtual node: where the API server reaches the
    # kubelet endpoint (kubectl logs/exec, added later).
    node_address: str = "127.0.0.1"
    kubelet_port: int = 10250
    # Kubelet API (kubectl logs/exec/attach; docs/logs-and-exec.md). Serving certificate
    # and key (PEM files); both empty = a certificate generated at start-up, which is
    # enough unless the apiserver runs with --kubelet-certificate-authority.
    kubelet_tls_cert: str = ""
    kubelet_tls_key: str = ""
    # Without those files: "self-signed" (generated) or "csr" (from the local CSR API,
    # kubernetes.io/kubelet-serving; vkubelet/kubeletapi/serving_cert.py), approved by the
    # vkubelet itself ("self") or by someone else ("external"), with the lifetime asked
    # (seconds; 0 = the signer's) and the renewal point (fraction; 0 = 70-84 % jittered).
    kubelet_serving_cert_mode: str = "self-signed"
    kubelet_serving_cert_approval: str = "external"
    kubelet_serving_cert_expiration: float = 0.0
    kubelet_serving_cert_rotation: float = 0.0
    # Where the kubelet API listens; empty = node_address (where the apiserver connects).
    kubelet_bind_address: str = ""
    # Client certificates signed by this CA (the apiserver's --kubelet-client-certificate)
    # authenticate as CN / O; empty = no client certificate is accepted.
    kubelet_client_ca: str = ""
    # Requests with no credentials: refused with 401 (False), or served as
    # system:anonymous, still authorized by SubjectAccessReview (True).
    kubelet_anonymous_auth: bool = False
    # How long TokenReview and SubjectAccessReview answers are kept (seconds; 0 = not
    # cached). Defaults are the kubelet's.
    kubelet_authn_cache_ttl: float = 120.0
    kubelet_authz_cache_authorized_ttl: float = 300.0
    kubelet_authz_cache_unauthorized_ttl: float = 30.0
    # How often the offloaded pods' usage is read from the remote metrics.k8s.io API
    # (seconds; 0 = /stats/summary and /metrics/resource are off).
    kubelet_metrics_interval: float = 15.0
    # A pod unschedulable in the remote cluster this long (seconds) is handed back: evicted
    # so its controller makes a pod the scheduler places elsewhere (vkubelet/pods/handback_rules.py);
    # 0 = never (nor for a refusal for good).
    handback_after: float = 180.0
    # How often our heartbeat Lease in the tenant namespace is renewed (seconds; 0 = not
    # at all): the provider's enforcer holds our reflected endpoints not ready once it goes
    # silent (vkubelet/node/heartbeat.py).
    provider_heartbeat_period: float = 10.0
    # Caps and timeouts of the kubelet API's connections and streams
    # (vkubelet/kubeletapi/limits.py).
    kubelet_limits: StreamLimits = field(default_factory=StreamLimits)
    log_level: str = "INFO"
    log_json: bool = False
    # Resource reflection: per type workers and policy (vkubelet/reflection/settings.py).
    reflection: ReflectionSettings = field(default_factory=ReflectionSettings)
    # The virtual storage class (vkubelet/storage/settings.py, docs/storage.md).
    storage: StorageSettings = field(default_factory=StorageSettings)
    # Pod IP remapping between overlapping pod CIDRs (vkubelet/shared/ip_remapping.py); unset =
    # addresses shown as each cluster assigns them.
    remapping: RemappingSettings = field(default_factory=RemappingSettings)
    # The LOCAL (home) cluster's Service domain: offloaded pods reach their home API server
    # under kubernetes.default.svc.<domain> too (docs/home-api.md).
    home_cluster_domain: str = "cluster.local"
    # Slice mode (--slice; docs/slices.md): this process is the virtual node of one slice of
    # the peering, named slice_node_name(kube-offload-<cluster id>, slice), sized from its
    # OffloadSlice's answer; None: the peering's own node, sized from the Consumer summary.
    slice: SliceRequest | None = None

    # Not flags: kubelet-like timings nobody should need to change.
    # The Lease is renewed this often and says it is valid this long; the node lifecycle
    # controller marks the node Unknown when the lease is older than its grace period.
    lease_renew_seconds: float = 10.0
    lease_duration_seconds: int = 40
    # The node status is written when something changed, and at least this often so the
    # Ready condition's heartbeat stays fresh (kubelet: nodeStatusReportFrequency).
    node_status_report_seconds: float = 60.0
    # Remote node/pod events trigger a capacity recomputation at most this often.
    capacity_min_interval_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.node_name:
            base = c.virtual_node_name(self.cluster_id)
            object.__setattr__(self, "node_name", c.slice_node_name(base, self.slice.name) if self.slice else base)
        if not self.tenant_namespace and self.local_cluster_id:
            object.__setattr__(self, "tenant_namespace", c.tenant_namespace(self.local_cluster_id))

    @property
    def slice_name(self) -> str:
        """The slice this process stands for ('' for the peering's own node)."""
        return self.slice.name if self.slice else ""

    def validate(self) -> None:
        """Raise SettingsError naming the first flag whose value cannot work."""
        for flag, value in (("--cluster-id", self.cluster_id), ("--local-cluster-id", self.local_cluster_id)):
            if not value:
                raise SettingsError(f"{flag} is required")
            if not _DNS_LABEL.match(value):
                raise SettingsError(
                    f"{flag}={value!r} must be lowercase letters, digits and '-', starting and ending "
                    "with a letter or digit (it is used in node, label and namespace names)"
                )
        if len(self.cluster_id) > CLUSTER_ID_MAX:
            raise SettingsError(f"--cluster-id={self.cluster_id!r} is longer than {CLUSTER_ID_MAX} characters")
        if len(self.local_cluster_id) > 63:
            raise SettingsError(f"--local-cluster-id={self.local_cluster_id!r} is longer than 63 characters")
        if len(self.node_name) > 63 or not _DNS_SUBDOMAIN.match(self.node_name):
            # 63, not 253: the node name is also the kubernetes.io/hostname label value.
            raise SettingsError(f"--node-name={self.node_name!r} must be a DNS name of at most 63 characters")
        if len(self.tenant_namespace) > 63 or not _DNS_LABEL.match(self.tenant_namespace):
            raise SettingsError(
                f"--tenant-namespace={self.tenant_namespace!r} must be a namespace name (lowercase letters, digits "
                f"and '-', at most 63 characters); unset, it is {c.TENANT_NAMESPACE_PREFIX}<local cluster id>"
            )
        for key, value in self.node_labels.items():
            problem = label_key_problem(key) or label_value_problem(value)
            if problem:
                raise SettingsError(f"--node-label {key}={value}: {problem}")
        if self.remote_kubeconfig_secret:
            namespace, _, name = self.remote_kubeconfig_secret.partition("/")
            if not _DNS_LABEL.match(namespace) or not _DNS_SUBDOMAIN.match(name):
                raise SettingsError(
                    f"--remote-kubeconfig-secret={self.remote_kubeconfig_secret!r} must be NAMESPACE/NAME of the local "
                    "Secret holding the remote kubeconfig (the one `kube-offload peer` wrote)"
                )
            if not self.remote_kubeconfig_secret_key:
                raise SettingsError("--remote-kubeconfig-secret-key must name the Secret's key holding the kubeconfig")
        problem = bt.fraction_problem("--remote-token-renew-fraction", self.remote_token_renew_fraction)
        if problem:
            raise SettingsError(problem)
        if not 1 <= self.sharing_percentage <= 100:
            raise SettingsError(f"--sharing-percentage={self.sharing_percentage} must be between 1 and 100")
        if self.ping_interval <= 0:
            raise SettingsError("--ping-interval must be positive")
        if self.ping_timeout < self.ping_interval:
            raise SettingsError("--ping-timeout must be at least --ping-interval")
        if self.unreachable_deletion_margin < 0:
            raise SettingsError("--unreachable-deletion-margin must not be negative")
        if self.resync_period <= 0:
            raise SettingsError("--resync-period must be positive")
        if self.workers < 1:
            raise SettingsError("--workers must be at least 1")
        if not 1 <= self.kubelet_port <= 65535:
            raise SettingsError(f"--kubelet-port={self.kubelet_port} is not a TCP port")
        for flag, ttl in (
            ("--kubelet-authentication-cache-ttl", self.kubelet_authn_cache_ttl),
            ("--kubelet-authorization-cache-authorized-ttl", self.kubelet_authz_cache_authorized_ttl),
            ("--kubelet-authorization-cache-unauthorized-ttl", self.kubelet_authz_cache_unauthorized_ttl),
        ):
            if ttl < 0:
                raise SettingsError(f"{flag} must not be negative (0 turns the cache off)")
        if self.provider_heartbeat_period < 0:
            raise SettingsError("--provider-heartbeat-period must not be negative (0 turns the heartbeat off)")
        if self.handback_after < 0:
            raise SettingsError("--handback-after must not be negative (0 turns handback off)")
        if self.kubelet_metrics_interval < 0:
            raise SettingsError("--kubelet-metrics-interval must not be negative (0 turns the metrics endpoints off)")
        if bool(self.kubelet_tls_cert) != bool(self.kubelet_tls_key):
            raise SettingsError("--kubelet-tls-cert and --kubelet-tls-key must be given together")
        for problem in serving_cert_problems(self):
            raise SettingsError(problem)
        if not self.node_address:
            raise SettingsError("--node-address is required")
        if len(self.home_cluster_domain) > 253 or not _DNS_SUBDOMAIN.match(self.home_cluster_domain):
            raise SettingsError(
                f"--home-cluster-domain={self.home_cluster_domain!r} must be a DNS domain such as cluster.local "
                "(the local cluster's Service domain, its kubelets' --cluster-domain)"
            )
        for problem in self.kubelet_limits.problems():
            raise SettingsError(problem)
        problem = self.reflection.problem()
        if problem:
            raise SettingsError(problem)
        problem = self.remapping.problem()
        if problem:
            raise SettingsError(problem)
        problem = self.storage.problem()
        if problem:
            raise SettingsError(problem)
        if self.storage.enabled and not (self.reflection.enabled("persistentvolumeclaims") or self.reflection.claims_by_peering):
            raise SettingsError(
                "--virtual-storage-class needs claims reflected: set --reflect-persistentvolumeclaims-workers "
                "above 0, or --virtual-storage-class '' to turn the virtual storage class off"
            )


def parse_node_labels(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` (repeated --node-label, or the comma-separated env value)."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--node-label {item!r} must be key=value")
        labels[key.strip()] = value.strip()
    return labels


def serving_cert_problems(settings: Settings) -> list[str]:
    """What is wrong with the serving certificate flags (pure)."""
    problems: list[str] = []
    if settings.kubelet_serving_cert_mode not in sc.MODES:
        problems.append(f"--kubelet-serving-cert-mode={settings.kubelet_serving_cert_mode!r}: one of {', '.join(sc.MODES)}")
    if settings.kubelet_serving_cert_approval not in sc.APPROVALS:
        problems.append(
            f"--kubelet-serving-cert-approval={settings.kubelet_serving_cert_approval!r}: one of {', '.join(sc.APPROVALS)}"
        )
    if settings.kubelet_serving_cert_mode == sc.MODE_CSR and settings.kubelet_tls_cert:
        problems.append("--kubelet-serving-cert-mode=csr requests its own certificate: drop --kubelet-tls-cert/--kubelet-tls-key")
    expiration = settings.kubelet_serving_cert_expiration
    if expiration and expiration < sc.MIN_EXPIRATION_SECONDS:
        problems.append(
            f"--kubelet-serving-cert-expiration={expiration:.0f}s: the CSR API's minimum is {sc.MIN_EXPIRATION_SECONDS}s (or 0)"
        )
    if not 0 <= settings.kubelet_serving_cert_rotation < 1:
        problems.append(
            f"--kubelet-serving-cert-rotation={settings.kubelet_serving_cert_rotation}: a fraction of the lifetime, "
            "0 < f < 1 (0: 70-84 %, jittered)"
        )
    return problems
