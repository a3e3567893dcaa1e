"""Service continuity across a partition, both directions, end to end on the shared
loopback environment (conftest.py; docs/reflection.md "Service continuity").

* **Provider side.** A local Service's endpoints (a local pod address) are reflected
  into the twin namespace. When the link between the consumer's vkubelet and the provider
  is cut, its heartbeat Lease stops being renewed, and once the enforcer's
  ``--consumer-unreachable-grace`` (40 s, the default the harness runs it with) has
  passed, the reflected endpoints turn ``ready: false`` with the enforcer's mark and a
  ``ConsumerUnreachable`` Event on the Consumer. On heal they are ready again and the
  mark is gone.
* **Consumer side.** A local Service backed by an offloaded pod: its local endpoint turns
  not ready once the provider has been unreachable past ``--ping-timeout`` (the pods of a
  NotReady virtual node are marked not Ready: vkubelet/pods/readiness.py), and ready again on
  heal.

The partition is kube_offload_harness.partition's narrow one: the session's vkubelet
runs through a TCP link the test cuts and heals (both clusters keep running); however
the test ends, the link is healed and the ordinary vkubelet is put back.
"""

from __future__ import annotations

import json
import time
import urllib.request

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.naming import twin_namespace as twin, unique
from kube_offload_harness.partition import vkubelet_behind_link
from support.clusters import delete_namespace, offloaded_namespace

IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
PING_TIMEOUT = 5  # seconds, for the vkubelet behind the link
HEARTBEAT = 2  # --provider-heartbeat-period of the vkubelet behind the link
GRACE = 40  # the enforcer's --consumer-unreachable-grace (its default; the harness sets none)


def local_endpoints(local: Cluster, ns: str, service: str) -> list[bool]:
    slices = local.kubectl_json("get", "endpointslices", "-n", ns, "-l", f"kubernetes.io/service-name={service}")["items"]
    return [bool((e.get("conditions") or {}).get("ready")) for s in slices for e in s.get("endpoints") or []]


def reflected_slice(remote: Cluster, ns: str, name: str) -> dict | None:
    found = remote.kubectl_json("get", "endpointslices", "-n", ns, "--field-selector", f"metadata.name={name}")["items"]
    if not found or (found[0]["metadata"].get("labels") or {}).get(c.LABEL_REFLECTOR) != c.REFLECTOR_ENDPOINTSLICES:
        return None
    return found[0]


def conditions(endpoint_slice: dict | None) -> list[tuple[bool | None, bool | None]]:
    return [((e.get("conditions") or {}).get("ready"), (e.get("conditions") or {}).get("serving"))
            for e in (endpoint_slice or {}).get("endpoints") or []]


def mark(endpoint_slice: dict | None) -> str | None:
    return (((endpoint_slice or {}).get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_HELD_NOT_READY)


def consumer_events(remote: Cluster, consumer: str, reason: str) -> list[dict]:
    events = remote.kubectl_json("get", "events", "-n", "default", "--field-selector",
                                 f"involvedObject.kind=Consumer,involvedObject.name={consumer},reason={reason}")["items"]
    return events


def metric(port: int, name: str, consumer: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = f'{name}{{consumer="{consumer}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return None


def test_partition_holds_endpoints_not_ready_on_both_sides_and_heals(offload_env, local, remote, wait):
    consumer = offload_env.topology().local.cluster_id
    ns = unique("continuity")
    offloaded_namespace(local, ns, c.PLACEMENT_LOCAL_AND_REMOTE)
    # A Service whose endpoint is a local pod's address (the harness's --local-pod-cidr):
    # reflected, remapped into the range the provider grants (test_reflection.py).
    local.apply([
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "home", "namespace": ns},
         "spec": {"ports": [{"port": 5432}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "home-1", "namespace": ns,
                      "labels": {"kubernetes.io/service-name": "home", "endpointslice.kubernetes.io/managed-by": "e2e"}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": ["10.0.8.1"], "conditions": {"ready": True}},
                       {"addresses": ["10.0.8.2"], "conditions": {"ready": False}}],  # the consumer's own word
         "ports": [{"port": 5432, "protocol": "TCP"}]},
        # A Service backed by an offloaded pod (Remote placement for this pod only).
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "away", "namespace": ns},
         "spec": {"selector": {"app": "away"}, "ports": [{"port": 80}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "away", "namespace": ns, "labels": {"app": "away"}},
         "spec": {"containers": [{"name": "c", "image": IMAGE}],
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                      {"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}]}]}}}}},
    ])
    extra = ["--ping-interval", "1s", "--ping-timeout", f"{PING_TIMEOUT}s", "--provider-heartbeat-period", f"{HEARTBEAT}s"]
    try:
        with vkubelet_behind_link(offload_env, remote.spec, extra) as link:
            held_before = conditions(wait(lambda: reflected_slice(remote, twin(ns), "home-1"), timeout=60,
                                          what="the local endpoints reflected"))
            assert held_before == [(True, None), (False, None)]
            wait(lambda: local_endpoints(local, ns, "away") == [True], timeout=90, what="the offloaded pod's endpoint ready")
            lease = remote.kubectl_json("get", "lease", c.CONSUMER_HEARTBEAT_LEASE, "-n", c.tenant_namespace(consumer))
            assert lease["spec"]["renewTime"]
            port = remote.spec.enforcer_health_port
            wait(lambda: metric(port, "kube_offload_enforcer_consumer_reachable", consumer) == 1.0, timeout=30,
                 what="the consumer reported reachable")

            cut_at = time.monotonic()
            link.cut()
            # Consumer side: within the ping timeout, no traffic to a pod nobody can see.
            wait(lambda: local_endpoints(local, ns, "away") == [False], timeout=PING_TIMEOUT + 30, interval=0.5,
                 what="the offloaded pod's local endpoint not ready")
            # Provider side: past the grace, the consumer's endpoints are held not ready.
            held = wait(lambda: (s := reflected_slice(remote, twin(ns), "home-1")) and mark(s) and s,
                        timeout=GRACE + 40, interval=1, what="the reflected endpoints held not ready")
            elapsed = time.monotonic() - cut_at
            assert elapsed >= GRACE - HEARTBEAT - 2, f"held after {elapsed:.0f}s, before the grace ({GRACE}s)"
            assert conditions(held) == [(False, False), (False, False)]
            # What the enforcer overwrote, to give back exactly (serving absent: null).
            assert json.loads(mark(held) or "{}") == {"10.200.8.1": {"ready": True, "serving": None},
                                                      "10.200.8.2": {"ready": False, "serving": None}}
            assert [e["addresses"] for e in held["endpoints"]] == [["10.200.8.1"], ["10.200.8.2"]]  # addresses untouched
            events = wait(lambda: consumer_events(remote, consumer, "ConsumerUnreachable"), timeout=20,
                          what="the ConsumerUnreachable Event")
            assert c.CONSUMER_HEARTBEAT_LEASE in events[0]["message"] and events[0]["type"] == "Warning"
            assert metric(port, "kube_offload_enforcer_consumer_reachable", consumer) == 0.0
            assert metric(port, "kube_offload_enforcer_endpoints_held_not_ready", consumer) == 2.0  # both recorded
            # A Service of the provider's own in a twin is not the consumer's: its slices are
            # the provider's EndpointSlice controller's, never touched (only labelled ones are).

            link.heal()
            restored = wait(lambda: (s := reflected_slice(remote, twin(ns), "home-1")) and not mark(s)
                            and conditions(s) == held_before and s,
                            timeout=60, interval=1, what="the reflected endpoints restored")
            assert [e["addresses"] for e in restored["endpoints"]] == [["10.200.8.1"], ["10.200.8.2"]]
            wait(lambda: local_endpoints(local, ns, "away") == [True], timeout=60, interval=0.5,
                 what="the offloaded pod's local endpoint ready again")
            wait(lambda: metric(port, "kube_offload_enforcer_consumer_reachable", consumer) == 1.0, timeout=30,
                 what="the consumer reported reachable again")
            assert metric(port, "kube_offload_enforcer_endpoints_held_not_ready", consumer) == 0.0
    finally:
        delete_namespace(local, ns)


def test_a_gone_consumers_reflected_endpoints_are_deleted_and_nothing_else(remote, wait):
    # A twin of a consumer that has no Consumer object (deleted; here: never admitted), as
    # the provider's admin can set it up: the enforcer's labels on the namespace, one slice
    # as that consumer's reflector writes it, and one as the provider's own EndpointSlice
    # controller writes it for a Service (the origin label copied, no reflector label).
    ghost = unique("ghost")
    ns = f"demo-{ghost}"
    labels = {"kubernetes.io/service-name": "web", c.LABEL_ORIGIN_CLUSTER_ID: ghost}

    def endpoint_slice(name: str, extra: dict) -> dict:
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": ns, "labels": {**labels, **extra}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.200.9.1"], "conditions": {"ready": True}}],
                "ports": [{"port": 80, "protocol": "TCP"}]}

    remote.apply([
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: ghost, c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}}},
    ])
    try:
        remote.apply([
            endpoint_slice("reflected", {c.LABEL_REFLECTOR: c.REFLECTOR_ENDPOINTSLICES,
                                         "endpointslice.kubernetes.io/managed-by": "vkubelet.kube-offload.io"}),
            endpoint_slice("providers-own", {"endpointslice.kubernetes.io/managed-by": "e2e-provider"}),
        ])

        def names() -> set[str]:
            return {s["metadata"]["name"] for s in remote.kubectl_json("get", "endpointslices", "-n", ns)["items"]}

        wait(lambda: names() == {"providers-own"}, timeout=30, interval=1,
             what="the gone consumer's reflected slice deleted, the provider's own kept")
        time.sleep(3)  # a later pass must not take the provider's slice either
        assert names() == {"providers-own"}
    finally:
        remote.kubectl("delete", "namespace", ns, "--wait=false")
