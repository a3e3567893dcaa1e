"""The virtual Node and Lease as written to the API: labels, taint, conditions, status
diffing and heartbeats."""

from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload.resources import parse_quantity
from kube_offload.slice_requests import parse_slice
from vkubelet.node import forge
from vkubelet.settings import Settings, SettingsError, parse_duration, parse_node_labels

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SETTINGS = Settings(
    cluster_id="remote-1",
    local_cluster_id="local",
    node_labels={"topology.kubernetes.io/region": "eu-west", c.LABEL_TYPE: "forged"},
)


def _observation(reachable=True, capacity=None, pressure=None, silent_for=1.0):
    return forge.Observation(
        reachable=reachable,
        silent_for=silent_for,
        capacity=capacity if capacity is not None else {"cpu": parse_quantity("3600m"), "pods": parse_quantity("99")},
        pressure=pressure or {},
        remote_version="v1.37.2",
    )


def _condition(status, kind):
    return next(cond for cond in status["conditions"] if cond["type"] == kind)


def test_contract_labels_win_over_configured_ones():
    labels = forge.node_labels(SETTINGS)
    assert labels[c.LABEL_TYPE] == c.TYPE_VIRTUAL_NODE
    assert labels[c.LABEL_CLUSTER_ID] == "remote-1"
    assert labels[c.LABEL_HOSTNAME] == "kube-offload-remote-1"
    assert labels["topology.kubernetes.io/region"] == "eu-west"


def test_new_node_has_name_taint_addresses_endpoint_and_capacity():
    status = forge.node_status(SETTINGS, _observation(), None, NOW)
    node = forge.build_node(SETTINGS, status, {c.ANNOTATION_REMOTE_CAPACITY: "{}"})
    assert node["metadata"]["name"] == "kube-offload-remote-1"
    assert node["spec"]["taints"] == [{"key": c.TAINT_KEY, "value": "true", "effect": "NoExecute"}]
    assert node["metadata"]["annotations"] == {c.ANNOTATION_REMOTE_CAPACITY: "{}"}
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": "127.0.0.1"},
    ]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["capacity"] == {"cpu": "3600m", "pods": "99"}
    assert status["allocatable"] == status["capacity"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert status["nodeInfo"]["operatingSystem"] == "linux"


def test_ready_follows_reachability():
    ready = _condition(forge.node_status(SETTINGS, _observation(True), None, NOW), "Ready")
    assert ready["status"] == "True" and ready["reason"] == forge.REASON_READY
    down = _condition(forge.node_status(SETTINGS, _observation(False, silent_for=25.0), None, NOW), "Ready")
    assert down["status"] == "False" and down["reason"] == forge.REASON_NOT_READY
    assert "25s" in down["message"]


def test_pressure_conditions_true_when_any_remote_node_reports_them():
    status = forge.node_status(SETTINGS, _observation(pressure={"DiskPressure": ["n1", "n2"]}), None, NOW)
    assert _condition(status, "DiskPressure")["status"] == "True"
    assert "n1, n2" in _condition(status, "DiskPressure")["message"]
    assert _condition(status, "MemoryPressure")["status"] == "False"
    assert _condition(status, "PIDPressure")["status"] == "False"


def test_transition_time_kept_while_status_unchanged_and_moved_on_change():
    first = forge.node_status(SETTINGS, _observation(True), None, NOW)
    later = NOW + timedelta(minutes=5)
    same = forge.node_status(SETTINGS, _observation(True), first, later)
    assert _condition(same, "Ready")["lastTransitionTime"] == forge.format_time(NOW)
    assert _condition(same, "Ready")["lastHeartbeatTime"] == forge.format_time(later)
    flipped = forge.node_status(SETTINGS, _observation(False), first, later)
    assert _condition(flipped, "Ready")["lastTransitionTime"] == forge.format_time(later)


def test_capacity_unknown_keeps_the_previous_one():
    previous = {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "2"}}
    status = forge.node_status(SETTINGS, forge.Observation(True, 1.0, None, {}), previous, NOW)
    assert status["capacity"] == {"cpu": "2"} and status["allocatable"] == {"cpu": "2"}


def test_status_patch_skipped_when_only_heartbeats_differ():
    current = forge.node_status(SETTINGS, _observation(), None, NOW)
    soon = NOW + timedelta(seconds=20)
    desired = forge.node_status(SETTINGS, _observation(), current, soon)
    assert forge.status_patch(current, desired, soon, 60) is None
    # ...until the heartbeat falls due.
    late = NOW + timedelta(seconds=61)
    assert forge.status_patch(current, forge.node_status(SETTINGS, _observation(), current, late), late, 60) is not None


def test_status_patch_written_on_a_real_change_and_nulls_vanished_resources():
    current = forge.node_status(SETTINGS, _observation(capacity={"cpu": 1000, "nvidia.com/gpu": 1000}), None, NOW)
    desired = forge.node_status(SETTINGS, _observation(capacity={"cpu": 2000}), current, NOW)
    patch = forge.status_patch(current, desired, NOW, 60)
    assert patch["status"]["capacity"] == {"cpu": "2", "nvidia.com/gpu": None}
    assert patch["status"]["allocatable"] == {"cpu": "2", "nvidia.com/gpu": None}


def test_quantity_spelling_is_not_a_change():
    current = forge.node_status(SETTINGS, _observation(capacity={"memory": parse_quantity("1Gi")}), None, NOW)
    current["capacity"] = {"memory": "1073741824"}
    current["allocatable"] = {"memory": "1073741824"}
    desired = forge.node_status(SETTINGS, _observation(capacity={"memory": parse_quantity("1Gi")}), current, NOW)
    assert forge.status_equivalent(current, desired)


def test_metadata_patch_adds_ours_and_keeps_others():
    node = {
        "metadata": {"name": "kube-offload-remote-1", "resourceVersion": "7", "labels": {"team": "x"}, "annotations": {}},
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]},
    }
    patch = forge.metadata_patch(node, SETTINGS, {c.ANNOTATION_REMOTE_CAPACITY: "{...}"})
    assert patch["metadata"]["labels"][c.LABEL_TYPE] == c.TYPE_VIRTUAL_NODE
    assert "team" not in patch["metadata"]["labels"]  # untouched, not removed
    assert patch["metadata"]["annotations"] == {c.ANNOTATION_REMOTE_CAPACITY: "{...}"}
    assert patch["spec"]["taints"] == [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        forge.virtual_node_taint(),
    ]
    assert patch["metadata"]["resourceVersion"] == "7"


def test_metadata_patch_none_when_in_sync():
    node = {
        "metadata": {"labels": forge.node_labels(SETTINGS), "annotations": {"a": "1"}},
        "spec": {"taints": [forge.virtual_node_taint(), {"key": "other", "effect": "NoSchedule"}]},
    }
    assert forge.metadata_patch(node, SETTINGS, {"a": "1"}) is None


CORDON = {"key": c.TAINT_PROVIDER_CORDONED_KEY, "value": "true", "effect": "NoSchedule"}


def test_a_provider_cordon_taints_the_node_and_lifting_it_removes_only_that():
    in_sync = {
        "metadata": {"labels": forge.node_labels(SETTINGS), "resourceVersion": "9"},
        "spec": {"taints": [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint()]},
    }
    patch = forge.metadata_patch(in_sync, SETTINGS, {}, cordoned=True)
    # NoSchedule: new pods go elsewhere, running ones stay (the provider keeps them too).
    assert patch["spec"]["taints"] == [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint(), CORDON]
    assert patch["metadata"]["resourceVersion"] == "9"
    cordoned = {**in_sync, "spec": {"taints": patch["spec"]["taints"]}}
    assert forge.metadata_patch(cordoned, SETTINGS, {}, cordoned=True) is None
    lifted = forge.metadata_patch(cordoned, SETTINGS, {}, cordoned=False)
    assert lifted["spec"]["taints"] == [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint()]
    # The local admin's own cordon (kubectl cordon: spec.unschedulable) is not ours to touch.
    assert "unschedulable" not in lifted["spec"] and "unschedulable" not in patch["spec"]


def test_a_node_created_while_cordoned_has_the_taint_from_the_start():
    node = forge.build_node(SETTINGS, {}, {}, cordoned=True)
    assert node["spec"]["taints"] == [forge.virtual_node_taint(), CORDON]


DRAIN = {"key": c.TAINT_PROVIDER_DRAINING_KEY, "value": "true", "effect": "NoExecute"}


def test_a_provider_drain_taints_the_node_no_execute_and_undrain_removes_only_that():
    in_sync = {
        "metadata": {"labels": forge.node_labels(SETTINGS), "resourceVersion": "9"},
        "spec": {"taints": [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint()]},
    }
    patch = forge.metadata_patch(in_sync, SETTINGS, {}, draining=True)
    # NoExecute: the local taint manager evicts the pods bound here, their controllers
    # recreate them, and the scheduler sends none back.
    assert patch["spec"]["taints"] == [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint(), DRAIN]
    both = forge.metadata_patch(in_sync, SETTINGS, {}, cordoned=True, draining=True)
    assert both["spec"]["taints"][-2:] == [CORDON, DRAIN]
    drained = {**in_sync, "spec": {"taints": patch["spec"]["taints"]}}
    assert forge.metadata_patch(drained, SETTINGS, {}, draining=True) is None
    undrained = forge.metadata_patch(drained, SETTINGS, {}, draining=False)
    assert undrained["spec"]["taints"] == [{"key": "team", "effect": "NoSchedule"}, forge.virtual_node_taint()]
    assert forge.build_node(SETTINGS, {}, {}, draining=True)["spec"]["taints"] == [forge.virtual_node_taint(), DRAIN]


def test_the_webhook_toleration_does_not_tolerate_the_drain_taint():
    from kube_offload.affinity import virtual_node_toleration

    toleration = virtual_node_toleration()
    assert toleration["key"] == c.TAINT_KEY != c.TAINT_PROVIDER_DRAINING_KEY
    assert toleration["operator"] == "Equal"  # never a key-less Exists, which would tolerate every taint


def test_our_taints_in_another_form_are_rewritten():
    node = {
        "metadata": {"labels": forge.node_labels(SETTINGS)},
        "spec": {"taints": [{**CORDON, "effect": "NoExecute"}, {**forge.virtual_node_taint(), "value": "false"}]},
    }
    assert forge.metadata_patch(node, SETTINGS, {}, cordoned=True)["spec"]["taints"] == [forge.virtual_node_taint(), CORDON]


def test_lease_owned_by_the_node_and_renewal_uses_micro_time():
    lease = forge.build_lease(SETTINGS, "node-uid")
    assert lease["metadata"] == {
        "name": "kube-offload-remote-1",
        "namespace": "kube-node-lease",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "kube-offload-remote-1", "uid": "node-uid"}],
    }
    assert lease["spec"] == {"holderIdentity": "kube-offload-remote-1", "leaseDurationSeconds": 40}
    renewal = forge.lease_renewal(SETTINGS, NOW)
    assert renewal["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"


# --- settings ---------------------------------------------------------------------------------
def test_settings_default_node_name_and_validation():
    assert Settings(cluster_id="b", local_cluster_id="a").node_name == "kube-offload-b"
    Settings(cluster_id="b", local_cluster_id="a").validate()
    with pytest.raises(SettingsError, match="--cluster-id"):
        Settings(cluster_id="Bad_Id", local_cluster_id="a").validate()
    with pytest.raises(SettingsError, match="--local-cluster-id is required"):
        Settings(cluster_id="b", local_cluster_id="").validate()
    with pytest.raises(SettingsError, match="--sharing-percentage"):
        Settings(cluster_id="b", local_cluster_id="a", sharing_percentage=0).validate()
    with pytest.raises(SettingsError, match="--ping-timeout"):
        Settings(cluster_id="b", local_cluster_id="a", ping_interval=10, ping_timeout=5).validate()
    with pytest.raises(SettingsError, match="--node-label"):
        Settings(cluster_id="b", local_cluster_id="a", node_labels={"bad key": "v"}).validate()


def test_node_labels_and_durations_parse():
    assert parse_node_labels(["a=b", "topology.kubernetes.io/region = eu"]) == {
        "a": "b",
        "topology.kubernetes.io/region": "eu",
    }
    with pytest.raises(SettingsError):
        parse_node_labels(["novalue"])
    assert parse_duration("5s") == 5.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("7") == 7.0
    with pytest.raises(ValueError):
        parse_duration("soon")


# --- provider-suggested labels ------------------------------------------------------------------
SUGGESTED = {"topology.kubernetes.io/region": "us-east", "topology.kubernetes.io/zone": "us-east-1a", "tier": "gold"}


def test_configured_labels_win_over_suggested_ones_and_contract_labels_over_both():
    labels = forge.node_labels(SETTINGS, {**SUGGESTED, c.LABEL_CLUSTER_ID: "spoofed"})
    assert labels["topology.kubernetes.io/region"] == "eu-west"  # --node-label over the provider
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert labels["tier"] == "gold"
    assert labels[c.LABEL_CLUSTER_ID] == "remote-1"


def test_new_node_records_which_labels_came_from_the_provider():
    node = forge.build_node(SETTINGS, {}, {}, SUGGESTED)
    assert node["metadata"]["labels"]["tier"] == "gold"
    # region is ours (--node-label): it is not the provider's to withdraw
    assert node["metadata"]["annotations"][c.ANNOTATION_PROVIDER_LABELS] == "tier,topology.kubernetes.io/zone"
    assert c.ANNOTATION_PROVIDER_LABELS not in forge.build_node(SETTINGS, {}, {}).get("metadata", {}).get("annotations", {})


def test_a_withdrawn_suggestion_is_removed_and_other_labels_kept():
    node = forge.build_node(SETTINGS, {}, {}, SUGGESTED)
    node["metadata"]["labels"]["team"] = "kubectl-label"  # someone else's
    node["metadata"]["resourceVersion"] = "7"
    patch = forge.metadata_patch(node, SETTINGS, {}, {"tier": "silver"})
    assert patch["metadata"]["labels"] == {"tier": "silver", "topology.kubernetes.io/zone": None}
    assert patch["metadata"]["annotations"] == {c.ANNOTATION_PROVIDER_LABELS: "tier"}
    assert "spec" not in patch


def test_all_suggestions_withdrawn_drops_the_annotation_too():
    node = forge.build_node(SETTINGS, {}, {}, SUGGESTED)
    patch = forge.metadata_patch(node, SETTINGS, {}, {})
    assert patch["metadata"]["labels"] == {"tier": None, "topology.kubernetes.io/zone": None}
    assert patch["metadata"]["annotations"] == {c.ANNOTATION_PROVIDER_LABELS: None}


def test_suggestions_in_sync_need_no_patch():
    node = forge.build_node(SETTINGS, {}, {}, SUGGESTED)
    assert forge.metadata_patch(node, SETTINGS, {}, SUGGESTED) is None


# --- slices (docs/slices.md) ------------------------------------------------------------------
SLICE_SETTINGS = Settings(cluster_id="remote-1", local_cluster_id="local", slice=parse_slice("gpu=a100:cpu=2"))


def test_a_slice_node_is_named_and_labelled_for_its_slice():
    assert SLICE_SETTINGS.node_name == "kube-offload-remote-1-gpu"
    labels = forge.node_labels(SLICE_SETTINGS, {c.LABEL_SLICE: "forged", "accelerator": "a100"})
    assert labels[c.LABEL_SLICE] == "gpu"  # a contract label: no suggestion overrides it
    assert labels[c.LABEL_HOSTNAME] == "kube-offload-remote-1-gpu"
    assert labels["accelerator"] == "a100"
    assert c.LABEL_SLICE not in forge.node_labels(SETTINGS)


def test_pool_labels_join_the_consumers_under_the_same_rule():
    merged, dropped = forge.slice_suggested(
        {"region": "eu", "accelerator": "none"},
        {"accelerator": "a100", c.LABEL_TYPE: "forged", "node-role.kubernetes.io/gpu": ""},
    )
    assert merged == {"region": "eu", "accelerator": "a100"}  # the pool's word, more specific, wins
    assert len(dropped) == 2 and all("ignored" in why for why in dropped)


def test_a_slice_not_accepted_is_tainted_until_it_is():
    taint = {"key": c.TAINT_SLICE_NOT_ACCEPTED_KEY, "value": "true", "effect": "NoSchedule"}
    tainted = forge.node_taints(None, cordoned=False, slice_refused=True)
    assert taint in tainted and forge.virtual_node_taint() in tainted
    admin = {"key": "admin", "effect": "NoSchedule"}
    assert forge.node_taints([admin, *tainted], cordoned=False, slice_refused=False) == [admin, forge.virtual_node_taint()]
    node = forge.build_node(SLICE_SETTINGS, {}, {}, slice_refused=True)
    patch = forge.metadata_patch(node, SLICE_SETTINGS, {}, slice_refused=False)
    assert patch is not None and patch["spec"]["taints"] == [forge.virtual_node_taint()]
