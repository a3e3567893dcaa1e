"""Kubernetes Events in the local cluster about the objects the vkubelet serves (what
`kubectl describe pod` shows under Events: why a pod is not running remotely).

Folding of repeats and the never-raise rule live in :mod:`kube_offload.runtime.events`; here are
the vkubelet's name and reasons. A reconcile that keeps failing writes the same Event at
most once per ``min_interval`` seconds.
"""

from __future__ import annotations

import time
from typing import Callable

from kubernetes import client

from kube_offload.runtime import events
from kube_offload.runtime.events import NORMAL, WARNING  # noqa: F401  (re-exported for callers)
from vkubelet import refusals

COMPONENT = "kube-offload-vkubelet"
REPORTING_CONTROLLER = "kube-offload.io/vkubelet"

# Reasons (docs/virtual-kubelet.md lists them).
REASON_OFFLOADED = "Offloaded"
REASON_OFFLOADING_FAILED = "OffloadingFailed"
REASON_REMOTE_UNSCHEDULABLE = "RemoteUnschedulable"
REASON_TWIN_CONFLICT = "TwinNamespaceConflict"
REASON_TWIN_REFUSED = "TwinNamespaceRefused"
# The provider revoked our read access to a Ready twin (its consumer RoleBinding gone):
# the namespace's pods are left as they are until it returns (pods.py).
REASON_TWIN_FORBIDDEN = "TwinNamespaceForbidden"
REASON_POLICY_INVALID = "InvalidOffloadingPolicy"
# The remote cluster stopped answering: the pod is marked not Ready (the word the node
# lifecycle controller uses for the pods of a lost node).
REASON_NODE_NOT_READY = "NodeNotReady"
# A pod deleted while the remote cluster was unreachable, deleted locally after its grace
# period plus the margin without its remote pod seen to stop.
REASON_TERMINATION_UNCONFIRMED = "RemoteTerminationUnconfirmed"
# A remote pod address outside the configured remapping (ip_remapping.py): shown as is.
REASON_POD_IP_NOT_REMAPPED = "PodIPNotRemapped"
# The provider refused a ShadowPod create/update: the Event carries the provider's message
# (the same word is the waiting pod's status.reason, hence defined with the refusal rules).
REASON_PROVIDER_REFUSED = refusals.REASON_PROVIDER_REFUSED
# The provider's policy (Consumer spec.policy) made us change a field before sending the
# object (dropped a priority class, a Service type...): one Warning per field.
REASON_POLICY_ADJUSTED = "ProviderPolicyAdjusted"
# The provider's policy refuses the object as it stands and nothing can be dropped to
# fit it (a volume type, an Ingress host...): it is not sent; one Warning per field.
REASON_POLICY_REFUSED = "ProviderPolicyRefused"


class EventRecorder(events.EventRecorder):
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        host: str,
        min_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            events.CoreV1EventSink(api_client),
            component=COMPONENT,
            reporting_controller=REPORTING_CONTROLLER,
            instance=host,
            min_interval=min_interval,
            clock=clock,
        )
