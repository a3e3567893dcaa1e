"""``kubectl offload explain`` decided from facts (no cluster): one table row per situation a
user asks about, and proof that the answers are the components' own."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload.capacity import encode_remote_capacity
from kube_offload.policy import policy_from_namespace
from kube_offload.resources import parse_quantity as q
from kubectl_offload.explain import (
    CHECK_AFFINITY, CHECK_PLACEMENT, CHECK_QUOTA, CHECK_REMOTE_CAPACITY, CHECK_RESOURCES, CHECK_TAINTS,
    ExplainError, ExplainFacts, RemoteView, explain,
)
from kubectl_offload import render
from kubectl_offload.remote_chain import RemoteChain, last_events
from kube_offload.pod_mutation import mutate_pod
from support import builders

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)
VNODE = "kube-offload-remote-1"
CAPACITY = encode_remote_capacity(
    {"r-node-0": {"cpu": q("4"), "memory": q("16Gi"), "pods": q("110")},
     "r-node-1": {"cpu": q("3"), "memory": q("16Gi"), "pods": q("110")}},
    updated=NOW - timedelta(seconds=20),
)


def namespace(name="demo", placement=c.PLACEMENT_REMOTE, enabled=True, selector=None, **labels):
    meta = {"name": name, "labels": dict(labels)}
    if enabled:
        meta["labels"][c.LABEL_ENABLED] = c.ENABLED_VALUE
    if placement:
        meta["labels"][c.LABEL_POD_PLACEMENT] = placement
    if selector is not None:
        meta["annotations"] = {c.ANNOTATION_CLUSTER_SELECTOR: selector}
    return {"metadata": meta}


def physical(name):
    return {
        "metadata": {"name": name, "labels": {c.LABEL_HOSTNAME: name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def virtual(ready=True, capacity=CAPACITY, allocatable=None):
    return {
        "metadata": {"name": VNODE, "labels": {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE, c.LABEL_CLUSTER_ID: "remote-1",
                                               c.LABEL_HOSTNAME: VNODE, "topology.kubernetes.io/region": "eu-west"},
                     "annotations": {c.ANNOTATION_REMOTE_CAPACITY: capacity} if capacity else {}},
        "spec": {"taints": [{"key": c.TAINT_KEY, "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}]},
        "status": {"allocatable": allocatable or {"cpu": "6300m", "memory": "28Gi", "pods": "198"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}},
    }


def pod(name="web", ns="demo", cpu="100m", **spec):
    return builders.pod(name, ns, containers=[builders.container(image="x", requests={"cpu": cpu})], spec=spec,
                        phase="Pending", uid=f"uid-{name}")


def mutated(p, ns):
    """The pod as the webhook admits it (what a created pod looks like)."""
    import jsonpatch

    return jsonpatch.apply_patch(p, mutate_pod(p, policy_from_namespace(ns), scheduler_name=None))


def consumer(quota=None, used=None, cordoned=False, mode=None, drain=None):
    spec = {"quota": quota or {}, "cordoned": cordoned, **({"drain": drain} if drain else {})}
    if mode:
        spec["policy"] = {"quotaMode": mode}
    return {"metadata": {"name": "local"}, "spec": spec, "status": {"used": used or {}}}


def facts(p, ns, *, created=False, nodes=None, remotes=None, chain=None, events=(), other_pods=()):
    return ExplainFacts(
        pod=p, created=created, namespace=ns, nodes=nodes if nodes is not None else [virtual(), physical("local-0")],
        other_pods=list(other_pods), now=NOW, local_events=list(events),
        remotes=remotes if remotes is not None else {"remote-1": RemoteView("remote-1", consumer=consumer())},
        chain=chain, local_cluster_id="local",
    )


def verdicts(result):
    return {v.name: (v.fits, v.check) for v in result.nodes}


def test_pod_from_a_file_in_a_remote_namespace_shows_the_webhooks_patch_and_fits_only_the_virtual_node():
    ns = namespace()
    result = explain(facts(pod(), ns))
    assert result.policy["state"] == "offloaded" and result.policy["twinNamespace"] == "demo-local"
    # Exactly the webhook's own patch, not a re-derivation of it.
    assert result.webhook["patch"] == mutate_pod(pod(), policy_from_namespace(ns), scheduler_name=None)
    assert result.webhook["changes"] == [
        f"add toleration {c.TAINT_KEY}=true:NoExecute",
        f"require node affinity ({c.LABEL_TYPE} In [{c.TYPE_VIRTUAL_NODE}])",
    ]
    assert verdicts(result) == {VNODE: (True, ""), "local-0": (False, CHECK_PLACEMENT)}
    assert result.summary == f"not created; fits on {VNODE}"


def test_cluster_selector_that_matches_no_cluster_leaves_no_node():
    ns = namespace(selector="topology.kubernetes.io/region=mars")
    result = explain(facts(mutated(pod(), ns), ns, created=True))
    assert verdicts(result) == {VNODE: (False, CHECK_PLACEMENT), "local-0": (False, CHECK_PLACEMENT)}
    virtual_verdict = next(v for v in result.nodes if v.name == VNODE)
    assert "does not match the cluster selector" in virtual_verdict.reason
    assert result.summary.startswith("Pending: no node fits")


def test_namespace_not_offloaded_keeps_pods_off_the_virtual_node_by_its_taint():
    ns = namespace(name="plain", enabled=False, placement=None)
    result = explain(facts(pod(ns="plain"), ns))
    assert result.policy["state"] == "not-offloaded"
    assert f"kubectl label namespace plain {c.LABEL_ENABLED}=true" in result.policy["detail"]
    assert result.webhook["patch"] == [] and result.webhook["detail"] == "nothing: the namespace is not offloaded"
    assert verdicts(result) == {VNODE: (False, CHECK_TAINTS), "local-0": (True, "")}
    assert "namespace not offloaded" in result.summary


def test_missing_namespace_is_said():
    result = explain(facts(pod(ns="ghost"), None))
    assert result.policy["state"] == "missing" and "does not exist" in result.policy["detail"]


def test_invalid_policy_sends_nothing_remote_and_says_why():
    ns = namespace(placement="Everywhere")
    result = explain(facts(pod(), ns))
    assert result.policy["state"] == "invalid"
    assert result.webhook["warnings"] and "invalid kube-offload policy" in result.webhook["warnings"][0]
    assert verdicts(result)[VNODE] == (False, CHECK_PLACEMENT)
    assert verdicts(result)["local-0"] == (True, "")


def test_a_pod_bigger_than_every_remote_node_fails_the_remote_capacity_check():
    ns = namespace()
    result = explain(facts(mutated(pod(cpu="5"), ns), ns, created=True))
    verdict = next(v for v in result.nodes if v.name == VNODE)
    assert (verdict.fits, verdict.check) == (False, CHECK_REMOTE_CAPACITY)
    assert "no remote node can fit the pod" in verdict.reason and "the largest (r-node-0)" in verdict.reason


def test_stale_or_missing_capacity_is_a_note_not_a_failure():
    ns = namespace()
    result = explain(facts(pod(), ns, nodes=[virtual(capacity=None)]))
    verdict = result.nodes[0]
    assert verdict.fits and verdict.notes == ["remote fit not checked: the virtual node has no remote-capacity annotation yet"]


def test_node_resources_count_the_pods_already_bound():
    ns = namespace(placement=c.PLACEMENT_LOCAL)
    busy = pod(name="busy", cpu="3800m") | {"status": {"phase": "Running"}}
    busy["spec"]["nodeName"] = "local-0"
    result = explain(facts(pod(cpu="500m"), ns, nodes=[physical("local-0")], other_pods=[busy]))
    assert verdicts(result) == {"local-0": (False, CHECK_RESOURCES)}
    assert "insufficient cpu: requested 500m, free 200m" in result.nodes[0].reason


@pytest.mark.parametrize(
    ("view", "fits", "text"),
    [
        (RemoteView("remote-1", consumer=consumer(quota={"cpu": "1"}, used={"cpu": "800m"})), False,
         "exceeds the quota of consumer local on provider remote-1: cpu: requested 500m, used 800m, quota 1 (quota mode requests)"),
        (RemoteView("remote-1", consumer=consumer(cordoned=True)), False, "cordoned by provider remote-1"),
        (RemoteView("remote-1", consumer=consumer(drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})), False,
         "consumer local is drained by provider remote-1: no new pods are admitted"),
        # Over quota and drained (or cordoned): the reason that stays when quota frees up.
        (RemoteView("remote-1", consumer=consumer(quota={"cpu": "1"}, used={"cpu": "800m"},
                                                  drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})),
         False, "consumer local is drained by provider remote-1"),
        (RemoteView("remote-1", consumer=consumer(quota={"cpu": "1"}, used={"cpu": "800m"}, cordoned=True)), False,
         "consumer local is cordoned by provider remote-1"),
        (RemoteView("remote-1", consumer=None), False, "admits no consumer"),
        (RemoteView("remote-1", consumer=consumer(quota={"cpu": "4"}, used={"cpu": "1"})), True, ""),
        (RemoteView("remote-1", error="unreachable from here"), True, "provider quota not checked: unreachable from here"),
    ],
)
def test_provider_quota_and_cordon_decide_like_the_shadowpod_webhook(view, fits, text):
    ns = namespace()
    result = explain(facts(pod(cpu="500m"), ns, remotes={"remote-1": view}))
    verdict = next(v for v in result.nodes if v.name == VNODE)
    assert verdict.fits is fits
    if not fits:
        assert verdict.check == CHECK_QUOTA and text in verdict.reason
    elif text:
        assert text in " ".join(verdict.notes)


@pytest.mark.parametrize(
    ("mode", "limits", "fits", "text"),
    [
        # hard: a limit above the request is refused, naming the container, the field and the fix
        ("hard", {"cpu": "1"}, False, 'refused by provider remote-1 (quota mode hard): spec.containers[0].resources.limits.cpu '
                                      '(container "app"): must equal requests.cpu (limit 1, request 500m)'),
        ("hard", None, False, "limits.cpu (container \"app\"): must be set"),
        ("hard", {"cpu": "500m"}, True, ""),
        # limits: a missing counted limit is refused, as the webhook does; any figure within the quota passes
        ("limits", None, False, "refused by provider remote-1 (quota mode limits): spec.containers[0].resources.limits.cpu: must be set"),
        ("limits", {"cpu": "1"}, True, ""),
        ("requests", None, True, ""),
    ],
)
def test_the_limits_the_providers_quota_mode_asks_for_are_checked_as_the_webhook_does(mode, limits, fits, text):
    p = pod(cpu="500m")
    if limits:
        p["spec"]["containers"][0]["resources"]["limits"] = limits
    view = RemoteView("remote-1", consumer=consumer(quota={"cpu": "4"}, mode=mode))
    verdict = next(v for v in explain(facts(p, namespace(), remotes={"remote-1": view})).nodes if v.name == VNODE)
    assert verdict.fits is fits, verdict.reason
    if not fits:
        assert verdict.check == CHECK_QUOTA and text in verdict.reason, verdict.reason


def test_created_pod_missing_the_webhooks_additions_is_flagged():
    ns = namespace()
    result = explain(facts(pod(), ns, created=True))
    assert result.webhook["detail"].startswith("NOT applied")
    assert result.webhook["carries"]["virtualNodeToleration"] is False


def test_offloaded_pod_shows_the_chain_events_and_logs_endpoint():
    ns = namespace()
    p = mutated(pod(), ns)
    p["spec"]["nodeName"] = VNODE
    p["status"] = {"phase": "Running"}
    shadowpod = {"metadata": {"name": "web", "namespace": "demo-local"}, "status": {"phase": "Running", "podName": "web"}}
    remote_pod = {"metadata": {"name": "web", "namespace": "demo-local"}, "spec": {"nodeName": "r-node-0"},
                  "status": {"phase": "Running"}}
    remote_events = [{"metadata": {"resourceVersion": "7"}, "type": "Normal", "reason": "Scheduled",
                      "involvedObject": {"kind": "Pod", "name": "web"}, "message": "assigned",
                      "lastTimestamp": "2026-11-01T11:59:00Z"}]
    result = explain(facts(p, ns, created=True, chain=RemoteChain("remote-1", "demo-local", shadowpod, remote_pod, remote_events)))
    assert [(link["kind"], link["phase"]) for link in result.chain["links"]] == [
        ("Pod (local)", "Running"), ("ShadowPod", "Running"), ("Pod (remote)", "Running"), ("Node (remote)", "")]
    assert result.chain["links"][-1]["name"] == "r-node-0"
    assert result.summary == (f"runs remotely on virtual node {VNODE} (cluster remote-1): remote pod demo-local/web "
                              "is Running on remote node r-node-0")
    assert result.logs == {"node": VNODE, "endpoint": "https://10.0.0.9:10250/containerLogs/demo/web/app",
                           "command": "kubectl logs -n demo web"}
    assert result.events["remote"][0]["age"] == 60.0
    assert next(v for v in result.nodes if v.name == VNODE).bound
    assert result.webhook["detail"] == "already applied: the pod carries everything the webhook adds"


def test_refused_by_the_provider_names_the_providers_message():
    ns = namespace()
    p = mutated(pod(), ns)
    p["spec"]["nodeName"] = VNODE
    refused = {"metadata": {"resourceVersion": "9"}, "type": "Warning", "reason": "ProviderRefused",
               "involvedObject": {"kind": "Pod", "name": "web"}, "lastTimestamp": "2026-11-01T11:59:30Z",
               "message": "spec.pod.spec.hostNetwork: host namespaces are not allowed"}
    result = explain(facts(p, ns, created=True, chain=RemoteChain("remote-1", "demo-local"), events=[refused]))
    assert result.chain["links"][1]["phase"] == "missing"
    assert result.summary.endswith("ShadowPod is missing; last Warning: ProviderRefused: "
                                   "spec.pod.spec.hostNetwork: host namespaces are not allowed")


def test_a_pod_without_spec_is_a_clear_error():
    with pytest.raises(ExplainError, match="no spec"):
        explain(facts({"metadata": {"name": "x", "namespace": "demo"}}, namespace()))


def test_events_are_ordered_by_second_then_by_write_order():
    events = [
        {"metadata": {"resourceVersion": "12"}, "reason": "Later", "lastTimestamp": "2026-11-01T11:00:00Z"},
        {"metadata": {"resourceVersion": "10"}, "reason": "Earlier", "eventTime": "2026-11-01T11:00:00.900000Z"},
        {"metadata": {"resourceVersion": "3"}, "reason": "Oldest", "lastTimestamp": "2026-11-01T10:00:00Z"},
    ]
    assert [e["reason"] for e in last_events(events, NOW)] == ["Oldest", "Earlier", "Later"]
    assert [e["reason"] for e in last_events(events, NOW, limit=1)] == ["Later"]


def test_a_pod_that_opts_in_is_explained_as_the_webhook_and_extender_treat_it():
    # Unlabelled namespace, runtimeClassName kube-offload (kube_offload/opt_in.py): the
    # webhook's patch and the extender's filter are those of placement Remote.
    ns = namespace(name="plain", enabled=False, placement=None)
    p = pod(ns="plain", runtimeClassName=c.RUNTIME_CLASS_OPT_IN)
    result = explain(facts(p, ns))
    assert result.webhook["patch"], result.webhook
    assert result.webhook["detail"].startswith("would add: "), result.webhook["detail"]
    assert c.RUNTIME_CLASS_OPT_IN in result.webhook["optIn"]
    assert verdicts(result) == {VNODE: (True, ""), "local-0": (False, CHECK_PLACEMENT)}
    # The same pod without the class: left to the namespace, which is not offloaded.
    plain = explain(facts(pod(ns="plain"), ns))
    assert plain.webhook["detail"] == "nothing: the namespace is not offloaded" and "optIn" not in plain.webhook


# --- slices (docs/slices.md) ------------------------------------------------------------------
def slice_vnode(name, allocatable, *, accepted=True, labels=None):
    node = virtual(capacity=None, allocatable=allocatable)
    node_name = f"{VNODE}-{name}"
    node["metadata"]["name"] = node_name
    node["metadata"]["labels"].update({c.LABEL_HOSTNAME: node_name, c.LABEL_SLICE: name, **(labels or {})})
    if not accepted:
        node["spec"]["taints"].append({"key": c.TAINT_SLICE_NOT_ACCEPTED_KEY, "value": "true",
                                       "effect": c.TAINT_SLICE_NOT_ACCEPTED_EFFECT})
    return node


def test_explain_says_which_slice_node_fits_and_why_the_others_do_not():
    ns = namespace()
    gpu_pod = pod(cpu="1", nodeSelector={"accelerator": "a100"})
    nodes = [
        virtual(), physical("local-0"),
        slice_vnode("gpu", {"cpu": "2", "memory": "4Gi", "pods": "10"}, labels={"accelerator": "a100"}),
        slice_vnode("big", {"cpu": "8", "memory": "8Gi", "pods": "10"}, accepted=False, labels={"accelerator": "a100"}),
        slice_vnode("web", {"cpu": "4", "memory": "8Gi", "pods": "10"}),
    ]
    result = explain(facts(mutated(gpu_pod, ns), ns, created=True, nodes=nodes))
    assert verdicts(result) == {
        VNODE: (False, CHECK_AFFINITY), "local-0": (False, CHECK_PLACEMENT),
        f"{VNODE}-gpu": (True, ""),
        f"{VNODE}-big": (False, CHECK_TAINTS),  # not accepted (yet): its NoSchedule taint
        f"{VNODE}-web": (False, CHECK_AFFINITY),
    }
    by_name = {v.name: v for v in result.nodes}
    assert by_name[f"{VNODE}-gpu"].slice == "gpu" and by_name[VNODE].slice is None
    assert any("slice gpu of cluster remote-1" in note for note in by_name[f"{VNODE}-gpu"].notes)
    assert c.TAINT_SLICE_NOT_ACCEPTED_KEY in by_name[f"{VNODE}-big"].reason
    text = render.render_explain(result.to_dict(), render.Style(colour=False))
    assert any(line.split()[:3] == [f"{VNODE}-gpu", "slice", "gpu"] for line in text.splitlines())
