"""What the provider tells its consumer through the ``Consumer`` object (pure).

The consumer may not read the provider's nodes and pods. The provider's enforcer
publishes a summary of them in ``Consumer.status.capacity``, and the provider's own
terms sit in ``Consumer.spec``: a quota (the ShadowPod webhook refuses what exceeds it,
so the virtual node must never advertise more), a cordon, a drain, and labels it suggests for the
consumer's virtual node (region, provider...), and its policy (``spec.policy``, what our
identity may write there: kube_offload/provider_policy.py). This module reads that object;
vkubelet/node/virtual_node.py and node/forge.py turn it into the virtual node, and policy_fit.py uses the policy
to drop what the provider would refuse before anything is sent.

A policy that does not parse (a provider's typo, or a newer provider's key this consumer
does not know) is read as :data:`~kube_offload.provider_policy.DEFAULT_POLICY`, the
strictest: what we then drop the provider would most likely refuse anyway, while a policy
read too wide would send what it refuses.

Suggested labels are the provider's claims about itself, and namespace cluster selectors
send pods by them: the consumer's own ``--node-label`` flags override them, the contract
labels override both, and keys the provider has no business setting (ours, and the
Kubernetes-reserved ``kubernetes.io``/``k8s.io`` domains but for topology and instance
type, as the NodeRestriction admission allows a kubelet) are dropped with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload import resources
from kube_offload.remote_resources import CapacityStatusError, RemoteResources, decode_capacity_status, virtual_node_capacity
from kube_offload.resources import QuantityError, ResourceList
from kube_offload.selector import label_key_problem, label_value_problem
from kube_offload.views import ConsumerView

# Kubernetes-reserved label prefixes a provider may still suggest (what a kubelet may set
# on its own node under NodeRestriction).
_RESERVED_ALLOWED = ("topology.kubernetes.io/", "node.kubernetes.io/instance-type")
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io", c.DOMAIN)


@dataclass(frozen=True)
class ProviderTerms:
    """One reading of our Consumer object."""

    admitted: bool  # the Consumer exists: the provider accepts us at all
    # The enforcer's capacity summary; None while it has published none (or an unreadable one).
    summary: RemoteResources | None = None
    # Per-resource upper bound on the sum of our ShadowPods' requests; absent = unlimited.
    quota: ResourceList = field(default_factory=dict)
    cordoned: bool = False
    # spec.drain is set: the provider is taking our pods back (kube-offload drain); the node
    # gets the NoExecute drain taint so they are evicted here and recreated on local nodes.
    draining: bool = False
    suggested_labels: dict[str, str] = field(default_factory=dict)
    # What our identity may write in our twin namespaces (spec.policy; the defaults when
    # absent or unreadable).
    policy: pp.ProviderPolicy = pp.DEFAULT_POLICY
    # What was ignored and why (logged by the caller, once per change).
    problems: tuple[str, ...] = ()


NOT_ADMITTED = ProviderTerms(admitted=False)


def suggested_label_problem(key: str, value: str) -> str | None:
    """Why the provider may not put label ``key=value`` on our virtual node (None: it may)."""
    problem = label_key_problem(key) or label_value_problem(value)
    if problem:
        return problem
    prefix = key.split("/", 1)[0] if "/" in key else ""
    if any(prefix == domain or prefix.endswith(f".{domain}") for domain in _RESERVED_DOMAINS):
        if not key.startswith(_RESERVED_ALLOWED):
            return f"the {prefix} prefix is reserved (the consumer or Kubernetes sets those labels)"
    return None


def read_policy(spec: Mapping[str, Any]) -> tuple[pp.ProviderPolicy, str | None]:
    """The policy in a Consumer's ``spec`` and, when it does not parse, why (then the
    strictest: :data:`~kube_offload.provider_policy.DEFAULT_POLICY`)."""
    try:
        return pp.parse_policy(spec.get("policy")), None
    except pp.ProviderPolicyError as exc:
        return pp.DEFAULT_POLICY, f"spec.policy ignored, the defaults (the strictest) apply: {exc}"


def read_consumer(consumer: Mapping[str, Any] | None) -> ProviderTerms:
    """The terms in ``consumer`` (None: no Consumer object of ours on the provider)."""
    if consumer is None:
        return NOT_ADMITTED
    view = ConsumerView(consumer)
    spec = view.spec
    problems: list[str] = []

    summary = None
    if view.capacity is not None:
        try:
            summary = decode_capacity_status(view.capacity)
        except CapacityStatusError as exc:
            problems.append(f"capacity summary ignored: {exc}")

    quota: ResourceList = {}
    raw_quota = view.quota or {}
    if isinstance(raw_quota, Mapping):
        for name, value in raw_quota.items():
            try:
                quota[str(name)] = resources.parse_quantity(value)
            except (QuantityError, TypeError, ValueError) as exc:
                problems.append(f"spec.quota[{name}]={value!r} ignored: {exc}")
    else:
        problems.append("spec.quota ignored: it must be an object of resource -> quantity")

    labels: dict[str, str] = {}
    raw_labels = view.node_labels or {}
    if isinstance(raw_labels, Mapping):
        for key, value in sorted(raw_labels.items()):
            problem = suggested_label_problem(str(key), str(value))
            if problem:
                problems.append(f"spec.nodeLabels[{key}] ignored: {problem}")
            else:
                labels[str(key)] = str(value)
    else:
        problems.append("spec.nodeLabels ignored: it must be an object of label -> value")

    policy, policy_problem = read_policy(spec)
    if policy_problem:
        problems.append(policy_problem)

    return ProviderTerms(
        admitted=True,
        summary=summary,
        quota=quota,
        cordoned=view.cordoned,
        # Present at all: a drain record this consumer cannot read still means "leave" (the
        # provider deletes what is left after its grace either way).
        draining=view.drain is not None,
        suggested_labels=labels,
        policy=policy,
        problems=tuple(problems),
    )


def cap_by_quota(capacity: Mapping[str, int], quota: Mapping[str, int]) -> ResourceList:
    """Each resource of ``capacity`` at most its quota (a resource without one is not
    capped; a quota on a resource the provider does not offer adds nothing). A
    ``requests.<name>`` key (the ResourceQuota spelling a provider may use, enforcer/consumers/quota.py)
    caps ``<name>`` as a plain key does: allocatable is what requests are scheduled against."""
    caps = dict(quota)
    for name, amount in quota.items():
        if name.startswith("requests."):
            plain = name[len("requests."):]
            caps[plain] = min(amount, caps.get(plain, amount))
    return {name: min(amount, caps[name]) if name in caps else amount for name, amount in capacity.items()}


def node_capacity(terms: ProviderTerms, sharing_percentage: int) -> ResourceList | None:
    """Capacity (= allocatable) of the virtual node: the sharing percentage of what the
    provider can share with us, capped by our quota. None: nothing to say yet (keep what
    the node shows). Not admitted: nothing at all (pods 0), so nothing is scheduled that
    the provider would refuse."""
    if not terms.admitted:
        return {"pods": 0}
    if terms.summary is None:
        return None
    return cap_by_quota(virtual_node_capacity(terms.summary.shareable, sharing_percentage), terms.quota)


class PolicyReader:
    """The policy on our Consumer as its cache holds it now (parsed once per version of
    the object): what the pod and reflection loops fit objects to before sending them.
    ``consumer`` returns our Consumer from the informer's cache (None: not there)."""

    def __init__(self, consumer: Callable[[], Mapping[str, Any] | None]) -> None:
        self._consumer = consumer
        self._cached: tuple[object, pp.ProviderPolicy] = (object(), pp.DEFAULT_POLICY)

    def __call__(self) -> pp.ProviderPolicy:
        consumer = self._consumer()
        if consumer is None:
            return pp.DEFAULT_POLICY
        version = (consumer.get("metadata") or {}).get("resourceVersion") or id(consumer)
        cached_version, policy = self._cached  # one read: another thread may replace it
        if cached_version == version:
            return policy
        policy, _problem = read_policy(consumer.get("spec") or {})  # logged by node/virtual_node.py
        self._cached = (version, policy)
        return policy
