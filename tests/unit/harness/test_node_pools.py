"""The harness's node pools and slices (docs/slices.md): what a topology with pools makes
and how it survives topology.json."""

from __future__ import annotations

from kube_offload_harness import cluster as hc
from kube_offload_harness import identities


def _remote() -> hc.ClusterSpec:
    spec = hc.ClusterSpec("e2e-remote-1", "remote-1", "remote", nodes=1, labels={hc.REGION_LABEL: "eu-west"})
    spec.pools = [hc.NodePool("gpu", nodes=2, labels={"disk": "ssd"}, resources={"nvidia.com/gpu": "4"},
                              node_labels={"accelerator": "a100"})]
    spec.slices = [hc.SliceSpec("gpu=gpu:cpu=2,nvidia.com/gpu=1", kubelet_port=1, health_port=2)]
    spec.quota = {"cpu": "6"}
    return spec


def test_a_pool_node_carries_the_pool_label_its_labels_and_its_extended_resources():
    spec = _remote()
    node = hc.kwok_node_manifest("remote-1-gpu-node-0", spec, spec.pools[0])
    labels = node["metadata"]["labels"]
    assert labels[hc.POOL_LABEL] == "gpu" and labels["disk"] == "ssd" and labels[hc.REGION_LABEL] == "eu-west"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4" and node["status"]["allocatable"]["cpu"] == spec.node_cpu
    assert hc.POOL_LABEL not in hc.kwok_node_manifest("remote-1-node-0", spec)["metadata"]["labels"]
    assert spec.pools[0].node_names("remote-1") == ["remote-1-gpu-node-0", "remote-1-gpu-node-1"]


def test_the_consumer_gets_the_pools_selecting_their_nodes():
    spec = _remote()
    values = identities.remote_values("local", node_labels=spec.labels, quota=spec.quota,
                                      pools=[p.consumer_pool() for p in spec.pools])
    [consumer] = values["consumers"]
    assert consumer["pools"] == [{"name": "gpu", "nodeSelector": {hc.POOL_LABEL: "gpu"}, "nodeLabels": {"accelerator": "a100"}}]
    assert consumer["quota"] == {"cpu": "6"}
    assert "pools" not in identities.remote_values("local", node_labels={})["consumers"][0]


def test_pools_and_slices_survive_topology_json():
    topology = hc.default_topology(prefix="t", remotes=1)
    topology.remotes[0] = _remote()
    again = hc.Topology.from_json(topology.to_json())
    assert again.remotes[0].pools == topology.remotes[0].pools
    assert again.remotes[0].slices == topology.remotes[0].slices
    assert again.remotes[0].slices[0].name == "gpu" and again.remotes[0].quota == {"cpu": "6"}
