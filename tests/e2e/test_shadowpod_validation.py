"""The ShadowPod validating webhook against the real remote control plane: the real
kube-apiserver calls the enforcer's webhook over HTTPS (registered by URL with
``kube-offload enforcer configuration``), and kubectl drives every scenario under the
consumer's own ServiceAccount token, never as admin.

The provider's side of a consumer is laid out here by hand as the installer and the
TwinNamespace controller would (tenant namespace, ServiceAccount, Consumer, a twin
namespace with its labels and RoleBinding), so this file depends on nothing but the
webhook. When the shared environment does not already run an enforcer with the webhook,
this module starts one: ``kube-offload enforcer`` under a ServiceAccount bound to exactly
the RBAC docs/enforcer.md lists (which this test thereby proves sufficient), with a
certificate from the ``certs`` package for IP 127.0.0.1; it stops it and removes the
registration afterwards, so later modules see the cluster as before.

Tests run in file order; each leaves no ShadowPod behind.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml

import kube_offload
from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster, free_port

MANIFESTS = Path(kube_offload.__file__).parent / "manifests"
REPO = MANIFESTS.parents[1]

A, B = "e2e-val-a", "e2e-val-b"  # two consumers
TWIN = f"val-{A}"  # consumer A's twin namespace
DENIED = f'admission webhook "{c.SHADOWPOD_WEBHOOK_NAME}" denied the request'
QUOTA = {"pods": "2", "cpu": "1"}
TWIN_ROLE = "e2e-val-consumer-twin"
ENFORCER_NS = "e2e-val-enforcer"
ENFORCER_SA = "enforcer"

# Exactly what the enforcer's code calls (docs/enforcer.md, "RBAC"): the ShadowPod
# controller's rules plus the webhook's.
ENFORCER_RULES = [
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods/status"], "verbs": ["patch"]},
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    # the webhook
    {"apiGroups": ["kube-offload.io"], "resources": ["consumers"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces", "serviceaccounts"], "verbs": ["get", "list", "watch"]},
    # the verdict cache's key (on by default)
    {"apiGroups": [""], "resources": ["limitranges", "resourcequotas"], "verbs": ["list", "watch"]},
]
# Leader election (docs/enforcer.md, "RBAC"; docs/high-availability.md): the Lease, in
# the enforcer's own namespace only.
ENFORCER_LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
# What the enforcer's RoleBinding gives a consumer in its twin namespace (the part used here).
TWIN_RULES = [
    {"apiGroups": ["kube-offload.io"], "resources": ["shadowpods"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
]


@dataclass
class Consumer:
    consumer_id: str
    kubeconfig: Path

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{c.tenant_namespace(self.consumer_id)}:{c.CONSUMER_SERVICE_ACCOUNT}"


@dataclass
class Provider:
    remote: Cluster
    a: Consumer
    b: Consumer

    def as_consumer(self, who: Consumer, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        """kubectl with only ``who``'s token (its own kubeconfig, no admin credentials)."""
        argv = [str(self.remote.bins.kubectl), "--kubeconfig", str(who.kubeconfig), *args]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60, env=self.remote.env())

    def create(self, who: Consumer, shadowpod: dict, namespace: str = TWIN) -> subprocess.CompletedProcess:
        return self.as_consumer(who, "create", "-n", namespace, "-f", "-", input=json.dumps(shadowpod))


# --- objects ------------------------------------------------------------------------------------
def shadowpod(name: str, *, consumer_id: str = A, cpu: str = "100m", **spec) -> dict:
    pod_spec = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}
    pod_spec.update(spec)
    origin = {c.LABEL_ORIGIN_CLUSTER_ID: consumer_id}
    return {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SHADOWPOD_KIND,
        "metadata": {"name": name, "labels": origin},
        "spec": {"pod": {"metadata": {"labels": {"app": name, **origin}}, "spec": pod_spec}},
    }


def container(**security) -> list[dict]:
    return [{"name": "app", "image": "nginx", "securityContext": security}]


def tenant_objects(consumer_id: str) -> list[dict]:
    tenant = c.tenant_namespace(consumer_id)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant, "labels": {c.LABEL_TENANT: consumer_id}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": c.CONSUMER_SERVICE_ACCOUNT, "namespace": tenant}},
        {
            "apiVersion": f"{c.DOMAIN}/v1alpha1",
            "kind": c.CONSUMER_KIND,
            "metadata": {"name": consumer_id},
            "spec": {"podSecurityLevel": "baseline", "quota": QUOTA},
        },
    ]


def twin_objects(consumer_id: str, name: str) -> list[dict]:
    """A twin namespace as the TwinNamespace controller makes it (design, section 1)."""
    tenant = c.tenant_namespace(consumer_id)
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {
                    c.LABEL_ORIGIN_CLUSTER_ID: consumer_id,
                    c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
                    c.LABEL_PSA_ENFORCE: "baseline",
                    c.LABEL_PSA_ENFORCE_VERSION: "latest",
                },
                "annotations": {c.ANNOTATION_TWIN_OF: "demo", c.ANNOTATION_TWIN_REQUEST: f"{tenant}/{name}"},
            },
        },
        role_binding(name, consumer_id, c.TWIN_ROLEBINDING_NAME),
        # A ServiceAccount the consumer reflected, and one the provider made.
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "reflected", "namespace": name, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: consumer_id}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "provider-sa", "namespace": name}},
    ]


def role_binding(namespace: str, consumer_id: str, name: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TWIN_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": c.CONSUMER_SERVICE_ACCOUNT, "namespace": c.tenant_namespace(consumer_id)}],
    }


def token_kubeconfig(remote: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding only a TokenRequest token of ``namespace/account``."""
    token = remote.kubectl("create", "token", account, "-n", namespace, "--duration", "2h").stdout.strip()
    admin = yaml.safe_load(remote.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "remote", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": account}}],
        "current-context": "remote",
    }))
    path.chmod(0o600)
    return path


# --- the enforcer with its webhook ---------------------------------------------------------------
class WebhookEnforcer:
    """``kube-offload enforcer`` with the webhook, as a subprocess signalled by its PID only."""

    def __init__(self, remote: Cluster, directory: Path) -> None:
        self.remote = remote
        self.directory = directory
        self.port = free_port()
        self.log = directory / "enforcer-webhook.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        from certs import pki

        ca = pki.generate_ca("e2e ShadowPod webhook CA", 1)
        serving = pki.issue_serving_cert(ca, ip_addresses=["127.0.0.1"], days=1)
        (self.directory / "ca.crt").write_bytes(ca.cert_pem)
        (self.directory / "tls.crt").write_bytes(serving.cert_pem)
        key = self.directory / "tls.key"
        key.write_bytes(serving.key_pem)
        key.chmod(0o600)

        remote = self.remote
        remote.apply([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ENFORCER_NS}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ENFORCER_SA, "namespace": ENFORCER_NS}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "e2e-val-enforcer"},
             "rules": ENFORCER_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "e2e-val-enforcer"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-val-enforcer"},
             "subjects": [{"kind": "ServiceAccount", "name": ENFORCER_SA, "namespace": ENFORCER_NS}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "e2e-val-enforcer-leader-election", "namespace": ENFORCER_NS}, "rules": ENFORCER_LEASE_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "e2e-val-enforcer-leader-election", "namespace": ENFORCER_NS},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-val-enforcer-leader-election"},
             "subjects": [{"kind": "ServiceAccount", "name": ENFORCER_SA, "namespace": ENFORCER_NS}]},
        ])
        kubeconfig = token_kubeconfig(remote, ENFORCER_NS, ENFORCER_SA, self.directory / "enforcer.kubeconfig")
        argv = [
            sys.executable, "-m", "kube_offload.cli", "enforcer", "--kubeconfig", str(kubeconfig),
            "--webhook-bind", f"127.0.0.1:{self.port}",
            "--webhook-tls-cert", str(self.directory / "tls.crt"), "--webhook-tls-key", str(key),
            "--leader-elect-namespace", ENFORCER_NS,
            "--log-level", "DEBUG",
        ]
        env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PYTHONUNBUFFERED="1")
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, cwd=REPO, start_new_session=True)
        self._wait_ready()
        registration = subprocess.run(
            [sys.executable, "-m", "kube_offload.cli", "enforcer", "configuration",
             "--url", f"https://127.0.0.1:{self.port}", "--ca-file", str(self.directory / "ca.crt")],
            capture_output=True, text=True, check=True, cwd=REPO, timeout=60,
        )
        remote.kubectl("apply", "-f", "-", input=registration.stdout)

    def _wait_ready(self, timeout: float = 60) -> None:
        context = ssl.create_default_context(cafile=str(self.directory / "ca.crt"))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"enforcer exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=context, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except Exception as exc:  # not listening yet, or 503 until the caches sync
                last = str(exc)
            time.sleep(0.3)
        pytest.fail(f"ShadowPod webhook not ready after {timeout}s ({last}):\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.remote.kubectl("delete", "validatingwebhookconfiguration", c.SHADOWPOD_WEBHOOK_CONFIGURATION,
                            "--ignore-not-found", check=False)
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.remote.kubectl("delete", "clusterrolebinding,clusterrole", "e2e-val-enforcer", "--ignore-not-found", check=False)
        self.remote.kubectl("delete", "namespace", ENFORCER_NS, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def provider(remote: Cluster, tmp_path_factory, wait) -> Iterator[Provider]:
    directory = tmp_path_factory.mktemp("shadowpod-validation")
    for crd in ("consumer-crd.yaml", "twinnamespace-crd.yaml"):
        remote.kubectl("apply", "-f", str(MANIFESTS / crd))
    remote.kubectl("wait", "--for=condition=Established", "crd/consumers.kube-offload.io", "--timeout=60s")

    enforcer = None
    registered = remote.kubectl("get", "validatingwebhookconfiguration", c.SHADOWPOD_WEBHOOK_CONFIGURATION, check=False)
    if registered.returncode != 0:
        enforcer = WebhookEnforcer(remote, directory)
    try:
        remote.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": TWIN_ROLE}, "rules": TWIN_RULES},
            *tenant_objects(A),
            *tenant_objects(B),
            *twin_objects(A, TWIN),
        ])
        if enforcer is not None:
            enforcer.start()
        world = Provider(
            remote,
            Consumer(A, token_kubeconfig(remote, c.tenant_namespace(A), c.CONSUMER_SERVICE_ACCOUNT, directory / "a.kubeconfig")),
            Consumer(B, token_kubeconfig(remote, c.tenant_namespace(B), c.CONSUMER_SERVICE_ACCOUNT, directory / "b.kubeconfig")),
        )
        # The registration takes effect when the apiserver's webhook informer sees it.
        wait(lambda: DENIED in remote.kubectl("create", "-n", "default", "--dry-run=server", "-f", "-",
                                               input=json.dumps(shadowpod("probe")), check=False).stderr,
             timeout=30, what="the apiserver to call the ShadowPod webhook")
        yield world
    finally:
        if enforcer is not None:
            enforcer.stop()
        remote.kubectl("delete", "namespace", TWIN, c.tenant_namespace(A), c.tenant_namespace(B),
                       "--ignore-not-found", "--wait=false", check=False)
        remote.kubectl("delete", "consumers.kube-offload.io", A, B, "--ignore-not-found", check=False)
        remote.kubectl("delete", "clusterrole", TWIN_ROLE, "--ignore-not-found", check=False)


@pytest.fixture(autouse=True)
def no_shadowpods_left(provider: Provider, wait) -> Iterator[None]:
    yield
    remote = provider.remote
    remote.kubectl("delete", "shadowpods", "--all", "-n", TWIN, "--wait=true", "--timeout=60s", check=False)
    remote.kubectl("patch", "consumers.kube-offload.io", A, "--type=merge", "-p", json.dumps({"spec": {"cordoned": False}}))
    remote.kubectl("delete", "rolebinding", "-n", TWIN, "e2e-val-misconfigured", "--ignore-not-found", check=False)
    wait(lambda: not remote.kubectl_json("get", "shadowpods", "-n", TWIN)["items"], timeout=60, what="ShadowPods deleted")


def refused(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode != 0, f"expected a refusal, got: {result.stdout}"
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in: {result.stderr}"
    return result.stderr


# --- scenarios ---------------------------------------------------------------------------------------
def test_a_good_shadowpod_is_admitted_and_runs(provider: Provider, wait) -> None:
    created = provider.create(provider.a, shadowpod("good"))
    assert created.returncode == 0, created.stderr
    assert "shadowpod.kube-offload.io/good created" in created.stdout
    # The enforcer (the shared environment's, or this module's) makes its Pod.
    wait(lambda: provider.remote.kubectl("get", "pod", "-n", TWIN, "good", check=False).returncode == 0,
         timeout=60, what="the Pod of ShadowPod good")


FORBIDDEN = [
    pytest.param(dict(hostNetwork=True), "spec.pod.spec.hostNetwork: host namespaces are not allowed", id="hostNetwork"),
    pytest.param(dict(containers=container(privileged=True)),
                 'spec.pod.spec.containers[0].securityContext.privileged: container "app" may not be privileged', id="privileged"),
    pytest.param(dict(containers=container(capabilities={"add": ["SYS_ADMIN"]})),
                 'spec.pod.spec.containers[0].securityContext.capabilities.add: container "app" may not add SYS_ADMIN', id="SYS_ADMIN"),
    pytest.param(dict(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
                 'spec.pod.spec.volumes[0].hostPath: volume "root"', id="hostPath"),
    pytest.param(dict(nodeName="some-node"), "spec.pod.spec.nodeName: a consumer's pods may not name a node", id="nodeName"),
    pytest.param(dict(serviceAccountName="provider-sa"),
                 f'spec.pod.spec.serviceAccountName: ServiceAccount "provider-sa" is not one that consumer "{A}" reflected',
                 id="foreign-serviceAccountName"),
]


@pytest.mark.parametrize("spec, message", FORBIDDEN)
def test_forbidden_fields_are_refused_naming_the_field(provider: Provider, spec: dict, message: str) -> None:
    stderr = refused(provider.create(provider.a, shadowpod("bad", **spec)), DENIED, message)
    assert stderr.startswith("The request is invalid")  # kubectl words the 422 the webhook gave


def test_a_reflected_service_account_is_allowed(provider: Provider) -> None:
    created = provider.create(provider.a, shadowpod("with-sa", serviceAccountName="reflected"))
    assert created.returncode == 0, created.stderr


def test_pod_security_decides_what_the_static_rules_do_not(provider: Provider) -> None:
    # hostPort is not among the webhook's own rules: the dry run's Pod Security admission
    # (baseline, from the twin namespace's label) refuses it, and its reason is passed on.
    spec = dict(containers=[{"name": "app", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 8080}]}])
    # The second pod of the template is judged by the verdict the first one's dry run left
    # (enforcer/admission/verdict_cache.py): refused with the same words.
    for name in ("host-port", "host-port-2"):
        obj = shadowpod(name, **spec)
        obj["spec"]["pod"]["metadata"]["labels"]["app"] = "host-port"  # one template
        refused(provider.create(provider.a, obj),
                DENIED, "the provider would refuse this Pod: violates PodSecurity", "hostPort")


def test_quota_refuses_then_admits_after_another_goes(provider: Provider, wait) -> None:
    for name in ("q1", "q2"):
        created = provider.create(provider.a, shadowpod(name))
        assert created.returncode == 0, created.stderr
    refused(provider.create(provider.a, shadowpod("q3")), DENIED, f'exceeded quota of consumer "{A}"',
            "pods: requested 1, used 2, quota 2")
    cpu = refused(provider.create(provider.a, shadowpod("q3", cpu="900m")), DENIED)
    assert "cpu: requested 900m, used 200m, quota 1" in cpu
    deleted = provider.as_consumer(provider.a, "delete", "shadowpod", "-n", TWIN, "q1", "--wait=true")
    assert deleted.returncode == 0, deleted.stderr
    wait(lambda: provider.create(provider.a, shadowpod("q3")).returncode == 0, timeout=30,
         what="q3 admitted once q1 is gone")


def test_a_cordoned_consumer_cannot_create(provider: Provider, wait) -> None:
    existing = provider.create(provider.a, shadowpod("before-cordon"))
    assert existing.returncode == 0, existing.stderr
    provider.remote.kubectl("patch", "consumers.kube-offload.io", A, "--type=merge", "-p", '{"spec":{"cordoned":true}}')
    stderr = wait(lambda: (r := provider.create(provider.a, shadowpod("after-cordon"))).returncode != 0 and r.stderr,
                  timeout=30, what="creates refused once the Consumer is cordoned")
    assert f'consumer "{A}" is cordoned by the provider' in stderr and "existing ones keep running" in stderr
    assert provider.remote.kubectl("get", "shadowpod", "-n", TWIN, "before-cordon", check=False).returncode == 0


def test_a_second_consumer_cannot_create_in_the_first_ones_namespace(provider: Provider, wait) -> None:
    intruder = shadowpod("intruder", consumer_id=B)
    # RBAC stops it first ...
    refused(provider.create(provider.b, intruder), "Forbidden", 'cannot create resource "shadowpods"')
    # ... and were the provider to bind it there by mistake, the webhook still does.
    provider.remote.apply(role_binding(TWIN, B, "e2e-val-misconfigured"))
    stderr = wait(lambda: (r := provider.create(provider.b, intruder)).returncode != 0 and DENIED in r.stderr and r.stderr,
                  timeout=30, what="the webhook to refuse consumer B")
    assert f'user "{provider.b.username}" may not write ShadowPods in namespace "{TWIN}"' in stderr
    assert f'belongs to consumer "{A}"' in stderr
    # Even with A's origin label it is A's namespace, not B's identity.
    refused(provider.create(provider.b, shadowpod("intruder2")), DENIED, "may not write ShadowPods")


def test_shadowpods_outside_twin_namespaces_are_refused_even_for_admin(provider: Provider) -> None:
    result = provider.remote.kubectl("create", "-n", "kube-system", "-f", "-", input=json.dumps(shadowpod("sneaky")), check=False)
    refused(result, DENIED, 'namespace "kube-system" is not a twin namespace made by the enforcer')
