"""The real node's pure parts: addresses, containerd/CNI/kubelet configuration, OCI archives."""

from __future__ import annotations

import base64
import hashlib
import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from kube_offload_harness import binaries, oci_image
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.real_node import apiserver_forward_args, apiserver_port, process_names


def plan(slot: int = 3) -> rc.NodePlan:
    return rc.NodePlan(cluster="e2e-local", node_name="local-real-node", slot=slot, state_dir=Path("/state/real-nodes/e2e-local"))


# --- addresses -------------------------------------------------------------------------------
def test_slot_addresses_are_a_30_in_the_link_range_and_a_24_for_pods():
    p = plan(3)
    assert str(p.link) == "172.31.250.12/30"
    assert (p.host_ip, p.node_ip) == ("172.31.250.13", "172.31.250.14")
    assert p.pod_cidr == "172.31.3.0/24" and p.pod_gateway == "172.31.3.1"
    assert (p.netns, p.veth_host, p.veth_node) == ("kon-3", "kon3h", "kon3n")


def test_every_slot_is_disjoint_from_every_other_and_from_the_machine():
    plans = [plan(slot) for slot in range(rc.MAX_SLOTS)]
    networks = [p.link for p in plans] + [ipaddress.IPv4Network(p.pod_cidr) for p in plans]
    for i, a in enumerate(networks):
        for b in networks[i + 1:]:
            assert not a.overlaps(b), (a, b)
    # never loopback nor the documentation/test ranges the machine itself uses
    for network in networks:
        assert network.subnet_of(ipaddress.IPv4Network("172.31.0.0/16"))
    assert all(len(p.veth_host) <= 15 for p in plans)  # the kernel's interface name limit


def test_routes_join_the_machine_to_the_pods_and_the_node_to_every_machine_end():
    p = plan(3)
    # the apiserver (machine namespace) reaches the node's pods through the node end
    assert rc.machine_routes(p) == [["172.31.3.0/24", "via", "172.31.250.14", "dev", "kon3h"]]
    # the node reaches every slot's machine end (another cluster's apiserver forwarder) through its own
    assert rc.node_routes(p) == [["172.31.250.0/24", "via", "172.31.250.13", "dev", "kon3n"],
                                 ["10.0.0.0/24", "via", "172.31.250.13", "dev", "kon3n"]]
    other = plan(5)
    assert ipaddress.ip_address(other.host_ip) in ipaddress.ip_network(rc.node_routes(p)[0][0])


def test_the_apiserver_is_advertised_where_its_forwarder_listens_and_its_certificate_names_it():
    p = plan(3)
    assert rc.apiserver_flags(3) == {"advertise-address": p.host_ip, "enable-aggregator-routing": "true"}
    sans = rc.apiserver_cert_sans(3)
    assert {rc.KUBERNETES_SERVICE_IP, p.host_ip, "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} <= set(sans)
    assert rc.KUBERNETES_SERVICE_IP == "10.0.0.1"  # the first address of kube-apiserver's default service range
    assert ipaddress.ip_address(rc.CLUSTER_DNS_IP) in rc.SERVICE_CIDR
    args = apiserver_forward_args(p, 34567)
    assert args[args.index("--listen") + 1] == "172.31.250.13:34567"
    assert args[args.index("--to") + 1] == "127.0.0.1:34567"
    assert "--netns" not in args  # it listens in the machine's namespace


def test_free_slot_skips_namespaces_that_exist_and_ignores_others():
    assert rc.free_slot([]) == 0
    assert rc.free_slot(["kon-0", "kon-1", "cni-1234", "kon-3"]) == 2
    with pytest.raises(ValueError, match="all 64 real-node slots are taken"):
        rc.free_slot([f"kon-{i}" for i in range(rc.MAX_SLOTS)])
    with pytest.raises(ValueError, match="out of range"):
        rc.validate_slot(rc.MAX_SLOTS)


# --- containerd ------------------------------------------------------------------------------
def test_containerd_config_keeps_every_path_under_the_node_directories():
    p = plan()
    config = tomllib.loads(rc.containerd_config(p, cni_bin_dir=Path("/cache/bin/cni-plugins-v1.10.0")))
    assert config["version"] == 3
    assert config["root"] == "/var/lib/kube-offload/kon-3/containerd/root"
    assert config["state"] == "/var/lib/kube-offload/kon-3/containerd/state"
    assert config["grpc"]["address"] == "/var/lib/kube-offload/kon-3/containerd/containerd.sock"
    # containerd refuses unix socket paths over 104 characters
    assert len(config["ttrpc"]["address"]) < 104
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["netns_mounts_under_state_dir"] is True  # not machine-wide /var/run/netns
    assert runtime["restrict_oom_score_adj"] is True  # runc fails every sandbox otherwise (no CAP_SYS_RESOURCE)
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"BinaryName": "/usr/sbin/runc", "Root": "/var/lib/kube-offload/kon-3/runc", "SystemdCgroup": False}
    assert runtime["cni"]["bin_dirs"] == ["/cache/bin/cni-plugins-v1.10.0"]
    assert runtime["cni"]["conf_dir"] == "/state/real-nodes/e2e-local/cni/net.d"
    assert config["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True  # its socket is machine-wide
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == oci_image.PAUSE_IMAGE
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"
    # the node's own registry hosts, not the machine's /etc/containerd/certs.d
    assert config["plugins"]["io.containerd.cri.v1.images"]["registry"]["config_path"] == "/state/real-nodes/e2e-local/containerd/hosts"


def test_toml_strings_are_escaped():
    assert tomllib.loads(rc.toml({"t": {"k": 'a "quoted" \\ path'}}, {}))["t"]["k"] == 'a "quoted" \\ path'
    with pytest.raises(TypeError):
        rc.toml({}, {"k": 1.5})


# --- CNI ---------------------------------------------------------------------------------------
def test_cni_bridge_without_masquerade_and_host_local_state_under_the_node():
    conf = rc.cni_conflist(plan())
    bridge, portmap = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == rc.POD_BRIDGE
    assert bridge["ipMasq"] is False  # pods reach nothing beyond the node
    assert bridge["ipam"]["dataDir"] == "/var/lib/kube-offload/kon-3/cni/networks"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "172.31.3.0/24", "gateway": "172.31.3.1"}]]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


# --- kubelet -----------------------------------------------------------------------------------
def test_kubelet_configuration_for_cgroup_v1_and_the_node_address():
    config = rc.kubelet_configuration(plan(), client_ca_file=Path("/state/pki/kubelet-client-ca.crt"))
    assert config["failCgroupV1"] is False  # the kubelet refuses cgroup v1 otherwise
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/kube-offload-3"
    assert config["containerRuntimeEndpoint"] == "unix:///var/lib/kube-offload/kon-3/containerd/containerd.sock"
    assert config["podLogsDir"] == "/var/lib/kube-offload/kon-3/pod-logs"
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("172.31.250.14", 10250, 0)
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"]["clientCAFile"] == "/state/pki/kubelet-client-ca.crt"
    assert config["authorization"]["mode"] == "Webhook"
    assert config["registerWithTaints"] == [{"key": rc.REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}]
    assert config["protectKernelDefaults"] is True  # the harness sets the tunables, not the kubelet
    assert config["oomScoreAdj"] == 0  # lowering it needs CAP_SYS_RESOURCE, which root lacks here
    assert config["resolvConf"] == "/state/real-nodes/e2e-local/resolv.conf"


def test_kubelet_args_name_the_node_and_its_directories():
    args = rc.kubelet_args(plan(), kubelet=Path("/cache/kubelet"))
    assert args[0] == "/cache/kubelet"
    assert "--hostname-override=local-real-node" in args
    assert "--node-ip=172.31.250.14" in args
    assert "--root-dir=/var/lib/kube-offload/kon-3/kubelet" in args
    assert f"--node-labels={rc.REAL_NODE_KEY}=true" in args


ADMIN = {
    "apiVersion": "v1", "kind": "Config", "current-context": "kwok-x",
    "clusters": [{"name": "kwok-x", "cluster": {"server": "https://127.0.0.1:34567", "certificate-authority-data": "Q0E="}}],
    "contexts": [{"name": "kwok-x", "context": {"cluster": "kwok-x", "user": "kwok-x"}}],
    "users": [{"name": "kwok-x", "user": {"client-certificate-data": "YWRtaW4=", "client-key-data": "a2V5"}}],
}


def test_node_kubeconfig_swaps_the_admin_for_the_node_identity():
    config = rc.node_kubeconfig(ADMIN, client_cert_pem=b"node-cert", client_key_pem=b"node-key")
    assert config["clusters"] == ADMIN["clusters"]  # same server and CA
    (user,) = config["users"]
    assert user["name"] == "kwok-x"
    assert base64.b64decode(user["user"]["client-certificate-data"]) == b"node-cert"
    assert ADMIN["users"][0]["user"]["client-certificate-data"] == "YWRtaW4="  # input untouched


def test_apiserver_port_only_from_a_loopback_server():
    assert apiserver_port(ADMIN) == 34567
    other = json.loads(json.dumps(ADMIN))
    other["clusters"][0]["cluster"]["server"] = "https://192.0.2.7:6443"
    with pytest.raises(Exception, match="expected https://127.0.0.1:<port>"):
        apiserver_port(other)


def test_process_names_are_per_cluster():
    assert process_names(plan()) == {
        "forward": "realnode-e2e-local-forward",
        "apiserver-forward": "realnode-e2e-local-apiserver-forward",
        "registry-forward": "realnode-e2e-local-registry-forward",
        "containerd": "realnode-e2e-local-containerd",
        "kubelet": "realnode-e2e-local-kubelet",
        "kube-proxy": "realnode-e2e-local-kube-proxy",
    }


def test_kube_proxy_writes_no_machine_wide_setting_and_serves_only_the_node():
    config = rc.kube_proxy_configuration(plan())
    assert config["mode"] == "iptables"
    # nf_conntrack_max is global: 0/0 leaves it; 0s leaves the namespace's timeouts
    assert config["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    assert config["oomScoreAdj"] == 0
    assert config["hostnameOverride"] == "local-real-node"
    assert config["nodePortAddresses"] == ["172.31.250.14/32"]
    assert config["clusterCIDR"] == "172.31.3.0/24"
    assert config["healthzBindAddress"].startswith("127.0.0.1:") and config["metricsBindAddress"].startswith("127.0.0.1:")
    assert config["clientConnection"]["kubeconfig"] == "/state/real-nodes/e2e-local/kube-proxy.kubeconfig"
    assert rc.kube_proxy_args(plan(), kube_proxy=Path("/cache/kube-proxy")) == [
        "/cache/kube-proxy", "--config=/state/real-nodes/e2e-local/kube-proxy-config.yaml", "--v=2"]


# --- OCI archives --------------------------------------------------------------------------------
def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()}


def test_oci_archive_is_a_consistent_layout_named_for_ctr_import():
    layer = oci_image.layer_tar([oci_image.Entry("bin", "dir", mode=0o755), oci_image.Entry("bin/hello", data=b"#!/bin/sh\n", mode=0o755)])
    archive = oci_image.oci_archive("docker.io/library/hello:1.0", [layer], oci_image.ImageConfig(cmd=["hello"]))
    files = _members(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"][oci_image.IMAGE_NAME_ANNOTATION] == "docker.io/library/hello:1.0"
    assert entry["annotations"][oci_image.REF_NAME_ANNOTATION] == "1.0"
    # every blob is stored under its own digest, and the manifest names the layer and config
    for name, data in files.items():
        if name.startswith("blobs/sha256/") and data:
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    assert manifest["layers"][0]["digest"] == oci_image.sha256(layer)
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["rootfs"]["diff_ids"] == [oci_image.sha256(layer)]
    assert config["config"]["Cmd"] == ["hello"]


def test_layers_are_deterministic_and_parents_come_first():
    entries = [oci_image.Entry("a/b/c", data=b"x"), oci_image.Entry("a", "dir", mode=0o755), oci_image.Entry("a/b", "dir", mode=0o755)]
    first = oci_image.layer_tar(entries)
    assert first == oci_image.layer_tar(list(reversed(entries)))
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a", "a/b", "a/b/c"]
    assert {m.mtime for m in members} == {0} and {m.uid for m in members} == {0}


def test_image_names_need_a_tag():
    with pytest.raises(ValueError, match="needs a tag"):
        oci_image.oci_archive("localhost:5000/busybox", [], oci_image.ImageConfig())


# --- binaries ------------------------------------------------------------------------------------
def test_node_binaries_live_beside_the_control_plane_keyed_by_version(tmp_path):
    nbins = binaries.node_binaries(tmp_path)
    assert nbins.kubelet.parent == binaries.binaries(tmp_path).kube_apiserver.parent
    assert nbins.containerd == tmp_path / "bin" / "containerd-v2.4.2" / "containerd"
    assert nbins.cni_bin_dir == tmp_path / "bin" / "cni-plugins-v1.10.0"
    assert nbins.registry.parent.name.startswith("registry-v3.1.2-") and nbins.registry.name == "registry"
    assert nbins.coredns.parent.name.startswith("coredns-v1.15.0-") and nbins.coredns.name == "coredns"
    assert set(nbins.missing()) == set(nbins.all())
    for path in nbins.all().values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        path.chmod(0o755)
    assert nbins.missing() == []


def test_containerd_is_stamped_with_its_version():
    assert "-X github.com/containerd/containerd/v2/version.Version=v2.4.2" in binaries.containerd_ldflags("v2.4.2")
    with pytest.raises(ValueError):
        binaries.containerd_ldflags("2.4")


def test_registry_is_stamped_with_its_version():
    assert binaries.registry_ldflags("v3.1.2") == "-s -w -X github.com/distribution/distribution/v3/version.version=v3.1.2"
    with pytest.raises(ValueError):
        binaries.registry_ldflags("3.1.2")


def test_coredns_needs_no_stamp():
    assert binaries.coredns_ldflags("v1.15.0") == "-s -w"
    with pytest.raises(ValueError):
        binaries.coredns_ldflags("1.15")


# --- registry mirrors ---------------------------------------------------------------------------
def test_each_mirrored_registry_points_at_its_prefix_in_the_one_registry():
    files = rc.registry_hosts_files(registry_port=5123)
    assert set(files) == {"docker.io/hosts.toml", "registry.k8s.io/hosts.toml", "ghcr.io/hosts.toml", "quay.io/hosts.toml"}
    hosts = tomllib.loads(files["registry.k8s.io/hosts.toml"])
    # `server`, not a [host."..."] mirror: nothing falls back to the upstream on the internet
    assert hosts == {
        "server": "http://127.0.0.1:5123/v2/registry.k8s.io",  # plain HTTP, the node namespace's loopback
        "override_path": True,  # the path is the API root as given (containerd would append /v2)
        "capabilities": ["pull", "resolve"],
    }
    assert "host" not in tomllib.loads(files["docker.io/hosts.toml"])


def test_hosts_toml_refuses_an_unmirrored_registry_or_a_bad_port():
    with pytest.raises(ValueError, match="not a mirrored registry"):
        rc.registry_hosts_toml("example.com", registry_port=5000)
    with pytest.raises(ValueError, match="out of range"):
        rc.registry_hosts_toml("docker.io", registry_port=0)


def test_coredns_image_runs_the_binary_at_the_root():
    import tempfile

    with tempfile.NamedTemporaryFile() as binary:
        binary.write(b"ELF-coredns")
        binary.flush()
        files = _members(oci_image.coredns_image(Path(binary.name)))
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"][oci_image.IMAGE_NAME_ANNOTATION] == "registry.k8s.io/coredns/coredns:v1.15.0"
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/coredns"]
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "coredns" and member.mode == 0o755
        assert tar.extractfile(member).read() == b"ELF-coredns"


def test_the_kubelet_serves_with_a_certificate_of_the_cluster_ca_for_the_node_address(tmp_path):
    """metrics-server verifies the kubelet against the cluster CA: the serving certificate
    is issued by it, for the node's IP, and named in the KubeletConfiguration."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from kube_offload_harness.real_node import serving_identity

    # an RSA CA like kwokctl's
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kwok-ca")])
    now = dt.datetime.now(dt.timezone.utc)
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ca.key").write_bytes(ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    p = plan(3)
    cert_pem, key_pem = serving_identity(tmp_path, p.node_name, p.node_ip)
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["172.31.250.14"]
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert b"PRIVATE KEY" in key_pem
    config = rc.kubelet_configuration(p, client_ca_file=Path("/ca.crt"))
    assert config["tlsCertFile"] == "/state/real-nodes/e2e-local/kubelet-pki/kubelet-serving.crt"
    assert config["tlsPrivateKeyFile"] == "/state/real-nodes/e2e-local/kubelet-pki/kubelet-serving.key"
