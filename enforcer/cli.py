"""``kube-offload enforcer``: settings in, the controller's loops (and, with a certificate,
the ShadowPod webhook) declared to the process manager (kube_offload/runtime/manager.py),
which runs them and stops them on SIGTERM/SIGINT; ``kube-offload enforcer
configuration`` prints the webhook's registration."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from kube_offload.constants import (
    DEFAULT_CONSUMER_TWIN_ROLE, ENFORCER_LEADER_LEASE, VERDICT_CACHE_ENTRIES, VERDICT_CACHE_TTL_SECONDS,
)
from kube_offload.runtime.flags import add_flag, add_gc_thaw_period_flag, add_list_page_size_flag, non_negative_duration, positive_duration, positive_int
from kube_offload.runtime.health import add_health_flag
from kube_offload.runtime.leader_election import add_leader_election_flags, timing_from_args
from kube_offload.runtime.kube import load_api_client
from kube_offload.runtime.logs import LEVELS, setup_logging
from kube_offload.webhook_target import add_target_flags, target_from_args

if TYPE_CHECKING:
    from enforcer.admission.webhook_server import WebhookSettings
    from enforcer.controller import Enforcer
    from kube_offload.runtime.manager import Manager

COMPONENT = "enforcer"
CONFIGURATION_COMPONENT = "enforcer-configuration"
DEFAULT_WEBHOOK_BIND = "0.0.0.0:9443"
# --webhook-process: the webhooks in a child process of their own, or in this one.
OWN = "own"
SHARED = "shared"
MODES = (OWN, SHARED)

log = logging.getLogger("kube_offload.enforcer")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "enforcer",
        help="run the ShadowPod controller in a remote cluster",
        description=(
            "Turn each ShadowPod into exactly one Pod and recreate that Pod at once when it is "
            "deleted or evicted. Runs in the remote (provider) cluster."
        ),
    )
    _add_process_flags(parser)
    add_flag(parser, COMPONENT, "--workers", default=4, type=positive_int, help="ShadowPods reconciled in parallel")
    add_flag(
        parser,
        COMPONENT,
        "--install-crd",
        default=False,
        type=bool,
        help=(
            "create the ShadowPod, Consumer and TwinNamespace CRDs from kube_offload/manifests "
            "where missing (--install-crd=true)"
        ),
    )
    add_flag(
        parser,
        COMPONENT,
        "--namespace",
        default=None,
        help=(
            "watch only this namespace; unset: all namespaces. Set, the TwinNamespace controller "
            "and the Consumer status loop (cluster-wide) do not run"
        ),
    )
    add_flag(
        parser,
        COMPONENT,
        "--consumer-twin-role",
        default=DEFAULT_CONSUMER_TWIN_ROLE,
        help="ClusterRole bound to a consumer's ServiceAccount (RoleBinding) in each of its twin namespaces",
    )
    add_flag(
        parser,
        COMPONENT,
        "--consumer-status-period",
        default="2s",
        type=positive_duration,
        help="recompute Consumer statuses (usage, capacity) at most this often; written only when changed",
    )
    add_flag(
        parser,
        COMPONENT,
        "--consumer-unreachable-grace",
        default="40s",
        type=non_negative_duration,
        help="a consumer whose heartbeat Lease (renewed by its virtual kubelet) is older than this is unreachable: "
        "the endpoints it reflected into its twin namespaces are marked not ready until it renews it again "
        "(docs/reflection.md, Service continuity); 0 turns this off",
    )
    add_health_flag(parser, COMPONENT)
    add_leader_election_flags(parser, COMPONENT)
    _add_webhook_flags(parser)
    add_flag(
        parser,
        COMPONENT,
        "--webhook-process",
        default=SHARED,
        choices=MODES,
        help="shared: the webhooks run in this process, beside the controllers, reading their caches; own: in a "
        "process of their own, started and stopped by this one, with caches of their own (no controller competes "
        "with an admission for the interpreter, for about twice the memory per ShadowPod; not yet shown faster: "
        "docs/performance.md; enforcer/webhook_process.py)",
    )
    parser.set_defaults(func=run)

    actions = parser.add_subparsers(dest="enforcer_action", metavar="ACTION")
    conf = actions.add_parser(
        "configuration",
        help="print the ValidatingWebhookConfiguration of the ShadowPod webhook",
        description=(
            "Print the ValidatingWebhookConfiguration that registers the enforcer's ShadowPod webhook "
            "(ShadowPod CREATE/UPDATE, failurePolicy Fail) for 'kubectl apply -f -'. Give --url for a "
            "webhook reached by URL, or --service-namespace/--service-name for one behind a Service."
        ),
    )
    add_target_flags(conf, CONFIGURATION_COMPONENT, example_url="https://127.0.0.1:9443")
    add_flag(conf, CONFIGURATION_COMPONENT, "--timeout-seconds", default=10, type=int,
             help="timeoutSeconds of the webhook (1-30)")
    conf.set_defaults(func=print_configuration)

    alone = actions.add_parser(
        "webhook",
        help="serve only the enforcer's webhooks (the enforcer starts this with --webhook-process=own)",
        description=(
            "Serve the enforcer's validating webhooks (ShadowPods, EndpointSlices, custom resources, "
            "TokenRequests, tenant objects) over caches of their own, with no controller beside them. "
            "The enforcer runs this as its child with --webhook-process=own, under its own identity, "
            "and stops it with itself: the child stops when its stdin reaches its end (the parent closed "
            "it or is gone), and says 'ready' on its stdout once its caches have listed."
        ),
    )
    _add_process_flags(alone)
    _add_webhook_flags(alone)
    alone.set_defaults(func=run_webhook)


def _add_process_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of any enforcer process: the enforcer's and its webhooks' own."""
    add_flag(
        parser,
        COMPONENT,
        "--kubeconfig",
        default=None,
        help="kubeconfig of the cluster to enforce in; unset: in-cluster config, then ~/.kube/config",
    )
    add_flag(
        parser,
        COMPONENT,
        "--resync-period",
        default="300s",
        type=positive_duration,
        help="reconcile every ShadowPod again after this long even if nothing changed (e.g. 90s, 5m); "
        "the caches' resync period",
    )
    add_flag(parser, COMPONENT, "--log-level", default="INFO", choices=LEVELS, help="log level")
    add_flag(parser, COMPONENT, "--log-json", default=False, type=bool, help="log JSON lines instead of text")
    add_list_page_size_flag(parser, COMPONENT)
    add_gc_thaw_period_flag(parser, COMPONENT)
    add_flag(
        parser,
        COMPONENT,
        "--gil-switch-interval",
        default="5ms",
        type=positive_duration,
        help="how long a busy thread keeps the interpreter before another waiting thread gets it "
        "(sys.setswitchinterval; Python's default 5ms): shorter lets a request thread back in sooner "
        "behind busy controllers, at the cost of more switching",
    )


def _add_webhook_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        COMPONENT,
        "--cluster-id",
        default="",
        help="this (provider) cluster's own id, as its consumers' virtual kubelets know it: the ShadowPod "
        "webhook refuses a pod whose offload chain already went through this cluster (a loop of peerings, "
        "docs/multihop.md); unset: no loop check here (the consumers' virtual kubelets still check)",
    )
    add_flag(
        parser,
        COMPONENT,
        "--webhook-bind",
        default=DEFAULT_WEBHOOK_BIND,
        help="HOST:PORT the ShadowPod validating webhook serves HTTPS on (only with --webhook-tls-cert)",
    )
    add_flag(
        parser,
        COMPONENT,
        "--webhook-tls-cert",
        default=None,
        help="PEM serving certificate of the ShadowPod webhook (re-read when it changes); unset: no webhook",
    )
    add_flag(parser, COMPONENT, "--webhook-tls-key", default=None, help="PEM private key of --webhook-tls-cert")
    add_flag(
        parser,
        COMPONENT,
        "--webhook-verdict-cache-ttl",
        default=VERDICT_CACHE_TTL_SECONDS,
        type=float,
        help="seconds the ShadowPod webhook reuses a Pod dry run's verdict for other pods of the same "
        "template (docs/enforcer.md); 0 turns the cache off: a dry run for every ShadowPod",
    )
    add_flag(
        parser,
        COMPONENT,
        "--webhook-verdict-cache-entries",
        default=VERDICT_CACHE_ENTRIES,
        type=int,
        help="pod templates whose dry-run verdict the ShadowPod webhook keeps (least recently used out first)",
    )


def _apply_process_flags(args: argparse.Namespace) -> None:
    """What every enforcer process sets up before anything else (the informers' page size
    before any is built)."""
    from kube_offload.runtime.informer import set_default_page_size

    set_default_page_size(args.list_page_size)
    from kube_offload.runtime.gc_freeze import freeze_from_flag

    freeze_from_flag(args.gc_thaw_period)
    sys.setswitchinterval(float(args.gil_switch_interval))
    setup_logging(args.log_level, json_format=args.log_json)


def run(args: argparse.Namespace) -> int:
    # Imported here so ``kube-offload --help`` does not pay for the controller's imports.
    from enforcer.controller import Enforcer, Settings
    from enforcer import observability
    from enforcer.crd import ensure_crds
    from enforcer.admission.webhook_server import ShadowPodWebhook
    from kube_offload.runtime.health import HealthSetupError
    from kube_offload.runtime.https_server import TLSSetupError
    from kube_offload.runtime.leader_election import LeaderElector, default_namespace
    from kube_offload.runtime.manager import Loop, Manager, serve
    from kube_offload.runtime.metrics import CLUSTER_REMOTE, instrument_api_client

    _apply_process_flags(args)
    timing = timing_from_args(args)
    if args.leader_elect and (problem := timing.problem()):
        raise SystemExit(f"kube-offload enforcer: {problem}")
    # argparse runs a string default through ``type`` too, so this is always seconds.
    settings = Settings(
        workers=args.workers,
        resync_seconds=float(args.resync_period),
        namespace=args.namespace or None,
        consumer_twin_role=args.consumer_twin_role,
        consumer_status_seconds=float(args.consumer_status_period),
        consumer_unreachable_grace_seconds=float(args.consumer_unreachable_grace),
        release_namespace=args.leader_elect_namespace or default_namespace(),
    )
    webhook_settings = _webhook_settings(args)
    api_client = load_api_client(args.kubeconfig or None)
    instrument_api_client(api_client, CLUSTER_REMOTE)  # the provider: "remote" to the consumers
    if args.install_crd:
        ensure_crds(api_client)

    # One Lease in our namespace (docs/high-availability.md): only its holder runs the
    # controllers and serves the ShadowPod webhook, whose quota ledger is per process.
    elector = None
    if args.leader_elect:
        elector = LeaderElector(
            api_client, name=ENFORCER_LEADER_LEASE, namespace=args.leader_elect_namespace or default_namespace(), timing=timing
        )
    try:
        manager = Manager(health_bind=args.health_bind, elector=elector, logger=log)
    except HealthSetupError as exc:
        raise SystemExit(f"kube-offload enforcer: {exc}") from None
    manager.handle_signals()

    enforcer = Enforcer(api_client, settings)
    webhook = None
    if webhook_settings is not None and args.webhook_process == OWN:
        _declare_webhook_process(manager, enforcer, args, webhook_settings, api_client)
    elif webhook_settings is not None:
        try:
            # The consumer loops' namespace and Consumer informers are shared, not duplicated.
            # (--namespace rules out both the webhook and the consumer loops.)
            loops = enforcer.consumer_loops
            webhook = ShadowPodWebhook(
                api_client,
                webhook_settings,
                shadowpods=enforcer.shadowpods,
                # What runs counts until it is gone (enforcer/consumers/quota.py), and the EndpointSlice
                # webhook's which-pod-IP-is-a-consumer's.
                pods=enforcer.pods,
                namespaces=loops.namespaces if loops else None,
                consumers=loops.consumers if loops else None,
                # The EndpointSlice webhook: the nodes' addresses.
                nodes=loops.nodes if loops else None,
                # A slice's ShadowPods: its OffloadSlice (docs/slices.md "Admission"); and how
                # many slices and TwinNamespace requests a consumer keeps.
                slices=loops.slices if loops else None,
                twin_requests=loops.requests if loops else None,
                resync_seconds=settings.resync_seconds,
            )
        except TLSSetupError as exc:
            raise SystemExit(f"kube-offload enforcer: {exc}") from None
        # Every pod the enforcer makes (the first and each recreation) is judged by the
        # admission's own rules against the Consumer as it is then (docs/enforcer.md).
        enforcer.judge_pods_with(webhook.validator.judge_pod)
        # A standby serves no webhook (its port is bound, not answered; the chart's
        # Service only sends to the Ready leader). It listens at once when leading:
        # /readyz is 503 until its caches sync.
        manager.add_loop(Loop(name="shadowpod-webhook", run=serve(webhook.start, webhook.stop),
                              readiness_informers=webhook.informers(), logger=log))
        manager.add_registry(webhook.server.metrics.registry)
    enforcer.declare(manager)
    observability.track(enforcer)
    log.info(
        "enforcer starting (namespace: %s, workers: %d, resync: %.0fs, ShadowPod webhook: %s, "
        "twin namespaces and Consumer status: %s)",
        settings.namespace or "all",
        settings.workers,
        settings.resync_seconds,
        f"{webhook_settings.bind}, {args.webhook_process} process" if webhook_settings else "off",
        f"on, twin role {settings.consumer_twin_role}" if enforcer.consumer_loops else "off (--namespace)",
    )
    code = manager.run()
    if manager.was_standby:
        if webhook is not None:
            webhook.server.server_close()
        log.info("enforcer stopped (was a standby)")
    else:
        log.info("enforcer stopped")
    return code


def _declare_webhook_process(manager: Manager, enforcer: Enforcer, args: argparse.Namespace, settings: WebhookSettings,
                             api_client: Any) -> None:
    """--webhook-process=own: the webhooks in a child process (enforcer/webhook_process.py),
    a loop of this one; here only what the controllers need of the admission, the pod judge."""
    from pathlib import Path

    from enforcer.webhook_process import PodJudge, WebhookProcess
    from kube_offload.runtime.https_server import parse_bind
    from kube_offload.runtime.manager import Loop, serve

    # What the child would refuse at its start, refused here, before anything runs.
    try:
        parse_bind(settings.bind)
    except ValueError as exc:
        raise SystemExit(f"kube-offload enforcer: --webhook-bind: {exc}") from None
    for flag, path in (("--webhook-tls-cert", settings.tls_cert), ("--webhook-tls-key", settings.tls_key)):
        if not Path(path).is_file():
            raise SystemExit(f"kube-offload enforcer: {flag}: no such file {path!r}")
    loops = enforcer.consumer_loops
    judge = PodJudge(
        api_client, shadowpods=enforcer.shadowpods, pods=enforcer.pods,
        namespaces=loops.namespaces if loops else None, consumers=loops.consumers if loops else None,
        slices=loops.slices if loops else None, resync_seconds=enforcer.settings.resync_seconds,
        cluster_id=settings.cluster_id,
    )
    # Every pod the enforcer makes (the first and each recreation) is judged by the
    # admission's own rules against the Consumer as it is then (docs/enforcer.md).
    enforcer.judge_pods_with(judge.validator.judge_pod)
    manager.add_loop(Loop(name="pod-judge-caches", run=serve(judge.start, judge.stop),
                          readiness_informers=judge.caches.informers(), logger=log))
    child = WebhookProcess(webhook_process_argv(args))
    # A standby runs no child: the port is not even bound (the chart's Service sends only to
    # the Ready leader). When leading, /readyz waits for the child's caches.
    manager.add_loop(Loop(name="shadowpod-webhook", run=child.run, readiness_informers=[child.readiness], logger=log))


def webhook_process_argv(args: argparse.Namespace) -> list[str]:
    """The command line of the webhooks' own process: this interpreter, ``kube-offload
    enforcer webhook`` and every flag it shares with the enforcer, as the enforcer has it."""
    flags = {
        "--resync-period": f"{float(args.resync_period)}s",
        "--log-level": args.log_level,
        "--log-json": str(bool(args.log_json)).lower(),
        "--list-page-size": str(args.list_page_size),
        "--gc-thaw-period": f"{float(args.gc_thaw_period)}s",
        "--gil-switch-interval": f"{float(args.gil_switch_interval)}s",
        "--cluster-id": args.cluster_id,
        "--webhook-bind": args.webhook_bind,
        "--webhook-tls-cert": args.webhook_tls_cert,
        "--webhook-tls-key": args.webhook_tls_key,
        "--webhook-verdict-cache-ttl": str(args.webhook_verdict_cache_ttl),
        "--webhook-verdict-cache-entries": str(args.webhook_verdict_cache_entries),
    }
    if args.kubeconfig:
        flags["--kubeconfig"] = args.kubeconfig
    return [sys.executable, "-m", "kube_offload.cli", "enforcer", "webhook", *(f"{k}={v}" for k, v in flags.items())]


def run_webhook(args: argparse.Namespace) -> int:
    """``kube-offload enforcer webhook``: the webhooks alone, until stdin ends or a signal."""
    import signal
    import threading

    from enforcer.webhook_process import serve_alone, watch_lifeline
    from kube_offload.runtime.https_server import TLSSetupError
    from kube_offload.runtime.metrics import CLUSTER_REMOTE, instrument_api_client

    _apply_process_flags(args)
    settings = _webhook_settings(args)
    if settings is None:
        raise SystemExit("kube-offload enforcer webhook: --webhook-tls-cert and --webhook-tls-key are required")
    api_client = load_api_client(args.kubeconfig or None)
    instrument_api_client(api_client, CLUSTER_REMOTE)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda _n, _f: stop.set())
    watch_lifeline(stop)
    try:
        serve_alone(api_client, settings, resync_seconds=float(args.resync_period), stop=stop)
    except TLSSetupError as exc:
        raise SystemExit(f"kube-offload enforcer webhook: {exc}") from None
    log.info("enforcer webhooks stopped")
    return 0


def _webhook_settings(args: argparse.Namespace) -> WebhookSettings | None:
    """The webhook's settings, or None when no certificate is given (no webhook)."""
    from enforcer.admission.webhook_server import WebhookSettings

    if not (args.webhook_tls_cert or args.webhook_tls_key):
        return None
    if not (args.webhook_tls_cert and args.webhook_tls_key):
        raise SystemExit("kube-offload enforcer: --webhook-tls-cert and --webhook-tls-key must be given together")
    if getattr(args, "namespace", None):
        # Quota sums a consumer's ShadowPods over all its twin namespaces.
        raise SystemExit(
            "kube-offload enforcer: the ShadowPod webhook needs every ShadowPod of the cluster; "
            "drop --namespace or the --webhook-tls-* flags"
        )
    if args.webhook_verdict_cache_ttl < 0 or args.webhook_verdict_cache_entries < 1:
        raise SystemExit(
            "kube-offload enforcer: --webhook-verdict-cache-ttl must be >= 0 (0: off) and "
            "--webhook-verdict-cache-entries >= 1"
        )
    if args.cluster_id and (problem := _cluster_id_problem(args.cluster_id)):
        raise SystemExit(f"kube-offload enforcer: --cluster-id={args.cluster_id!r} {problem}")
    return WebhookSettings(
        cluster_id=args.cluster_id,
        bind=args.webhook_bind,
        tls_cert=args.webhook_tls_cert,
        tls_key=args.webhook_tls_key,
        verdict_cache_ttl=args.webhook_verdict_cache_ttl,
        verdict_cache_entries=args.webhook_verdict_cache_entries,
    )


def _cluster_id_problem(cluster_id: str) -> str | None:
    from kube_offload.offload_chain import ChainError, parse

    if "," in cluster_id:
        return "must be one cluster id (no commas)"
    try:
        parse(cluster_id)
    except ChainError:
        return "must be lowercase letters, digits and '-', starting and ending with a letter or digit"
    return None


def print_configuration(args: argparse.Namespace) -> int:
    from enforcer.admission import registration

    try:
        target = target_from_args(args)
        text = registration.configuration_yaml(target, timeout_seconds=args.timeout_seconds)
    except ValueError as exc:
        print(f"kube-offload enforcer configuration: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
