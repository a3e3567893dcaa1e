"""``explain`` and ``status``: the subcommands of ``kubectl offload`` (and ``kube-offload``).

Flags follow kubectl's (``--kubeconfig``, ``--context``, ``-n/--namespace``,
``-o/--output``, ``--request-timeout``) so the plugin reads like kubectl, and as in kubectl
they may come anywhere after ``offload`` (:func:`arrange_argv`); the rest are ours and,
like every kube-offload flag, can come from the environment.

Exit codes: 0 done (``status``: every remote healthy); 1 ``status`` found an unhealthy
remote; 2 the command could not run (bad flags, a cluster or file it could not read),
with a message that says what to fix.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any

import yaml

from kube_offload.runtime.flags import add_flag, appended, positive_duration
from kubectl_offload import render
from kubectl_offload.kubeconfigs import (
    DEFAULT_REQUEST_TIMEOUT, LocalCluster, PluginError, Remotes, load_local, parse_remote_flags,
)

EXIT_UNHEALTHY = 1
EXIT_ERROR = 2
POD_KINDS = ("pod", "pods", "po")
# Workloads whose pod template explain accepts in -f (what their controller would create).
TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")


def _kubectl_flags(parser: argparse.ArgumentParser, component: str) -> None:
    group = parser.add_argument_group("kubectl flags")
    group.add_argument("--kubeconfig", default=None, help="the local cluster's kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", default=None, help="the kubeconfig context to use (default: its current context)")
    group.add_argument("-n", "--namespace", default=None, help="the pod's namespace (default: the context's)")
    group.add_argument("-o", "--output", default=None, choices=render.OUTPUT_FORMATS,
                       help="print the result as json or yaml instead of text")
    group.add_argument("--request-timeout", default=DEFAULT_REQUEST_TIMEOUT, type=positive_duration,
                       help=f"how long one API request may take, e.g. 5s (default: {DEFAULT_REQUEST_TIMEOUT:g}s)")
    add_flag(parser, component, "--remote-kubeconfig", default=[], action="append",
             help="ID=PATH: a kubeconfig for remote cluster ID, repeatable; unset: read from the local chart's Secrets")
    add_flag(parser, component, "--local-cluster-id", default="",
             help="this cluster's id; unset: from the chart's virtual-kubelet Deployments or the providers")


# --- kubectl's flags anywhere after `offload` -----------------------------------------------------
PLUGIN_COMMANDS = ("explain", "status")
# kubectl's global flags the plugin does not take, with what to do instead: it reads the
# cluster, the user and the credentials of one kubeconfig context, as written there.
_PICK_A_CONTEXT = "pick a kubeconfig context that names the cluster and user you want (--context; kubectl config get-contexts)"
UNSUPPORTED_KUBECTL_FLAGS: dict[str, str] = {
    **{flag: _PICK_A_CONTEXT for flag in (
        "--cluster", "--user", "-s", "--server", "--token", "--username", "--password",
        "--certificate-authority", "--client-certificate", "--client-key", "--insecure-skip-tls-verify",
        "--tls-server-name",
    )},
    **{flag: "the plugin does not impersonate; use a kubeconfig context whose user has the access you want (--context)"
       for flag in ("--as", "--as-group", "--as-uid")},
    **{flag: "the plugin has no log levels; its messages say what went wrong" for flag in ("-v", "--v", "--vmodule")},
}


def arrange_argv(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with the flags of ``explain``/``status`` that came before the subcommand
    moved after it, and the subcommand's flags before its positionals, so that kubectl's
    global flags (``--kubeconfig``, ``--context``, ``-n``, ``--request-timeout``...) parse
    anywhere after ``offload``, as kubectl users write them: ``kubectl offload --kubeconfig K
    explain pod X`` and ``kubectl offload explain pod -n demo X`` mean what they say.

    Which flags take a value is read from the subcommands' own parsers (no second list).
    An unknown flag exits 2 through ``parser.error`` naming it, and for a kubectl global
    flag the plugin does not take, what to do instead. Anything else (other subcommands,
    ``--help``, ``--`` and what follows it) is left for argparse as it was. Pure: no I/O
    beyond argparse's own exit on an error."""
    commands = _subcommand_parsers(parser)
    plugin = {name: commands[name] for name in PLUGIN_COMMANDS if name in commands}
    top = {option for action in parser._actions for option in action.option_strings}
    any_plugin_flag = _arities(*plugin.values())
    kept: list[str] = []
    early: list[str] = []
    early_names: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--" or not token.startswith("-") or token == "-":
            break
        if token in top:
            kept.append(token)
            index += 1
            continue
        taken = _take_flag(parser, argv, index, any_plugin_flag, "before the command")
        early_names.append(_flag_name(token))
        early += argv[index:index + taken]
        index += taken
    if index >= len(argv) or argv[index] == "--":
        if early:
            parser.error(f"{' '.join(early)}: no command after them; write kubectl offload {'|'.join(plugin)} [flags]")
        return argv
    command = argv[index]
    if command not in plugin:
        if early:
            parser.error(f"{' '.join(early)} before {command!r}: only {', '.join(plugin)} take these flags")
        return argv
    arity = _arities(plugin[command])
    rest = argv[index + 1:]
    for name in early_names:
        if name not in arity:  # explain's -f before status, say
            parser.error(f"{name}: {command} takes no such flag (its flags: {', '.join(sorted(arity))})")
    flags: list[str] = []
    positionals: list[str] = []
    position = 0
    while position < len(rest):
        token = rest[position]
        if token == "--":
            positionals += rest[position:]
            break
        if token.startswith("-") and token != "-":
            taken = _take_flag(parser, rest, position, arity, f"for {command}")
            flags += rest[position:position + taken]
            position += taken
        else:
            positionals.append(token)
            position += 1
    return [*kept, command, *early, *flags, *positionals]


def _subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _arities(*parsers: argparse.ArgumentParser) -> dict[str, bool]:
    """option string -> whether it takes a value, over ``parsers``."""
    out: dict[str, bool] = {}
    for sub in parsers:
        for action in sub._actions:
            for option in action.option_strings:
                out[option] = action.nargs != 0
    return out


def _flag_name(token: str) -> str:
    if token.startswith("--"):
        return token.partition("=")[0]
    return token[:2]  # -n, -ndemo, -n=demo


def _take_flag(parser: argparse.ArgumentParser, argv: list[str], index: int, arity: dict[str, bool], where: str) -> int:
    """How many tokens the flag at ``argv[index]`` spans (1, or 2 with its value); exits
    through ``parser.error`` for an unknown flag or a missing value."""
    token = argv[index]
    name = _flag_name(token)
    if name not in arity:
        hint = UNSUPPORTED_KUBECTL_FLAGS.get(name)
        if hint:
            parser.error(f"{name} is a kubectl flag {parser.prog} does not take: {hint}")
        known = ", ".join(sorted(arity))
        parser.error(f"unknown flag {name} {where}; the flags: {known} (--help says what each does)")
    if arity[name] and token == name:
        if index + 1 >= len(argv) or (argv[index + 1].startswith("-") and argv[index + 1] != "-"):
            parser.error(f"{name} needs a value, e.g. {name} VALUE or {name}=VALUE")
        return 2
    return 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain where a pod can run and why (kubectl offload explain pod NAME | -f FILE)",
        description=(
            "Show the namespace's offloading policy, what the webhook added or would add, for every node whether "
            "the pod fits and the first reason it does not, and for an offloaded pod the chain local pod -> "
            "ShadowPod -> remote pod -> remote node with the Events of both clusters. See docs/kubectl-plugin.md."
        ),
    )
    parser.add_argument("target", nargs="*", metavar="pod NAME", help="the pod: `pod NAME` (or just NAME)")
    parser.add_argument("-f", "--filename", default=None,
                        help="a Pod manifest not yet created (or a workload whose pod template to explain); - reads stdin")
    _kubectl_flags(parser, "explain")
    parser.set_defaults(func=run_explain)

    status = subparsers.add_parser(
        "status",
        help="the state of every peering; exits 1 when one is unhealthy",
        description=(
            "One row per remote cluster: virtual node Ready, heartbeat and last ping, advertised vs free remote "
            "capacity, quota used, offloaded pods by phase, twin namespaces, reflection, health. Exit code 1 when "
            "a remote is unhealthy, so it serves in scripts and CI. See docs/kubectl-plugin.md."
        ),
    )
    _kubectl_flags(status, "status")
    status.set_defaults(func=run_status)


# --- explain ---------------------------------------------------------------------------------
def pod_name_from(target: list[str]) -> str:
    """``["pod", "NAME"]``, ``["pod/NAME"]`` or ``["NAME"]`` -> NAME."""
    if len(target) == 1 and "/" in target[0]:
        kind, _, name = target[0].partition("/")
        target = [kind, name]
    if len(target) == 2 and target[0].lower() in POD_KINDS and target[1]:
        return target[1]
    if len(target) == 1 and target[0].lower() not in POD_KINDS:
        return target[0]
    raise PluginError("explain takes `pod NAME` (or -f FILE for a pod not yet created); only pods can be explained")


def pod_from_manifest(documents: list[Any], namespace: str | None, default_namespace: str) -> dict[str, Any]:
    """The pod a manifest would create, in the namespace kubectl would create it in."""
    documents = [d for d in documents if d]
    if not documents:
        raise PluginError("-f: the file holds no object; give a Pod manifest")
    document = documents[0]
    if not isinstance(document, dict):
        raise PluginError("-f: the first document is not an object; give a Pod manifest")
    kind = document.get("kind")
    metadata = document.get("metadata") or {}
    if kind == "Pod":
        pod = copy.deepcopy(document)
    elif kind in TEMPLATE_KINDS:
        template = ((document.get("spec") or {}).get("template")) or {}
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {**copy.deepcopy(template.get("metadata") or {}), "name": f"{metadata.get('name', 'pod')}-<generated>"},
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        if kind == "DaemonSet":
            # Its controller makes the pods, and the webhook leaves DaemonSet pods alone.
            pod["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": metadata.get("name", ""), "controller": True}]
    else:
        raise PluginError(f"-f: kind {kind!r} is not a Pod (nor one of {', '.join(TEMPLATE_KINDS)}); give a Pod manifest")
    declared = metadata.get("namespace")
    if namespace and declared and namespace != declared:
        raise PluginError(f"-f: the manifest's namespace {declared!r} does not match -n {namespace!r}")
    pod.setdefault("metadata", {})["namespace"] = declared or namespace or default_namespace
    pod["metadata"].setdefault("name", "<generated>")
    if not isinstance(pod.get("spec"), dict):
        raise PluginError("-f: the pod has no spec; give a Pod manifest with spec.containers")
    return pod


def _read_manifest(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        return list(yaml.safe_load_all(text))
    except OSError as exc:
        raise PluginError(f"-f {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PluginError(f"-f {path}: not YAML or JSON: {exc}") from None


def _setup(args: argparse.Namespace) -> tuple[LocalCluster, Remotes, render.Style, render.Progress]:
    local = load_local(args.kubeconfig, args.context, timeout=args.request_timeout)
    remotes = Remotes.discover(local, parse_remote_flags(appended(args, "--remote-kubeconfig")))
    style = render.Style(render.use_colour(sys.stdout.isatty(), os.environ))
    progress = render.Progress(sys.stderr, render.show_progress(sys.stderr.isatty(), os.environ, args.output))
    return local, remotes, style, progress


def run_explain(args: argparse.Namespace) -> int:
    # Imported here: every component's start-up builds this parser, and only the plugin
    # needs the webhook's, extender's and enforcer's rules loaded.
    from kubectl_offload import gather
    from kubectl_offload.explain import ExplainError, explain

    try:
        if args.filename and args.target:
            raise PluginError("give either `pod NAME` or -f FILE, not both")
        if not args.filename and not args.target:
            raise PluginError("explain what? `kubectl offload explain pod NAME` or `kubectl offload explain -f pod.yaml`")
        name = pod_name_from(args.target) if args.target else ""
        documents = _read_manifest(args.filename) if args.filename else []
        local, remotes, style, progress = _setup(args)
        try:
            if args.filename:
                pod = pod_from_manifest(documents, args.namespace, local.namespace)
            else:
                progress(f"reading pod {name}")
                pod = gather.read_pod(local, args.namespace or local.namespace, name)
            facts = gather.explain_facts(
                local, remotes, pod, created=not args.filename, local_cluster_id=args.local_cluster_id or None, say=progress,
            )
        finally:
            progress.done()
        document = explain(facts).to_dict()
    except (PluginError, ExplainError) as exc:
        print(f"kubectl offload explain: {exc}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(render.dump(document, args.output) if args.output else render.render_explain(document, style))
    return 0


# --- status ------------------------------------------------------------------------------------
def run_status(args: argparse.Namespace) -> int:
    from kubectl_offload import gather
    from kubectl_offload.status import report

    try:
        local, remotes, style, progress = _setup(args)
        try:
            facts = gather.status_facts(local, remotes, local_cluster_id=args.local_cluster_id or None, say=progress)
        finally:
            progress.done()
    except PluginError as exc:
        print(f"kubectl offload status: {exc}", file=sys.stderr)
        return EXIT_ERROR
    result = report(facts)
    document = result.to_dict()
    sys.stdout.write(render.dump(document, args.output) if args.output else render.render_status(document, style))
    return 0 if result.healthy else EXIT_UNHEALTHY
