"""Issue 3: the real kube-apiserver calls our webhook, the real kube-scheduler calls our
extender, and kubectl drives it all, exactly as a user would."""

from __future__ import annotations

import json
import ssl
import urllib.request
import uuid

import pytest

from kube_offload import constants as C

VIRTUAL_NODE = f"{C.VIRTUAL_NODE_PREFIX}remote-1"


_created: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _cleanup_namespaces(local):
    yield
    if _created:
        local.kubectl("delete", "namespace", "--wait=false", *_created, check=False)


def _namespace(local, *, placement: str | None = None, selector: str | None = None, enabled: bool = True) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    local.kubectl("create", "namespace", name)
    _created.append(name)
    labels = []
    if enabled:
        labels.append(f"{C.LABEL_ENABLED}=true")
    if placement:
        labels.append(f"{C.LABEL_POD_PLACEMENT}={placement}")
    if selector:
        local.kubectl("annotate", "namespace", name, f"{C.ANNOTATION_CLUSTER_SELECTOR}={selector}")
    if labels:
        local.kubectl("label", "namespace", name, *labels)
    return name


def _pod(namespace: str, name: str = "p", *, cpu: str = "100m", extra_spec: dict | None = None) -> dict:
    spec = {
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}}}],
    }
    spec.update(extra_spec or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _get(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def _scheduled_node(local, namespace: str, name: str, wait) -> str:
    try:
        return wait(lambda: _get(local, "pod", "-n", namespace, name)["spec"].get("nodeName"), timeout=60,
                    what=f"pod {namespace}/{name} to be scheduled")
    except BaseException:
        # say why in the test report: the scheduler's own verdict and the nodes' state
        events = _get(local, "events", "-n", namespace)["items"]
        print("events:", [(e.get("reason"), e.get("message")) for e in events])
        print("nodes:", local.kubectl("get", "nodes", "-o", "wide").stdout)
        raise


def _failed_scheduling_message(local, namespace: str, name: str, wait) -> str:
    def message():
        events = _get(local, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name},reason=FailedScheduling")
        return " | ".join(e.get("message", "") for e in events["items"])
    return wait(message, timeout=60, what=f"a FailedScheduling event for {namespace}/{name}")


def _extender_calls(env) -> float:
    """Sum of the extender's filter-call counter, read from its /metrics endpoint."""
    context = ssl.create_default_context(cafile=str(env.pki_dir / "ca.crt"))
    port = env.topology().extender_port
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("kube_offload_extender_requests_total{") and "filter" in line.split("}")[0]:
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- the validating webhook, through kubectl ------------------------------------------------
def test_bad_placement_label_is_rejected_with_a_message_naming_key_value_and_fix(local):
    namespace = _namespace(local, enabled=False)
    result = local.kubectl("label", "namespace", namespace, f"{C.LABEL_POD_PLACEMENT}=Everywhere", check=False)
    assert result.returncode != 0
    assert "denied the request" in result.stderr
    assert C.LABEL_POD_PLACEMENT in result.stderr and "Everywhere" in result.stderr
    for allowed in C.PLACEMENTS:
        assert allowed in result.stderr
    labels = _get(local, "namespace", namespace)["metadata"].get("labels", {})
    assert C.LABEL_POD_PLACEMENT not in labels


def test_bad_cluster_selector_is_rejected(local):
    namespace = _namespace(local, enabled=False)
    result = local.kubectl("annotate", "namespace", namespace, f"{C.ANNOTATION_CLUSTER_SELECTOR}=region in (eu-west", check=False)
    assert result.returncode != 0
    assert C.ANNOTATION_CLUSTER_SELECTOR in result.stderr


def test_valid_policy_labels_are_accepted(local):
    namespace = _namespace(local, placement=C.PLACEMENT_LOCAL_AND_REMOTE, selector="topology.kubernetes.io/region in (eu-west,eu-south)")
    labels = _get(local, "namespace", namespace)["metadata"]["labels"]
    assert labels[C.LABEL_POD_PLACEMENT] == C.PLACEMENT_LOCAL_AND_REMOTE


# --- the mutating webhook, called by the real apiserver ---------------------------------------
def test_pod_in_remote_namespace_comes_back_mutated(local):
    namespace = _namespace(local, placement=C.PLACEMENT_REMOTE)
    local.apply(_pod(namespace))
    pod = _get(local, "pod", "-n", namespace, "p")
    tolerations = pod["spec"].get("tolerations", [])
    assert any(t.get("key") == C.TAINT_KEY and t.get("effect") == C.TAINT_EFFECT for t in tolerations)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1
    assert {"key": C.LABEL_TYPE, "operator": "In", "values": [C.TYPE_VIRTUAL_NODE]} in terms[0]["matchExpressions"]


def test_pod_in_namespace_not_opted_in_is_untouched(local):
    namespace = _namespace(local, enabled=False)
    local.apply(_pod(namespace))
    pod = _get(local, "pod", "-n", namespace, "p")
    assert "affinity" not in pod["spec"]
    assert not any(t.get("key") == C.TAINT_KEY for t in pod["spec"].get("tolerations", []))


def test_user_affinity_is_kept_in_every_term(local):
    # With a cluster selector, LocalAndRemote is two policy terms (local OR matching virtual);
    # without one it requires nothing at all (every node qualifies) and adds no affinity.
    namespace = _namespace(local, placement=C.PLACEMENT_LOCAL_AND_REMOTE, selector="topology.kubernetes.io/region=eu-west")
    user_terms = [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["nope"]}]},
    ]
    local.apply(_pod(namespace, extra_spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms}}}}))
    terms = _get(local, "pod", "-n", namespace, "p")["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # 2 user terms x 2 policy terms (local OR virtual in eu-west)
    assert len(terms) == 4
    assert sum(1 for t in terms if {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eu-west"]}
               in t.get("matchExpressions", [])) == 2
    assert sum(1 for t in terms if {"key": "disk", "operator": "In", "values": ["ssd"]} in t.get("matchExpressions", [])) == 2
    assert sum(1 for t in terms if t.get("matchFields")) == 2


# --- placement through the real scheduler and our extender ------------------------------------
def test_local_placement_lands_on_a_physical_node(local, wait):
    namespace = _namespace(local, placement=C.PLACEMENT_LOCAL)
    local.apply(_pod(namespace))
    node = _scheduled_node(local, namespace, "p", wait)
    assert node.startswith("local-node-")


def test_remote_placement_lands_on_the_virtual_node(local, wait):
    namespace = _namespace(local, placement=C.PLACEMENT_REMOTE)
    local.apply(_pod(namespace))
    assert _scheduled_node(local, namespace, "p", wait) == VIRTUAL_NODE


def test_cluster_selector_matching_the_remote_places_the_pod_there(local, wait):
    namespace = _namespace(local, placement=C.PLACEMENT_REMOTE, selector="topology.kubernetes.io/region=eu-west")
    local.apply(_pod(namespace))
    assert _scheduled_node(local, namespace, "p", wait) == VIRTUAL_NODE


def test_cluster_selector_matching_no_remote_leaves_the_pod_pending(local, wait):
    namespace = _namespace(local, placement=C.PLACEMENT_REMOTE, selector="topology.kubernetes.io/region=us-east")
    local.apply(_pod(namespace))
    message = _failed_scheduling_message(local, namespace, "p", wait)
    assert "node(s) didn't match" in message or "affinity" in message
    assert not _get(local, "pod", "-n", namespace, "p")["spec"].get("nodeName")


def test_extender_refuses_a_pod_no_single_remote_node_can_fit(local, wait):
    """Remote nodes have 4 CPU each; the virtual node advertises 90% of the sum (7.2 CPU), so
    a 5-CPU pod passes the scheduler's own fit check and only the extender can refuse it."""
    namespace = _namespace(local, placement=C.PLACEMENT_REMOTE)
    local.apply(_pod(namespace, cpu="5"))
    message = _failed_scheduling_message(local, namespace, "p", wait)
    assert "no remote node can fit" in message, message


def test_local_and_remote_overflows_to_the_virtual_node_when_local_nodes_are_full(local, wait):
    namespace = _namespace(local, placement=C.PLACEMENT_LOCAL_AND_REMOTE)
    # Each local node has 4 CPU: 3 CPU per pod means one pod per local node, the rest go remote.
    for index in range(3):
        local.apply(_pod(namespace, f"big-{index}", cpu="3"))
    nodes = [_scheduled_node(local, namespace, f"big-{index}", wait) for index in range(3)]
    assert sum(1 for n in nodes if n.startswith("local-node-")) <= 2
    assert VIRTUAL_NODE in nodes


def test_extender_is_called_and_its_decision_places_the_pod(offload_env, local, wait):
    """A pod that pins itself to the virtual node (its own toleration + nodeSelector) in a
    namespace whose policy is Local: affinity cannot stop it (the webhook's Local affinity
    would, so the pod is created before the namespace opts in, held by a scheduling gate),
    only the extender's filter can. It must stay Pending with our reason."""
    namespace = _namespace(local, enabled=False)
    before = _extender_calls(offload_env)
    local.apply(_pod(namespace, extra_spec={
        "schedulingGates": [{"name": "kube-offload.io/test"}],
        "nodeSelector": {"kubernetes.io/hostname": VIRTUAL_NODE},
        "tolerations": [{"key": C.TAINT_KEY, "operator": "Exists", "effect": C.TAINT_EFFECT}],
    }))
    local.kubectl("label", "namespace", namespace, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_LOCAL}")
    local.kubectl("patch", "pod", "-n", namespace, "p", "--type=json", "-p", '[{"op":"remove","path":"/spec/schedulingGates"}]')
    message = _failed_scheduling_message(local, namespace, "p", wait)
    assert f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_LOCAL}" in message, message
    assert _extender_calls(offload_env) > before
    assert not _get(local, "pod", "-n", namespace, "p")["spec"].get("nodeName")
