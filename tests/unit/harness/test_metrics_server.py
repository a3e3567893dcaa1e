"""The harness's metrics-server wiring (harness/kube_offload_harness/metrics_server.py):
kwok's simulated resource metrics, metrics-server's RBAC, its registration and flags."""

import base64
from pathlib import Path

import yaml

from kube_offload_harness import cluster, metrics_server as ms


def test_kwok_serves_the_kubelet_resource_metrics_metrics_server_reads():
    metric, usage = ms.kwok_documents()
    assert (metric["kind"], usage["kind"]) == ("Metric", "ClusterResourceUsage")
    assert metric["spec"]["path"] == "/metrics/nodes/{nodeName}/metrics/resource"
    names = {m["name"] for m in metric["spec"]["metrics"]}
    # What metrics-server v0.9's decoder matches (pkg/scraper/client/resource/decode.go).
    assert {"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes", "container_start_time_seconds"} <= names
    container_cpu = next(m for m in metric["spec"]["metrics"] if m["name"] == "container_cpu_usage_seconds_total")
    assert container_cpu["kind"] == "counter"
    assert [label["name"] for label in container_cpu["labels"]] == ["container", "namespace", "pod"]
    cpu = usage["spec"]["usages"][0]["usage"]["cpu"]["expression"]
    assert ms.USAGE_CPU_ANNOTATION in cpu and 'Quantity("1m")' in cpu


def test_kwok_config_file_holds_both_documents(tmp_path):
    path = ms.write_kwok_config(tmp_path)
    assert [d["kind"] for d in yaml.safe_load_all(path.read_text())] == ["Metric", "ClusterResourceUsage"]


def test_every_kwok_node_says_where_its_resource_metrics_are():
    node = cluster.kwok_node_manifest("remote-1-node-0", cluster.ClusterSpec("c", "remote-1", "remote"))
    annotations = node["metadata"]["annotations"]
    assert annotations[ms.RESOURCE_METRICS_PATH_ANNOTATION] == "/metrics/nodes/remote-1-node-0/metrics/resource"
    assert annotations[cluster.KWOK_NODE_ANNOTATION] == "fake"


def test_metrics_server_identity_is_its_manifests_rbac():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in ms.identity_objects()}
    role = objects[("ClusterRole", "system:metrics-server")]
    assert {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]} in role["rules"]
    assert objects[("ClusterRoleBinding", "metrics-server:system:auth-delegator")]["roleRef"]["name"] == "system:auth-delegator"
    reader = objects[("RoleBinding", "metrics-server-auth-reader")]
    assert (reader["metadata"]["namespace"], reader["roleRef"]["name"]) == ("kube-system", "extension-apiserver-authentication-reader")
    for binding in (o for o in objects.values() if o["kind"].endswith("Binding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "metrics-server", "namespace": "kube-system"}]


def test_registration_goes_through_an_external_name_service_on_loopback():
    service, apiservice = ms.registration_objects(4443, b"PEM")
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    spec = apiservice["spec"]
    assert apiservice["metadata"]["name"] == "v1beta1.metrics.k8s.io"
    assert spec["service"] == {"name": "metrics-server", "namespace": "kube-system", "port": 4443}
    assert base64.b64decode(spec["caBundle"]) == b"PEM"
    assert "insecureSkipTLSVerify" not in spec


def test_flags_verify_kubelets_and_stay_on_loopback():
    argv = ms.argv(Path("/bin/ms"), kubeconfig=Path("/k"), port=1234, cert=Path("/c"), key=Path("/k.key"), kubelet_ca=Path("/ca"))
    assert "--bind-address=127.0.0.1" in argv and "--secure-port=1234" in argv
    assert "--kubelet-certificate-authority=/ca" in argv
    assert not any(a.startswith("--kubelet-insecure-tls") for a in argv)
    assert "--kubelet-use-node-status-port" in argv
    assert "--kubelet-preferred-address-types=InternalIP,Hostname" in argv  # a real node by its address
    # metrics-server refuses a resolution under 10s or a kubelet timeout above 90 % of it.
    assert f"--metric-resolution={ms.METRIC_RESOLUTION}" in argv
    assert int(ms.KUBELET_REQUEST_TIMEOUT.rstrip("s")) < 0.9 * int(ms.METRIC_RESOLUTION.rstrip("s"))


def test_with_a_real_node_the_aggregator_is_given_an_endpoint_not_an_external_name():
    """--enable-aggregator-routing (clusters with a real node) refuses ExternalName
    Services: a selector-less Service and an EndpointSlice at the harness's own address."""
    service, endpoints, apiservice = ms.registration_objects(4443, b"PEM", address="172.31.250.5")
    assert service["spec"] == {"ports": [{"name": "https", "port": 4443, "targetPort": 4443}]}
    assert "selector" not in service["spec"]
    assert endpoints["kind"] == "EndpointSlice"
    assert endpoints["metadata"]["labels"] == {"kubernetes.io/service-name": ms.NAME}
    assert endpoints["endpoints"] == [{"addresses": ["172.31.250.5"], "conditions": {"ready": True}}]
    assert endpoints["ports"] == [{"name": "https", "port": 4443, "protocol": "TCP"}]
    assert apiservice["spec"]["service"] == {"name": ms.NAME, "namespace": ms.NAMESPACE, "port": 4443}
    argv = ms.argv(Path("/bin/ms"), kubeconfig=Path("/k"), port=4443, cert=Path("/c"), key=Path("/k.key"),
                   kubelet_ca=Path("/ca"), bind_address="172.31.250.5")
    assert "--bind-address=172.31.250.5" in argv


def test_kubelets_go_unverified_only_where_a_vkubelet_pod_generates_its_certificate():
    assert ms.kubelet_ca_verifiable(chart_pods=False, role="local")
    assert ms.kubelet_ca_verifiable(chart_pods=True, role="remote")  # real kubelets: the harness's CA
    assert not ms.kubelet_ca_verifiable(chart_pods=True, role="local")
    argv = ms.argv(Path("/bin/ms"), kubeconfig=Path("/k"), port=1234, cert=Path("/c"), key=Path("/k.key"), kubelet_ca=None)
    assert "--kubelet-insecure-tls" in argv
    assert not any(a.startswith("--kubelet-certificate-authority") for a in argv)
