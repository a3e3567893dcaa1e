"""Custom resources reflected both ways, end to end (docs/reflection.md "Custom resources").

A CRD with a status subresource is installed on both clusters; the harness's vkubelet is
restarted with ``--reflect-custom-resource`` for it. The provider's grant is the Consumer's
``spec.policy.customResources`` (patched here as the provider's admin); the enforcer binds
it into the twin as a Role it may only write because it holds the kind itself (what the
remote chart's ``enforcer.customResources`` gives it: a ClusterRole made here). The local
chart's ``vkubelet.customResources`` is likewise a ClusterRole for the vkubelet's local
identity. Then:

* a local object goes out with only the configured spec paths, by server-side apply (the
  remote copy's managedFields name the vkubelet's field manager), and a field another
  manager sets on the copy is left alone while a local change still wins;
* status the test writes remotely, as the provider's controller, comes back to the local
  object's status subresource (only the configured path);
* a spec field the provider does not grant is not sent (ProviderPolicyRefused on the
  local object) and the enforcer's webhook refuses it when written anyway; a kind it does
  not grant is refused by the provider's RBAC, and the vkubelet does not even send it;
* withdrawing the grant removes the Role and its binding.
"""

from __future__ import annotations

import json
import uuid

import pytest

from kube_offload import constants as c
from kube_offload_harness.cluster import Cluster
from enforcer.consumers.twin_grants import VERBS as GRANT_VERBS
from kube_offload_harness.identities import ENFORCER_SA, VKUBELET_SA, consumer_sa
from support.clusters import get_or_none, offloaded_namespace

LOCAL_ID = "local"
GROUP = "e2e.example.com"
TIMEOUT = 45
FLAG = (f"widgets.v1.{GROUP}:Widget:out=spec.size;spec.color;spec.shape:back=status.phase",
        f"gadgets.v1.{GROUP}:Gadget")
MANAGER_PREFIX = "kube-offload/"


def crd(plural: str, kind: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                }}},
            }],
        },
    }


def rbac(cluster: Cluster, name: str, namespace: str | None, subject, rules: list[dict]) -> None:
    """A (Cluster)Role and its binding for ``subject`` (a ServiceAccountRef)."""
    scope = "Role" if namespace else "ClusterRole"
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    cluster.apply([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": scope, "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{scope}Binding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": scope, "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": subject.name, "namespace": subject.namespace}]},
    ])


def restart_vkubelet(env, local: Cluster, extra_args: tuple[str, ...]) -> None:
    topology = env.topology()
    spec = topology.remotes[0]
    env.processes.stop(f"vkubelet-{spec.cluster_id}")
    env.start_vkubelet(topology, spec, extra_args)
    env.wait_virtual_node_ready(local, spec)


def set_grant(remote: Cluster, grants: list[dict]) -> None:
    remote.kubectl("patch", "consumer", LOCAL_ID, "--type", "merge",
                   "-p", json.dumps({"spec": {"policy": {"customResources": grants}}}))


@pytest.fixture(scope="module")
def twin(offload_env, local, remote, wait):
    ns = f"crd-{uuid.uuid4().hex[:6]}"
    twin_ns = f"{ns}-{LOCAL_ID}"
    for cluster in (local, remote):
        cluster.apply([crd("widgets", "Widget"), crd("gadgets", "Gadget")])
        cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{GROUP}", f"crd/gadgets.{GROUP}", "--timeout=30s")
    # The local chart's values for the opted-in kinds: read them in the offloaded
    # namespaces, write back their status.
    rbac(local, "e2e-vkubelet-custom-resources", None, VKUBELET_SA, [
        {"apiGroups": [GROUP], "resources": ["widgets", "gadgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [GROUP], "resources": ["widgets/status", "gadgets/status"], "verbs": ["patch"]},
    ])
    # The remote chart's enforcer.customResources: the kinds the enforcer may grant, which it
    # must hold itself to write a Role with them.
    rbac(remote, "e2e-enforcer-custom-resources", None, ENFORCER_SA, [
        {"apiGroups": [GROUP], "resources": ["widgets", "gadgets"], "verbs": list(GRANT_VERBS)},
    ])
    set_grant(remote, [{"group": GROUP, "resource": "widgets", "specFields": ["size", "color"]}])
    offloaded_namespace(local, ns)
    wait(lambda: get_or_none(remote, "namespace", "", twin_ns) is not None, timeout=TIMEOUT, what=f"twin namespace {twin_ns}")
    # The enforcer binds the grant into the twin: widgets only, never their status.
    role = wait(lambda: get_or_none(remote, "role", twin_ns, c.TWIN_CUSTOM_RESOURCES_NAME), timeout=TIMEOUT,
                what="the enforcer's custom resource Role in the twin")
    assert role["rules"] == [{"apiGroups": [GROUP], "resources": ["widgets"], "verbs": list(GRANT_VERBS)}]
    wait(lambda: get_or_none(remote, "rolebinding", twin_ns, c.TWIN_CUSTOM_RESOURCES_NAME), timeout=TIMEOUT,
         what="the enforcer's custom resource RoleBinding in the twin")
    restart_vkubelet(offload_env, local, tuple(arg for item in FLAG for arg in ("--reflect-custom-resource", item)))
    try:
        yield ns, twin_ns
    finally:
        restart_vkubelet(offload_env, local, ())
        set_grant(remote, [])
        local.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        local.kubectl("delete", "clusterrolebinding,clusterrole", "e2e-vkubelet-custom-resources", "--ignore-not-found", check=False)
        remote.kubectl("delete", "clusterrolebinding,clusterrole", "e2e-enforcer-custom-resources", "--ignore-not-found", check=False)


def widget(name: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_a_widget_goes_out_with_the_configured_fields_and_its_status_comes_back(twin, local, remote, wait):
    ns, twin_ns = twin
    local.apply({**widget("w1", size=3, color="red", internal="stays-home"), "metadata": {"name": "w1", "namespace": ns}})
    copy = wait(lambda: get_or_none(remote, f"widgets.{GROUP}", twin_ns, "w1"), timeout=TIMEOUT, what="remote widget w1")
    assert copy["spec"] == {"size": 3, "color": "red"}
    labels = copy["metadata"]["labels"]
    assert labels[c.LABEL_ORIGIN_CLUSTER_ID] == LOCAL_ID and labels[c.LABEL_REFLECTOR] == f"widgets.{GROUP}"
    shown = remote.kubectl_json("get", f"widgets.{GROUP}", "w1", "-n", twin_ns, "--show-managed-fields")
    managers = {m["manager"]: m["operation"] for m in shown["metadata"]["managedFields"]}
    assert any(name.startswith(MANAGER_PREFIX) and op == "Apply" for name, op in managers.items()), managers

    # The provider's controller writes status remotely: only status.phase comes back.
    remote.kubectl("patch", f"widgets.{GROUP}", "w1", "-n", twin_ns, "--subresource=status", "--type=merge",
                   "-p", json.dumps({"status": {"phase": "Ready", "providerDetail": "not for the consumer"}}))

    def status_back():
        status = (get_or_none(local, f"widgets.{GROUP}", ns, "w1") or {}).get("status") or {}
        return status if status.get("phase") == "Ready" else None

    status = wait(status_back, timeout=TIMEOUT, what="status.phase of w1 back locally")
    assert "providerDetail" not in status

    # A field another manager sets on the copy is left alone; a local change still wins.
    remote.kubectl("patch", f"widgets.{GROUP}", "w1", "-n", twin_ns, "--type=merge",
                   "-p", json.dumps({"spec": {"tier": "gold"}}))
    local.kubectl("patch", f"widgets.{GROUP}", "w1", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"size": 5}}))

    def updated():
        obj = get_or_none(remote, f"widgets.{GROUP}", twin_ns, "w1") or {}
        return obj if (obj.get("spec") or {}).get("size") == 5 else None

    copy = wait(updated, timeout=TIMEOUT, what="spec.size 5 on the remote widget")
    assert copy["spec"] == {"size": 5, "color": "red", "tier": "gold"}

    # A configured field removed locally is removed remotely.
    local.kubectl("patch", f"widgets.{GROUP}", "w1", "-n", ns, "--type=json", "-p",
                  json.dumps([{"op": "remove", "path": "/spec/color"}]))
    wait(lambda: "color" not in ((get_or_none(remote, f"widgets.{GROUP}", twin_ns, "w1") or {}).get("spec") or {"color": 1}),
         timeout=TIMEOUT, what="spec.color gone from the remote widget")

    local.kubectl("delete", f"widgets.{GROUP}", "w1", "-n", ns)
    wait(lambda: get_or_none(remote, f"widgets.{GROUP}", twin_ns, "w1") is None, timeout=TIMEOUT, what="remote widget w1 deleted")


def _refused_events(local: Cluster, ns: str, name: str) -> list[str]:
    items = local.kubectl_json("get", "events", "-n", ns)["items"]
    return [e.get("message") or "" for e in items
            if e.get("reason") == "ProviderPolicyRefused" and (e.get("involvedObject") or {}).get("name") == name]


def test_a_field_not_granted_is_not_sent(twin, local, remote, wait):
    ns, twin_ns = twin
    local.apply({**widget("w2", size=1, shape="round"), "metadata": {"name": "w2", "namespace": ns}})
    messages = wait(lambda: _refused_events(local, ns, "w2"), timeout=TIMEOUT, what="ProviderPolicyRefused on widget w2")
    # The rule book's words (kube_offload/object_rules.py): the field, the key that grants it, what it grants.
    assert any("spec.shape: not granted" in m and f"customResources[widgets.{GROUP}].specFields: size, color" in m
               for m in messages), messages
    assert get_or_none(remote, f"widgets.{GROUP}", twin_ns, "w2") is None


def test_a_kind_not_granted_is_refused(twin, local, remote, wait):
    ns, twin_ns = twin
    local.apply({"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": ns}, "spec": {"a": 1}})
    messages = wait(lambda: _refused_events(local, ns, "g1"), timeout=TIMEOUT, what="ProviderPolicyRefused on gadget g1")
    assert any(f"Gadget (gadgets.{GROUP}) is not granted" in m for m in messages), messages
    assert get_or_none(remote, f"gadgets.{GROUP}", twin_ns, "g1") is None
    # And the provider refuses it anyway: the consumer's identity holds no right on gadgets.
    account = consumer_sa(LOCAL_ID)
    result = remote.kubectl("create", "-n", twin_ns, "--as", f"system:serviceaccount:{account.namespace}:{account.name}",
                            "-f", "-", check=False, input=json.dumps(
                                {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"a": 1}}))
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr


def test_the_webhook_refuses_a_field_not_granted_written_directly(twin, remote):
    _ns, twin_ns = twin
    account = consumer_sa(LOCAL_ID)
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "direct"}, "spec": {"size": 1, "shape": "x"}}
    result = remote.kubectl("create", "-n", twin_ns, "--as", f"system:serviceaccount:{account.namespace}:{account.name}",
                            "-f", "-", check=False, input=json.dumps(body))
    assert result.returncode != 0, result.stdout
    assert "spec.shape not granted to consumer local" in result.stderr, result.stderr
    # Granted fields pass, and status stays the provider's.
    body["spec"] = {"size": 1}
    remote.kubectl("create", "-n", twin_ns, "--as", f"system:serviceaccount:{account.namespace}:{account.name}",
                   "-f", "-", input=json.dumps(body))
    result = remote.kubectl("patch", f"widgets.{GROUP}", "direct", "-n", twin_ns, "--subresource=status", "--type=merge",
                            "--as", f"system:serviceaccount:{account.namespace}:{account.name}",
                            "-p", json.dumps({"status": {"phase": "Forged"}}), check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    remote.kubectl("delete", f"widgets.{GROUP}", "direct", "-n", twin_ns)


def test_withdrawing_the_grant_removes_the_rights(twin, remote, wait):
    _ns, twin_ns = twin
    set_grant(remote, [])
    wait(lambda: get_or_none(remote, "role", twin_ns, c.TWIN_CUSTOM_RESOURCES_NAME) is None, timeout=TIMEOUT,
         what="the custom resource Role gone from the twin")
    wait(lambda: get_or_none(remote, "rolebinding", twin_ns, c.TWIN_CUSTOM_RESOURCES_NAME) is None, timeout=TIMEOUT,
         what="the custom resource RoleBinding gone from the twin")
