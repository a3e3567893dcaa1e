"""Resource reflection end to end (loop 8 of ARCHITECTURE.md), on the shared loopback
environment of conftest.py: the harness's ``kube-offload vkubelet`` reflects objects of
an offloaded namespace into its twin namespace in the real remote control plane, and
copies remote Events back to the real local one. Everything is driven with kubectl;
the vkubelet is killed and restarted by its PID through the harness.

One offloaded namespace serves the whole module (tests run in file order, each on its
own object names); the restart tests put the vkubelet back as the harness started it.
"""

from __future__ import annotations

import base64
import json
import time

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.identities import E2E_INGRESS_CLASS
from support.clusters import get_or_none, offloaded_namespace
from support.reflection_twin import LOCAL_ID, TIMEOUT, Twin
from vkubelet.shared.names import ANNOTATION_REMOTE_SOURCE

REFLECTOR_LABEL = "kube-offload.io/reflector"
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it


# --- helpers ------------------------------------------------------------------------------------
def _apply(cluster: Cluster, namespace: str, obj: dict) -> None:
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    cluster.apply(obj)


def _patch(cluster: Cluster, kind: str, namespace: str, name: str, patch: dict) -> None:
    cluster.kubectl("patch", kind, name, "-n", namespace, "--type", "merge", "-p", json.dumps(patch))


def _labels(obj: dict | None) -> dict:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _ours(obj: dict | None, reflector: str) -> bool:
    labels = _labels(obj)
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == LOCAL_ID and labels.get(REFLECTOR_LABEL) == reflector


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def t(local, remote, wait):
    twin = Twin(local, remote, wait, prefix="refl")
    offloaded_namespace(local, twin.ns)
    wait(lambda: get_or_none(remote, "namespace", "", twin.twin) is not None, timeout=TIMEOUT, what=f"twin namespace {twin.twin}")
    yield twin
    local.kubectl("delete", "namespace", twin.ns, "--wait=false", "--ignore-not-found", check=False)


def _restart_vkubelet(env, local, *, extra_args=(), kill=False, while_down=lambda: None) -> None:
    """Stop (SIGTERM, or SIGKILL with ``kill``) the harness's vkubelet, run ``while_down``,
    start it again with ``extra_args`` and wait for its node to be Ready."""
    topology = env.topology()
    spec = topology.remotes[0]
    name = f"vkubelet-{spec.cluster_id}"
    if kill:
        env.processes.kill(name)
    else:
        env.processes.stop(name)
    record = env.processes.get(name)
    assert record is None or not record.running()
    while_down()
    env.start_vkubelet(topology, spec, extra_args)
    env.wait_virtual_node_ready(local, spec)


# --- ConfigMaps -------------------------------------------------------------------------------------
def test_configmap_create_update_drift_delete(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"app": "web"}},
                           "data": {"mode": "one"}})
    cm = t.until_remote("configmap", "cfg", lambda o: _ours(o, "configmaps"), "created with our labels")
    assert cm["data"] == {"mode": "one"}
    assert _labels(cm)["app"] == "web"
    assert cm["metadata"]["annotations"][c.ANNOTATION_ORIGIN_NAMESPACE] == t.ns

    _patch(t.local, "configmap", t.ns, "cfg", {"data": {"mode": "two", "extra": "x"}})
    t.until_remote("configmap", "cfg", lambda o: o.get("data") == {"mode": "two", "extra": "x"}, "updated")

    # Our field taken back; a key someone else added is theirs (server-side apply:
    # test_reflection_ssa.py).
    _patch(t.remote, "configmap", t.twin, "cfg", {"data": {"mode": "drifted", "foreign": "y"}})
    t.until_remote("configmap", "cfg", lambda o: o.get("data") == {"mode": "two", "extra": "x", "foreign": "y"},
                   "drift overwritten")

    t.local.kubectl("delete", "configmap", "cfg", "-n", t.ns)
    t.until_remote_gone("configmap", "cfg")


def test_local_root_ca_is_reflected_under_its_own_name(t):
    local_ca = get_or_none(t.local, "configmap", t.ns, "kube-root-ca.crt")
    assert local_ca is not None
    reflected = t.until_remote("configmap", "kube-offload-root-ca.crt", lambda o: _ours(o, "configmaps"), "reflected CA")
    assert reflected["data"]["ca.crt"] == local_ca["data"]["ca.crt"]
    # The remote cluster's own CA bundle is left as the remote controller-manager wrote it.
    remote_ca = t.remote_obj("configmap", "kube-root-ca.crt")
    assert remote_ca is not None and REFLECTOR_LABEL not in _labels(remote_ca)
    assert remote_ca["data"]["ca.crt"] != local_ca["data"]["ca.crt"]


# --- Secrets ---------------------------------------------------------------------------------------
def test_secret_create_update_drift_delete_and_token_secrets_stay_home(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "type": "Opaque",
                           "stringData": {"password": "one"}})
    secret = t.until_remote("secret", "creds", lambda o: _ours(o, "secrets"), "created")
    assert secret["data"] == {"password": _b64("one")} and secret["type"] == "Opaque"

    _patch(t.local, "secret", t.ns, "creds", {"stringData": {"password": "two"}})
    t.until_remote("secret", "creds", lambda o: o["data"] == {"password": _b64("two")}, "updated")
    _patch(t.remote, "secret", t.twin, "creds", {"data": {"password": _b64("stolen")}})
    t.until_remote("secret", "creds", lambda o: o["data"] == {"password": _b64("two")}, "drift overwritten")

    # A legacy token Secret of the local cluster: its credentials never leave it.
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                           "metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "default"}}})
    t.local.kubectl("delete", "secret", "creds", "-n", t.ns)
    t.until_remote_gone("secret", "creds")
    assert t.remote_obj("secret", "legacy-token") is None


# --- Services and EndpointSlices ----------------------------------------------------------------------
def test_service_gets_remote_allocations_and_follows_updates_and_deletion(t):
    # (A NodePort Service: the provider grants none by default, see
    # test_provider_policy_local_events.py.)
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                           "spec": {"selector": {"app": "web"},
                                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    local_svc = t.local.kubectl_json("get", "service", "web", "-n", t.ns)
    svc = t.until_remote("service", "web", lambda o: _ours(o, "services"), "created")
    assert svc["spec"]["selector"] == {"app": "web"}
    # Allocated by the remote cluster from its own range, not copied.
    assert svc["spec"]["clusterIP"] and svc["spec"]["clusterIP"] != local_svc["spec"]["clusterIP"]
    assert svc["metadata"]["annotations"][c.ANNOTATION_ORIGIN_NAME] == "web"
    assert local_svc["spec"]["clusterIP"]  # (the local one has its own)

    _patch(t.local, "service", t.ns, "web", {"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080},
                                                                 {"name": "admin", "port": 9090, "targetPort": 9090}]}})
    t.until_remote("service", "web", lambda o: [p["port"] for p in o["spec"]["ports"]] == [80, 9090], "second port")
    _patch(t.remote, "service", t.twin, "web", {"spec": {"sessionAffinity": "ClientIP"}})
    t.until_remote("service", "web", lambda o: o["spec"].get("sessionAffinity") == "None", "drift overwritten")

    t.local.kubectl("delete", "service", "web", "-n", t.ns)
    t.until_remote_gone("service", "web")


def test_endpointslice_carries_local_endpoints_only(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                           "spec": {"ports": [{"port": 5432}]}})  # no selector: endpoints are the user's
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db", "endpointslice.kubernetes.io/managed-by": "e2e"}},
        "addressType": "IPv4",
        # Local pod addresses (the harness's --local-pod-cidr), reflected as the provider
        # reaches them (--local-pod-cidr-remapped, the range its policy grants us).
        "endpoints": [
            {"addresses": ["10.0.7.7"], "conditions": {"ready": True}, "nodeName": "local-node-0"},
            # An endpoint on the virtual node is an offloaded pod: the remote cluster lists it itself.
            {"addresses": ["10.244.9.9"], "conditions": {"ready": True}, "nodeName": f"{c.VIRTUAL_NODE_PREFIX}remote-1"},
        ],
        "ports": [{"port": 5432, "protocol": "TCP"}],
    }
    _apply(t.local, t.ns, slice_)
    remote_slice = t.until_remote("endpointslice", "db-1", lambda o: _ours(o, "endpointslices"), "created")
    assert [e["addresses"] for e in remote_slice["endpoints"]] == [["10.200.7.7"]]
    assert "nodeName" not in remote_slice["endpoints"][0]
    assert _labels(remote_slice)["kubernetes.io/service-name"] == "db"
    # Not the remote EndpointSlice controller's: it would delete a slice claiming to be its own.
    assert _labels(remote_slice)["endpointslice.kubernetes.io/managed-by"] == "vkubelet.kube-offload.io"

    slice_["endpoints"][0]["addresses"] = ["10.0.7.8"]
    _apply(t.local, t.ns, slice_)
    t.until_remote("endpointslice", "db-1", lambda o: o["endpoints"][0]["addresses"] == ["10.200.7.8"], "updated")
    _patch(t.remote, "endpointslice", t.twin, "db-1", {"endpoints": [{"addresses": ["10.9.9.9"]}]})
    t.until_remote("endpointslice", "db-1", lambda o: [e["addresses"] for e in o["endpoints"]] == [["10.200.7.8"]], "drift overwritten")

    # Skip the Service: its slices follow.
    t.local.kubectl("annotate", "service", "db", "-n", t.ns, f"{c.ANNOTATION_SKIP_REFLECTION}=true")
    t.until_remote_gone("endpointslice", "db-1")
    t.until_remote_gone("service", "db")
    t.local.kubectl("delete", "service", "db", "-n", t.ns)
    t.local.kubectl("delete", "endpointslice", "db-1", "-n", t.ns)


def test_endpoints_of_offloaded_pods_are_not_reflected(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "app"},
                           "spec": {"selector": {"app": "offloaded"}, "ports": [{"port": 80}]}})
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "backend", "labels": {"app": "offloaded"}},
                           "spec": {"containers": [{"name": "c", "image": IMAGE}]}})

    def local_slice_with_endpoint():
        items = t.local.kubectl_json("get", "endpointslices", "-n", t.ns, "-l", "kubernetes.io/service-name=app")["items"]
        return [s for s in items if s.get("endpoints")]

    local_slices = t.wait(local_slice_with_endpoint, timeout=90, what="the local controller's slice for the offloaded pod")
    assert local_slices[0]["endpoints"][0]["nodeName"] == f"{c.VIRTUAL_NODE_PREFIX}remote-1"
    t.until_remote("service", "app", lambda o: _ours(o, "services"), "service reflected")
    # The remote controller lists the remote pod itself; a copy of the local slice would
    # only add a second, wrong route to it.
    time.sleep(3)
    remote_slices = t.remote.kubectl_json("get", "endpointslices", "-n", t.twin, "-l", "kubernetes.io/service-name=app")["items"]
    assert not [s for s in remote_slices if _labels(s).get(REFLECTOR_LABEL) == "endpointslices"]
    assert [s for s in remote_slices if _labels(s).get("endpointslice.kubernetes.io/managed-by") == "endpointslice-controller.k8s.io"]


# --- Ingresses and PVCs --------------------------------------------------------------------------------
def test_ingress_create_update_drift_delete(t):
    # Class and domain granted to the harness's consumer (harness identities.E2E_POLICY).
    def ingress(host: str) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "site"},
                # The class and domain the harness grants the e2e consumer (Consumer spec.policy.ingress).
                "spec": {"ingressClassName": E2E_INGRESS_CLASS,
                         "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
                             "service": {"name": "web", "port": {"number": 80}}}}]}}]}}

    _apply(t.local, t.ns, ingress("a.e2e.example.com"))
    t.until_remote("ingress", "site", lambda o: _ours(o, "ingresses") and o["spec"]["rules"][0]["host"] == "a.e2e.example.com", "created")
    _apply(t.local, t.ns, ingress("b.e2e.example.com"))
    t.until_remote("ingress", "site", lambda o: o["spec"]["rules"][0]["host"] == "b.e2e.example.com", "updated")
    _patch(t.remote, "ingress", t.twin, "site", {"spec": {"ingressClassName": "other"}})
    t.until_remote("ingress", "site", lambda o: o["spec"].get("ingressClassName") == E2E_INGRESS_CLASS, "drift overwritten")
    t.local.kubectl("delete", "ingress", "site", "-n", t.ns)
    t.until_remote_gone("ingress", "site")


def test_pvc_claim_is_reflected_for_the_remote_cluster_to_provision(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
                           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    pvc = t.until_remote("pvc", "data", lambda o: _ours(o, "persistentvolumeclaims"), "created")
    assert pvc["spec"]["resources"]["requests"] == {"storage": "1Gi"}
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not pvc["spec"].get("volumeName")  # the remote cluster binds its own volume

    _patch(t.local, "pvc", t.ns, "data", {"metadata": {"labels": {"tier": "gold"}}})
    t.until_remote("pvc", "data", lambda o: _labels(o).get("tier") == "gold", "label updated")
    _patch(t.remote, "pvc", t.twin, "data", {"metadata": {"labels": {"tier": "lead"}}})
    t.until_remote("pvc", "data", lambda o: _labels(o).get("tier") == "gold", "drift overwritten")
    t.local.kubectl("delete", "pvc", "data", "-n", t.ns, "--wait=false")
    t.until_remote_gone("pvc", "data")


# --- ownership and policy --------------------------------------------------------------------------------
def test_remote_object_without_our_label_is_left_alone(t):
    t.remote.kubectl("create", "configmap", "theirs", "-n", t.twin, "--from-literal=owner=remote")
    t.remote.kubectl("create", "secret", "generic", "their-secret", "-n", t.twin, "--from-literal=owner=remote")
    t.local.kubectl("create", "configmap", "theirs", "-n", t.ns, "--from-literal=owner=local")
    t.local.kubectl("create", "secret", "generic", "their-secret", "-n", t.ns, "--from-literal=owner=local")

    conflict = t.wait(lambda: t.local_events(reason="ReflectionConflict", **{"involvedObject.name": "theirs"}),
                      timeout=TIMEOUT, what="a ReflectionConflict Event on the local ConfigMap")
    assert conflict[0]["type"] == "Warning" and "left alone" in conflict[0]["message"]
    t.wait(lambda: t.local_events(reason="ReflectionConflict", **{"involvedObject.name": "their-secret"}),
           timeout=TIMEOUT, what="a ReflectionConflict Event on the local Secret")
    assert t.remote_obj("configmap", "theirs")["data"] == {"owner": "remote"}
    assert t.remote_obj("secret", "their-secret")["data"] == {"owner": _b64("remote")}

    t.local.kubectl("delete", "configmap", "theirs", "-n", t.ns)
    time.sleep(3)
    theirs = t.remote_obj("configmap", "theirs")
    assert theirs is not None and theirs["data"] == {"owner": "remote"} and not _labels(theirs)


def test_skip_annotation_keeps_an_object_home_and_removes_its_copy(t):
    t.local.kubectl("create", "configmap", "private", "-n", t.ns, "--from-literal=k=v")
    t.local.kubectl("annotate", "configmap", "private", "-n", t.ns, f"{c.ANNOTATION_SKIP_REFLECTION}=true")
    t.local.kubectl("create", "configmap", "public", "-n", t.ns, "--from-literal=k=v")
    t.until_remote("configmap", "public", lambda o: _ours(o, "configmaps"), "reflected")
    assert t.remote_obj("configmap", "private") is None

    t.local.kubectl("annotate", "configmap", "public", "-n", t.ns, f"{c.ANNOTATION_SKIP_REFLECTION}=true")
    t.until_remote_gone("configmap", "public")
    t.local.kubectl("annotate", "configmap", "public", "-n", t.ns, f"{c.ANNOTATION_SKIP_REFLECTION}-")
    t.until_remote("configmap", "public", lambda o: _ours(o, "configmaps"), "reflected again")
    assert t.remote_obj("configmap", "private") is None


# --- remote Events -> local pod ---------------------------------------------------------------------------
def test_remote_events_of_an_offloaded_pod_show_on_the_local_pod(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "evented"},
                           "spec": {"containers": [{"name": "c", "image": IMAGE}]}})

    def copied_scheduled():
        return [e for e in t.local_events(reason="Scheduled", **{"involvedObject.name": "evented"})
                if (e.get("source") or {}).get("component") == "kube-offload-vkubelet"]

    events = t.wait(copied_scheduled, timeout=90, what="the remote scheduler's Scheduled event copied locally")
    pod = t.local.kubectl_json("get", "pod", "evented", "-n", t.ns)
    assert len(events) == 1
    event = events[0]
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert event["involvedObject"]["namespace"] == t.ns
    assert f"{t.twin}/evented" in event["message"]  # the remote scheduler's words: twin namespace, remote node
    assert event["type"] == "Normal" and event["count"] >= 1
    describe = t.local.kubectl("describe", "pod", "evented", "-n", t.ns).stdout
    assert f"Successfully assigned {t.twin}/evented" in describe
    # The enforcer's routine PodCreated on the ShadowPod is not copied (the vkubelet's own
    # offload Event says the same): written on the remote when the pod was created, before
    # the remote scheduler's Scheduled copied above, so a copy would be here by now.
    time.sleep(3)
    copies = [e for e in t.local_events(**{"involvedObject.name": "evented"})
              if (e.get("source") or {}).get("component") == "kube-offload-vkubelet"]
    reasons = sorted(e["reason"] for e in copies)
    assert "PodCreated" not in reasons, reasons
    # What the vkubelet writes per offloaded pod here: its offload Event (Offloaded, or the
    # HomeAPIUnavailable Warning in its place when no relay runs) and the copied Scheduled.
    assert len(reasons) == 2 and "Scheduled" in reasons and ({"Offloaded", "HomeAPIUnavailable"} & set(reasons)), reasons


# --- remote Events -> local Service / claim ---------------------------------------------------------------
def _remote_event(t, name: str, involved: dict, reason: str, message: str, type_: str = "Warning") -> None:
    """An Event about a remote copy, written as the provider's admin (as its service
    controller or a load-balancer provider would)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t.remote.apply({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": t.twin},
                    "involvedObject": {"apiVersion": "v1", "kind": involved["kind"], "namespace": t.twin,
                                       "name": involved["metadata"]["name"], "uid": involved["metadata"]["uid"]},
                    "type": type_, "reason": reason, "message": message, "count": 1,
                    "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "service-controller"}})


def test_remote_events_of_a_reflected_service_and_claim_show_masked_and_aggregated_on_the_local_objects(offload_env, local, t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                           "spec": {"selector": {"app": "lb"}, "ports": [{"port": 80}]}})
    # A claim without a class: the remote PV controller (the remote control plane's own
    # kube-controller-manager) says what it makes of it.
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "evented-claim"},
                           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    svc = t.until_remote("service", "lb", lambda o: _ours(o, "services"), "created")
    local_svc = t.local.kubectl_json("get", "service", "lb", "-n", t.ns)

    # Two failures that differ only in a provider address and node: one local Event.
    secret_ip, node = "198.51.100.23", "provider-worker-7"
    message = 'Error syncing load balancer: failed to ensure load balancer: backend {ip} on node "{node}" in {ns} unhealthy'
    _remote_event(t, "lb.first", svc, "SyncLoadBalancerFailed", message.format(ip=secret_ip, node=node, ns=t.twin))
    # About the provider's allocator only: never copied.
    _remote_event(t, "lb.internal", svc, "ClusterIPNotAllocated", f"Cluster IP {secret_ip} is not allocated; repairing")

    def copied(name: str, reason: str):
        return [e for e in t.local_events(reason=reason, **{"involvedObject.name": name})
                if (e.get("source") or {}).get("component") == "kube-offload-vkubelet"]

    [event] = t.wait(lambda: copied("lb", "SyncLoadBalancerFailed"), timeout=TIMEOUT,
                     what="the provider's SyncLoadBalancerFailed copied onto the local Service")
    assert event["type"] == "Warning" and event["count"] == 1
    assert event["involvedObject"]["uid"] == local_svc["metadata"]["uid"]
    assert event["involvedObject"]["kind"] == "Service" and event["involvedObject"]["namespace"] == t.ns
    assert event["message"] == ('Error syncing load balancer: failed to ensure load balancer: backend <provider address> '
                                f'on node "<provider node>" in {t.ns} unhealthy')
    _remote_event(t, "lb.second", svc, "SyncLoadBalancerFailed", message.format(ip="198.51.100.24", node="provider-worker-8", ns=t.twin))
    # Aggregated: the same local Event, its count updated (at most every 15 s), never a second one.
    [event] = t.wait(lambda: [e for e in copied("lb", "SyncLoadBalancerFailed") if e["count"] == 2] or None,
                     timeout=TIMEOUT, what="the second failure counted on the same local Event")
    assert len(copied("lb", "SyncLoadBalancerFailed")) == 1
    assert not copied("lb", "ClusterIPNotAllocated")

    describe = t.local.kubectl("describe", "service", "lb", "-n", t.ns).stdout
    assert "SyncLoadBalancerFailed" in describe and "kube-offload-vkubelet" in describe
    assert "(x2 over" in describe  # one line, counted
    assert secret_ip not in describe and node not in describe and t.twin not in describe

    # A restart finds the copy by its name and goes on counting on it (create meets
    # AlreadyExists, then a patch: the vkubelet may not read local Events).
    _restart_vkubelet(offload_env, local)
    _remote_event(t, "lb.third", svc, "SyncLoadBalancerFailed", message.format(ip="198.51.100.25", node="provider-worker-9", ns=t.twin))
    t.wait(lambda: [e for e in copied("lb", "SyncLoadBalancerFailed") if e["count"] == 3] or None,
           timeout=TIMEOUT, what="the third failure counted on the same local Event after a restart")
    assert len(copied("lb", "SyncLoadBalancerFailed")) == 1

    # The claim: whatever the remote PV controller said about it is on the local claim.
    claim_events = t.wait(lambda: [e for e in t.local_events(**{"involvedObject.name": "evented-claim"})
                                   if (e.get("source") or {}).get("component") == "kube-offload-vkubelet"],
                          timeout=90, what="the remote PV controller's Event copied onto the local claim")
    local_claim = t.local.kubectl_json("get", "pvc", "evented-claim", "-n", t.ns)
    assert all(e["involvedObject"]["uid"] == local_claim["metadata"]["uid"] for e in claim_events)
    assert all(e["metadata"]["annotations"][ANNOTATION_REMOTE_SOURCE] == "persistentvolume-controller" for e in claim_events)
    describe = t.local.kubectl("describe", "pvc", "evented-claim", "-n", t.ns).stdout
    assert claim_events[0]["reason"] in describe
    t.local.kubectl("delete", "service", "lb", "-n", t.ns)
    t.local.kubectl("delete", "pvc", "evented-claim", "-n", t.ns, "--wait=false")


# --- service-account tokens ----------------------------------------------------------------------------------
def test_offloaded_pod_gets_a_token_the_local_api_server_accepts(t):
    _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tokened"},
                           "spec": {"containers": [{"name": "c", "image": IMAGE}]}})
    secret = t.until_remote("secret", "kube-offload-token-tokened", lambda o: _ours(o, "serviceaccounts"), "token Secret")
    assert base64.b64decode(secret["data"]["namespace"]).decode() == t.ns
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert token.count(".") == 2  # a JWT

    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    answer = json.loads(t.local.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review)).stdout)
    status = answer["status"]
    assert status.get("authenticated") is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{t.ns}:default"
    pod = t.local.kubectl_json("get", "pod", "tokened", "-n", t.ns)
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]

    # The remote cluster does not know the token: it is the home cluster's.
    remote_answer = json.loads(t.remote.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review)).stdout)
    assert not remote_answer["status"].get("authenticated")


def test_offloaded_pod_mounts_the_reflected_token_secret(t):
    remote_pod = t.until_remote("pod", "tokened", lambda o: True, "the remote pod", timeout=90)
    spec = remote_pod["spec"]
    volume = next(v for v in spec.get("volumes") or [] if v["name"].startswith("kube-api-access-"))
    names = {(s.get("secret") or s.get("configMap") or {}).get("name") for s in volume["projected"]["sources"]}
    assert names == {"kube-offload-token-tokened", "kube-offload-root-ca.crt"}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert spec["automountServiceAccountToken"] is False


def test_token_secret_goes_with_its_pod(t):
    assert t.remote_obj("secret", "kube-offload-token-tokened") is not None
    t.local.kubectl("delete", "pod", "tokened", "-n", t.ns, "--wait=false")
    t.until_remote_gone("secret", "kube-offload-token-tokened", timeout=90)


def test_opted_out_pods_hold_no_home_token_and_remote_needs_the_grant(t):
    # kube-offload.io/api-server (docs/home-api.md): "disabled" runs the pod with no token
    # and mints none; "remote" asks for the provider's API, which the harness's Consumer
    # does not grant: the pod is not sent and is told why.
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": IMAGE}]}}
    _apply(t.local, t.ns, {**pod, "metadata": {"name": "home-twin"}})
    _apply(t.local, t.ns, {**pod, "metadata": {"name": "opted-out", "annotations": {c.ANNOTATION_API_SERVER: c.API_SERVER_DISABLED}}})
    _apply(t.local, t.ns, {**pod, "metadata": {"name": "asks-remote", "annotations": {c.ANNOTATION_API_SERVER: c.API_SERVER_REMOTE}}})
    remote_pod = t.until_remote("pod", "opted-out", lambda o: True, "the opted-out remote pod", timeout=90)
    spec = remote_pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert not [v for v in spec.get("volumes") or [] if v["name"].startswith("kube-api-access-")], spec.get("volumes")
    assert c.ANNOTATION_API_SERVER not in (remote_pod["metadata"].get("annotations") or {})
    # The home pod offloaded beside it got its token: the reflector has been through both.
    t.until_remote("secret", "kube-offload-token-home-twin", lambda o: _ours(o, "serviceaccounts"), "home pod's token Secret")
    assert t.remote_obj("secret", "kube-offload-token-opted-out") is None

    refused = t.wait(lambda: t.local_events(**{"involvedObject.name": "asks-remote", "reason": "ProviderPolicyRefused"}),
                     timeout=TIMEOUT, what="the remote-mode pod told the provider does not grant it")
    assert "remoteAPIAccess" in refused[0]["message"], refused[0]["message"]
    assert t.remote_obj("shadowpod", "asks-remote") is None
    for name in ("home-twin", "opted-out", "asks-remote"):
        t.local.kubectl("delete", "pod", name, "-n", t.ns, "--wait=false")


# --- restarts --------------------------------------------------------------------------------------------------
def test_restart_after_sigkill_converges(offload_env, local, t):
    for name in ("gone", "changed"):
        t.local.kubectl("create", "configmap", name, "-n", t.ns, f"--from-literal=k={name}")
    t.until_remote("configmap", "gone", lambda o: _ours(o, "configmaps"), "reflected")
    t.until_remote("configmap", "changed", lambda o: _ours(o, "configmaps"), "reflected")
    scheduled_before = [e["metadata"]["name"] for e in t.local_events(reason="Scheduled", **{"involvedObject.name": "evented"})]

    def while_down():
        t.local.kubectl("delete", "configmap", "gone", "-n", t.ns)
        t.local.kubectl("create", "configmap", "born", "-n", t.ns, "--from-literal=k=born")
        _patch(t.local, "configmap", t.ns, "changed", {"data": {"k": "after"}})
        _patch(t.remote, "configmap", t.twin, "public", {"data": {"k": "drifted"}})

    _restart_vkubelet(offload_env, local, kill=True, while_down=while_down)
    t.until_remote_gone("configmap", "gone")
    t.until_remote("configmap", "born", lambda o: _ours(o, "configmaps") and o["data"] == {"k": "born"}, "created after restart")
    t.until_remote("configmap", "changed", lambda o: o["data"] == {"k": "after"}, "updated after restart")
    t.until_remote("configmap", "public", lambda o: o["data"] == {"k": "v"}, "drift overwritten after restart")
    assert t.remote_obj("configmap", "private") is None
    # The copied Events are found again by name, not copied twice.
    time.sleep(3)
    scheduled_after = [e["metadata"]["name"] for e in t.local_events(reason="Scheduled", **{"involvedObject.name": "evented"})]
    assert sorted(scheduled_after) == sorted(scheduled_before)


def test_allow_list_mode_reflects_only_allowed_objects(offload_env, local, t):
    t.local.kubectl("create", "configmap", "allowed", "-n", t.ns, "--from-literal=k=v")
    t.local.kubectl("annotate", "configmap", "allowed", "-n", t.ns, f"{c.ANNOTATION_ALLOW_REFLECTION}=true")
    t.until_remote("configmap", "public", lambda o: _ours(o, "configmaps"), "reflected under the deny-list")
    try:
        _restart_vkubelet(offload_env, local, extra_args=["--reflect-configmaps-policy", "allow-list"])
        t.until_remote_gone("configmap", "public")  # not allowed: its copy goes
        t.until_remote("configmap", "allowed", lambda o: _ours(o, "configmaps"), "allowed one reflected")
        # The CA bundle is mounted implicitly by every token volume: reflected whatever the policy.
        assert _ours(t.remote_obj("configmap", "kube-offload-root-ca.crt"), "configmaps")
        # Other types keep their own (default) policy.
        t.local.kubectl("create", "secret", "generic", "unannotated", "-n", t.ns, "--from-literal=k=v")
        t.until_remote("secret", "unannotated", lambda o: _ours(o, "secrets"), "secret under the deny-list")
    finally:
        _restart_vkubelet(offload_env, local)  # as the harness started it, for later modules
    t.until_remote("configmap", "public", lambda o: _ours(o, "configmaps"), "reflected again under the deny-list")


def test_by_use_mode_exports_only_what_offloaded_pods_reference(offload_env, local, t):
    for name in ("used-by-pod", "used-by-none"):
        t.local.kubectl("create", "configmap", name, "-n", t.ns, f"--from-literal=k={name}")
    t.until_remote("configmap", "used-by-none", lambda o: _ours(o, "configmaps"), "reflected under the deny-list")
    try:
        _restart_vkubelet(offload_env, local, extra_args=["--reflect-configmaps-policy", "by-use"])
        # No pod uses either: both copies go (withdrawn by the restarted vkubelet).
        t.until_remote_gone("configmap", "used-by-none")
        t.until_remote_gone("configmap", "used-by-pod")
        # An optional reference is the one a pod would start without: its ShadowPod waits.
        _apply(t.local, t.ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"}, "spec": {
            "containers": [{"name": "c", "image": IMAGE,
                            "envFrom": [{"configMapRef": {"name": "used-by-pod", "optional": True}}]}]}})
        copy = t.until_remote("configmap", "used-by-pod", lambda o: _ours(o, "configmaps"), "exported for its pod")
        assert copy["data"] == {"k": "used-by-pod"}
        shadow = t.until_remote("shadowpod", "user", lambda o: True, "the pod's ShadowPod", timeout=90)
        assert copy["metadata"]["creationTimestamp"] <= shadow["metadata"]["creationTimestamp"]
        assert t.remote_obj("configmap", "used-by-none") is None  # no pod references it
        # The pod goes: what only it used is withdrawn.
        t.local.kubectl("delete", "pod", "user", "-n", t.ns, "--wait=false")
        t.until_remote_gone("configmap", "used-by-pod", timeout=90)
        assert get_or_none(t.local, "configmap", t.ns, "used-by-pod") is not None  # the local one stays
    finally:
        _restart_vkubelet(offload_env, local)  # as the harness started it, for later modules
    t.until_remote("configmap", "used-by-none", lambda o: _ours(o, "configmaps"), "reflected again under the deny-list")


def test_namespace_no_longer_offloaded_takes_its_reflections_along(t):
    t.local.kubectl("label", "namespace", t.ns, f"{c.LABEL_ENABLED}-")
    t.wait(lambda: get_or_none(t.remote, "namespace", "", t.twin) is None, timeout=90, what=f"twin {t.twin} deleted")
    assert get_or_none(t.local, "configmap", t.ns, "public") is not None  # the local side is untouched
