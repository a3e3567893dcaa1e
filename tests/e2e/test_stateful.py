"""Stateful offloading with the virtual storage class (docs/storage.md), end to end on the
shared loopback environment: real local and remote control planes, the real local
scheduler binding volumes (WaitForFirstConsumer), the real PV controllers binding claims,
and Rancher's local-path-provisioner as the real provisioner in both clusters (its helper
pods completed by the harness's kwok stage).

* a StatefulSet with volumeClaimTemplates of the virtual class in a ``Remote`` namespace:
  local claims Bound to stand-in volumes pinned to the virtual node, remote claims Bound
  by local-path-provisioner, remote pods Running;
* a remote pod deleted: the enforcer recreates it on the same remote claim;
* a local claim resized: the remote claim's request follows;
* physical nodes allowed and the virtual node cordoned: the pod waits (its volume's
  node affinity, said by kubectl describe) instead of moving, and goes back;
* scaled down and claims deleted: remote claims, remote volumes and stand-ins go;
* the same StatefulSet in a ``Local`` namespace: provisioned through the real local class.

The tests of one module run in file order on one StatefulSet.
"""

from __future__ import annotations

import json
import uuid

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from kube_offload_harness.storage import LOCAL_PATH_CLASS
from support.clusters import offloaded_namespace

LOCAL_ID = "local"
NODE = "kube-offload-remote-1"
STORAGE_NAMESPACE = "kube-offload"  # the harness's release namespace: the physical delegate's
IMAGE = "registry.k8s.io/pause:3.10"
REPLICAS = 3
# The scheduler's reason for nodes a pod's bound volume does not allow (VolumeBinding).
PV_AFFINITY_REASON = "didn't match PersistentVolume's node affinity"
TIMEOUT = 120  # provisioning goes through two PV controllers and helper pods on 2 busy cores


def _json(cluster: Cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def _items(cluster: Cluster, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
    args = ["get", kind] + (["-n", namespace] if namespace else []) + (["-l", selector] if selector else [])
    return _json(cluster, *args).get("items", [])


def _statefulset(namespace: str, replicas: int = REPLICAS) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            # Parallel: the three pods are scheduled (and their claims provisioned) at once.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "containers": [{
                        "name": "db", "image": IMAGE,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "storageClassName": c.DEFAULT_VIRTUAL_STORAGE_CLASS,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }],
        },
    }


def _namespace(local: Cluster, placement: str) -> str:
    name = f"stateful-{placement.lower()}-{uuid.uuid4().hex[:5]}"
    offloaded_namespace(local, name, placement)
    return name


def _claim_names(replicas: int = REPLICAS) -> list[str]:
    return [f"data-db-{i}" for i in range(replicas)]


def _bound(claims: list[dict], names: list[str]) -> dict[str, dict] | None:
    by_name = {claim["metadata"]["name"]: claim for claim in claims}
    if all((by_name.get(name) or {}).get("status", {}).get("phase") == "Bound" for name in names):
        return {name: by_name[name] for name in names}
    return None


@pytest.fixture(scope="module")
def remote_ns(local: Cluster, remote: Cluster, wait) -> str:
    namespace = _namespace(local, c.PLACEMENT_REMOTE)
    twin = f"{namespace}-{LOCAL_ID}"
    wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0,
         timeout=60, what=f"twin namespace {twin}")
    local.apply(_statefulset(namespace))
    yield namespace
    local.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_statefulset_runs_remotely_with_its_volumes(local: Cluster, remote: Cluster, remote_ns: str, wait) -> None:
    twin = f"{remote_ns}-{LOCAL_ID}"
    names = _claim_names()
    local_claims = wait(lambda: _bound(_items(local, "pvc", remote_ns), names), timeout=TIMEOUT,
                        what="3 local claims Bound")
    remote_claims = wait(lambda: _bound(_items(remote, "pvc", twin), names), timeout=TIMEOUT,
                         what="3 remote claims Bound by local-path-provisioner")
    for name in names:
        # The local claim is bound to a stand-in for the remote one, pinned to the virtual node.
        volume = _json(local, "get", "pv", local_claims[name]["spec"]["volumeName"])
        labels = volume["metadata"]["labels"]
        assert labels[c.LABEL_VOLUME_LOCATION] == c.VOLUME_LOCATION_REMOTE and labels[c.LABEL_CLUSTER_ID] == "remote-1"
        assert volume["metadata"]["annotations"][c.ANNOTATION_REMOTE_CLAIM] == f"{twin}/{name}"
        assert volume["spec"]["csi"]["driver"] == c.REMOTE_VOLUME_CSI_DRIVER
        assert volume["spec"]["storageClassName"] == c.DEFAULT_VIRTUAL_STORAGE_CLASS
        [term] = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]} in term["matchExpressions"]
        # The remote claim: ours, of the remote default class, bound by the real provisioner.
        remote_claim = remote_claims[name]
        assert remote_claim["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID
        assert remote_claim["spec"]["storageClassName"] == LOCAL_PATH_CLASS
        remote_volume = _json(remote, "get", "pv", remote_claim["spec"]["volumeName"])
        assert remote_volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"

    def remote_pods_running():
        pods = [p for p in _items(remote, "pods", twin) if p["metadata"]["name"] in {f"db-{i}" for i in range(REPLICAS)}]
        return pods if len(pods) == REPLICAS and all(p["status"].get("phase") == "Running" for p in pods) else None

    remote_pods = wait(remote_pods_running, timeout=TIMEOUT, what="3 remote pods Running")
    for pod in remote_pods:
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v.get("persistentVolumeClaim")]
        assert claims == [f"data-{pod['metadata']['name']}"]
    local_pods = wait(lambda: (lambda ps: ps if len(ps) == REPLICAS and all(p["status"].get("phase") == "Running" for p in ps) else None)(
        _items(local, "pods", remote_ns, "app=db")), timeout=TIMEOUT, what="3 local pods Running")
    assert {p["spec"]["nodeName"] for p in local_pods} == {NODE}
    # kubectl describe says where the claim's data lives and why its pods go there only.
    described = local.kubectl("describe", "pvc", "data-db-0", "-n", remote_ns).stdout
    assert f"stands for claim {twin}/data-db-0 in cluster remote-1" in described
    assert f"pods using this claim run on {NODE} only" in described
    assert NODE in local.kubectl("describe", "pv", local_claims["data-db-0"]["spec"]["volumeName"]).stdout


def test_a_recreated_remote_pod_reattaches_the_same_remote_claim(remote: Cluster, remote_ns: str, wait) -> None:
    twin = f"{remote_ns}-{LOCAL_ID}"
    before_claim = _json(remote, "get", "pvc", "data-db-0", "-n", twin)
    before_pod = _json(remote, "get", "pod", "db-0", "-n", twin)
    remote.kubectl("delete", "pod", "db-0", "-n", twin, "--wait=false")

    def recreated():
        result = remote.kubectl("get", "pod", "db-0", "-n", twin, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        pod = json.loads(result.stdout)
        fresh = pod["metadata"]["uid"] != before_pod["metadata"]["uid"] and not pod["metadata"].get("deletionTimestamp")
        return pod if fresh and pod["status"].get("phase") == "Running" else None

    pod = wait(recreated, timeout=TIMEOUT, what="remote pod db-0 recreated by the enforcer and Running")
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v.get("persistentVolumeClaim")] == ["data-db-0"]
    after_claim = _json(remote, "get", "pvc", "data-db-0", "-n", twin)
    # The same claim, on the same volume: the data survives.
    assert after_claim["metadata"]["uid"] == before_claim["metadata"]["uid"]
    assert after_claim["spec"]["volumeName"] == before_claim["spec"]["volumeName"]


def test_resizing_the_local_claim_resizes_the_remote_one(local: Cluster, remote: Cluster, remote_ns: str, wait) -> None:
    twin = f"{remote_ns}-{LOCAL_ID}"
    local.kubectl("patch", "pvc", "data-db-1", "-n", remote_ns, "--type", "merge",
                  "-p", json.dumps({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}))
    wait(lambda: _json(remote, "get", "pvc", "data-db-1", "-n", twin)["spec"]["resources"]["requests"]["storage"] == "2Gi",
         timeout=60, what="remote claim data-db-1 asking for 2Gi")


class _NotYet(str):
    """A falsy answer for ``wait`` that still says what it saw (shown when it times out)."""

    def __bool__(self) -> bool:
        return False


def _allows_physical_nodes(local: Cluster, namespace: str) -> bool:
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"containers": [{"name": "probe", "image": IMAGE}]}}
    pod = json.loads(local.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe)).stdout)
    required = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(e.get("operator") == "NotIn" for t in terms for e in t.get("matchExpressions") or [])


def test_a_claim_never_moves_to_another_node(local: Cluster, remote: Cluster, remote_ns: str, wait) -> None:
    """Physical nodes allowed too and the virtual node cordoned: the replacement of a pod
    whose claim lives in remote-1 stays Pending, and kubectl describe says why; back on
    the virtual node once it is schedulable again, on the same remote claim."""
    twin = f"{remote_ns}-{LOCAL_ID}"
    remote_claim_uid = _json(remote, "get", "pvc", "data-db-0", "-n", twin)["metadata"]["uid"]
    old_uid = _json(local, "get", "pod", "db-0", "-n", remote_ns)["metadata"]["uid"]
    local.kubectl("label", "namespace", remote_ns, f"{c.LABEL_POD_PLACEMENT}={c.PLACEMENT_LOCAL_AND_REMOTE}", "--overwrite")
    # The webhook reads the policy from its cache: a server-side dry run says when it
    # lets pods of the namespace go to physical nodes too.
    wait(lambda: _allows_physical_nodes(local, remote_ns), timeout=30, what="the webhook applying LocalAndRemote")
    local.kubectl("cordon", NODE)
    try:
        local.kubectl("delete", "pod", "db-0", "-n", remote_ns, "--wait=false")

        def pending_replacement():
            result = local.kubectl("get", "pod", "db-0", "-n", remote_ns, "-o", "json", check=False)
            if result.returncode != 0:
                return None
            pod = json.loads(result.stdout)
            if pod["metadata"]["uid"] == old_uid:
                return None
            scheduled = [cond for cond in pod["status"].get("conditions") or [] if cond["type"] == "PodScheduled"]
            message = scheduled[0].get("message", "") if scheduled else ""
            return pod if PV_AFFINITY_REASON in message else _NotYet(f"{pod['spec'].get('nodeName')}: {message}")

        pod = wait(pending_replacement, timeout=TIMEOUT, what="the replacement of db-0 Pending on its volume's node affinity")
        assert not pod["spec"].get("nodeName")
        described = local.kubectl("describe", "pod", "db-0", "-n", remote_ns).stdout
        assert PV_AFFINITY_REASON in described and "were unschedulable" in described
    finally:
        local.kubectl("uncordon", NODE, check=False)
        local.kubectl("label", "namespace", remote_ns, f"{c.LABEL_POD_PLACEMENT}={c.PLACEMENT_REMOTE}", "--overwrite", check=False)

    def running_remotely():
        result = remote.kubectl("get", "pod", "db-0", "-n", twin, "-o", "json", check=False)
        pod = json.loads(result.stdout) if result.returncode == 0 else {}
        return pod if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp") else None

    wait(lambda: _json(local, "get", "pod", "db-0", "-n", remote_ns)["spec"].get("nodeName") == NODE,
         timeout=TIMEOUT, what="db-0 back on the virtual node")
    wait(running_remotely, timeout=TIMEOUT, what="remote db-0 Running again")
    assert _json(remote, "get", "pvc", "data-db-0", "-n", twin)["metadata"]["uid"] == remote_claim_uid


def test_scaling_down_and_deleting_the_claims_removes_the_remote_ones(
    local: Cluster, remote: Cluster, remote_ns: str, wait
) -> None:
    twin = f"{remote_ns}-{LOCAL_ID}"
    names = _claim_names()
    standins = {c_["spec"]["volumeName"] for c_ in _items(local, "pvc", remote_ns)}
    remote_volumes = {c_["spec"]["volumeName"] for c_ in _items(remote, "pvc", twin)}
    assert len(standins) == len(remote_volumes) == REPLICAS
    local.kubectl("scale", "statefulset", "db", "-n", remote_ns, "--replicas=0")
    wait(lambda: not _items(local, "pods", remote_ns, "app=db"), timeout=TIMEOUT, what="local pods gone")
    wait(lambda: not [p for p in _items(remote, "pods", twin) if p["metadata"]["name"].startswith("db-")],
         timeout=TIMEOUT, what="remote pods gone")
    local.kubectl("delete", "pvc", "-n", remote_ns, *names, "--wait=false")
    wait(lambda: not [p for p in _items(remote, "pvc", twin) if p["metadata"]["name"] in names],
         timeout=TIMEOUT, what="remote claims deleted")
    wait(lambda: not standins & {v["metadata"]["name"] for v in _items(local, "pv")},
         timeout=TIMEOUT, what="local stand-in volumes deleted (reclaim policy Delete)")
    wait(lambda: not remote_volumes & {v["metadata"]["name"] for v in _items(remote, "pv")},
         timeout=TIMEOUT, what="remote volumes deleted by local-path-provisioner (its class: Delete)")


def test_the_same_statefulset_in_a_local_namespace_uses_the_real_local_class(local: Cluster, remote: Cluster, wait) -> None:
    namespace = _namespace(local, c.PLACEMENT_LOCAL)
    replicas = 2
    names = _claim_names(replicas)
    try:
        local.apply(_statefulset(namespace, replicas))
        claims = wait(lambda: _bound(_items(local, "pvc", namespace), names), timeout=TIMEOUT,
                      what="local claims Bound through the real local class")
        pods = wait(lambda: (lambda ps: ps if len(ps) == replicas and all(p["status"].get("phase") == "Running" for p in ps) else None)(
            _items(local, "pods", namespace, "app=db")), timeout=TIMEOUT, what="pods Running on physical nodes")
        assert not {p["spec"]["nodeName"] for p in pods} & {NODE}
        for name in names:
            claim = claims[name]
            volume = _json(local, "get", "pv", claim["spec"]["volumeName"])
            assert volume["metadata"]["labels"][c.LABEL_VOLUME_LOCATION] == c.VOLUME_LOCATION_LOCAL
            real_ns, real_name = volume["metadata"]["annotations"][c.ANNOTATION_REAL_CLAIM].split("/")
            assert (real_ns, real_name) == (STORAGE_NAMESPACE, claim["metadata"]["uid"])
            real = _json(local, "get", "pvc", real_name, "-n", real_ns)
            assert real["spec"]["storageClassName"] == LOCAL_PATH_CLASS and real["status"]["phase"] == "Bound"
            real_volume = _json(local, "get", "pv", real["spec"]["volumeName"])
            # The stand-in mounts the real volume's storage, on the nodes it allows only.
            assert real_volume["spec"].get("hostPath") == volume["spec"].get("hostPath") is not None
            [term] = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            assert {"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]} in term["matchExpressions"]
        # A Local namespace is still extended to the remote cluster (service offloading),
        # but a claim of the virtual class lives where its pod was scheduled: not there.
        twin = f"{namespace}-{LOCAL_ID}"
        wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0,
             timeout=60, what=f"twin namespace {twin} (service offloading)")
        assert remote.kubectl("get", "pvc", "-n", twin, "-o", "name").stdout.split() == []
        real_names = {claims[n]["metadata"]["uid"] for n in names}
        local.kubectl("scale", "statefulset", "db", "-n", namespace, "--replicas=0")
        wait(lambda: not _items(local, "pods", namespace, "app=db"), timeout=TIMEOUT, what="pods gone")
        local.kubectl("delete", "pvc", "-n", namespace, *names, "--wait=false")
        wait(lambda: not real_names & {p["metadata"]["name"] for p in _items(local, "pvc", STORAGE_NAMESPACE)},
             timeout=TIMEOUT, what="the real claims deleted with the user's claims")
    finally:
        local.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
