"""The informer's paginated list (kube_offload/runtime/informer.py) against a fake list function:
pages chained by continue tokens form one snapshot, a continue token that expired (410)
restarts the list from the first page, managedFields are stripped unless asked to be kept.
Against a real API server: tests/e2e/test_runtime_informer.py."""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException

from kube_offload.runtime.informer import Informer


class Listed:
    def __init__(self, body: dict) -> None:
        self.data = json.dumps(body).encode()


class PagedServer:
    """Serves ``count`` objects in pages of the requested limit; the continue token is the
    next offset. ``expire_once`` makes the first request with that token answer 410."""

    def __init__(self, count: int, expire_once: str | None = None) -> None:
        self.items = [
            {"metadata": {"namespace": "ns", "name": f"o{i:02d}", "resourceVersion": "7",
                          "managedFields": [{"manager": "kubectl"}]}}
            for i in range(count)
        ]
        self.requests: list[tuple[int | None, str | None]] = []
        self._expire = expire_once

    def __call__(self, **kwargs):
        limit, token = kwargs.get("limit"), kwargs.get("_continue")
        self.requests.append((limit, token))
        if token is not None and token == self._expire:
            self._expire = None
            raise ApiException(status=410, reason="Gone")
        start = int(token or 0)
        end = len(self.items) if not limit else start + limit
        meta = {"resourceVersion": "7"}
        if end < len(self.items):
            meta["continue"] = str(end)
        return Listed({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                       "items": [json.loads(json.dumps(i)) for i in self.items[start:end]]})


def test_a_list_is_requested_page_by_page_and_cached_whole():
    server = PagedServer(23)
    informer = Informer(name="t", list_func=server, page_size=10)
    assert informer._relist() == "7"
    assert server.requests == [(10, None), (10, "10"), (10, "20")]
    assert len(informer.keys()) == 23 and informer.list_count == 1
    assert all(obj["kind"] == "Pod" for obj in informer.list())


def test_an_expired_continue_token_restarts_the_list_from_the_first_page():
    server = PagedServer(23, expire_once="20")
    informer = Informer(name="t", list_func=server, page_size=10)
    events = []
    informer.add_handler(lambda kind, _old, new: events.append((kind, new["metadata"]["name"])))
    informer._relist()
    assert server.requests == [(10, None), (10, "10"), (10, "20"), (10, None), (10, "10"), (10, "20")]
    assert len(informer.keys()) == 23
    assert len(events) == 23  # the abandoned partial snapshot delivered nothing


def test_managed_fields_are_stripped_unless_kept():
    stripped = Informer(name="t", list_func=PagedServer(3))
    stripped._relist()
    assert all("managedFields" not in obj["metadata"] for obj in stripped.list())
    kept = Informer(name="t", list_func=PagedServer(3), keep_managed_fields=True)
    kept._relist()
    assert all(obj["metadata"]["managedFields"] for obj in kept.list())


def test_page_size_zero_lists_in_one_request():
    server = PagedServer(23)
    informer = Informer(name="t", list_func=server, page_size=0)
    informer._relist()
    assert server.requests == [(None, None)] and len(informer.keys()) == 23


def test_only_a_lost_history_makes_a_broken_watch_list_again():
    from kube_offload.runtime.informer import _history_lost

    assert _history_lost(410, "too old resource version: 1 (300)")
    assert _history_lost(504, "Too large resource version: 900, current: 300")
    assert not _history_lost(504, "Timeout: request did not complete")
    assert not _history_lost(500, "etcdserver: leader changed")
    assert not _history_lost(0, "Connection refused")


def test_list_page_size_flag_sets_the_page_of_informers_built_without_one(monkeypatch):
    # --list-page-size, as the vkubelet and the enforcer parse it, reaches the LIST
    # requests of every informer they build without an explicit page_size.
    import argparse

    import pytest

    from kube_offload.runtime import informer as informer_module
    from kube_offload.runtime.flags import DEFAULT_LIST_PAGE_SIZE, add_list_page_size_flag

    monkeypatch.setattr(informer_module, "_page_size", DEFAULT_LIST_PAGE_SIZE)
    parser = argparse.ArgumentParser()
    add_list_page_size_flag(parser, "vkubelet")
    assert parser.parse_args([]).list_page_size == 500
    args = parser.parse_args(["--list-page-size", "7"])
    informer_module.set_default_page_size(args.list_page_size)
    server = PagedServer(15)
    Informer(name="t", list_func=server)._relist()
    assert server.requests == [(7, None), (7, "7"), (7, "14")]
    explicit = PagedServer(15)
    Informer(name="t", list_func=explicit, page_size=10)._relist()
    assert explicit.requests == [(10, None), (10, "10")]
    with pytest.raises(SystemExit):
        parser.parse_args(["--list-page-size", "0"])
    with pytest.raises(ValueError):
        informer_module.set_default_page_size(0)
