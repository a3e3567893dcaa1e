"""What of a running pod changes in place, hop by hop: local pod -> ShadowPod template
(template_patch) and template -> the enforcer's pod (pod_patch), with the record that
keeps the provider's own additions and avoids fighting them."""

from __future__ import annotations

import copy
import json

import pytest

from kube_offload.constants import ANNOTATION_APPLIED_TEMPLATE, LABEL_MANAGED_BY, LABEL_ORIGIN_CLUSTER_ID, MANAGED_BY_ENFORCER
from kube_offload.pod_updates import (
    describe_patch,
    merged_tolerations,
    pod_patch,
    read_applied,
    template_patch,
    with_mutable_fields,
)
from kube_offload.shadowpod import build_pod, pod_update
from support import builders

SPEC = {
    "initContainers": [{"name": "init", "image": "busybox:1"}],
    "containers": [{"name": "app", "image": "nginx:1", "command": ["nginx"]}, {"name": "side", "image": "envoy:1"}],
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
# What the provider's admission adds to every pod it creates.
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def shadowpod(labels=None, annotations=None, spec=None) -> dict:
    return builders.shadowpod("web", "demo-local", spec=spec if spec is not None else SPEC,
                              pod_labels=labels if labels is not None else {"app": "web"},
                              pod_annotations=annotations if annotations is not None else {"note": "1"},
                              origin="local", uid="shp-uid")


def running_pod(shp: dict) -> dict:
    """The pod as the provider stored it: admission added a label, an annotation and the
    default tolerations."""
    pod = build_pod(shp)
    pod["metadata"]["labels"]["provider.example/zone"] = "a"
    pod["metadata"]["annotations"]["provider.example/injected"] = "yes"
    pod["metadata"]["resourceVersion"] = "42"
    pod["spec"]["tolerations"] = [*pod["spec"].get("tolerations", []), *DEFAULT_TOLERATIONS]
    return pod


def apply(pod: dict, patch: dict) -> dict:
    """A strategic merge patch as the apiserver applies it to these fields."""
    pod = copy.deepcopy(pod)
    for field in ("labels", "annotations"):
        for k, v in ((patch.get("metadata") or {}).get(field) or {}).items():
            if v is None:
                pod["metadata"][field].pop(k, None)
            else:
                pod["metadata"].setdefault(field, {})[k] = v
    for field, value in (patch.get("spec") or {}).items():
        if field in ("containers", "initContainers"):
            for change in value:
                for container in pod["spec"][field]:
                    if container["name"] == change["name"]:
                        container.update(change)
        else:
            pod["spec"][field] = value
    return pod


# --- the mutable fields ----------------------------------------------------------------------
def test_with_mutable_fields_takes_images_deadline_and_tolerations_only():
    desired = copy.deepcopy(SPEC)
    desired["containers"][0]["image"] = "nginx:2"
    desired["containers"][0]["command"] = ["changed"]  # immutable: not taken
    desired["initContainers"][0]["image"] = "busybox:2"
    desired["activeDeadlineSeconds"] = 600
    desired["tolerations"].append({"key": "spot", "operator": "Exists"})
    desired["containers"].append({"name": "new", "image": "x"})  # containers cannot be added
    result = with_mutable_fields(SPEC, desired)
    assert [c["image"] for c in result["containers"]] == ["nginx:2", "envoy:1"]
    assert result["containers"][0]["command"] == ["nginx"]
    assert result["initContainers"][0]["image"] == "busybox:2"
    assert result["activeDeadlineSeconds"] == 600
    assert result["tolerations"] == [SPEC["tolerations"][0], {"key": "spot", "operator": "Exists"}]
    assert SPEC["containers"][0]["image"] == "nginx:1", "inputs are not changed"


def test_deadline_is_never_unset():
    assert with_mutable_fields({**SPEC, "activeDeadlineSeconds": 60}, SPEC)["activeDeadlineSeconds"] == 60


@pytest.mark.parametrize(
    "current, desired, expected",
    [
        # the provider's defaults stay, an addition is appended
        (DEFAULT_TOLERATIONS, [{"key": "spot", "operator": "Exists"}], [*DEFAULT_TOLERATIONS, {"key": "spot", "operator": "Exists"}]),
        # tolerationSeconds of an existing toleration may change in place
        ([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
         [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
         [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]),
        # a missing operator is Equal
        ([{"key": "k", "value": "v"}], [{"key": "k", "operator": "Equal", "value": "v"}], [{"key": "k", "operator": "Equal", "value": "v"}]),
        # nothing is ever removed
        ([{"key": "k", "operator": "Exists"}], [], [{"key": "k", "operator": "Exists"}]),
        (None, None, []),
    ],
)
def test_merged_tolerations(current, desired, expected):
    assert merged_tolerations(current, desired) == expected


# --- hop 1: local pod -> template ---------------------------------------------------------------
def test_template_patch_none_when_nothing_changed():
    pod = shadowpod()["spec"]["pod"]
    assert template_patch(pod, copy.deepcopy(pod)) is None


def test_template_patch_carries_labels_annotations_and_mutable_fields_only():
    have = shadowpod()["spec"]["pod"]
    wanted = shadowpod(labels={"app": "web", "tier": "front"}, annotations={}, spec={
        **SPEC,
        "containers": [{"name": "app", "image": "nginx:2", "command": ["other"]}, {"name": "side", "image": "envoy:1"}],
        "activeDeadlineSeconds": 30,
        "affinity": {"podAffinity": {}},  # a context change, not an update of the running pod
    })["spec"]["pod"]
    patch = template_patch(have, wanted)
    assert patch["metadata"] == {
        "labels": {"app": "web", "tier": "front", LABEL_ORIGIN_CLUSTER_ID: "local"},
        "annotations": {"note": None},
    }
    # Lists go whole (a merge patch replaces lists): the template's own containers, new image.
    assert patch["spec"] == {
        "containers": [{"name": "app", "image": "nginx:2", "command": ["nginx"]}, {"name": "side", "image": "envoy:1"}],
        "activeDeadlineSeconds": 30,
    }


# --- hop 2: template -> pod -------------------------------------------------------------------------
def test_a_pod_made_from_its_template_needs_no_patch_even_after_admission_changed_it():
    shp = shadowpod()
    pod = running_pod(shp)
    pod["spec"]["containers"][0]["image"] = "mirror.example/nginx:1"  # a provider's image rewrite
    assert pod_update(shp, pod) is None


def test_label_annotation_and_image_changes_reach_the_pod_and_keep_the_providers_keys():
    old = shadowpod()
    pod = running_pod(old)
    new = shadowpod(labels={"app": "web", "tier": "front"}, annotations={"owner": "team-a"}, spec={
        **SPEC,
        "containers": [{"name": "app", "image": "nginx:2"}, {"name": "side", "image": "envoy:1"}],
        "tolerations": [*SPEC["tolerations"], {"key": "spot", "operator": "Exists"}],
        "activeDeadlineSeconds": 120,
    })
    patch = pod_update(new, pod)
    assert patch["metadata"]["labels"] == {"tier": "front"}
    assert patch["metadata"]["annotations"]["owner"] == "team-a"
    assert patch["metadata"]["annotations"]["note"] is None, "a key the enforcer had set is removed"
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["spec"]["containers"] == [{"name": "app", "image": "nginx:2"}]
    assert patch["spec"]["activeDeadlineSeconds"] == 120
    assert patch["spec"]["tolerations"] == [*SPEC["tolerations"], *DEFAULT_TOLERATIONS, {"key": "spot", "operator": "Exists"}]
    assert describe_patch(patch) == "labels, annotations, images, activeDeadlineSeconds, tolerations"

    after = apply(pod, patch)
    labels = after["metadata"]["labels"]
    assert labels == {"app": "web", "tier": "front", LABEL_ORIGIN_CLUSTER_ID: "local",
                      LABEL_MANAGED_BY: MANAGED_BY_ENFORCER, "provider.example/zone": "a"}
    assert "provider.example/injected" in after["metadata"]["annotations"]
    assert "note" not in after["metadata"]["annotations"]
    assert read_applied(after).labels == {"app", "tier", LABEL_ORIGIN_CLUSTER_ID}
    assert pod_update(new, after) is None, "applied once, then quiet"


def test_removing_a_label_removes_it_remotely_but_not_the_system_ones():
    old = shadowpod(labels={"app": "web", "team": "a"})
    pod = running_pod(old)
    # Even a template that tries to drop or change them keeps origin and managed-by.
    new = shadowpod(labels={"app": "web", LABEL_MANAGED_BY: "someone"})
    patch = pod_update(new, pod)
    assert patch["metadata"]["labels"] == {"team": None}
    after = apply(pod, patch)
    assert after["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY_ENFORCER
    assert after["metadata"]["labels"][LABEL_ORIGIN_CLUSTER_ID] == "local"


def test_a_pod_without_record_gets_one_and_loses_nothing():
    shp = shadowpod()
    pod = running_pod(shp)
    del pod["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE]
    patch = pod_update(shadowpod(labels={}), pod)
    assert None not in patch["metadata"].get("labels", {}).values()
    assert json.loads(patch["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE])["labels"] == [LABEL_ORIGIN_CLUSTER_ID]
    assert "spec" not in patch


def test_a_tampered_record_reads_as_none():
    pod = running_pod(shadowpod())
    pod["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE] = "{not json"
    assert read_applied(pod) is None
    pod["metadata"]["annotations"][ANNOTATION_APPLIED_TEMPLATE] = "[1, 2]"
    assert read_applied(pod) is None


def test_pod_patch_direct_images_by_container_name():
    pod = {"metadata": {}, "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    patch = pod_patch(pod, {}, {}, {"containers": [{"name": "b", "image": "2"}, {"name": "zzz", "image": "9"}]})
    assert patch["spec"] == {"containers": [{"name": "b", "image": "2"}]}
    assert "resourceVersion" not in patch["metadata"]
