"""The virtual storage class's pure parts: stand-in volumes, real claims, which cluster
a claim lives in, the storage-class mapping, settings (docs/storage.md)."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from vkubelet.reflection.pvcs import storage_class_mapping, virtual_claim_selection
from vkubelet.reflection.pvcs import map_storage_class
from vkubelet.settings import Settings, SettingsError
from vkubelet.storage import forge as f
from vkubelet.storage.settings import StorageSettings

NODE = "kube-offload-remote-1"


def claim(*, cls: str = "kube-offload", node: str | None = NODE, uid: str = "u-1", size: str = "1Gi", **spec) -> dict:
    annotations = {f.ANNOTATION_SELECTED_NODE: node} if node else {}
    return {
        "metadata": {"namespace": "db", "name": "data-db-0", "uid": uid, "annotations": annotations},
        "spec": {"storageClassName": cls, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}, **spec},
    }


def remote_claim(phase: str = "Pending", capacity: str | None = None) -> dict:
    status: dict = {"phase": phase}
    if capacity:
        status["capacity"] = {"storage": capacity}
    return {"metadata": {"namespace": "db-local", "name": "data-db-0"}, "status": status}


def test_remote_standin_is_prebound_pinned_and_unmountable():
    pv = f.remote_standin(claim(), remote_claim(), node_name=NODE, cluster_id="remote-1",
                          storage_class={"reclaimPolicy": "Retain"})
    assert pv["metadata"]["name"] == "pvc-u-1"
    assert pv["metadata"]["annotations"][f.ANNOTATION_PROVISIONED_BY] == c.STORAGE_PROVISIONER
    assert pv["metadata"]["annotations"][c.ANNOTATION_REMOTE_CLAIM] == "db-local/data-db-0"
    assert pv["metadata"]["labels"] == {c.LABEL_VOLUME_LOCATION: "remote", c.LABEL_CLUSTER_ID: "remote-1"}
    spec = pv["spec"]
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "db",
                                "name": "data-db-0", "uid": "u-1"}
    assert spec["capacity"] == {"storage": "1Gi"}
    assert spec["storageClassName"] == "kube-offload"
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["volumeMode"] == "Filesystem"
    assert spec["csi"]["driver"] == c.REMOTE_VOLUME_CSI_DRIVER
    [term] = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]} in term["matchExpressions"]
    assert {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]} in term["matchExpressions"]


def test_remote_standin_takes_the_bound_remote_capacity_when_larger():
    pv = f.remote_standin(claim(size="1Gi"), remote_claim("Bound", "2Gi"), node_name=NODE, cluster_id="r", storage_class=None)
    assert pv["spec"]["capacity"] == {"storage": "2Gi"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"


@pytest.mark.parametrize("current,remote,expected", [
    ("1Gi", remote_claim("Bound", "2Gi"), "2Gi"),
    ("2Gi", remote_claim("Bound", "2Gi"), None),
    ("2Gi", remote_claim("Bound", "1Gi"), None),
    ("1Gi", remote_claim("Pending"), None),
    ("1Gi", None, None),
])
def test_capacity_follows_a_remote_expansion_only(current, remote, expected):
    assert f.capacity_update({"spec": {"capacity": {"storage": current}}}, remote) == expected


def test_claim_is_gone_when_deleted_or_made_again():
    volume = {"spec": {"claimRef": {"namespace": "db", "name": "data-db-0", "uid": "u-1"}}}
    assert f.claim_is_gone(volume, None)
    assert f.claim_is_gone(volume, claim(uid="u-2"))
    assert not f.claim_is_gone(volume, claim(uid="u-1"))
    assert f.claim_ref_key(volume) == "db/data-db-0"


def test_real_claim_names_the_node_and_its_origin():
    real = f.real_claim(claim(node="node-0"), local_class="local-path", namespace="kube-offload", node_name="node-0")
    assert real["metadata"]["name"] == "u-1"
    assert real["metadata"]["namespace"] == "kube-offload"
    assert real["metadata"]["annotations"][f.ANNOTATION_SELECTED_NODE] == "node-0"
    assert f.real_claim_origin(real) == "db/data-db-0"
    assert real["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                            "volumeMode": "Filesystem", "storageClassName": "local-path"}


def test_local_standin_mounts_the_real_volume_on_physical_nodes_only():
    real = f.real_claim(claim(node="node-0"), local_class="local-path", namespace="kube-offload", node_name="node-0")
    real_volume = {"metadata": {"name": "pvc-real"}, "spec": {
        "hostPath": {"path": "/opt/x", "type": "DirectoryOrCreate"},
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
        "claimRef": {"name": "u-1"}, "storageClassName": "local-path", "persistentVolumeReclaimPolicy": "Delete",
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}]}]}},
    }}
    pv = f.local_standin(claim(node="node-0"), real, real_volume, storage_class=None)
    spec = pv["spec"]
    assert spec["hostPath"] == {"path": "/opt/x", "type": "DirectoryOrCreate"}
    assert spec["claimRef"]["uid"] == "u-1" and spec["storageClassName"] == "kube-offload"
    [term] = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]},
        {"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]},
    ]
    assert f.real_claim_key_of(pv) == ("kube-offload", "u-1")
    assert pv["metadata"]["labels"] == {c.LABEL_VOLUME_LOCATION: "local"}


def test_a_virtual_claim_is_reflected_only_to_the_cluster_of_its_selected_node():
    ours = {NODE}
    assert virtual_claim_selection(claim(), virtual_class="kube-offload", nodes=ours) is None
    other = virtual_claim_selection(claim(node="kube-offload-remote-2"), virtual_class="kube-offload", nodes=ours)
    assert other is not None and not other.reflect and "kube-offload-remote-2" in other.why
    unscheduled = virtual_claim_selection(claim(node=None), virtual_class="kube-offload", nodes=ours)
    assert unscheduled is not None and not unscheduled.reflect
    # Claims of other classes: the ordinary policy decides.
    assert virtual_claim_selection(claim(cls="fast"), virtual_class="kube-offload", nodes=ours) is None
    assert virtual_claim_selection(claim(), virtual_class="", nodes=ours) is None


def test_a_virtual_claim_selected_for_a_slice_node_of_the_peering_is_reflected_by_it():
    gpu = c.slice_node_name(NODE, "gpu")
    assert virtual_claim_selection(claim(node=gpu), virtual_class="kube-offload", nodes={NODE, gpu}) is None
    # Not a node of this peering (another peering's slice): not here.
    elsewhere = virtual_claim_selection(claim(node=gpu), virtual_class="kube-offload", nodes={NODE})
    assert elsewhere is not None and not elsewhere.reflect


def test_a_slice_nodes_stand_in_is_labelled_with_its_slice_and_selected_apart():
    pv = f.remote_standin(claim(node=c.slice_node_name(NODE, "gpu")), remote_claim(), node_name=c.slice_node_name(NODE, "gpu"),
                          cluster_id="remote-1", storage_class=None, slice_name="gpu")
    assert pv["metadata"]["labels"][c.LABEL_SLICE] == "gpu"
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": [c.slice_node_name(NODE, "gpu")]} in term["matchExpressions"]
    assert c.LABEL_SLICE not in f.remote_standin(claim(), remote_claim(), node_name=NODE, cluster_id="remote-1",
                                                 storage_class=None)["metadata"]["labels"]
    assert f.standin_selector("remote-1", "gpu").endswith(f",{c.LABEL_SLICE}=gpu")
    assert f.standin_selector("remote-1").endswith(f",!{c.LABEL_SLICE}")


@pytest.mark.parametrize("mapping,expected", [
    ({}, None),  # the remote default class
    ({"*": "standard"}, "standard"),
    ({"kube-offload": "local-path", "*": "standard"}, "local-path"),
])
def test_the_virtual_class_maps_to_the_remote_default_unless_named(mapping, expected):
    assert map_storage_class("kube-offload", storage_class_mapping(mapping, "kube-offload")) == expected
    assert map_storage_class("fast", storage_class_mapping({}, "kube-offload")) == "fast"


def test_settings_validate_the_storage_flags():
    base = dict(cluster_id="r", local_cluster_id="l")
    Settings(**base).validate()
    with pytest.raises(SettingsError, match="--virtual-storage-local-class"):
        Settings(**base, storage=StorageSettings(local_class="kube-offload")).validate()
    with pytest.raises(SettingsError, match="--virtual-storage-class"):
        Settings(**base, storage=StorageSettings(virtual_class="Bad_Name")).validate()
    assert not StorageSettings(virtual_class="").enabled
    assert StorageSettings(local_class="local-path").physical_delegate
