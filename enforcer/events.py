"""Kubernetes Events about ShadowPods (core/v1 Events, as ``kubectl describe shp`` shows).

Repeats of one event (a creation that keeps failing on a quota, say) are folded into one
Event whose ``count`` grows, and recording never fails the caller: both rules live in
:mod:`kube_offload.runtime.events`; here are the enforcer's name and reasons.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

from enforcer.api import EnforcerApi
from kube_offload.runtime import events
from kube_offload.runtime.events import AGGREGATE_SECONDS, NORMAL, WARNING  # noqa: F401  (re-exported)

COMPONENT = "kube-offload-enforcer"
REPORTING_CONTROLLER = "kube-offload.io/enforcer"

# Reasons, written once so docs and tests can refer to them.
REASON_CREATED = "PodCreated"
REASON_RECREATED = "PodRecreated"
REASON_CREATE_FAILED = "PodCreationFailed"
REASON_DELETED_EXTRA = "ExtraPodDeleted"
# The ShadowPod's local pod is being deleted: its pod is deleted with that grace period.
REASON_TERMINATING = "PodTerminating"
REASON_NAME_TAKEN = "PodNameTaken"
REASON_INVALID = "InvalidShadowPod"
REASON_UPDATED = "PodUpdated"
REASON_UPDATE_REFUSED = "PodUpdateRefused"


class EventRecorder(events.EventRecorder):
    def __init__(self, api: EnforcerApi, *, instance: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(
            api,
            component=COMPONENT,
            reporting_controller=REPORTING_CONTROLLER,
            instance=instance or socket.gethostname(),
            clock=clock,
        )
