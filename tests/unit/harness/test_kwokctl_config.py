"""The kwokctl configuration the harness gives every cluster (rendered, never run here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kube_offload_harness.binaries import Binaries
from kube_offload_harness.cluster import Cluster, ClusterSpec


def _cluster(state_dir: Path, role: str, real_node_slot: int = -1, name: str = "t") -> Cluster:
    bins = Binaries(*(state_dir / "bin" / name for name in (
        "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "etcd", "kwok", "kwokctl", "helm",
        "metrics-server", "local-path-provisioner")))
    spec = ClusterSpec(name=name, cluster_id=name, role=role, nodes=1, real_node_slot=real_node_slot)
    return Cluster(spec, state_dir=state_dir, bins=bins)


def _apiserver_flags(state_dir: Path, role: str, real_node_slot: int = -1) -> dict[str, str]:
    config = yaml.safe_load(_cluster(state_dir, role, real_node_slot).kwokctl_config.read_text())
    [patch] = [p for p in config["componentsPatches"] if p["name"] == "kube-apiserver"]
    return {arg["key"]: arg["value"] for arg in patch["extraArgs"]}


def test_a_cluster_a_test_makes_alone_names_no_missing_kubelet_client_certificate(tmp_path: Path) -> None:
    # test_enforcer.py and the informer tests make clusters with no Environment, hence no
    # pki: a flag naming a missing file keeps the apiserver from starting.
    flags = _apiserver_flags(tmp_path, "remote")
    assert "kubelet-client-certificate" not in flags and "kubelet-client-key" not in flags
    assert flags["kubelet-preferred-address-types"].startswith("InternalIP")


def test_an_environments_clusters_present_the_kubelet_client_certificate(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "apiserver-kubelet-client.crt").write_text("certificate")
    for role in ("local", "remote"):
        flags = _apiserver_flags(tmp_path, role)
        assert flags["kubelet-client-certificate"] == str(tmp_path / "pki" / "apiserver-kubelet-client.crt")
        assert flags["kubelet-client-key"] == str(tmp_path / "pki" / "apiserver-kubelet-client.key")


def test_a_cluster_without_a_real_node_keeps_kwokctls_addresses(tmp_path: Path) -> None:
    for role in ("local", "remote"):
        flags = _apiserver_flags(tmp_path, role)
        assert "advertise-address" not in flags and "enable-aggregator-routing" not in flags
        config = yaml.safe_load(_cluster(tmp_path, role).kwokctl_config.read_text())
        assert config["options"] == {"bindAddress": "127.0.0.1"}


def test_a_cluster_with_a_real_node_advertises_the_machine_end_of_its_link(tmp_path: Path) -> None:
    flags = _apiserver_flags(tmp_path, "remote", real_node_slot=2)
    assert flags["advertise-address"] == "172.31.250.9"
    assert flags["enable-aggregator-routing"] == "true"
    config = yaml.safe_load(_cluster(tmp_path, "remote", 2).kwokctl_config.read_text())
    assert config["options"]["bindAddress"] == "127.0.0.1"  # it still listens on loopback only
    assert {"10.0.0.1", "172.31.250.9", "kubernetes.default.svc"} <= set(config["options"]["kubeApiserverCertSANs"])


def test_each_cluster_with_a_real_node_has_a_configuration_file_of_its_own(tmp_path: Path) -> None:
    """kwokctl reads one KwokctlConfiguration; two remotes with real nodes advertise two
    addresses, and the remotes without keep the shared file."""
    paths = {_cluster(tmp_path, "remote", slot, name=f"r{slot}").kwokctl_config for slot in (1, 2)}
    shared = _cluster(tmp_path, "remote").kwokctl_config
    assert len(paths) == 2 and shared not in paths
    assert shared.name == "kwokctl-config.yaml"


def _flags(cluster: Cluster, component: str) -> dict[str, str]:
    config = yaml.safe_load(cluster.kwokctl_config.read_text())
    [patch] = [p for p in config["componentsPatches"] if p["name"] == component]
    return {arg["key"]: arg["value"] for arg in patch["extraArgs"]}


def test_a_cluster_that_verifies_kubelets_signs_kubelet_serving_requests_with_the_ca_it_trusts(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, "local", real_node_slot=1)
    cluster.spec.verify_kubelets = True
    pki = cluster.kwok_workdir / "clusters" / cluster.name / "pki"
    assert _flags(cluster, "kube-apiserver")["kubelet-certificate-authority"] == str(pki / "ca.crt")
    kcm = _flags(cluster, "kube-controller-manager")
    assert (kcm["cluster-signing-cert-file"], kcm["cluster-signing-key-file"]) == (str(pki / "ca.crt"), str(pki / "ca.key"))
    assert kcm["leader-elect"] == "false"


def test_kubelets_stay_unverified_unless_asked(tmp_path: Path) -> None:
    for role, slot in (("local", -1), ("local", 1), ("remote", 1)):
        cluster = _cluster(tmp_path, role, real_node_slot=slot, name=f"{role}{slot}")
        assert "kubelet-certificate-authority" not in _flags(cluster, "kube-apiserver")
        assert "cluster-signing-cert-file" not in _flags(cluster, "kube-controller-manager")
