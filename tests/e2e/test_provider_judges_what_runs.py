"""Issue 37 (trust boundary III), the provider side, end to end under the chart identities:
every pod the enforcer makes is judged against the Consumer as it is then, a finished run
stays finished, and nothing a consumer can write or ask for is unbounded by default.

A consumer of its own (``e2e-runs``) is admitted through the remote chart (its Consumer,
tenant namespace, ResourceQuota, ServiceAccount and token, as test_provider_policy_quota
admits its own), so the session consumer's policy, quota and tenant are left alone. It
asks for a twin with a TwinNamespace and writes ShadowPods, claims and tokens with its own
token, straight to the provider's API server, as an attacker holding a virtual kubelet's
credentials would; the provider's admin (the admin kubeconfig) patches its Consumer and
plays the kubelet (a pod's loss, a pod's end). Tests run in file order.

- a grant the provider took back, or a quota it lowered, does not come back with the next
  recreation of a pod (which the consumer can bring about at will); the ShadowPod's status
  and a PodRefused Event say why; giving the grant back makes the pod again at once;
- the spec of a finished ShadowPod cannot be rewritten, and its run, recorded from the pod
  that ran, is not run again when that pod goes;
- the pod made gets at most the consumer's largest grace (300 s by default);
- a consumer admitted with the defaults cannot claim a 1Ei volume (a claim, or a pod's
  ephemeral volume), mint itself an 8-day token or a token for another audience, create a
  Lease other than its heartbeat, or keep OffloadSlices without end;
- only the consumer's own offloaded pods are selected by its relay's NetworkPolicy (what
  the real API server stores; whether packets are dropped is the provider's network
  plugin's job, and this harness runs none that enforces NetworkPolicy);
- a sidecar counts against the quota like any container (it already did).
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
from kube_offload_harness.naming import LOCAL_CLUSTER_ID, unique
from support.clusters import find, patch_consumer, serve_twin

CONSUMER = "e2e-runs"
TENANT = c.tenant_namespace(CONSUMER)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
SHADOWPOD_KIND = f"{c.SHADOWPOD_PLURAL}.{c.DOMAIN}"
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
SLICE_KIND = f"{c.SLICE_PLURAL}.{c.DOMAIN}"
GRANTED = identities.TOLERATION_GRANTED_IN_TESTS
SERVE_SECONDS = 90
# The enforcer reacts to a pod's DELETED event at once; kwok then marks the new pod Running.
REACT_SECONDS = 30


def shadowpod(name: str, *, cpu: str = "10m", restart_policy: str | None = None, **spec: Any) -> dict:
    pod_spec: dict[str, Any] = {"containers": [{"name": "app", "image": IMAGE,
                                                "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}],
                                "terminationGracePeriodSeconds": 1}
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    pod_spec.update(spec)
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "labels": origin},
        "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}}, "spec": pod_spec}},
    }


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The chart-made identity of consumer e2e-runs, with the tests' policy (one toleration
    granted, the local-path storage class) and the chart's defaults for the rest."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(CONSUMER, node_labels={}))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(CONSUMER))


@pytest.fixture(scope="module")
def twin(remote: Cluster, consumer: Path) -> Iterator[str]:
    name = f"{unique('runs')}-{CONSUMER}"
    serve_twin(remote, consumer, CONSUMER, name, timeout=SERVE_SECONDS)
    yield name
    remote.kubectl("delete", TWIN_KIND, "--all", "-n", TENANT, "--wait=true", "--timeout=120s", check=False, timeout=150)
    patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA), "policy": identities.E2E_POLICY})


def create(remote: Cluster, consumer: Path, twin: str, obj: dict) -> subprocess.CompletedProcess:
    return remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(obj))


def made(remote: Cluster, consumer: Path, twin: str, obj: dict, wait) -> dict:
    """Create ``obj`` as the consumer and wait for the enforcer's pod, Running."""
    result = create(remote, consumer, twin, obj)
    assert result.returncode == 0, result.stderr
    name = obj["metadata"]["name"]
    return wait(lambda: (pod := find(remote, "pod", name, "-n", twin)) and (pod.get("status") or {}).get("phase") == "Running"
                and pod, timeout=REACT_SECONDS * 2, what=f"the enforcer's pod {name} Running")


def lose_pod(remote: Cluster, twin: str, name: str, wait) -> str:
    """The pod is lost (evicted, its node gone: what the consumer can bring about); returns
    the lost pod's UID once it is gone."""
    uid = remote.kubectl_json("get", "pod", name, "-n", twin)["metadata"]["uid"]
    remote.kubectl("delete", "pod", name, "-n", twin, "--wait=true", "--timeout=60s")
    wait(lambda: (find(remote, "pod", name, "-n", twin) or {}).get("metadata", {}).get("uid") != uid, timeout=60,
         what=f"pod {name} gone")
    return uid


def status_of(remote: Cluster, twin: str, name: str) -> dict:
    return (find(remote, SHADOWPOD_KIND, name, "-n", twin) or {}).get("status") or {}


def events(remote: Cluster, twin: str, name: str, reason: str) -> list[dict]:
    listed = remote.kubectl_json("get", "events", "-n", twin, "--field-selector",
                                 f"involvedObject.name={name},involvedObject.kind={c.SHADOWPOD_KIND},reason={reason}")
    return listed["items"]


def delete_shadowpod(remote: Cluster, consumer: Path, twin: str, name: str) -> None:
    remote.kubectl_as(consumer, "delete", SHADOWPOD_KIND, name, "-n", twin, "--ignore-not-found", "--wait=true", "--timeout=60s")


# --- item 2: every pod is judged, against the Consumer as it is now -----------------------------------
def test_a_grant_taken_back_does_not_come_back_with_the_next_pod(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    tolerating = shadowpod("tolerant", tolerations=[{"key": GRANTED, "operator": "Exists", "effect": "NoSchedule"}])
    made(remote, consumer, twin, tolerating, wait)
    try:
        # The provider takes the toleration back; the pod is then lost.
        patch_consumer(remote, CONSUMER, {"policy": {"pods": {"tolerations": []}}})
        lose_pod(remote, twin, "tolerant", wait)
        message = wait(lambda: "refuse to run it again" in (m := status_of(remote, twin, "tolerant").get("message", "")) and m,
                       timeout=REACT_SECONDS, what="the ShadowPod's status saying the provider's rules refuse the pod")
        assert f"spec.pod.spec.tolerations[0].key: toleration of taint '{GRANTED}' is not granted" in message, message
        assert "spec.policy.pods.tolerations" in message
        assert find(remote, "pod", "tolerant", "-n", twin) is None, "the pod came back without its grant"
        [event] = wait(lambda: events(remote, twin, "tolerant", "PodRefused"), timeout=REACT_SECONDS, what="a PodRefused Event")
        assert event["type"] == "Warning" and "tolerations[0].key" in event["message"]
        # The grant comes back: judged again at once (the Consumer changed), not at the next resync.
        patch_consumer(remote, CONSUMER, {"policy": identities.E2E_POLICY})
        wait(lambda: find(remote, "pod", "tolerant", "-n", twin), timeout=REACT_SECONDS, what="the pod made again once granted")
        assert status_of(remote, twin, "tolerant").get("recreations") == 1
    finally:
        patch_consumer(remote, CONSUMER, {"policy": identities.E2E_POLICY})
        delete_shadowpod(remote, consumer, twin, "tolerant")


def test_a_lowered_quota_holds_when_a_pod_is_made_again(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    made(remote, consumer, twin, shadowpod("counted", cpu="200m"), wait)
    try:
        # Usage now 200m; the provider lowers the quota below it. The running pod runs on...
        patch_consumer(remote, CONSUMER, {"quota": {"cpu": "100m"}})
        wait(lambda: (find(remote, f"{c.CONSUMER_PLURAL}.{c.DOMAIN}", CONSUMER) or {}).get("spec", {}).get("quota"),
             timeout=10, what="the quota set")
        # ... but the one made when it is lost is judged against the quota as it is now.
        lose_pod(remote, twin, "counted", wait)
        message = wait(lambda: "refuse to run it again" in (m := status_of(remote, twin, "counted").get("message", "")) and m,
                       timeout=REACT_SECONDS, what="the recreation refused for the quota")
        assert f'exceeded quota of consumer "{CONSUMER}": cpu: requested 200m' in message, message
        assert find(remote, "pod", "counted", "-n", twin) is None
        patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA)})
        wait(lambda: find(remote, "pod", "counted", "-n", twin), timeout=REACT_SECONDS, what="the pod made again once it fits")
    finally:
        patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA)})
        delete_shadowpod(remote, consumer, twin, "counted")


def test_a_finished_run_stays_finished(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    pod = made(remote, consumer, twin, shadowpod("job", restart_policy="Never"), wait)
    try:
        # The container exits 0 on its own (what a kubelet reports).
        remote.kubectl("patch", "pod", "job", "-n", twin, "--subresource=status", "--type=merge", "-p",
                       json.dumps({"status": {"phase": "Succeeded"}}))
        status = wait(lambda: (s := status_of(remote, twin, "job")).get("phase") == "Succeeded" and s, timeout=REACT_SECONDS,
                      what="the ShadowPod's status Succeeded")
        assert status.get("runCompleted") is True, status  # recorded from the pod that ran
        # The finished ShadowPod counts nothing: a rewrite to run again, bigger, is refused.
        rewrite = [{"op": "replace", "path": "/spec/pod/spec/restartPolicy", "value": "Always"},
                   {"op": "replace", "path": "/spec/pod/spec/containers/0/resources/requests/cpu", "value": "3"}]
        rewritten = remote.kubectl_as(consumer, "patch", SHADOWPOD_KIND, "job", "-n", twin, "--type=json", "-p", json.dumps(rewrite))
        assert rewritten.returncode != 0, "the spec of a finished ShadowPod was rewritten"
        assert DENIED in rewritten.stderr and "spec: immutable once the ShadowPod's status.phase is Succeeded" in rewritten.stderr
        # Its metadata stays writable.
        labelled = remote.kubectl_as(consumer, "label", SHADOWPOD_KIND, "job", "-n", twin, "tier=batch")
        assert labelled.returncode == 0, labelled.stderr
        # The finished pod is removed (the pod garbage collector, say): the run is not run again.
        remote.kubectl("delete", "pod", "job", "-n", twin, "--wait=true", "--timeout=60s")
        time.sleep(5)  # the enforcer hears the DELETED event within a second
        again = find(remote, "pod", "job", "-n", twin)
        assert again is None or again["metadata"]["uid"] == pod["metadata"]["uid"], "a finished run was run again"
    finally:
        delete_shadowpod(remote, consumer, twin, "job")


# --- item 3: no bound unlimited by default ------------------------------------------------------------
def test_the_pod_made_has_at_most_the_consumers_largest_grace(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    eight_days = 8 * 24 * 3600
    pod = made(remote, consumer, twin, shadowpod("slow-stop", terminationGracePeriodSeconds=eight_days), wait)
    try:
        assert pod["spec"]["terminationGracePeriodSeconds"] == 300, pod["spec"].get("terminationGracePeriodSeconds")
    finally:
        delete_shadowpod(remote, consumer, twin, "slow-stop")


def test_a_consumer_cannot_claim_an_exabyte(remote: Cluster, consumer: Path, twin: str) -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "huge"},
             "spec": {"storageClassName": identities.E2E_STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Ei"}}}}
    refused = create(remote, consumer, twin, claim)
    remote.kubectl("delete", "pvc", "huge", "-n", twin, "--ignore-not-found", "--wait=false", check=False)
    assert refused.returncode != 0, "a 1Ei claim was admitted"
    assert "spec.resources.requests.storage: 1Ei is more than 100Gi" in refused.stderr, refused.stderr
    assert "Consumer spec.policy.storage.maxClaimSize" in refused.stderr
    # The same through a pod's generic ephemeral volume, whose claim the provider's own
    # controller makes (so the claim policy never sees it).
    ephemeral = shadowpod("scratch", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "storageClassName": identities.E2E_STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Ei"}}}}}}])
    result = create(remote, consumer, twin, ephemeral)
    remote.kubectl("delete", SHADOWPOD_KIND, "scratch", "-n", twin, "--ignore-not-found", "--wait=false", check=False)
    assert result.returncode != 0, "a pod with a 1Ei ephemeral volume was admitted"
    assert DENIED in result.stderr and 'volume "scratch" claims 1Ei, more than the 100Gi' in result.stderr, result.stderr


def test_a_consumer_cannot_mint_itself_a_long_or_foreign_token(remote: Cluster, consumer: Path) -> None:
    webhook = f'admission webhook "{c.TOKEN_WEBHOOK_NAME}" denied the request'
    long = remote.kubectl_as(consumer, "create", "token", c.CONSUMER_SERVICE_ACCOUNT, "-n", TENANT, "--duration", "192h")
    assert long.returncode != 0, "an 8-day token was issued to the consumer"
    assert webhook in long.stderr and "spec.expirationSeconds: 691200 s is longer than" in long.stderr, long.stderr
    assert "spec.policy.tokens.maxExpirationSeconds" in long.stderr
    foreign = remote.kubectl_as(consumer, "create", "token", c.CONSUMER_SERVICE_ACCOUNT, "-n", TENANT, "--duration", "1h",
                                "--audience", "sts.amazonaws.com")
    assert foreign.returncode != 0, "a token for another audience was issued to the consumer"
    assert webhook in foreign.stderr and "spec.audiences: 'sts.amazonaws.com' not granted" in foreign.stderr, foreign.stderr
    # What its virtual kubelet asks to renew its identity (no audience, a day) is issued.
    honest = remote.kubectl_as(consumer, "create", "token", c.CONSUMER_SERVICE_ACCOUNT, "-n", TENANT, "--duration", "24h")
    assert honest.returncode == 0, honest.stderr
    review = json.loads(remote.kubectl("create", "-o", "json", "-f", "-", input=json.dumps({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": honest.stdout.strip()}})).stdout)
    assert review["status"].get("authenticated") is True, review
    # The provider grants an audience: then it is issued.
    patch_consumer(remote, CONSUMER, {"policy": {"tokens": {"audiences": ["vault.example.com"]}}})
    try:
        def granted() -> bool:
            return remote.kubectl_as(consumer, "create", "token", c.CONSUMER_SERVICE_ACCOUNT, "-n", TENANT, "--duration", "1h",
                                     "--audience", "vault.example.com").returncode == 0
        deadline = time.monotonic() + 30
        while not granted():
            assert time.monotonic() < deadline, "the granted audience was never issued"
            time.sleep(1)
    finally:
        patch_consumer(remote, CONSUMER, {"policy": identities.E2E_POLICY})


def test_a_tenant_namespace_holds_a_bounded_number_of_the_consumers_objects(remote: Cluster, consumer: Path) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "squatter", "namespace": TENANT},
             "spec": {"holderIdentity": "x"}}
    squat = remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(lease))
    remote.kubectl("delete", "lease", "squatter", "-n", TENANT, "--ignore-not-found", check=False)
    assert squat.returncode != 0, "a Lease other than the heartbeat was admitted"
    assert "the only Lease a consumer may create in its tenant namespace is its heartbeat" in squat.stderr, squat.stderr
    # OffloadSlices: the default figure (20) and no more.
    existing = len(remote.kubectl_json("get", SLICE_KIND, "-n", TENANT)["items"])
    names = [f"many-{i}" for i in range(21 - existing)]
    results = []
    try:
        for name in names:
            body = {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.SLICE_KIND,
                    "metadata": {"name": name, "namespace": TENANT}, "spec": {"pool": "none", "resources": {"cpu": "1"}}}
            results.append(remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(body)))
        assert all(r.returncode == 0 for r in results[:-1]), [r.stderr for r in results if r.returncode]
        assert results[-1].returncode != 0, "a 21st OffloadSlice was admitted"
        assert f'admission webhook "{c.TENANT_OBJECTS_WEBHOOK_NAME}" denied the request' in results[-1].stderr, results[-1].stderr
        assert f'consumer "{CONSUMER}" holds 20 OffloadSlices' in results[-1].stderr
        assert "Consumer spec.policy.slices.maxCount: 20" in results[-1].stderr
    finally:
        remote.kubectl("delete", SLICE_KIND, *names, "-n", TENANT, "--ignore-not-found", "--wait=false", check=False)


def test_a_sidecar_counts_against_the_quota_like_a_container(remote: Cluster, consumer: Path, twin: str) -> None:
    patch_consumer(remote, CONSUMER, {"quota": {"cpu": "100m"}})
    try:
        sidecar = {"name": "proxy", "image": IMAGE, "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
        refused = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the webhook's Consumer cache shows the quota
            refused = remote.kubectl_as(consumer, "create", "-n", twin, "--dry-run=server", "-f", "-",
                                        input=json.dumps(shadowpod("sidecar", cpu="50m", initContainers=[sidecar])))
            if refused.returncode != 0:
                break
            time.sleep(1)
        assert refused is not None and refused.returncode != 0, "a pod whose sidecar takes it over the quota was admitted"
        assert f'exceeded quota of consumer "{CONSUMER}": cpu: requested 150m' in refused.stderr, refused.stderr
    finally:
        patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA)})


# --- item 5: only the consumer's own pods reach its relay ------------------------------------------------
def selected(remote: Cluster, peer: dict) -> set[str]:
    """``namespace/name`` of the pods a NetworkPolicy peer selects, as the API server's own
    label selection answers it."""
    def selector(match: dict) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted((match.get("matchLabels") or {}).items()))

    namespaces = remote.kubectl_json("get", "namespaces", "-l", selector(peer["namespaceSelector"]))["items"]
    found = set()
    for namespace in namespaces:
        name = namespace["metadata"]["name"]
        for pod in remote.kubectl_json("get", "pods", "-n", name, "-l", selector(peer["podSelector"]))["items"]:
            found.add(f"{name}/{pod['metadata']['name']}")
    return found


def test_only_the_consumers_own_pods_are_let_into_its_relay(remote: Cluster, consumer: Path, twin: str, wait) -> None:
    made(remote, consumer, twin, shadowpod("client"), wait)
    outsider = unique("outsider")
    remote.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": outsider, "namespace": "default",
                  "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}},  # claims the label, not the namespace's
                  "spec": {"containers": [{"name": "app", "image": IMAGE}]}})
    try:
        policy = remote.kubectl_json("get", "networkpolicy", "home-api-relay", "-n", TENANT)
        relay_labels = policy["spec"]["podSelector"]["matchLabels"]
        assert relay_labels["app.kubernetes.io/component"] == c.HOME_API_RELAY_COMPONENT
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        serve = next(rule for rule in policy["spec"]["ingress"] if rule.get("from"))
        assert [p["port"] for p in serve["ports"]] == [c.HOME_API_RELAY_SERVE_PORT]
        [peer] = serve["from"]
        allowed = selected(remote, peer)
        assert f"{twin}/client" in allowed
        # Nothing but this consumer's pods: every one selected is in a twin the enforcer made
        # for it; the session consumer's pods and a provider pod claiming the label are not.
        for name in allowed:
            labels = remote.kubectl_json("get", "namespace", name.split("/", 1)[0])["metadata"].get("labels") or {}
            assert labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == CONSUMER and labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER, name
        assert f"default/{outsider}" not in allowed
        others = remote.kubectl_json("get", "pods", "-A", "-l", f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_CLUSTER_ID}")["items"]
        assert not {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in others} & allowed
    finally:
        remote.kubectl("delete", "pod", outsider, "-n", "default", "--ignore-not-found", "--wait=false", check=False)
        delete_shadowpod(remote, consumer, twin, "client")
