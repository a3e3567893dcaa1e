"""List+watch cache of one kind of object (an "informer").

One background thread lists, then watches from the list's resourceVersion:
- the list is paginated (``limit``/``continue``, ``page_size`` objects a page) so a big
  cluster never answers one huge body; a continue token that expired (410) restarts the
  list from scratch, as the pages must form one consistent snapshot;
- a watch that ends or breaks (timeout, dropped connection, server restart) is resumed from
  the last resourceVersion seen, bookmarks included; only 410 Gone (or "too large resource
  version" after a server lost its history) makes the informer list again, and the
  difference with the cache is delivered as events, so handlers never miss a deletion;
- managedFields are stripped from every cached object (they are often most of its bytes and
  no loop reads them) unless ``keep_managed_fields`` is set;
- a timer delivers every cached object again (old == new) every ``resync_seconds``, whether
  or not any watch event arrives, so level-triggered controllers re-check their world;
- named indexes (``indexers``, :meth:`Informer.add_indexer`; kube_offload/runtime/indexer.py)
  are kept in step with the cache under its lock, and are already updated when a handler
  hears of a change (watch event, relist difference): a reconcile triggered by the event
  finds the object under its new index value, never under the old one. A resync changes
  nothing, so it touches no index;
- a list or watch answered 403 (the identity may not read the kind here, e.g. a RoleBinding
  revoked) sets :attr:`Informer.forbidden` (one Warning, then quiet retries with the usual
  backoff); the next list or watch that the server accepts clears it. It does not make the
  informer synced: whoever reads it decides what a forbidden cache means
  (kube_offload/runtime/namespaced_informer.py counts it as synced and empty).

Handlers run on the informer's threads, one event at a time, and must be cheap: enqueue a
key, nothing more.

Over 400 lines on purpose: it is one state machine, the list+watch loop of one cache. The
resourceVersion it resumes from, the relist that rebuilds the store, the forbidden flag and
the resync all move under the same two locks and the same backoff, and each rule above is
about how they interleave; the parts with a life of their own already live beside it (the
store and its indexes in indexer.py, the read interface in cache.py, many namespaces in
namespaced_informer.py).
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
import time
from typing import Any, Callable, Mapping

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kube_offload.runtime.flags import DEFAULT_LIST_PAGE_SIZE
from kube_offload.runtime.indexer import IndexFunc, Indexer, TallyFunc
from kube_offload.runtime.kube import ApiError, call_json, object_key

Handler = Callable[[str, "dict[str, Any] | None", dict[str, Any]], None]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

log = logging.getLogger("kube_offload.runtime.informer")

DEFAULT_PAGE_SIZE = DEFAULT_LIST_PAGE_SIZE
# What an informer built without page_size uses: the process's --list-page-size (set once
# by the component's CLI before it builds its informers).
_page_size = DEFAULT_PAGE_SIZE


def set_default_page_size(objects: int) -> None:
    """The LIST page size of every informer built from now on without ``page_size``
    (``--list-page-size``): larger pages are fewer requests on a big cluster, smaller ones
    bound the memory one page of a LIST takes in the apiserver and here."""
    global _page_size
    if objects < 1:
        raise ValueError(f"a page holds at least 1 object, got {objects}")
    _page_size = objects


class Informer:
    def __init__(
        self,
        *,
        name: str,
        list_func: Callable[..., Any],
        list_kwargs: dict[str, Any] | None = None,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 240,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        page_size: int | None = None,
        keep_managed_fields: bool = False,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        self.name = name
        self._page_size = _page_size if page_size is None else page_size  # 0: one unpaginated LIST
        self._keep_managed_fields = keep_managed_fields
        self._list_func = list_func
        self._list_kwargs = dict(list_kwargs or {})
        self._resync_seconds = resync_seconds
        self._watch_timeout = watch_timeout_seconds
        self._transform = transform
        self._store = Indexer(indexers)
        self._lock = threading.RLock()  # guards _store and its indexes (reads are never blocked by handlers)
        # Held while the store changes and its event is delivered, and for a whole resync:
        # handlers see one event at a time, and a resync never delivers an object that a
        # concurrent watch event has just deleted (an index would resurrect it).
        self._dispatch_lock = threading.RLock()
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._resync_thread: threading.Thread | None = None
        self._response: Any = None
        self._last_resync = time.monotonic()
        # Updated on every successful list or watch event: lets a caller tell how fresh
        # its view of the API server is (the virtual node's Ready condition uses it).
        self.last_contact: float = 0.0
        # Monotonic time the last complete list arrived: the cache is at least that fresh
        # (a watch may have slept through an outage; see relist()).
        self.last_listed: float = 0.0
        self._relist_requested = threading.Event()
        # Complete lists done so far (the first one included): a watch that resumes after
        # a break does not add to it; tests and metrics read it.
        self.list_count = 0
        self._kick = threading.Event()  # cuts a backoff wait short (stop, relist)
        # The last list/watch was answered 403 (and nothing accepted since): what the
        # cache holds is not the server's truth, and an empty cache proves no absence.
        self.forbidden = False
        self.forbidden_message = ""

    # --- public API --------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        if self._resync_seconds and self._resync_seconds > 0:
            self._resync_thread = threading.Thread(
                target=self._resync_loop, name=f"informer-{self.name}-resync", daemon=True
            )
            self._resync_thread.start()

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

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._store.get(key)

    def list(self) -> builtins.list[dict[str, Any]]:
        with self._lock:
            return self._store.list()

    def keys(self) -> builtins.list[str]:
        with self._lock:
            return self._store.keys()

    # --- indexes (kube_offload/runtime/indexer.py) ------------------------------------------
    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Register index ``name`` (``obj -> values``). Best before :meth:`start`; later,
        the objects already cached are indexed at once. The same name with an equal
        function again is a no-op (loops sharing this informer); another function, an error."""
        with self._lock:
            self._store.add_indexer(name, func)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        """The cached objects found under ``value`` in index ``name`` (read only)."""
        with self._lock:
            return self._store.by_index(name, value)

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        with self._lock:
            return self._store.index_keys(name, value)

    def index_key_set(self, name: str, value: str) -> frozenset[str]:
        """The keys found under ``value`` in index ``name`` (Indexer.index_key_set)."""
        with self._lock:
            return self._store.index_key_set(name, value)

    def index_values(self, name: str) -> builtins.list[str]:
        """Every value of index ``name`` at least one cached object is found under."""
        with self._lock:
            return self._store.index_values(name)

    def add_tally(self, name: str, func: TallyFunc) -> None:
        """Register tally ``name`` (``obj -> (group, amounts)``): running sums per group,
        kept with the store before handlers run (see :meth:`Indexer.add_tally`)."""
        with self._lock:
            self._store.add_tally(name, func)

    def tally(self, name: str, group: str) -> dict[str, int]:
        """The running sums of tally ``name`` in ``group``, as of the cache right now."""
        with self._lock:
            return self._store.tally(name, group)

    # --- loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.5
        resource_version: str | None = None  # None: the cache must be rebuilt by a list
        while not self._stopped.is_set():
            try:
                if resource_version is None or self._relist_requested.is_set():
                    self._relist_requested.clear()
                    resource_version = None  # a list that fails must be tried again, not skipped
                    resource_version = self._relist()
                    backoff = 0.5
                while not self._stopped.is_set() and not self._relist_requested.is_set():
                    opened = time.monotonic()
                    resource_version, progressed = self._watch(resource_version)
                    if progressed:
                        backoff = 0.5
                    if resource_version is None:  # 410 Gone: list again
                        log.info("%s: watch history expired (410 Gone); listing again", self.name)
                        break
                    if not progressed and time.monotonic() - opened < 1.0:
                        break  # a watch that ends at once, again and again: back off, do not spin
            except _WatchBroken as broken:
                if self._stopped.is_set():
                    return
                resource_version = broken.resource_version
                if broken.progressed:
                    backoff = 0.5
                if isinstance(broken.cause, ApiError) and _history_lost(broken.cause.status, broken.cause.message):
                    resource_version = None
                if not self._relist_requested.is_set():  # not the watch relist() broke on purpose
                    cause = broken.cause
                    log.warning("%s: watch broken (%s: %s); resuming from resourceVersion %s in %.1fs",
                                self.name, type(cause).__name__, cause, resource_version, backoff)
            except ApiError as exc:
                if self._stopped.is_set():
                    return
                if _history_lost(exc.status, exc.message):
                    resource_version = None
                if exc.status == 403:
                    self._set_forbidden(exc, backoff)
                else:
                    log.warning("%s: list/watch failed (%s); retrying in %.1fs", self.name, exc, backoff)
            except Exception as exc:  # opening a watch on a dead server: many urllib3 types
                if self._stopped.is_set():
                    return
                if not self._relist_requested.is_set():
                    log.warning("%s: watch failed (%s: %s); retrying in %.1fs", self.name, type(exc).__name__, exc, backoff)
            if self._relist_requested.is_set():
                continue  # asked for a fresh list: no backoff
            self._kick.wait(backoff)
            self._kick.clear()
            backoff = min(backoff * 2, 10.0)

    def _set_forbidden(self, exc: ApiError, backoff: float) -> None:
        # Said once (a revoked grant lasts): the retries that follow are debug lines.
        if not self.forbidden:
            log.warning("%s: list/watch forbidden (HTTP 403: %s); nothing is known here until access is "
                        "granted again; retrying with backoff", self.name, exc.message)
        else:
            log.debug("%s: still forbidden (%s); retrying in %.1fs", self.name, exc.message, backoff)
        self.forbidden_message = exc.message or "forbidden"
        self.forbidden = True

    def _allowed(self) -> None:
        if self.forbidden:
            log.info("%s: access granted again", self.name)
        self.forbidden = False
        self.forbidden_message = ""

    def _list_all(self) -> dict[str, Any]:
        """One consistent snapshot, page by page: (the last page's body with every page's
        items). A continue token that expired (410) restarts from the first page."""
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    kwargs = dict(self._list_kwargs)
                    if self._page_size and self._page_size > 0:
                        kwargs["limit"] = self._page_size
                    if token:
                        kwargs["_continue"] = token
                    body = call_json(self._list_func, **kwargs)
                    self.last_contact = time.monotonic()
                    for item in body.get("items") or []:
                        items.append(self._prepare(item, body))
                    token = (body.get("metadata") or {}).get("continue")
                    if not token:
                        body["items"] = items
                        return body
            except ApiError as exc:
                if exc.status == 410 and token:
                    log.info("%s: list continue token expired after %d objects; listing again", self.name, len(items))
                    continue
                raise

    def _relist(self) -> str:
        body = self._list_all()
        self.replace(body["items"], listed_at=self.last_contact)
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def replace(self, items: builtins.list[dict[str, Any]], *, listed_at: float | None = None) -> None:
        """Make the cache ``items`` (as cached: transformed), as a list does: the store and
        its indexes first, then the difference delivered as events, then the informer is
        synced, listed at ``listed_at`` (monotonic; None: now). The list-and-watch calls it
        with each list's answer; tests feed an informer that never lists through it
        (tests/support/informers.py), as they feed watch events through :meth:`apply`."""
        listed_at = time.monotonic() if listed_at is None else listed_at
        fresh: dict[str, dict[str, Any]] = {obj_key: obj for obj_key, obj in ((object_key(o), o) for o in items)}
        with self._dispatch_lock:
            with self._lock:
                # The indexes are rebuilt with the store, before any difference is delivered.
                previous = self._store.replace(fresh)
            # Cleared once the cache holds the server's truth, not at the first page: a
            # reader must never take a half-listed cache for a readable namespace.
            self._allowed()
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
        self.list_count += 1
        self._synced.set()

    def _prepare(self, item: dict[str, Any], list_body: dict[str, Any]) -> dict[str, Any]:
        # Items of a list carry no apiVersion/kind; restore them so a cached object is
        # indistinguishable from a watched one.
        if "kind" not in item and list_body.get("kind", "").endswith("List"):
            item["kind"] = list_body["kind"][: -len("List")]
            item["apiVersion"] = list_body.get("apiVersion")
        return self._clean(item)

    def _clean(self, obj: dict[str, Any]) -> dict[str, Any]:
        if not self._keep_managed_fields:
            (obj.get("metadata") or {}).pop("managedFields", None)
        return self._transform(obj) if self._transform else obj

    def _watch(self, resource_version: str) -> tuple[str | None, bool]:
        """Watch until the stream ends; returns (the resourceVersion to resume from, or None
        when the cache must be rebuilt from a list; whether any event arrived). A broken
        stream raises :class:`_WatchBroken` carrying the last resourceVersion seen, which
        the caller resumes from."""
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
            error = ApiError.from_exception(exc)
            if _history_lost(error.status, error.message):
                return None, False
            raise error from exc
        except ApiError as error:  # a list_func of the API layer (Kube.list_func)
            if _history_lost(error.status, error.message):
                return None, False
            raise
        self._allowed()
        self._response = response
        progressed = False
        try:
            for line in iter_resp_lines(response):
                if self._stopped.is_set() or self._relist_requested.is_set():
                    return resource_version, progressed
                if not line:
                    continue
                event = json.loads(line)
                self.last_contact = time.monotonic()
                progressed = True
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code, message = int(obj.get("code") or 0), str(obj.get("message"))
                    if _history_lost(code, message):
                        return None, progressed
                    raise ApiError(code, str(obj.get("reason")), message, obj)
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":  # nothing changed, but resuming from here is cheaper
                    resource_version = new_rv or resource_version
                    continue
                self.apply(kind, self._clean(obj))
                resource_version = new_rv or resource_version
        except Exception as exc:  # a dropped connection, an ERROR event other than 410
            # Resume from what was seen, not from where this watch began.
            raise _WatchBroken(resource_version, progressed, exc) from exc
        finally:
            self._response = None
            try:
                response.close()
                response.release_conn()
            except Exception:
                pass
        return resource_version, progressed

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event (``kind`` ADDED, MODIFIED or DELETED) to the cache and its
        indexes, then deliver it to the handlers, as a watch delivers it (ADDED for an object
        already cached arrives as MODIFIED). The watch calls it; tests feed an informer that
        never lists through it (tests/support/informers.py)."""
        key = object_key(obj)
        with self._dispatch_lock:
            with self._lock:  # the store and its indexes first, then the handlers
                if kind == DELETED:
                    old = self._store.pop(key)
                else:
                    old = self._store.put(obj)
            if kind == DELETED:
                self._dispatch(DELETED, old, obj)
            else:
                self._dispatch(ADDED if old is None else MODIFIED, old, obj)

    def _resync_loop(self) -> None:
        # Its own timer: a quiet watch delivers nothing for minutes, and a resync that waits
        # for an event would never come on an idle cluster.
        while not self._stopped.wait(max(0.0, self._last_resync + self._resync_seconds - time.monotonic())):
            if time.monotonic() - self._last_resync < self._resync_seconds:
                continue
            self._last_resync = time.monotonic()
            if self._synced.is_set():
                self.resync()

    def resync(self) -> None:
        """Deliver every cached object again (MODIFIED, old == new)."""
        with self._dispatch_lock:
            for obj in self.list():
                if self._stopped.is_set():
                    return
                self._dispatch(MODIFIED, obj, obj)

    def _dispatch(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        for handler in self._handlers:
            try:
                handler(kind, old, new)
            except Exception:  # one broken handler must not stop the cache
                log.exception("%s: handler failed for %s %s", self.name, kind, object_key(new))


class _WatchBroken(Exception):
    """A watch stream that failed after it opened, with where to resume it from."""

    def __init__(self, resource_version: str, progressed: bool, cause: Exception) -> None:
        super().__init__(str(cause))
        self.resource_version = resource_version
        self.progressed = progressed
        self.cause = cause


def _history_lost(status: int, message: str | None) -> bool:
    """Whether the server can no longer serve a watch from our resourceVersion, so only a
    fresh list can rebuild the cache: 410 Gone (compacted away), or the "too large resource
    version" answer of a server whose storage lost the history we saw."""
    return status == 410 or (status == 504 and "too large resource version" in (message or "").lower())


def _rv(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")
