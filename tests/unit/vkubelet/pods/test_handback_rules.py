"""When a pod is handed back (vkubelet/pods/handback_rules.py): which refusals are for good, when an
unschedulable remote pod is due, which pods may be evicted at all."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload.shadowpod_status import creation_failed_message, creation_failure
from kube_offload.times import format_time
from vkubelet.pods import handback_rules as hb

NOW = datetime(2026, 11, 27, 3, 0, 0, tzinfo=timezone.utc)
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8", "uid": "rs-1", "controller": True}

PERMANENT = [
    # the pod alone asks more than the quota's hard limit
    'pods "web" is forbidden: exceeded quota: compute, requested: requests.cpu=4, used: requests.cpu=0, limited: requests.cpu=2',
    'pods "web" is forbidden: exceeded quota: q, requested: limits.memory=3Gi,requests.cpu=1, used: limits.memory=0,'
    'requests.cpu=0, limited: limits.memory=2Gi,requests.cpu=4',
    'pods "web" is forbidden: maximum cpu usage per Container is 1, but limit is 2',
    'pods "web" is forbidden: minimum memory usage per Pod is 64Mi, but request is 32Mi',
    'pods "web" is forbidden: cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000',
    'pods "web" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false',
    'Pod "web" is invalid: spec.containers[0].image: Required value',
]
WAITED_OUT = [
    # the quota frees up when other pods end
    'pods "web" is forbidden: exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=2, limited: requests.cpu=2',
    'pods "web" is forbidden: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=1, limited: requests.cpu=2',
    # unparseable quantities: not sure, so not for good
    'pods "web" is forbidden: exceeded quota: compute, requested: cpu=lots, used: cpu=0, limited: cpu=2',
    'admission webhook "policy.example.com" denied the request: not now',
    'pods "web" is forbidden: error looking up service account ns/default: serviceaccount "default" not found',
    'Internal error occurred: failed calling webhook',
    "",
]


@pytest.mark.parametrize("message", PERMANENT)
def test_refusals_for_good(message: str) -> None:
    assert hb.permanent_refusal(message)


@pytest.mark.parametrize("message", WAITED_OUT)
def test_refusals_waited_out(message: str) -> None:
    assert not hb.permanent_refusal(message)


def shadowpod(message: str, phase: str = "Pending") -> dict:
    return {"metadata": {"name": "web", "namespace": "twin"}, "status": {"phase": phase, "message": message}}


def test_the_enforcers_message_is_read_back() -> None:
    inner = PERMANENT[0]
    written = creation_failed_message("web", inner)
    assert creation_failure(shadowpod(written)) == inner
    assert hb.creation_refusal(shadowpod(written)) == inner
    assert hb.creation_refusal(shadowpod(creation_failed_message("web", WAITED_OUT[0]))) is None
    assert hb.creation_refusal(shadowpod(inner)) is None  # not a creation failure
    assert hb.creation_refusal(shadowpod(written, phase="Running")) is None
    assert hb.creation_refusal(None) is None


def remote(reason: str = "Unschedulable", status: str = "False", since: datetime | None = NOW, created: datetime = NOW) -> dict:
    condition = {"type": "PodScheduled", "status": status, "reason": reason, "message": "0/3 nodes are available: 3 Insufficient cpu."}
    if since is not None:
        condition["lastTransitionTime"] = format_time(since)
    return {"metadata": {"creationTimestamp": format_time(created)}, "status": {"phase": "Pending", "conditions": [condition]}}


def test_unschedulable_is_due_after_the_configured_time() -> None:
    pod = remote(since=NOW)
    assert hb.decide(pod, None, now=NOW + timedelta(seconds=60), after_seconds=180) == hb.NotYet(120.0)
    due = hb.decide(pod, None, now=NOW + timedelta(seconds=180), after_seconds=180)
    assert due == hb.Due(hb.CAUSE_UNSCHEDULABLE, "0/3 nodes are available: 3 Insufficient cpu.")
    # Off: never, however long.
    assert hb.decide(pod, None, now=NOW + timedelta(days=1), after_seconds=0) == hb.NotYet(None)


def test_unschedulable_without_a_transition_time_counts_from_creation() -> None:
    pod = remote(since=None, created=NOW - timedelta(seconds=200))
    assert isinstance(hb.decide(pod, None, now=NOW, after_seconds=180), hb.Due)


@pytest.mark.parametrize("pod", [remote(status="True", reason=""), remote(reason="SchedulingGated"),
                                 {"status": {"phase": "Running"}}])
def test_scheduled_or_gated_is_never_due(pod: dict) -> None:
    assert hb.decide(pod, None, now=NOW + timedelta(days=1), after_seconds=180) == hb.NotYet(None)


def test_a_refusal_for_good_is_due_at_once_and_others_never() -> None:
    refused = shadowpod(creation_failed_message("web", PERMANENT[2]))
    assert hb.decide(None, refused, now=NOW, after_seconds=180) == hb.Due(hb.CAUSE_REFUSED, PERMANENT[2])
    waiting = shadowpod(creation_failed_message("web", WAITED_OUT[0]))
    assert hb.decide(None, waiting, now=NOW + timedelta(days=1), after_seconds=180) == hb.NotYet(None)
    assert hb.decide(None, refused, now=NOW, after_seconds=0) == hb.NotYet(None)


def pod(owners: list | None) -> dict:
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "p-1", "ownerReferences": owners or []}}


def ns(annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "ns", "annotations": annotations or {}}}


def test_who_may_be_evicted() -> None:
    assert hb.ineligible(pod([RS]), ns()) is None
    # Without a controller: only if the namespace asks.
    why = hb.ineligible(pod(None), ns())
    assert why is not None and c.ANNOTATION_HANDBACK_UNCONTROLLED in why
    assert hb.ineligible(pod([{**RS, "controller": False}]), ns()) is not None
    assert hb.ineligible(pod(None), None) is not None
    assert hb.ineligible(pod(None), ns({c.ANNOTATION_HANDBACK_UNCONTROLLED: "true"})) is None
    assert hb.ineligible(pod(None), ns({c.ANNOTATION_HANDBACK_UNCONTROLLED: "yes"})) is not None
    # A DaemonSet's pod would only come back to this node.
    daemonset = {**RS, "kind": "DaemonSet"}
    assert hb.ineligible(pod([daemonset]), ns({c.ANNOTATION_HANDBACK_UNCONTROLLED: "true"})) is not None


def test_the_event_names_the_remote_reason_and_the_refusal() -> None:
    due = hb.Due(hb.CAUSE_UNSCHEDULABLE, "0/3 nodes are available")
    text = hb.event_message(due, "eu1", "kube-offload-eu1", 600.0)
    assert "cluster eu1 could not schedule it: 0/3 nodes are available" in text
    assert "avoid kube-offload-eu1 for 600s" in text
    refused = hb.event_message(hb.Due(hb.CAUSE_REFUSED, PERMANENT[0]), "eu1", "kube-offload-eu1", None)
    assert "cluster eu1 refused it: " + PERMANENT[0] in refused and "avoid" not in refused


def test_a_shadowpod_refusal_for_good_is_due_at_once() -> None:
    # The provider's ShadowPod webhook dry-runs the pod: its words around the API server's.
    webhook = ("the provider would refuse this Pod: exceeded quota: small, requested: requests.cpu=500m, "
               "used: requests.cpu=0, limited: requests.cpu=100m")
    assert hb.refusal_due(webhook, after_seconds=180) == hb.Due(hb.CAUSE_REFUSED, webhook)
    assert hb.refusal_due('the provider would refuse this Pod: Pod "web" is invalid: spec', after_seconds=180) is not None
    assert hb.refusal_due(webhook, after_seconds=0) is None
    waiting = webhook.replace("used: requests.cpu=0", "used: requests.cpu=100m").replace("requests.cpu=500m", "requests.cpu=50m")
    assert hb.refusal_due(waiting, after_seconds=180) is None
    assert hb.refusal_due('exceeded quota of consumer "c": cpu 2 more, used 3 of 4', after_seconds=180) is None
