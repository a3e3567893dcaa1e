"""The provider policy's pod rules (issue #21), end to end: the real kube-apiserver calls
the enforcer's ShadowPod webhook, and every ShadowPod here is written by the consumer
identity the remote chart creates (the token kubeconfig the harness minted for
``kube-offload-tenant-local/consumer``), exactly as an attacker holding the virtual
kubelet's credentials would, straight into a twin namespace the enforcer made.

- the vectors of the issue are refused with a message naming the field and the
  ``Consumer spec.policy`` key (or that none grants it): a system priority class,
  tolerate-all, a control-plane or hostname node selector, an nfs volume;
- a priority class is admitted once the provider grants it by patching the Consumer;
- the Pod the enforcer makes pulls ``Always`` and carries no provider token, whatever
  the ShadowPod asked (and an ordinary pod offloaded by the honest vkubelet runs);
- a pod gets the twin's ServiceAccount token (API server mode "remote") only once the
  provider grants ``pods.remoteAPIAccess``;
- the Consumer shows every policy key with its default;
- a policy that does not parse refuses as a misconfigured Consumer (403).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import LOCAL_CLUSTER_ID, twin_namespace, unique
from support.clusters import offloaded_namespace

IMAGE = "registry.k8s.io/pause:3.10"
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
PRIORITY_CLASS = "e2e-policy-batch"
CONSUMER = f"{c.CONSUMER_PLURAL}.{c.DOMAIN}"



def shadowpod(name: str, **spec) -> dict:
    pod_spec = {"containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                "terminationGracePeriodSeconds": 1}
    pod_spec.update(spec)
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_CLUSTER_ID}
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "labels": origin},
        "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}}, "spec": pod_spec}},
    }


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The kubeconfig the local cluster's virtual kubelet uses on the provider."""
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(LOCAL_CLUSTER_ID))


@pytest.fixture(scope="module")
def twin(local: Cluster, remote: Cluster, wait) -> Iterator[str]:
    """A twin namespace the enforcer made for consumer "local", with an ordinary pod the
    honest vkubelet offloaded there (it must pass the default policy and run)."""
    ns = unique("pp-pods")
    offloaded_namespace(local, ns)
    try:
        # The ServiceAccount admission refuses pods until the namespace's default account exists.
        wait(lambda: local.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
             timeout=60, what=f"ServiceAccount {ns}/default")
        local.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "honest", "namespace": ns, "labels": {"app": "honest"}},
            "spec": {"containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                     "terminationGracePeriodSeconds": 1},
        })
        wait(lambda: local.kubectl("get", "pod", "honest", "-n", ns, "-o", "jsonpath={.status.phase}", check=False).stdout == "Running",
             timeout=120, what="the ordinary offloaded pod Running under the default policy")
        yield twin_namespace(ns)
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def created(remote: Cluster, twin: str) -> Iterator[list[str]]:
    """Names of ShadowPods a test made directly; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        remote.kubectl("delete", "shadowpod", name, "-n", twin, "--ignore-not-found", "--wait=true", "--timeout=60s", check=False)


def create(remote: Cluster, consumer: Path, twin: str, obj: dict) -> subprocess.CompletedProcess:
    return remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(obj))


def refused(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode != 0, f"expected a refusal, got: {result.stdout}"
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in: {result.stderr}"
    return result.stderr


def patch_policy(remote: Cluster, policy: dict) -> None:
    remote.kubectl("patch", CONSUMER, LOCAL_CLUSTER_ID, "--type=merge", "-p", json.dumps({"spec": {"policy": policy}}))


def the_policy(remote: Cluster) -> dict:
    return remote.kubectl_json("get", CONSUMER, LOCAL_CLUSTER_ID)["spec"]["policy"]


# --- the vectors ----------------------------------------------------------------------------------
VECTORS = [
    pytest.param(dict(priorityClassName="system-node-critical"),
                 ["spec.pod.spec.priorityClassName: 'system-node-critical' is a system priority class",
                  "spec.policy.pods.priorityClasses"], id="system-node-critical"),
    pytest.param(dict(tolerations=[{"operator": "Exists"}]),
                 ["spec.pod.spec.tolerations[0]: a toleration without a key tolerates every taint", "spec.policy.pods.tolerations"],
                 id="tolerate-all"),
    pytest.param(dict(nodeSelector={"node-role.kubernetes.io/control-plane": ""},
                      tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]),
                 ["spec.pod.spec.nodeSelector[node-role.kubernetes.io/control-plane]: 'node-role.kubernetes.io/control-plane' is a "
                  "node label key the provider reserves", "spec.pod.spec.tolerations[0].key", "spec.policy.pods.reservedNodeLabelKeys"],
                 id="control-plane-selector"),
    pytest.param(dict(nodeSelector={"kubernetes.io/hostname": "provider-node-1"}),
                 ["spec.pod.spec.nodeSelector[kubernetes.io/hostname]", "spec.policy.pods.reservedNodeLabelKeys"], id="hostname-selector"),
    pytest.param(dict(volumes=[{"name": "share", "nfs": {"server": "192.0.2.10", "path": "/exports"}}]),
                 ['spec.pod.spec.volumes[0].nfs: volume "share" of type nfs is not granted', "spec.policy.pods.volumeTypes"],
                 id="nfs-volume"),
]


@pytest.mark.parametrize("spec, fragments", VECTORS)
def test_the_vectors_are_refused_naming_the_field_and_the_key(remote: Cluster, consumer: Path, twin: str, spec: dict,
                                                              fragments: list[str], created: list[str]) -> None:
    created.append("vector")  # were it admitted, the next vector must not meet AlreadyExists
    stderr = refused(create(remote, consumer, twin, shadowpod("vector", **spec)), DENIED, *fragments)
    assert stderr.startswith("The request is invalid"), stderr  # kubectl words the webhook's 422
    assert remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=vector")["items"] == []


def test_every_problem_is_reported_at_once(remote: Cluster, consumer: Path, twin: str, created: list[str]) -> None:
    spec = dict(priorityClassName="system-cluster-critical", tolerations=[{"operator": "Exists"}],
                volumes=[{"name": "repo", "gitRepo": {"repository": "https://example.com/x.git"}}])
    created.append("many")
    stderr = refused(create(remote, consumer, twin, shadowpod("many", **spec)), DENIED)
    for field in ("spec.pod.spec.priorityClassName", "spec.pod.spec.tolerations[0]", "spec.pod.spec.volumes[0].gitRepo"):
        assert field in stderr, stderr


# --- a grant ----------------------------------------------------------------------------------------
def test_a_priority_class_is_admitted_once_the_provider_grants_it(remote: Cluster, consumer: Path, twin: str,
                                                                  created: list[str], wait) -> None:
    remote.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS},
                  "value": 1000, "description": "e2e: a class the provider grants one consumer"})
    obj = shadowpod("granted", priorityClassName=PRIORITY_CLASS)
    try:
        refused(create(remote, consumer, twin, obj), DENIED,
                f"spec.pod.spec.priorityClassName: priority class '{PRIORITY_CLASS}' is not granted to consumer \"{LOCAL_CLUSTER_ID}\"",
                "spec.policy.pods.priorityClasses")
        patch_policy(remote, {"pods": {"priorityClasses": [PRIORITY_CLASS]}})
        # The harness's grants stay: a merge patch replaces only the key it names.
        assert the_policy(remote)["pods"]["tolerations"] == identities.E2E_POLICY["pods"]["tolerations"]
        created.append("granted")
        wait(lambda: create(remote, consumer, twin, obj).returncode == 0, timeout=30,
             what="the ShadowPod admitted once the enforcer sees the grant")
        pod = wait(lambda: remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=granted")["items"], timeout=60,
                   what="the enforcer's Pod of the granted ShadowPod")[0]
        assert pod["spec"]["priorityClassName"] == PRIORITY_CLASS and pod["spec"]["priority"] == 1000
        # Granting one class grants no other, and never a system one.
        refused(create(remote, consumer, twin, shadowpod("system", priorityClassName="system-node-critical")), DENIED,
                "is a system priority class")
    finally:
        patch_policy(remote, {"pods": {"priorityClasses": []}})
        remote.kubectl("delete", "shadowpod", "granted", "-n", twin, "--ignore-not-found", "--wait=true", "--timeout=60s", check=False)
        remote.kubectl("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found", check=False)


# --- what is neutralized ------------------------------------------------------------------------------
def assert_no_provider_token(pod: dict, shadow: dict) -> None:
    spec = pod["spec"]
    assert spec.get("automountServiceAccountToken") is False, spec
    for volume in spec.get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            assert "serviceAccountToken" not in source, volume
    # The provider's ServiceAccount admission added no token volume: the pod has exactly the
    # template's volumes (with reflection, the consumer's OWN token from a reflected Secret).
    template = shadow["spec"]["pod"]["spec"]
    assert [v["name"] for v in spec.get("volumes") or []] == [v["name"] for v in template.get("volumes") or []]
    for container in spec["containers"]:
        template_mounts = next(c for c in template["containers"] if c["name"] == container["name"]).get("volumeMounts") or []
        assert (container.get("volumeMounts") or []) == template_mounts, container


def test_the_pods_the_enforcer_makes_always_pull_and_get_no_provider_token(remote: Cluster, consumer: Path, twin: str,
                                                                           created: list[str], wait) -> None:
    # The honest vkubelet's pod (its local pod said IfNotPresent).
    [honest] = remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=honest")["items"]
    assert [ctr["imagePullPolicy"] for ctr in honest["spec"]["containers"]] == ["Always"]
    assert_no_provider_token(honest, remote.kubectl_json("get", "shadowpod", "-n", twin, "honest"))
    # A ShadowPod written straight with the consumer's credentials that asks for the opposite.
    obj = shadowpod("asks", automountServiceAccountToken=True,
                    initContainers=[{"name": "init", "image": IMAGE, "imagePullPolicy": "Never"}])
    obj["spec"]["pod"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    result = create(remote, consumer, twin, obj)
    assert result.returncode == 0, result.stderr
    created.append("asks")
    pod = wait(lambda: remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=asks")["items"], timeout=60,
               what="the enforcer's Pod of ShadowPod asks")[0]
    assert [ctr["imagePullPolicy"] for ctr in (*pod["spec"]["initContainers"], *pod["spec"]["containers"])] == ["Always", "Always"]
    assert_no_provider_token(pod, obj)
    # A provider token projected by hand is refused.
    token = shadowpod("token", volumes=[{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}])
    refused(create(remote, consumer, twin, token), DENIED, "spec.pod.spec.volumes[0].projected.sources[0].serviceAccountToken",
            "a token of the provider's ServiceAccount")


def test_the_providers_api_only_with_the_grant(remote: Cluster, consumer: Path, twin: str, created: list[str], wait) -> None:
    # API server mode "remote": the pod asks for the twin's default account token. Without
    # Consumer spec.policy.pods.remoteAPIAccess it is neutralized (no provider identity);
    # with it, the provider's own ServiceAccount admission mounts the token.
    created.append("remote-api-denied")
    denied = shadowpod("remote-api-denied", automountServiceAccountToken=True)
    assert create(remote, consumer, twin, denied).returncode == 0
    pod = wait(lambda: remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=remote-api-denied")["items"], timeout=60,
               what="the enforcer's Pod of ShadowPod remote-api-denied")[0]
    assert_no_provider_token(pod, denied)
    try:
        patch_policy(remote, {"pods": {"remoteAPIAccess": True}})
        assert the_policy(remote)["pods"]["remoteAPIAccess"] is True
        created.append("remote-api")

        def made_with_the_grant() -> dict | None:
            # The enforcer reads the grant from its Consumer cache when it makes the pod, a
            # moment after the patch: a pod made before is made again.
            remote.kubectl("delete", "shadowpod", "remote-api", "-n", twin, "--ignore-not-found", "--wait=true",
                           "--timeout=60s", check=False)
            assert create(remote, consumer, twin, shadowpod("remote-api", automountServiceAccountToken=True)).returncode == 0
            made = wait(lambda: remote.kubectl_json("get", "pods", "-n", twin, "-l", "app=remote-api")["items"], timeout=60,
                        what="the enforcer's Pod of ShadowPod remote-api")[0]
            return made if made["spec"].get("automountServiceAccountToken") else None

        spec = wait(made_with_the_grant, timeout=120, what="a pod made once the enforcer sees the grant")["spec"]
        assert spec["automountServiceAccountToken"] is True, spec
        assert spec.get("serviceAccountName") == "default", spec
        tokens = [source["serviceAccountToken"] for volume in spec.get("volumes") or []
                  for source in (volume.get("projected") or {}).get("sources") or [] if "serviceAccountToken" in source]
        assert tokens, f"no token volume from the provider's ServiceAccount admission: {spec.get('volumes')}"
        # The grant is the automount, nothing more: a hand-made token projection stays refused.
        token = shadowpod("token-granted", volumes=[{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}])
        refused(create(remote, consumer, twin, token), DENIED, "spec.pod.spec.volumes[0].projected.sources[0].serviceAccountToken")
    finally:
        patch_policy(remote, {"pods": {"remoteAPIAccess": False}})


# --- the Consumer ----------------------------------------------------------------------------------
def test_the_consumer_shows_every_policy_key_with_its_default(remote: Cluster) -> None:
    policy = the_policy(remote)
    expected = pp.policy_to_spec(pp.parse_policy(identities.E2E_POLICY))
    assert policy == expected
    assert policy["pods"]["volumeTypes"] == list(pp.NAMESPACED_VOLUME_TYPES)


def test_a_policy_that_does_not_parse_refuses_as_the_providers_mistake(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    # The CRD's schema cannot say "never system-*"; the enforcer refuses rather than guesses.
    try:
        patch_policy(remote, {"pods": {"priorityClasses": ["system-node-critical"]}})
        stderr = wait(lambda: (r := create(remote, consumer, twin, shadowpod("misconfigured"))).returncode != 0
                      and "misconfigured" in r.stderr and r.stderr, timeout=30, what="the misconfigured Consumer refusing")
        assert f'Consumer "{LOCAL_CLUSTER_ID}" is misconfigured' in stderr
        assert "spec.policy.pods.priorityClasses: 'system-node-critical' cannot be granted" in stderr
        assert "Forbidden" in stderr or "forbidden" in stderr, stderr
    finally:
        patch_policy(remote, {"pods": {"priorityClasses": []}})
        remote.kubectl("delete", "shadowpod", "misconfigured", "-n", twin, "--ignore-not-found", check=False)
