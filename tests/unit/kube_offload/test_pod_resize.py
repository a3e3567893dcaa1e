"""In-place resize, the pure half (kube_offload/pod_resize.py): what a resize changes, the
template patch (vkubelet) and the pods/resize patch (enforcer), what a pod holds while a
resize is under way, the local pod's resize conditions and the quota a pod alone exceeds."""

from __future__ import annotations

import copy

import pytest

from kube_offload import pod_resize as pr
from kube_offload.consumer_quota import pod_charges


def container(name: str, requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "i", "resources": resources, **extra}


def spec(*containers: dict, init: list[dict] | None = None) -> dict:
    out: dict = {"containers": list(containers)}
    if init is not None:
        out["initContainers"] = init
    return out


def test_resizable_containers_are_the_containers_and_the_sidecars():
    s = spec(container("a"), init=[container("setup"), container("proxy", restartPolicy="Always")])
    assert [(f, c["name"]) for f, _i, c in pr.resizable_containers(s)] == [("initContainers", "proxy"), ("containers", "a")]


def test_resized_containers_compare_amounts_not_spellings():
    have = spec(container("a", {"cpu": "0.5", "memory": "64Mi"}), container("b", {"cpu": "1"}))
    assert pr.resized_containers(have, spec(container("a", {"cpu": "500m", "memory": "67108864"}), container("b", {"cpu": "1"}))) == []
    assert pr.resized_containers(have, spec(container("a", {"cpu": "500m", "memory": "64Mi"}), container("b", {"cpu": "2"}))) == ["b"]
    # Only cpu and memory are a resize's to change.
    assert pr.resized_containers(spec(container("a", {"ephemeral-storage": "1Gi"})),
                                 spec(container("a", {"ephemeral-storage": "2Gi"}))) == []


def test_the_template_patch_takes_the_local_resources_and_keeps_the_rest_of_the_lists():
    template = spec(container("a", {"cpu": "100m"}, {"cpu": "200m"}, env=[{"name": "X", "value": "1"}]), container("b", {"cpu": "1"}),
                    init=[container("setup", {"cpu": "1"}), container("proxy", {"cpu": "50m"}, restartPolicy="Always")])
    local = copy.deepcopy(template)
    local["containers"][0]["resources"] = {"requests": {"cpu": "300m"}, "limits": {"cpu": "400m"}}
    local["initContainers"][1]["resources"] = {"requests": {"cpu": "75m"}}
    local["containers"][0]["image"] = "other"  # not the resize's to carry
    patch = pr.template_resize(template, local)
    assert patch is not None
    assert patch["containers"][0] == {**template["containers"][0], "resources": {"requests": {"cpu": "300m"}, "limits": {"cpu": "400m"}}}
    assert patch["containers"][1] == template["containers"][1]
    assert patch["initContainers"][0] == template["initContainers"][0]
    assert patch["initContainers"][1]["resources"] == {"requests": {"cpu": "75m"}}
    assert pr.template_resize(template, template) is None
    assert pr.carried(local, template) is False and pr.carried(template, template) is True


def test_the_pod_resize_patch_names_only_the_changed_figures_the_template_states():
    pod = spec(container("a", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "1Gi"}),
               container("b", {"cpu": "1"}))
    template = spec(container("a", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "400m", "memory": "128Mi"}), container("b", {"cpu": "1"}))
    patch = pr.pod_resize_patch(pod, template)
    assert patch == {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "400m"}}}]}}
    assert pr.describe_resize(patch) == "a: limits.cpu=400m"
    # A limit the provider's LimitRange gave the pod (not in the template) is left alone.
    defaulted = copy.deepcopy(template)
    del defaulted["containers"][1]["resources"]
    pod["containers"][0]["resources"]["limits"]["cpu"] = "400m"
    assert pr.pod_resize_patch(pod, defaulted) is None


def test_a_pod_holds_the_larger_of_its_spec_and_what_its_kubelet_reports():
    pod = {"spec": spec(container("a", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"})),
           "status": {"containerStatuses": [{"name": "a", "allocatedResources": {"cpu": "500m", "memory": "64Mi"},
                                             "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "128Mi"}}}]}}
    held = pr.held_pod(pod)
    resources = held["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}
    assert pod_charges(held)["cpu"] == 500 and pod_charges(held)["limits.cpu"] == 1000
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m", "the pod itself is not changed"
    # Raised and not yet actuated: the spec's larger figure holds.
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert pod_charges(pr.held_pod(pod))["cpu"] == 2000
    bare = {"spec": spec(container("a", {"cpu": "1"}))}
    assert pr.held_pod(bare) is bare


def _cond(kind: str, reason: str = "", generation: int | None = 3) -> dict:
    out = {"type": kind, "status": "True", "reason": reason, "message": f"{kind} {reason}"}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def test_the_local_pod_shows_the_remote_kubelets_resize_conditions_once_carried_else_its_own():
    ours = pr.pending_condition(pr.DEFERRED, "quota", generation=4, now="2026-12-02T07:00:00Z")
    remote = [_cond(pr.IN_PROGRESS), _cond("Ready"), _cond(pr.IN_PROGRESS, "again")]
    assert pr.local_conditions([ours], remote, is_carried=True) == [
        {"type": pr.IN_PROGRESS, "status": "True", "reason": "", "message": "PodResizeInProgress "}]
    assert pr.local_conditions([ours, _cond("Ready")], remote, is_carried=False) == [ours]


def test_a_pending_condition_replaces_any_resize_condition_and_is_written_once():
    ready = _cond("Ready")
    pending = pr.pending_condition(pr.INFEASIBLE, "too big", generation=2, now="t1")
    assert pending["type"] == pr.PENDING and pending["reason"] == pr.INFEASIBLE and pending["observedGeneration"] == 2
    conditions = pr.with_pending([ready, _cond(pr.IN_PROGRESS)], pending)
    assert conditions == [ready, pending]
    again = pr.pending_condition(pr.INFEASIBLE, "too big", generation=2, now="t2")
    assert pr.with_pending(conditions, again) is None, "the same verdict is not written again"
    assert pr.with_pending(conditions, pr.pending_condition(pr.DEFERRED, "too big", generation=2, now="t2")) is not None


@pytest.mark.parametrize("cpu, beyond", [("2", False), ("3", True)])
def test_beyond_quota_is_the_webhooks_quota_rule_with_nothing_else_used(cpu, beyond):
    pod = {"spec": spec(container("a", {"cpu": cpu, "memory": "1Gi"}))}
    message = pr.beyond_quota(pod, {"cpu": 2000, "pods": 10_000}, "remote-1")
    assert (message is not None) is beyond
    if beyond:
        assert message == ("the resize asks more of cluster remote-1 than this cluster's whole quota there (Consumer spec.quota): "
                           "cpu: requested 3, quota 2; resize the pod within the quota, or ask the provider to raise it")
