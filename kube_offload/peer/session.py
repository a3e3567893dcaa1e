"""What ``peer`` and ``unpeer`` share: the context resolved from the flags once, waiting
for a condition, carrying out a plan step by step, and the exit codes."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kube_offload import peering as p
from kube_offload.peer.api import Cluster
from kube_offload.peer.errors import CommandError, Unreachable
from kube_offload.peer.helm import Helm, resolve_helm
from kube_offload.peer.inputs import chart_refs, kubeconfig_path
from kube_offload.runtime.kube import ApiError

POLL_SECONDS = 1.0


def say(line: str) -> None:
    print(line, flush=True)


def wait(check: Callable[[], Any], *, timeout: float, what: str, hint: str = "") -> Any:
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


def open_context(args: argparse.Namespace) -> Context:
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


def execute(steps: list[p.Step], do: Callable[[p.Step], str]) -> None:
    for index, step in enumerate(steps, 1):
        if step.action == p.NOTE:
            continue
        started = time.monotonic()
        outcome = do(step)
        say(f"  {index}. done in {time.monotonic() - started:.1f}s: {outcome}")


def run_command(command: str, args: argparse.Namespace, body: Callable[[argparse.Namespace], int]) -> int:
    try:
        return body(args)
    except p.PeeringError as exc:
        print(f"kube-offload {command}: {exc}", file=sys.stderr)
        return 2
    except (CommandError, ApiError) as exc:
        print(f"kube-offload {command}: {exc}", file=sys.stderr)
        return 1
