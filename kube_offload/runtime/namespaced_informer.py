"""One kind of object, watched in a changing set of namespaces (a "multi-namespace informer").

A least-privilege identity may read a kind only in some namespaces (a consumer in its twin
namespaces on a provider; the virtual kubelet in the offloaded namespaces of its own
cluster), so a cluster-wide list+watch is forbidden, and would cache far more than it
needs anyway. This keeps one :class:`~kube_offload.runtime.informer.Informer` per namespace and
offers the same read interface over all of them: ``get("ns/name")``, ``list()``,
``keys()``, ``add_handler``, ``has_synced``, ``last_contact``, ``start``/``stop``, and the
indexes (``indexers``, ``add_indexer``, ``by_index``, ``index_keys``, ``index_values``);
each namespace's informer pages its lists, resumes its watch, resyncs on its own timer and
keeps its share of every index, updated before the change reaches any handler here.
Controllers written against one cluster-wide informer work unchanged.

:meth:`MultiNamespaceInformer.set_namespaces` says which namespaces to watch; a new one
gets its own list+watch at once (when started), one that goes away is stopped and every
object it held is delivered as a DELETED event, so level-triggered controllers converge
(an index drops its entries, a controller re-reads the key and finds nothing).

A namespace whose list is answered 403 (the identity's grant there revoked, or never
given) counts as *synced, empty and forbidden*: it must not keep every other namespace's
controllers from starting. Its informer keeps retrying with backoff, and
:meth:`MultiNamespaceInformer.forbidden_namespaces` names it, because its cache proves
nothing: a controller must never act on an object's *absence* there (delete a local copy,
fail or end a pod, "recreate" what it cannot see). Once a list is accepted again its
objects arrive as ADDED events, as for a namespace just added.

Handlers are called in registration order for every event of every namespace, one event
at a time (one dispatch lock): handlers only enqueue keys, so serialising them costs
nothing and keeps "a namespace's DELETED burst" and "a late event of that namespace's
stopped watch" from interleaving.
"""

from __future__ import annotations

import builtins
import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from kube_offload.runtime.cache import poll_synced
from kube_offload.runtime.indexer import IndexFunc
from kube_offload.runtime.informer import DELETED, Handler, Informer
from kube_offload.runtime.kube import split_key

log = logging.getLogger("kube_offload.runtime.informer")

# namespace -> the list function of that namespace (called with list/watch kwargs), e.g.
# ``lambda ns: functools.partial(core.list_namespaced_pod, ns)``.
ListForNamespace = Callable[[str], Callable[..., Any]]


def namespace_changes(current: Iterable[str], wanted: Iterable[str]) -> tuple[list[str], list[str]]:
    """(namespaces to start watching, namespaces to stop watching), each sorted."""
    before, after = set(current), {ns for ns in wanted if ns}
    return sorted(after - before), sorted(before - after)


class MultiNamespaceInformer:
    def __init__(
        self,
        *,
        name: str,
        list_for_namespace: ListForNamespace,
        list_kwargs: dict[str, Any] | None = None,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 240,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        sync_gate: Callable[[], bool] | None = None,
        page_size: int | None = None,
        keep_managed_fields: bool = False,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        self.name = name
        self._page_size = page_size
        self._keep_managed_fields = keep_managed_fields
        # When the namespace set comes from another cache, "synced" must wait for that
        # cache too: an empty set is complete only once its source has listed.
        self._sync_gate = sync_gate
        self._list_for_namespace = list_for_namespace
        self._list_kwargs = dict(list_kwargs or {})
        self._resync_seconds = resync_seconds
        self._watch_timeout = watch_timeout_seconds
        self._transform = transform
        self._lock = threading.RLock()  # guards _children and the flags below
        self._dispatch_lock = threading.RLock()  # one event at a time to the handlers
        self._children: dict[str, Informer] = {}
        self._handlers: list[Handler] = []
        # Every namespace's informer gets these (those added later included).
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._started = False
        self._stopped = False
        # A namespace's last contact outlives its informer: readiness must not drop
        # because the last twin namespace went away.
        self._retired_contact = 0.0

    # --- the Informer read interface ---------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, key: str) -> dict[str, Any] | None:
        namespace, _ = split_key(key)
        with self._lock:
            child = self._children.get(namespace or "")
        return child.get(key) if child is not None else None

    def list(self) -> builtins.list[dict[str, Any]]:
        with self._lock:
            children = list(self._children.values())
        return [obj for child in children for obj in child.list()]

    def apply(self, kind: str, obj: dict[str, Any], *, partition: str | None = None) -> None:
        """:meth:`Informer.apply` on the informer of ``obj``'s namespace (or of ``partition``,
        for an informer whose partitions are not namespaces), as its watch would; an object
        of a namespace not watched is dropped, as no watch would see it."""
        if partition is None:
            partition = (obj.get("metadata") or {}).get("namespace") or ""
        with self._lock:
            child = self._children.get(partition)
        if child is not None:
            child.apply(kind, obj)

    def keys(self) -> builtins.list[str]:
        with self._lock:
            children = list(self._children.values())
        return [key for child in children for key in child.keys()]

    # --- indexes (kube_offload/runtime/indexer.py): each namespace's share, merged --------------
    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Register index ``name`` on every namespace's informer, now and to come
        (:meth:`Informer.add_indexer`: the same name with an equal function is a no-op)."""
        with self._lock:
            existing = self._indexers.get(name)
            if existing is not None and existing != func:
                raise ValueError(f"an index named {name!r} is already registered with another function")
            self._indexers[name] = func
            children = list(self._children.values())
        for child in children:
            child.add_indexer(name, func)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        return [obj for child in self._indexed(name) for obj in child.by_index(name, value)]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        return [key for child in self._indexed(name) for key in child.index_keys(name, value)]

    def index_values(self, name: str) -> builtins.list[str]:
        return sorted({value for child in self._indexed(name) for value in child.index_values(name)})

    def _indexed(self, name: str) -> builtins.list[Informer]:
        with self._lock:
            if name not in self._indexers:
                known = ", ".join(sorted(self._indexers)) or "none"
                raise KeyError(f"no index named {name!r} on informer {self.name} (registered: {known})")
            return [self._children[ns] for ns in sorted(self._children)]

    def has_synced(self) -> bool:
        """Started, the namespace set known (``sync_gate``), and every watched namespace
        listed at least once or answered 403 (:meth:`forbidden_namespaces`; True with no
        namespace at all: an empty set is complete)."""
        if self._sync_gate is not None and not self._sync_gate():
            return False
        with self._lock:
            return self._started and all(child.has_synced() or child.forbidden for child in self._children.values())

    def wait_for_sync(self, timeout: float, poll: float = 0.1) -> bool:
        return poll_synced(self.has_synced, timeout, poll)

    @property
    def last_contact(self) -> float:
        with self._lock:
            return max([self._retired_contact, *(child.last_contact for child in self._children.values())])

    # --- the namespace set -----------------------------------------------------------------------
    def namespaces(self) -> builtins.list[str]:
        with self._lock:
            return sorted(self._children)

    def namespace_synced(self, namespace: str) -> bool:
        """Listed at least once, and readable now: a forbidden namespace's cache is not the
        server's truth (its objects may exist; they may have changed)."""
        with self._lock:
            child = self._children.get(namespace)
        return child is not None and child.has_synced() and not child.forbidden

    def forbidden_namespaces(self) -> builtins.list[str]:
        """The watched namespaces whose last list or watch was answered 403 (and none
        accepted since): empty or stale caches, on which no absence may be acted upon."""
        with self._lock:
            return sorted(ns for ns, child in self._children.items() if child.forbidden)

    def forbidden_reason(self, namespace: str) -> str:
        """The server's words for the 403 in ``namespace`` ("" when not forbidden)."""
        with self._lock:
            child = self._children.get(namespace)
        return child.forbidden_message if child is not None and child.forbidden else ""

    def relist(self) -> None:
        """Every namespace lists again now (:meth:`Informer.relist`)."""
        with self._lock:
            children = list(self._children.values())
        for child in children:
            child.relist()

    def replace(self, namespace: str, items: builtins.list[dict[str, Any]]) -> None:
        """:meth:`Informer.replace` on the informer of ``namespace``, as its list would; a
        namespace not watched is ignored, as no list would reach it."""
        with self._lock:
            child = self._children.get(namespace)
        if child is not None:
            child.replace(items)

    def listed_since(self, namespace: str, since: float) -> bool:
        """Whether ``namespace`` was listed completely at or after monotonic time ``since``."""
        with self._lock:
            child = self._children.get(namespace)
        return child is not None and child.last_listed >= since

    def set_namespaces(self, namespaces: Iterable[str]) -> None:
        """Watch exactly ``namespaces`` from now on (idempotent; cheap when unchanged)."""
        wanted = list(namespaces)
        with self._dispatch_lock:
            with self._lock:
                if self._stopped:
                    return
                added, removed = namespace_changes(self._children, wanted)
                gone = [(ns, self._children.pop(ns)) for ns in removed]
                fresh = []
                for ns in added:
                    child = self._new_child(ns)
                    self._children[ns] = child
                    fresh.append(child)
                start = self._started
            for ns, child in gone:
                child.stop()
                self._retired_contact = max(self._retired_contact, child.last_contact)
                objects = child.list()
                log.info("%s: stopped watching namespace %s (%d objects dropped)", self.name, ns, len(objects))
                for obj in objects:
                    self._dispatch(DELETED, obj, obj)
            if start:
                for child in fresh:
                    child.start()
            for child in fresh:
                log.info("%s: watching namespace %s", self.name, child.name.rsplit("@", 1)[-1])

    def start(self) -> None:
        with self._lock:
            if self._started or self._stopped:
                return
            self._started = True
            children = list(self._children.values())
        for child in children:
            child.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            children = list(self._children.values())
        for child in children:
            child.stop()

    # --- internals -----------------------------------------------------------------------------
    def _new_child(self, namespace: str) -> Informer:
        child = Informer(
            name=f"{self.name}@{namespace}",
            list_func=self._list_for_namespace(namespace),
            list_kwargs=self._list_kwargs,
            resync_seconds=self._resync_seconds,
            watch_timeout_seconds=self._watch_timeout,
            transform=self._transform,
            page_size=self._page_size,
            keep_managed_fields=self._keep_managed_fields,
            indexers=self._indexers,
        )
        child.add_handler(lambda kind, old, new: self._forward(namespace, child, kind, old, new))
        return child

    def _forward(self, namespace: str, child: Informer, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        with self._dispatch_lock:
            with self._lock:
                current = self._children.get(namespace) is child
            if current:  # a stopped watch's last events must not resurrect dropped objects
                self._dispatch(kind, old, new)

    def _dispatch(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        for handler in self._handlers:
            try:
                handler(kind, old, new)
            except Exception:  # one broken handler must not stop the others
                log.exception("%s: handler failed for %s", self.name, kind)
