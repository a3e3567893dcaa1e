"""``kube-offload vkubelet``: flags in, the virtual kubelet's loops declared to the process
manager (kube_offload/runtime/manager.py), which runs them and stops them on SIGTERM/SIGINT.

Only settings and wiring live here; see vkubelet/runner.py for what runs.
"""

from __future__ import annotations

import argparse
import functools
import dataclasses
import logging
import sys

import kube_offload
from kube_offload import constants as c
from kube_offload.bound_tokens import DEFAULT_RENEW_FRACTION
from kube_offload.runtime.flags import add_flag, add_gc_thaw_period_flag, add_list_page_size_flag, appended, non_negative_duration, positive_duration, positive_int
from kube_offload.runtime.health import add_health_flag
from kube_offload.runtime.leader_election import add_leader_election_flags, timing_from_args
from kube_offload.runtime.logs import LEVELS, setup_logging
from vkubelet.shared.ip_remapping import add_remapping_flags, remapping_settings_from_args
from vkubelet.kubeletapi.limits import add_limit_flags, limits_from_args
from kube_offload.slice_requests import SliceError, SliceRequest, parse_slice
from vkubelet.reflection.flags import add_reflection_flags, reflection_settings_from_args
from vkubelet.reflection.settings import slice_reflection
from vkubelet.settings import Settings, parse_node_labels
from vkubelet.shared.settings_error import SettingsError
from vkubelet.storage.settings import add_storage_flags, storage_settings_from_args
from vkubelet.home_api.settings import add_home_api_flags, home_api_settings_from_args

COMPONENT = "vkubelet"

log = logging.getLogger("kube_offload.vkubelet")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "vkubelet",
        help="run the virtual kubelet of one remote cluster (runs in the local cluster)",
        description=(
            "Show one remote cluster as a virtual node of the local cluster and run the pods "
            "bound to that node in the remote cluster (as ShadowPods in twin namespaces), "
            "keeping their local status true. One process per remote cluster. "
            "See docs/virtual-kubelet.md."
        ),
    )
    flag = functools.partial(add_flag, parser, COMPONENT)
    flag("--local-kubeconfig", default=None,
         help="kubeconfig of the local cluster; unset: in-cluster config, then ~/.kube/config")
    flag("--remote-kubeconfig", default=None, help="kubeconfig of the remote cluster (required)")
    flag("--remote-kubeconfig-secret", default="",
         help="NAMESPACE/NAME of the local Secret holding the remote kubeconfig (written by `kube-offload peer`; "
              "--remote-kubeconfig is its mounted copy): the leader renews its bound token there, every replica "
              "follows it without a restart; unset: the token is never renewed")
    flag("--remote-kubeconfig-secret-key", default="kubeconfig", help="key of --remote-kubeconfig-secret holding the kubeconfig")
    flag("--remote-token-renew-fraction", default=DEFAULT_RENEW_FRACTION, type=float,
         help="renew the remote bound token once this share of its lifetime has passed (0 < f < 1; the "
              "kubelet's rule is 0.8)")
    flag("--cluster-id", default="", help="id of the REMOTE cluster; the node is named kube-offload-<id> (required)")
    flag("--local-cluster-id", default="",
         help="id of the LOCAL cluster: the origin label on remote objects and the suffix of twin namespaces (required)")
    flag("--tenant-namespace", default="",
         help="our tenant namespace in the remote cluster, where twin namespaces are requested; "
              f"unset: {c.TENANT_NAMESPACE_PREFIX}<local-cluster-id>")
    flag("--node-name", default="", help=f"name of the virtual node; unset: {c.VIRTUAL_NODE_PREFIX}<cluster-id>")
    add_flag(parser, COMPONENT, "--node-label", default=[], action="append",
             help="extra label of the virtual node, key=value, repeatable (region, provider...)")
    flag("--slice", default="",
         help="be the virtual node of one slice of this peering (docs/slices.md): NAME=POOL:RESOURCE=QUANTITY,..., "
              "e.g. gpu=gpu:cpu=2,memory=4Gi,nvidia.com/gpu=1. The process writes OffloadSlice NAME in its tenant "
              "namespace, names its node kube-offload-<cluster-id>-NAME and sizes it from what the provider "
              "accepts; resource reflection stays with the peering's own vkubelet (only pod Events here). "
              "One process per slice; unset: the peering's own node")
    flag("--sharing-percentage", default=c.DEFAULT_SHARING_PERCENTAGE, type=int,
         help="share of the remote cluster's free resources the virtual node offers (1-100)")
    flag("--ping-interval", default="5s", type=positive_duration, help="how often the remote API server is probed")
    flag("--ping-timeout", default="20s", type=positive_duration,
         help="the node turns NotReady once the remote API server has been unreachable this long")
    flag("--resync-period", default="300s", type=positive_duration, help="full re-check of every object even if nothing changed")
    flag("--unreachable-deletion-margin", default="30s", type=non_negative_duration,
         help="a pod deleted while the remote cluster is unreachable is removed locally this long after its "
              "grace period ended, with a Warning Event (its remote pod is deleted when the cluster answers)")
    flag("--workers", default=4, type=positive_int, help="pods reconciled in parallel")
    flag("--offload-daemonset-pods", default=False, type=bool,
         help="offload pods of DaemonSets that tolerate the virtual node's taint; by default they stay "
              "Pending on the virtual node with reason DaemonSetNotOffloaded (node agents stay home)")
    flag("--node-address", default="127.0.0.1",
         help="InternalIP and Hostname address of the virtual node (where the kubelet endpoint is reached)")
    flag("--kubelet-port", default=10250, type=int, help="kubelet endpoint port published on the node")
    flag("--kubelet-tls-cert", default="",
         help="serving certificate (PEM) of the kubelet endpoint (kubectl logs/exec); unset: one is generated at start-up")
    flag("--kubelet-tls-key", default="", help="private key (PEM) of --kubelet-tls-cert")
    flag("--kubelet-serving-cert-mode", default="self-signed", choices=("self-signed", "csr"),
         help="without --kubelet-tls-cert: self-signed (generated at start-up; enough unless the apiserver runs "
              "with --kubelet-certificate-authority) or csr (requested from the local CSR API with the "
              "kubernetes.io/kubelet-serving signer, rotated before expiry; docs/certificates.md)")
    flag("--kubelet-serving-cert-approval", default="external", choices=("self", "external"),
         help="csr mode: who approves the request: external (an admin or an approver; the vkubelet waits) or "
              "self (the vkubelet approves its own request; RBAC: approve on the kubelet-serving signer, "
              "see docs/security.md)")
    flag("--kubelet-serving-cert-expiration", default="0s", type=non_negative_duration,
         help="csr mode: the lifetime asked for (expirationSeconds, at least 10m); 0: the signer's default")
    flag("--kubelet-serving-cert-rotation", default=0.0, type=float,
         help="csr mode: renew at this fraction of the lifetime (0 < f < 1); 0: at 70-84 %% (jittered, as a kubelet)")
    flag("--kubelet-bind-address", default="",
         help="address the kubelet endpoint listens on (0.0.0.0: all); unset: the --node-address")
    flag("--kubelet-client-ca", default="",
         help="CA file: client certificates it signed authenticate as user CN, groups O; give the CA of the "
              "apiserver's --kubelet-client-certificate, or kubectl logs/exec are refused (401)")
    flag("--kubelet-anonymous-auth", default=False, type=bool,
         help="serve requests without credentials as system:anonymous (still authorized by "
              "SubjectAccessReview) instead of refusing them with 401")
    flag("--kubelet-authentication-cache-ttl", default="2m", type=non_negative_duration,
         help="how long a TokenReview answer for a bearer token is kept (a refused token: at most 30s); 0: not cached")
    flag("--kubelet-authorization-cache-authorized-ttl", default="5m", type=non_negative_duration,
         help="how long an allowed SubjectAccessReview answer is kept; 0: not cached")
    flag("--kubelet-authorization-cache-unauthorized-ttl", default="30s", type=non_negative_duration,
         help="how long a denied SubjectAccessReview answer is kept; 0: not cached")
    flag("--kubelet-metrics-interval", default="15s", type=non_negative_duration,
         help="how often the offloaded pods' usage is read from the remote metrics.k8s.io API for "
              "/stats/summary and /metrics/resource (kubectl top); 0: those endpoints are off")
    flag("--provider-heartbeat-period", default="10s", type=non_negative_duration,
         help="renew this consumer's heartbeat Lease in its tenant namespace on the provider this often; the "
              "provider holds the endpoints reflected there not ready once it stops (docs/reflection.md, Service "
              "continuity); 0: no heartbeat")
    flag("--handback-after", default="3m", type=non_negative_duration,
         help="hand back a pod the remote cluster cannot schedule for this long (or refuses for good): "
              "evict it so its controller's next pod runs elsewhere (docs/virtual-kubelet.md#handback); 0: never")
    flag("--home-cluster-domain", default="cluster.local",
         help="the LOCAL cluster's Service domain (its kubelets' --cluster-domain): offloaded pods reach their "
              "home API server as kubernetes.default.svc.<domain> too (docs/home-api.md)")
    flag("--log-level", default="INFO", type=str.upper, choices=LEVELS, help="log level")
    flag("--log-json", default=False, type=bool, help="log JSON lines instead of text")
    add_health_flag(parser, COMPONENT)
    add_list_page_size_flag(parser, COMPONENT)
    add_gc_thaw_period_flag(parser, COMPONENT)
    add_leader_election_flags(parser, COMPONENT)
    add_limit_flags(parser, COMPONENT)
    add_reflection_flags(parser, COMPONENT)
    add_storage_flags(parser, COMPONENT)
    add_remapping_flags(parser, COMPONENT)
    add_home_api_flags(parser, COMPONENT)
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings(
        cluster_id=args.cluster_id,
        local_cluster_id=args.local_cluster_id,
        local_kubeconfig=args.local_kubeconfig or None,
        remote_kubeconfig=args.remote_kubeconfig or None,
        remote_kubeconfig_secret=args.remote_kubeconfig_secret or "",
        remote_kubeconfig_secret_key=args.remote_kubeconfig_secret_key or "",
        remote_token_renew_fraction=float(args.remote_token_renew_fraction),
        node_name=args.node_name or "",
        tenant_namespace=args.tenant_namespace or "",
        node_labels=parse_node_labels(appended(args, "--node-label")),
        sharing_percentage=args.sharing_percentage,
        ping_interval=float(args.ping_interval),
        ping_timeout=float(args.ping_timeout),
        resync_period=float(args.resync_period),
        workers=args.workers,
        unreachable_deletion_margin=float(args.unreachable_deletion_margin),
        offload_daemonset_pods=bool(args.offload_daemonset_pods),
        node_address=args.node_address,
        kubelet_port=args.kubelet_port,
        kubelet_tls_cert=args.kubelet_tls_cert or "",
        kubelet_tls_key=args.kubelet_tls_key or "",
        kubelet_serving_cert_mode=args.kubelet_serving_cert_mode,
        kubelet_serving_cert_approval=args.kubelet_serving_cert_approval,
        kubelet_serving_cert_expiration=float(args.kubelet_serving_cert_expiration),
        kubelet_serving_cert_rotation=float(args.kubelet_serving_cert_rotation),
        kubelet_bind_address=args.kubelet_bind_address or "",
        kubelet_client_ca=args.kubelet_client_ca or "",
        kubelet_anonymous_auth=bool(args.kubelet_anonymous_auth),
        kubelet_authn_cache_ttl=float(args.kubelet_authentication_cache_ttl),
        kubelet_authz_cache_authorized_ttl=float(args.kubelet_authorization_cache_authorized_ttl),
        kubelet_authz_cache_unauthorized_ttl=float(args.kubelet_authorization_cache_unauthorized_ttl),
        kubelet_metrics_interval=float(args.kubelet_metrics_interval),
        handback_after=float(args.handback_after),
        provider_heartbeat_period=float(args.provider_heartbeat_period),
        log_level=args.log_level,
        log_json=bool(args.log_json),
        kubelet_limits=limits_from_args(args),
        reflection=reflection_settings_from_args(args),
        storage=storage_settings_from_args(args),
        remapping=remapping_settings_from_args(args),
        home_cluster_domain=args.home_cluster_domain,
        slice=_slice_from_args(args),
    )
    if settings.slice is not None:
        # A slice's vkubelet reflects only its pods' Events and tokens (docs/slices.md). It
        # serves the virtual storage class on its node (the stand-ins of claims selected for
        # it; the peering's own vkubelet reflects the claims), never the physical delegate,
        # which is one process's per cluster.
        settings = dataclasses.replace(
            settings,
            reflection=slice_reflection(settings.reflection),
            storage=dataclasses.replace(settings.storage, local_class=""),
        )
    settings.validate()
    if not settings.remote_kubeconfig:
        raise SettingsError("--remote-kubeconfig is required")
    return settings


def _slice_from_args(args: argparse.Namespace) -> SliceRequest | None:
    if not args.slice:
        return None
    try:
        return parse_slice(args.slice)
    except SliceError as exc:
        raise SettingsError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, json_format=bool(args.log_json))
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"kube-offload vkubelet: {exc}", file=sys.stderr)
        return 2
    timing = timing_from_args(args)
    if args.leader_elect and (problem := timing.problem()):
        print(f"kube-offload vkubelet: {problem}", file=sys.stderr)
        return 2
    # Imported here so ``kube-offload --help`` does not pay for the runner's imports.
    from kube_offload.runtime.health import HealthSetupError
    from kube_offload.runtime.informer import set_default_page_size
    from kube_offload.runtime.kube import Kube, load_api_client
    from kube_offload.runtime.leader_election import LeaderElector, default_namespace
    from kube_offload.runtime.manager import Manager
    from kube_offload.runtime.metrics import CLUSTER_LOCAL, CLUSTER_REMOTE, instrument_api_client
    from vkubelet import observability
    from vkubelet.credentials import declare_credentials
    from vkubelet.kubeletapi.loop import kubelet_api_loop
    from vkubelet.home_api.discovery import Discovery
    from vkubelet.home_api.loop import endpoint_source, home_api_loop
    from vkubelet.reflection.loops import reflection_loops
    from vkubelet.storage.virtual import storage_loops
    from vkubelet.runner import VirtualKubelet

    set_default_page_size(args.list_page_size)  # before any informer is built
    # The caches (5,000 pods: ~300,000 objects) out of every full collection but one per
    # period, as the enforcer's (docs/performance.md, "vkubelet memory", gc.freeze A/B).
    from kube_offload.runtime.gc_freeze import freeze_from_flag

    freeze_from_flag(args.gc_thaw_period)
    local = load_api_client(settings.local_kubeconfig)
    remote = load_api_client(settings.remote_kubeconfig)
    # The user agent names the field manager: managedFields then say who wrote what.
    for api_client in (local, remote):
        api_client.user_agent = f"kube-offload-vkubelet/{kube_offload.__version__} ({settings.node_name})"
    instrument_api_client(local, CLUSTER_LOCAL)
    instrument_api_client(remote, CLUSTER_REMOTE)
    # One Lease per remote cluster, in our namespace of the local cluster (not the node's
    # heartbeat Lease in kube-node-lease): only its holder runs the loops, so the node's
    # status and addresses are written by one replica (docs/high-availability.md).
    elector = None
    if args.leader_elect:
        elector = LeaderElector(
            local,
            # One Lease per virtual node: each slice's process elects its own leader.
            name=c.vkubelet_leader_lease_name(settings.cluster_id, settings.slice_name if settings.slice else None),
            namespace=args.leader_elect_namespace or default_namespace(),
            timing=timing,
        )
    try:
        manager = Manager(health_bind=args.health_bind, elector=elector, logger=log)
    except HealthSetupError as exc:  # e.g. the port is taken
        print(f"kube-offload vkubelet: {exc}", file=sys.stderr)
        return 2
    manager.handle_signals(note=" (the node and the offloaded pods stay)")
    try:
        # One reading of the relay, shared: the uplink loop keeps it fresh, the pod
        # translation points offloaded pods at it (docs/home-api.md).
        home_api = home_api_settings_from_args(args)
        relay = Discovery(Kube(remote), settings.tenant_namespace)
        vk = VirtualKubelet(settings, local, remote, extra_loops=[*reflection_loops(settings.reflection), *storage_loops(settings), kubelet_api_loop,
                                                            home_api_loop(home_api, relay)],
                            home_api=endpoint_source(home_api, relay))
    except SettingsError as exc:  # e.g. the certificate unreadable
        manager.health.server_close()
        print(f"kube-offload vkubelet: {exc}", file=sys.stderr)
        return 2
    # Every loop (the node included) needs the Lease: a standby starts nothing but the
    # follower of the remote credentials, so it takes over with the current token.
    vk.declare(manager)
    declare_credentials(manager, settings, local, remote, vk.recorder)
    observability.declare_health(manager, vk)
    log.info(
        "virtual kubelet for cluster %s starting: node %s, local cluster %s, sharing %d%%",
        settings.cluster_id,
        settings.node_name,
        settings.local_cluster_id,
        settings.sharing_percentage,
    )
    code = manager.run()
    log.info("virtual kubelet stopped (was a standby)" if manager.was_standby else "virtual kubelet stopped")
    return code
