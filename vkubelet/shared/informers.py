"""The informers of one virtual kubelet, shared by every loop that needs them.

Each kind of object is listed and watched once per process however many loops read it:
a loop asks this registry for ``remote_pods()`` and gets the same cache as every other
loop. Loops added later (resource reflection, the kubelet API) ask for their own kinds
through :meth:`SharedInformers.shared` before the runner starts them all.

Remote scope follows the consumer's RBAC on the provider (docs/virtual-kubelet.md):
cluster-wide only its own ``Consumer`` (field-selected by name) and PriorityClasses; in
its tenant namespace its ``TwinNamespace`` requests; everything else (pods, ShadowPods,
Events, reflected kinds) through :meth:`SharedInformers.remote_in_twins`, one
namespace-scoped list+watch per usable twin namespace.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Protocol, TYPE_CHECKING, TypeVar, cast

from kubernetes import client

from kube_offload import constants as c
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import (
    CONSUMERS, NAMESPACES, NODES, OFFLOAD_SLICES, PODS, PRIORITY_CLASSES, SHADOWPODS, TWIN_NAMESPACES,
)
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.namespaced_informer import ListForNamespace, MultiNamespaceInformer
from vkubelet.shared import trim
from vkubelet.shared import twin_requests as tr

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

LOCAL = "local"
REMOTE = "remote"


class CacheLike(Protocol):
    """What the registry and the runner need of a cache: an :class:`Informer`, a
    :class:`MultiNamespaceInformer`, or an object standing for a set of them."""

    name: str

    @property
    def last_contact(self) -> float: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def has_synced(self) -> bool: ...


C = TypeVar("C", bound=CacheLike)


class SharedInformers:
    def __init__(self, settings: Settings, local: client.ApiClient, remote: client.ApiClient) -> None:
        self.settings = settings
        self.local_client = local
        self.remote_client = remote
        self._informers: dict[str, CacheLike] = {}
        # Usable twin namespaces on the provider, and the informers scoped to them.
        self._twin_namespaces: set[str] = set()
        self._twin_scoped: list[MultiNamespaceInformer] = []
        self._lock = threading.RLock()  # factories may register what they depend on
        self._started = False

    # --- registry ------------------------------------------------------------------------
    def shared(self, name: str, factory: Callable[[], C]) -> C:
        """The informer registered as ``name``, created by ``factory`` the first time.
        Names start with ``local-`` or ``remote-`` to say which API server they watch."""
        with self._lock:
            informer = self._informers.get(name)
            if informer is None:
                informer = factory()
                self._informers[name] = informer
                if self._started:
                    informer.start()
            # One name, one factory: what is registered under a name is what its factory makes.
            return cast(C, informer)

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.start()

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

    def wait_for_sync(self, informers: list[CacheLike], stop: threading.Event, poll: float = 0.2) -> bool:
        """Block until every informer listed once (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if all(informer.has_synced() for informer in informers):
                return True
            stop.wait(poll)
        return False

    def remote_last_contact(self) -> float:
        """Monotonic time of the last answer any remote informer got (0: never)."""
        with self._lock:
            remote = [inf for name, inf in self._informers.items() if name.startswith(REMOTE)]
        return max((inf.last_contact for inf in remote), default=0.0)

    def _new(self, name: str, list_func: Callable[..., Any], transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None, **list_kwargs: Any) -> Informer:
        return Informer(
            name=name,
            list_func=list_func,
            list_kwargs=list_kwargs,
            resync_seconds=self.settings.resync_period,
            transform=transform,
        )

    # --- the kinds the core loops use ----------------------------------------------------------
    def local_node(self) -> Informer:
        """Our own Node only (to notice it being deleted or edited)."""
        list_nodes = Kube(self.local_client).list_func(NODES)
        selector = f"metadata.name={self.settings.node_name}"
        return self.shared("local-node", lambda: self._new("local-node", list_nodes, field_selector=selector))

    def local_pods(self) -> Informer:
        """Local pods bound to the virtual node, in every namespace; kept whole (the
        translation reads nearly all of them: vkubelet/shared/trim.py)."""
        list_pods = Kube(self.local_client).list_func(PODS)
        selector = f"spec.nodeName={self.settings.node_name}"
        return self.shared(
            "local-pods",
            lambda: self._new("local-pods", list_pods, trim.keep_whole, field_selector=selector),
        )

    def local_namespaces(self) -> Informer:
        list_namespaces = Kube(self.local_client).list_func(NAMESPACES)
        return self.shared("local-namespaces", lambda: self._new("local-namespaces", list_namespaces))

    # --- remote: cluster-wide, only what the consumer's RBAC grants ----------------------------
    def remote_consumer(self) -> Informer:
        """Our own ``Consumer`` on the provider (its terms: quota, suggested node labels;
        its status: the capacity summary). RBAC grants get/list/watch on that one name,
        and a list is authorized by name only through the metadata.name field selector."""
        list_consumers = Kube(self.remote_client).list_func(CONSUMERS)
        selector = f"metadata.name={self.settings.local_cluster_id}"
        return self.shared("remote-consumer", lambda: self._new("remote-consumer", list_consumers, field_selector=selector))

    def remote_priority_classes(self) -> Informer:
        list_classes = Kube(self.remote_client).list_func(PRIORITY_CLASSES)
        # Only their names are read (which priorityClassName a remote pod may keep).
        return self.shared(
            "remote-priorityclasses",
            lambda: self._new("remote-priorityclasses", list_classes, trim.trim_to_identity),
        )

    # --- remote: the tenant namespace ----------------------------------------------------------
    def remote_twin_requests(self) -> Informer:
        """Our TwinNamespace requests, in our tenant namespace (the only place we may
        write them). Which of them are Ready decides where the twin-scoped informers
        below watch (:meth:`set_twin_namespaces`, called by vkubelet/twins/namespaces.py)."""
        tenant = self.settings.tenant_namespace
        selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={self.settings.local_cluster_id}"
        list_requests = Kube(self.remote_client).list_func(TWIN_NAMESPACES, namespace=tenant)

        def make() -> Informer:
            informer = self._new("remote-twinnamespaces", list_requests, label_selector=selector)
            # The first handler: the twin-scoped informers follow the Ready set before any
            # controller hears of the change (and, on the first list, before the informer
            # says it synced, which is what their sync gate waits for).
            informer.add_handler(
                lambda _kind, _old, _new: self.set_twin_namespaces(
                    tr.usable_twins(informer.list(), self.settings.local_cluster_id)
                )
            )
            return informer

        return self.shared("remote-twinnamespaces", make)

    # --- remote: inside the twin namespaces ------------------------------------------------------
    def set_twin_namespaces(self, namespaces: Iterable[str]) -> None:
        """The provider namespaces every twin-scoped informer watches from now on."""
        wanted = set(namespaces)
        with self._lock:
            if wanted == self._twin_namespaces:
                return
            self._twin_namespaces = wanted
            scoped = list(self._twin_scoped)
        for informer in scoped:
            informer.set_namespaces(wanted)

    def twin_namespaces(self) -> set[str]:
        with self._lock:
            return set(self._twin_namespaces)

    def remote_in_twins(
        self,
        name: str,
        list_for_namespace: ListForNamespace,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **list_kwargs: Any,
    ) -> MultiNamespaceInformer:
        """The process-wide informer registered as ``name`` (``remote-...``): one
        namespace-scoped list+watch per usable twin namespace, the only place the
        consumer's RBAC lets it read. It reports synced only once the twin requests have
        been listed (so the namespace set is known) and every twin has been listed.
        ``transform`` says what its cache keeps of each object (vkubelet/shared/trim.py)."""
        requests = self.remote_twin_requests()

        def make() -> MultiNamespaceInformer:
            informer = MultiNamespaceInformer(
                name=name,
                list_for_namespace=list_for_namespace,
                list_kwargs=list_kwargs,
                resync_seconds=self.settings.resync_period,
                sync_gate=requests.has_synced,
                transform=transform,
            )
            with self._lock:
                self._twin_scoped.append(informer)
                current = set(self._twin_namespaces)
            informer.set_namespaces(current)
            return informer

        return self.shared(name, make)

    def remote_pods(self) -> MultiNamespaceInformer:
        """Our remote pods (origin label), in the twin namespaces; trimmed to what the
        loops read (vkubelet/shared/trim.py)."""
        kube = Kube(self.remote_client)
        return self.remote_in_twins(
            "remote-pods",
            lambda ns: kube.list_func(PODS, namespace=ns),
            trim.trim_remote_pod,
            label_selector=self._ours(),
        )

    def remote_shadowpods(self) -> MultiNamespaceInformer:
        kube = Kube(self.remote_client)

        def list_for(ns: str) -> Callable[..., Any]:
            return kube.list_func(SHADOWPODS, namespace=ns)

        return self.remote_in_twins("remote-shadowpods", list_for, trim.trim_shadowpod, label_selector=self._ours())

    def _ours(self) -> str:
        """Our pods and ShadowPods: the origin label, and the node's slice. Each virtual
        node of a peering (the peering's own and one per slice, each its own process:
        docs/slices.md) sees only the ones it sent, so none takes another's for an orphan."""
        origin = f"{c.LABEL_ORIGIN_CLUSTER_ID}={self.settings.local_cluster_id}"
        if self.settings.slice is not None:
            return f"{origin},{c.LABEL_SLICE}={self.settings.slice.name}"
        return f"{origin},!{c.LABEL_SLICE}"

    def remote_slice(self) -> Informer:
        """Our OffloadSlice (slice mode), in our tenant namespace, field-selected by name:
        the provider's answer sizes the node."""
        assert self.settings.slice is not None, "remote_slice() is for a slice's vkubelet"
        tenant = self.settings.tenant_namespace
        list_slices = Kube(self.remote_client).list_func(OFFLOAD_SLICES, namespace=tenant)
        selector = f"metadata.name={self.settings.slice.name}"
        return self.shared("remote-offloadslice", lambda: self._new("remote-offloadslice", list_slices, field_selector=selector))
