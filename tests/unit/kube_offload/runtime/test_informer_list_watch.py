"""The informer's list+watch against fake list functions (real informer threads, no API
server): a watch that quietly waits, a list answered 403.

* A namespace whose LIST is answered 403 (kube_offload/runtime/informer.py ``forbidden``,
  kube_offload/runtime/namespaced_informer.py) counts as synced and empty for the
  multi-namespace informer, so the other namespaces are not held back; it is named by
  ``forbidden_namespaces()``, retried with backoff, and its objects arrive as ADDED events
  once a list is accepted again. End to end (a provider deleting the consumer
  RoleBinding): tests/e2e/test_forbidden_twin.py.
* ``Informer.relist``: a fresh list on demand, breaking a watch that is quietly waiting,
  without a warning and without backoff. Against a real API server:
  tests/e2e/test_pod_lifecycle.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from kubernetes.client.rest import ApiException

from kube_offload.runtime.informer import ADDED, Informer
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer

FORBIDDEN_BODY = json.dumps({
    "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
    "message": 'pods is forbidden: User "system:serviceaccount:t:c" cannot list resource "pods" in the namespace "shut"',
})


class Listed:
    """A list response as call_json reads it (``_preload_content=False``)."""

    def __init__(self, body: dict) -> None:
        self.data = json.dumps(body).encode()


class QuietWatch:
    """A watch response that sends nothing until it is shut down (as a quiet apiserver
    does); then the stream ends."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def stream(self, amt=None, decode_content=False):
        while not self._closed.wait(0.05):
            pass
        return
        yield  # a generator

    def shutdown(self) -> None:
        self._closed.set()

    def close(self) -> None:
        self._closed.set()

    def release_conn(self) -> None:
        pass


class Server:
    """Per namespace: its objects, and whether this identity may list/watch there."""

    def __init__(self, objects: dict[str, list[str]], forbidden: set[str]) -> None:
        self.objects = objects
        self.forbidden = set(forbidden)
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def list_for(self, namespace: str):
        def call(**kwargs):
            with self._lock:
                self.calls[namespace] = self.calls.get(namespace, 0) + 1
                forbidden = namespace in self.forbidden
            if forbidden:
                raise forbidden_answer()
            if kwargs.get("watch"):
                return QuietWatch()
            items = [{"metadata": {"namespace": namespace, "name": n, "resourceVersion": "5"}}
                     for n in self.objects.get(namespace, [])]
            return Listed({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": items})

        return call


def forbidden_answer() -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = FORBIDDEN_BODY
    return exc


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_forbidden_namespace_counts_as_synced_and_empty_and_is_named():
    server = Server({"open": ["a", "b"], "shut": ["x"]}, forbidden={"shut"})
    informer = MultiNamespaceInformer(name="pods", list_for_namespace=server.list_for)
    informer.set_namespaces(["open", "shut"])
    informer.start()
    try:
        assert informer.wait_for_sync(10), "one forbidden namespace must not hold the others back"
        assert informer.forbidden_namespaces() == ["shut"]
        assert sorted(informer.keys()) == ["open/a", "open/b"]  # empty where forbidden
        assert informer.namespace_synced("open") and not informer.namespace_synced("shut")
        assert "cannot list" in informer.forbidden_reason("shut") and informer.forbidden_reason("open") == ""
        # Kept retrying with backoff: the first retry after ~0.5 s, not a hot loop.
        assert wait_until(lambda: server.calls["shut"] >= 2, timeout=5)
        calls = server.calls["shut"]
        time.sleep(1.0)
        assert server.calls["shut"] - calls <= 2
    finally:
        informer.stop()


def test_access_restored_brings_the_objects_as_added_events():
    server = Server({"open": ["a"], "shut": ["x", "y"]}, forbidden={"shut"})
    informer = MultiNamespaceInformer(name="pods", list_for_namespace=server.list_for)
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, _old, new: events.append((kind, f"{new['metadata']['namespace']}/{new['metadata']['name']}")))
    informer.set_namespaces(["open", "shut"])
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        assert events == [(ADDED, "open/a")]
        with server._lock:
            server.forbidden.clear()
        child = informer._children["shut"]
        child.relist()  # cut the backoff short (it would come within 10 s anyway)
        assert wait_until(lambda: informer.forbidden_namespaces() == [] and informer.namespace_synced("shut"))
        assert sorted(informer.keys()) == ["open/a", "shut/x", "shut/y"]
        assert sorted(e for e in events if e[1].startswith("shut/")) == [(ADDED, "shut/x"), (ADDED, "shut/y")]
    finally:
        informer.stop()


def test_a_plain_informer_answered_403_is_forbidden_but_not_synced():
    server = Server({"shut": ["x"]}, forbidden={"shut"})
    informer = Informer(name="pods@shut", list_func=server.list_for("shut"))
    informer.start()
    try:
        assert wait_until(lambda: informer.forbidden)
        assert not informer.has_synced()  # what a forbidden cache means is the reader's call
        assert "cannot list" in informer.forbidden_message
    finally:
        informer.stop()


def test_forbidden_clears_only_once_the_cache_holds_the_servers_objects():
    """A reader that sees ``forbidden`` False must find the listed objects already cached:
    cleared with the store's replacement, before any event, not at the first page."""
    server = Server({"shut": ["x"]}, forbidden=set())
    informer = Informer(name="pods@shut", list_func=server.list_for("shut"))
    informer.forbidden = True
    seen: list[tuple[bool, list[str]]] = []
    informer.add_handler(lambda _kind, _old, _new: seen.append((informer.forbidden, informer.keys())))
    informer._relist()
    assert seen == [(False, ["shut/x"])]
    assert not informer.forbidden and informer.has_synced()


def test_a_watch_answered_403_marks_the_cache_forbidden_and_an_accepted_one_clears_it():
    server = Server({"ns": ["x"]}, forbidden=set())
    informer = Informer(name="pods@ns", list_func=server.list_for("ns"))
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        with server._lock:
            server.forbidden.add("ns")
        informer._break_watch()  # the watch ends; reopening it is answered 403
        assert wait_until(lambda: informer.forbidden)
        assert informer.keys() == ["ns/x"]  # stale, not emptied: the flag says it proves nothing
        with server._lock:
            server.forbidden.clear()
        informer._kick.set()
        assert wait_until(lambda: not informer.forbidden)
    finally:
        informer.stop()


# --- relist -------------------------------------------------------------------------------------
class RelistServer:
    """One namespace; counts lists and keeps every watch it opened."""

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
        return Listed({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.lists)},
                       "items": [dict(item) for item in self.items]})


def test_relist_rebuilds_the_cache_from_a_fresh_list_at_once(caplog):
    server = RelistServer()
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
