"""What a loop of the virtual kubelet is given, and what it gives back: the extension point
of the wiring (vkubelet/runner.py).

Resource reflection (``vkubelet/reflection/``), the virtual storage class
(``vkubelet/storage/``), the kubelet API (``vkubelet/kubeletapi/loop.py``) and the home
API access (``vkubelet/home_api/loop.py``) each plug in as a :data:`LoopFactory`: it
receives the :class:`LoopContext` (settings, shared informers, the twin-namespace rule,
the Event recorder, the node), registers the informers it needs there, and returns a
:class:`Runnable`. The runner declares each to the process manager as a
:class:`kube_offload.runtime.manager.Loop`, which starts it once those informers have
listed and stops it on shutdown, and re-checks every started one when the remote cluster
answers again.

Here, and not in the runner, so that a loop never imports what wires it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from kube_offload.runtime.manager import Synced
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers

if TYPE_CHECKING:
    # The process's settings compose every loop's own (vkubelet/settings.py); the twin
    # rule and the node are loops of their own. A loop is handed them, never imports them.
    from vkubelet.node.virtual_node import VirtualNode
    from vkubelet.settings import Settings
    from vkubelet.twins.namespaces import TwinNamespaces


class Runnable(Protocol):
    """One unit of work of the virtual kubelet (a controller, a server...), as a factory
    returns it."""

    name: str

    def informers(self) -> Sequence[Synced]:
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


LoopFactory = Callable[[LoopContext], Runnable]
