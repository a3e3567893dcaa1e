"""Issue 24 item 1, the provider's half of resource slices, end to end (docs/slices.md): a
consumer writes OffloadSlices and ShadowPods with its own chart-made identity; the enforcer,
under its chart identity, accepts, partly accepts (quota) or refuses (unknown pool) each
slice, admits a slice's pods only within what it accepted, and puts them on the pool's
nodes with the pool's patch (node selector, tolerations, runtime class).

A consumer of its own (``e2e-slices``) is admitted through the chart, as
test_provider_policy_quota does, so the session consumer is left alone. The pool is one
remote kwok node labelled for the test (the label is removed at the end); the pools and the
quota are set by patching the Consumer, as a provider's admin would. Tests run in file order.

Issue 37 item 4: a slice bounds every resource its pods request (one it did not ask for
counts as 0: a "pods: 1" slice of the GPU pool gives no GPU), and a ShadowPod keeps the pool
its first pod was made on when the consumer points its slice at another pool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import find, patch_consumer, twin_status

CONSUMER = "e2e-slices"
TENANT = c.tenant_namespace(CONSUMER)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
SLICE_KIND = f"{c.SLICE_PLURAL}.{c.DOMAIN}"
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
SHADOWPOD_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"
POOL_LABEL = "e2e.kube-offload.io/slice-pool"
RUNTIME_CLASS = "e2e-slices"
POOL_TOLERATION = {"key": "e2e.kube-offload.io/accelerator", "operator": "Exists", "effect": "NoSchedule"}
SERVE_SECONDS = 90


def offload_slice(name: str, pool: str, **resources: str) -> dict[str, Any]:
    return {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.SLICE_KIND,
            "metadata": {"name": name, "namespace": TENANT}, "spec": {"pool": pool, "resources": resources}}


def shadowpod(name: str, slice_name: str | None, *, cpu: str = "100m", **pod_spec: Any) -> dict[str, Any]:
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}
    labels = {**origin, **({c.LABEL_SLICE: slice_name} if slice_name else {})}
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "labels": labels},
        "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}},
                         "spec": {"containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "Always",
                                                  # cpu only: a slice bounds every resource its pods
                                                  # request, and these slices ask for cpu (and pods)
                                                  "resources": {"requests": {"cpu": cpu}}}],
                                  "terminationGracePeriodSeconds": 1, **pod_spec}}},
    }


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The chart-made identity of consumer e2e-slices (its own Consumer, tenant, token)."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(CONSUMER, node_labels={}))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(CONSUMER))


@pytest.fixture(scope="module")
def pool_node(remote: Cluster) -> Iterator[str]:
    """One remote (kwok) node labelled as pool "gpu", and the RuntimeClass the pool sets."""
    nodes = json.loads(remote.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    [name, *_] = sorted(n["metadata"]["name"] for n in nodes
                        if (n["metadata"].get("labels") or {}).get(c.LABEL_TYPE) != c.TYPE_VIRTUAL_NODE)
    remote.kubectl("label", "node", name, f"{POOL_LABEL}=gpu", "--overwrite")
    remote.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS}, "handler": "runc"}))
    yield name
    remote.kubectl("label", "node", name, f"{POOL_LABEL}-", check=False)
    remote.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def pools(remote: Cluster, consumer: Path, pool_node: str) -> Iterator[None]:
    patch_consumer(remote, CONSUMER, {
        "quota": {"cpu": "2", "pods": "10"},
        "pools": [{"name": "gpu", "description": "the test's pool", "nodeSelector": {POOL_LABEL: "gpu"},
                   "tolerations": [POOL_TOLERATION], "runtimeClassName": RUNTIME_CLASS,
                   "nodeLabels": {"e2e.kube-offload.io/accelerator": "test"}}],
    })
    yield
    remote.kubectl("delete", SLICE_KIND, "--all", "-n", TENANT, "--wait=false", check=False)
    patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA), "pools": None})


@pytest.fixture(scope="module")
def twin(remote: Cluster, consumer: Path, pools: None, wait) -> Iterator[str]:
    name = f"{unique('s')}-{CONSUMER}"
    request = {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.TWIN_NAMESPACE_KIND,
               "metadata": {"name": name, "namespace": TENANT}, "spec": {"localNamespace": name}}
    made = remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(request))
    assert made.returncode == 0, made.stderr
    wait(lambda: twin_status(remote, CONSUMER, name).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS,
         what=f"twin {name} Ready")
    yield name
    remote.kubectl("delete", TWIN_KIND, "--all", "-n", TENANT, "--wait=true", "--timeout=120s", check=False, timeout=150)


def slice_status(remote: Cluster, name: str) -> dict[str, Any]:
    obj = find(remote, SLICE_KIND, name, "-n", TENANT) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def decided(remote: Cluster, name: str, wait) -> dict[str, Any]:
    wait(lambda: slice_status(remote, name).get("phase") not in (None, c.SLICE_PHASE_PENDING), timeout=SERVE_SECONDS,
         what=f"OffloadSlice {name} decided")
    return slice_status(remote, name)


def create(remote: Cluster, consumer: Path, obj: dict[str, Any], namespace: str = TENANT) -> Any:
    return remote.kubectl_as(consumer, "create", "-n", namespace, "-f", "-", input=json.dumps(obj))


# --- how slices are decided ----------------------------------------------------------------------
def test_slices_are_accepted_partly_accepted_under_the_quota_or_refused(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    made = create(remote, consumer, offload_slice("train", "gpu", cpu="1", pods="3"))
    assert made.returncode == 0, made.stderr
    train = decided(remote, "train", wait)
    assert train["phase"] == c.SLICE_PHASE_ACCEPTED, train
    assert train["accepted"] == {"cpu": "1", "pods": "3"}
    assert train["nodeLabels"] == {"e2e.kube-offload.io/accelerator": "test"}

    # Created later: gets what the quota leaves (2 - 1 cpu), never shrinking "train".
    made = create(remote, consumer, offload_slice("big", "gpu", cpu="5"))
    assert made.returncode == 0, made.stderr
    big = decided(remote, "big", wait)
    assert big["phase"] == c.SLICE_PHASE_PARTIAL and big["reason"] == "QuotaExceeded", big
    assert big["accepted"] == {"cpu": "1"}
    assert big["message"] == "cpu: asked 5, accepted 1: quota cpu leaves 1 (Consumer spec.quota)"
    assert slice_status(remote, "train")["accepted"] == {"cpu": "1", "pods": "3"}

    made = create(remote, consumer, offload_slice("nowhere", "fpga", cpu="1"))
    assert made.returncode == 0, made.stderr
    nowhere = decided(remote, "nowhere", wait)
    assert nowhere["phase"] == c.SLICE_PHASE_REFUSED and nowhere["reason"] == "UnknownPool"
    assert "no pool 'fpga' for this consumer (pools: gpu)" in nowhere["message"]
    # Every pass since (each write's echo, then "nowhere") kept the order, though "train"
    # and "big" may share a creationTimestamp second: their firstDecided stamps order them.
    train, big = slice_status(remote, "train"), slice_status(remote, "big")
    assert (train["accepted"], big["accepted"]) == ({"cpu": "1", "pods": "3"}, {"cpu": "1"}), (train, big)
    assert train["firstDecided"] < big["firstDecided"], (train, big)


def test_the_consumer_cannot_write_a_slices_status(remote: Cluster, consumer: Path, twin: str) -> None:
    forged = remote.kubectl_as(consumer, "patch", SLICE_KIND, "nowhere", "-n", TENANT, "--subresource=status",
                               "--type=merge", "-p", json.dumps({"status": {"phase": "Accepted", "accepted": {"cpu": "64"}}}))
    assert forged.returncode != 0 and "forbidden" in forged.stderr.lower(), forged.stderr
    assert slice_status(remote, "nowhere")["phase"] == c.SLICE_PHASE_REFUSED


# --- admission and the pool's patch ----------------------------------------------------------------
def test_a_slices_pod_lands_on_the_pool_with_the_pools_patch(remote: Cluster, consumer: Path, twin: str, pool_node: str,
                                                                 wait) -> None:
    made = create(remote, consumer, shadowpod("trainer", "train", cpu="500m"), twin)
    assert made.returncode == 0, made.stderr

    def node_name() -> str | None:
        return str(((find(remote, "pod", "trainer", "-n", twin) or {}).get("spec") or {}).get("nodeName") or "") or None

    wait(node_name, timeout=SERVE_SECONDS, what="the slice's pod scheduled")
    assert node_name() == pool_node  # the only node of the pool
    spec = (find(remote, "pod", "trainer", "-n", twin) or {})["spec"]
    assert spec["nodeSelector"] == {POOL_LABEL: "gpu"}
    assert POOL_TOLERATION in spec["tolerations"]
    assert spec["runtimeClassName"] == RUNTIME_CLASS


def test_a_pod_beyond_the_slice_is_refused(remote: Cluster, consumer: Path, twin: str) -> None:
    over = create(remote, consumer, shadowpod("overflow", "train", cpu="600m"), twin)
    assert over.returncode != 0 and DENIED in over.stderr, over.stderr
    assert f'exceeded OffloadSlice "train" in namespace "{TENANT}": cpu: requested 600m, used 500m, accepted 1' in over.stderr


def test_a_pod_of_a_slice_not_accepted_is_refused(remote: Cluster, consumer: Path, twin: str) -> None:
    refused = create(remote, consumer, shadowpod("lost", "nowhere"), twin)
    assert refused.returncode != 0 and DENIED in refused.stderr, refused.stderr
    assert f"metadata.labels[{c.LABEL_SLICE}]='nowhere'" in refused.stderr
    assert "is Refused, not Accepted or PartiallyAccepted" in refused.stderr
    missing = create(remote, consumer, shadowpod("ghost", "no-such-slice"), twin)
    assert missing.returncode != 0 and 'there is no OffloadSlice "no-such-slice"' in missing.stderr, missing.stderr


def test_a_field_against_the_pools_patch_and_a_relabel_are_refused(remote: Cluster, consumer: Path, twin: str) -> None:
    against = create(remote, consumer, shadowpod("against", "big", nodeSelector={POOL_LABEL: "cpu"}), twin)
    assert against.returncode != 0 and DENIED in against.stderr, against.stderr
    assert f"spec.pod.spec.nodeSelector[{POOL_LABEL}]='cpu' conflicts with pool 'gpu'" in against.stderr
    relabel = remote.kubectl_as(consumer, "label", SHADOWPOD_KIND, "trainer", "-n", twin, f"{c.LABEL_SLICE}=big", "--overwrite")
    assert relabel.returncode != 0 and f"metadata.labels[{c.LABEL_SLICE}]: immutable ('train' -> 'big')" in relabel.stderr, \
        relabel.stderr


# --- issue 37 item 4: every resource, and the pool a pod was made on ---------------------------------
def test_a_slice_bounds_every_resource_its_pods_request(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    """A "pods: 1" slice of the gpu pool: its pod gets the pool's toleration (the pool's
    patch), never a GPU the slice did not ask for. Before, only the resources listed in
    status.accepted were bounded, so any number of GPUs passed."""
    made = create(remote, consumer, offload_slice("tiny", "gpu", pods="1"))
    assert made.returncode == 0, made.stderr
    assert decided(remote, "tiny", wait)["accepted"] == {"pods": "1"}
    gpu = {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    greedy = shadowpod("greedy", "tiny")
    greedy["spec"]["pod"]["spec"]["containers"][0]["resources"] = gpu
    try:
        refused = create(remote, consumer, greedy, twin)
        assert refused.returncode != 0, "a pod of a 'pods: 1' slice took 4 GPUs the slice never asked for"
        assert DENIED in refused.stderr, refused.stderr
        assert "nvidia.com/gpu: requested 4, used 0, accepted 0 (the slice did not ask for it" in refused.stderr
    finally:
        remote.kubectl("delete", SHADOWPOD_KIND, "greedy", "-n", twin, "--ignore-not-found", "--wait=false", check=False)


def test_a_pod_keeps_the_pool_it_was_first_made_on(remote: Cluster, consumer: Path, twin: str, pool_node: str,
                                                   wait) -> None:
    """The consumer moves its slice from the gpu pool to another after its pod ran; the pod
    is then lost (evicted, say: what the consumer can bring about). Before, the enforcer made
    the next pod on the slice's new pool; now it makes none while the slice names another
    pool than the one its first pod was made on, and makes it again, there, once it does."""
    nodes = json.loads(remote.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    other = sorted(n["metadata"]["name"] for n in nodes
                   if (n["metadata"].get("labels") or {}).get(c.LABEL_TYPE) != c.TYPE_VIRTUAL_NODE and n["metadata"]["name"] != pool_node)[0]
    remote.kubectl("label", "node", other, f"{POOL_LABEL}=cpu", "--overwrite")
    consumer_obj = remote.kubectl_json("get", f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER)
    pools = consumer_obj["spec"]["pools"]
    # Room in the quota once the earlier slices ("big" asks 5 cpu) took theirs.
    patch_consumer(remote, CONSUMER, {"quota": {"cpu": "10", "pods": "20"},
                                      "pools": [*pools, {"name": "cpu", "nodeSelector": {POOL_LABEL: "cpu"}}]})
    # The earlier test's "big" took what the gpu pool's node had left: it goes.
    remote.kubectl("delete", SLICE_KIND, "big", "-n", TENANT, "--ignore-not-found", "--wait=true", check=False)
    try:
        made = create(remote, consumer, offload_slice("mover", "gpu", cpu="1", pods="2"))
        assert made.returncode == 0, made.stderr
        assert decided(remote, "mover", wait)["phase"] == c.SLICE_PHASE_ACCEPTED
        made = create(remote, consumer, shadowpod("keeper", "mover", cpu="100m"), twin)
        assert made.returncode == 0, made.stderr
        pod = wait(lambda: (p := find(remote, "pod", "keeper", "-n", twin)) and (p.get("spec") or {}).get("nodeName") and p,
                   timeout=SERVE_SECONDS, what="the slice's pod scheduled")
        assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "gpu"}
        assert pod["metadata"]["annotations"][c.ANNOTATION_SLICE_POOL] == "gpu"
        wait(lambda: ((find(remote, SHADOWPOD_KIND, "keeper", "-n", twin) or {}).get("status") or {}).get("slicePool") == "gpu",
             timeout=SERVE_SECONDS, what="the ShadowPod's status recording the pool")

        def repoint(pool: str) -> None:
            """The consumer points its slice at ``pool`` (its Role may update its slices)."""
            current = json.loads(remote.kubectl_as(consumer, "get", SLICE_KIND, "mover", "-n", TENANT, "-o", "json").stdout)
            current["spec"]["pool"] = pool
            replaced = remote.kubectl_as(consumer, "replace", "-f", "-", input=json.dumps(current))
            assert replaced.returncode == 0, replaced.stderr

        # The consumer points the slice at the cpu pool, the provider accepts it there, and
        # the pod is lost.
        repoint("cpu")
        wait(lambda: (s := slice_status(remote, "mover")).get("phase") == c.SLICE_PHASE_ACCEPTED
             and s.get("observedGeneration") == (find(remote, SLICE_KIND, "mover", "-n", TENANT) or {})["metadata"]["generation"],
             timeout=SERVE_SECONDS, what="the slice accepted on its new pool")
        uid = pod["metadata"]["uid"]
        remote.kubectl("delete", "pod", "keeper", "-n", twin, "--wait=true", "--timeout=60s")
        message = wait(lambda: "made on pool 'gpu'" in (m := ((find(remote, SHADOWPOD_KIND, "keeper", "-n", twin) or {})
                                                             .get("status") or {}).get("message", "")) and m,
                       timeout=SERVE_SECONDS, what="the recreation refused: the slice names another pool")
        assert "now names pool 'cpu'" in message, message
        again = find(remote, "pod", "keeper", "-n", twin)
        assert again is None or again["metadata"]["uid"] == uid, f"the pod came back on another pool: {again['spec']}"

        # The slice names the gpu pool again: the pod is made again, on that pool.
        repoint("gpu")
        remade = wait(lambda: (p := find(remote, "pod", "keeper", "-n", twin)) and p["metadata"]["uid"] != uid and p,
                      timeout=SERVE_SECONDS, what="the pod made again on its own pool")
        assert remade["spec"]["nodeSelector"] == {POOL_LABEL: "gpu"}
    finally:
        remote.kubectl("delete", SHADOWPOD_KIND, "keeper", "-n", twin, "--ignore-not-found", "--wait=true", "--timeout=60s",
                       check=False)
        remote.kubectl("delete", SLICE_KIND, "mover", "-n", TENANT, "--ignore-not-found", "--wait=false", check=False)
        remote.kubectl("label", "node", other, f"{POOL_LABEL}-", check=False)
        patch_consumer(remote, CONSUMER, {"quota": {"cpu": "2", "pods": "10"}, "pools": pools})
