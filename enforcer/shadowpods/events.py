"""Kubernetes Events about ShadowPods (core/v1 Events, as ``kubectl describe shp`` shows).

Repeats of one event (a creation that keeps failing on a quota, say) are folded into one
Event whose ``count`` grows, and recording never fails the caller: both rules live in the
runtime (:mod:`kube_offload.runtime.event_correlator`, :mod:`kube_offload.runtime.events`);
here are the enforcer's name and reasons.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

from enforcer.shadowpods.api import EnforcerApi
from kube_offload.runtime import events
from kube_offload.runtime.event_correlator import AGGREGATE_SECONDS  # noqa: F401  (re-exported)
from kube_offload.runtime.events import NORMAL, WARNING  # noqa: F401  (re-exported)
# Reasons: the contract's, under the enforcer's short names.
from kube_offload.reasons import REASON_EXTRA_POD_DELETED as REASON_DELETED_EXTRA  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_INVALID_SHADOWPOD as REASON_INVALID  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_CREATION_FAILED as REASON_CREATE_FAILED  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_NAME_TAKEN as REASON_NAME_TAKEN  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_RECREATED as REASON_RECREATED  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_REFUSED as REASON_REFUSED  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_TERMINATING as REASON_TERMINATING  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_UPDATE_REFUSED as REASON_UPDATE_REFUSED  # noqa: F401  (re-exported)
from kube_offload.reasons import REASON_POD_UPDATED as REASON_UPDATED  # noqa: F401  (re-exported)

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
