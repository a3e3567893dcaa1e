"""The multiplexing of kube_offload.runtime.namespaced_informer without an API server: which
namespaces start/stop, key routing, and the DELETED events a dropped namespace delivers.
Child caches are fed through Informer._apply (the path a watch event takes); that the
list+watch itself works against a real apiserver is tests/e2e/test_namespaced_informer.py.
"""

from __future__ import annotations

import pytest

from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer, namespace_changes
from support.informers import never_listed_in


@pytest.mark.parametrize(
    "current, wanted, added, removed",
    [
        ([], [], [], []),
        ([], ["b", "a"], ["a", "b"], []),
        (["a", "b"], ["b", "c"], ["c"], ["a"]),
        (["a"], ["a", "a"], [], []),
        (["a", "b"], [], [], ["a", "b"]),
        (["a"], ["", "a"], [], []),  # an empty name is never a namespace
    ],
)
def test_namespace_changes(current, wanted, added, removed):
    assert namespace_changes(current, wanted) == (added, removed)


def _obj(namespace: str, name: str, rv: str = "1") -> dict:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": rv}}


@pytest.fixture
def informer():
    inf = MultiNamespaceInformer(name="test", list_for_namespace=never_listed_in)
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda kind, _old, new: events.append((kind, f"{new['metadata']['namespace']}/{new['metadata']['name']}")))
    inf.events = events  # type: ignore[attr-defined]
    return inf


def _feed(inf: MultiNamespaceInformer, kind: str, obj: dict) -> None:
    inf.apply(kind, obj)


def test_routes_reads_to_the_namespace_and_forwards_events(informer):
    informer.set_namespaces(["a", "b"])
    assert informer.namespaces() == ["a", "b"]
    _feed(informer, ADDED, _obj("a", "x"))
    _feed(informer, ADDED, _obj("b", "y"))
    _feed(informer, MODIFIED, _obj("b", "y", "2"))
    assert informer.get("a/x")["metadata"]["name"] == "x"
    assert informer.get("b/x") is None
    assert informer.get("c/x") is None
    assert sorted(informer.keys()) == ["a/x", "b/y"]
    assert len(informer.list()) == 2
    assert informer.events == [(ADDED, "a/x"), (ADDED, "b/y"), (MODIFIED, "b/y")]


def test_dropping_a_namespace_deletes_its_objects_and_ignores_its_late_events(informer):
    informer.set_namespaces(["a", "b"])
    _feed(informer, ADDED, _obj("a", "x"))
    _feed(informer, ADDED, _obj("a", "z"))
    _feed(informer, ADDED, _obj("b", "y"))
    old_child = informer._children["a"]
    informer.events.clear()

    informer.set_namespaces(["b"])
    assert sorted(informer.events) == [(DELETED, "a/x"), (DELETED, "a/z")]
    assert informer.get("a/x") is None
    assert informer.keys() == ["b/y"]

    informer.events.clear()
    old_child.apply(MODIFIED, _obj("a", "x", "9"))  # the stopped watch's last word
    assert informer.events == []
    assert informer.get("a/x") is None


def test_a_namespace_that_comes_back_starts_empty(informer):
    informer.set_namespaces(["a"])
    _feed(informer, ADDED, _obj("a", "x"))
    informer.set_namespaces([])
    informer.set_namespaces(["a"])
    assert informer.get("a/x") is None
    assert informer.keys() == []


def test_synced_only_when_started_and_every_namespace_listed(informer):
    assert not informer.has_synced()  # not started
    informer._started = True  # "started" without threads: no API server here
    assert informer.has_synced()  # no namespace: nothing left to list
    informer._started = False
    informer.set_namespaces(["a"])  # not started: no watch thread is spawned
    informer._started = True
    assert not informer.has_synced()
    informer._children["a"]._synced.set()
    assert informer.has_synced()
    assert informer.namespace_synced("a") and not informer.namespace_synced("b")


def test_last_contact_survives_the_namespace_that_made_it(informer):
    informer.set_namespaces(["a"])
    informer._children["a"].last_contact = 42.0
    assert informer.last_contact == 42.0
    informer.set_namespaces([])
    assert informer.last_contact == 42.0


def test_set_namespaces_after_stop_is_ignored(informer):
    informer.stop()
    informer.set_namespaces(["a"])
    assert informer.namespaces() == []


def test_the_sync_gate_holds_synced_back_until_the_namespace_set_is_known():
    known = {"value": False}
    inf = MultiNamespaceInformer(name="gated", list_for_namespace=never_listed_in, sync_gate=lambda: known["value"])
    inf._started = True  # no threads: no API server here
    assert not inf.has_synced()  # no namespace yet, but the set is not known either
    known["value"] = True
    assert inf.has_synced()
