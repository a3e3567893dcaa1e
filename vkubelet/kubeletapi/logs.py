"""``GET /containerLogs/{ns}/{pod}/{container}``: the kubelet log query mapped onto the
remote API server's ``pods/log`` and the stream relayed as it comes.

The query is the one the local apiserver builds from ``kubectl logs`` (LogLocation in
``pkg/registry/core/pod/strategy.go``): follow, previous, timestamps, sinceSeconds,
sinceTime, tailLines, limitBytes and stream; the kubelet also accepts the legacy
``tail``. All of them are passed on unchanged, so the remote kubelet applies them to the
real log exactly as the local one would have.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlencode

from kubernetes import client
from urllib3.exceptions import ReadTimeoutError

from kube_offload.runtime.kinds import PODS
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY
from kube_offload.times import parse_time
from vkubelet.kubeletapi.paths import RequestError, parse_bool, parse_int, query_value

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

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
