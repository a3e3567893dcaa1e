"""Wires one virtual kubelet together and declares its loops to the process manager
(kube_offload/runtime/manager.py), which runs them until told to stop.

Start order matters for restart safety: informers first; the virtual node (and its
lease) at once, since it needs no complete cache and the local control plane expects a
heartbeat; each controller only once every cache it reads has listed, so that no
decision (above all "this ShadowPod is an orphan") is taken from half a picture. The
manager stops them in the reverse order: the controllers, then the Event recorder (what
they recorded is written until its deadline), then the node, then the informers.

Extension point: other loops - resource reflection (``vkubelet/reflection/``), the
virtual storage class, the kubelet API (``vkubelet/kubeletapi/loop.py``), the home API
access - plug in as factories passed to :class:`VirtualKubelet`
(vkubelet/shared/loops.py: what a factory receives and returns). Each is declared to the
manager as its own :class:`~kube_offload.runtime.manager.Loop`, as the enforcer declares
its loops.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from kubernetes import client

from kube_offload.runtime.manager import Loop, Manager, Synced, serve
from kube_offload.runtime.kube import Kube
from vkubelet.shared.events import EventRecorder
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import TwinNamespaces
from vkubelet.node.heartbeat import ProviderHeartbeat
from vkubelet.node.virtual_node import VirtualNode
from vkubelet.pods.reconcile import PodOffloader
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.serviceaccounts import ServiceAccountTokenReflector
from vkubelet.settings import Settings
from vkubelet.shared.loops import LoopContext, LoopFactory, Runnable

log = logging.getLogger("kube_offload.vkubelet")

# Parts of the manager's grace period (kube_offload/runtime/manager.py), as before it.
RECORDER_STOP_SECONDS = 2.0
NODE_STOP_SECONDS = 5.0


class ControllerLoop:
    """A :class:`kube_offload.runtime.controller.Controller`-based reconciler as a
    :class:`~vkubelet.shared.loops.Runnable`."""

    def __init__(self, name: str, owner: TwinNamespaces | PodOffloader) -> None:
        self.name = name
        self._owner = owner

    def informers(self) -> Sequence[Synced]:
        return self._owner.informers()

    def start(self) -> None:
        self._owner.controller.start()

    def stop(self) -> None:
        self._owner.controller.stop()

    def resync_all(self) -> None:
        self._owner.resync_all()


class VirtualKubelet:
    def __init__(
        self,
        settings: Settings,
        local: client.ApiClient,
        remote: client.ApiClient,
        *,
        extra_loops: Sequence[LoopFactory] = (),
        home_api: Callable[[], HomeAPIEndpoint | None] = lambda: None,
    ) -> None:
        """``home_api``: where the remote cluster's offloaded pods reach their home API
        server (the consumer's relay Service there, read by vkubelet/home_api/discovery.py;
        None: not known, the pods keep the provider's address and are told,
        docs/home-api.md). Read at each translation."""
        self.settings = settings
        self.informers = SharedInformers(settings, local, remote)
        self.recorder = EventRecorder(local, host=settings.node_name)
        self.node = VirtualNode(settings, self.informers, recorder=self.recorder)
        self.twins = TwinNamespaces(
            settings, self.informers, self.recorder, labels=self.node.peering_labels, node_labels=self.node.labels
        )
        self.pods = PodOffloader(
            settings, self.informers, self.twins, self.recorder, reachable=self.node.remote_reachable, home_api=home_api
        )
        context = LoopContext(settings, self.informers, self.twins, self.recorder, self.node)
        self.loops: list[Runnable] = [ControllerLoop("twin-namespaces", self.twins), ControllerLoop("pods", self.pods)]
        self.loops += [factory(context) for factory in extra_loops]
        # By-use reflection: a new pod's ShadowPod waits for what it references to be
        # exported (vkubelet/reflection/usage.py); and for its service-account token Secret.
        self.pods.export_gates = [
            loop.export_pending for loop in self.loops
            if (isinstance(loop, Reflector) and loop.pods is not None) or isinstance(loop, ServiceAccountTokenReflector)
        ]
        # Pods follow the node's readiness; on reconnect the fresh lists are asked for
        # before every loop re-checks everything.
        self.node.on_disconnect(self.pods.remote_lost)
        self.node.on_reconnect(self.pods.remote_reconnected)
        self.node.on_reconnect(self._resync_all)
        # The provider's suggested labels take part in cluster selectors.
        self.node.on_labels_changed(self.twins.resync_all)
        self._started: list[Runnable] = []
        self._lock = threading.Lock()

    def declare(self, manager: Manager) -> None:
        """Declare the informers and the loops to ``manager``; all of them need the
        leader Lease (a standby starts nothing: no informer, no node heartbeat, no
        kubelet API serving)."""
        manager.add_informer(self.informers)
        manager.add_loop(Loop(name="node", run=self._run_node, logger=log))
        manager.add_loop(Loop(name="event-recorder", run=self._run_recorder, logger=log))
        if self.settings.provider_heartbeat_period > 0:
            heartbeat = ProviderHeartbeat(Kube(self.informers.remote_client), tenant_namespace=self.settings.tenant_namespace,
                                          holder=self.settings.node_name, period_seconds=self.settings.provider_heartbeat_period)
            manager.add_loop(Loop(name="provider-heartbeat", run=heartbeat.run, logger=log))
        for loop in self.loops:
            manager.add_loop(Loop(name=loop.name, run=serve(self._starter(loop), self._stopper(loop)),
                                  informers=loop.informers(), logger=log))

    def _run_node(self, stop: threading.Event) -> None:
        self.node.start()
        stop.wait()
        self.node.stop()
        self.node.join(NODE_STOP_SECONDS)

    def _run_recorder(self, stop: threading.Event) -> None:
        # Stopped once no loop records any more: what they recorded, written until the deadline.
        stop.wait()
        self.recorder.stop(RECORDER_STOP_SECONDS)

    def _starter(self, loop: Runnable) -> Callable[[], None]:
        def start() -> None:
            with self._lock:
                loop.start()
                self._started.append(loop)

        return start

    def _stopper(self, loop: Runnable) -> Callable[[], None]:
        """Out of the re-check list first, then stopped."""

        def stop() -> None:
            with self._lock:
                self._started.remove(loop)
            loop.stop()

        return stop

    def _resync_all(self) -> None:
        with self._lock:
            started = list(self._started)
        for loop in started:
            loop.resync_all()
