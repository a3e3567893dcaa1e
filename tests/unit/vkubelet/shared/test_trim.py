"""The virtual kubelet's informer transforms (vkubelet/shared/trim.py) keep what the loops read.

Each transform is checked two ways: the exact shape it keeps (so a field dropped or added
is a decision, made here and in docs/virtual-kubelet.md), and every reader of that cache
run over the trimmed object and the whole one, with the same answer. The objects are real
ones (tests/fixtures/vkubelet_pod_objects.json, dumped from bench_scale.py's clusters:
one offloaded pod's local pod, ShadowPod, remote pod, token Secret and remote Events).
"""

from __future__ import annotations

import copy
import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client

from kube_offload import constants as c
from kube_offload.slice_requests import parse_slice
from kube_offload import shadowpod as sp
from kube_offload.pod_updates import template_patch
from kube_offload.remote_resources import is_ours
from kube_offload.provider_policy import parse_policy
from kube_offload.runtime import kinds
from kube_offload.times import parse_time_or_none
from vkubelet.pods import status as st
from vkubelet.pods import termination as term
from vkubelet.shared import trim
from vkubelet.shared.informers import SharedInformers
from vkubelet.shared.ip_remapping import NO_REMAPPING, RemappingSettings
from vkubelet.kubeletapi import podlists
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import choose_remote_pod
from vkubelet.reflection import forge as f
from vkubelet.reflection.serviceaccounts import TokenSource, token_refresh_at, token_secret_is_current, token_sources
from vkubelet.reflection.forge import event_count
from vkubelet.shared.remote_events import says_something_new
from vkubelet.shared import names as n
from vkubelet.reflection.event_copies import event_age_seconds, forge_object_event
from vkubelet.reflection.events import container_names, pod_event_groups
from vkubelet.settings import Settings
from vkubelet.pods.translation import TranslationContext, build_shadowpod_for
from vkubelet.shared.origin import origin_key, origin_uid

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "vkubelet_pod_objects.json"
LOCAL_ID = "local"
NODE = "kube-offload-remote-1"


@pytest.fixture()
def objects() -> dict:
    data = json.loads(FIXTURE.read_text())
    # As the informer hands them to a transform: managedFields already dropped.
    for obj in (data["local_pod"], data["shadowpod"], data["remote_pod"], data["token_secret"], *data["events"]):
        obj["metadata"].pop("managedFields", None)
    return data


def _identity_keys(obj: dict) -> set[str]:
    return {k for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp") if k in obj["metadata"]}


# --- remote pods --------------------------------------------------------------------------------
def test_remote_pod_keeps_identity_origin_owner_and_the_status_copied_home(objects):
    pod = objects["remote_pod"]
    trimmed = trim.trim_remote_pod(copy.deepcopy(pod))
    assert set(trimmed) == {"apiVersion", "kind", "metadata", "status"}  # no spec: nobody reads it
    meta = trimmed["metadata"]
    assert set(meta) == _identity_keys(pod) | {"labels", "annotations", "ownerReferences"}
    assert meta["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID}  # is_ours
    # origin_key / origin_uid; not the enforcer's applied-template record nor the template's
    assert set(meta["annotations"]) == {c.ANNOTATION_ORIGIN_NAMESPACE, c.ANNOTATION_ORIGIN_NAME, c.ANNOTATION_ORIGIN_UID}
    assert meta["ownerReferences"] == pod["metadata"]["ownerReferences"]  # is_owned_by(pod, ShadowPod)
    assert set(trimmed["status"]) == set(pod["status"]) & set(trim.REMOTE_POD_STATUS)
    assert "qosClass" not in trimmed["status"]
    for field in trim.REMOTE_POD_STATUS:
        assert trimmed["status"].get(field) == pod["status"].get(field)


def _status_variants(pod: dict) -> list[dict]:
    unschedulable = copy.deepcopy(pod)
    unschedulable["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}],
    }
    failed = copy.deepcopy(pod)
    failed["status"].update(phase="Failed", reason="Evicted", message="node pressure", podIPs=[{"ip": "10.0.0.1"}, {"ip": "fd00::1"}])
    failed["status"]["initContainerStatuses"] = [{"name": "init", "restartCount": 2, "state": {"terminated": {"exitCode": 0}}}]
    return [pod, unschedulable, failed]


def test_status_sync_reads_the_same_from_a_trimmed_remote_pod(objects):
    local, shp = objects["local_pod"], objects["shadowpod"]
    remapping = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.100.0.0/16").remote_pod_ips
    for pod in _status_variants(objects["remote_pod"]):
        trimmed = trim.trim_remote_pod(copy.deepcopy(pod))
        for pod_ips in (NO_REMAPPING, remapping):
            assert st.desired_status(local, trimmed, shp, "127.0.0.1", pod_ips) == st.desired_status(local, pod, shp, "127.0.0.1", pod_ips)
        assert pod_ips.outside(st.remote_pod_ips(trimmed)) == pod_ips.outside(st.remote_pod_ips(pod))
        assert st.remote_pod_ips(trimmed) == st.remote_pod_ips(pod)
        assert st.remote_unschedulable(trimmed) == st.remote_unschedulable(pod)
    assert st.remote_unschedulable(trim.trim_remote_pod(_status_variants(objects["remote_pod"])[1])) == "0/3 nodes"


def test_runningpods_reads_the_same_from_a_trimmed_remote_pod(objects):
    local = objects["local_pod"]
    for pod in _status_variants(objects["remote_pod"]):
        trimmed = trim.trim_remote_pod(copy.deepcopy(pod))
        assert podlists.running_pod(local, trimmed) == podlists.running_pod(local, pod)
    assert podlists.running_pod(local, trim.trim_remote_pod(copy.deepcopy(objects["remote_pod"]))) is not None


def test_origin_and_ownership_read_the_same_from_trimmed_remote_objects(objects):
    pod, shp = objects["remote_pod"], objects["shadowpod"]
    tpod, tshp = trim.trim_remote_pod(copy.deepcopy(pod)), trim.trim_shadowpod(copy.deepcopy(shp))
    for whole, trimmed in ((pod, tpod), (shp, tshp)):
        assert is_ours(trimmed, LOCAL_ID) and is_ours(whole, LOCAL_ID)
        assert origin_key(trimmed) == origin_key(whole) == "bench-scale/scale-0-6f6488f85c-2nv2w"
        assert origin_uid(trimmed) == origin_uid(whole) == objects["local_pod"]["metadata"]["uid"]
    assert sp.controller_ref(tpod) == sp.controller_ref(pod) is not None
    assert sp.is_owned_by(tpod, tshp) and sp.is_owned_by(pod, shp)


def test_the_kubelet_api_resolves_the_same_remote_pod_from_trimmed_caches(objects):
    local, shp, pod = objects["local_pod"], objects["shadowpod"], objects["remote_pod"]
    key = "bench-scale/scale-0-6f6488f85c-2nv2w"
    kwargs = dict(twin="bench-scale-local", key=key, node_name=NODE, cluster_id="remote-1", local_cluster_id=LOCAL_ID)
    terminating = copy.deepcopy(pod)
    terminating["metadata"].update(name="older", deletionTimestamp="2026-11-23T21:50:00Z")
    pods = [pod, terminating]
    whole = choose_remote_pod(local, [shp], pods, **kwargs)
    trimmed = choose_remote_pod(
        trim.keep_whole(copy.deepcopy(local)),
        [trim.trim_shadowpod(copy.deepcopy(shp))],
        [trim.trim_remote_pod(copy.deepcopy(p)) for p in pods],
        **kwargs,
    )
    assert trimmed == whole and str(trimmed) == "bench-scale-local/scale-0-6f6488f85c-2nv2w"
    other_shp = copy.deepcopy(shp)
    other_shp["metadata"]["uid"] = "another"
    with pytest.raises(RequestError):  # the owner chain is still checked by UID
        choose_remote_pod(local, [trim.trim_shadowpod(other_shp)], [trim.trim_remote_pod(copy.deepcopy(pod))], **kwargs)


# --- ShadowPods ---------------------------------------------------------------------------------
def test_shadowpod_keeps_identity_origin_grace_request_mutable_template_and_recreations(objects):
    shp = copy.deepcopy(objects["shadowpod"])
    shp["metadata"]["annotations"][c.ANNOTATION_DELETION_GRACE] = "5"
    shp["metadata"]["annotations"]["someone/else"] = "x"
    shp["spec"]["pod"]["spec"]["activeDeadlineSeconds"] = 600
    trimmed = trim.trim_shadowpod(copy.deepcopy(shp))
    meta = trimmed["metadata"]
    assert set(meta) == _identity_keys(shp) | {"labels", "annotations"}
    assert meta["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID}
    assert set(meta["annotations"]) == {
        c.ANNOTATION_ORIGIN_NAMESPACE, c.ANNOTATION_ORIGIN_NAME, c.ANNOTATION_ORIGIN_UID, c.ANNOTATION_DELETION_GRACE,
    }
    template = trimmed["spec"]["pod"]
    # Labels and annotations whole, and the mutable fields whole (a merge patch sends lists whole).
    assert template["metadata"] == shp["spec"]["pod"]["metadata"]
    assert template["spec"] == {
        "containers": shp["spec"]["pod"]["spec"]["containers"],
        "tolerations": shp["spec"]["pod"]["spec"]["tolerations"],
        "activeDeadlineSeconds": 600,
    }
    assert trimmed["status"] == {"recreations": 0}
    # Readers of the ShadowPod itself.
    assert sp.deletion_grace(trimmed) == sp.deletion_grace(shp) == 5
    assert term.grace_request_patch(trimmed, 3) == term.grace_request_patch(shp, 3)
    assert term.grace_request_patch(trimmed, 30) is None
    shp["status"]["recreations"] = 4
    assert st.recreations_of(trim.trim_shadowpod(copy.deepcopy(shp))) == st.recreations_of(shp) == 4


def _context() -> TranslationContext:
    return TranslationContext(
        local_cluster_id=LOCAL_ID,
        virtual_node_labels={c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE},
        virtual_node_name=NODE,
        reflection=True,
        # The toleration the changes below add is granted; the node lifecycle keys are
        # the provider's (policy_fit.py), so a change of those carries nothing.
        policy=parse_policy({"pods": {"tolerations": ["new"]}}),
    )


def _local_changes(local: dict) -> list[dict]:
    """The changes a running pod may go through (each one ValidatePodUpdate allows)."""
    changed = []
    for change in (
        lambda p: None,
        lambda p: p["metadata"].setdefault("labels", {}).update(extra="yes"),
        lambda p: p["metadata"]["labels"].pop("app"),
        lambda p: p["metadata"].setdefault("annotations", {}).update(note="hello"),
        lambda p: p["spec"]["containers"][0].update(image="busybox:1.37"),
        lambda p: p["spec"].update(activeDeadlineSeconds=120),
        lambda p: p["spec"]["tolerations"].append({"key": "new", "operator": "Exists", "effect": "NoSchedule"}),
        lambda p: p["spec"]["tolerations"][0].update(tolerationSeconds=60),
    ):
        pod = copy.deepcopy(local)
        change(pod)
        changed.append(pod)
    return changed


def test_the_template_update_is_the_same_patch_from_a_trimmed_shadowpod(objects):
    local, shp = objects["local_pod"], objects["shadowpod"]
    trimmed = trim.trim_shadowpod(copy.deepcopy(shp))
    have_whole = shp["spec"]["pod"]
    have_trimmed = trimmed["spec"]["pod"]
    patches = []
    for pod in _local_changes(local):
        wanted = build_shadowpod_for(pod, "bench-scale-local", _context())["spec"]["pod"]
        patch = template_patch(have_trimmed, wanted)
        assert patch == template_patch(have_whole, wanted)
        patches.append(patch)
    assert patches[0] is None  # nothing changed: no write (the cache agrees with the template)
    assert patches[4]["spec"]["containers"] == [{**shp["spec"]["pod"]["spec"]["containers"][0], "image": "busybox:1.37"}]
    assert all(patches[1:7]), "each change must produce a patch"
    # A new tolerationSeconds of the not-ready toleration: a node lifecycle key, which
    # the provider's policy reserves, so it is not sent at all.
    assert patches[7] is None


# --- Events -------------------------------------------------------------------------------------
def _copies(events: list[dict], local: dict, **forged: str) -> list[dict]:
    """The local Events the pods' Event reflection makes of ``events`` (events.py)."""
    return [forge_object_event(group, local, kinds.PODS, count=group.count, **forged)
            for group in pod_event_groups(events, container_names(local))]


def test_event_keeps_what_its_local_copy_is_made_of(objects):
    copied = [event for event in objects["events"] if says_something_new(event)]
    assert copied, "the fixture has no copied Event"
    for event in copied:
        trimmed = trim.trim_event(copy.deepcopy(event))
        assert set(trimmed["involvedObject"]) <= set(trim.EVENT_INVOLVED)
        assert "apiVersion" not in trimmed["involvedObject"] and "resourceVersion" not in trimmed["involvedObject"]
        assert "reportingInstance" not in trimmed and "action" not in trimmed
        assert set(trimmed["metadata"]) == _identity_keys(event)
        local = objects["local_pod"]
        forged = dict(host=NODE, component="kube-offload-vkubelet", reporting_controller="kube-offload.io/vkubelet")
        assert _copies([trimmed], local, **forged) == _copies([event], local, **forged)
        assert event_age_seconds(trimmed) == pytest.approx(event_age_seconds(event), abs=1.0)


def test_an_event_never_copied_keeps_only_what_says_so(objects):
    # The fixture's enforcer PodCreated on the ShadowPod: one per pod, never copied.
    [routine] = [event for event in objects["events"] if not says_something_new(event)]
    trimmed = trim.trim_event(copy.deepcopy(routine))
    assert not says_something_new(trimmed)
    assert set(trimmed["metadata"]) == {"name", "namespace", "resourceVersion"}
    assert trimmed["metadata"]["name"] == routine["metadata"]["name"]
    assert trimmed["involvedObject"] == {"kind": "ShadowPod"}
    assert "message" not in trimmed and "firstTimestamp" not in trimmed


def test_event_with_series_source_field_path_and_a_long_reason_and_message(objects):
    event = copy.deepcopy(next(e for e in objects["events"] if says_something_new(e)))
    event.update(
        reason="R" * 500,
        message="é" * 5000,
        count=None,
        series={"count": 7, "lastObservedTime": "2026-11-23T22:00:00.000000Z"},
        source={"component": "kubelet", "host": "node-1"},
        lastTimestamp=None,
        firstTimestamp="2026-11-23T21:00:00Z",
    )
    container = objects["local_pod"]["spec"]["containers"][0]["name"]
    event["involvedObject"]["fieldPath"] = f"spec.containers{{{container}}}"
    trimmed = trim.trim_event(copy.deepcopy(event))
    # No more than a copy takes, in bytes (provider_bounds.py).
    assert trimmed["message"] == "é" * 512 and trimmed["reason"] == "R" * 128
    assert trimmed["source"] == {"component": "kubelet"}
    forged = dict(host=NODE, component="x", reporting_controller="y")
    [copied] = _copies([trimmed], objects["local_pod"], **forged)
    assert [copied] == _copies([event], objects["local_pod"], **forged)
    assert copied["involvedObject"]["fieldPath"] == f"spec.containers{{{container}}}"
    assert event_count(trimmed) == 7


# --- token Secrets ------------------------------------------------------------------------------
def test_token_secret_keeps_metadata_whole_and_data_keys_without_the_tokens(objects):
    secret = objects["token_secret"]
    trimmed = trim.trim_token_secret(copy.deepcopy(secret))
    assert trimmed["metadata"] == secret["metadata"]
    assert trimmed["type"] == secret["type"]
    assert set(trimmed["data"]) == set(secret["data"]) == {"token", n.NAMESPACE_KEY}
    assert trimmed["data"]["token"] == "" and trimmed["data"][n.NAMESPACE_KEY] == secret["data"][n.NAMESPACE_KEY]


def test_token_secret_readers_answer_the_same_from_a_trimmed_secret(objects):
    secret, pod = objects["token_secret"], copy.deepcopy(objects["local_pod"])
    pod["metadata"]["uid"] = secret["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID]
    trimmed = trim.trim_token_secret(copy.deepcopy(secret))
    issued = parse_time_or_none(secret["metadata"]["annotations"][c.ANNOTATION_TOKEN_ISSUED_AT])
    sources = token_sources(pod)
    other_pod = copy.deepcopy(pod)
    other_pod["metadata"]["uid"] = "someone-else"
    for now in (issued + timedelta(minutes=1), issued + timedelta(hours=2)):
        for subject, wanted in ((pod, sources), (other_pod, sources), (pod, [*sources, TokenSource("token-vault", "vault")])):
            assert token_secret_is_current(trimmed, subject, wanted, now=now, refresh_fraction=0.8) == token_secret_is_current(
                secret, subject, wanted, now=now, refresh_fraction=0.8
            )
    assert token_secret_is_current(trimmed, pod, sources, now=issued + timedelta(minutes=1), refresh_fraction=0.8)
    assert token_refresh_at(trimmed, 0.8) == token_refresh_at(secret, 0.8)
    assert f.is_owned(trimmed, LOCAL_ID, "serviceaccounts") and origin_key(trimmed) == origin_key(secret)


# --- local pods, PriorityClasses, interning ----------------------------------------------------
def test_local_pods_are_kept_whole(objects):
    local = objects["local_pod"]
    kept = trim.keep_whole(copy.deepcopy(local))
    assert kept == local
    assert build_shadowpod_for(kept, "t", _context()) == build_shadowpod_for(local, "t", _context())


def test_priority_classes_keep_their_names():
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 1000, "description": "d" * 300,
          "metadata": {"name": "high", "uid": "u", "resourceVersion": "5", "labels": {"a": "b"}}}
    assert trim.trim_to_identity(pc) == {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high", "uid": "u", "resourceVersion": "5"},
    }


def test_interned_shares_one_copy_of_each_string_between_objects(objects):
    text = json.dumps(objects["remote_pod"])
    first, second = trim.interned(json.loads(text)), trim.interned(json.loads(text))
    assert first == json.loads(text)
    key_first = next(k for k in first["status"] if k == "containerStatuses")
    key_second = next(k for k in second["status"] if k == "containerStatuses")
    assert key_first is key_second is sys.intern("containerStatuses")
    assert first["status"]["phase"] is second["status"]["phase"]
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["spec"]["containers"][0]["resources"] is not second["spec"]["containers"][0]["resources"]  # dicts stay per object


def test_trimmed_objects_survive_malformed_input():
    for transform in (trim.trim_remote_pod, trim.trim_shadowpod, trim.trim_event, trim.trim_token_secret, trim.trim_to_identity):
        assert transform({"metadata": {"name": "x", "namespace": "y"}, "spec": "odd", "status": None})["metadata"] == {
            "name": "x", "namespace": "y"
        }


# --- wiring ---------------------------------------------------------------------------------------
def test_the_shared_informers_use_these_transforms():
    settings = Settings(cluster_id="remote-1", local_cluster_id=LOCAL_ID)
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    assert informers.local_pods()._transform is trim.keep_whole
    assert informers.remote_pods()._transform is trim.trim_remote_pod
    assert informers.remote_shadowpods()._transform is trim.trim_shadowpod
    assert informers.remote_priority_classes()._transform is trim.trim_to_identity
    # Scopes: our own remote objects only (origin label, and no slice's: docs/slices.md),
    # our own node's pods only.
    ours = f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_ID},!{c.LABEL_SLICE}"
    assert informers.remote_pods()._list_kwargs == {"label_selector": ours}
    assert informers.remote_shadowpods()._list_kwargs == {"label_selector": ours}
    assert informers.local_pods()._list_kwargs == {"field_selector": f"spec.nodeName={settings.node_name}"}


def test_a_slice_vkubelet_sees_only_its_slice():
    settings = Settings(cluster_id="remote-1", local_cluster_id=LOCAL_ID, slice=parse_slice("gpu=gpu:cpu=1"))
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    ours = f"{c.LABEL_ORIGIN_CLUSTER_ID}={LOCAL_ID},{c.LABEL_SLICE}=gpu"
    assert informers.remote_pods()._list_kwargs == {"label_selector": ours}
    assert informers.remote_shadowpods()._list_kwargs == {"label_selector": ours}
    assert settings.node_name == "kube-offload-remote-1-gpu"
    assert informers.local_pods()._list_kwargs == {"field_selector": "spec.nodeName=kube-offload-remote-1-gpu"}
    assert informers.remote_slice()._list_kwargs == {"field_selector": "metadata.name=gpu"}


def test_the_slice_label_survives_trimming():
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID, c.LABEL_SLICE: "gpu", "app": "x"}
    for transform in (trim.trim_remote_pod, trim.trim_shadowpod):
        kept = transform({"metadata": {"name": "p", "namespace": "n", "labels": labels}})["metadata"]["labels"]
        assert kept == {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_ID, c.LABEL_SLICE: "gpu"}
