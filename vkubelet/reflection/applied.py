"""What reflection last applied to each remote object, so that an unchanged object costs
no request.

Reflection writes by server-side apply (the local object the only source of truth, one
field manager per virtual kubelet: names.field_manager), and an apply that changes
nothing changes nothing on the server either. It still costs a request, and every
informer event and resync reconciles: the memo says when one would be a no-op. An
object is applied again when what we would apply differs from what we last applied
(a local change, a policy change) or when the remote object is not the version our
apply returned (someone else wrote it: our fields are applied again, with force, theirs
are left alone). After a restart the memo is empty: each object is applied once, a no-op
on the server unless it drifted meanwhile. There is no comparison with the remote
object's contents: what the provider adds or defaults is its own business.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Mapping


def fingerprint(body: Mapping[str, Any]) -> str:
    """A digest of an apply body: equal bodies, equal digests, whatever the key order."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


class AppliedMemo:
    """Per remote ``namespace/name``: the digest of the body last applied and the
    resourceVersion the server answered. Thread-safe (a controller's workers share it);
    one entry per remote object of ours, dropped when we delete it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[str, tuple[str, str]] = {}

    def unchanged(self, key: str, body: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
        """Whether applying ``body`` over ``current`` (the cached remote object) would
        change nothing: the same body was applied last and answered with ``current``'s
        version."""
        version = resource_version(current)
        if not version:
            return False
        with self._lock:
            last = self._applied.get(key)
        return last is not None and last == (fingerprint(body), version)

    def remember(self, key: str, body: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        with self._lock:
            self._applied[key] = (fingerprint(body), resource_version(answer))

    def forget(self, key: str) -> None:
        with self._lock:
            self._applied.pop(key, None)
