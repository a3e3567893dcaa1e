"""Telling the local user what the provider's policy changed or refused (policy_fit.py),
once per object and note, not at every resync.

A reconcile runs for every informer event and every resync, and fits the object again
each time; the notes are the same as long as the object and the policy are. So a note
is recorded as a Warning Event (``ProviderPolicyAdjusted``/``ProviderPolicyRefused``,
vkubelet/shared/events.py) when it is new for that object (its UID): an object fixed and broken
again, or a policy that changed, is told again; a restart of the virtual kubelet tells
each note once more (the Event's count grows). The recorder folds what still repeats
(kube_offload/runtime/events.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from kube_offload import reasons
from vkubelet.shared import events as ev
from vkubelet.shared.policy_fit import Note

# Objects remembered (least recently told forgotten first: told again at worst).
MAX_REMEMBERED = 8192


class PolicyNotices:
    def __init__(self, recorder: ev.EventRecorder, *, max_remembered: int = MAX_REMEMBERED) -> None:
        self._recorder = recorder
        self._max = max_remembered
        self._lock = threading.Lock()
        self._told: OrderedDict[str, frozenset[tuple[str, str]]] = OrderedDict()

    def tell(self, obj: Mapping[str, Any], *, adjusted: Iterable[Note] = (), refused: Iterable[Note] = ()) -> list[tuple[str, Note]]:
        """Record the notes on ``obj`` not told for it yet; returns those recorded
        (reason, note). No notes: forgets ``obj`` (a later note is new again)."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        notes = [(reasons.REASON_POLICY_ADJUSTED, n) for n in adjusted] + [(reasons.REASON_POLICY_REFUSED, n) for n in refused]
        current = frozenset((reason, note.message) for reason, note in notes)
        with self._lock:
            previous = self._told.get(uid, frozenset())
            if not current:
                self._told.pop(uid, None)
                return []
            self._told[uid] = current
            self._told.move_to_end(uid)
            while len(self._told) > self._max:
                self._told.popitem(last=False)
        new = [(reason, note) for reason, note in notes if (reason, note.message) not in previous]
        for reason, note in new:
            self._recorder.warning(obj, reason, note.message)
        return new

    def forget(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            self._told.pop(str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"), None)
