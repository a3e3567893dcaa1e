"""Service offloading and pod IP remapping end to end, on the shared loopback environment
(conftest.py): a real local control plane and a real remote one, kwok simulating the
physical nodes of both, and the harness's ``kube-offload vkubelet`` started with the pod
IP remapping flags of ``kube_offload_harness.cluster.pod_ip_remapping_args``.

* ``kube-offload.io/pod-placement=Local`` keeps the pods on local physical nodes but still
  extends the namespace: its twin is requested and Ready in the selected remote cluster,
  and its Services and EndpointSlices are reflected there (docs/virtual-kubelet.md,
  "Service offloading").
* kwok hands out pod IPs from the same range in both clusters: offloaded pods are shown
  in the remote's external CIDR, each address mapping back to its remote pod's at the same
  offset, so they no longer collide with local pods; reflected EndpointSlices carry the
  local endpoints in the local CIDR as the remote cluster sees it (docs/virtual-kubelet.md,
  "Pod IP remapping").
"""

from __future__ import annotations

import ipaddress
import time

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import KWOK_POD_CIDR, LOCAL_POD_CIDR_REMAPPED, Cluster, remote_pod_cidr_remapped
from kube_offload_harness.naming import LOCAL_CLUSTER_ID, twin_namespace as twin, unique, virtual_node_name
from support.clusters import delete_namespace, deployment, get_or_none, offloaded_namespace

LOCAL_ID = LOCAL_CLUSTER_ID
REFLECTOR_LABEL = "kube-offload.io/reflector"
TIMEOUT = 90  # seconds; generous for a loaded 2-core machine


# --- helpers ------------------------------------------------------------------------------------
def twin_request(remote: Cluster, name: str) -> dict | None:
    return get_or_none(remote, f"{c.TWIN_NAMESPACE_PLURAL}.{c.SHADOWPOD_GROUP}", c.tenant_namespace(LOCAL_ID), name)


def items(cluster: Cluster, kind: str, namespace: str, selector: str | None = None) -> list[dict]:
    args = ["get", kind, "-n", namespace]
    if selector:
        args += ["-l", selector]
    return cluster.kubectl_json(*args)["items"]

def service(local: Cluster, namespace: str, name: str) -> None:
    local.apply({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })


def running_with_ip(pods: list[dict]) -> list[dict]:
    return [
        p for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
    ]


def reflected(obj: dict, reflector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == LOCAL_ID and labels.get(REFLECTOR_LABEL) == reflector


def moved(address: str, source: str, target: str) -> str:
    """``address`` of network ``source`` at the same offset in ``target`` (the test's own
    arithmetic, independent of vkubelet/shared/ip_remapping.py)."""
    src, dst = ipaddress.ip_network(source), ipaddress.ip_network(target)
    ip = ipaddress.ip_address(address)
    assert ip in src, f"{address} is not in {source}"
    return str(dst.network_address + (int(ip) - int(src.network_address)))


def slice_addresses(slices: list[dict]) -> set[str]:
    return {a for s in slices for e in s.get("endpoints") or [] for a in e.get("addresses") or []}


def ready_endpoint_addresses(slices: list[dict]) -> set[str]:
    return {
        a for s in slices for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready") for a in e.get("addresses") or []
    }


# --- pod-placement=Local: service offloading -------------------------------------------------------
@pytest.fixture(scope="module")
def local_ns(local, remote, wait):
    """A Local namespace with a 2-replica Deployment behind a Service, running locally."""
    name = unique("svc-local")
    offloaded_namespace(local, name, c.PLACEMENT_LOCAL)
    deployment(local, name, "web", 2)
    service(local, name, "web")
    yield name
    delete_namespace(local, name)


def test_local_placement_gets_a_ready_twin_namespace(local, remote, local_ns, wait):
    request = wait(
        lambda: (r := twin_request(remote, twin(local_ns))) and (r.get("status") or {}).get("phase") == c.TWIN_PHASE_READY and r,
        timeout=TIMEOUT, what=f"TwinNamespace {twin(local_ns)} Ready in the remote cluster",
    )
    assert request["spec"]["localNamespace"] == local_ns
    assert request["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID
    twin_ns = get_or_none(remote, "namespace", "", twin(local_ns))
    assert twin_ns is not None and twin_ns["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID


def test_local_placement_pods_stay_home_and_none_runs_in_the_twin(local, remote, local_ns, wait):
    pods = wait(lambda: (ps := running_with_ip(items(local, "pods", local_ns))) and len(ps) == 2 and ps,
                timeout=TIMEOUT, what="2 local pods Running")
    assert all(p["spec"]["nodeName"] != virtual_node_name(remote.spec.cluster_id) for p in pods)
    # The webhook's Local term: never the virtual node.
    assert all(not any(t.get("key") == c.TAINT_KEY for t in p["spec"].get("tolerations") or []) for p in pods)
    wait(lambda: get_or_none(remote, "namespace", "", twin(local_ns)), timeout=TIMEOUT, what="the twin namespace")
    assert items(remote, "pods", twin(local_ns)) == []
    assert items(remote, f"{c.SHADOWPOD_PLURAL}.{c.SHADOWPOD_GROUP}", twin(local_ns)) == []


def test_local_placement_service_and_endpointslice_are_reflected_with_translated_endpoints(local, remote, local_ns, wait):
    remote_service = wait(lambda: (s := get_or_none(remote, "service", twin(local_ns), "web")) and reflected(s, "services") and s,
                          timeout=TIMEOUT, what=f"Service web reflected into {twin(local_ns)}")
    assert remote_service["spec"]["selector"] == {"app": "web"}
    assert remote_service["spec"]["ports"][0]["port"] == 80

    def local_endpoints() -> set[str]:
        slices = items(local, "endpointslices.discovery.k8s.io", local_ns, "kubernetes.io/service-name=web")
        addresses = ready_endpoint_addresses(slices)
        return addresses if len(addresses) == 2 else set()

    local_addresses = wait(local_endpoints, timeout=TIMEOUT, what="the local EndpointSlice with both local pods")
    # kwok's pods of both clusters come from the same range: this is what remapping is for.
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(KWOK_POD_CIDR) for a in local_addresses)
    expected = {moved(a, KWOK_POD_CIDR, LOCAL_POD_CIDR_REMAPPED) for a in local_addresses}

    def remote_endpoints() -> set[str]:
        slices = [s for s in items(remote, "endpointslices.discovery.k8s.io", twin(local_ns), "kubernetes.io/service-name=web")
                  if reflected(s, "endpointslices")]
        addresses = slice_addresses(slices)
        return addresses if addresses == expected else set()

    wait(remote_endpoints, timeout=TIMEOUT,
         what=f"the reflected EndpointSlice carrying {sorted(local_addresses)} as {sorted(expected)}")


def test_endpoint_addresses_outside_the_granted_range_are_left_out_and_the_local_slice_says_so(local, remote, local_ns, wait):
    # An address outside --local-pod-cidr is not remapped, so it is outside the range the
    # provider grants us too (harness identities.E2E_POLICY: the remapped pod range).
    local.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": local_ns},
                 "spec": {"ports": [{"port": 5432}]}})  # no selector: the endpoints are the user's
    local.apply({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "db-1", "namespace": local_ns,
                     "labels": {"kubernetes.io/service-name": "db", "endpointslice.kubernetes.io/managed-by": "e2e"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.7.7"], "conditions": {"ready": True}},
            {"addresses": ["10.244.7.7"], "conditions": {"ready": True}},  # not a local pod address
        ],
        "ports": [{"port": 5432, "protocol": "TCP"}],
    })
    remote_slice = wait(lambda: (s := get_or_none(remote, "endpointslice", twin(local_ns), "db-1")) and reflected(s, "endpointslices") and s,
                        timeout=TIMEOUT, what="EndpointSlice db-1 reflected")
    assert [e["addresses"] for e in remote_slice["endpoints"]] == [["10.200.7.7"]]

    def told():
        items = local.kubectl_json("get", "events", "-n", local_ns)["items"]
        return [e for e in items if e["reason"] == "ProviderPolicyAdjusted"
                and e["involvedObject"].get("kind") == "EndpointSlice" and e["involvedObject"].get("name") == "db-1"]

    [event] = wait(told, timeout=TIMEOUT, what="a ProviderPolicyAdjusted Event on the local EndpointSlice")
    assert event["type"] == "Warning" and "Consumer spec.policy.endpoints.cidrs: 10.200.0.0/16" in event["message"]
    # The local slice is the user's and stays as written.
    assert [e["addresses"] for e in get_or_none(local, "endpointslice", local_ns, "db-1")["endpoints"]] == [["10.0.7.7"], ["10.244.7.7"]]


def test_local_placement_respects_the_cluster_selector(local, remote, wait):
    elsewhere = unique("svc-elsewhere")
    offloaded_namespace(local, elsewhere, c.PLACEMENT_LOCAL, selector=f"{c.LABEL_CLUSTER_ID}=some-other-cluster")
    selected = unique("svc-selected")
    offloaded_namespace(local, selected, c.PLACEMENT_LOCAL, selector=f"{c.LABEL_CLUSTER_ID}={remote.spec.cluster_id}")
    try:
        local.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": elsewhere},
                     "data": {"k": "v"}})
        # The selected one is extended; by then the other one would have been too.
        wait(lambda: twin_request(remote, twin(selected)), timeout=TIMEOUT, what=f"a twin requested for {selected}")
        time.sleep(3)
        assert twin_request(remote, twin(elsewhere)) is None
        assert get_or_none(remote, "namespace", "", twin(elsewhere)) is None
        # Moving the selector onto this cluster extends it.
        local.kubectl("annotate", "namespace", elsewhere, "--overwrite",
                      f"{c.ANNOTATION_CLUSTER_SELECTOR}={c.LABEL_CLUSTER_ID}={remote.spec.cluster_id}")
        wait(lambda: (cm := get_or_none(remote, "configmap", twin(elsewhere), "settings")) and reflected(cm, "configmaps"),
             timeout=TIMEOUT, what=f"ConfigMap settings reflected once {elsewhere} selects this cluster")
    finally:
        delete_namespace(local, elsewhere)
        delete_namespace(local, selected)


# --- pod IP remapping --------------------------------------------------------------------------------
def test_offloaded_pod_ips_are_in_the_external_cidr_and_map_back_to_the_remote_pods(offload_env, local, remote, local_ns, wait):
    external = remote_pod_cidr_remapped(offload_env.topology(), remote.spec)
    name = unique("ip-remote")
    offloaded_namespace(local, name, c.PLACEMENT_REMOTE)
    try:
        deployment(local, name, "app", 3)
        offloaded = wait(lambda: (ps := running_with_ip(items(local, "pods", name))) and len(ps) == 3 and ps,
                         timeout=TIMEOUT, what="3 offloaded pods Running with an IP")
        remote_pods = wait(lambda: (ps := running_with_ip(items(remote, "pods", twin(name)))) and len(ps) == 3 and ps,
                           timeout=TIMEOUT, what="3 remote pods Running with an IP")
        remote_ip = {p["metadata"]["name"]: p["status"]["podIP"] for p in remote_pods}

        def mirrored() -> list[dict]:
            current = running_with_ip(items(local, "pods", name))
            ok = len(current) == 3 and all(
                p["status"]["podIP"] == moved(remote_ip[p["metadata"]["name"]], KWOK_POD_CIDR, external) for p in current
            )
            return current if ok else []

        offloaded = wait(mirrored, timeout=TIMEOUT, what=f"offloaded pod IPs shown in {external}")
        for pod in offloaded:
            assert pod["spec"]["nodeName"] == virtual_node_name(remote.spec.cluster_id)
            ip = pod["status"]["podIP"]
            assert ipaddress.ip_address(ip) in ipaddress.ip_network(external)
            assert pod["status"]["podIPs"] == [{"ip": ip}]
            # Back at the same offset: the remote pod's own address, which the remote keeps.
            assert moved(ip, external, KWOK_POD_CIDR) == remote_ip[pod["metadata"]["name"]]
            assert pod["status"]["hostIP"] == "127.0.0.1"  # the virtual node's address, never remapped

        # Local pods (the Local namespace's, on kwok nodes) and offloaded pods no longer collide.
        local_pods = wait(lambda: (ps := running_with_ip(items(local, "pods", local_ns))) and len(ps) == 2 and ps,
                          timeout=TIMEOUT, what="the local pods Running")
        local_ips = {p["status"]["podIP"] for p in local_pods}
        assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(KWOK_POD_CIDR) for ip in local_ips)
        assert not local_ips & {p["status"]["podIP"] for p in offloaded}
        # Without remapping they would have: the remote cluster hands out the same range.
        assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(KWOK_POD_CIDR) for ip in remote_ip.values())
    finally:
        delete_namespace(local, name)
