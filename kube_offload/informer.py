"""List+watch cache of one kind of object (an "informer").

One background thread lists, then watches from the list's resourceVersion; a watch that
expires (410 Gone), breaks or times out is resumed or, when it must be, replaced by a fresh
list whose difference with the cache is delivered as events, so handlers never miss a
deletion. Every ``resync_seconds`` all cached objects are delivered again (old == new) so
level-triggered controllers re-check their world even when nothing changed.

Handlers run on the informer thread and must be cheap: enqueue a key, nothing more.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kube_offload.kube import ApiError, call_json, object_key

Handler = Callable[[str, "dict | None", dict], None]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

log = logging.getLogger("kube_offload.informer")


class Informer:
    def __init__(
        self,
        *,
        name: str,
        list_func: Callable[..., Any],
        list_kwargs: dict | None = None,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 240,
        transform: Callable[[dict], dict] | None = None,
    ) -> None:
        self.name = name
        self._list_func = list_func
        self._list_kwargs = dict(list_kwargs or {})
        self._resync_seconds = resync_seconds
        self._watch_timeout = watch_timeout_seconds
        self._transform = transform
        self._store: dict[str, dict] = {}
        self._lock = threading.RLock()
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._last_resync = time.monotonic()
        # Updated on every successful list or watch event: lets a caller tell how fresh
        # its view of the API server is (the virtual node's Ready condition uses it).
        self.last_contact: float = 0.0
        # Monotonic time the last complete list arrived: the cache is at least that fresh
        # (a watch may have slept through an outage; see relist()).
        self.last_listed: float = 0.0
        self._relist_requested = threading.Event()
        self._kick = threading.Event()  # cuts a backoff wait short (stop, relist)

    # --- public API --------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._kick.set()
        self._break_watch()

    def relist(self) -> None:
        """Rebuild the cache from a fresh list now (its difference delivered as events),
        e.g. when the API server answers again after an outage: a watch that survived it
        may lag, and one in backoff would wait. :attr:`last_listed` says when it is done."""
        self._relist_requested.set()
        self._kick.set()
        self._break_watch()

    def _break_watch(self) -> None:
        response = self._response
        if response is not None:
            try:
                # close() would wait for the buffer lock the reading thread holds for as
                # long as the watch is quiet; shutting the socket down wakes that reader.
                response.shutdown()
            except Exception:  # a half-dead socket may raise anything
                pass

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._store.get(key)

    def list(self) -> list[dict]:
        with self._lock:
            return list(self._store.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._store.keys())

    # --- loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.5
        while not self._stopped.is_set():
            try:
                self._relist_requested.clear()
                resource_version = self._relist()
                backoff = 0.5
                while not self._stopped.is_set() and not self._relist_requested.is_set():
                    resource_version = self._watch(resource_version)
                    if resource_version is None:
                        break  # expired: list again
                    self._maybe_resync()
            except ApiError as exc:
                if self._stopped.is_set():
                    return
                log.warning("%s: list/watch failed (%s); retrying in %.1fs", self.name, exc, backoff)
            except Exception as exc:  # a broken connection surfaces as many urllib3 types
                if self._stopped.is_set():
                    return
                if not self._relist_requested.is_set():  # not the watch relist() broke on purpose
                    log.warning("%s: watch broken (%s: %s); retrying in %.1fs", self.name, type(exc).__name__, exc, backoff)
            if self._relist_requested.is_set():
                continue  # asked for a fresh list: no backoff
            self._kick.wait(backoff)
            self._kick.clear()
            backoff = min(backoff * 2, 10.0)

    def _relist(self) -> str:
        body = call_json(self._list_func, **self._list_kwargs)
        self.last_contact = time.monotonic()
        listed_at = self.last_contact
        fresh: dict[str, dict] = {}
        for item in body.get("items") or []:
            obj = self._prepare(item, body)
            fresh[object_key(obj)] = obj
        with self._lock:
            previous = self._store
            self._store = fresh
        for key, obj in fresh.items():
            old = previous.get(key)
            if old is None:
                self._dispatch(ADDED, None, obj)
            elif _rv(old) != _rv(obj):
                self._dispatch(MODIFIED, old, obj)
        for key, old in previous.items():
            if key not in fresh:
                self._dispatch(DELETED, old, old)
        self.last_listed = listed_at
        self._synced.set()
        self._last_resync = time.monotonic()
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _prepare(self, item: dict, list_body: dict) -> dict:
        # Items of a list carry no apiVersion/kind; restore them so a cached object is
        # indistinguishable from a watched one.
        if "kind" not in item and list_body.get("kind", "").endswith("List"):
            item["kind"] = list_body["kind"][: -len("List")]
            item["apiVersion"] = list_body.get("apiVersion")
        return self._transform(item) if self._transform else item

    def _watch(self, resource_version: str) -> str | None:
        """Watch until timeout; returns the resourceVersion to resume from, or None when
        the cache must be rebuilt from a list."""
        kwargs = dict(self._list_kwargs)
        kwargs.update(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(5.0, self._watch_timeout + 15),
        )
        try:
            response = self._list_func(**kwargs)
        except ApiException as exc:
            if exc.status == 410:
                return None
            raise ApiError.from_exception(exc) from exc
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stopped.is_set() or self._relist_requested.is_set():
                    return resource_version
                if not line:
                    continue
                event = json.loads(line)
                self.last_contact = time.monotonic()
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("reason")), str(obj.get("message")), obj)
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    resource_version = new_rv or resource_version
                    continue
                obj = self._transform(obj) if self._transform else obj
                self._apply(kind, obj)
                resource_version = new_rv or resource_version
                if time.monotonic() - self._last_resync >= self._resync_seconds:
                    self._maybe_resync()
        finally:
            self._response = None
            try:
                response.close()
                response.release_conn()
            except Exception:
                pass
        return resource_version

    def _apply(self, kind: str, obj: dict) -> None:
        key = object_key(obj)
        with self._lock:
            old = self._store.get(key)
            if kind == DELETED:
                self._store.pop(key, None)
            else:
                self._store[key] = obj
        if kind == DELETED:
            self._dispatch(DELETED, old, obj)
        else:
            self._dispatch(ADDED if old is None else MODIFIED, old, obj)

    def _maybe_resync(self) -> None:
        if time.monotonic() - self._last_resync < self._resync_seconds:
            return
        self._last_resync = time.monotonic()
        for obj in self.list():
            self._dispatch(MODIFIED, obj, obj)

    def _dispatch(self, kind: str, old: dict | None, new: dict) -> None:
        for handler in self._handlers:
            try:
                handler(kind, old, new)
            except Exception:  # one broken handler must not stop the cache
                log.exception("%s: handler failed for %s %s", self.name, kind, object_key(new))


def _rv(obj: dict) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")
