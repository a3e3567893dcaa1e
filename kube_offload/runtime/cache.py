"""The read interface every informer offers, as a type: :class:`Cache`.

Two classes implement it, :class:`~kube_offload.runtime.informer.Informer` (one list+watch)
and :class:`~kube_offload.runtime.namespaced_informer.MultiNamespaceInformer` (one per
namespace, merged), and a loop must not care which one it was given: a controller watches
either, a resolver reads either. Declaring such a parameter ``Informer`` would refuse the
multi-namespace one; this Protocol says what a reader may rely on, and nothing more (the
namespace set, ``forbidden_namespaces()``, tallies and ``relist()`` belong to one class or
the other).
"""

from __future__ import annotations

import builtins
import time
from typing import Any, Callable, Protocol

from kube_offload.runtime.indexer import IndexFunc
from kube_offload.runtime.informer import Handler


class Cache(Protocol):
    name: str

    @property
    def last_contact(self) -> float:
        """Monotonic time of the last answer from the API server (0: never)."""
        ...

    def add_handler(self, handler: Handler) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def has_synced(self) -> bool: ...

    def wait_for_sync(self, timeout: float) -> bool: ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    # `builtins.list`: inside this class `list` is the method below.
    def list(self) -> builtins.list[dict[str, Any]]: ...

    def keys(self) -> builtins.list[str]: ...

    def add_indexer(self, name: str, func: IndexFunc) -> None: ...

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]: ...

    def index_keys(self, name: str, value: str) -> builtins.list[str]: ...

    def index_values(self, name: str) -> builtins.list[str]: ...


def poll_synced(has_synced: Callable[[], bool], timeout: float, poll: float = 0.1) -> bool:
    """``wait_for_sync`` of a cache made of others (a set of informers that come and go):
    ``has_synced`` asked every ``poll`` seconds until it answers True (True) or ``timeout``
    seconds have passed (False)."""
    deadline = time.monotonic() + timeout
    while not has_synced():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True
