"""What the virtual kubelet exports to a provider, end to end on the shared loopback
environment (conftest.py): in an offloaded namespace an ordinary Secret is reflected
into the twin namespace in the real remote control plane, while the local cluster's
service-account token Secret, a Helm release record and a Secret annotated
``kube-offload.io/skip-reflection`` never are; and the vkubelet's local informers of
reflected kinds watch the offloaded namespaces only, starting and stopping as a
namespace opts in and out (read from its log: the watches it opens are the evidence).
"""

from __future__ import annotations

import base64
import time
import uuid

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from support.clusters import offloaded_namespace_manifest

LOCAL_ID = "local"  # the harness's local cluster id (default_topology)
TIMEOUT = 60  # seconds for one reflection to show on a loaded 2-core machine
# Kinds whose local informers are namespace-scoped (vkubelet/reflection/scope.py).
SCOPED_KINDS = ("configmaps", "secrets", "services", "endpointslices", "ingresses", "persistentvolumeclaims")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _exists(cluster: Cluster, kind: str, namespace: str, name: str) -> bool:
    result = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False)
    if result.returncode == 0:
        return True
    assert "NotFound" in result.stderr or "not found" in result.stderr, result.stderr
    return False


def _namespace(name: str, offloaded: bool) -> dict:
    if offloaded:
        return offloaded_namespace_manifest(name)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {}}}


def _secret(namespace: str, name: str, *, type_: str = "Opaque", labels=None, annotations=None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "type": type_,
        "data": {"value": _b64(f"{name}-secret-value")},
    }


def _vkubelet_log(env, remote: Cluster) -> str:
    path = env.log_path(f"vkubelet-{remote.spec.cluster_id}")
    return path.read_text(errors="replace") if path.exists() else ""


def test_credentials_helm_releases_and_skipped_secrets_are_never_exported(offload_env, local, remote, wait):
    ns = f"export-{uuid.uuid4().hex[:6]}"
    twin = f"{ns}-{LOCAL_ID}"
    local.apply(_namespace(ns, offloaded=True))
    try:
        wait(lambda: remote.kubectl("get", "namespace", twin, check=False).returncode == 0, timeout=TIMEOUT,
             what=f"twin namespace {twin}")
        never = {
            # The local cluster's own credential: a long-lived token of its API server.
            "sa-token": _secret(ns, "sa-token", type_="kubernetes.io/service-account-token",
                                annotations={"kubernetes.io/service-account.name": "default"}),
            # What `helm install` writes: every rendered manifest and value of a chart.
            "sh.helm.release.v1.web.v1": _secret(ns, "sh.helm.release.v1.web.v1", type_="helm.sh/release.v1",
                                                 labels={"owner": "helm", "name": "web", "version": "1"}),
            # The user's opt-out.
            "skipped": _secret(ns, "skipped", annotations={c.ANNOTATION_SKIP_REFLECTION: "true"}),
        }
        local.apply(list(never.values()))
        # Created after the others: once it is reflected, the reflector has long seen them.
        local.apply(_secret(ns, "ordinary"))
        wait(lambda: _exists(remote, "secret", twin, "ordinary"), timeout=TIMEOUT, what=f"secret {twin}/ordinary reflected")
        reflected = remote.kubectl_json("get", "secret", "ordinary", "-n", twin)
        assert reflected["data"]["value"] == _b64("ordinary-secret-value")
        assert reflected["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID

        # Give every worker several more chances (and one resync of our own doing: an
        # update of each) before concluding "never".
        for name in never:
            local.kubectl("annotate", "secret", name, "-n", ns, "e2e.kube-offload.io/touched=1", "--overwrite")
        local.kubectl("annotate", "secret", "ordinary", "-n", ns, "e2e.kube-offload.io/touched=1", "--overwrite")
        wait(
            lambda: (remote.kubectl_json("get", "secret", "ordinary", "-n", twin)["metadata"].get("annotations") or {})
            .get("e2e.kube-offload.io/touched") == "1",
            timeout=TIMEOUT, what="the ordinary secret's update reflected",
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            present = [name for name in never if _exists(remote, "secret", twin, name)]
            assert present == [], f"exported to the provider: {present}"
            time.sleep(1)

        # The skip annotation taken back: the Secret is exported after all; put back, it goes.
        local.kubectl("annotate", "secret", "skipped", "-n", ns, f"{c.ANNOTATION_SKIP_REFLECTION}-")
        wait(lambda: _exists(remote, "secret", twin, "skipped"), timeout=TIMEOUT, what="secret skipped reflected once allowed")
        local.kubectl("annotate", "secret", "skipped", "-n", ns, f"{c.ANNOTATION_SKIP_REFLECTION}=true")
        wait(lambda: not _exists(remote, "secret", twin, "skipped"), timeout=TIMEOUT,
             what="secret skipped deleted remotely once annotated again")
        # Allow-list annotations cannot lift the never-exported rule.
        local.kubectl("annotate", "secret", "sa-token", "-n", ns, f"{c.ANNOTATION_ALLOW_REFLECTION}=true")
        time.sleep(3)
        assert not _exists(remote, "secret", twin, "sa-token")
    finally:
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def test_local_reflection_watches_only_offloaded_namespaces(offload_env, local, remote, wait):
    suffix = uuid.uuid4().hex[:6]
    inside, outside = f"scope-in-{suffix}", f"scope-out-{suffix}"
    local.apply([_namespace(inside, offloaded=True), _namespace(outside, offloaded=False)])
    try:
        # The namespaced informers log each namespace they start and stop watching
        # (kube_offload/runtime/namespaced_informer.py).
        for kind in SCOPED_KINDS:
            wait(lambda kind=kind: f"local-{kind}: watching namespace {inside}" in _vkubelet_log(offload_env, remote),
                 timeout=TIMEOUT, what=f"a local {kind} watch in {inside}")
        # Something reflected from the inside namespace proves the scoped watch works.
        local.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": inside},
                     "data": {"k": "v"}})
        wait(lambda: _exists(remote, "configmap", f"{inside}-{LOCAL_ID}", "cfg"), timeout=TIMEOUT,
             what="configmap reflected from the offloaded namespace")

        log = _vkubelet_log(offload_env, remote)
        assert f"watching namespace {outside}" not in log, "a namespace that is not offloaded is watched"

        # Opting out stops the watches.
        local.kubectl("label", "namespace", inside, f"{c.LABEL_ENABLED}-")
        for kind in SCOPED_KINDS:
            wait(lambda kind=kind: f"local-{kind}: stopped watching namespace {inside}" in _vkubelet_log(offload_env, remote),
                 timeout=TIMEOUT, what=f"the local {kind} watch in {inside} stopped")
    finally:
        for ns in (inside, outside):
            local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
