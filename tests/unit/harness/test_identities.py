"""The harness runs components under their charts' identities: which rendered objects are
identities, and the kubeconfig built from a token (harness/kube_offload_harness/identities.py)."""

from __future__ import annotations

import pytest

from kube_offload_harness import identities


def _obj(kind: str, name: str, **annotations: str) -> dict:
    meta: dict = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": kind, "metadata": meta}


def test_identity_objects_keep_rbac_crds_and_consumers_and_order_crds_first() -> None:
    rendered = [
        _obj("Deployment", "kube-offload-enforcer"),
        _obj("ClusterRole", "kube-offload-enforcer"),
        _obj("Namespace", "kube-offload-tenant-local"),
        _obj("Consumer", "local"),
        None,
        _obj("ValidatingWebhookConfiguration", "kube-offload-enforcer"),
        _obj("CustomResourceDefinition", "consumers.kube-offload.io"),
        _obj("Service", "kube-offload-enforcer"),
        _obj("ServiceAccount", "consumer"),
        _obj("Secret", "consumer-token"),
    ]
    kept = identities.identity_objects(rendered)
    assert [(o["kind"], o["metadata"]["name"]) for o in kept] == [
        ("CustomResourceDefinition", "consumers.kube-offload.io"),
        ("Namespace", "kube-offload-tenant-local"),
        ("ClusterRole", "kube-offload-enforcer"),
        ("Consumer", "local"),
        ("ServiceAccount", "consumer"),
    ]


def test_identity_objects_drop_hooks() -> None:
    hook = _obj("ServiceAccount", "kube-offload-certs-hook", **{"helm.sh/hook": "pre-install"})
    assert identities.identity_objects([hook, _obj("Role", "r")]) == [_obj("Role", "r")]


ADMIN = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "kwok-x", "cluster": {"server": "https://127.0.0.1:3456", "certificate-authority": "/p/ca.crt"}}],
    "users": [{"name": "kwok-x", "user": {"client-certificate": "/p/admin.crt", "client-key": "/p/admin.key"}}],
    "contexts": [{"name": "kwok-x", "context": {"cluster": "kwok-x", "user": "kwok-x"}}],
    "current-context": "kwok-x",
}


def test_token_kubeconfig_keeps_server_and_ca_and_replaces_credentials() -> None:
    config = identities.token_kubeconfig(ADMIN, "tok", "system:serviceaccount:ns:sa")
    assert config["clusters"] == ADMIN["clusters"]
    assert config["users"] == [{"name": "system:serviceaccount:ns:sa", "user": {"token": "tok"}}]
    assert config["current-context"] == "system:serviceaccount:ns:sa"
    assert "admin.key" not in str(config)


def test_token_kubeconfig_needs_a_current_context() -> None:
    with pytest.raises(identities.IdentityError, match="no current context"):
        identities.token_kubeconfig({**ADMIN, "contexts": [], "current-context": "nope"}, "t", "u")


def test_service_account_username_and_consumer_identity() -> None:
    assert identities.consumer_sa("local").username == "system:serviceaccount:kube-offload-tenant-local:consumer"


def test_values_for_the_topology() -> None:
    assert identities.local_values("local", ["remote-1"]) == {
        "localClusterId": "local",
        "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig"}],
        "storage": {"localClass": "local-path"},
    }
    values = identities.remote_values("local", node_labels={"topology.kubernetes.io/region": "eu-west"}, quota={"pods": "3"})
    assert values["consumers"] == [{"name": "local", "createTokenSecret": False, "quota": {"pods": "3"}, "policy": identities.E2E_POLICY}]
    assert "policy" not in identities.remote_values("local", node_labels={}, policy=None)["consumers"][0]
    assert values["nodeLabels"] == {"topology.kubernetes.io/region": "eu-west"}
    granted = identities.remote_values("local", node_labels={}, policy=identities.E2E_POLICY)
    assert granted["consumers"][0]["policy"] == identities.E2E_POLICY


def test_the_e2e_grants_are_a_valid_provider_policy() -> None:
    from kube_offload.provider_policy import parse_policy

    from kube_offload_harness.cluster import LOCAL_POD_CIDR_REMAPPED

    policy = parse_policy(identities.E2E_POLICY)
    assert policy.endpoints.cidrs == (LOCAL_POD_CIDR_REMAPPED,)
    assert policy.services.types == () and policy.pods.priority_classes == ()  # the rest: defaults


def test_the_tests_policy_parses_and_grants_only_what_tests_name() -> None:
    from kube_offload import provider_policy
    from kube_offload_harness import storage

    policy = provider_policy.parse_policy(identities.E2E_POLICY)
    assert policy.pods.tolerations == (identities.TOLERATION_GRANTED_IN_TESTS,)
    assert policy.storage.classes == (storage.LOCAL_PATH_CLASS,)
    assert policy.pods.priority_classes == () and policy.services.types == ()


def test_of_components_keeps_only_the_named_components() -> None:
    def labelled(kind: str, name: str, component: str | None) -> dict:
        labels = {"app.kubernetes.io/component": component} if component else {}
        return {"kind": kind, "metadata": {"name": name, "labels": labels}}

    objects = [
        labelled("ServiceAccount", "kube-offload-webhook", "webhook"),
        labelled("ClusterRole", "kube-offload-extender", "extender"),
        labelled("ClusterRole", "kube-offload-vkubelet", "vkubelet"),
        labelled("ServiceAccount", "kube-offload-certs", "certificates"),
        labelled("StorageClass", "kube-offload", None),
    ]
    kept = identities.of_components(objects, ("webhook", "extender"))
    assert [o["metadata"]["name"] for o in kept] == ["kube-offload-webhook", "kube-offload-extender"]


def test_down_forgets_the_environments_minted_kubeconfigs(tmp_path):
    """A later `cluster up` in the same state directory must mint new tokens: the old
    ones name clusters (ports, CAs) that no longer exist (make demo after make down)."""
    from kube_offload_harness import binaries
    from kube_offload_harness.cluster import Environment

    env = Environment(tmp_path, bins=binaries.binaries(root=tmp_path / "cache"), say=lambda _: None)
    minted = tmp_path / "identities" / "demo-local--kube-offload--kube-offload-webhook.yaml"
    minted.parent.mkdir()
    minted.write_text("token: old")
    via_link = tmp_path / "vkubelet-remote-1-via-link-kubeconfig.yaml"
    via_link.write_text("token: old")
    keep = tmp_path / "kube-scheduler-config.yaml"
    keep.write_text("kept")

    env.down()

    assert not minted.exists() and not via_link.exists()
    assert keep.read_text() == "kept"
