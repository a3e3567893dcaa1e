"""enforcer/shadowpods/trim.py: the managed-pod cache keeps what its readers use. Each
reader (the reconcile's plan and status mirror, the in-place update patch, the quota's
requests and charges, the orphan and owner checks, the EndpointSlice webhook's pod-IP index) gives the same answer on the trimmed
pod as on the whole one, for the pod the enforcer made in bench_scale's clusters
(tests/fixtures/vkubelet_pod_objects.json) and for variations of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from enforcer.admission.endpointslice_policy import pod_ip_keys
from enforcer.consumers.quota import uncounted_charges
from enforcer.shadowpods.reconcile import is_enforcer_orphan, shadowpod_of
from enforcer.shadowpods.trim import keep_shadowpod, trim_managed_pod
from kube_offload.resources import pod_requests
from kube_offload.shadowpod import describe_end, killed_by_system, plan, pod_fate, pod_update
from kube_offload.shadowpod_status import status_from_pod

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "vkubelet_pod_objects.json"


def _objects() -> tuple[dict, dict]:
    objects = json.loads(FIXTURE.read_text())
    shadowpod, pod = objects["shadowpod"], objects["remote_pod"]
    for obj in (shadowpod, pod):
        obj["metadata"].pop("managedFields", None)  # the informer drops them before the transform
    return shadowpod, pod


def _sidecars_and_limits(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}},
        {"name": "side", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
    ]
    pod["spec"]["overhead"] = {"cpu": "10m"}
    pod["spec"]["activeDeadlineSeconds"] = 600
    return pod


def _failed(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["status"].update(phase="Failed", reason="Evicted", message="the node ran out of memory")
    pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"})
    return pod


def _terminating(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"].update(deletionTimestamp="2026-11-23T21:40:00Z", deletionGracePeriodSeconds=30)
    return pod


def _orphaned(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"]["ownerReferences"] = []
    return pod


VARIANTS = {
    "running": lambda pod: pod,
    "sidecars, limits, overhead, deadline": _sidecars_and_limits,
    "failed": _failed,
    "terminating": _terminating,
    "orphaned": _orphaned,
}


def _template_changed(shadowpod: dict) -> dict:
    """A ShadowPod whose template changed what a running pod may change."""
    shadowpod = copy.deepcopy(shadowpod)
    template = shadowpod["spec"]["pod"]
    template["metadata"]["labels"]["tier"] = "web"
    template["spec"]["containers"][0]["image"] = "busybox:1.37"
    template["spec"]["tolerations"] = [*template["spec"].get("tolerations", []),
                                       {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    return shadowpod


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_reader_sees_the_same_pod(variant: str) -> None:
    shadowpod, base = _objects()
    whole = VARIANTS[variant](base)
    trimmed = trim_managed_pod(copy.deepcopy(whole))

    decided, decided_trimmed = plan(shadowpod, [whole]), plan(shadowpod, [trimmed])
    assert decided_trimmed.action is decided.action
    assert [p["metadata"]["uid"] for p in decided_trimmed.delete] == [p["metadata"]["uid"] for p in decided.delete]
    assert status_from_pod(shadowpod, trimmed) == status_from_pod(shadowpod, whole)
    for template in (shadowpod, _template_changed(shadowpod)):
        assert pod_update(template, trimmed) == pod_update(template, whole)
    assert pod_requests(trimmed) == pod_requests(whole)
    assert uncounted_charges(trimmed, shadowpod) == uncounted_charges(whole, shadowpod)
    assert uncounted_charges(trimmed, None) == uncounted_charges(whole, None)
    assert pod_fate(trimmed) is pod_fate(whole)
    assert killed_by_system(trimmed) == killed_by_system(whole)
    assert describe_end(trimmed) == describe_end(whole)
    assert is_enforcer_orphan(trimmed) == is_enforcer_orphan(whole)
    assert shadowpod_of(trimmed) == shadowpod_of(whole)
    assert pod_ip_keys(trimmed) == pod_ip_keys(whole) != []  # the EndpointSlice webhook's index


def test_the_in_place_update_is_not_empty_and_still_equal() -> None:
    """The template change above does produce a patch (so the equality above is not
    between two Nones), and it names the new image and toleration."""
    shadowpod, pod = _objects()
    patch = pod_update(_template_changed(shadowpod), trim_managed_pod(copy.deepcopy(pod)))
    assert patch is not None
    assert patch["spec"]["containers"] == [{"name": "c", "image": "busybox:1.37"}]
    assert {"key": "spot", "operator": "Exists", "effect": "NoSchedule"} in patch["spec"]["tolerations"]
    assert patch["metadata"]["labels"] == {"tier": "web"}


def test_what_no_reader_uses_is_dropped() -> None:
    _, pod = _objects()
    trimmed = trim_managed_pod(copy.deepcopy(pod))
    assert "volumes" not in trimmed["spec"] and "securityContext" not in trimmed["spec"]
    assert trimmed["spec"]["containers"] == [
        {k: pod["spec"]["containers"][0][k] for k in ("name", "image", "resources")}
    ]
    assert trimmed["metadata"] == pod["metadata"] and trimmed["status"] == pod["status"]
    assert len(json.dumps(trimmed)) < 0.8 * len(json.dumps(pod))


def test_strings_are_shared_between_cached_objects() -> None:
    shadowpod, pod = _objects()
    one, two = (trim_managed_pod(json.loads(json.dumps(pod))) for _ in range(2))
    assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
    assert next(iter(one["status"])) is next(iter(two["status"]))
    kept = [keep_shadowpod(json.loads(json.dumps(shadowpod))) for _ in range(2)]
    assert kept[0] == shadowpod
    assert kept[0]["spec"]["pod"]["spec"]["containers"][0]["image"] is kept[1]["spec"]["pod"]["spec"]["containers"][0]["image"]


def test_a_malformed_pod_stays_malformed() -> None:
    """Containers that are not a list are kept as they are, so pod_requests still says so."""
    _, pod = _objects()
    pod["spec"]["containers"] = "not a list"
    assert trim_managed_pod(copy.deepcopy(pod))["spec"]["containers"] == "not a list"
    assert "spec" not in trim_managed_pod({"metadata": {"name": "x"}})
