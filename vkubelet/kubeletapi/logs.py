"""``GET /containerLogs/{ns}/{pod}/{container}``: the kubelet log query mapped onto the
remote API server's ``pods/log`` and the stream relayed as it comes: the query mapping
(pure) and the endpoint's relay, which :mod:`vkubelet.kubeletapi.handler` calls.

The query is the one the local apiserver builds from ``kubectl logs`` (LogLocation in
``pkg/registry/core/pod/strategy.go``): follow, previous, timestamps, sinceSeconds,
sinceTime, tailLines, limitBytes and stream; the kubelet also accepts the legacy
``tail``. All of them are passed on unchanged, so the remote kubelet applies them to the
real log exactly as the local one would have.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import urlencode

from kubernetes import client
from urllib3.exceptions import ReadTimeoutError

from kube_offload.runtime.kinds import PODS
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY
from kube_offload.times import parse_time
from vkubelet.kubeletapi.paths import KubeletRequest, RequestError, parse_bool, parse_int, query_value

if TYPE_CHECKING:
    from vkubelet.kubeletapi.handler import KubeletRequestHandler
    from vkubelet.kubeletapi.server import KubeletApi

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

HANGUP_POLL_MS = 500
_POLL_HANGUP = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR

LOG_STREAMS = ("All", "Stdout", "Stderr")
# Connect quickly or fail; a followed log may stay silent for hours, so no read timeout
# then. Without follow the remote kubelet answers at once: a read stuck for minutes means
# a dead connection.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT_WITHOUT_FOLLOW = 120.0
CHUNK = 64 * 1024


@dataclass(frozen=True)
class LogQuery:
    """``v1.PodLogOptions`` as the kubelet receives it (minus the container, in the path)."""

    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: str | None = None
    limit_bytes: int | None = None
    stream: str | None = None


def parse_log_query(query: dict[str, list[str]]) -> LogQuery:
    """Read and validate the query (the checks of ValidatePodLogOptions, so a bad value
    is refused here with a message rather than by the remote side)."""
    tail_text = query_value(query, "tailLines")
    legacy_tail = query_value(query, "tail")
    if legacy_tail:
        # The kubelet's backwards compatibility: ``tail=N`` is tailLines, ``tail=all`` none.
        tail_text = None if legacy_tail == "all" else legacy_tail
    since_time = query_value(query, "sinceTime") or None
    if since_time is not None:
        try:
            parse_time(since_time)
        except ValueError:
            raise RequestError(400, f"query parameter sinceTime={since_time!r} is not an RFC 3339 time") from None
    stream = query_value(query, "stream") or None
    result = LogQuery(
        follow=bool(parse_bool("follow", query_value(query, "follow"))),
        previous=bool(parse_bool("previous", query_value(query, "previous"))),
        timestamps=bool(parse_bool("timestamps", query_value(query, "timestamps"))),
        tail_lines=parse_int("tailLines", tail_text, minimum=0),
        since_seconds=parse_int("sinceSeconds", query_value(query, "sinceSeconds"), minimum=1),
        since_time=since_time,
        limit_bytes=parse_int("limitBytes", query_value(query, "limitBytes"), minimum=1),
        stream=stream,
    )
    if result.since_seconds is not None and result.since_time is not None:
        raise RequestError(400, "at most one of sinceSeconds and sinceTime may be given")
    if stream is not None and stream not in LOG_STREAMS:
        raise RequestError(400, f"stream={stream!r} must be one of {', '.join(LOG_STREAMS)}")
    if stream not in (None, "All") and result.tail_lines is not None:
        raise RequestError(400, "tailLines cannot be combined with stream other than All")
    return result


def remote_log_params(query: LogQuery, container: str) -> list[tuple[str, str]]:
    """Query parameters of the remote ``GET .../pods/{name}/log``: only what is set, in
    the API's spelling (what ``read_namespaced_pod_log`` sends, plus sinceTime, which
    the Python client's generated method cannot send: it is missing from its OpenAPI)."""
    params: list[tuple[str, str]] = [("container", container)]
    for name, value in (
        ("follow", query.follow),
        ("previous", query.previous),
        ("timestamps", query.timestamps),
    ):
        if value:
            params.append((name, "true"))
    for name, number in (
        ("tailLines", query.tail_lines),
        ("sinceSeconds", query.since_seconds),
        ("limitBytes", query.limit_bytes),
    ):
        if number is not None:
            params.append((name, str(number)))
    if query.since_time is not None:
        params.append(("sinceTime", query.since_time))
    if query.stream is not None:
        params.append(("stream", query.stream))
    return params


def remote_error(exc: ApiError, *, cluster_id: str, remote_pod: str) -> RequestError:
    """What to answer when the remote API server refused or failed.

    The local apiserver passes the body of a 400 or 500 to kubectl as the message
    (GenericHttpResponseChecker); other codes become a generic message. So errors the
    user should read travel as 400 (the pod's state: container waiting, no previous
    instance...) or 500 (our side: credentials, remote cluster down)."""
    where = f"(remote cluster {cluster_id}, pod {remote_pod})"
    if exc.status == 0:
        return RequestError(503, f"remote cluster {cluster_id} is unreachable: {exc.message}")
    if exc.status in (401, 403):
        return RequestError(
            500, f"the virtual kubelet may not read logs in remote cluster {cluster_id}: {exc.message}"
        )
    if exc.status == 404:
        return RequestError(404, f"{exc.message} {where}")
    if exc.status == 429:
        return RequestError(429, f"remote cluster {cluster_id} asks to retry later: {exc.message}")
    if exc.status >= 500:
        return RequestError(502, f"remote cluster {cluster_id} failed: {exc.message} {where}")
    return RequestError(400, f"{exc.message} {where}")


def open_remote_log(
    api_client: client.ApiClient,
    namespace: str,
    pod: str,
    params: list[tuple[str, str]],
    *,
    follow: bool,
    connect_timeout: float = CONNECT_TIMEOUT,
    idle_timeout: float = 0.0,
) -> Any:
    """Start ``GET /api/v1/namespaces/{ns}/pods/{pod}/log`` on the remote API server and
    return the urllib3 response, unread; ApiError if it did not answer 2xx.

    Through the API layer (auth, TLS, proxy settings of the kubeconfig, the API
    metrics), with every parameter (sinceTime) allowed. Tried once: the client asking
    for the log hears the remote's answer and may ask again."""
    # A followed log: the read timeout is the idle timeout (no new line for that long
    # ends it; 0: never), see is_read_timeout.
    timeout = (connect_timeout, idle_timeout or None) if follow else (connect_timeout, READ_TIMEOUT_WITHOUT_FOLLOW)
    path = PODS.path(namespace=namespace, name=pod, subresource="log") + (f"?{urlencode(params)}" if params else "")
    return Kube(api_client, retry=NO_RETRY).request("GET", path, timeout=timeout, stream=True, accept="text/plain, */*")


def iter_chunks(raw: Any, *, stopped: Callable[[], bool]) -> Iterator[bytes]:
    """The response body as it arrives (``read1``: whatever is there, without waiting
    for a full buffer, so a followed log line is relayed the moment it is written)."""
    while not stopped():
        data = raw.read1(CHUNK)
        if not data:
            return
        yield data


def is_read_timeout(exc: BaseException) -> bool:
    """A read of the remote log timed out (urllib3 raises its own ReadTimeoutError, or a
    bare socket timeout, depending on where the read stood)."""
    return isinstance(exc, (ReadTimeoutError, socket.timeout, TimeoutError))


# --- the endpoint --------------------------------------------------------------------------
@dataclass
class LogStream:
    raw: Any  # urllib3 response of the remote pods/log, unread
    description: str


def open_logs(app: KubeletApi, request: KubeletRequest) -> LogStream:
    """Resolve the pod and open its remote ``pods/log``; a refusal there is the answer."""
    query = parse_log_query(request.query)
    target = app.resolve(request)
    params = remote_log_params(query, request.container)
    try:
        raw = open_remote_log(
            app.remote,
            target.namespace,
            target.name,
            params,
            follow=query.follow,
            connect_timeout=app.limits.remote_connect_timeout,
            idle_timeout=app.limits.stream_idle_timeout,
        )
    except ApiError as exc:
        raise remote_error(exc, cluster_id=app.cluster_id, remote_pod=str(target)) from exc
    return LogStream(raw, f"logs {request.pod_key}/{request.container} -> {app.cluster_id}:{target}")


def serve_logs(handler: KubeletRequestHandler, request: KubeletRequest) -> None:
    """Answer ``containerLogs``: the remote ``pods/log`` relayed as a chunked response
    while it comes, until it ends, the client hangs up or the server stops."""
    stream = open_logs(handler.server.app, request)
    raw = stream.raw
    hung_up = threading.Event()
    done = threading.Event()
    complete = False

    def close_upstream() -> None:
        hung_up.set()
        shutdown_response(raw)

    token = handler.server.register_closer(close_upstream)
    watcher = threading.Thread(
        target=watch_hangup, args=(handler.connection, done, close_upstream), name="kubelet-api-hangup", daemon=True
    )
    try:
        handler.connection.settimeout(None)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; charset=utf-8")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Cache-Control", "no-cache, private")
        handler.end_headers()
        watcher.start()
        log.debug("kubelet API: %s: streaming", stream.description)
        chunks = iter_chunks(raw, stopped=hung_up.is_set)
        while True:
            try:
                chunk = next(chunks, None)
            except Exception as exc:  # the remote stream broke, or we shut it down
                if is_read_timeout(exc):
                    # --kubelet-stream-idle-timeout: no new line for that long. A clean
                    # end, as the kubelet ends an idle stream.
                    log.info("kubelet API: %s: closed: idle for %gs", stream.description, handler.server.app.limits.stream_idle_timeout)
                    break
                if not hung_up.is_set():
                    log.info("kubelet API: %s: remote stream ended with an error: %s", stream.description, exc)
                # No final chunk: the client must see a truncated stream, not a clean end.
                handler.close_connection = True
                return
            if chunk is None:
                break
            # An OSError here means the client went away: handled below.
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if hung_up.is_set():
            handler.close_connection = True
            return
        complete = True
        handler.wfile.write(b"0\r\n\r\n")
    except OSError as exc:  # the client went away while we wrote
        log.debug("kubelet API: %s: client gone: %s", stream.description, exc)
        handler.close_connection = True
    finally:
        done.set()
        handler.server.unregister_closer(token)
        try:
            if not complete:
                raw.close()  # an interrupted stream's connection must not be reused
            raw.release_conn()
        except Exception:
            pass
        log.debug("kubelet API: %s: ended%s", stream.description, " (client hung up)" if hung_up.is_set() else "")


def watch_hangup(conn: socket.socket, done: threading.Event, on_hangup: Callable[[], None]) -> None:
    """Call ``on_hangup`` when the client closes its side of the connection while a
    log is being relayed: a followed log of a quiet container would otherwise keep the
    remote stream open until its next line. Polls for hang-up only (POLLRDHUP), never
    reads, so the TLS object is left to the thread that writes."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), _POLL_HANGUP)
    except (OSError, ValueError):
        return
    while not done.is_set():
        try:
            events = poller.poll(HANGUP_POLL_MS)
        except OSError:
            return
        if events and not done.is_set():
            on_hangup()
            return


def shutdown_response(raw: Any) -> None:
    """Interrupt a read blocked on the remote response (urllib3 >= 2.3: shutdown())."""
    shutdown = getattr(raw, "shutdown", None)
    try:
        if shutdown is not None:
            shutdown()
        else:
            raw.release_conn()
    except Exception:
        pass
