"""Issue 21, object counts: the object-count keys of a Consumer's ``spec.quota`` bound each
twin namespace through a ResourceQuota the enforcer keeps there, enforced by the API
server itself, under the consumer identity the remote chart creates.

A consumer of its own (``e2e-objquota``) is admitted through the chart (as in
test_provider_policy_quota.py), so the session consumer's twins are left alone; its quota
is set by patching its Consumer, as a provider's admin would. It asks for a twin with a
TwinNamespace and writes Services there with its own token. Tests run in file order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_offload import constants as c
from kube_offload_harness import identities
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import unique
from support.clusters import find, patch_consumer, twin_status

CONSUMER = "e2e-objquota"
TENANT = c.tenant_namespace(CONSUMER)
TWIN_KIND = f"{c.TWIN_NAMESPACE_PLURAL}.{c.DOMAIN}"
QUOTA = c.TWIN_RESOURCEQUOTA_NAME
SERVE_SECONDS = 90
# The policy's per-twin bounds of the built-in kinds beside the quota's keys (the harness's
# test policy: identities.E2E_POLICY), as the API server writes them back.
POLICY_BOUNDS = {f"count/{kind}": "100k" for kind in ("configmaps", "secrets", "services", "endpointslices.discovery.k8s.io",
                                                      "persistentvolumeclaims", "serviceaccounts", "ingresses.networking.k8s.io")}
ONE_SERVICE = {**POLICY_BOUNDS, "count/services": "1"}  # the lower of the two figures for Services



def service(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def resourcequota(remote: Cluster, twin: str) -> dict | None:
    return find(remote, "resourcequota", QUOTA, "-n", twin)


def counted(quota: dict | None, key: str, figure: str) -> bool:
    """The ResourceQuota says ``key: figure`` and the quota controller has counted it."""
    if not quota:
        return False
    return quota["spec"]["hard"].get(key) == figure and (quota.get("status") or {}).get("hard", {}).get(key) == figure


@pytest.fixture(scope="module")
def consumer(offload_env: Environment, remote: Cluster) -> Path:
    """The chart-made identity of consumer e2e-objquota (its own Consumer, tenant, token)."""
    offload_env.install_identities(remote, identities.REMOTE_CHART, identities.remote_values(CONSUMER, node_labels={}))
    return offload_env.identity_kubeconfig(remote, identities.consumer_sa(CONSUMER))


@pytest.fixture(scope="module")
def twin(remote: Cluster, consumer: Path, wait) -> str:
    """A twin of e2e-objquota whose Consumer allows one Service per twin (and 2 CPUs in
    all: a compute key, which never reaches the ResourceQuota)."""
    patch_consumer(remote, CONSUMER, {"quota": {"count/services": "1", "cpu": "2"}})
    name = f"{unique('oq')}-{CONSUMER}"
    request = {
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}",
        "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"localNamespace": name},
    }
    made = remote.kubectl_as(consumer, "create", "-f", "-", input=json.dumps(request))
    assert made.returncode == 0, made.stderr
    wait(lambda: twin_status(remote, CONSUMER, name).get("phase") == c.TWIN_PHASE_READY, timeout=SERVE_SECONDS,
         what=f"twin {name} Ready")
    yield name
    remote.kubectl("delete", TWIN_KIND, "--all", "-n", TENANT, "--wait=true", "--timeout=120s", check=False, timeout=150)
    patch_consumer(remote, CONSUMER, {"quota": dict(identities.E2E_QUOTA)})


def test_the_twin_gets_the_resourcequota_with_object_keys_only(remote: Cluster, twin: str) -> None:
    # Ready only once the ResourceQuota is there and counted (else the API server refuses
    # every Service with "status unknown for quota").
    quota = resourcequota(remote, twin)
    assert quota is not None, f"no ResourceQuota {QUOTA} in twin {twin}"
    assert quota["spec"]["hard"] == ONE_SERVICE  # never cpu
    labels = quota["metadata"].get("labels") or {}
    assert labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER
    assert labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == CONSUMER
    assert counted(quota, "count/services", "1")


def test_a_second_service_is_refused_by_the_api_server_naming_the_quota(remote: Cluster, consumer: Path, twin: str) -> None:
    first = remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(service("first")))
    assert first.returncode == 0, first.stderr
    second = remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(service("second")))
    assert second.returncode != 0, "a second Service was admitted past count/services: 1"
    assert f"exceeded quota: {QUOTA}" in second.stderr, second.stderr
    assert "count/services" in second.stderr
    assert find(remote, "service", "second", "-n", twin) is None


def test_the_consumer_cannot_delete_or_edit_the_resourcequota(remote: Cluster, consumer: Path, twin: str) -> None:
    deleted = remote.kubectl_as(consumer, "delete", "resourcequota", QUOTA, "-n", twin, "--wait=false")
    assert deleted.returncode != 0 and "forbidden" in deleted.stderr.lower(), deleted.stderr
    patched = remote.kubectl_as(consumer, "patch", "resourcequota", QUOTA, "-n", twin, "--type=merge",
                         "-p", json.dumps({"spec": {"hard": {"count/services": "100"}}}))
    assert patched.returncode != 0 and "forbidden" in patched.stderr.lower(), patched.stderr
    made = remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "mine"}, "spec": {"hard": {}}}))
    assert made.returncode != 0 and "forbidden" in made.stderr.lower(), made.stderr
    assert resourcequota(remote, twin)["spec"]["hard"] == ONE_SERVICE


def test_a_deleted_resourcequota_is_made_again(remote: Cluster, twin: str, wait) -> None:
    uid = resourcequota(remote, twin)["metadata"]["uid"]
    remote.kubectl("delete", "resourcequota", QUOTA, "-n", twin)
    wait(lambda: (resourcequota(remote, twin) or {}).get("metadata", {}).get("uid") not in (None, uid),
         timeout=30, what=f"ResourceQuota {QUOTA} made again in {twin}")
    assert resourcequota(remote, twin)["spec"]["hard"] == ONE_SERVICE


def test_raising_the_figure_on_the_consumer_lets_the_service_through(
    remote: Cluster, consumer: Path, twin: str, wait
) -> None:
    patch_consumer(remote, CONSUMER, {"quota": {"count/services": "2", "cpu": "2"}})
    wait(lambda: counted(resourcequota(remote, twin), "count/services", "2"), timeout=30,
         what=f"ResourceQuota {QUOTA} in {twin} raised to 2 and counted")
    second = remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(service("second")))
    assert second.returncode == 0, second.stderr
    third = remote.kubectl_as(consumer, "create", "-n", twin, "-f", "-", input=json.dumps(service("third")))
    assert third.returncode != 0 and f"exceeded quota: {QUOTA}" in third.stderr, third.stderr


def test_no_object_key_leaves_the_policys_bounds(remote: Cluster, twin: str, wait) -> None:
    # A Consumer whose quota has no object key keeps the policy's per-twin bounds
    # (twinNamespaces.maxObjects): no kind in a twin is unbounded.
    patch_consumer(remote, CONSUMER, {"quota": {"cpu": "2"}})
    wait(lambda: (q := resourcequota(remote, twin)) is not None and q["spec"]["hard"] == POLICY_BOUNDS, timeout=30,
         what=f"ResourceQuota {QUOTA} in {twin} back to the policy's bounds")
