"""What the pod loop hands its steps (``shadowpods``, ``ending``, ``handback``): the
services they use, typed as a Protocol, not the whole loop (``reconcile.PodOffloader``
is the one implementation). In the spirit of virtual-kubelet's ``PodLifecycleHandler``
(node/podcontroller.go): a step can reach the remote cluster, the local pod, the Event
recorder and the backoffs, and nothing of the loop's watches, caches or indexes but the
one question it asks them (``remote_pods_of``). A step needing more adds it here, in
sight."""

from __future__ import annotations

from typing import Mapping, Protocol

from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kube import Kube
from vkubelet.home_api.pod_access import APIServerMode
from vkubelet.pods.local import LocalPods
from vkubelet.pods.refusals import RefusalBackoff
from vkubelet.pods.translation import TranslationContext
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.policy_events import PolicyNotices
from vkubelet.twins.namespaces import TwinPlan


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

    def remote_pods_of(self, key: str) -> list[dict]:
        """Our remote pods standing for local pod ``key``."""
        ...

    def context(self) -> TranslationContext:
        """What the translation of a pod needs, read now."""
        ...

    def api_server_mode(self, local: Mapping) -> APIServerMode: ...

    def policy_refused(self, key: str) -> None:
        """The provider's policy refuses pod ``key``: looked at again when it changes."""
        ...

    def not_policy_refused(self, key: str) -> None: ...
