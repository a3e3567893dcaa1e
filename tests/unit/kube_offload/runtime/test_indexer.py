"""Informer indexes (kube_offload/runtime/indexer.py, informer.py, namespaced_informer.py)
without an API server: the store's index bookkeeping, and that an informer's index is
already updated when a handler hears of a change, whether the change came by watch
(fed through Informer._apply, the path a watch event takes), by a relist's difference
(a fake list function), or not at all (a resync). tests/e2e/test_runtime_informer.py shows
the same against a real kube-apiserver."""

from __future__ import annotations

import json

import pytest

from kube_offload.runtime.indexer import Indexer
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED, Informer
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from support.informers import never_listed

BY_TEAM = "by-team"


def obj(name: str, team: str | None = None, namespace: str = "ns", rv: str = "1", **labels: str) -> dict:
    meta: dict = {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": dict(labels)}
    if team is not None:
        meta["labels"]["team"] = team
    return {"metadata": meta}


def by_team(o: dict) -> str | None:
    return ((o.get("metadata") or {}).get("labels") or {}).get("team")


def names(objects: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


# --- the store -------------------------------------------------------------------------------
def test_store_moves_an_object_between_values_and_forgets_it_when_removed():
    store = Indexer({BY_TEAM: by_team})
    store.put(obj("a", "red"))
    store.put(obj("b", "red"))
    store.put(obj("c"))  # no value: stored, not indexed
    assert names(store.by_index(BY_TEAM, "red")) == ["a", "b"]
    assert store.index_values(BY_TEAM) == ["red"] and len(store) == 3
    store.put(obj("b", "blue", rv="2"))
    assert store.index_keys(BY_TEAM, "red") == ["ns/a"] and store.index_keys(BY_TEAM, "blue") == ["ns/b"]
    key_set = store.index_key_set(BY_TEAM, "red")
    assert key_set == {"ns/a"} and store.index_key_set(BY_TEAM, "green") == frozenset()
    store.put(obj("d", "red"))
    assert key_set == {"ns/a"}  # a copy: later changes of the index do not show in it
    store.pop("ns/d")
    assert store.by_index(BY_TEAM, "blue")[0]["metadata"]["resourceVersion"] == "2"
    assert store.pop("ns/a")["metadata"]["name"] == "a"
    assert store.pop("ns/a") is None  # a repeated delete is harmless
    assert store.index_values(BY_TEAM) == ["blue"] and store.by_index(BY_TEAM, "red") == []


def test_store_replace_rebuilds_every_index():
    store = Indexer({BY_TEAM: by_team})
    store.put(obj("a", "red"))
    previous = store.replace({"ns/b": obj("b", "red"), "ns/c": obj("c", "blue")})
    assert list(previous) == ["ns/a"]
    assert store.index_keys(BY_TEAM, "red") == ["ns/b"] and store.index_values(BY_TEAM) == ["blue", "red"]


def test_index_functions_may_give_many_values_one_string_or_none():
    store = Indexer({"letters": lambda o: [c for c in o["metadata"]["name"]] + ["", None]})  # type: ignore[list-item]
    store.add_indexer("team", by_team)  # a str is one value, not its characters
    store.put(obj("abba", "red"))
    assert store.index_values("letters") == ["a", "b"]  # each value once; empty ones dropped
    assert store.index_values("team") == ["red"]


def test_a_failing_index_function_leaves_the_object_stored_but_not_indexed(caplog):
    store = Indexer({"boom": lambda o: 1 / 0})
    store.put(obj("a"))
    assert store.get("ns/a") is not None and store.index_values("boom") == []
    assert "index boom failed for ns/a" in caplog.text


def test_an_index_added_later_indexes_what_is_stored_and_names_are_unique():
    store = Indexer()
    store.put(obj("a", "red"))
    store.add_indexer(BY_TEAM, by_team)
    assert store.index_keys(BY_TEAM, "red") == ["ns/a"]
    store.add_indexer(BY_TEAM, by_team)  # the same function again: one index
    with pytest.raises(ValueError, match="already registered"):
        store.add_indexer(BY_TEAM, lambda o: None)
    with pytest.raises(KeyError, match="no index named 'nope'.*registered: by-team"):
        store.by_index("nope", "x")


# --- the informer: updated before the handlers ----------------------------------------------------
class IndexSpy:
    """A handler recording, at the moment it runs, what the index says."""

    def __init__(self, informer) -> None:
        self.informer = informer
        self.seen: list[tuple[str, str, dict[str, list[str]]]] = []

    def __call__(self, kind: str, _old, new: dict) -> None:
        index = {team: self.informer.index_keys(BY_TEAM, team) for team in self.informer.index_values(BY_TEAM)}
        self.seen.append((kind, new["metadata"]["name"], index))


def test_watch_events_update_the_index_before_any_handler_runs():
    informer = Informer(name="test", list_func=never_listed, indexers={BY_TEAM: by_team})
    spy = IndexSpy(informer)
    informer.add_handler(spy)
    informer.apply(ADDED, obj("a", "red"))
    informer.apply(MODIFIED, obj("a", "blue", rv="2"))  # moves between values
    informer.apply(DELETED, obj("a", "blue", rv="3"))
    assert spy.seen == [
        (ADDED, "a", {"red": ["ns/a"]}),
        (MODIFIED, "a", {"blue": ["ns/a"]}),
        (DELETED, "a", {}),
    ]
    assert names(informer.by_index(BY_TEAM, "blue")) == []


class FakeList:
    """A list function answering one page with ``items`` (as call_json reads it)."""

    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __call__(self, **_kwargs):
        body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                "items": json.loads(json.dumps(self.items))}
        return type("Listed", (), {"data": json.dumps(body).encode()})()


def test_a_relist_delivers_its_difference_with_the_index_already_rebuilt():
    server = FakeList([obj("a", "red"), obj("b", "red")])
    informer = Informer(name="test", list_func=server, indexers={BY_TEAM: by_team})
    informer._relist()
    spy = IndexSpy(informer)
    informer.add_handler(spy)
    # While the watch was down: a moved to blue, b deleted, c created.
    server.items = [obj("a", "blue", rv="5"), obj("c", "red", rv="6")]
    informer._relist()
    after = {"blue": ["ns/a"], "red": ["ns/c"]}
    assert sorted(spy.seen) == sorted([(MODIFIED, "a", after), (ADDED, "c", after), (DELETED, "b", after)])


def test_a_resync_touches_no_index_and_still_reaches_the_handlers():
    informer = Informer(name="test", list_func=never_listed, indexers={BY_TEAM: by_team})
    informer.apply(ADDED, obj("a", "red"))
    spy = IndexSpy(informer)
    informer.add_handler(spy)
    informer.resync()
    assert spy.seen == [(MODIFIED, "a", {"red": ["ns/a"]})]


def test_an_index_added_to_a_running_informer_covers_its_cache():
    informer = Informer(name="test", list_func=never_listed)
    informer.apply(ADDED, obj("a", "red"))
    informer.add_indexer(BY_TEAM, by_team)
    assert informer.index_keys(BY_TEAM, "red") == ["ns/a"]


# --- one informer per namespace ---------------------------------------------------------------
def _children_never_list(namespace: str):
    return never_listed


def test_a_multi_namespace_informer_merges_the_index_of_every_namespace():
    informer = MultiNamespaceInformer(name="test", list_for_namespace=_children_never_list)
    informer.set_namespaces(["one"])
    informer.add_indexer(BY_TEAM, by_team)  # registered after a namespace exists...
    informer.set_namespaces(["one", "two"])  # ...and inherited by one that comes later
    spy = IndexSpy(informer)
    informer.add_handler(spy)
    informer.apply(ADDED, obj("a", "red", namespace="one"))
    informer.apply(ADDED, obj("b", "red", namespace="two"))
    assert informer.index_keys(BY_TEAM, "red") == ["one/a", "two/b"]
    assert names(informer.by_index(BY_TEAM, "red")) == ["a", "b"]
    assert spy.seen[-1] == (ADDED, "b", {"red": ["one/a", "two/b"]})
    # A namespace no longer watched: its objects leave the index before their DELETED events.
    informer.set_namespaces(["two"])
    assert spy.seen[-1] == (DELETED, "a", {"red": ["two/b"]})
    assert informer.index_values(BY_TEAM) == ["red"]
    with pytest.raises(ValueError, match="already registered"):
        informer.add_indexer(BY_TEAM, lambda o: None)
    with pytest.raises(KeyError, match="no index named 'nope'"):
        informer.by_index("nope", "x")
