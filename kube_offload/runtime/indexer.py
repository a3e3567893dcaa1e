"""The store of an informer, with named secondary indexes (client-go's ``cache.Indexer``).

An index function maps an object to the values it is found under (``[]`` or None: not
indexed), e.g. "pods by the ShadowPod that controls them" or "remote objects by the local
pod they stand for". The store keeps every index in step with its objects on each change,
so a reader asks ``by_index("by-owner", "ns/web")`` instead of scanning the whole cache
(which a resync of N keys would turn into N^2 work) or keeping a hand-written index in an
event handler of its own, which is only current if it happens to run before the handler
that enqueues the key.

Not thread-safe by itself: the :class:`~kube_offload.runtime.informer.Informer` holds its
lock around every call, and changes the store (and so its indexes) before any handler
hears of the change. Tests use it directly as a cache that needs no API server.
"""

from __future__ import annotations

import builtins
import logging
from typing import Any, Callable, Iterable, Mapping

from kube_offload.runtime.kube import object_key

# obj -> the index values it is found under (a single str is one value; None: none).
IndexFunc = Callable[[dict[str, Any]], "Iterable[str] | str | None"]
# obj -> (the group it counts in, or None: not counted; the amounts it adds there).
TallyFunc = Callable[[dict[str, Any]], "tuple[str | None, Mapping[str, int]]"]

log = logging.getLogger("kube_offload.runtime.informer")


class Indexer:
    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, dict[str, Any]] = {}
        self._funcs: dict[str, IndexFunc] = {}
        # index name -> value -> keys of the objects found under it
        self._indices: dict[str, dict[str, set[str]]] = {}
        # index name -> key -> the values that object is found under (to undo them)
        self._values_of: dict[str, dict[str, tuple[str, ...]]] = {}
        for name, func in (indexers or {}).items():
            self.add_indexer(name, func)
        # tally name -> function; -> group -> amount name -> sum; -> key -> what that object added
        self._tally_funcs: dict[str, TallyFunc] = {}
        self._tallies: dict[str, dict[str, dict[str, int]]] = {}
        self._tallied: dict[str, dict[str, tuple[str, tuple[tuple[str, int], ...]]]] = {}

    # --- indexes ---------------------------------------------------------------------------
    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Register index ``name`` and index every object already stored. Registering the
        same name with an equal function again is a no-op (two loops sharing one informer
        may both ask for it); a different function under a taken name is a bug."""
        existing = self._funcs.get(name)
        if existing is not None:
            if existing == func:
                return
            raise ValueError(f"an index named {name!r} is already registered with another function")
        self._funcs[name] = func
        self._indices[name] = {}
        self._values_of[name] = {}
        for key, obj in self._items.items():
            self._index_one(name, key, obj)

    def indexer_names(self) -> list[str]:
        return sorted(self._funcs)

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        """The stored objects found under ``value`` in index ``name``, by key order."""
        return [self._items[key] for key in self.index_keys(name, value)]

    def index_keys(self, name: str, value: str) -> list[str]:
        """The keys of the objects found under ``value`` in index ``name``, sorted."""
        return sorted(self._index(name).get(value, ()))

    def index_key_set(self, name: str, value: str) -> frozenset[str]:
        """The keys found under ``value`` in index ``name``, unsorted: a copy of the index's
        own set (made in C), for a count or a membership test where sorting and reading
        every object (:meth:`by_index`) would be O(n) in Python."""
        return frozenset(self._index(name).get(value, ()))

    def index_values(self, name: str) -> list[str]:
        """Every value of index ``name`` that at least one stored object is found under."""
        return sorted(self._index(name))

    def _index(self, name: str) -> dict[str, set[str]]:
        try:
            return self._indices[name]
        except KeyError:
            known = ", ".join(sorted(self._funcs)) or "none"
            raise KeyError(f"no index named {name!r} on this informer (registered: {known})") from None

    # --- tallies ---------------------------------------------------------------------------
    def add_tally(self, name: str, func: TallyFunc) -> None:
        """Register tally ``name``: per group, the running sums of the amounts ``func``
        gives each stored object (e.g. the requests of the live ShadowPods per namespace).
        Kept in step with the store like an index, so a reader gets a sum that matches the
        cache at that instant in O(amounts), not O(objects): what a quota check made on
        every admission needs once thousands of objects are cached."""
        if name in self._tally_funcs:
            if self._tally_funcs[name] == func:
                return
            raise ValueError(f"a tally named {name!r} is already registered with another function")
        self._tally_funcs[name] = func
        self._tallies[name] = {}
        self._tallied[name] = {}
        for key, obj in self._items.items():
            self._tally_one(name, key, obj)

    def tally(self, name: str, group: str) -> dict[str, int]:
        """The sums of tally ``name`` in ``group`` (a new dict; empty when nothing counts there)."""
        try:
            sums = self._tallies[name]
        except KeyError:
            raise KeyError(f"no tally named {name!r} on this informer") from None
        return dict(sums.get(group, {}))

    def _tally_one(self, name: str, key: str, obj: dict[str, Any]) -> None:
        try:
            group, amounts = self._tally_funcs[name](obj)
        except Exception:  # as for an index: one odd object is not counted, the cache goes on
            log.exception("tally %s failed for %s; the object is not counted", name, key)
            return
        if group is None:
            return
        added = tuple((amount, int(value)) for amount, value in amounts.items())
        self._tallied[name][key] = (group, added)
        sums = self._tallies[name].setdefault(group, {})
        for amount, value in added:
            sums[amount] = sums.get(amount, 0) + value

    def _untally_one(self, name: str, key: str) -> None:
        entry = self._tallied[name].pop(key, None)
        if entry is None:
            return
        group, added = entry
        sums = self._tallies[name][group]
        for amount, value in added:
            sums[amount] -= value
            if not sums[amount]:
                del sums[amount]
        if not sums:
            del self._tallies[name][group]

    # --- the store -------------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        return self._items.get(key)

    def list(self) -> builtins.list[dict[str, Any]]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items.keys())

    def __len__(self) -> int:
        return len(self._items)

    def put(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store ``obj`` under its key (indexes updated); returns the object it replaced."""
        key = object_key(obj)
        old = self._items.get(key)
        self._items[key] = obj
        for name in self._funcs:
            self._unindex_one(name, key)
            self._index_one(name, key, obj)
        for name in self._tally_funcs:
            self._untally_one(name, key)
            self._tally_one(name, key, obj)
        return old

    def pop(self, key: str) -> dict[str, Any] | None:
        """Remove the object stored under ``key`` (indexes updated); returns it, or None."""
        old = self._items.pop(key, None)
        if old is not None:
            for name in self._funcs:
                self._unindex_one(name, key)
            for name in self._tally_funcs:
                self._untally_one(name, key)
        return old

    def replace(self, objects: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Hold exactly ``objects`` (key -> object) from now on, every index rebuilt (a
        fresh list); returns what was held before."""
        previous = self._items
        self._items = dict(objects)
        for name in self._funcs:
            self._indices[name] = {}
            self._values_of[name] = {}
            for key, obj in self._items.items():
                self._index_one(name, key, obj)
        for name in self._tally_funcs:
            self._tallies[name] = {}
            self._tallied[name] = {}
            for key, obj in self._items.items():
                self._tally_one(name, key, obj)
        return previous

    # --- internals -------------------------------------------------------------------------
    def _index_one(self, name: str, key: str, obj: dict[str, Any]) -> None:
        values = _values(self._funcs[name], name, key, obj)
        if not values:
            return
        self._values_of[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex_one(self, name: str, key: str) -> None:
        values = self._values_of[name].pop(key, ())
        index = self._indices[name]
        for value in values:
            members = index.get(value)
            if members is not None:
                members.discard(key)
                if not members:
                    del index[value]


def _values(func: IndexFunc, name: str, key: str, obj: dict[str, Any]) -> tuple[str, ...]:
    try:
        found = func(obj)
    except Exception:  # one odd object must not stop the cache; it is just not indexed
        log.exception("index %s failed for %s; the object is not indexed", name, key)
        return ()
    if found is None:
        return ()
    if isinstance(found, str):  # one value, not its characters
        return (found,)
    return tuple(dict.fromkeys(v for v in found if v))
