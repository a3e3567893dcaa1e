"""One offloaded namespace of an e2e reflection test and its twin, with waits on the remote
side (tests/e2e/test_reflection*.py)."""

from __future__ import annotations

import uuid
from typing import Any, Callable

from kube_offload_harness.cluster import Cluster
from support.clusters import get_or_none

LOCAL_ID = "local"  # the harness's local cluster id (default_topology)
TIMEOUT = 45  # seconds for one reflection to show; generous for a loaded 2-core machine


def dig(obj: dict, dotted: str) -> Any:
    """``obj``'s value at ``a.b.c`` (None where a level is missing)."""
    value: Any = obj
    for part in dotted.split("."):
        value = (value or {}).get(part)
    return value


class Twin:
    """A new offloaded namespace (``<prefix>-<random>``) and its twin's name."""

    def __init__(self, local: Cluster, remote: Cluster, wait: Callable[..., Any], *, prefix: str) -> None:
        self.local, self.remote, self.wait = local, remote, wait
        self.ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.twin = f"{self.ns}-{LOCAL_ID}"

    def remote_obj(self, kind: str, name: str) -> dict | None:
        return get_or_none(self.remote, kind, self.twin, name)

    def until_remote(self, kind: str, name: str, check: Callable[[dict], Any], what: str, timeout: float = TIMEOUT) -> dict:
        def probe() -> dict | None:
            obj = self.remote_obj(kind, name)
            return obj if obj is not None and check(obj) else None

        found: dict = self.wait(probe, timeout=timeout, what=f"remote {kind} {self.twin}/{name}: {what}")
        return found

    def until_remote_gone(self, kind: str, name: str, timeout: float = TIMEOUT) -> None:
        self.wait(lambda: self.remote_obj(kind, name) is None, timeout=timeout, what=f"remote {kind} {self.twin}/{name} deleted")

    def local_events(self, **match: Any) -> list[dict]:
        items = self.local.kubectl_json("get", "events", "-n", self.ns)["items"]
        return [e for e in items if all(dig(e, k) == v for k, v in match.items())]
