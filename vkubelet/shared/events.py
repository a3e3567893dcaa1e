"""Kubernetes Events in the local cluster about the objects the vkubelet serves (what
`kubectl describe pod` shows under Events: why a pod is not running remotely).

Folding of repeats (:mod:`kube_offload.runtime.event_correlator`) and the never-raise rule
(:mod:`kube_offload.runtime.events`) live in the runtime; here are
the vkubelet's name and reasons. A reconcile that keeps failing writes the same Event at
most once per ``min_interval`` seconds.
"""

from __future__ import annotations

import time
from typing import Callable

from kubernetes import client

from kube_offload.runtime import events
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.events import NORMAL, WARNING  # noqa: F401  (re-exported for callers)
# Reasons: the contract's (docs/virtual-kubelet.md lists them), re-exported for the vkubelet's modules.
from kube_offload.reasons import (  # noqa: F401
    REASON_HANDED_BACK,
    REASON_HOME_API_UNAVAILABLE,
    REASON_INVALID_API_SERVER_MODE,
    REASON_NODE_NOT_READY,
    REASON_NOT_HANDED_BACK,
    REASON_OFFLOADED,
    REASON_OFFLOADING_FAILED,
    REASON_OFFLOADING_LOOP,
    REASON_POD_IP_NOT_REMAPPED,
    REASON_POLICY_ADJUSTED,
    REASON_POLICY_INVALID,
    REASON_POLICY_REFUSED,
    REASON_PROVIDER_REFUSED,
    REASON_REMOTE_UNSCHEDULABLE,
    REASON_TERMINATION_UNCONFIRMED,
    REASON_TWIN_CONFLICT,
    REASON_TWIN_FORBIDDEN,
    REASON_TWIN_REFUSED,
)

COMPONENT = "kube-offload-vkubelet"
REPORTING_CONTROLLER = "kube-offload.io/vkubelet"


class EventRecorder(events.EventRecorder):
    def __init__(
        self,
        # The local cluster's client; or a Kube that writes the Events (a test's recording one).
        api_client: client.ApiClient | Kube,
        *,
        host: str,
        min_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            events.KubeEventSink(api_client),
            component=COMPONENT,
            reporting_controller=REPORTING_CONTROLLER,
            instance=host,
            min_interval=min_interval,
            clock=clock,
        )
