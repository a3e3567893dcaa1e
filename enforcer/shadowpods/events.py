"""Kubernetes Events about ShadowPods (core/v1 Events, as ``kubectl describe shp`` shows).

Repeats of one event (a creation that keeps failing on a quota, say) are folded into one
Event whose ``count`` grows, and recording never fails the caller: both rules live in the
runtime (:mod:`kube_offload.runtime.event_correlator`, :mod:`kube_offload.runtime.events`),
the reasons in the contract (:mod:`kube_offload.reasons`, ``REASON_POD_*``); here is the
enforcer's name.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

from enforcer.shadowpods.api import EnforcerApi
from kube_offload.runtime import events

COMPONENT = "kube-offload-enforcer"
REPORTING_CONTROLLER = "kube-offload.io/enforcer"


class EventRecorder(events.EventRecorder):
    def __init__(self, api: EnforcerApi, *, instance: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(
            api,
            component=COMPONENT,
            reporting_controller=REPORTING_CONTROLLER,
            instance=instance or socket.gethostname(),
            clock=clock,
        )
