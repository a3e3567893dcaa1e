"""The flags of ``kube-offload peer`` and ``kube-offload unpeer``."""

from __future__ import annotations

import argparse
import functools

import kube_offload
from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload.peer.connect import run_peer
from kube_offload.peer.disconnect import run_unpeer
from kube_offload.peer.drain import run_drain, run_undrain
from kube_offload.runtime.flags import add_flag, non_negative_duration, positive_duration


def token_expiration(text: str) -> float:
    """argparse type of --token-expiration: a duration the API server accepts."""
    seconds = positive_duration(text)
    problem = bt.expiration_problem("--token-expiration", seconds)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return seconds


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    peer = subparsers.add_parser(
        "peer",
        help="connect a local cluster to a remote one (both sides, idempotent)",
        description=(
            "Admit the local cluster as a consumer of the remote one (remote chart: identity, "
            "quota, Pod Security level), store the consumer's kubeconfig as a Secret in the local "
            "cluster, run a virtual kubelet for the remote (local chart) and wait until its node is "
            "Ready. Running it again changes nothing; --dry-run prints the plan. See docs/install.md."
        ),
    )
    _common_flags(peer, "peer")
    flag = functools.partial(add_flag, peer, "peer")
    flag("--remote-server", default="",
         help="URL of the remote API server as the local cluster's PODS reach it; unset: the server in the remote "
              "kubeconfig (refused when it is a loopback address, which a pod cannot reach)")
    flag("--quota", default="", help="the consumer's quota on the remote, e.g. cpu=8,memory=16Gi,pods=50; unset: keep the release's (required "
                                         "when it has none: no default fits every provider)")
    flag("--pod-security-level", default="",
         help=f"{' | '.join(c.PSA_LEVELS)}: Pod Security level of the consumer's twin namespaces on the remote; unset: keep (chart default baseline)")
    add_flag(peer, "peer", "--node-label", default=[], action="append",
             help="label the provider suggests for the virtual node, key=value, repeatable (region, provider...)")
    add_flag(peer, "peer", "--slice", default=[], action="append",
             help="ask the remote for a slice of one of its pools, NAME=POOL:RESOURCE=QUANTITY,..., e.g. "
                  "gpu=gpu:cpu=2,memory=4Gi,nvidia.com/gpu=1, repeatable: each slice is one more virtual node "
                  "(kube-offload-<remote id>-NAME) and vkubelet Deployment, sized from what the provider accepts "
                  "(docs/slices.md); the provider's admin defines the pools (remote chart consumers[].pools); "
                  "a slice the release has that is not listed is removed: its pods evicted, then its node, Leases and "
                  "OffloadSlice deleted; 'none': remove every slice; unset: keep the slices the release has")
    flag("--policy-file", default="",
         help="YAML/JSON file holding the consumer's provider policy (Consumer spec.policy, docs/security.md); "
              "replaces its whole policy; unset: keep (none: the safe defaults)")
    for grant, (section, key) in p.GRANT_FLAGS.items():
        # default None: an unset flag keeps the key; "" grants none.
        peer.add_argument(grant, default=None, metavar="A,B",
                          help=f"comma-separated values of spec.policy.{section}.{key}, set on top of --policy-file "
                               "(or of the policy the release has); '' grants none; unset: keep")
    add_flag(peer, "peer", "--local-values", default=[], action="append",
             help="extra values file for the local chart, repeatable (e.g. image.repository, webhook.enabled)")
    add_flag(peer, "peer", "--remote-values", default=[], action="append",
             help="extra values file for the remote chart, repeatable (e.g. image.repository)")
    flag("--token-expiration", default="24h", type=token_expiration,
         help="lifetime asked for the consumer's bound token (TokenRequest; the remote API server may shorten it, "
              "at least 10m); the virtual kubelet renews it itself at 80%% of its lifetime, and peer renews one "
              "found expired or past that point (docs/security.md)")
    peer.add_argument("--gateway", action="store_true",
                      help="run kube-offload's own network fabric for the pair: a WireGuard gateway in each cluster, "
                           "pods of each reaching the other's under remapped addresses (docs/networking.md); needs the "
                           "four --*-pod-cidr* flags; the virtual kubelet's remapping is set from them; unset: keep")
    flag("--local-pod-cidr", default="", help="with --gateway: the local cluster's pod CIDR (as its network plugin assigns it)")
    flag("--local-pod-cidr-remapped", default="",
         help="with --gateway: a range of the same size, free in the remote cluster, under which its pods reach the local ones")
    flag("--remote-pod-cidr", default="", help="with --gateway: the remote cluster's pod CIDR")
    flag("--remote-pod-cidr-remapped", default="",
         help="with --gateway: a range of the same size, free in the local cluster, under which local pods reach the remote ones "
              "(offloaded pods' IPs are shown in it)")
    flag("--gateway-endpoint", default="",
         help="with --gateway: HOST:PORT where the local cluster's nodes reach the remote gateway (UDP); unset: its Service "
              "(load balancer, or NodePort on its node's address)")
    flag("--local-gateway-endpoint", default="",
         help="with --gateway: HOST:PORT where the remote cluster's nodes reach the local gateway; unset: its Service, or none "
              "(the local gateway then dials out and the remote one answers)")
    peer.add_argument("--rotate-gateway-keys", action="store_true",
                      help="with --gateway: both gateways make new key pairs and get each other's new public key")
    peer.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                      help="wait for the releases' workloads and until the virtual node is Ready (default: wait)")
    peer.set_defaults(func=run_peer)

    unpeer = subparsers.add_parser(
        "unpeer",
        help="disconnect a local cluster from a remote one and leave nothing of it there",
        description=(
            "Cordon the virtual node, evict its pods (their controllers recreate them elsewhere), "
            "remove the remote from the local release, the kubeconfig Secret and the node; then on "
            "the remote delete the consumer's twin namespaces (with their ShadowPods, pods and "
            "reflected objects) and remove the consumer from the remote release (its identity, "
            "tenant namespace and RBAC). --dry-run prints the plan. See docs/install.md."
        ),
    )
    _common_flags(unpeer, "unpeer")
    unpeer.set_defaults(func=run_unpeer)

    drain = subparsers.add_parser(
        "drain",
        help="provider side: take every pod of one consumer back (its pods go home), until undrain",
        description=(
            "Run against the PROVIDER cluster. Sets Consumer spec.drain: the consumer may create no new "
            "ShadowPods; its virtual kubelet taints its virtual node "
            f"{c.TAINT_PROVIDER_DRAINING_KEY}=true:{c.TAINT_PROVIDER_DRAINING_EFFECT}, so the consumer's "
            "cluster evicts the pods offloaded here and their controllers recreate them on its own nodes; "
            "when --grace has passed the enforcer deletes the consumer's ShadowPods (and pods) still here, "
            "whether or not the consumer took part. Waits and reports until nothing of the consumer runs "
            "here (--no-wait: return at once). Draining again keeps the first start time. "
            "Undo with kube-offload undrain. See docs/enforcer.md, \"Draining a consumer\"."
        ),
    )
    _provider_flags(drain, "drain")
    add_flag(drain, "drain", "--grace", default=f"{c.DEFAULT_DRAIN_GRACE_SECONDS}s", type=non_negative_duration,
             help="how long the consumer's pods may take to leave before the provider deletes them (e.g. 90s, 10m; "
                  "0: at once; at most 30 days)")
    drain.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                       help="wait until no ShadowPod of the consumer is left, printing progress (default: wait)")
    drain.set_defaults(func=run_drain)

    undrain = subparsers.add_parser(
        "undrain",
        help="provider side: end a drain; the consumer may offload here again",
        description=(
            "Run against the PROVIDER cluster. Removes Consumer spec.drain: new ShadowPods are admitted "
            "again and the consumer's virtual node loses its drain taint, so new pods may be offloaded here. "
            "Pods already recreated at home stay there. A cordon the provider set itself (spec.cordoned) stays."
        ),
    )
    _provider_flags(undrain, "undrain")
    undrain.set_defaults(func=run_undrain)


def _provider_flags(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("consumer", metavar="CONSUMER", help="the consumer's cluster id (its Consumer's name: kubectl get consumers)")
    flag = functools.partial(add_flag, parser, command)
    flag("--kubeconfig", default=None, help="admin kubeconfig of the PROVIDER (remote) cluster; unset: $KUBECONFIG or ~/.kube/config")
    flag("--context", default=None, help="context of --kubeconfig; unset: its current context")


def _common_flags(parser: argparse.ArgumentParser, command: str) -> None:
    flag = functools.partial(add_flag, parser, command)
    flag("--local-kubeconfig", default=None, help="admin kubeconfig of the LOCAL (consumer) cluster; unset: $KUBECONFIG or ~/.kube/config")
    flag("--local-context", default=None, help="context of --local-kubeconfig; unset: its current context")
    flag("--remote-kubeconfig", default=None, help="admin kubeconfig of the REMOTE (provider) cluster; unset: $KUBECONFIG or ~/.kube/config")
    flag("--remote-context", default=None, help="context of --remote-kubeconfig; unset: its current context")
    flag("--local-cluster-id", default="", help="id of the local cluster (required; also its consumer name on the remote)")
    flag("--remote-cluster-id", default="", help="id of the remote cluster (required; the node is kube-offload-<id>)")
    flag("--namespace", default=p.DEFAULT_NAMESPACE, help="namespace of both Helm releases (and of the kubeconfig Secret)")
    flag("--local-release", default=p.DEFAULT_RELEASE, help="Helm release name of the local chart")
    flag("--remote-release", default=p.DEFAULT_RELEASE, help="Helm release name of the remote chart")
    flag("--helm", default="helm", help="the helm binary (Helm 3): a path or a name on PATH")
    flag("--charts-dir", default="",
         help="directory holding kube-offload-local and kube-offload-remote; unset: the charts/ of this checkout")
    flag("--chart-repository", default="",
         help="OCI repository holding both charts, e.g. oci://registry.example.com/charts (installs "
              "<repository>/kube-offload-local and -remote at --chart-version); unset: --charts-dir")
    flag("--chart-version", default=kube_offload.__version__, help="version of the charts in --chart-repository")
    flag("--plain-http", default=False, type=bool,
         help="--chart-repository speaks plain HTTP (helm --plain-http), e.g. a registry on 127.0.0.1")
    flag("--timeout", default="5m", type=positive_duration, help="how long each wait may take (Helm, token, node, deletions)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")

