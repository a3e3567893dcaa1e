"""``kube-offload drain`` and ``undrain``: the provider takes its resources back from one
consumer, and gives them again.

Drain writes ``Consumer spec.drain`` (when it started, the grace the provider grants) and
nothing else: the ShadowPod webhook refuses the consumer's new ShadowPods while it is there,
the consumer's virtual kubelet taints its node ``kube-offload.io/provider-draining:NoExecute``
so the consumer's own taint manager evicts the offloaded pods (their controllers recreate them
on local nodes), and once the grace is over the enforcer deletes the consumer's ShadowPods
still there. Its progress is the enforcer's ``status.drain`` and ``status.shadowPods``.
Undrain removes ``spec.drain``; a cordon the provider set itself (``spec.cordoned``) stays.

``spec.drain`` is not in the remote chart's Consumer template, so a later ``helm upgrade``
(``kube-offload peer``) neither undoes nor needs to know about a drain.
"""

from __future__ import annotations

from typing import Any

import argparse
import time
from datetime import datetime, timezone

from kube_offload import constants as c
from kube_offload import consumers as co
from kube_offload import peering as p
from kube_offload.peer.api import Cluster
from kube_offload.peer.errors import CommandError
from kube_offload.peer.inputs import kubeconfig_path
from kube_offload.peer.session import POLL_SECONDS, run_command, say
from kube_offload.runtime.kinds import CONSUMERS
from kube_offload.runtime.kube import MERGE_PATCH, ApiError
from kube_offload.times import format_time

# How long drain --wait waits past the grace for the enforcer's deletions to finish.
AFTER_GRACE_SECONDS = 120.0


def _provider(args: argparse.Namespace) -> Cluster:
    return Cluster(kubeconfig_path(args.kubeconfig, "--kubeconfig"), args.context, "provider")


def _consumer(cluster: Cluster, name: str) -> dict[str, Any]:
    problem = p.cluster_id_problem("CONSUMER", name)
    if problem:
        raise p.PeeringError(problem)
    consumer = cluster.get(CONSUMERS, name)
    if consumer is None:
        known = sorted(co.consumer_name(item) for item in cluster.list_items(CONSUMERS))
        raise p.PeeringError(
            f"no Consumer {name!r} on {cluster.server}: the consumers here are "
            f"{', '.join(known) if known else 'none'} (kubectl get consumers.{c.SHADOWPOD_GROUP}); "
            "pass the consumer's cluster id, and --kubeconfig/--context of the PROVIDER cluster"
        )
    return consumer


def _patch_drain(cluster: Cluster, name: str, record: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return cluster.kube.patch(CONSUMERS, name, {"spec": {"drain": record}}, content_type=MERGE_PATCH)
    except ApiError as exc:
        raise cluster.error(exc) from None


def drain(args: argparse.Namespace) -> int:
    cluster = _provider(args)
    consumer = _consumer(cluster, args.consumer)
    spec = consumer.get("spec") or {}
    grace = int(args.grace)
    try:
        current = co.read_drain(spec)
    except co.ConsumerError:
        current = None  # unreadable: replaced by a good record below
    if current is not None and current.grace_seconds == grace:
        drain_now = current
        say(f"consumer {args.consumer} is already being drained since {format_time(current.started)} "
            f"(grace {grace}s, ends {format_time(current.deadline)})")
    else:
        # A new grace counts from the drain's first start, so draining again never extends it silently.
        started = current.started if current is not None else datetime.now(timezone.utc)
        try:
            record = co.drain_record(started, grace)
        except ValueError as exc:
            raise p.PeeringError(f"--grace: {exc}") from None
        _patch_drain(cluster, args.consumer, record)
        drain_now = co.Drain(started=started, grace_seconds=grace)
        say(f"consumer {args.consumer}: {co.DRAIN_FIELD} set (started {record[co.DRAIN_STARTED]}, grace {grace}s, "
            f"ends {format_time(drain_now.deadline)})")
        say("  new ShadowPods are refused; the consumer's virtual node gets the taint "
            f"{c.TAINT_PROVIDER_DRAINING_KEY}:{c.TAINT_PROVIDER_DRAINING_EFFECT}, so its pods are evicted and "
            "recreated in the consumer's cluster; the ShadowPods left when the grace ends are deleted here")
    if not args.wait:
        say(f"not waiting (--no-wait): kubectl get consumer {args.consumer} shows the drain's phase")
        return 0
    return _wait_drained(cluster, args.consumer, format_time(drain_now.deadline), grace + AFTER_GRACE_SECONDS)


def _wait_drained(cluster: Cluster, name: str, deadline_text: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        consumer = cluster.get(CONSUMERS, name)
        if consumer is None:
            say(f"consumer {name} was deleted meanwhile: nothing of it is left to drain")
            return 0
        status = consumer.get("status") or {}
        reported = status.get("drain") or {}
        # A status of an earlier drain (or none yet) is not this drain's progress.
        phase = reported.get("phase") if reported.get("deadline") == deadline_text else None
        phase = phase or "waiting for the enforcer"
        left = status.get("shadowPods")
        line = f"  {phase}: {left if left is not None else '?'} ShadowPod(s) left"
        if line != last:
            say(line)
            last = line
        if phase == co.DRAIN_PHASE_DRAINED:
            say(f"consumer {name} is drained: none of its pods run here; kube-offload undrain {name} lets it offload again")
            return 0
        if time.monotonic() >= deadline:
            raise CommandError(
                f"timed out after {int(timeout)}s: consumer {name} still has ShadowPods (status.drain.phase {phase}); "
                "is the enforcer running? (kubectl -n <release namespace> logs deploy/<release>-enforcer)"
            )
        time.sleep(POLL_SECONDS)


def undrain(args: argparse.Namespace) -> int:
    cluster = _provider(args)
    consumer = _consumer(cluster, args.consumer)
    spec = consumer.get("spec") or {}
    if spec.get("drain") is None:
        say(f"consumer {args.consumer} is not drained: nothing to do")
    else:
        _patch_drain(cluster, args.consumer, None)
        say(f"consumer {args.consumer}: {co.DRAIN_FIELD} removed; new ShadowPods are admitted again and the "
            f"consumer's virtual node loses the taint {c.TAINT_PROVIDER_DRAINING_KEY}")
    if spec.get("cordoned") is True:
        say(f"  note: Consumer spec.cordoned is true (a cordon set apart from the drain): new pods stay refused "
            f"until it is false (kubectl patch consumer {args.consumer} --type=merge -p '{{\"spec\":{{\"cordoned\":false}}}}')")
    return 0


def run_drain(args: argparse.Namespace) -> int:
    return run_command("drain", args, drain)


def run_undrain(args: argparse.Namespace) -> int:
    return run_command("undrain", args, undrain)
