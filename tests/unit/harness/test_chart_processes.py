"""What the harness changes when it runs a chart's Deployment as a process
(harness/kube_offload_harness/chart_processes.py): addresses, certificates and mounted
files, and nothing else."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from kube_offload import constants as C
from kube_offload_harness import chart_processes as cp

ENFORCER = [
    "enforcer", "--log-level=INFO", "--consumer-twin-role=kube-offload-consumer-twin",
    "--webhook-bind=0.0.0.0:9443", "--webhook-tls-cert=/etc/kube-offload/tls/tls.crt",
    "--webhook-tls-key=/etc/kube-offload/tls/tls.key", "--health-bind=0.0.0.0:8080",
]
VKUBELET = [
    "vkubelet", "--cluster-id=remote-1", "--local-cluster-id=local",
    "--remote-kubeconfig=/etc/kube-offload/remote/kubeconfig", "--sharing-percentage=90",
    "--node-label=topology.kubernetes.io/region=eu-west", "--node-address=$(POD_IP)", "--kubelet-port=10250",
    f"--kubelet-client-ca={cp.SERVICE_ACCOUNT_CA}", "--ping-interval=5s", "--log-level=INFO",
    "--health-bind=0.0.0.0:10248",
]


def test_enforcer_args_change_only_the_addresses_and_certificate() -> None:
    args = cp.enforcer_args(ENFORCER, webhook_port=4321, tls_cert=Path("/pki/tls.crt"), tls_key=Path("/pki/tls.key"),
                            health_port=4322)
    assert args == [
        "enforcer", "--log-level=INFO", "--consumer-twin-role=kube-offload-consumer-twin",
        "--webhook-bind=127.0.0.1:4321", "--webhook-tls-cert=/pki/tls.crt", "--webhook-tls-key=/pki/tls.key",
        "--health-bind=127.0.0.1:4322",
    ]
    # No health port given: any free one, still on loopback (never the chart's 0.0.0.0).
    assert "--health-bind=127.0.0.1:0" in cp.enforcer_args(ENFORCER, webhook_port=1, tls_cert=Path("/c"), tls_key=Path("/k"))


def test_vkubelet_args_change_only_addresses_certificates_and_mounted_files() -> None:
    args = cp.vkubelet_args(
        VKUBELET, remote_kubeconfig=Path("/state/remote.yaml"), kubelet_port=5555,
        service_account_ca=Path("/state/ca.crt"), tls_cert=Path("/pki/tls.crt"), tls_key=Path("/pki/tls.key"),
    )
    assert args == [
        "vkubelet", "--cluster-id=remote-1", "--local-cluster-id=local",
        "--remote-kubeconfig=/state/remote.yaml", "--sharing-percentage=90",
        "--node-label=topology.kubernetes.io/region=eu-west", "--node-address=127.0.0.1", "--kubelet-port=5555",
        "--kubelet-client-ca=/state/ca.crt", "--ping-interval=5s", "--log-level=INFO",
        "--health-bind=127.0.0.1:0",
        "--kubelet-tls-cert", "/pki/tls.crt", "--kubelet-tls-key", "/pki/tls.key",
    ]


@pytest.mark.parametrize("missing", ["--remote-kubeconfig", "--kubelet-port", "--health-bind"])
def test_vkubelet_args_refuse_a_chart_without_the_flags_they_replace(missing: str) -> None:
    chart = [a for a in VKUBELET if not a.startswith(f"{missing}=")]
    with pytest.raises(ValueError, match=missing):
        cp.vkubelet_args(chart, remote_kubeconfig=Path("/k"), kubelet_port=1, service_account_ca=Path("/ca"),
                         tls_cert=Path("/c"), tls_key=Path("/k"))


def test_vkubelet_args_refuse_pod_ip_where_it_is_not_the_node_address() -> None:
    chart = [*VKUBELET, "--something=$(POD_IP):80"]
    with pytest.raises(ValueError, match="POD_IP"):
        cp.vkubelet_args(chart, remote_kubeconfig=Path("/k"), kubelet_port=1, service_account_ca=Path("/ca"),
                         tls_cert=Path("/c"), tls_key=Path("/k"))


def test_enforcer_args_refuse_a_chart_without_the_webhook() -> None:
    with pytest.raises(ValueError, match="--webhook-bind"):
        cp.enforcer_args(ENFORCER[:3], webhook_port=1, tls_cert=Path("/c"), tls_key=Path("/k"))


def test_url_client_config_points_at_the_process_with_its_ca() -> None:
    config = cp.url_client_config(4321, b"PEM")
    assert config == {"url": f"https://127.0.0.1:4321{C.SHADOWPOD_WEBHOOK_PATH}",
                      "caBundle": base64.b64encode(b"PEM").decode()}


def test_url_client_configs_follow_each_webhook_path() -> None:
    registration = {"webhooks": [{"clientConfig": {"service": {"path": C.SHADOWPOD_WEBHOOK_PATH}}},
                                 {"clientConfig": {"service": {"path": C.ENDPOINTSLICE_WEBHOOK_PATH}}}]}
    configs = cp.url_client_configs(registration, 4321, b"PEM")
    assert [c["url"] for c in configs] == [f"https://127.0.0.1:4321{C.SHADOWPOD_WEBHOOK_PATH}",
                                          f"https://127.0.0.1:4321{C.ENDPOINTSLICE_WEBHOOK_PATH}"]


def test_deployment_identity_reads_args_and_service_account() -> None:
    template = {"serviceAccountName": "kube-offload-enforcer", "containers": [{"name": "enforcer", "args": ENFORCER}]}
    args, account = cp.deployment_identity(template, "kube-offload")
    assert args == ENFORCER
    assert account.username == "system:serviceaccount:kube-offload:kube-offload-enforcer"


# --- the demo's `kube-offload peer` command line (peer_driver) ---------------------------------
def test_demo_peer_flags_parse_with_the_real_cli_and_print_without_paths(tmp_path: Path) -> None:
    from kube_offload.cli import build_parser
    from kube_offload_harness import binaries, peer_driver
    from kube_offload_harness.cluster import Environment, default_topology

    env = Environment(tmp_path, bins=binaries.binaries(root=tmp_path / "cache"), say=lambda _: None)
    topology = default_topology(prefix="demo", remotes=1)
    spec = topology.remotes[0]
    values = peer_driver.local_values_file(env)
    # kwokctl's kubeconfig: the remote on loopback, which the harness's processes reach
    env.cluster(spec).kubeconfig.write_text(yaml.safe_dump({
        "clusters": [{"name": "kwok", "cluster": {"server": "https://127.0.0.1:40123"}}]}))
    flags = peer_driver.peer_flags(env, topology, spec, values)

    args = build_parser().parse_args(["peer", *(x for flag, value, _ in flags for x in (flag, value))])
    assert (args.local_cluster_id, args.remote_cluster_id) == ("local", spec.cluster_id)
    assert args.local_kubeconfig == str(env.cluster(topology.local).kubeconfig)
    assert args.remote_kubeconfig == str(env.cluster(spec).kubeconfig)
    # the provider suggests the node labels (peer --node-label), none are set locally
    assert sorted(args.node_label) == sorted(f"{k}={v}" for k, v in spec.labels.items())
    assert args.helm == str(env.bins.helm)
    # given on purpose: peer refuses a loopback server taken from the kubeconfig
    assert args.remote_server == "https://127.0.0.1:40123"
    shown = {flag: printed for flag, _, printed in flags}
    assert (shown["--local-kubeconfig"], shown["--remote-kubeconfig"]) == ("$LOCAL", "$REMOTE")


def test_demo_release_and_harness_identities_share_no_object(tmp_path: Path) -> None:
    """The demo's harness applies the local chart's webhook and extender identities with
    kubectl; `peer` then installs release kube-offload of the same chart with Helm, which
    refuses to take over any object it did not make. Rendered with real Helm, the two
    share nothing, and the harness still has both processes' identities."""
    import os

    from kube_offload import peering as p
    from kube_offload_harness import binaries, identities, peer_driver, versions

    helm = binaries.binaries().helm
    if not os.access(helm, os.X_OK):
        message = f"helm {versions.HELM} is not in the binary cache ({helm}): build it with `kube-offload binaries build`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ, HELM_CACHE_HOME=str(tmp_path / "cache"), HELM_CONFIG_HOME=str(tmp_path / "config"),
               HELM_DATA_HOME=str(tmp_path / "data"))
    # what Environment.up applies with PEERING_CLI
    harness = identities.of_components(identities.identity_objects(
        identities.render_chart(helm, identities.LOCAL_CHART, identities.local_values("local", []), env=env)),
        ("webhook", "extender"))
    chart = p.ChartRef(p.LOCAL_CHART, "0", str(identities.LOCAL_CHART))
    options = p.PeerOptions(local_cluster_id="local", remote_cluster_id="remote-1", remote_server="https://127.0.0.1:1",
                            remote_ca_pem=None, remote_chart=chart, local_chart=chart, local_values=peer_driver.LOCAL_VALUES)
    release = [o for o in identities.render_chart(helm, identities.LOCAL_CHART, p.local_values_with_remote({}, options), env=env)
               if "helm.sh/hook" not in ((o.get("metadata") or {}).get("annotations") or {})]

    def key(o: dict) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    assert {key(o) for o in harness if o["kind"] == "ServiceAccount"} >= {
        ("ServiceAccount", "kube-offload", identities.WEBHOOK_SA.name), ("ServiceAccount", "kube-offload", identities.EXTENDER_SA.name)}
    assert ("Deployment", "kube-offload", p.vkubelet_deployment_name(p.DEFAULT_RELEASE, "remote-1")) in {key(o) for o in release}
    assert {key(o) for o in harness} & {key(o) for o in release} == set()


def test_chart_pods_without_real_nodes_is_refused_naming_the_flag(tmp_path: Path) -> None:
    from kube_offload_harness import binaries
    from kube_offload_harness.cluster import ClusterError, Environment, default_topology

    env = Environment(tmp_path, bins=binaries.binaries(root=tmp_path / "cache"), say=lambda _: None)
    topology = default_topology(prefix="cp", remotes=1)
    topology.chart_pods = True
    with pytest.raises(ClusterError, match=r"chart_pods needs real_nodes.*--real-nodes true"):
        env.up(topology)
    assert env.topology() is None  # nothing was made
