"""The informer's runtime behaviour (kube_offload/runtime/informer.py) against a real kube-apiserver:
paginated lists, a broken watch resumed from the last resourceVersion without a new list,
a list again only when the server answers 410 Gone (after a server restart, the module's
last test), managedFields stripped from the cache, resyncs on a timer while the watch is
quiet, and a named index filled from the list, moved and emptied by watch events, and
already current when a handler hears of the change.

The cluster is this module's own (one kwokctl control plane, no nodes) and the informer
reads it with the admin kubeconfig: these tests exercise the library, not a component's
identity. The list function is the real client method wrapped to count the requests the
informer makes and to hold a watch re-open back, so a test can change the world while the
informer's watch is down, as during a dropped connection.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Iterator

import pytest
from kubernetes import client

from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED, Informer
from kube_offload.runtime.kube import call_json, load_api_client
from kube_offload_harness.cluster import Cluster
from support.clusters import bare_cluster
from support.waiting import wait_for

NS = "runtime-informer"
TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with bare_cluster(tmp_path_factory, "rtinformer", NS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(load_api_client(str(cluster.kubeconfig)))


class CountingList:
    """The namespaced ConfigMap list function, recording each request the informer makes.
    ``hold_watches`` makes the next watch re-open wait until ``release_watches``;
    ``next_watch_rv`` replaces the resourceVersion of the next watch (to ask for a
    history the server no longer has)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self._fn = functools.partial(core.list_namespaced_config_map, namespace)
        self._lock = threading.Lock()
        self.lists: list[dict[str, Any]] = []  # each page request's limit/_continue
        self.watch_rvs: list[str] = []  # the resourceVersion each watch asked to start from
        self.responses: list[Any] = []
        self._open = threading.Event()
        self._open.set()
        self.next_watch_rv: str | None = None
        self.attempts = 0  # watch opens asked for, held ones included

    def __call__(self, **kwargs):
        if kwargs.get("watch"):
            with self._lock:
                self.attempts += 1
            self._open.wait(TIMEOUT)
            with self._lock:
                self.watch_rvs.append(kwargs.get("resource_version"))
                if self.next_watch_rv is not None:
                    kwargs["resource_version"], self.next_watch_rv = self.next_watch_rv, None
            response = self._fn(**kwargs)
            with self._lock:
                self.responses.append(response)
            return response
        with self._lock:
            self.lists.append({"limit": kwargs.get("limit"), "continue": kwargs.get("_continue")})
        return self._fn(**kwargs)

    def hold_watches(self) -> None:
        self._open.clear()

    def release_watches(self) -> None:
        self._open.set()

    def drop_connection(self) -> None:
        """Shut the open watch's socket, as a broken network or a restarted server would."""
        with self._lock:
            response = self.responses[-1]
        response.shutdown()

    def watch_count(self) -> int:
        """Watches the server answered (opened)."""
        with self._lock:
            return len(self.responses)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []  # kind, name, old is new
        self._lock = threading.Lock()

    def __call__(self, kind: str, old: dict | None, new: dict) -> None:
        with self._lock:
            self.events.append((kind, new["metadata"]["name"], old is new))

    def saw(self, kind: str, name: str) -> bool:
        with self._lock:
            return any(k == kind and n == name for k, n, _ in self.events)

    def resyncs(self) -> int:
        with self._lock:
            return sum(1 for k, _, same in self.events if k == MODIFIED and same)


def until(predicate, what: str, timeout: float = TIMEOUT):
    return wait_for(predicate, what=what, timeout=timeout, interval=0.1)


def configmap(name: str, label: str) -> dict:
    return {"metadata": {"name": name, "labels": {"runtime-test": label}}, "data": {"k": "v"}}


def by_team(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get("team")


def started(lister: CountingList, label: str, **kwargs) -> tuple[Informer, Recorder]:
    informer = Informer(
        name=f"configmaps-{label}", list_func=lister, list_kwargs={"label_selector": f"runtime-test={label}"}, **kwargs
    )
    seen = Recorder()
    informer.add_handler(seen)
    informer.start()
    assert informer.wait_for_sync(TIMEOUT), "the first list completed"
    return informer, seen


def test_a_list_is_paginated_and_the_cache_holds_every_page_without_managed_fields(core: client.CoreV1Api):
    for i in range(30):
        core.create_namespaced_config_map(NS, configmap(f"page-{i:02d}", "page"))
    lister = CountingList(core, NS)
    informer, seen = started(lister, "page", page_size=7)
    try:
        assert len(informer.keys()) == 30
        assert sorted(informer.keys()) == [f"{NS}/page-{i:02d}" for i in range(30)]
        assert sum(1 for kind, _, _ in seen.events if kind == ADDED) == 30
        # ceil(30 / 7) pages, each of at most 7, chained by continue tokens: one list.
        assert len(lister.lists) == 5, lister.lists
        assert all(page["limit"] == 7 for page in lister.lists)
        assert lister.lists[0]["continue"] is None and all(page["continue"] for page in lister.lists[1:])
        assert informer.list_count == 1
        # The server keeps managedFields; the cache does not (they are most of an object).
        served = call_json(core.read_namespaced_config_map, "page-00", NS)
        assert served["metadata"].get("managedFields"), "the apiserver records field managers"
        for obj in informer.list():
            assert "managedFields" not in obj["metadata"], obj["metadata"]["name"]
            assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"
        # ... nor in objects that arrive by watch.
        core.create_namespaced_config_map(NS, configmap("page-late", "page"))
        until(lambda: informer.get(f"{NS}/page-late"), "the watched ConfigMap")
        assert "managedFields" not in informer.get(f"{NS}/page-late")["metadata"]
    finally:
        informer.stop()


def test_a_broken_watch_resumes_from_the_last_resource_version_without_a_new_list(core: client.CoreV1Api):
    core.create_namespaced_config_map(NS, configmap("resume-a", "resume"))
    core.create_namespaced_config_map(NS, configmap("resume-b", "resume"))
    lister = CountingList(core, NS)
    informer, seen = started(lister, "resume", watch_timeout_seconds=120)
    try:
        until(lambda: lister.watch_count() == 1, "the first watch")
        listed_rv = lister.watch_rvs[0]
        core.create_namespaced_config_map(NS, configmap("resume-c", "resume"))
        until(lambda: informer.get(f"{NS}/resume-c"), "the ConfigMap created while watching")
        last_seen = informer.get(f"{NS}/resume-c")["metadata"]["resourceVersion"]

        # The connection drops; while the watch is down, the world changes.
        lister.hold_watches()
        lister.drop_connection()
        until(lambda: lister.attempts == 2, "the informer to try to watch again")
        core.create_namespaced_config_map(NS, configmap("resume-during", "resume"))
        core.delete_namespaced_config_map("resume-a", NS)
        lister.release_watches()

        until(lambda: informer.get(f"{NS}/resume-during"), "the ConfigMap created while the watch was down")
        until(lambda: informer.get(f"{NS}/resume-a") is None, "the deletion made while the watch was down")
        assert seen.saw(ADDED, "resume-during") and seen.saw(DELETED, "resume-a")
        # Resumed from the last event it saw, not from the list, and never listed again.
        assert lister.watch_rvs[1] == last_seen and int(last_seen) > int(listed_rv), lister.watch_rvs
        assert informer.list_count == 1 and len(lister.lists) == 1, lister.lists
    finally:
        lister.release_watches()
        informer.stop()


def test_resync_is_delivered_on_time_while_the_watch_is_quiet(core: client.CoreV1Api):
    core.create_namespaced_config_map(NS, configmap("resync-a", "resync"))
    lister = CountingList(core, NS)
    informer, seen = started(lister, "resync", resync_seconds=1.0, watch_timeout_seconds=120)
    try:
        until(lambda: lister.watch_count() == 1, "the first watch")
        # No change is made: only the timer can deliver these.
        until(lambda: seen.resyncs() >= 3, "three resyncs of the quiet cache", timeout=10)
        assert lister.watch_count() == 1 and informer.list_count == 1
    finally:
        informer.stop()


def test_an_index_is_filled_by_the_list_follows_the_watch_and_is_current_for_handlers(core: client.CoreV1Api):
    def labelled(name: str, team: str) -> dict:
        body = configmap(name, "index")
        body["metadata"]["labels"]["team"] = team
        return body

    core.create_namespaced_config_map(NS, labelled("index-a", "red"))
    core.create_namespaced_config_map(NS, labelled("index-b", "blue"))
    lister = CountingList(core, NS)
    informer = Informer(
        name="configmaps-index", list_func=lister, list_kwargs={"label_selector": "runtime-test=index"},
        indexers={"team": by_team}, watch_timeout_seconds=120,
    )
    # What the index says at the moment each handler call runs.
    seen: list[tuple[str, str, list[str], list[str]]] = []

    def spy(kind: str, _old: dict | None, new: dict) -> None:
        seen.append((kind, new["metadata"]["name"], informer.index_keys("team", "red"), informer.index_keys("team", "blue")))

    informer.add_handler(spy)
    informer.start()
    try:
        assert informer.wait_for_sync(TIMEOUT)
        # From the list.
        assert informer.index_keys("team", "red") == [f"{NS}/index-a"]
        assert [o["metadata"]["name"] for o in informer.by_index("team", "blue")] == ["index-b"]
        until(lambda: lister.watch_count() == 1, "the first watch")

        # Added by watch.
        core.create_namespaced_config_map(NS, labelled("index-c", "red"))
        until(lambda: len(informer.index_keys("team", "red")) == 2, "index-c under red")
        assert (ADDED, "index-c", [f"{NS}/index-a", f"{NS}/index-c"], [f"{NS}/index-b"]) in seen

        # Modified: index-a moves from red to blue, and its handler already sees it there.
        core.patch_namespaced_config_map("index-a", NS, {"metadata": {"labels": {"team": "blue"}}})
        until(lambda: informer.index_keys("team", "red") == [f"{NS}/index-c"], "index-a out of red")
        assert informer.index_keys("team", "blue") == [f"{NS}/index-a", f"{NS}/index-b"]
        assert (MODIFIED, "index-a", [f"{NS}/index-c"], [f"{NS}/index-a", f"{NS}/index-b"]) in seen

        # Deleted: gone from its value, already when its handler runs.
        core.delete_namespaced_config_map("index-b", NS)
        until(lambda: informer.index_keys("team", "blue") == [f"{NS}/index-a"], "index-b out of blue")
        assert (DELETED, "index-b", [f"{NS}/index-c"], [f"{NS}/index-a"]) in seen
        assert informer.index_values("team") == ["blue", "red"]
        # One list; every change after it came by watch.
        assert informer.list_count == 1 and len(lister.lists) == 1
    finally:
        informer.stop()


def test_a_watch_the_server_answers_with_410_gone_lists_again(cluster: Cluster, core: client.CoreV1Api):
    core.create_namespaced_config_map(NS, configmap("gone-a", "gone"))
    core.create_namespaced_config_map(NS, configmap("gone-b", "gone"))
    lister = CountingList(core, NS)
    informer, seen = started(lister, "gone", watch_timeout_seconds=120)
    try:
        until(lambda: lister.watch_count() == 1, "the first watch")
        # The server restarts (the watch breaks) and the informer resumes from a history the
        # server no longer keeps: a restarted apiserver's watch cache starts at the current
        # resourceVersion, so resourceVersion 1 is "too old" and answered 410 Gone. (On a
        # fresh cluster the cache still holds everything since 1: hence the restart.)
        lister.hold_watches()
        lister.next_watch_rv = "1"
        cluster.stop()
        cluster.start()
        until(lambda: lister.attempts == 2, "the informer to try to watch again")
        core.delete_namespaced_config_map("gone-a", NS)
        core.create_namespaced_config_map(NS, configmap("gone-c", "gone"))
        lister.release_watches()

        until(lambda: informer.list_count == 2, "a second list after 410 Gone")
        assert len(lister.lists) == 2
        until(lambda: informer.get(f"{NS}/gone-c") and informer.get(f"{NS}/gone-a") is None, "the relisted cache")
        # The list's difference with the cache arrives as events: the deletion is not missed.
        assert seen.saw(DELETED, "gone-a") and seen.saw(ADDED, "gone-c")
        until(lambda: lister.watch_count() >= 3, "watching again after the list")
        assert lister.watch_rvs[-1] not in ("1", lister.watch_rvs[0])
        core.create_namespaced_config_map(NS, configmap("gone-d", "gone"))
        until(lambda: informer.get(f"{NS}/gone-d"), "an event on the new watch")
        assert informer.list_count == 2
    finally:
        lister.release_watches()
        informer.stop()
