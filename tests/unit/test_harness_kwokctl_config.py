"""The kwokctl configuration the harness gives every cluster (rendered, never run here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kube_offload_harness.binaries import Binaries
from kube_offload_harness.cluster import Cluster, ClusterSpec


def _apiserver_flags(state_dir: Path, role: str) -> dict[str, str]:
    bins = Binaries(*(state_dir / "bin" / name for name in (
        "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "etcd", "kwok", "kwokctl", "helm",
        "metrics-server", "local-path-provisioner")))
    cluster = Cluster(ClusterSpec(name="t", cluster_id="t", role=role, nodes=1), state_dir=state_dir, bins=bins)
    config = yaml.safe_load(cluster.kwokctl_config.read_text())
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
