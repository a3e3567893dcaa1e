"""``kubectl offload explain``: where a pod can run and why, from facts already read (pure).

Every decision is asked of the code that makes it in the cluster, never re-implemented;
those decisions are pure domain functions the components serve, so the plugin imports the
domain and the contract only, never a component (tests/unit/kubectl_offload/test_imports.py):

- the namespace policy: :func:`kube_offload.namespace_policies.evaluate` (webhook and
  extender read it so);
- what the webhook adds: :func:`kube_offload.pod_mutation.decide_pod` (the webhook's own decision);
- placement, cluster selector, virtual-node readiness and remote fit:
  :func:`kube_offload.node_filter.filter_nodes` (the extender's own filter);
- the provider's quota and cordon: :func:`kube_offload.consumers.consumer_terms`,
  :func:`kube_offload.consumer_quota.limit_problems` (the limits its quota mode asks for) and
  :func:`~kube_offload.consumers.quota_excess` (the ShadowPod webhook's own rules);
- taints, node affinity, cordon and node resources: :mod:`kubectl_offload.scheduling`
  (kube-scheduler's rules).

Input is :class:`ExplainFacts` (what :mod:`kubectl_offload.gather` read from both
clusters); output an :class:`Explanation`, a tree of plain values that renders as text,
JSON or YAML. The provider side of a pod already offloaded (its chain, events and logs)
is :mod:`kubectl_offload.remote_chain`'s.

Over 400 lines on purpose: it answers one question, where this pod can run, in the order
the cluster decides it (namespace policy, then the webhook's patch, then each node's checks,
then the one-line summary over them). Each section reads what the one before it decided
(the policy entry feeds the webhook, the patched pod feeds the nodes), so splitting them
would only pass those values across modules.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

import jsonpatch

from kube_offload import constants as c
from kube_offload import resources
from kube_offload import node_filter as extender
from kube_offload.affinity import virtual_node_toleration
from kube_offload.consumer_quota import limit_problems, pod_charges
from kube_offload.consumers import ConsumerError, consumer_terms, quota_excess
from kube_offload.namespace_policies import evaluate
from kube_offload.node_filter import evaluate_policy
from kube_offload.nodes import cluster_id_of, is_virtual_node, node_name, slice_of
from kube_offload.opt_in import pod_policy
from kube_offload.pod_mutation import MalformedPod, decide_pod, skip_reason
from kube_offload.policy import NamespacePolicy, PolicyError
from kube_offload.resources import QuantityError
from kube_offload.views import metadata as _meta, status as _status
from kubectl_offload.documents import camel_keys
from kubectl_offload import scheduling
from kubectl_offload.remote_chain import RemoteChain, chain_section, last_events, logs_section, phase

# The checks of one node, in the order their first failure is reported.
CHECK_PLACEMENT = "placement"  # the extender: placement table, cluster selector, policy validity
CHECK_TAINTS = "taints"  # kube-scheduler TaintToleration
CHECK_UNSCHEDULABLE = "unschedulable"  # kube-scheduler NodeUnschedulable
CHECK_AFFINITY = "node-affinity"  # kube-scheduler NodeAffinity (nodeSelector included)
CHECK_READY = "ready"  # the extender: a virtual node must be Ready
CHECK_RESOURCES = "resources"  # kube-scheduler NodeResourcesFit
CHECK_REMOTE_CAPACITY = "remote-capacity"  # the extender: one remote node must fit the pod
CHECK_QUOTA = "quota"  # the provider: Consumer quota and cordon
CHECKS = (
    CHECK_PLACEMENT, CHECK_TAINTS, CHECK_UNSCHEDULABLE, CHECK_AFFINITY,
    CHECK_READY, CHECK_RESOURCES, CHECK_REMOTE_CAPACITY, CHECK_QUOTA,
)
# Checks about free room, which count the pod itself once it is bound: skipped on its own node.
_ROOM_CHECKS = (CHECK_RESOURCES, CHECK_REMOTE_CAPACITY, CHECK_QUOTA)
_EXTENDER_CHECK = {
    extender.REASON_PLACEMENT: CHECK_PLACEMENT,
    extender.REASON_INVALID_POLICY: CHECK_PLACEMENT,
    extender.REASON_NOT_READY: CHECK_READY,
    extender.REASON_CAPACITY: CHECK_REMOTE_CAPACITY,
}
_CAPACITY_UNKNOWN = {
    extender.CAPACITY_MISSING: "the virtual node has no remote-capacity annotation yet",
    extender.CAPACITY_STALE: "the remote-capacity annotation is stale (its virtual kubelet stopped refreshing it)",
    extender.CAPACITY_INVALID: "the remote-capacity annotation does not parse",
}


class ExplainError(ValueError):
    """The pod cannot be explained as given (malformed); the message names the field."""


# --- input ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteView:
    """What was read of one provider: its Consumer for us (None: none exists), or why not."""

    cluster_id: str
    consumer: Mapping[str, Any] | None = None
    error: str = ""  # non-empty: the provider could not be read; says why and what to do


@dataclass(frozen=True)
class ExplainFacts:
    pod: Mapping[str, Any]
    created: bool  # False: from a file (`explain -f`), not in the cluster
    namespace: Mapping[str, Any] | None  # None: the namespace does not exist
    nodes: Sequence[Mapping[str, Any]]
    other_pods: Sequence[Mapping[str, Any]]  # the cluster's pods (for node resources); the pod itself is skipped
    now: datetime
    local_events: Sequence[Mapping[str, Any]] = ()
    remotes: Mapping[str, RemoteView] = field(default_factory=dict)
    chain: RemoteChain | None = None
    local_cluster_id: str | None = None
    webhook_scheduler_name: str | None = None


# --- output --------------------------------------------------------------------------------
@dataclass
class NodeVerdict:
    name: str
    kind: str  # "physical" | "virtual"
    cluster_id: str | None
    fits: bool
    check: str  # the first failing check, "" when it fits
    reason: str
    failures: list[dict[str, Any]] = field(default_factory=list)  # every failing check: {check, reason}
    notes: list[str] = field(default_factory=list)
    bound: bool = False  # the pod is bound to this node
    # The slice this virtual node stands for (docs/slices.md); None: a peering's own node
    # or a physical one. Its pods run on that slice's provider pool only.
    slice: str | None = None


@dataclass
class Explanation:
    pod: dict[str, Any]
    policy: dict[str, Any]
    webhook: dict[str, Any]
    nodes: list[NodeVerdict]
    chain: dict[str, Any] | None
    events: dict[str, Any]
    logs: dict[str, Any] | None
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return camel_keys(asdict(self))


# --- the pieces ------------------------------------------------------------------------------
def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    value = (obj or {}).get("spec")
    return value if isinstance(value, Mapping) else {}


def pod_namespace(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("namespace") or "")


def policy_section(namespace_name: str, namespace: Mapping[str, Any] | None, local_cluster_id: str | None) -> tuple[dict[str, Any], NamespacePolicy | PolicyError | None]:
    """The namespace's policy as the webhook and the extender read it."""
    if namespace is None:
        return {
            "namespace": namespace_name, "offloaded": False, "state": "missing",
            "detail": f"namespace {namespace_name} does not exist",
        }, None
    entry = evaluate(dict(namespace))
    if isinstance(entry, PolicyError):
        return {
            "namespace": namespace_name, "offloaded": False, "state": "invalid",
            "detail": f"invalid offloading policy, so nothing of it goes remote (pods still run locally): {entry}",
        }, entry
    if not entry.enabled:
        return {
            "namespace": namespace_name, "offloaded": False, "state": "not-offloaded",
            "detail": (
                f"not offloaded: label {c.LABEL_ENABLED}={c.ENABLED_VALUE} is not set, so its pods run on "
                f"physical nodes only (kubectl label namespace {namespace_name} {c.LABEL_ENABLED}={c.ENABLED_VALUE})"
            ),
        }, entry
    section = {
        "namespace": namespace_name, "offloaded": True, "state": "offloaded",
        "placement": entry.placement, "mapping": entry.mapping,
        "clusterSelector": str(entry.cluster_selector) or "(every remote cluster)",
        "detail": f"offloaded: {c.LABEL_POD_PLACEMENT}={entry.placement}",
    }
    if local_cluster_id:
        section["twinNamespace"] = c.twin_namespace_name(namespace_name, local_cluster_id, entry.mapping)
    return section, entry


def describe_requirement(requirement: Mapping[str, Any]) -> str:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator in ("Exists", "DoesNotExist"):
        return f"{requirement.get('key')} {operator}"
    return f"{requirement.get('key')} {operator} [{', '.join(map(str, values))}]"


def describe_terms(terms: Sequence[Mapping[str, Any]] | None) -> str:
    """Required nodeSelectorTerms as "(a AND b) OR (c)"."""
    if not terms:
        return "(none)"
    parts = []
    for term in terms:
        requirements = [describe_requirement(r) for r in (term.get("matchExpressions") or [])]
        requirements += [describe_requirement(r) for r in (term.get("matchFields") or [])]
        parts.append("(" + " AND ".join(requirements) + ")")
    return " OR ".join(parts)


def describe_operation(op: Mapping[str, Any]) -> str:
    """One webhook JSON Patch operation, as a sentence."""
    path = str(op.get("path") or "")
    value = op.get("value")
    if path.startswith("/spec/tolerations"):
        tolerations = value if isinstance(value, list) else [value]
        return "add toleration " + ", ".join(scheduling.describe_taint(t) for t in tolerations if isinstance(t, Mapping))
    if path.startswith("/spec/affinity") or path == "/spec":
        terms = value
        for key in ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"):
            if isinstance(terms, Mapping) and key in terms:
                terms = terms[key]
        return "require node affinity " + describe_terms(terms if isinstance(terms, list) else None)
    if path == "/spec/schedulerName":
        return f"set schedulerName {value}"
    return f"{op.get('op')} {path}"


def _has_virtual_toleration(pod: Mapping[str, Any]) -> bool:
    wanted = virtual_node_toleration()
    taint = {"key": wanted["key"], "value": wanted["value"], "effect": wanted["effect"]}
    return any(scheduling.tolerates(t, taint) for t in _spec(pod).get("tolerations") or [] if isinstance(t, Mapping))


def webhook_section(
    pod: Mapping[str, Any], *, created: bool, namespace_name: str, entry: NamespacePolicy | PolicyError | None,
    scheduler_name: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the webhook added (a created pod) or would add (a pod from a file), and its patch."""
    # A pod the scheduler bound has spec.nodeName now, but not when the webhook saw it.
    as_admitted = copy.deepcopy(dict(pod))
    if created:
        (as_admitted.get("spec") or {}).pop("nodeName", None)
    try:
        skipped = skip_reason(as_admitted)
        decision = decide_pod(as_admitted, namespace_name, entry, scheduler_name=scheduler_name)
    except MalformedPod as exc:
        raise ExplainError(str(exc)) from None
    patch = [dict(op) for op in decision.patch]
    section: dict[str, Any] = {
        "skipped": skipped or "",
        "warnings": list(decision.warnings),
        "patch": patch,
        "changes": [describe_operation(op) for op in patch],
        "carries": {
            "virtualNodeToleration": _has_virtual_toleration(pod),
            "requiredNodeAffinity": describe_terms(scheduling.required_node_terms(pod)),
            "schedulerName": str(_spec(pod).get("schedulerName") or ""),
        },
    }
    effective = pod_policy(as_admitted, namespace_name, entry)
    if skipped:
        section["detail"] = f"left alone by the webhook: {skipped}"
    elif not isinstance(effective, NamespacePolicy) or not effective.enabled:
        section["detail"] = "nothing: the namespace is not offloaded"
    elif created and not patch:
        section["detail"] = "already applied: the pod carries everything the webhook adds"
    elif created:
        section["detail"] = (
            "NOT applied: the pod lacks what the webhook adds (created before its namespace was offloaded, "
            "or while the webhook was down and failurePolicy let it through); recreate it"
        )
    else:
        section["detail"] = "would add: " + "; ".join(section["changes"]) if patch else "would add nothing"
    if not skipped and isinstance(effective, NamespacePolicy) and effective.opt_in:
        # Not the namespace's labels: the pod's own opt-in (kube_offload/opt_in.py).
        section["optIn"] = f"the pod opts in with runtimeClassName {c.RUNTIME_CLASS_OPT_IN}: placement Remote"
    return section, patch


def _quota_check(pod: Mapping[str, Any], requests: Mapping[str, int], view: RemoteView | None, cluster_id: str) -> tuple[str, str]:
    """("fail"|"note"|"", message) for the provider's drain, cordon and quota (its mode's limit rules too)."""
    if view is None or view.error:
        why = view.error if view is not None else "no kubeconfig for it"
        return "note", f"provider quota not checked: {why}"
    if view.consumer is None:
        return "fail", f"provider {cluster_id} admits no consumer of this name (no Consumer object): every ShadowPod is refused"
    try:
        terms = consumer_terms(view.consumer)
    except ConsumerError as exc:
        return "fail", f"the provider's Consumer is misconfigured ({exc}): every ShadowPod is refused"
    mode = terms.policy.quota_mode
    # In the ShadowPod webhook's order: drain and cordon (they stay when quota frees up), then
    # the limits the quota mode asks for, then the quota.
    if terms.draining:
        return "fail", (f"consumer {terms.consumer_id} is drained by provider {cluster_id}: no new pods are admitted, "
                        "and the pods there are sent home (until the provider runs kube-offload undrain)")
    if terms.cordoned:
        return "fail", f"consumer {terms.consumer_id} is cordoned by provider {cluster_id}: no new pods are admitted"
    try:
        used = resources.parse_resource_list(_status(view.consumer).get("used"))
    except QuantityError as exc:
        return "note", f"provider quota not checked: Consumer status.used does not parse ({exc})"
    try:
        unbounded = limit_problems(pod, terms.quota, mode, terms.consumer_id)
    except QuantityError:
        unbounded = []  # the spec does not parse: the webhook refuses it for that, reported elsewhere
    if unbounded:
        return "fail", f"refused by provider {cluster_id} (quota mode {mode}): " + "; ".join(unbounded)
    exceeded = quota_excess(terms.quota, used, requests)
    if exceeded:
        details = "; ".join(
            f"{name}: requested {_q(name, more)}, used {_q(name, have)}, quota {_q(name, limit)}"
            for name, more, have, limit in exceeded
        )
        return "fail", f"exceeds the quota of consumer {terms.consumer_id} on provider {cluster_id}: {details} (quota mode {mode})"
    return "", ""


def _charges(pod: Mapping[str, Any], requests: Mapping[str, int]) -> Mapping[str, int]:
    try:
        return pod_charges(pod)
    except QuantityError:
        return requests


def _q(name: str, milli: int) -> str:
    return resources.format_quantity(milli, binary=resources.uses_binary_format(name))


def node_verdicts(facts: ExplainFacts, pod: Mapping[str, Any], entry: NamespacePolicy | PolicyError | None) -> list[NodeVerdict]:
    """Every node, physical and virtual: does ``pod`` (as the scheduler sees it) fit, and the
    first reason it does not."""
    try:
        requests = resources.pod_requests(pod)
    except QuantityError as exc:
        raise ExplainError(f"the pod's resources do not parse: {exc}") from None
    lookup = evaluate_policy(dict(facts.namespace)) if facts.namespace is not None else None
    filtered = extender.filter_nodes(pod, [dict(n) for n in facts.nodes], lookup, lambda _name: None, now=facts.now)
    uid = str(_meta(pod).get("uid") or "")
    bound_to = str(_spec(pod).get("nodeName") or "")
    by_node = scheduling.bound_pods_by_node(facts.other_pods, exclude_uid=uid if facts.created else "")

    verdicts = []
    for node in facts.nodes:
        name = node_name(dict(node))
        virtual = is_virtual_node(dict(node))
        cluster = cluster_id_of(dict(node))
        failures: dict[str, str] = {}
        notes: list[str] = []
        failure = filtered.failures.get(name)
        if failure is not None:
            failures[_EXTENDER_CHECK.get(failure.reason, CHECK_PLACEMENT)] = failure.message
        if name in filtered.capacity_unknown:
            notes.append("remote fit not checked: " + _CAPACITY_UNKNOWN.get(filtered.capacity_unknown[name], filtered.capacity_unknown[name]))
        for check, rule in (
            (CHECK_TAINTS, scheduling.taints_allow),
            (CHECK_UNSCHEDULABLE, scheduling.unschedulable_allows),
            (CHECK_AFFINITY, scheduling.affinity_allows),
        ):
            ok, why = rule(pod, node)
            if not ok:
                failures[check] = why
        try:
            ok, why = scheduling.resources_fit(requests, node, by_node.get(name, ()))
            if not ok:
                failures[CHECK_RESOURCES] = f"{why} on the node (allocatable minus the pods bound to it)"
        except QuantityError as exc:
            notes.append(f"node resources not checked: {exc}")
        if virtual and cluster and name != bound_to:
            # The provider counts limits too (limits.* keys): its own charges, not just requests.
            outcome, message = _quota_check(pod, _charges(pod, requests), facts.remotes.get(cluster), cluster)
            if outcome == "fail":
                failures[CHECK_QUOTA] = message
            elif outcome == "note":
                notes.append(message)
        bound = bool(bound_to) and name == bound_to
        if bound:
            for check in _ROOM_CHECKS:
                failures.pop(check, None)
        ordered = [{"check": check, "reason": failures[check]} for check in CHECKS if check in failures]
        slice_name = slice_of(dict(node))
        if slice_name:
            notes.append(f"slice {slice_name} of cluster {cluster}: its pods run on that slice's provider pool; "
                         "its capacity is what the provider accepted (kubectl offload status shows the slice)")
        verdicts.append(NodeVerdict(
            name=name, kind="virtual" if virtual else "physical", cluster_id=cluster,
            fits=not ordered, check=ordered[0]["check"] if ordered else "",
            reason=ordered[0]["reason"] if ordered else "", failures=ordered, notes=notes, bound=bound, slice=slice_name,
        ))
    return verdicts


def _scheduler_message(pod: Mapping[str, Any]) -> str:
    for condition in _status(pod).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def summarize(facts: ExplainFacts, policy: dict[str, Any], nodes: list[NodeVerdict], chain: dict[str, Any] | None) -> str:
    pod = facts.pod
    bound_to = str(_spec(pod).get("nodeName") or "")
    if bound_to:
        verdict = next((v for v in nodes if v.name == bound_to), None)
        if verdict is None or verdict.kind == "physical":
            return f"runs locally on node {bound_to}"
        where = f"virtual node {bound_to} (cluster {verdict.cluster_id})"
        if chain is None:
            return f"bound to {where}; its provider side was not read"
        last = chain["links"][-1]
        if chain["complete"]:
            remote = chain["links"][-2]
            return f"runs remotely on {where}: remote pod {remote['name']} is {remote['phase']} on remote node {last['name']}"
        warnings = [e for e in last_events(facts.local_events, facts.now, len(facts.local_events)) if e["type"] == "Warning"]
        warning = warnings[-1] if warnings else None
        why = f"; last Warning: {warning['reason']}: {warning['message']}" if warning else ""
        return f"bound to {where}, but its {last['kind']} is {last['phase']}{why}"
    fitting = [v.name for v in nodes if v.fits]
    prefix = "not created; " if not facts.created else "Pending: " if phase(pod) == "Pending" else ""
    if not policy["offloaded"] and policy["state"] == "not-offloaded":
        prefix += "namespace not offloaded, physical nodes only; "
    if fitting:
        return prefix + "fits on " + ", ".join(fitting)
    by_check: dict[str, list[str]] = {}
    for verdict in nodes:
        by_check.setdefault(verdict.check, []).append(verdict.name)
    parts = [f"{', '.join(names)}: {check}" for check, names in by_check.items()]
    return prefix + "no node fits (" + "; ".join(parts) + ")"


def explain(facts: ExplainFacts) -> Explanation:
    """The whole explanation. Raises :class:`ExplainError` for a malformed pod."""
    pod = facts.pod
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
        raise ExplainError("the pod has no spec: give a Pod manifest (kind: Pod) with spec.containers")
    meta = _meta(pod)
    namespace_name = pod_namespace(pod)
    policy, entry = policy_section(namespace_name, facts.namespace, facts.local_cluster_id)
    webhook, patch = webhook_section(
        pod, created=facts.created, namespace_name=namespace_name, entry=entry, scheduler_name=facts.webhook_scheduler_name
    )
    # The scheduler sees a created pod as it is, and a pod from a file as the webhook will make it.
    scheduled = pod
    if not facts.created and patch:
        try:
            scheduled = jsonpatch.apply_patch(copy.deepcopy(dict(pod)), patch)
        except jsonpatch.JsonPatchException as exc:  # pragma: no cover - the webhook's own patch
            raise ExplainError(f"the webhook's patch does not apply to the pod: {exc}") from None
    nodes = node_verdicts(facts, scheduled, entry)
    chain = chain_section(pod, facts.chain)
    events = {
        "local": last_events(facts.local_events, facts.now),
        "remote": last_events(facts.chain.events if facts.chain is not None else (), facts.now),
    }
    return Explanation(
        pod={
            "namespace": namespace_name,
            "name": str(meta.get("name") or ""),
            "created": facts.created,
            "phase": phase(pod) if facts.created else "",
            "node": str(_spec(pod).get("nodeName") or ""),
            "schedulerMessage": _scheduler_message(pod),
        },
        policy=policy,
        webhook=webhook,
        nodes=nodes,
        chain=chain,
        events=events,
        logs=logs_section(pod, facts.nodes),
        summary=summarize(facts, policy, nodes, chain),
    )
