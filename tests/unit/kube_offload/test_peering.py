"""kube_offload.peering: what `peer` and `unpeer` plan from what the two clusters hold.

The property that matters most: a pair that is already peered plans no change, so a
second run leaves both Helm releases at the same revision; and neither command ever drops
another consumer or another remote cluster from a release's values.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace as _replace

import pytest

from kube_offload import constants as c
from kube_offload import fabric as fb
from kube_offload import peering as p
from kube_offload import peering_plans as plans
from kube_offload import slice_requests as sr

REMOTE_CHART = p.ChartRef(p.REMOTE_CHART, "0.1.0", "/charts/kube-offload-remote")
LOCAL_CHART = p.ChartRef(p.LOCAL_CHART, "0.1.0", "/charts/kube-offload-local")
ROOT_CA = b"-----BEGIN CERTIFICATE-----\nsa\n-----END CERTIFICATE-----\n"
REMOTE_CA = b"-----BEGIN CERTIFICATE-----\nserver\n-----END CERTIFICATE-----\n"
ISSUED = 1_800_000_000.0
DAY = 24 * 3600


def jwt(claims: dict) -> str:
    """A token shaped like the API server's (header.payload.signature); nothing here
    verifies the signature."""
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


TOKEN = jwt({"iat": int(ISSUED), "exp": int(ISSUED + DAY), "sub": "system:serviceaccount:kube-offload-tenant-local:consumer"})


def options(**overrides) -> p.PeerOptions:
    base = dict(
        local_cluster_id="local",
        remote_cluster_id="remote-2",
        remote_server="https://10.0.0.2:6443",
        remote_ca_pem=REMOTE_CA,
        remote_chart=REMOTE_CHART,
        local_chart=LOCAL_CHART,
        quota={"cpu": "8", "memory": "16Gi", "pods": "50"},
        pod_security_level="baseline",
        node_labels={"topology.kubernetes.io/region": "eu-west"},
    )
    base.update(overrides)
    return p.PeerOptions(**base)


def release(chart: p.ChartRef, values: dict, *, revision: int = 3, status: str = "deployed") -> p.Release:
    return p.Release(name="kube-offload", namespace="kube-offload", revision=revision, status=status,
                     chart=chart.label, values=values)


def fresh_state() -> p.PeerState:
    return p.PeerState(
        remote_release=None,
        legacy_token_secret_exists=False,
        remote_ca_pem=None,
        kubeconfig_secret=None,
        kubeconfig_secret_exists=False,
        local_release=None,
        vkubelet_deployed=False,
        node_ready=False,
    )


def peered_state(opts: p.PeerOptions, *, remote_values: dict | None = None, local_values: dict | None = None,
                 now: float = ISSUED + 3600) -> p.PeerState:
    """Both sides exactly as a successful `peer` with ``opts`` leaves them."""
    remote_values = remote_values if remote_values is not None else p.remote_values_with_consumer({}, opts)
    local_values = local_values if local_values is not None else p.local_values_with_remote({}, opts)
    return p.PeerState(
        remote_release=release(REMOTE_CHART, remote_values),
        legacy_token_secret_exists=False,
        remote_ca_pem=ROOT_CA,
        kubeconfig_secret=plans.desired_kubeconfig(opts, TOKEN, ROOT_CA),
        kubeconfig_secret_exists=True,
        local_release=release(LOCAL_CHART, local_values, revision=7),
        vkubelet_deployed=True,
        node_ready=True,
        now=now,
    )


def actions(steps) -> list[str]:
    return [s.action for s in steps]


# --- peer -----------------------------------------------------------------------------------
def test_fresh_pair_installs_both_sides_in_order():
    steps = plans.plan_peer(fresh_state(), options())
    assert actions(steps) == [p.REMOTE_RELEASE, p.REQUEST_TOKEN, p.KUBECONFIG_SECRET, p.LOCAL_RELEASE, p.WAIT_NODE_READY]
    assert [s.changes for s in steps] == [True, True, True, True, False]
    assert steps[1].data == {"expiration_seconds": DAY} and "valid 24h" in steps[1].description
    remote = steps[0].data["values"]
    assert remote["consumers"] == [{
        "name": "local", "podSecurityLevel": "baseline",
        "quota": {"cpu": "8", "memory": "16Gi", "pods": "50"},
        "nodeLabels": {"topology.kubernetes.io/region": "eu-west"},
    }]
    local = steps[3].data["values"]
    assert local["localClusterId"] == "local"
    assert local["remoteClusters"] == [{"id": "remote-2", "kubeconfigSecret": "remote-2-kubeconfig"}]
    assert "install chart kube-offload-remote-0.1.0" in steps[0].description
    assert all("\n" not in s.description for s in steps)


def test_a_peered_pair_plans_no_change():
    opts = options()
    steps = plans.plan_peer(peered_state(opts), opts)
    assert plans.changes(steps) == []
    assert actions(steps) == [p.WAIT_NODE_READY]
    assert "nothing to change" in plans.render_plan(steps, title="peer")


def test_no_wait_plans_no_node_check():
    opts = options(wait=False)
    assert plans.plan_peer(peered_state(opts), opts) == []


def test_omitted_options_keep_what_the_release_has():
    """A second `peer` without --quota/--pod-security-level/--node-label is still a no-op."""
    opts = options()
    bare = options(quota=None, pod_security_level=None, node_labels=None)
    assert plans.changes(plans.plan_peer(peered_state(opts), bare)) == []


def test_a_first_peering_without_a_quota_is_refused_naming_the_flag():
    # No default fits every provider: the consumer is admitted with a bound or not at all.
    with pytest.raises(p.PeeringError, match=r"--quota is required: consumer local has none"):
        plans.plan_peer(p.PeerState(None, False, None, None, False, None, False, False), options(quota=None))


def test_a_new_quota_upgrades_the_remote_release_and_leaves_the_local_one():
    opts = options()
    state = peered_state(opts)
    steps = plans.plan_peer(state, options(quota={"cpu": "4"}))
    assert p.LOCAL_RELEASE not in actions(steps)
    assert steps[0].action == p.REMOTE_RELEASE
    assert steps[0].data["values"]["consumers"][0]["quota"] == {"cpu": "4"}
    assert "revision 3" in steps[0].description
    # the consumer's token stays good across an upgrade of its release
    assert actions(steps)[1:] == [p.WAIT_NODE_READY]


def test_other_consumers_and_remote_clusters_are_never_dropped():
    opts = options()
    other_consumer = {"name": "team-b", "quota": {"cpu": "2"}, "cordoned": True}
    other_remote = {"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig", "labels": {"a": "b"}}
    state = p.PeerState(
        remote_release=release(REMOTE_CHART, {"nodeLabels": {"x": "y"}, "consumers": [other_consumer]}),
        legacy_token_secret_exists=False, remote_ca_pem=None,
        kubeconfig_secret=None, kubeconfig_secret_exists=False,
        local_release=release(LOCAL_CHART, {"localClusterId": "local", "remoteClusters": [other_remote],
                                            "webhook": {"replicas": 1}}),
        vkubelet_deployed=False, node_ready=False,
    )
    steps = {s.action: s for s in plans.plan_peer(state, opts)}
    remote = steps[p.REMOTE_RELEASE].data["values"]
    assert remote["consumers"][0] == other_consumer
    assert [e["name"] for e in remote["consumers"]] == ["team-b", "local"]
    assert remote["nodeLabels"] == {"x": "y"}
    local = steps[p.LOCAL_RELEASE].data["values"]
    assert local["remoteClusters"][0] == other_remote
    assert [e["id"] for e in local["remoteClusters"]] == ["remote-1", "remote-2"]
    assert local["webhook"] == {"replicas": 1}


def test_the_remote_entry_keeps_fields_set_by_hand():
    opts = options()
    current = p.local_values_with_remote({}, opts)
    current["remoteClusters"][0]["sharingPercentage"] = 50
    current["remoteClusters"][0]["labels"] = {"tier": "spot"}
    merged = p.local_values_with_remote(current, opts)
    assert merged["remoteClusters"] == [{
        "id": "remote-2", "kubeconfigSecret": "remote-2-kubeconfig", "sharingPercentage": 50, "labels": {"tier": "spot"},
    }]
    assert plans.changes(plans.plan_peer(peered_state(opts, local_values=current), opts)) == []


def test_values_files_merge_into_the_release_values():
    opts = options(local_values={"webhook": {"enabled": False}, "remoteClusters": [{"id": "remote-2", "labels": {"k": "v"}}]},
                   remote_values={"image": {"tag": "dev"}})
    local = p.local_values_with_remote({"webhook": {"replicas": 1}}, opts)
    assert local["webhook"] == {"replicas": 1, "enabled": False}
    assert local["remoteClusters"] == [{"id": "remote-2", "labels": {"k": "v"}, "kubeconfigSecret": "remote-2-kubeconfig"}]
    assert p.remote_values_with_consumer({}, opts)["image"] == {"tag": "dev"}


def test_another_local_cluster_id_is_refused():
    state = peered_state(options())
    with pytest.raises(p.PeeringError, match="already has localClusterId 'local'; pass --local-cluster-id local"):
        plans.plan_peer(state, options(local_cluster_id="other"))


@pytest.mark.parametrize(
    "change, why",
    [
        (dict(status="failed"), "it is failed"),
        (dict(chart="kube-offload-remote-0.0.9"), "from kube-offload-remote-0.0.9"),
    ],
)
def test_a_failed_or_older_release_is_upgraded(change, why):
    opts = options()
    state = peered_state(opts)
    remote = state.remote_release
    state = p.PeerState(**{**state.__dict__, "remote_release": p.Release(**{**remote.__dict__, **change})})
    steps = plans.plan_peer(state, opts)
    assert actions(plans.changes(steps))[0] == p.REMOTE_RELEASE
    assert why in steps[0].description


def test_a_long_lived_token_secret_is_replaced_by_a_bound_token():
    """The upgrade path from a peering made before bound tokens: the chart's consumer-token
    Secret goes (an upgrade, and a delete in case it was made by hand), the kubeconfig
    gets a bound token, and the virtual kubelet restarts: one of that older version reads
    its kubeconfig at start-up only."""
    opts = options()
    old = p.remote_values_with_consumer({}, opts)
    old["consumers"][0]["createTokenSecret"] = True
    legacy_token = jwt({"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:kube-offload-tenant-local:consumer"})
    state = peered_state(opts, remote_values=old)
    state = p.PeerState(**{**state.__dict__, "legacy_token_secret_exists": True,
                           "kubeconfig_secret": plans.desired_kubeconfig(opts, legacy_token, ROOT_CA)})
    steps = plans.plan_peer(state, opts)
    assert actions(steps) == [p.REMOTE_RELEASE, p.DELETE_LEGACY_TOKEN, p.REQUEST_TOKEN, p.KUBECONFIG_SECRET,
                              p.RESTART_VKUBELET, p.WAIT_NODE_READY]
    assert "createTokenSecret" not in steps[0].data["values"]["consumers"][0]
    assert steps[1].data == {"name": "consumer-token"}
    assert "never expires" in steps[3].description
    # the same, once the values were already rewritten: the Secret alone still forces an upgrade
    state = p.PeerState(**{**state.__dict__, "remote_release": release(REMOTE_CHART, p.remote_values_with_consumer({}, opts))})
    steps = plans.plan_peer(state, opts)
    assert actions(steps)[:2] == [p.REMOTE_RELEASE, p.DELETE_LEGACY_TOKEN]
    assert "replaces the long-lived token Secret" in steps[0].description


@pytest.mark.parametrize("now, why", [
    (ISSUED + 0.79 * DAY, None),
    (ISSUED + 0.81 * DAY, "due for renewal"),
    (ISSUED + DAY + 1, "expired at 2027-01-16T08:00:00Z"),
])
def test_a_token_past_its_renewal_point_is_renewed_without_a_restart(now, why):
    """The virtual kubelet renews at 80%; a token found past that (it was down) or expired
    is renewed by peer; the running virtual kubelet follows its Secret, no restart."""
    opts = options()
    steps = plans.plan_peer(peered_state(opts, now=now), opts)
    if why is None:
        assert plans.changes(steps) == []
        return
    assert actions(steps) == [p.REQUEST_TOKEN, p.KUBECONFIG_SECRET, p.WAIT_NODE_READY]
    assert why in steps[1].description


def test_a_revoked_identity_is_made_again_with_a_new_token():
    """The ServiceAccount deleted by hand (revoked), the release unchanged: peer upgrades
    the release, which recreates it, and issues a token of the new identity."""
    opts = options()
    state = p.PeerState(**{**peered_state(opts).__dict__, "consumer_service_account_exists": False})
    steps = plans.plan_peer(state, opts)
    assert actions(steps) == [p.REMOTE_RELEASE, p.REQUEST_TOKEN, p.KUBECONFIG_SECRET, p.WAIT_NODE_READY]
    assert "recreates ServiceAccount kube-offload-tenant-local/consumer (revoked" in steps[0].description
    assert "(its token's ServiceAccount was deleted (revoked))" in steps[2].description
    # a fresh pair has no ServiceAccount yet: nothing revoked there
    fresh = p.PeerState(**{**fresh_state().__dict__, "consumer_service_account_exists": False})
    assert "recreates" not in plans.plan_peer(fresh, opts)[0].description


def test_token_renewal_reason():
    config = plans.desired_kubeconfig(options(), TOKEN, ROOT_CA)
    assert plans.token_renewal_reason(config, ISSUED + 10, 0.8) is None
    assert "due for renewal" in (plans.token_renewal_reason(config, ISSUED + 10, 0.00001) or "")
    assert plans.token_renewal_reason(None, ISSUED, 0.8) == "it holds no token"
    assert "never expires" in (plans.token_renewal_reason(plans.desired_kubeconfig(options(), "opaque", ROOT_CA), ISSUED, 0.8) or "")


def test_a_different_server_rewrites_the_secret_and_restarts():
    opts = options()
    state = peered_state(opts)
    steps = plans.plan_peer(state, options(remote_server="https://remote.example:6443"))
    assert actions(plans.changes(steps)) == [p.REQUEST_TOKEN, p.KUBECONFIG_SECRET, p.RESTART_VKUBELET]


def test_the_consumer_kubeconfig_holds_server_ca_and_token_only():
    config = plans.desired_kubeconfig(options(), TOKEN, ROOT_CA)
    cluster = config["clusters"][0]["cluster"]
    assert cluster == {"server": "https://10.0.0.2:6443", "certificate-authority-data": base64.b64encode(REMOTE_CA).decode()}
    assert config["users"][0]["user"] == {"token": TOKEN}
    # without a CA in the remote kubeconfig, the cluster's own (kube-root-ca.crt)
    fallback = plans.desired_kubeconfig(options(remote_ca_pem=None), TOKEN, ROOT_CA)
    assert base64.b64decode(fallback["clusters"][0]["cluster"]["certificate-authority-data"]) == ROOT_CA


# --- input ----------------------------------------------------------------------------------
def test_parse_quota():
    assert p.parse_quota("cpu=8, memory=16Gi,pods=50,nvidia.com/gpu=1") == {
        "cpu": "8", "memory": "16Gi", "pods": "50", "nvidia.com/gpu": "1"}


@pytest.mark.parametrize("text, message", [
    ("cpu", "is not resource=quantity"),
    ("cpu=lots", "--quota cpu: 'lots' is not a Kubernetes quantity"),
    ("cpu=-1", "negative"),
    (",", "--quota is empty"),
])
def test_parse_quota_errors_name_the_flag(text, message):
    with pytest.raises(p.PeeringError, match=message):
        p.parse_quota(text)


def test_parse_node_labels():
    assert p.parse_node_labels(["topology.kubernetes.io/region=eu-west", "tier="]) == {
        "topology.kubernetes.io/region": "eu-west", "tier": ""}
    with pytest.raises(p.PeeringError, match="expected key=value"):
        p.parse_node_labels(["region"])
    with pytest.raises(p.PeeringError, match="--node-label 'a=b c'"):
        p.parse_node_labels(["a=b c"])


@pytest.mark.parametrize("value, ok", [("local", True), ("remote-1", True), ("", False), ("Remote", False), ("a_b", False), ("-a", False)])
def test_cluster_ids_are_dns_labels(value, ok):
    assert (p.cluster_id_problem("--local-cluster-id", value) is None) is ok


def test_cluster_of_kubeconfig():
    config = {
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"cluster": "ca"}}, {"name": "b", "context": {"cluster": "cb"}}],
        "clusters": [{"name": "ca", "cluster": {"server": "https://a"}}, {"name": "cb", "cluster": {"server": "https://b"}}],
    }
    assert p.cluster_of_kubeconfig(config)["server"] == "https://a"
    assert p.cluster_of_kubeconfig(config, "b")["server"] == "https://b"
    with pytest.raises(p.PeeringError, match="no context 'c'"):
        p.cluster_of_kubeconfig(config, "c")


def test_names_follow_the_charts():
    assert p.chart_fullname("kube-offload") == "kube-offload"
    assert p.chart_fullname("prod") == "prod-kube-offload"
    assert p.vkubelet_deployment_name("kube-offload", "remote-2") == "kube-offload-vkubelet-remote-2"
    assert p.node_name("remote-2") == "kube-offload-remote-2"


# --- unpeer ---------------------------------------------------------------------------------
def unpeer_options() -> p.UnpeerOptions:
    return p.UnpeerOptions(local_cluster_id="local", remote_cluster_id="remote-2",
                           remote_chart=REMOTE_CHART, local_chart=LOCAL_CHART)


def peered_unpeer_state(**overrides) -> p.UnpeerState:
    opts = options()
    remote_values = p.remote_values_with_consumer({"consumers": [{"name": "team-b"}]}, opts)
    local_values = p.local_values_with_remote({"remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "s"}]}, opts)
    base = dict(
        node_exists=True,
        node_unschedulable=False,
        pods_on_node=["demo/web-1", "demo/web-2"],
        local_release=release(LOCAL_CHART, local_values),
        vkubelet_pods=["kube-offload-vkubelet-remote-2-abc"],
        kubeconfig_secret_exists=True,
        twin_requests=["demo-local"],
        twin_namespaces=["demo-local", "old-local"],
        foreign_namespaces=[],
        remote_release=release(REMOTE_CHART, remote_values),
        tenant_namespace_exists=True,
        consumer_exists=True,
        consumer_service_account_exists=True,
    )
    base.update(overrides)
    return p.UnpeerState(**base)


def test_unpeer_removes_the_local_side_first_then_the_remote():
    steps = plans.plan_unpeer(peered_unpeer_state(), unpeer_options())
    assert actions(steps) == [
        p.CORDON_NODE, p.EVICT_PODS, p.LOCAL_RELEASE, p.WAIT_VKUBELET_GONE, p.DELETE_KUBECONFIG_SECRET, p.DELETE_NODE,
        p.REVOKE_CONSUMER, p.DELETE_TWIN_REQUESTS, p.DELETE_TWIN_NAMESPACES, p.WAIT_TWINS_GONE, p.REMOTE_RELEASE, p.WAIT_CONSUMER_GONE,
    ]
    by_action = {s.action: s for s in steps}
    assert by_action[p.LOCAL_RELEASE].data["values"]["remoteClusters"] == [{"id": "remote-1", "kubeconfigSecret": "s"}]
    assert [e["name"] for e in by_action[p.REMOTE_RELEASE].data["values"]["consumers"]] == ["team-b"]
    # a twin namespace whose request is already gone is deleted directly
    assert by_action[p.DELETE_TWIN_NAMESPACES].data["names"] == ["old-local"]
    assert by_action[p.EVICT_PODS].data["pods"] == ["demo/web-1", "demo/web-2"]
    # the identity is revoked explicitly, first thing on the remote side, and says so
    revoke = by_action[p.REVOKE_CONSUMER]
    assert revoke.data == {"namespace": "kube-offload-tenant-local", "name": "consumer"}
    assert "every token issued to system:serviceaccount:kube-offload-tenant-local:consumer is refused" in revoke.description


def test_unpeer_of_an_unpeered_pair_plans_nothing():
    gone = peered_unpeer_state(
        node_exists=False, pods_on_node=[], vkubelet_pods=[], kubeconfig_secret_exists=False, twin_requests=[],
        twin_namespaces=[], tenant_namespace_exists=False, consumer_exists=False, consumer_service_account_exists=False,
        local_release=release(LOCAL_CHART, {"localClusterId": "local", "remoteClusters": []}),
        remote_release=release(REMOTE_CHART, {"consumers": []}),
    )
    assert plans.plan_unpeer(gone, unpeer_options()) == []


def test_unpeer_removes_a_consumer_admitted_by_hand():
    state = peered_unpeer_state(remote_release=release(REMOTE_CHART, {"consumers": []}))
    steps = {s.action: s for s in plans.plan_unpeer(state, unpeer_options())}
    assert p.REMOTE_RELEASE not in steps
    assert steps[p.DELETE_CONSUMER].data == {"consumer": True, "namespace": True}
    assert p.WAIT_CONSUMER_GONE in steps


def test_unpeer_leaves_namespaces_it_did_not_make_and_says_so():
    state = peered_unpeer_state(foreign_namespaces=["handmade"])
    notes = [s for s in plans.plan_unpeer(state, unpeer_options()) if s.action == p.NOTE]
    assert len(notes) == 1 and not notes[0].changes and "handmade" in notes[0].description


# --- the provider policy (--policy-file, --grant-*) -------------------------------------------------
def consumer_entry(values: dict, name: str = "local") -> dict:
    [entry] = [e for e in values["consumers"] if e["name"] == name]
    return entry


def test_a_policy_file_becomes_the_consumers_policy_and_grants_go_on_top():
    policy = {"pods": {"priorityClasses": ["batch-low"], "tolerations": ["dedicated"]}, "quotaMode": "both"}
    opts = options(policy=policy, policy_grants={("services", "types"): ("NodePort",), ("pods", "priorityClasses"): ("batch-high",)})
    entry = consumer_entry(p.remote_values_with_consumer({}, opts))
    assert entry["policy"] == {"pods": {"priorityClasses": ["batch-high"], "tolerations": ["dedicated"]}, "quotaMode": "both",
                               "services": {"types": ["NodePort"]}}
    assert policy == {"pods": {"priorityClasses": ["batch-low"], "tolerations": ["dedicated"]}, "quotaMode": "both"}, "input not aliased"
    step = plans.plan_peer(fresh_state(), opts)[0]
    assert "policy pods.priorityClasses=batch-high, pods.tolerations=dedicated, quotaMode=both, services.types=NodePort" in step.description


def test_grants_without_a_file_change_only_their_keys_of_the_releases_policy():
    before = options(policy={"pods": {"priorityClasses": ["batch-low"]}, "ingress": {"hostDomains": ["apps.example.com"]}})
    current = p.remote_values_with_consumer({}, before)
    grant = options(quota=None, pod_security_level=None, node_labels=None,
                    policy_grants={("pods", "priorityClasses"): (), ("storage", "classes"): ("standard",)})
    steps = plans.plan_peer(peered_state(before, remote_values=current), grant)
    assert actions(plans.changes(steps))[0] == p.REMOTE_RELEASE
    assert consumer_entry(steps[0].data["values"])["policy"] == {
        "pods": {"priorityClasses": []}, "ingress": {"hostDomains": ["apps.example.com"]}, "storage": {"classes": ["standard"]}}


def test_no_policy_option_keeps_the_releases_policy():
    opts = options(policy={"pods": {"runtimeClasses": ["gvisor"]}})
    bare = options(quota=None, pod_security_level=None, node_labels=None)
    assert plans.changes(plans.plan_peer(peered_state(opts), bare)) == []
    same = options(policy={"pods": {"runtimeClasses": ["gvisor"]}})
    assert plans.changes(plans.plan_peer(peered_state(opts), same)) == []


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"pods": {"priorityClass": ["x"]}}, "--policy-file p.yaml: spec.policy.pods: unknown key(s) priorityClass"),
        ({"pods": {"priorityClasses": ["system-node-critical"]}}, "--policy-file p.yaml: spec.policy.pods.priorityClasses: 'system-node-critical' cannot be granted"),
        ({"services": {"externalIPCIDRs": ["everything"]}}, "spec.policy.services.externalIPCIDRs: 'everything' is not a CIDR"),
        (["pods"], "--policy-file p.yaml: must hold a map"),
    ],
)
def test_a_policy_file_is_checked_as_the_enforcer_reads_it(raw, message):
    with pytest.raises(p.PeeringError, match=re.escape(message)):
        p.parse_policy_document(raw, "--policy-file p.yaml")


def test_parse_grant():
    assert p.parse_grant("NodePort, LoadBalancer,,NodePort") == ("NodePort", "LoadBalancer")
    assert p.parse_grant("") == ()


def test_every_grant_flag_is_a_list_key_of_the_policy():
    from kube_offload.provider_policy import SCHEMA

    for flag, (section, key) in p.GRANT_FLAGS.items():
        assert SCHEMA[section][1][key][1] == "list", flag


# --- the CLI's policy flags (no cluster is read before they are checked) -----------------------------
def run_peer_cli(capsys, *argv: str) -> tuple[int, str]:
    from kube_offload.cli import build_parser

    args = build_parser().parse_args(["peer", "--local-cluster-id", "local", "--remote-cluster-id", "remote-1", *argv])
    code = args.func(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--grant-service-types", "ExternalName"),
         "--grant-service-types: spec.policy.services.types: 'ExternalName' cannot be granted"),
        (("--grant-priority-classes", "high,system-cluster-critical"),
         "--grant-priority-classes: spec.policy.pods.priorityClasses: 'system-cluster-critical' cannot be granted"),
    ],
)
def test_peer_refuses_a_bad_grant_naming_the_flag_and_the_key(capsys, argv, message):
    code, err = run_peer_cli(capsys, *argv)
    assert code == 2 and message in err, err


def test_peer_refuses_a_bad_policy_file_naming_the_file_and_the_key(capsys, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("pods:\n  volumeTypes: [hostPath]\n")
    code, err = run_peer_cli(capsys, "--policy-file", str(path))
    assert code == 2 and f"--policy-file {path}: spec.policy.pods.volumeTypes: 'hostPath'" in err, err
    code, err = run_peer_cli(capsys, "--policy-file", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read it" in err, err


def test_peer_reads_a_json_policy_file_and_the_grants(tmp_path):
    from kube_offload.peer import inputs
    from kube_offload.cli import build_parser

    path = tmp_path / "policy.json"
    path.write_text('{"ingress": {"hostDomains": ["apps.example.com"]}}')
    args = build_parser().parse_args(["peer", "--policy-file", str(path), "--grant-storage-classes", "standard,fast",
                                      "--grant-tolerations", ""])
    assert inputs.read_policy_file(args.policy_file) == {"ingress": {"hostDomains": ["apps.example.com"]}}
    assert inputs.policy_grants(args) == {("storage", "classes"): ("standard", "fast"), ("pods", "tolerations"): ()}
    assert inputs.policy_grants(build_parser().parse_args(["peer"])) == {}


# --- the server the virtual kubelet's pod is given -------------------------------------------
@pytest.mark.parametrize("server", ["https://127.0.0.1:6443", "https://127.0.0.2:40123", "https://localhost:6443",
                                    "https://[::1]:6443", "https://api.localhost"])
def test_a_loopback_remote_server_is_refused_unless_given_on_purpose(server):
    with pytest.raises(p.PeeringError, match=r"--remote-server is required: the remote kubeconfig names .*loopback"):
        p.pod_reachable_server("", server)
    # a URL given with --remote-server is the user's word: taken as it is, loopback or not
    assert p.pod_reachable_server(server, server) == server


@pytest.mark.parametrize("server", ["https://10.0.0.2:6443", "https://remote.example:6443", "https://172.31.250.5:40123"])
def test_a_remote_server_pods_can_reach_is_taken_from_the_kubeconfig(server):
    assert p.pod_reachable_server("", server) == server
    assert p.pod_reachable_server("https://other.example:6443", server) == "https://other.example:6443"


# --- where the charts come from ----------------------------------------------------------------
def test_charts_from_an_oci_repository_are_installed_at_the_chart_version():
    from kube_offload.peer import helm, inputs
    from kube_offload.cli import build_parser

    args = build_parser().parse_args(["peer", "--chart-repository", "oci://127.0.0.1:5000/charts/", "--chart-version", "0.1.0",
                                      "--plain-http", "true"])
    local, remote = inputs.chart_refs(args)
    assert (local.path, remote.path) == ("oci://127.0.0.1:5000/charts/kube-offload-local",
                                         "oci://127.0.0.1:5000/charts/kube-offload-remote")
    assert local.label == "kube-offload-local-0.1.0"  # what `helm list` shows once installed
    assert helm.chart_args(local.path, local.version, args.plain_http) == [
        "oci://127.0.0.1:5000/charts/kube-offload-local", "--version", "0.1.0", "--plain-http"]
    # a chart directory is its own version
    assert helm.chart_args("/src/charts/kube-offload-local", "0.1.0", True) == ["/src/charts/kube-offload-local"]
    # the steps carry the version to helm
    options = p.PeerOptions(local_cluster_id="local", remote_cluster_id="remote-1", remote_server="https://10.0.0.2:6443",
                            remote_ca_pem=None, remote_chart=remote, local_chart=local, quota={"pods": "10"})
    steps = plans.plan_peer(p.PeerState(None, False, None, None, False, None, False, False), options)
    installs = [s for s in steps if s.action in (p.REMOTE_RELEASE, p.LOCAL_RELEASE)]
    assert [(s.data["chart"], s.data["version"]) for s in installs] == [(remote.path, "0.1.0"), (local.path, "0.1.0")]


@pytest.mark.parametrize("argv, message", [
    (["--chart-repository", "https://charts.example.com"], "--chart-repository 'https://charts.example.com': an OCI repository"),
    (["--chart-repository", "oci://r.example/charts", "--charts-dir", "/x"], "two sources of the charts"),
])
def test_a_bad_chart_source_is_refused_naming_the_flag(argv, message):
    from kube_offload.peer import inputs
    from kube_offload.cli import build_parser

    with pytest.raises(p.PeeringError, match=message):
        inputs.chart_refs(build_parser().parse_args(["peer", *argv]))


# --- slices (docs/slices.md) ------------------------------------------------------------------
def test_peer_slices_become_the_remote_entrys_slices_and_unset_keeps_them():
    slices = p.parse_slice_flags(["gpu=gpu:cpu=2,nvidia.com/gpu=1", "web=general:memory=4Gi"])
    values = p.local_values_with_remote({}, options(slices=slices))
    [entry] = values["remoteClusters"]
    assert entry["slices"] == [
        {"name": "gpu", "pool": "gpu", "resources": {"cpu": "2", "nvidia.com/gpu": "1"}},
        {"name": "web", "pool": "general", "resources": {"memory": "4Gi"}},
    ]
    # Without --slice, the release's slices stay; with an empty tuple they would go.
    assert p.parse_slice_flags([]) is None
    again = p.local_values_with_remote(values, options())
    assert again["remoteClusters"][0]["slices"] == entry["slices"]


def test_a_bad_peer_slice_is_a_peering_error_naming_the_flag():
    with pytest.raises(p.PeeringError, match=r"--slice='gpu=gpu:cpu=x': cpu='x' is not a quantity"):
        p.parse_slice_flags(["gpu=gpu:cpu=x"])
    with pytest.raises(p.PeeringError, match="slice 'gpu' is given twice"):
        p.parse_slice_flags(["gpu=gpu:cpu=1", "gpu=other:cpu=1"])


# --- the provider's own cluster id (issue 37, item 7) ----------------------------------------------------
def test_peer_sets_the_providers_cluster_id_so_its_enforcer_refuses_loops():
    values = p.remote_values_with_consumer({}, options())
    assert values["clusterId"] == "remote-2"
    # A second consumer peering with the same provider under the same name keeps it.
    again = p.remote_values_with_consumer(values, options(local_cluster_id="team-b"))
    assert again["clusterId"] == "remote-2" and [e["name"] for e in again["consumers"]] == ["local", "team-b"]
    # A peering made before peer set it: the next peer plans the upgrade that sets it.
    older = {k: v for k, v in values.items() if k != "clusterId"}
    steps = plans.plan_peer(peered_state(options(), remote_values=older), options())
    assert steps[0].action == p.REMOTE_RELEASE and steps[0].data["values"]["clusterId"] == "remote-2"


def test_one_cluster_has_one_id():
    values = p.remote_values_with_consumer({}, options())
    with pytest.raises(p.PeeringError, match=r"already has clusterId 'remote-2'.*pass --remote-cluster-id remote-2"):
        p.remote_values_with_consumer(values, options(local_cluster_id="team-b", remote_cluster_id="provider"))
    with pytest.raises(p.PeeringError, match=r"--remote-values sets clusterId 'x' but --remote-cluster-id is 'remote-2'"):
        p.remote_values_with_consumer({}, options(remote_values={"clusterId": "x"}))


def test_the_token_peer_grants_must_be_renewable_under_the_consumers_policy():
    with pytest.raises(p.PeeringError, match=r"--token-expiration 172800s is longer than consumer local may renew its token for "
                                               r"\(spec.policy.tokens.maxExpirationSeconds: 86400s\)"):
        p.remote_values_with_consumer({}, options(token_expiration_seconds=2 * 86400))
    allowed = options(token_expiration_seconds=2 * 86400, policy={"tokens": {"maxExpirationSeconds": 2 * 86400}})
    assert p.remote_values_with_consumer({}, allowed)["consumers"][0]["policy"]["tokens"]["maxExpirationSeconds"] == 2 * 86400


# --- peer --gateway: kube-offload's own fabric (docs/networking.md) ---------------------------
CIDRS = fb.FabricCIDRs.parse(local="10.0.0.0/16", local_remapped="10.200.0.0/16", remote="10.0.0.0/16",
                             remote_remapped="10.100.0.0/16")
LOCAL_KEY, REMOTE_KEY = "L" * 43 + "=", "R" * 43 + "="


def gateway_peered(opts: p.PeerOptions) -> p.PeerState:
    local = {**CIDRS.local_gateway(), fb.PUBLIC_KEY: LOCAL_KEY, fb.PEER_PUBLIC_KEY: REMOTE_KEY, fb.PEER_ENDPOINT: "192.0.2.2:31000"}
    remote = {**CIDRS.remote_gateway(), fb.PUBLIC_KEY: REMOTE_KEY, fb.PEER_PUBLIC_KEY: LOCAL_KEY, fb.PEER_ENDPOINT: "192.0.2.1:31001"}
    return _replace(peered_state(opts), local_gateway=p.GatewaySide(local, True), remote_gateway=p.GatewaySide(remote, True))


def test_gateway_peering_plans_objects_releases_and_the_key_exchange() -> None:
    opts = options(gateway=p.GatewayOptions(CIDRS))
    steps = plans.plan_peer(fresh_state(), opts)
    actions = [s.action for s in steps]
    # the objects before the releases start the gateways; the exchange after them
    assert actions.index(p.GATEWAY_OBJECTS) < actions.index(p.REMOTE_RELEASE) < actions.index(p.LOCAL_RELEASE)
    assert actions.index(p.LOCAL_RELEASE) < actions.index(p.GATEWAY_PEERS) < actions.index(p.WAIT_NODE_READY)
    objects = next(s for s in steps if s.action == p.GATEWAY_OBJECTS)
    assert objects.data["local"] == CIDRS.local_gateway() and objects.data["remote"] == CIDRS.remote_gateway()
    # the vkubelet's remapping comes from the same CIDRs; both releases run a gateway
    local_values = next(s for s in steps if s.action == p.LOCAL_RELEASE).data["values"]
    entry = local_values["remoteClusters"][0]
    assert entry["gateway"] == {"enabled": True}
    assert (entry["podCIDR"], entry["podCIDRRemapped"], entry["localPodCIDRRemapped"]) == ("10.0.0.0/16", "10.100.0.0/16", "10.200.0.0/16")
    assert local_values["vkubelet"]["podCIDR"] == "10.0.0.0/16"
    remote_values = next(s for s in steps if s.action == p.REMOTE_RELEASE).data["values"]
    assert remote_values["consumers"][0]["gateway"] == {"enabled": True}
    assert p.local_gateway_name(opts) == "kube-offload-gateway-remote-2"
    assert p.remote_gateway_name(opts) == "kube-offload-gateway-local"


def test_a_gateway_peered_pair_plans_no_change() -> None:
    opts = options(gateway=p.GatewayOptions(CIDRS))
    assert plans.changes(plans.plan_peer(gateway_peered(opts), opts)) == []
    # an endpoint asked for that the local gateway does not hold yet is given again
    moved = options(gateway=p.GatewayOptions(CIDRS, remote_endpoint="192.0.2.9:31000"))
    assert [s.action for s in plans.changes(plans.plan_peer(gateway_peered(moved), moved))] == [p.GATEWAY_PEERS]
    # a gateway that made a new key (its Secret was emptied): exchanged again
    state = gateway_peered(opts)
    stale = _replace(state, remote_gateway=p.GatewaySide({**state.remote_gateway.config, fb.PUBLIC_KEY: "N" * 43 + "="}, True))
    assert [s.action for s in plans.changes(plans.plan_peer(stale, opts))] == [p.GATEWAY_PEERS]


def test_rotating_keys_is_one_run_of_peer() -> None:
    opts = options(gateway=p.GatewayOptions(CIDRS, rotate_keys=True))
    steps = plans.changes(plans.plan_peer(gateway_peered(opts), opts))
    assert [s.action for s in steps] == [p.ROTATE_GATEWAY_KEYS, p.GATEWAY_PEERS]
    # the exchange waits for keys other than the dropped ones
    assert steps[1].data["previous"] == {"local": LOCAL_KEY, "remote": REMOTE_KEY}


def test_unpeer_deletes_the_gateways_objects() -> None:
    state = p.UnpeerState(node_exists=False, node_unschedulable=False, pods_on_node=[], local_release=None, vkubelet_pods=[],
                          kubeconfig_secret_exists=False, twin_requests=[], twin_namespaces=[], foreign_namespaces=[],
                          remote_release=None, tenant_namespace_exists=False, consumer_exists=False,
                          local_gateway_objects=["ConfigMap/kube-offload-gateway-remote-2"],
                          remote_gateway_objects=["Secret/kube-offload-gateway-local-key"])
    opts = p.UnpeerOptions(local_cluster_id="local", remote_cluster_id="remote-2", remote_chart=REMOTE_CHART, local_chart=LOCAL_CHART)
    steps = plans.plan_unpeer(state, opts)
    assert [s.action for s in steps] == [p.DELETE_GATEWAY_OBJECTS]
    assert steps[0].data == {"local": ["ConfigMap/kube-offload-gateway-remote-2"], "remote": ["Secret/kube-offload-gateway-local-key"]}


def test_a_gateway_admits_the_consumers_remapped_pods_as_endpoints_and_keeps_the_policy() -> None:
    """Reflected Services of local pods name them at the consumer's remapped CIDR, which
    only the gateway carries: peer --gateway adds that range to endpoints.cidrs, once,
    keeping what the policy had."""
    opts = options(gateway=p.GatewayOptions(CIDRS))
    entry = p.remote_values_with_consumer({}, opts)["consumers"][0]
    assert entry["policy"]["endpoints"]["cidrs"] == ["10.200.0.0/16"]
    current = {"consumers": [{"name": "local", "policy": {"endpoints": {"cidrs": ["192.0.2.0/24"]},
                                                          "pods": {"tolerations": ["x"]}}}]}
    again = p.remote_values_with_consumer(current, opts)["consumers"][0]["policy"]
    assert again == {"endpoints": {"cidrs": ["192.0.2.0/24", "10.200.0.0/16"]}, "pods": {"tolerations": ["x"]}}
    twice = p.remote_values_with_consumer({"consumers": [{"name": "local", "policy": again}]}, opts)["consumers"][0]["policy"]
    assert twice == again
    # without --gateway nothing is granted
    assert "policy" not in p.remote_values_with_consumer({}, options())["consumers"][0]


def test_slice_none_removes_every_slice_and_must_stand_alone():
    assert p.parse_slice_flags([sr.NO_SLICES]) == ()
    with pytest.raises(p.PeeringError, match="--slice=none removes every slice of the peering: give it alone"):
        p.parse_slice_flags([sr.NO_SLICES, "gpu=gpu:cpu=1"])
    slices = p.parse_slice_flags(["gpu=gpu:cpu=2"])
    values = p.local_values_with_remote({}, options(slices=slices))
    emptied = p.local_values_with_remote(values, options(slices=p.parse_slice_flags([sr.NO_SLICES])))
    assert emptied["remoteClusters"][0]["slices"] == []


def test_a_bad_slice_is_reported_before_helm_is_looked_for(capsys):
    """Issue 41: --slice was checked only once Helm and the charts were found, so a missing
    Helm hid the user's real mistake."""
    code, err = run_peer_cli(capsys, "--slice", "gpu=gpu:nvidia.com/gpu=500m", "--helm", "/nonexistent/helm")
    assert code == 2, err
    assert "--slice='gpu=gpu:nvidia.com/gpu=500m': nvidia.com/gpu=500m must be a whole number" in err, err
    assert "--helm" not in err, err
    code, err = run_peer_cli(capsys, "--slice", "none", "--slice", "gpu=gpu:cpu=1", "--helm", "/nonexistent/helm")
    assert code == 2 and "--slice=none" in err and "--helm" not in err, err
    # ... as are the values files
    code, err = run_peer_cli(capsys, "--local-values", "/nonexistent/values.yaml", "--helm", "/nonexistent/helm")
    assert code == 2 and "--local-values '/nonexistent/values.yaml'" in err and "--helm" not in err, err


SLICE_NODE = "kube-offload-remote-2-gpu"


def sliced(opts: p.PeerOptions, **state) -> p.PeerState:
    """Peered as ``opts`` says, with slice ``gpu`` (and its leftovers) in both clusters."""
    asked = _replace(opts, slices=p.parse_slice_flags(["gpu=gpu:cpu=2"]))
    base = peered_state(asked)
    fields = dict(nodes={"gpu": sr.SliceNode(pods=("demo/trainer",))},
                  leader_leases=("kube-offload-vkubelet-remote-2", "kube-offload-vkubelet-remote-2-gpu"),
                  offload_slices=("gpu",), shadowpods={"gpu": ("demo-local/trainer",)})
    fields.update(state)
    return _replace(base, slices=sr.SliceLeftovers(**fields))


def test_a_slice_left_out_is_drained_then_its_node_leases_and_offloadslice_deleted():
    """Issue 41: a slice removed with peer left its node (NotReady, status unhealthy), its
    leader Lease and its OffloadSlice behind."""
    opts = options(slices=p.parse_slice_flags([sr.NO_SLICES]))
    steps = plans.plan_peer(sliced(opts), opts)
    assert actions(steps) == [p.CORDON_SLICE_NODES, p.EVICT_PODS, p.LOCAL_RELEASE, p.WAIT_SLICE_VKUBELETS_GONE,
                              p.DELETE_SLICE_NODES, p.DELETE_SLICE_SHADOWPODS, p.DELETE_OFFLOAD_SLICES, p.WAIT_NODE_READY]
    by_action = {s.action: s for s in steps}
    assert by_action[p.CORDON_SLICE_NODES].data == {"nodes": [SLICE_NODE]}
    assert by_action[p.EVICT_PODS].data == {"pods": ["demo/trainer"]}
    assert by_action[p.LOCAL_RELEASE].data["values"]["remoteClusters"][0]["slices"] == []
    assert by_action[p.WAIT_SLICE_VKUBELETS_GONE].data == {"deployments": {
        "kube-offload-vkubelet-remote-2-gpu":
            f"app.kubernetes.io/instance=kube-offload,app.kubernetes.io/component=vkubelet,{c.LABEL_SLICE_NODE}={SLICE_NODE}"}}
    assert not by_action[p.WAIT_SLICE_VKUBELETS_GONE].changes
    # the peering's own leader Lease stays
    assert by_action[p.DELETE_SLICE_NODES].data == {"nodes": [SLICE_NODE], "leases": ["kube-offload-vkubelet-remote-2-gpu"]}
    assert by_action[p.DELETE_SLICE_SHADOWPODS].data == {"slices": ["gpu"]}
    assert by_action[p.DELETE_OFFLOAD_SLICES].data == {"names": ["gpu"]}
    assert all("\n" not in s.description for s in steps)
    # Once done, a second run plans nothing.
    done = _replace(sliced(opts), local_release=release(LOCAL_CHART, by_action[p.LOCAL_RELEASE].data["values"], revision=8),
                    slices=sr.SliceLeftovers(leader_leases=("kube-offload-vkubelet-remote-2",)))
    assert plans.changes(plans.plan_peer(done, opts)) == []


def test_slices_kept_or_listed_are_left_alone_and_one_left_out_goes():
    kept = options()  # no --slice: keep the release's
    assert plans.changes(plans.plan_peer(sliced(kept), kept)) == []
    both = options(slices=p.parse_slice_flags(["gpu=gpu:cpu=2", "web=general:cpu=1"]))
    assert p.CORDON_SLICE_NODES not in actions(plans.plan_peer(sliced(both), both))
    # Listing only web removes gpu.
    web = options(slices=p.parse_slice_flags(["web=general:cpu=1"]))
    assert p.DELETE_OFFLOAD_SLICES in actions(plans.plan_peer(sliced(web), web))


def test_leftovers_of_a_slice_removed_before_are_cleaned_up_by_the_next_peer():
    """A node and OffloadSlice of a slice the release no longer has (removed by an older
    peer or by hand): nothing to evict, the rest deleted; a cordoned node is not cordoned again."""
    opts = options()
    state = sliced(opts, nodes={"old": sr.SliceNode(unschedulable=True)}, offload_slices=("gpu", "old"),
                   shadowpods={}, leader_leases=())
    steps = plans.plan_peer(state, opts)
    assert actions(steps) == [p.WAIT_SLICE_VKUBELETS_GONE, p.DELETE_SLICE_NODES, p.DELETE_OFFLOAD_SLICES, p.WAIT_NODE_READY]
    assert steps[1].data == {"nodes": ["kube-offload-remote-2-old"], "leases": []}
    assert steps[2].data == {"names": ["old"]}


def test_unpeer_takes_the_slices_nodes_down_with_the_peerings_own():
    """Issue 41: unpeer evicted and deleted only the peering's own node, leaving its slices'
    nodes (and their leader Leases) behind."""
    opts = options(slices=p.parse_slice_flags(["gpu=gpu:cpu=2"]))
    local_values = p.local_values_with_remote({}, opts)
    state = peered_unpeer_state(local_release=release(LOCAL_CHART, local_values),
                                slices=sr.SliceLeftovers(nodes={"gpu": sr.SliceNode(pods=("demo/trainer",))}, leader_leases=(
                                    "kube-offload-vkubelet-remote-2", "kube-offload-vkubelet-remote-2-gpu")))
    steps = plans.plan_unpeer(state, unpeer_options())
    assert actions(steps)[:8] == [p.CORDON_NODE, p.CORDON_SLICE_NODES, p.EVICT_PODS, p.LOCAL_RELEASE, p.WAIT_VKUBELET_GONE,
                                  p.WAIT_SLICE_VKUBELETS_GONE, p.DELETE_KUBECONFIG_SECRET, p.DELETE_NODE]
    by_action = {s.action: s for s in steps}
    assert by_action[p.EVICT_PODS].data["pods"] == ["demo/web-1", "demo/web-2", "demo/trainer"]
    assert by_action[p.DELETE_SLICE_NODES].data == {"nodes": [SLICE_NODE], "leases": ["kube-offload-vkubelet-remote-2-gpu"]}
    assert list(by_action[p.WAIT_SLICE_VKUBELETS_GONE].data["deployments"]) == ["kube-offload-vkubelet-remote-2-gpu"]
