"""Kubernetes Events in the local cluster about the objects the vkubelet serves (what
`kubectl describe pod` shows under Events: why a pod is not running remotely).

Folding of repeats (:mod:`kube_offload.runtime.event_correlator`) and the never-raise rule
(:mod:`kube_offload.runtime.events`) live in the runtime, the reasons in the contract
(:mod:`kube_offload.reasons`; docs/virtual-kubelet.md lists the vkubelet's); here is the
vkubelet's name. A reconcile that keeps failing writes the same Event at
most once per ``min_interval`` seconds.
"""

from __future__ import annotations

import time
from typing import Callable

from kubernetes import client

from kube_offload.runtime import events
from kube_offload.runtime.kube import Kube

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
