"""A provider revoking the consumer's access to ONE twin namespace, end to end on the
shared loopback environment (conftest.py).

The provider's admin deletes the consumer RoleBinding ``kube-offload-consumer`` in one twin
(and keeps the enforcer from writing it back with a ValidatingAdmissionPolicy, as a
provider would while it investigates), so every LIST the vkubelet makes there answers 403
while the TwinNamespace request still says Ready. After a vkubelet restart:

* the other offloaded namespace is not held hostage: a pod created there runs (the bug was
  that the loops waited for every twin's first list, for ever);
* the forbidden namespace is reported (a Warning log line naming it and the fix, a Warning
  Event on its pods), and nothing is done there on the strength of an empty cache: its
  running pod is neither failed nor deleted, nothing is created twice, and reflection
  writes nothing there (no ReflectionFailed Events);
* once access is restored (the RoleBinding written back), that namespace's pods are
  mirrored again, the one created meanwhile is offloaded, and nothing is duplicated.
"""

from __future__ import annotations

import json
import os
import re
import signal

import yaml

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import twin_namespace as twin, unique, virtual_node_name
from support.clusters import offloaded_namespace

IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
POLICY = "e2e-keep-twin-rolebinding-revoked"
POLICY_WORDS = "e2e: the consumer's access to this twin is revoked"
# Reason of the Warning Event a pod of a forbidden twin gets (vkubelet/shared/events.py).
REASON_TWIN_FORBIDDEN = "TwinNamespaceForbidden"
REASON_REFLECTION_FAILED = "ReflectionFailed"


def make_pod(local: Cluster, namespace: str, name: str) -> None:
    local.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": IMAGE}], "terminationGracePeriodSeconds": 2},
    })


def local_pod(local: Cluster, namespace: str, name: str) -> dict | None:
    result = local.kubectl("get", "pod", name, "-n", namespace, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(result.stdout) if result.returncode == 0 and result.stdout.strip() else None


def phase(local: Cluster, namespace: str, name: str) -> str | None:
    pod = local_pod(local, namespace, name)
    return ((pod or {}).get("status") or {}).get("phase")


def remote_items(remote: Cluster, kind: str, namespace: str) -> list[dict]:
    return remote.kubectl_json("get", kind, "-n", namespace)["items"]


def restart_count(pod: dict | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount") or 0)


def policy(namespace: str) -> list[dict]:
    """Deny (re)creating the consumer RoleBinding in ``namespace`` (the enforcer would)."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["rolebindings"],
                }]},
                "validations": [{
                    "expression": f"!(request.namespace == '{namespace}' && object.metadata.name == '{c.TWIN_ROLEBINDING_NAME}')",
                    "message": POLICY_WORDS,
                    "reason": "Forbidden",
                }],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    ]


def policy_enforced(remote: Cluster, binding: dict) -> bool:
    """The apiserver loads policies asynchronously: probe with a server-side dry run."""
    result = remote.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(binding), check=False)
    return result.returncode != 0 and POLICY_WORDS in result.stderr


def drop_policy(remote: Cluster) -> None:
    remote.kubectl("delete", "validatingadmissionpolicybinding", POLICY, "--ignore-not-found", check=False)
    remote.kubectl("delete", "validatingadmissionpolicy", POLICY, "--ignore-not-found", check=False)


def restart_vkubelet(env: Environment, remote: Cluster, wait) -> None:
    record = env.processes.get(f"vkubelet-{remote.spec.cluster_id}")
    assert record is not None, "the harness did not start a vkubelet"
    os.kill(record.pid, signal.SIGTERM)
    wait(lambda: not record.running(), timeout=20, what="the vkubelet to exit on SIGTERM")
    env.start_vkubelet(env.topology(), remote.spec)


def log_text(env: Environment, remote: Cluster, offset: int) -> str:
    path = env.log_path(f"vkubelet-{remote.spec.cluster_id}")
    return path.read_bytes()[offset:].decode(errors="replace") if path.exists() else ""


def events(local: Cluster, namespace: str, reason: str) -> list[dict]:
    items = local.kubectl_json("get", "events", "-n", namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def test_a_forbidden_twin_does_not_hold_the_others_hostage_and_recovers(offload_env: Environment, local, remote, wait):
    open_ns, shut_ns = unique("fbd-open"), unique("fbd-shut")
    open_twin, shut_twin = twin(open_ns), twin(shut_ns)
    node = virtual_node_name(remote.spec.cluster_id)
    binding_saved: dict | None = None
    try:
        for ns in (open_ns, shut_ns):
            offloaded_namespace(local, ns)
            make_pod(local, ns, "first")
        for ns in (open_ns, shut_ns):
            wait(lambda ns=ns: phase(local, ns, "first") == "Running", timeout=120, what=f"{ns}/first Running")
        shut_shadow = remote_items(remote, "shadowpods.kube-offload.io", shut_twin)
        assert [s["metadata"]["name"] for s in shut_shadow] == ["first"]
        shut_shadow_uid = shut_shadow[0]["metadata"]["uid"]

        # The provider revokes the consumer's access to one twin, and keeps it revoked.
        binding_saved = remote.kubectl_json("get", "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", shut_twin)
        remote.apply(policy(shut_twin))
        probe = {k: v for k, v in binding_saved.items() if k in ("apiVersion", "kind", "roleRef", "subjects")}
        probe["metadata"] = {"name": c.TWIN_ROLEBINDING_NAME, "namespace": shut_twin}
        wait(lambda: policy_enforced(remote, probe), timeout=60, what="the admission policy to be enforced")
        remote.kubectl("delete", "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", shut_twin)
        wait(lambda: remote.kubectl("get", "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", shut_twin,
                                    check=False).returncode != 0,
             timeout=30, what="the consumer RoleBinding to stay deleted")

        log_offset = offload_env.log_path(f"vkubelet-{remote.spec.cluster_id}").stat().st_size
        restart_vkubelet(offload_env, remote, wait)

        # The other namespace is managed: a new pod there is offloaded and runs.
        make_pod(local, open_ns, "after")
        wait(lambda: phase(local, open_ns, "after") == "Running", timeout=120,
             what=f"{open_ns}/after Running while twin {shut_twin} is forbidden")
        # The forbidden one is reported, by name and with the fix.
        make_pod(local, shut_ns, "meanwhile")
        local.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "meanwhile", "namespace": shut_ns},
                     "data": {"written": "while the twin was forbidden"}})

        def reported():
            text = log_text(offload_env, remote, log_offset)
            return [line for line in text.splitlines()
                    if "WARNING" in line and shut_twin in line and c.TWIN_ROLEBINDING_NAME in line]

        lines = wait(reported, timeout=60, what=f"a Warning naming {shut_twin} and the RoleBinding to restore")
        assert "403" in lines[0] or "forbidden" in lines[0].lower(), lines[0]
        assert not [line for line in log_text(offload_env, remote, log_offset).splitlines()
                    if "WARNING" in line and open_twin in line and "forbidden" in line.lower()]
        warned = wait(lambda: events(local, shut_ns, REASON_TWIN_FORBIDDEN), timeout=60,
                      what=f"a {REASON_TWIN_FORBIDDEN} Event in {shut_ns}")
        assert shut_twin in warned[0]["message"] and c.TWIN_ROLEBINDING_NAME in warned[0]["message"], warned[0]
        # Nothing acted on the empty cache of the forbidden twin: the running pod is
        # neither failed nor deleted, the new one waits, nothing remote was touched.
        first = local_pod(local, shut_ns, "first")
        assert first is not None and first["status"]["phase"] == "Running", first
        assert phase(local, shut_ns, "meanwhile") == "Pending"
        assert [s["metadata"]["uid"] for s in remote_items(remote, "shadowpods.kube-offload.io", shut_twin)] == [shut_shadow_uid]
        # Reflection tried nothing there: the one report is the pod loop's (before, every
        # reflected object got a ReflectionFailed Event every 30 s).
        assert events(local, shut_ns, REASON_REFLECTION_FAILED) == []

        # The provider restores access: the namespace is managed again.
        drop_policy(remote)
        restored = {k: v for k, v in binding_saved.items() if k in ("apiVersion", "kind", "roleRef", "subjects")}
        restored["metadata"] = {k: v for k, v in binding_saved["metadata"].items()
                                if k in ("name", "namespace", "labels", "annotations")}
        wait(lambda: remote.kubectl("create", "-f", "-", input=yaml.safe_dump(restored), check=False).returncode == 0
             or remote.kubectl("get", "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", shut_twin, check=False).returncode == 0,
             timeout=60, what="the consumer RoleBinding back")
        wait(lambda: phase(local, shut_ns, "meanwhile") == "Running", timeout=120,
             what=f"{shut_ns}/meanwhile offloaded once access is back")
        wait(lambda: remote.kubectl("get", "configmap", "meanwhile", "-n", shut_twin, check=False).returncode == 0,
             timeout=60, what=f"the ConfigMap written meanwhile reflected to {shut_twin}")
        # Mirrored again: the remote pod deleted by the provider is recreated by the
        # enforcer, and the local pod counts the restart.
        before = restart_count(local_pod(local, shut_ns, "first"))
        remote.kubectl("delete", "pod", "first", "-n", shut_twin, "--grace-period=0", "--force", check=False)
        wait(lambda: restart_count(local_pod(local, shut_ns, "first")) > before, timeout=90,
             what=f"{shut_ns}/first's remote restart mirrored")
        # Nothing duplicated: one ShadowPod per local pod (the first one never replaced),
        # one remote pod each, every local pod Running on the virtual node.
        shadows = {s["metadata"]["name"]: s["metadata"]["uid"] for s in remote_items(remote, "shadowpods.kube-offload.io", shut_twin)}
        assert sorted(shadows) == ["first", "meanwhile"] and shadows["first"] == shut_shadow_uid, shadows
        wait(lambda: sorted(p["metadata"]["name"] for p in remote_items(remote, "pods", shut_twin)) == ["first", "meanwhile"],
             timeout=60, what="one remote pod per local pod")
        for ns, names in ((open_ns, ["after", "first"]), (shut_ns, ["first", "meanwhile"])):
            items = local.kubectl_json("get", "pods", "-n", ns)["items"]
            assert sorted(p["metadata"]["name"] for p in items) == names
            assert all(p["spec"].get("nodeName") == node for p in items)
        wait(lambda: phase(local, shut_ns, "first") == "Running", timeout=60, what=f"{shut_ns}/first Running again")
        assert not re.search(rf"WARNING.*{re.escape(open_twin)}.*forbidden", log_text(offload_env, remote, log_offset))
    finally:
        drop_policy(remote)
        if binding_saved is not None and remote.kubectl("get", "rolebinding", c.TWIN_ROLEBINDING_NAME, "-n", shut_twin,
                                                        check=False).returncode != 0:
            restored = {k: v for k, v in binding_saved.items() if k in ("apiVersion", "kind", "roleRef", "subjects")}
            restored["metadata"] = {"name": c.TWIN_ROLEBINDING_NAME, "namespace": shut_twin,
                                    "labels": binding_saved["metadata"].get("labels") or {}}
            remote.kubectl("create", "-f", "-", input=yaml.safe_dump(restored), check=False)
        for ns in (open_ns, shut_ns):
            local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
