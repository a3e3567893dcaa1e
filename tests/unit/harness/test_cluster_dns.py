"""Cluster DNS on the real node: the CoreDNS objects, its image and the kubelet's side."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from kube_offload_harness import binaries, cluster_dns, go_wrapper, oci_image
from kube_offload_harness import real_node_config as rc


def _by_kind(objects: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objects}


def test_the_service_sits_at_the_address_the_kubelet_gives_pods():
    service = _by_kind(cluster_dns.objects())["Service"]
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == ("kube-system", "kube-dns")
    assert service["spec"]["clusterIP"] == rc.CLUSTER_DNS_IP == "10.0.0.10"
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}
    plan = rc.NodePlan(cluster="c", node_name="n", slot=0, state_dir=Path("/state"))
    config = rc.kubelet_configuration(plan, client_ca_file=Path("/ca.crt"))
    assert config["clusterDNS"] == [service["spec"]["clusterIP"]]
    assert config["clusterDomain"] == rc.CLUSTER_DOMAIN == "cluster.local"


def test_coredns_runs_only_on_the_real_node_and_is_selected_by_its_service():
    objects = _by_kind(cluster_dns.objects())
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"][rc.REAL_NODE_KEY] == "true"
    assert {"key": rc.REAL_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    # its own resolver is the node's (empty), never ClusterFirst (itself)
    assert spec["dnsPolicy"] == "Default"
    labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert objects["Service"]["spec"]["selector"].items() <= labels.items()
    [container] = spec["containers"]
    assert container["image"] == oci_image.COREDNS_IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"  # from the environment's registry
    assert container["readinessProbe"]["httpGet"]["port"] == cluster_dns.READY_PORT


def test_rbac_lets_it_list_and_watch_what_the_kubernetes_plugin_reads():
    objects = _by_kind(cluster_dns.objects())
    rules = {(group, resource): set(rule["verbs"]) for rule in objects["ClusterRole"]["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    for key in (("", "services"), ("", "namespaces"), ("discovery.k8s.io", "endpointslices")):
        assert rules[key] == {"list", "watch"}
    assert all(verbs <= {"list", "watch"} for verbs in rules.values())  # reads only
    [subject] = objects["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == ("coredns", "kube-system")
    assert objects["ClusterRoleBinding"]["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]


def test_the_corefile_serves_the_cluster_zones_and_forwards_nothing():
    corefile = _by_kind(cluster_dns.objects())["ConfigMap"]["data"]["Corefile"]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa" in corefile
    assert "forward" not in corefile and "loop" not in corefile
    assert "ready" in corefile and "health" in corefile


def test_coredns_image_has_the_binary_at_slash_coredns_as_entrypoint(tmp_path: Path):
    binary = tmp_path / "coredns"
    binary.write_bytes(b"\x7fELF static coredns")
    archive = tarfile.open(fileobj=io.BytesIO(oci_image.coredns_image(binary)))
    index = json.load(archive.extractfile("index.json"))
    [entry] = index["manifests"]
    assert entry["annotations"][oci_image.IMAGE_NAME_ANNOTATION] == "registry.k8s.io/coredns/coredns:v1.15.0"
    blobs = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    manifest = json.loads(blobs["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/coredns"]
    [layer] = manifest["layers"]
    files = tarfile.open(fileobj=io.BytesIO(blobs["blobs/sha256/" + layer["digest"].split(":")[1]]))
    member = files.getmember("coredns")
    assert member.mode == 0o755 and files.extractfile(member).read() == binary.read_bytes()


def test_coredns_is_a_cached_node_binary_keyed_by_its_version_and_plugins(tmp_path: Path):
    nbins = binaries.node_binaries(tmp_path)
    assert nbins.coredns == tmp_path / "bin" / f"coredns-v1.15.0-{go_wrapper.coredns_main().digest()}" / "coredns"
    assert "coredns" in nbins.missing()
