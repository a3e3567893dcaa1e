"""Which informer events a controller may leave out (``Controller.watch(..., skip=...)``).

Every write to an object is delivered back to every loop watching it, the writer's own
included: the virtual kubelet patches a local pod's status, and the pod's MODIFIED event
would reconcile it again only to find nothing to do. A loop whose reconcile does not read
``status`` can skip every update that changes nothing else (:func:`only_status_changed`);
a loop that does read it may skip only the echo of its own write (:class:`WriteEchoes`),
because someone else's status write may be one it must answer.

Whether a loop reads ``status`` is that loop's call, and says why where it watches.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from kube_offload.runtime.kube import object_key

# Metadata that changes with every write, whatever was written: the version stamp, and the
# field managers (the informer strips them from its cache anyway, unless asked to keep them).
# ``generation`` is left in on purpose: it changes only with the spec, which is compared too.
VOLATILE_METADATA = ("resourceVersion", "managedFields")


def only_status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when ``new`` differs from ``old`` in ``status`` (or the volatile metadata)
    and in nothing else. False when nothing differs at all: a resync (old is new) must
    still reach the loop, as must an add (``old`` None) or a delete."""
    if old is None or old is new or old == new:
        return False
    return _without_status(old) == _without_status(new)


def _without_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in obj.items() if k != "status"}
    meta = rest.get("metadata")
    if isinstance(meta, Mapping):
        rest["metadata"] = {k: v for k, v in meta.items() if k not in VOLATILE_METADATA}
    return rest


class WriteEchoes:
    """The resourceVersion of the last write a loop made to each object, to recognise its
    echo: the watch event of exactly that version is what the loop itself wrote, while any
    other version is someone else's news. One entry per object key at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[str, str] = {}

    def wrote(self, obj: Mapping[str, Any] | None) -> None:
        """Record the object an API write answered with (its key and resourceVersion)."""
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version or not meta.get("name"):
            return
        with self._lock:
            self._written[object_key(obj)] = str(version)

    def is_echo(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is exactly the version our last write to it produced."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            return version is not None and self._written.get(object_key(obj)) == str(version)

    def forget(self, key: str) -> None:
        with self._lock:
            self._written.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._written)
