"""Informer.relist (kube_offload/runtime/informer.py): a fresh list on demand, breaking a watch that
is quietly waiting, without a warning and without backoff. The list+watch is fed by a fake
list function whose watch blocks until its response is shut down, as a quiet real watch
does; against a real API server the relist is exercised by tests/e2e/test_pod_lifecycle.py."""

from __future__ import annotations

import json
import logging
import threading
import time

from kube_offload.runtime.informer import Informer


class QuietWatch:
    """A watch response that sends nothing until shut down (then the stream ends)."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def stream(self, amt=None, decode_content=False):
        self._closed.wait(30)
        return iter(())

    def shutdown(self) -> None:
        self._closed.set()

    def close(self) -> None:
        self._closed.set()

    def release_conn(self) -> None:
        pass


class FakeServer:
    def __init__(self) -> None:
        self.items = [{"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "1"}}]
        self.lists = 0
        self.watches: list[QuietWatch] = []

    def __call__(self, **kwargs):
        if kwargs.get("watch"):
            watch = QuietWatch()
            self.watches.append(watch)
            return watch
        self.lists += 1
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.lists)},
                "items": [dict(i) for i in self.items]}
        return Listed(json.dumps(body).encode())


class Listed:
    """A list response as call_json reads it (``_preload_content=False``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_relist_rebuilds_the_cache_from_a_fresh_list_at_once(caplog):
    server = FakeServer()
    informer = Informer(name="test", list_func=server)
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, _old, new: events.append((kind, new["metadata"]["name"])))
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        assert wait_until(lambda: server.watches)  # now quietly watching
        first = informer.last_listed
        assert first > 0 and server.lists == 1
        # The watch "slept through" a change: only a new list can show it.
        server.items = [{"metadata": {"namespace": "ns", "name": "b", "resourceVersion": "5"}}]
        requested = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="kube_offload.runtime.informer"):
            informer.relist()
            assert wait_until(lambda: informer.last_listed >= requested, timeout=2.0)
        assert server.lists == 2
        assert informer.keys() == ["ns/b"]
        assert ("DELETED", "a") in events and ("ADDED", "b") in events
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert wait_until(lambda: len(server.watches) == 2)  # watching again from the new list
    finally:
        informer.stop()
