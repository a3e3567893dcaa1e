"""Per-pod opt-in: a pod whose ``spec.runtimeClassName`` is the kube-offload RuntimeClass
(:data:`~kube_offload.constants.RUNTIME_CLASS_OPT_IN`) is offloaded whatever its
namespace's labels say (issue #24 item 2; docs/webhook.md, "Per-pod opt-in").

The webhook (pod_mutation.decide_pod), the scheduler extender (node_filter) and the
virtual kubelet's twin-namespace loop (vkubelet/twins/namespaces.py) all ask :func:`pod_policy`
for the policy such a pod is held to, so the three agree:

* placement ``Remote``: the pod asked for offloading, and the class's handler exists on
  no real node, so a local node could not start it anyway;
* the namespace's cluster selector and namespace mapping still apply when it has them
  (labelled or not): the namespace admin's say in *where* stays, only *whether* is the
  pod's;
* an invalid namespace policy stays invalid: nothing goes remote until it is fixed (the
  pod then waits Pending with the extender's message naming the bad label).

Pure; the RuntimeClass object the local chart installs is :func:`runtime_class`.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Mapping, TypeVar

from kube_offload import constants as c
from kube_offload.affinity import virtual_node_toleration
from kube_offload.policy import NamespacePolicy
from kube_offload.selector import LabelSelector

P = TypeVar("P")


def opts_in(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` asked for offloading through the kube-offload RuntimeClass."""
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and spec.get("runtimeClassName") == c.RUNTIME_CLASS_OPT_IN


@functools.lru_cache(maxsize=1024)
def _remote(policy: NamespacePolicy) -> NamespacePolicy:
    # Cached so that one namespace policy gives one opt-in policy object: the webhook's
    # patch cache (pod_mutation._policy_terms) is keyed by identity.
    return replace(policy, enabled=True, placement=c.PLACEMENT_REMOTE, opt_in=True)


def opt_in_policy(namespace: str, policy: NamespacePolicy | None) -> NamespacePolicy:
    """The policy an opted-in pod of ``namespace`` is held to; ``policy`` is the
    namespace's own (None: the namespace is not known, so no selector and no mapping)."""
    if policy is None:
        policy = NamespacePolicy(
            namespace=namespace,
            enabled=False,
            placement=c.DEFAULT_PLACEMENT,
            mapping=c.DEFAULT_MAPPING,
            cluster_selector=LabelSelector(()),
        )
    return _remote(policy)


def pod_policy(pod: Mapping[str, Any], namespace: str, policy: P) -> P | NamespacePolicy:
    """The policy ``pod`` is held to: its namespace's ``policy`` (a NamespacePolicy, None
    for an unknown namespace, or whatever stands for an invalid one, returned as is), or
    for a pod that opts in, :func:`opt_in_policy`."""
    if not opts_in(pod):
        return policy
    if policy is None or isinstance(policy, NamespacePolicy):
        return opt_in_policy(namespace, policy)
    return policy  # invalid: nothing goes remote until the namespace's labels are fixed


def runtime_class() -> dict[str, Any]:
    """The RuntimeClass pods name to opt in (the local chart installs the same object:
    tests/unit/test_charts.py compares them).

    ``scheduling`` is applied by the apiserver's own RuntimeClass admission plugin, before
    any webhook: the pod only fits virtual nodes and tolerates their taint even when our
    webhook is not called (failurePolicy Ignore, or a namespace it does not watch).
    """
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": c.RUNTIME_CLASS_OPT_IN},
        "handler": c.RUNTIME_CLASS_OPT_IN_HANDLER,
        "scheduling": {
            "nodeSelector": {c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE},
            "tolerations": [virtual_node_toleration()],
        },
    }
