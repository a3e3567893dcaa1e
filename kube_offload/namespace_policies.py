"""Namespace policies kept current from a namespace informer: parsed once per namespace
change on the informer thread, so a request (an admission, a scheduling filter) costs one
dict lookup. Shared by the webhook and the scheduler extender; each decides what an
invalid policy means for its own answer.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from kube_offload.runtime.informer import DELETED, Informer
from kube_offload.policy import NamespacePolicy, PolicyError, namespace_name, policy_from_namespace

Entry = NamespacePolicy | PolicyError


def evaluate(namespace: dict[str, Any]) -> Entry:
    """The namespace's policy, or the PolicyError that makes it invalid."""
    try:
        return policy_from_namespace(namespace)
    except PolicyError as exc:
        return exc


class NamespacePolicies:
    """Parsed policies of every namespace an informer sees; ``on_invalid(name, error)`` is
    called when a namespace's policy labels change to something invalid."""

    def __init__(self, informer: Informer, *, on_invalid: Callable[[str, PolicyError], None] | None = None) -> None:
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._on_invalid = on_invalid
        informer.add_handler(self._on_event)

    def get(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def _on_event(self, event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        name = namespace_name(new)
        if event == DELETED:
            with self._lock:
                self._entries.pop(name, None)
            return
        if old is not None and _same_version(old, new) and name in self._entries:
            return  # a resync: the policy cannot have changed
        entry = evaluate(new)
        if isinstance(entry, PolicyError) and self._on_invalid is not None:
            self._on_invalid(name, entry)
        with self._lock:
            self._entries[name] = entry


def _same_version(old: dict[str, Any], new: dict[str, Any]) -> bool:
    old_rv = (old.get("metadata") or {}).get("resourceVersion")
    return bool(old_rv) and old_rv == (new.get("metadata") or {}).get("resourceVersion")
