"""Events of reflected Services, claims and Ingresses (vkubelet/reflection/object_events.py's forge,
and what it shares with the pods' Events in event_copies.py): what crosses from the provider, how
remote Events aggregate onto one local Event, the rate bounds on an explicit clock, and which loops
run (loops.py)."""

from __future__ import annotations

import pytest

from kube_offload.runtime import kinds
from vkubelet.shared import names as n
from vkubelet.reflection import settings as s
from vkubelet.reflection import event_copies as ec
from vkubelet.reflection import object_events as oe
from vkubelet.reflection.loops import reflection_loops
from vkubelet.reflection.object_events import FIELD_SELECTOR, ObjectEventReflector, by_involved

TWIN, LOCAL_NS = "demo-local", "demo"
LOCAL_SVC = {"metadata": {"name": "web", "namespace": LOCAL_NS, "uid": "local-svc-uid"}}
LOCAL_INGRESS = {"metadata": {"name": "site", "namespace": LOCAL_NS, "uid": "local-ing-uid"}}


def sanitize(message: str) -> str:
    return oe.sanitize_message(message, twin_namespace=TWIN, local_namespace=LOCAL_NS)


def remote_event(uid: str = "e1", *, reason: str = "SyncLoadBalancerFailed", type_: str = "Warning",
                 message: str = "Error syncing load balancer: failed to ensure load balancer", count: int | None = 1,
                 first: str = "2026-11-27T06:00:00Z", last: str = "2026-11-27T06:01:00Z",
                 component: str = "service-controller") -> dict:
    return {
        "metadata": {"name": f"web.{uid}", "namespace": TWIN, "uid": uid},
        "involvedObject": {"kind": "Service", "namespace": TWIN, "name": "web", "uid": "remote-svc-uid"},
        "type": type_, "reason": reason, "message": message, "count": count,
        "firstTimestamp": first, "lastTimestamp": last, "source": {"component": component},
    }


# --- what crosses ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("remote", "local"), [
    # addresses, with a prefix or a port, IPv4 and IPv6
    ("Error syncing load balancer: 203.0.113.7 refused", f"Error syncing load balancer: {oe.MASK_ADDRESS} refused"),
    ("subnet 10.0.0.0/16 full; backend 10.0.3.4:30080 down", f"subnet {oe.MASK_ADDRESS} full; backend {oe.MASK_ADDRESS} down"),
    ("Assigned IP [\"2001:db8::1\"]", f"Assigned IP [\"{oe.MASK_ADDRESS}\"]"),
    ("listening on [fd00::10]:443", f"listening on {oe.MASK_ADDRESS}"),
    # UUIDs: remote UIDs and the volume names made of them
    ("Successfully provisioned volume pvc-3f2a6c1e-8a7b-4c2d-9e0f-123456789abc using rancher.io/local-path",
     f"Successfully provisioned volume pvc-{oe.MASK_UID} using rancher.io/local-path"),
    # node names after "node"/"host", quoted always, bare when they look like one
    ('failed to provision volume: node "worker-3" has no capacity', f'failed to provision volume: node "{oe.MASK_NODE}" has no capacity'),
    ("announcing from node kind-worker2 with protocol layer2", f"announcing from node {oe.MASK_NODE} with protocol layer2"),
    ("host: ip-10-0-0-1.ec2.internal unreachable", f"host: {oe.MASK_NODE} unreachable"),
    # the twin namespace is the local namespace for the consumer's users
    (f"claim {TWIN}/data waits", f"claim {LOCAL_NS}/data waits"),
    (f'Ingress {TWIN}/site', f"Ingress {LOCAL_NS}/site"),
])
def test_provider_internals_are_masked_and_the_twin_namespace_reads_as_local(remote, local):
    assert sanitize(remote) == local


@pytest.mark.parametrize("message", [
    "waiting for first consumer to be created before binding",
    "Scheduled for sync",
    "Ensured load balancer",
    "0/3 nodes are available: node affinity mismatch",  # words after "node(s)" are not names
    "retry at 07:20:00 (version 1.31.2, 3/4 ready)",  # times, versions and ratios are not addresses
    "no persistent volumes available for this claim and no storage class is set",
    f"namespace {TWIN}-other and x{TWIN} are other names",  # only the twin namespace itself
])
def test_ordinary_text_is_left_as_written(message):
    assert sanitize(message) == message


def test_same_name_mapping_and_long_messages():
    assert oe.sanitize_message("claim demo/data", twin_namespace="demo", local_namespace="demo") == "claim demo/data"
    assert len(sanitize("x" * 5000)) == oe.MESSAGE_LIMIT


def test_allocator_and_topology_reasons_are_not_copied():
    assert oe.copied(remote_event(reason="ProvisioningFailed"))
    assert oe.copied(remote_event(reason="WaitForFirstConsumer", type_="Normal"))
    for reason in ("ClusterIPNotAllocated", "PortAlreadyAllocated", "nodeAssigned"):
        assert not oe.copied(remote_event(reason=reason))
    assert not oe.copied(remote_event(reason=""))


# --- aggregation -------------------------------------------------------------------------------------------
def test_remote_events_differing_only_in_what_is_masked_add_up_on_one_local_event():
    events = [
        remote_event("e1", message="backend 10.0.0.1 unhealthy", count=3, first="2026-11-27T06:00:00Z", last="2026-11-27T06:02:00Z"),
        remote_event("e2", message="backend 10.0.0.2 unhealthy", count=2, first="2026-11-27T05:59:00Z", last="2026-11-27T06:01:00Z"),
        remote_event("e3", reason="EnsuringLoadBalancer", type_="Normal", message="Ensuring load balancer", count=None),
        remote_event("e4", reason="ClusterIPNotAllocated", message="Cluster IP 10.96.0.9 is not allocated"),
    ]
    groups = oe.aggregate(events, sanitize)
    assert set(groups) == {
        ("Warning", "SyncLoadBalancerFailed", f"backend {oe.MASK_ADDRESS} unhealthy"),
        ("Normal", "EnsuringLoadBalancer", "Ensuring load balancer"),
    }
    failed = groups[("Warning", "SyncLoadBalancerFailed", f"backend {oe.MASK_ADDRESS} unhealthy")]
    assert failed.counts == {"e1": 3, "e2": 2} and failed.count == 5
    assert (failed.first, failed.last) == ("2026-11-27T05:59:00Z", "2026-11-27T06:02:00Z")
    assert failed.sources == {"service-controller"}
    assert groups[("Normal", "EnsuringLoadBalancer", "Ensuring load balancer")].count == 1  # no count: one


def test_the_local_event_is_about_the_local_object_and_named_by_its_key():
    [group] = oe.aggregate([remote_event(count=4)], sanitize).values()
    event = ec.forge_object_event(group, LOCAL_SVC, kinds.SERVICES, count=4, host="vk-remote", component="kube-offload-vkubelet",
                                  reporting_controller="kube-offload.io/vkubelet")
    # What `kubectl describe service web` selects by: kind, name, namespace, UID.
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Service", "namespace": LOCAL_NS, "name": "web", "uid": "local-svc-uid"}
    assert event["metadata"]["namespace"] == LOCAL_NS
    assert event["metadata"]["name"] == ec.local_object_event_name("web", "Service", "local-svc-uid", group.type, group.reason, group.message)
    assert event["metadata"]["name"].startswith("web.ko")
    assert event["metadata"]["annotations"] == {n.ANNOTATION_REMOTE_SOURCE: "service-controller"}
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "SyncLoadBalancerFailed", 4)
    assert event["source"] == {"component": "kube-offload-vkubelet", "host": "vk-remote"}
    assert (event["firstTimestamp"], event["lastTimestamp"]) == ("2026-11-27T06:00:00Z", "2026-11-27T06:01:00Z")
    ingress = ec.forge_object_event(group, LOCAL_INGRESS, kinds.INGRESSES, count=1, host="vk", component="c", reporting_controller="r")
    assert ingress["involvedObject"]["apiVersion"] == "networking.k8s.io/v1" and ingress["involvedObject"]["kind"] == "Ingress"


def test_one_name_per_object_and_key_whatever_the_remote_event():
    key = ("Service", "local-svc-uid", "Warning", "SyncLoadBalancerFailed", "m")
    name = ec.local_object_event_name("web", *key)
    assert name == ec.local_object_event_name("web", *key)
    assert name != ec.local_object_event_name("web", "Service", "local-svc-uid", "Warning", "SyncLoadBalancerFailed", "other")
    # The same name re-created locally (another UID) gets Events of its own.
    assert name != ec.local_object_event_name("web", "Service", "new-uid", "Warning", "SyncLoadBalancerFailed", "m")


def test_counts_are_remembered_past_the_remote_events_expiry_and_never_go_down():
    first = ec.remember_counts({}, {"e1": 5})
    # e1 expired remotely (event TTL); e2 says the same thing again: the local count goes on.
    again = ec.remember_counts(first, {"e2": 1})
    assert sum(again.values()) == 6
    # A stale cache answer (a lower count for a known Event) does not lower it.
    assert ec.remember_counts(again, {"e2": 0}) == {"e1": 5, "e2": 1}
    bounded = ec.remember_counts({f"e{i}": 1 for i in range(64)}, {"new": 1}, limit=64)
    assert len(bounded) == 64 and "new" in bounded and "e0" not in bounded


# --- rate bounds ---------------------------------------------------------------------------------------
def test_new_local_events_per_object_come_in_a_burst_then_one_per_refill():
    bucket = ec.TokenBucket(burst=3, refill_seconds=60.0, now=1000.0)
    for _ in range(3):
        assert bucket.wait(1000.0) == 0.0
        bucket.take(1000.0)
    assert bucket.wait(1000.0) == pytest.approx(60.0)
    assert bucket.wait(1030.0) == pytest.approx(30.0)
    assert bucket.wait(1060.0) == 0.0
    bucket.take(1060.0)
    assert bucket.wait(1060.0) == pytest.approx(60.0)
    # Idle for long: back to a full burst, never more.
    assert bucket.wait(10_000.0) == 0.0 and bucket.tokens == 3.0


def test_a_written_local_event_is_updated_at_most_once_per_interval():
    assert ec.update_wait(None, 100.0) == 0.0
    assert ec.update_wait(100.0, 105.0, interval=15.0) == pytest.approx(10.0)
    assert ec.update_wait(100.0, 115.0, interval=15.0) == 0.0


# --- the loop's pure parts ------------------------------------------------------------------------------
def test_remote_events_are_indexed_by_the_object_they_are_about():
    assert by_involved(remote_event()) == [f"Service/{TWIN}/web"]
    no_namespace = {"metadata": {"namespace": TWIN}, "involvedObject": {"kind": "PersistentVolumeClaim", "name": "data"}}
    assert by_involved(no_namespace) == [f"PersistentVolumeClaim/{TWIN}/data"]
    assert by_involved({"metadata": {}, "involvedObject": {}}) == []
    # The one watch selects every kind but those of the pods' Event reflection.
    assert FIELD_SELECTOR == "involvedObject.kind!=Pod,involvedObject.kind!=ShadowPod"


def test_the_object_events_loop_runs_with_events_and_one_of_its_kinds():
    def settings(**workers: int) -> s.ReflectionSettings:
        return s.ReflectionSettings(resources={name: s.ResourceSettings(workers=w) for name, w in workers.items()})

    assert ObjectEventReflector in reflection_loops(settings())
    assert ObjectEventReflector not in reflection_loops(settings(events=0))
    assert ObjectEventReflector not in reflection_loops(settings(services=0, persistentvolumeclaims=0, ingresses=0))
    assert ObjectEventReflector in reflection_loops(settings(services=0, persistentvolumeclaims=0))
