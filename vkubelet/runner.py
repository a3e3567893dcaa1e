"""Wires one virtual kubelet together and runs it until told to stop.

Start order matters for restart safety: informers first; the virtual node (and its
lease) at once, since it needs no complete cache and the local control plane expects a
heartbeat; each controller only once every cache it reads has listed, so that no
decision (above all "this ShadowPod is an orphan") is taken from half a picture.

Extension point: other loops - resource reflection (``vkubelet/reflection/``), the
kubelet API (``vkubelet/kubelet_api.py``) - plug in as :class:`Loop` factories passed to
:class:`VirtualKubelet`. A factory receives the :class:`LoopContext` (settings, shared
informers, the twin-namespace rule, the Event recorder, the node), registers the
informers it needs there, and returns a loop the runner starts after those informers
have synced and stops on shutdown.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from kubernetes import client

from kube_offload.runtime.informer import Informer
from vkubelet.events import EventRecorder
from vkubelet.informers import SharedInformers
from vkubelet.namespaces import TwinNamespaces
from vkubelet.node import VirtualNode
from vkubelet.pods import PodOffloader
from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet")


class Loop(Protocol):
    """One unit of work of the virtual kubelet (a controller, a server...)."""

    name: str

    def informers(self) -> list[Informer]:
        """The caches that must have listed before :meth:`start`."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def resync_all(self) -> None:
        """Re-check everything (called when the remote cluster is reachable again)."""
        ...


@dataclass
class LoopContext:
    settings: Settings
    informers: SharedInformers
    twins: TwinNamespaces
    recorder: EventRecorder
    node: VirtualNode


LoopFactory = Callable[[LoopContext], Loop]


class ControllerLoop:
    """A :class:`kube_offload.runtime.controller.Controller`-based reconciler as a :class:`Loop`."""

    def __init__(self, name: str, owner: TwinNamespaces | PodOffloader) -> None:
        self.name = name
        self._owner = owner

    def informers(self) -> list[Informer]:
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
    ) -> None:
        self.settings = settings
        self.informers = SharedInformers(settings, local, remote)
        self.recorder = EventRecorder(local, host=settings.node_name)
        self.node = VirtualNode(settings, self.informers)
        self.twins = TwinNamespaces(settings, self.informers, self.recorder, labels=self.node.labels)
        self.pods = PodOffloader(settings, self.informers, self.twins, self.recorder, reachable=self.node.remote_reachable)
        context = LoopContext(settings, self.informers, self.twins, self.recorder, self.node)
        self.loops: list[Loop] = [ControllerLoop("twin-namespaces", self.twins), ControllerLoop("pods", self.pods)]
        self.loops += [factory(context) for factory in extra_loops]
        # Pods follow the node's readiness; on reconnect the fresh lists are asked for
        # before every loop re-checks everything.
        self.node.on_disconnect(self.pods.remote_lost)
        self.node.on_reconnect(self.pods.remote_reconnected)
        self.node.on_reconnect(self._resync_all)
        # The provider's suggested labels take part in cluster selectors.
        self.node.on_labels_changed(self.twins.resync_all)
        self._stop = threading.Event()
        self._starters: list[threading.Thread] = []
        self._started: list[Loop] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self.informers.start()
        self.node.start()
        for loop in self.loops:
            thread = threading.Thread(target=self._start_when_synced, args=(loop,), name=f"start-{loop.name}", daemon=True)
            thread.start()
            self._starters.append(thread)

    def _start_when_synced(self, loop: Loop) -> None:
        log.info("%s: waiting for caches", loop.name)
        if not self.informers.wait_for_sync(loop.informers(), self._stop):
            return
        with self._lock:
            if self._stop.is_set():
                return
            loop.start()
            self._started.append(loop)
        log.info("%s: started", loop.name)

    def _resync_all(self) -> None:
        with self._lock:
            started = list(self._started)
        for loop in started:
            loop.resync_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop everything; the Node and every remote object stay (restart-safe)."""
        self._stop.set()
        with self._lock:
            started = list(self._started)
        for loop in started:
            try:
                loop.stop()
            except Exception:
                log.exception("%s: stop failed", loop.name)
        # Once no loop records any more: what they recorded, written until the deadline.
        self.recorder.stop(min(timeout, 2.0))
        self.node.stop()
        # Informer.stop closes each watch's response; with an SSL socket that another
        # thread is blocked reading, close() can wait until the server sends something
        # (up to the watch timeout). Informer threads are daemons: do not let a shutdown
        # hang on them.
        stopper = threading.Thread(target=self.informers.stop, name="stop-informers", daemon=True)
        stopper.start()
        stopper.join(min(timeout, 2.0))
        self.node.join(timeout)
