"""What the pod loop hands its steps (``shadowpods``, ``ending``, ``handback``): the
services they use, typed as a Protocol, not the whole loop (``reconcile.PodOffloader``
is the one implementation), and the values the reconcile resolved for them. In the
spirit of virtual-kubelet's ``PodLifecycleHandler`` (node/podcontroller.go): a step can
reach the remote cluster, the local pod, the Event recorder and the backoffs, and nothing
of the loop's watches, caches or indexes but the one question it asks them
(``remote_pods_of``). What a step needs of the world (the translation context, the pod's
API server mode, the pod as the remote cluster should run it) the reconcile reads once
and hands it as a value (:class:`Desired`): a step never calls back into the loop for
its inputs. A step needing more adds it here, in sight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kube import Kube
from vkubelet.home_api.pod_access import APIServerMode
from vkubelet.pods.local import LocalPods
from vkubelet.pods.refusals import RefusalBackoff
from vkubelet.pods.translation import RemotePod
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.policy_events import PolicyNotices
from vkubelet.twins.namespaces import TwinPlan


@dataclass(frozen=True)
class Desired:
    """The local pod as the remote cluster should run it now, worked out once by the
    reconcile from what it read (the translation context, the pod's API server mode)."""

    remote: RemotePod  # the translation: what the policy adjusted or refuses, a loop
    shadowpod: dict[str, Any]  # the ShadowPod carrying it (its template: views.pod_template)
    mode: APIServerMode
    # Reflection of tokens is on and the provider runs no relay to our API server for us:
    # the Offloaded Event says so (shadowpods.offloaded_event).
    relay_missing: bool


class StepSettings(Protocol):
    """The settings the steps read (the process's Settings has them all)."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def node_name(self) -> str: ...

    @property
    def unreachable_deletion_margin(self) -> float: ...

    @property
    def handback_after(self) -> float: ...


class StepTwins(Protocol):
    """What the steps ask of the twin-namespace rule (twins/namespaces.py)."""

    @property
    def local_namespaces(self) -> Informer: ...

    def plan(self, name: str) -> TwinPlan: ...


class StepHandbacks(Protocol):
    """The count of pods handed back, by cause (pods/handback.py HandbackCounts)."""

    def add(self, cause: str) -> None: ...


class StepQueue(Protocol):
    """The loop's queue, for a step that must look again later without failing now."""

    def enqueue_after(self, key: str, delay: float) -> None: ...


class StepContext(Protocol):
    @property
    def settings(self) -> StepSettings: ...

    @property
    def kube(self) -> Kube:
        """The remote cluster (ShadowPods)."""
        ...

    @property
    def local(self) -> LocalPods:
        """The writes to the local pod (status, the final delete)."""
        ...

    @property
    def recorder(self) -> EventRecorder: ...

    @property
    def refusals(self) -> RefusalBackoff:
        """Per pod and request, the backoff of the provider's refusals."""
        ...

    @property
    def notices(self) -> PolicyNotices:
        """The provider policy's notes, told once per pod."""
        ...

    @property
    def handbacks(self) -> StepHandbacks: ...

    @property
    def twins(self) -> StepTwins: ...

    @property
    def controller(self) -> StepQueue: ...

    def reachable(self) -> bool:
        """Whether the remote cluster answers (the virtual node's Ready rule)."""
        ...

    def remote_pods_of(self, key: str) -> list[dict[str, Any]]:
        """Our remote pods standing for local pod ``key``."""
        ...
