"""The local side of reflection watches only the namespaces offloaded to this cluster.

A virtual kubelet has no business caching every Secret of its cluster: it reads the
reflected kinds (ConfigMaps, Secrets, Services, EndpointSlices, Ingresses, PVCs) of the
namespaces offloaded to its remote cluster (any placement: ``Local`` extends the namespace
without its pods, service offloading), and nothing else. Each local
informer of those kinds is a :class:`~kube_offload.runtime.namespaced_informer.MultiNamespaceInformer`
whose namespace set follows the twin-namespace rule (``TwinNamespaces.plan``): a namespace
that opts in gets a namespace-scoped list+watch per kind at once, one that opts out (or
whose cluster selector stops matching, or that is deleted) has them stopped, and the
objects they held are delivered as deletions (so remote copies of them go too).

One :class:`OffloadedNamespaces` per process, registered in the shared informer registry
so every reflector of every kind shares it and its informers: ask for it with
:func:`offloaded_namespaces`, and for a scoped informer with :meth:`local_informer`.
Its ``has_synced`` holds reflection back until the namespaces have been listed, the
scope applied and every scoped namespace listed: a reflector deciding "the local object
is gone" from a cache that never listed it would delete a remote copy a pod still uses.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer

if TYPE_CHECKING:
    from vkubelet.shared.informers import SharedInformers
    from vkubelet.twins.namespaces import TwinNamespaces

REGISTRY_NAME = "local-offloaded-namespaces"

log = logging.getLogger("kube_offload.vkubelet.reflection.scope")


class OffloadedNamespaces:
    """The offloaded-namespace set, applied to every local reflection informer."""

    def __init__(self, informers: "SharedInformers", twins: "TwinNamespaces") -> None:
        self._informers = informers
        self._twins = twins
        self._namespaces_informer = twins.local_namespaces
        self._lock = threading.RLock()
        self._current: set[str] = set()
        self._scoped: dict[str, MultiNamespaceInformer] = {}
        self._namespaces_informer.add_handler(self._on_namespace)
        # A namespace's plan also depends on the virtual node's labels (cluster
        # selectors), which follow the provider's suggestions in our Consumer object;
        # and the twin requests change when plans do. Either event: look at all again.
        twins.consumer.add_handler(self._on_consumer)
        twins.requests.add_handler(lambda _event, _old, _new: self.refresh())
        # Made after the namespaces were listed (a loop added late): take what the
        # cache already holds, since its ADDED events are past.
        with self._lock:
            self._current.update(name for name in self._namespaces_informer.keys() if self.is_offloaded(name))

    # --- what the shared registry calls (it treats us like an informer) --------------------------
    name = REGISTRY_NAME
    last_contact = 0.0

    def start(self) -> None:
        # Informers are started by the registry; nothing of our own runs.
        return

    def stop(self) -> None:
        return

    def has_synced(self) -> bool:
        """Namespaces listed (so the set is complete) and every scoped informer has
        listed every namespace of it."""
        if not self._namespaces_informer.has_synced():
            return False
        with self._lock:
            scoped = list(self._scoped.values())
        return all(informer.has_synced() for informer in scoped)

    # --- the set -------------------------------------------------------------------------------
    def namespaces(self) -> set[str]:
        with self._lock:
            return set(self._current)

    def is_offloaded(self, namespace: str) -> bool:
        return self._twins.plan(namespace).twin is not None

    def _on_namespace(self, _event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        # Called on the namespaces informer's thread, after its cache took the change:
        # plan() reads the new state (None once deleted). Starting or stopping a watch
        # is a thread start or a socket shutdown: cheap enough for a handler.
        name = ((new or old or {}).get("metadata") or {}).get("name")
        if not name:
            return
        wanted = self.is_offloaded(name)
        with self._lock:
            if wanted == (name in self._current):
                return
            if wanted:
                self._current.add(name)
            else:
                self._current.discard(name)
            log.info("namespace %s %s the reflection scope", name, "joins" if wanted else "leaves")
            # Under the lock, so that a scoped informer created meanwhile cannot apply
            # an older set after this one.
            for informer in self._scoped.values():
                informer.set_namespaces(self._current)

    def _on_consumer(self, _event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        # Its status changes every few seconds (usage, capacity); only its suggested
        # labels can change a plan.
        if old is None or (old.get("spec") or {}).get("nodeLabels") != (new.get("spec") or {}).get("nodeLabels"):
            self.refresh()

    def refresh(self) -> None:
        """Recompute the whole set from the namespaces cache; apply it if it changed."""
        fresh = {name for name in self._namespaces_informer.keys() if self.is_offloaded(name)}
        with self._lock:
            if fresh == self._current:
                return
            for name in sorted(fresh ^ self._current):
                log.info("namespace %s %s the reflection scope", name, "joins" if name in fresh else "leaves")
            self._current = fresh
            for informer in self._scoped.values():
                informer.set_namespaces(self._current)

    # --- scoped informers ------------------------------------------------------------------------
    def local_informer(self, resource: str, kind: Resource) -> MultiNamespaceInformer:
        """The process-wide local informer of ``resource`` (its ``kind`` in the API) in
        the offloaded namespaces."""
        name = f"local-{resource}"
        kube = Kube(self._informers.local_client)

        def make() -> MultiNamespaceInformer:
            informer = MultiNamespaceInformer(
                name=name,
                list_for_namespace=lambda namespace: kube.list_func(kind, namespace=namespace),
                resync_seconds=self._informers.settings.resync_period,
            )
            with self._lock:
                self._scoped[name] = informer
                informer.set_namespaces(self._current)
            return informer

        return self._informers.shared(name, make)


def offloaded_namespaces(informers: "SharedInformers", twins: "TwinNamespaces") -> OffloadedNamespaces:
    """The process's one :class:`OffloadedNamespaces` (created on first use)."""
    return informers.shared(REGISTRY_NAME, lambda: OffloadedNamespaces(informers, twins))
