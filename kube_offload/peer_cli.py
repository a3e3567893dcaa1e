"""``kube-offload peer`` / ``kube-offload unpeer``: read both clusters, plan, print, act.

The decisions are in :mod:`kube_offload.peering` (pure, table-tested); this module is the
I/O around them: Helm (``helm`` on PATH or ``--helm``) for the two releases, the
Kubernetes API for everything else, both with the admin kubeconfigs the user passes.
``--dry-run`` prints the plan and stops before the first change.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

import kube_offload
from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload.runtime.flags import add_flag, appended, positive_duration
from kube_offload.runtime.kube import ApiError, call, call_json, load_api_client
from kube_offload.times import now_time

POLL_SECONDS = 1.0
OCI_SCHEME = "oci://"
HELM_INSTALL = "https://helm.sh/docs/intro/install/"


class CommandError(RuntimeError):
    """Something on the way failed (a cluster, Helm, a timeout); the message says what."""


class Unreachable(CommandError):
    """An API server did not answer; worth retrying while waiting."""


# --- flags ----------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
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
    flag = lambda name, **kw: add_flag(peer, "peer", name, **kw)  # noqa: E731
    flag("--remote-server", default="",
         help="URL of the remote API server as the local cluster's PODS reach it; unset: the server in the remote "
              "kubeconfig (refused when it is a loopback address, which a pod cannot reach)")
    flag("--quota", default="", help="the consumer's quota on the remote, e.g. cpu=8,memory=16Gi,pods=50; unset: keep (none: unlimited)")
    flag("--pod-security-level", default="",
         help=f"{' | '.join(c.PSA_LEVELS)}: Pod Security level of the consumer's twin namespaces on the remote; unset: keep (chart default baseline)")
    add_flag(peer, "peer", "--node-label", default=[], action="append",
             help="label the provider suggests for the virtual node, key=value, repeatable (region, provider...)")
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


def _common_flags(parser: argparse.ArgumentParser, command: str) -> None:
    flag = lambda name, **kw: add_flag(parser, command, name, **kw)  # noqa: E731
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


# --- small I/O helpers ----------------------------------------------------------------------
def _say(line: str) -> None:
    print(line, flush=True)


def _wait(check: Callable[[], Any], *, timeout: float, what: str, hint: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            result = check()
            if result:
                return result
        except (ApiError, Unreachable) as exc:
            if isinstance(exc, ApiError) and not exc.transient:
                raise
            last_error = f" (last error: {exc})"
        if time.monotonic() >= deadline:
            raise CommandError(f"timed out after {int(timeout)}s waiting {what}{last_error}{'; ' + hint if hint else ''}")
        time.sleep(POLL_SECONDS)


def resolve_helm(value: str) -> str:
    found = shutil.which(value) if os.sep not in value else (value if os.access(value, os.X_OK) else None)
    if not found:
        raise p.PeeringError(f"--helm {value!r}: no such executable; install Helm 3 ({HELM_INSTALL}) or pass --helm PATH")
    return found


def resolve_charts_dir(value: str) -> Path:
    if value:
        candidates = [Path(value)]
    else:
        # A checkout keeps charts/ next to the package; the wheel does not ship the charts.
        candidates = [Path(kube_offload.__file__).resolve().parents[1] / "charts", Path.cwd() / "charts"]
    for candidate in candidates:
        if (candidate / p.LOCAL_CHART / "Chart.yaml").exists() and (candidate / p.REMOTE_CHART / "Chart.yaml").exists():
            return candidate.resolve()
    where = value or " or ".join(str(c_) for c_ in candidates)
    raise p.PeeringError(
        f"--charts-dir: no {p.LOCAL_CHART} and {p.REMOTE_CHART} charts in {where}; pass --charts-dir DIR "
        "(the charts/ directory of a kube-offload checkout)"
    )


def chart_ref(charts_dir: Path, name: str) -> p.ChartRef:
    meta = yaml.safe_load((charts_dir / name / "Chart.yaml").read_text()) or {}
    if meta.get("name") != name:
        raise p.PeeringError(f"--charts-dir: {charts_dir / name}/Chart.yaml names chart {meta.get('name')!r}, not {name}")
    return p.ChartRef(name=name, version=str(meta.get("version", "")), path=str(charts_dir / name))


def chart_args(chart: str, version: str, plain_http: bool) -> list[str]:
    """How ``helm upgrade`` names a chart: a directory is its own version; an OCI
    repository holds many, so the version goes with it (and --plain-http for an HTTP one)."""
    if not chart.startswith(OCI_SCHEME):
        return [chart]
    return [chart, "--version", version, *(["--plain-http"] if plain_http else [])]


def chart_refs(args: argparse.Namespace) -> tuple[p.ChartRef, p.ChartRef]:
    """The local and the remote chart: from --chart-repository (OCI) when given, else from
    --charts-dir (or this checkout's charts/)."""
    if args.chart_repository:
        repository = args.chart_repository.rstrip("/")
        if not repository.startswith(OCI_SCHEME):
            raise p.PeeringError(f"--chart-repository {args.chart_repository!r}: an OCI repository, "
                                 f"{OCI_SCHEME}HOST/PATH (Helm installs charts from OCI registries by that scheme)")
        if args.charts_dir:
            raise p.PeeringError("--chart-repository and --charts-dir name two sources of the charts: pass one")
        return tuple(p.ChartRef(name=name, version=args.chart_version, path=f"{repository}/{name}")
                     for name in (p.LOCAL_CHART, p.REMOTE_CHART))  # type: ignore[return-value]
    charts = resolve_charts_dir(args.charts_dir)
    return chart_ref(charts, p.LOCAL_CHART), chart_ref(charts, p.REMOTE_CHART)


def kubeconfig_path(value: str | None, flag: str) -> Path:
    if value:
        path = Path(value)
    else:
        env = os.environ.get("KUBECONFIG", "")
        path = Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"
    if not path.exists():
        raise p.PeeringError(f"{flag}: kubeconfig {str(path)!r} does not exist; pass {flag} FILE")
    return path


def read_values_files(paths: list[str], flag: str) -> dict:
    merged: dict = {}
    for name in paths:
        try:
            data = yaml.safe_load(Path(name).read_text())
        except OSError as exc:
            raise p.PeeringError(f"{flag} {name!r}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise p.PeeringError(f"{flag} {name!r} is not YAML: {exc}") from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise p.PeeringError(f"{flag} {name!r} must hold a map of values, not {type(data).__name__}")
        merged = p.deep_merge(merged, data)
    return merged


def remote_endpoint(path: Path, context: str | None) -> tuple[str, bytes | None]:
    """Server and CA (PEM, or None when the kubeconfig does not pin one) of a kubeconfig."""
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise p.PeeringError(f"cannot read the remote kubeconfig {str(path)!r}: {exc}") from None
    cluster = p.cluster_of_kubeconfig(config, context)
    if cluster.get("certificate-authority-data"):
        return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
    if cluster.get("certificate-authority"):
        ca_file = Path(cluster["certificate-authority"])
        if not ca_file.is_absolute():
            ca_file = path.parent / ca_file  # relative to the kubeconfig, as kubectl reads it
        try:
            return cluster["server"], ca_file.read_bytes()
        except OSError as exc:
            raise p.PeeringError(f"the remote kubeconfig's certificate-authority {str(ca_file)!r}: {exc.strerror}") from None
    return cluster["server"], None


# --- Helm -----------------------------------------------------------------------------------
class Helm:
    """``helm`` against one cluster, for the releases in one namespace."""

    def __init__(self, binary: str, kubeconfig: Path, context: str | None, namespace: str, side: str,
                 plain_http: bool = False) -> None:
        self.binary = binary
        self.plain_http = plain_http
        self.namespace = namespace
        self.side = side
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--namespace", namespace]
        if context:
            self.base += ["--kube-context", context]

    def _run(self, *args: str, timeout: float) -> str:
        try:
            result = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandError(f"{self.side}: `helm {args[0]}` did not finish within {int(timeout)}s") from None
        if result.returncode != 0:
            raise CommandError(f"{self.side}: `helm {' '.join(args[:2])}` failed: {result.stderr.strip()[-3000:]}")
        return result.stdout

    def release(self, name: str) -> p.Release | None:
        listed = json.loads(self._run("list", "--all", "--filter", f"^{re.escape(name)}$", "-o", "json", timeout=60) or "[]")
        entry = next((r for r in listed if r.get("name") == name), None)
        if entry is None:
            return None
        values = json.loads(self._run("get", "values", name, "-o", "json", timeout=60) or "null") or {}
        return p.Release(
            name=name,
            namespace=entry.get("namespace", self.namespace),
            revision=int(entry.get("revision", 0)),
            status=str(entry.get("status", "")),
            chart=str(entry.get("chart", "")),
            values=values,
        )

    def upgrade(self, name: str, chart: str, values: Mapping[str, Any], *, wait: bool, timeout: float,
                version: str = "") -> p.Release:
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="kube-offload-values-") as handle:
            json.dump(values, handle)
            handle.flush()
            args = ["upgrade", "--install", name, *chart_args(chart, version, self.plain_http),
                    "--create-namespace", "--values", handle.name]
            if wait:
                args += ["--wait", "--timeout", f"{int(timeout)}s"]
            self._run(*args, timeout=timeout + 60)
        release = self.release(name)
        if release is None:
            raise CommandError(f"{self.side}: helm reported success but release {self.namespace}/{name} is not listed")
        return release


# --- one cluster through the API ------------------------------------------------------------
class Cluster:
    def __init__(self, kubeconfig: Path, context: str | None, side: str) -> None:
        from kubernetes import client

        self.side = side
        try:
            api = load_api_client(str(kubeconfig), context=context)
        except Exception as exc:  # the client's ConfigException: a broken file or unknown context
            raise p.PeeringError(f"{side} kubeconfig {str(kubeconfig)!r}: {exc}") from None
        self.server = api.configuration.host
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.policy = client.PolicyV1Api(api)

    def get(self, fn: Callable[..., Any], *args: Any) -> dict | None:
        """The object, or None if it does not exist."""
        try:
            return call_json(fn, *args)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise self.error(exc) from None

    def delete(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            call_json(fn, *args, **kwargs)
        except ApiError as exc:
            if not exc.not_found:
                raise self.error(exc) from None

    def error(self, exc: ApiError) -> Exception:
        if exc.transient and exc.status != 0:
            return exc  # the server's trouble, not ours: a wait retries it
        if exc.status == 0:
            return Unreachable(f"{self.side}: cannot reach the API server at {self.server}: {exc.message}")
        if exc.status in (401, 403):
            return CommandError(f"{self.side}: {exc.message} (peer and unpeer need admin credentials on both clusters)")
        return CommandError(f"{self.side}: {exc}")

    def list_items(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict]:
        try:
            return call_json(fn, *args, **kwargs).get("items") or []
        except ApiError as exc:
            if exc.not_found:  # e.g. the CRD is not installed: nothing of that kind exists
                return []
            raise self.error(exc) from None


def _b64(data: Mapping[str, str] | None, key: str) -> bytes | None:
    value = (data or {}).get(key)
    return base64.b64decode(value) if value else None


# --- peer -----------------------------------------------------------------------------------
@dataclass
class Context:
    """Everything both commands need, resolved from the flags once."""

    local: Cluster
    remote: Cluster
    local_helm: Helm
    remote_helm: Helm
    namespace: str
    timeout: float
    local_chart: p.ChartRef
    remote_chart: p.ChartRef
    remote_kubeconfig: Path


def _context(args: argparse.Namespace) -> Context:
    for flag, value in (("--local-cluster-id", args.local_cluster_id), ("--remote-cluster-id", args.remote_cluster_id)):
        problem = p.cluster_id_problem(flag, value)
        if problem:
            raise p.PeeringError(problem)
    if args.local_cluster_id == args.remote_cluster_id:
        raise p.PeeringError("--local-cluster-id and --remote-cluster-id must differ: they name two clusters")
    helm = resolve_helm(args.helm)
    local_chart, remote_chart = chart_refs(args)
    local_path = kubeconfig_path(args.local_kubeconfig, "--local-kubeconfig")
    remote_path = kubeconfig_path(args.remote_kubeconfig, "--remote-kubeconfig")
    local = Cluster(local_path, args.local_context, "local")
    remote = Cluster(remote_path, args.remote_context, "remote")
    if local.server == remote.server:
        raise p.PeeringError(
            f"the local and remote kubeconfigs both point at {local.server}: pass the other cluster's "
            "kubeconfig (or --local-context / --remote-context)"
        )
    return Context(
        local=local,
        remote=remote,
        local_helm=Helm(helm, local_path, args.local_context, args.namespace, "local", args.plain_http),
        remote_helm=Helm(helm, remote_path, args.remote_context, args.namespace, "remote", args.plain_http),
        namespace=args.namespace,
        timeout=float(args.timeout),
        local_chart=local_chart,
        remote_chart=remote_chart,
        remote_kubeconfig=remote_path,
    )


def peer_options(args: argparse.Namespace, ctx: Context) -> p.PeerOptions:
    server, ca_pem = remote_endpoint(ctx.remote_kubeconfig, args.remote_context)
    labels = appended(args, "--node-label")
    return p.PeerOptions(
        local_cluster_id=args.local_cluster_id,
        remote_cluster_id=args.remote_cluster_id,
        remote_server=p.pod_reachable_server(args.remote_server, server),
        remote_ca_pem=ca_pem,
        remote_chart=ctx.remote_chart,
        local_chart=ctx.local_chart,
        namespace=args.namespace,
        local_release=args.local_release,
        remote_release=args.remote_release,
        quota=p.parse_quota(args.quota) if args.quota else None,
        pod_security_level=_pod_security_level(args.pod_security_level),
        node_labels=p.parse_node_labels(labels) if labels else None,
        policy=read_policy_file(args.policy_file),
        policy_grants=policy_grants(args),
        local_values=read_values_files(appended(args, "--local-values"), "--local-values"),
        remote_values=read_values_files(appended(args, "--remote-values"), "--remote-values"),
        wait=bool(args.wait),
    )


def read_policy_file(path: str) -> dict | None:
    """--policy-file: the consumer's spec.policy (YAML or JSON), checked as the enforcer
    reads it; None when the flag is unset (keep the release's)."""
    if not path:
        return None
    where = f"--policy-file {path}"
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise p.PeeringError(f"{where}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise p.PeeringError(f"{where}: not YAML or JSON ({exc})") from None
    return p.parse_policy_document(raw, where)


def policy_grants(args: argparse.Namespace) -> dict[tuple[str, str], tuple[str, ...]]:
    """The --grant-* flags given, each checked alone so an error names its flag."""
    grants = {}
    for flag, key in p.GRANT_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is None:
            continue
        grants[key] = p.parse_grant(value)
        p.policy_with_grants({}, {key: grants[key]}, flag)
    return grants


def _pod_security_level(value: str) -> str | None:
    if value and value not in c.PSA_LEVELS:
        raise p.PeeringError(f"--pod-security-level {value!r}: use one of {', '.join(c.PSA_LEVELS)}")
    return value or None


def read_consumer_token(remote: Cluster, consumer_id: str) -> tuple[bool, p.ConsumerToken | None]:
    secret = remote.get(remote.core.read_namespaced_secret, p.CONSUMER_TOKEN_SECRET, c.tenant_namespace(consumer_id))
    if secret is None:
        return False, None
    token, ca_pem = _b64(secret.get("data"), "token"), _b64(secret.get("data"), "ca.crt")
    if not token or not ca_pem:
        return True, None  # the token controller has not filled it in yet
    return True, p.ConsumerToken(token=token.decode(), ca_pem=ca_pem)


def read_kubeconfig_secret(local: Cluster, namespace: str, remote_cluster_id: str) -> tuple[bool, dict | None]:
    secret = local.get(local.core.read_namespaced_secret, p.kubeconfig_secret_name(remote_cluster_id), namespace)
    if secret is None:
        return False, None
    raw = _b64(secret.get("data"), p.KUBECONFIG_KEY)
    try:
        return True, (yaml.safe_load(raw) if raw else None)
    except yaml.YAMLError:
        return True, None  # not a kubeconfig: rewrite it


def node_is_ready(node: dict | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)


def observe_peer(ctx: Context, options: p.PeerOptions) -> p.PeerState:
    token_exists, token = read_consumer_token(ctx.remote, options.local_cluster_id)
    secret_exists, kubeconfig = read_kubeconfig_secret(ctx.local, ctx.namespace, options.remote_cluster_id)
    deployment = ctx.local.get(
        ctx.local.apps.read_namespaced_deployment, p.vkubelet_deployment_name(options.local_release, options.remote_cluster_id), ctx.namespace
    )
    node = ctx.local.get(ctx.local.core.read_node, p.node_name(options.remote_cluster_id))
    return p.PeerState(
        remote_release=ctx.remote_helm.release(options.remote_release),
        consumer_token_secret_exists=token_exists,
        consumer_token=token,
        kubeconfig_secret=kubeconfig,
        kubeconfig_secret_exists=secret_exists,
        local_release=ctx.local_helm.release(options.local_release),
        vkubelet_deployed=deployment is not None,
        node_ready=node_is_ready(node),
    )


class PeerRun:
    """Carries out a peer plan, step by step."""

    def __init__(self, ctx: Context, options: p.PeerOptions) -> None:
        self.ctx = ctx
        self.options = options
        self.token: p.ConsumerToken | None = None
        self.secret_changed = False

    def do(self, step: p.Step) -> str:
        ctx, options = self.ctx, self.options
        if step.action == p.REMOTE_RELEASE:
            release = ctx.remote_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                              wait=options.wait, timeout=ctx.timeout)
            return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
        if step.action == p.WAIT_TOKEN:
            self.token = _wait(
                lambda: read_consumer_token(ctx.remote, options.local_cluster_id)[1],
                timeout=ctx.timeout,
                what=f"for the remote token controller to fill Secret {c.tenant_namespace(options.local_cluster_id)}/{p.CONSUMER_TOKEN_SECRET}",
                hint="is kube-controller-manager running on the remote cluster?",
            )
            return "token ready"
        if step.action == p.KUBECONFIG_SECRET:
            return self._write_secret(step.data["name"])
        if step.action == p.LOCAL_RELEASE:
            release = ctx.local_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                             wait=options.wait, timeout=ctx.timeout)
            return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
        if step.action == p.RESTART_VKUBELET:
            if not self.secret_changed:
                return "credentials unchanged, not restarted"
            patch = {"spec": {"template": {"metadata": {"annotations": {
                p.RESTARTED_AT_ANNOTATION: now_time()}}}}}
            try:
                call_json(ctx.local.apps.patch_namespaced_deployment, step.data["name"], ctx.namespace, patch)
            except ApiError as exc:
                raise ctx.local.error(exc) from None
            return "restarted"
        if step.action == p.WAIT_NODE_READY:
            node = p.node_name(options.remote_cluster_id)
            deployment = p.vkubelet_deployment_name(options.local_release, options.remote_cluster_id)
            _wait(
                lambda: node_is_ready(ctx.local.get(ctx.local.core.read_node, node)),
                timeout=ctx.timeout,
                what=f"for node {node} to be Ready",
                hint=f"see `kubectl -n {ctx.namespace} logs deploy/{deployment}`",
            )
            return f"node {node} is Ready"
        raise AssertionError(f"unknown peer step {step.action}")

    def _write_secret(self, name: str) -> str:
        ctx, options = self.ctx, self.options
        token = self.token or read_consumer_token(ctx.remote, options.local_cluster_id)[1]
        if token is None:
            raise CommandError(f"remote: Secret {c.tenant_namespace(options.local_cluster_id)}/{p.CONSUMER_TOKEN_SECRET} holds no token")
        desired = p.desired_kubeconfig(options, token)
        exists, current = read_kubeconfig_secret(ctx.local, ctx.namespace, options.remote_cluster_id)
        if current == desired:
            return "unchanged"
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": ctx.namespace,
                "labels": {"app.kubernetes.io/managed-by": p.PEER_MANAGER, c.LABEL_CLUSTER_ID: options.remote_cluster_id},
            },
            "data": {p.KUBECONFIG_KEY: base64.b64encode(yaml.safe_dump(desired).encode()).decode()},
        }
        try:
            if ctx.local.get(ctx.local.core.read_namespace, ctx.namespace) is None:
                call_json(ctx.local.core.create_namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctx.namespace}})
            if exists:
                call_json(ctx.local.core.replace_namespaced_secret, name, ctx.namespace, body)
            else:
                call_json(ctx.local.core.create_namespaced_secret, ctx.namespace, body)
        except ApiError as exc:
            raise ctx.local.error(exc) from None
        self.secret_changed = True
        return "updated" if exists else "created"


def run_peer(args: argparse.Namespace) -> int:
    return _run("peer", args, _peer)


def _peer(args: argparse.Namespace) -> int:
    # The flags that need no cluster are checked before anything is read.
    if args.quota:
        p.parse_quota(args.quota)
    p.parse_node_labels(appended(args, "--node-label"))
    _pod_security_level(args.pod_security_level)
    read_policy_file(args.policy_file)
    policy_grants(args)
    ctx = _context(args)
    options = peer_options(args, ctx)
    steps = p.plan_peer(observe_peer(ctx, options), options)
    title = f"peer {options.local_cluster_id} -> {options.remote_cluster_id}"
    _say(p.render_plan(steps, title=title))
    if args.dry_run:
        _say("dry run: nothing was changed")
        return 0
    _execute(steps, PeerRun(ctx, options).do)
    node = p.node_name(options.remote_cluster_id)
    if p.changes(steps):
        _say(f"peered: pods of {options.local_cluster_id} can run on {options.remote_cluster_id} through node {node}; "
             f"offload a namespace with `kubectl label namespace NAME {c.LABEL_ENABLED}={c.ENABLED_VALUE}`")
    else:
        _say("already peered: nothing changed")
    return 0


# --- unpeer ---------------------------------------------------------------------------------
def observe_unpeer(ctx: Context, options: p.UnpeerOptions) -> p.UnpeerState:
    local, remote = ctx.local, ctx.remote
    node = local.get(local.core.read_node, p.node_name(options.remote_cluster_id))
    pods = local.list_items(local.core.list_pod_for_all_namespaces,
                            field_selector=f"spec.nodeName={p.node_name(options.remote_cluster_id)}")
    vkubelet_pods = local.list_items(local.core.list_namespaced_pod, ctx.namespace,
                                     label_selector=_vkubelet_selector(options))
    secret = local.get(local.core.read_namespaced_secret, p.kubeconfig_secret_name(options.remote_cluster_id), ctx.namespace)
    tenant = c.tenant_namespace(options.local_cluster_id)
    requests = remote.list_items(remote.custom.list_namespaced_custom_object,
                                 c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, tenant, c.TWIN_NAMESPACE_PLURAL)
    origin = remote.list_items(remote.core.list_namespace,
                               label_selector=f"{c.LABEL_ORIGIN_CLUSTER_ID}={options.local_cluster_id}")
    ours = [n for n in origin if ((n["metadata"].get("labels") or {}).get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER)]
    consumer = remote.get(remote.custom.get_cluster_custom_object,
                          c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.CONSUMER_PLURAL, options.local_cluster_id)
    return p.UnpeerState(
        node_exists=node is not None,
        node_unschedulable=bool(((node or {}).get("spec") or {}).get("unschedulable")),
        pods_on_node=sorted(f"{x['metadata']['namespace']}/{x['metadata']['name']}" for x in pods),
        local_release=ctx.local_helm.release(options.local_release),
        vkubelet_pods=sorted(x["metadata"]["name"] for x in vkubelet_pods),
        kubeconfig_secret_exists=secret is not None,
        twin_requests=sorted(r["metadata"]["name"] for r in requests),
        twin_namespaces=sorted(n["metadata"]["name"] for n in ours),
        foreign_namespaces=sorted(n["metadata"]["name"] for n in origin if n not in ours),
        remote_release=ctx.remote_helm.release(options.remote_release),
        tenant_namespace_exists=remote.get(remote.core.read_namespace, tenant) is not None,
        consumer_exists=consumer is not None,
    )


def _vkubelet_selector(options: p.UnpeerOptions) -> str:
    # The local chart's selector labels of one remote's vkubelet Deployment.
    return (f"app.kubernetes.io/instance={options.local_release},app.kubernetes.io/component=vkubelet,"
            f"{c.LABEL_CLUSTER_ID}={options.remote_cluster_id}")


class UnpeerRun:
    def __init__(self, ctx: Context, options: p.UnpeerOptions) -> None:
        self.ctx = ctx
        self.options = options

    def do(self, step: p.Step) -> str:
        ctx, options = self.ctx, self.options
        local, remote = ctx.local, ctx.remote
        node = p.node_name(options.remote_cluster_id)
        tenant = c.tenant_namespace(options.local_cluster_id)
        try:
            if step.action == p.CORDON_NODE:
                call_json(local.core.patch_node, node, {"spec": {"unschedulable": True}})
                return "cordoned"
            if step.action == p.EVICT_PODS:
                return self._drain(step.data["pods"])
            if step.action == p.LOCAL_RELEASE:
                release = ctx.local_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                                 wait=False, timeout=ctx.timeout)
                return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
            if step.action == p.WAIT_VKUBELET_GONE:
                name = step.data["name"]
                selector = _vkubelet_selector(options)
                # The Deployment goes first; the garbage collector then removes its
                # ReplicaSet and pod, and only a pod that is gone has stopped its process.
                _wait(
                    lambda: local.get(local.apps.read_namespaced_deployment, name, ctx.namespace) is None
                    and not local.list_items(local.apps.list_namespaced_replica_set, ctx.namespace, label_selector=selector)
                    and not local.list_items(local.core.list_namespaced_pod, ctx.namespace, label_selector=selector),
                    timeout=ctx.timeout,
                    what=f"for Deployment {ctx.namespace}/{name} and its pods to go",
                )
                return "stopped"
            if step.action == p.DELETE_KUBECONFIG_SECRET:
                local.delete(local.core.delete_namespaced_secret, step.data["name"], ctx.namespace)
                return "deleted"
            if step.action == p.DELETE_NODE:
                local.delete(local.core.delete_node, node)
                local.delete(local.coordination.delete_namespaced_lease, node, "kube-node-lease")
                _wait(lambda: local.get(local.core.read_node, node) is None, timeout=ctx.timeout, what=f"for node {node} to go")
                return "deleted"
            if step.action == p.DELETE_TWIN_REQUESTS:
                for name in step.data["names"]:
                    remote.delete(remote.custom.delete_namespaced_custom_object,
                                  c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, tenant, c.TWIN_NAMESPACE_PLURAL, name)
                return "deleted"
            if step.action == p.DELETE_TWIN_NAMESPACES:
                for name in step.data["names"]:
                    remote.delete(remote.core.delete_namespace, name)
                return "deleted"
            if step.action == p.WAIT_TWINS_GONE:
                _wait(self._twins_gone, timeout=ctx.timeout, what=f"for the twin namespaces of {options.local_cluster_id} to go",
                      hint=f"the enforcer removes them; is it running? (`kubectl -n {ctx.namespace} get deploy` on the remote)")
                return "gone"
            if step.action == p.REMOTE_RELEASE:
                release = ctx.remote_helm.upgrade(step.data["release"], step.data["chart"], step.data["values"], version=step.data.get("version", ""),
                                                  wait=False, timeout=ctx.timeout)
                return f"release {release.namespace}/{release.name} revision {release.revision} {release.status}"
            if step.action == p.DELETE_CONSUMER:
                if step.data.get("consumer"):
                    remote.delete(remote.custom.delete_cluster_custom_object,
                                  c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.CONSUMER_PLURAL, options.local_cluster_id)
                if step.data.get("namespace"):
                    remote.delete(remote.core.delete_namespace, tenant)
                return "deleted"
            if step.action == p.WAIT_CONSUMER_GONE:
                _wait(
                    lambda: remote.get(remote.custom.get_cluster_custom_object, c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION,
                                       c.CONSUMER_PLURAL, options.local_cluster_id) is None
                    and remote.get(remote.core.read_namespace, tenant) is None,
                    timeout=ctx.timeout,
                    what=f"for Consumer {options.local_cluster_id} and namespace {tenant} to go",
                )
                return "gone"
            if step.action == p.NOTE:
                return ""
        except ApiError as exc:
            raise (local if step.description.startswith("local") else remote).error(exc) from None
        raise AssertionError(f"unknown unpeer step {step.action}")

    def _twins_gone(self) -> bool:
        remote, options = self.ctx.remote, self.options
        requests = remote.list_items(remote.custom.list_namespaced_custom_object, c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION,
                                     c.tenant_namespace(options.local_cluster_id), c.TWIN_NAMESPACE_PLURAL)
        namespaces = remote.list_items(remote.core.list_namespace, label_selector=(
            f"{c.LABEL_ORIGIN_CLUSTER_ID}={options.local_cluster_id},{c.LABEL_MANAGED_BY}={c.MANAGED_BY_ENFORCER}"))
        return not requests and not namespaces

    def _drain(self, pods: list[str]) -> str:
        """Evict every pod (PodDisruptionBudgets honoured, refusals retried) and wait until
        they are gone: the virtual kubelet deletes each one's remote ShadowPod, then the pod.
        A pod still terminating at the deadline (its virtual kubelet is down) is deleted at
        once; its remote copy goes with the twin namespaces next."""
        local, timeout = self.ctx.local, self.ctx.timeout
        remaining = set(pods)
        refused: dict[str, str] = {}
        forced: list[str] = []
        deadline = time.monotonic() + timeout
        while remaining:
            late = time.monotonic() >= deadline
            for key in sorted(remaining):
                namespace, name = key.split("/", 1)
                pod = local.get(local.core.read_namespaced_pod, name, namespace)
                if pod is None:
                    remaining.discard(key)
                    refused.pop(key, None)
                elif pod["metadata"].get("deletionTimestamp"):
                    if late and key not in forced:
                        local.delete(local.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
                        forced.append(key)
                else:
                    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
                    try:
                        call(local.core.create_namespaced_pod_eviction, name, namespace, eviction)
                        refused.pop(key, None)
                    except ApiError as exc:
                        if exc.status == 429:  # a PodDisruptionBudget says not now
                            refused[key] = exc.message
                        elif not exc.not_found:
                            raise local.error(exc) from None
            if not remaining:
                break
            if late and refused:
                details = "; ".join(f"{key}: {message}" for key, message in sorted(refused.items()))
                raise CommandError(
                    f"local: eviction refused until the deadline ({int(timeout)}s) for {details}; "
                    "scale the workload or relax its PodDisruptionBudget, then run unpeer again"
                )
            if time.monotonic() >= deadline + 60:
                raise CommandError(f"local: pods {', '.join(sorted(remaining))} are still there after deletion")
            time.sleep(POLL_SECONDS)
        if forced:
            return f"evicted; still terminating after {int(timeout)}s, so deleted at once: {', '.join(forced)}"
        return "evicted"


def run_unpeer(args: argparse.Namespace) -> int:
    return _run("unpeer", args, _unpeer)


def _unpeer(args: argparse.Namespace) -> int:
    ctx = _context(args)
    options = p.UnpeerOptions(
        local_cluster_id=args.local_cluster_id,
        remote_cluster_id=args.remote_cluster_id,
        remote_chart=ctx.remote_chart,
        local_chart=ctx.local_chart,
        namespace=args.namespace,
        local_release=args.local_release,
        remote_release=args.remote_release,
    )
    steps = p.plan_unpeer(observe_unpeer(ctx, options), options)
    _say(p.render_plan(steps, title=f"unpeer {options.local_cluster_id} -> {options.remote_cluster_id}"))
    if args.dry_run:
        _say("dry run: nothing was changed")
        return 0
    _execute(steps, UnpeerRun(ctx, options).do)
    _say(f"unpeered: nothing of consumer {options.local_cluster_id} is left in {options.remote_cluster_id}"
         if p.changes(steps) else "not peered: nothing changed")
    return 0


# --- shared ---------------------------------------------------------------------------------
def _execute(steps: list[p.Step], do: Callable[[p.Step], str]) -> None:
    for index, step in enumerate(steps, 1):
        if step.action == p.NOTE:
            continue
        started = time.monotonic()
        outcome = do(step)
        _say(f"  {index}. done in {time.monotonic() - started:.1f}s: {outcome}")


def _run(command: str, args: argparse.Namespace, body: Callable[[argparse.Namespace], int]) -> int:
    try:
        return body(args)
    except p.PeeringError as exc:
        print(f"kube-offload {command}: {exc}", file=sys.stderr)
        return 2
    except (CommandError, ApiError) as exc:
        print(f"kube-offload {command}: {exc}", file=sys.stderr)
        return 1
