"""Issue 37 item 4 and the bounds item 3 left, the provider side, end to end under the chart
identities: the provider judges the rest of the pod (its scheduler, where its images come
from), bounds every kind a consumer keeps in a twin, admits no consumer without a quota, and
no consumer can squat a future consumer's DefaultName twin. (Slices: test_slices_provider.py.)

A consumer of its own (``e2e-rest``) is admitted through the remote chart with the chart's
policy, i.e. the defaults (the session consumer's policy and quota are left alone), and asks
for a twin with a TwinNamespace; it writes ShadowPods and ConfigMaps with its own token,
straight to the provider's API server, as an attacker holding a virtual kubelet's
credentials would; the provider's admin patches its Consumer. Tests run in file order.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.identities import IdentityError
from kube_offload_harness.naming import unique
from support.clusters import ask_twin, find, patch_consumer, serve_twin, twin_status

CONSUMER = "e2e-rest"
TENANT = c.tenant_namespace(CONSUMER)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
SHADOWPOD_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
CONSUMER_KIND = f"{c.CONSUMER_PLURAL}.{c.DOMAIN}"
SERVE_SECONDS = 90
# The Consumer cache of the ShadowPod webhook follows a patch within a moment.
POLICY_SECONDS = 30


def shadowpod(name: str, **spec: Any) -> dict:
    pod_spec: dict[str, Any] = {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 1}
    pod_spec.update(spec)
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}
    return {"apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}", "kind": c.SHADOWPOD_KIND,
            "metadata": {"name": name, "labels": origin},
            "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}}, "spec": pod_spec}}}


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The chart-made identity of consumer e2e-rest, with the chart's (default) policy."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(CONSUMER, node_labels={}, policy=None))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(CONSUMER))


@pytest.fixture(scope="module")
def twin(remote: Cluster, consumer: Path) -> Iterator[str]:
    name = f"{unique('rest')}-{CONSUMER}"
    serve_twin(remote, consumer, CONSUMER, name, timeout=SERVE_SECONDS)
    yield name
    remote.kubectl("delete", TWIN_KIND, "--all", "-n", TENANT, "--wait=true", "--timeout=120s", check=False, timeout=150)
    patch_consumer(remote, CONSUMER, {"policy": None})


def create(remote: Cluster, consumer: Path, twin: str, obj: dict, *, dry_run: bool = False) -> subprocess.CompletedProcess:
    extra = ["--dry-run=server"] if dry_run else []
    return remote.kubectl_as(consumer, "create", "-n", twin, *extra, "-f", "-", input=json.dumps(obj))


def until_refused(remote: Cluster, consumer: Path, twin: str, obj: dict) -> subprocess.CompletedProcess:
    """A dry-run create, asked again until refused (the webhook's Consumer cache follows a
    patch within a moment); the last answer."""
    deadline = time.monotonic() + POLICY_SECONDS
    while True:
        result = create(remote, consumer, twin, obj, dry_run=True)
        if result.returncode != 0 or time.monotonic() > deadline:
            return result
        time.sleep(1)


# --- the pod's scheduler ------------------------------------------------------------------------------
def test_a_scheduler_not_granted_is_refused_and_a_granted_one_admitted(remote: Cluster, consumer: Path, twin: str) -> None:
    """Before, schedulerName was not judged: a consumer could hand its pods to any scheduler
    the provider runs (its own priorities, its reserved nodes' placement)."""
    pod = shadowpod("scheduled", schedulerName="provider-batch-scheduler")
    refused = create(remote, consumer, twin, pod, dry_run=True)
    assert refused.returncode != 0, "a pod naming a scheduler the provider does not grant was admitted"
    assert DENIED in refused.stderr and "spec.pod.spec.schedulerName: scheduler 'provider-batch-scheduler' is not granted" \
        in refused.stderr, refused.stderr
    assert "spec.policy.pods.schedulerNames" in refused.stderr
    assert create(remote, consumer, twin, shadowpod("plain", schedulerName="default-scheduler"), dry_run=True).returncode == 0
    patch_consumer(remote, CONSUMER, {"policy": {"pods": {"schedulerNames": ["provider-batch-scheduler"]}}})
    try:
        deadline = time.monotonic() + POLICY_SECONDS
        while (answer := create(remote, consumer, twin, pod, dry_run=True)).returncode != 0:
            assert time.monotonic() < deadline, f"the granted scheduler was never admitted: {answer.stderr}"
            time.sleep(1)
    finally:
        patch_consumer(remote, CONSUMER, {"policy": None})


# --- where the images come from -------------------------------------------------------------------------
def test_images_come_only_from_the_registries_the_provider_lists(remote: Cluster, consumer: Path, twin: str) -> None:
    """Before, there was no such key: a consumer pod could name the provider's private images,
    which the provider's nodes pull with their own credentials (a kubelet credential provider
    does so whatever the pod's pull secrets, imagePullPolicy Always included)."""
    private = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/provider/billing:1"
    pod = shadowpod("private", containers=[{"name": "app", "image": private}])
    # The default is any registry, said explicitly on the Consumer.
    policy = remote.kubectl_json("get", CONSUMER_KIND, CONSUMER)["spec"]["policy"]["pods"]
    assert policy["imageRegistries"] == ["*"], policy
    assert create(remote, consumer, twin, pod, dry_run=True).returncode == 0
    patch_consumer(remote, CONSUMER, {"policy": {"pods": {"imageRegistries": ["registry.k8s.io/", "docker.io/library/"]}}})
    try:
        refused = until_refused(remote, consumer, twin, pod)
        assert refused.returncode != 0, "an image from a registry the provider does not list was admitted"
        assert DENIED in refused.stderr and f"spec.pod.spec.containers[0].image: image '{private}'" in refused.stderr, \
            refused.stderr
        assert "spec.policy.pods.imageRegistries" in refused.stderr
        # Short names resolve as a runtime does: busybox is docker.io/library/busybox, listed.
        listed = shadowpod("listed", containers=[{"name": "app", "image": IMAGE}],
                           initContainers=[{"name": "init", "image": "busybox:1.37"}])
        admitted = create(remote, consumer, twin, listed, dry_run=True)
        assert admitted.returncode == 0, admitted.stderr
        # An init container is a container too.
        sneaky = shadowpod("sneaky", initContainers=[{"name": "init", "image": private}])
        assert "spec.pod.spec.initContainers[0].image" in create(remote, consumer, twin, sneaky, dry_run=True).stderr
    finally:
        patch_consumer(remote, CONSUMER, {"policy": None})


# --- what a twin holds ------------------------------------------------------------------------------------
def test_every_kind_in_a_twin_is_bounded_by_default(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    """Before, a twin had a ResourceQuota only when the provider wrote count keys into the
    quota: ConfigMaps, Secrets, Services... were unlimited by default."""
    quota = wait(lambda: find(remote, "resourcequota", c.TWIN_RESOURCEQUOTA_NAME, "-n", twin), timeout=SERVE_SECONDS,
                 what="the twin's ResourceQuota")
    hard = quota["spec"]["hard"]
    for kind in ("configmaps", "secrets", "services", "persistentvolumeclaims", "serviceaccounts",
                 "endpointslices.discovery.k8s.io", "ingresses.networking.k8s.io"):
        assert f"count/{kind}" in hard, hard
    assert hard["count/configmaps"] == "200" and hard["count/secrets"] == "600"

    # The provider lowers one bound: the API server refuses the consumer's next ConfigMap
    # (kube-root-ca.crt, which Kubernetes puts in every namespace, counts too).
    patch_consumer(remote, CONSUMER, {"policy": {"twinNamespaces": {"maxObjects": {"configmaps": 2}}}})
    names: list[str] = []
    try:
        wait(lambda: (q := find(remote, "resourcequota", c.TWIN_RESOURCEQUOTA_NAME, "-n", twin))
             and (q.get("status") or {}).get("hard", {}).get("count/configmaps") == "2", timeout=SERVE_SECONDS,
             what="the twin's ResourceQuota lowered and counted")
        first = create(remote, consumer, twin, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}})
        names.append("one")
        assert first.returncode == 0, first.stderr
        second = create(remote, consumer, twin, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}})
        names.append("two")
        assert second.returncode != 0, "a ConfigMap beyond the twin's bound was admitted"
        assert f"exceeded quota: {c.TWIN_RESOURCEQUOTA_NAME}" in second.stderr and "count/configmaps" in second.stderr, second.stderr
    finally:
        remote.kubectl("delete", "configmap", *names, "-n", twin, "--ignore-not-found", check=False)
        patch_consumer(remote, CONSUMER, {"policy": None})


def test_shadowpods_in_a_twin_are_counted_finished_ones_too(remote: Cluster, consumer: Path, twin: str) -> None:
    """ShadowPods, a custom kind, are counted by the ShadowPod webhook (a ResourceQuota on a
    custom kind refuses every create until the quota controller's next full resync)."""
    patch_consumer(remote, CONSUMER, {"policy": {"twinNamespaces": {"maxObjects": {"shadowpods.kube-offload.io": 1}}}})
    try:
        made = create(remote, consumer, twin, shadowpod("first"))
        assert made.returncode == 0, made.stderr
        refused = until_refused(remote, consumer, twin, shadowpod("second"))
        assert refused.returncode != 0, "a second ShadowPod was admitted in a twin bounded to one"
        assert DENIED in refused.stderr, refused.stderr
        assert f'consumer "{CONSUMER}" holds 1 shadowpods.kube-offload.io in namespace "{twin}"' in refused.stderr
        assert "spec.policy.twinNamespaces.maxObjects[shadowpods.kube-offload.io]: 1" in refused.stderr
    finally:
        remote.kubectl_as(consumer, "delete", SHADOWPOD_KIND, "first", "-n", twin, "--ignore-not-found", "--wait=true",
                          "--timeout=60s")
        patch_consumer(remote, CONSUMER, {"policy": None})


# --- no consumer without a quota ---------------------------------------------------------------------
def test_no_consumer_is_admitted_without_a_quota(offload_env: Environment, remote: Cluster) -> None:
    """Before, a Consumer without spec.quota was admitted, with no bound on what its pods hold."""
    bare = {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.CONSUMER_KIND, "metadata": {"name": "e2e-noquota"},
            "spec": {"podSecurityLevel": "baseline"}}
    made = remote.kubectl("create", "-f", "-", input=json.dumps(bare), check=False)
    remote.kubectl("delete", CONSUMER_KIND, "e2e-noquota", "--ignore-not-found", check=False)
    assert made.returncode != 0, "a Consumer without a quota was admitted"
    assert "spec.quota is required" in made.stderr and "kube-offload peer --quota" in made.stderr, made.stderr
    # Nor through the chart: the render fails, naming the entry.
    with pytest.raises(IdentityError, match=r"consumers\[e2e-noquota\]\.quota is required"):
        offload_env.install_identities(remote, identities.REMOTE_CHART, {"consumers": [{"name": "e2e-noquota"}]})
    # A quota can be changed, never taken away.
    removed = remote.kubectl("patch", CONSUMER_KIND, CONSUMER, "--type=json", "-p",
                             json.dumps([{"op": "remove", "path": "/spec/quota"}]), check=False)
    assert removed.returncode != 0 and "spec.quota is required" in removed.stderr, removed.stderr


# --- twin names: no squatting a future consumer's --------------------------------------------------------
def test_a_consumer_whose_id_clashes_with_an_older_ones_gets_no_twin(offload_env: Environment, remote: Cluster,
                                                                     consumer: Path, twin: str, wait) -> None:
    """Consumer e2e-rest (admitted first) may ask at any time for web-x-e2e-rest, its twin of
    local namespace web-x; consumer x-e2e-rest, admitted after it, would want the same name
    for its twin of web. Before, the newer one was served (and found its names taken when the
    older one had them); now a provider admits only one of two such consumers: the newer one
    gets no twin at all, said in its request's status."""
    newer = "x-" + CONSUMER
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(newer, node_labels={}, policy=None))
    kubeconfig = offload_env.identity_kubeconfig(remote, identities.consumer_sa(newer))
    name = f"web-{newer}"
    try:
        asked = ask_twin(remote, kubeconfig, newer, name)
        assert asked.returncode == 0, asked.stderr
        status = wait(lambda: (s := twin_status(remote, newer, name)).get("phase") in (c.TWIN_PHASE_REFUSED, c.TWIN_PHASE_READY)
                      and s, timeout=SERVE_SECONDS, what="the newer consumer's twin request answered")
        assert status["phase"] == c.TWIN_PHASE_REFUSED, f"the newer of two clashing consumers got a twin: {status}"
        assert f"consumer '{newer}' cannot have twin namespaces here" in status["message"], status
        assert f"consumer '{CONSUMER}', admitted before it" in status["message"]
        assert find(remote, "namespace", name) is None
        # The older one keeps every name it may ask for (its DefaultName twin of web-x).
        older = ask_twin(remote, consumer, CONSUMER, name)
        assert older.returncode == 0, older.stderr
        wait(lambda: twin_status(remote, CONSUMER, name).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS,
             what="the older consumer's twin of web-x")
    finally:
        remote.kubectl("delete", TWIN_KIND, "--all", "-n", c.tenant_namespace(newer), "--wait=true", "--timeout=60s", check=False)
        remote.kubectl("delete", TWIN_KIND, name, "-n", TENANT, "--ignore-not-found", "--wait=true", "--timeout=120s",
                       check=False, timeout=150)
        remote.kubectl("delete", CONSUMER_KIND, newer, "--ignore-not-found", check=False)
        remote.kubectl("delete", "namespace", c.tenant_namespace(newer), "--ignore-not-found", "--wait=false", check=False)
