"""The kubelet URL paths the kube-apiserver calls, parsed (pure).

The apiserver builds them in ``pkg/registry/core/pod/strategy.go`` (LogLocation,
ExecLocation, AttachLocation): ``/containerLogs/{ns}/{pod}/{container}``,
``/exec/{ns}/{pod}/{container}``, ``/attach/{ns}/{pod}/{container}``; the kubelet also
accepts ``/exec|attach/{ns}/{pod}/{uid}/{container}`` and ``/portForward/{ns}/{pod}[/{uid}]``.
metrics-server and ``kubectl get --raw .../proxy/stats/summary`` call ``/metrics/resource``
and ``/stats/summary``; ``/pods``, ``/runningpods/`` and ``/healthz`` are read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

CONTAINER_LOGS = "containerLogs"
EXEC = "exec"
ATTACH = "attach"
PORT_FORWARD = "portForward"
HEALTHZ = "healthz"
# Resource usage (vkubelet/kubeletapi/stats.py): the Summary API and what metrics-server scrapes.
STATS_SUMMARY = "stats/summary"
METRICS_RESOURCE = "metrics/resource"
# The pods bound to the node, and those running (vkubelet/kubeletapi/podlists.py).
PODS = "pods"
RUNNING_PODS = "runningpods"


class RequestError(Exception):
    """A request we answer with an error: ``status`` is the HTTP status, ``message`` the
    text kubectl ends up printing, ``reason`` the metav1.Status reason."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or _REASONS.get(status, "InternalError")


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    429: "TooManyRequests",
    500: "InternalError",
    501: "NotImplemented",
    502: "InternalError",
    503: "ServiceUnavailable",
}


@dataclass(frozen=True)
class KubeletRequest:
    """One parsed request: which endpoint, for which pod and container."""

    endpoint: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    pod_uid: str = ""
    query: dict[str, list[str]] = field(default_factory=dict)

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod}"


def parse_request_path(raw_path: str) -> KubeletRequest:
    """Parse ``/endpoint/...?query``; RequestError(404) for paths no kubelet serves."""
    parts = urlsplit(raw_path)
    query = parse_qs(parts.query, keep_blank_values=True)
    segments = [unquote(s) for s in parts.path.split("/")[1:]]
    if segments and segments[-1] == "":
        segments = segments[:-1]  # a trailing slash
    if not segments:
        raise RequestError(404, "no such kubelet endpoint: /")
    endpoint, args = segments[0], segments[1:]
    if any(not arg for arg in args):
        raise RequestError(404, f"empty path segment in {parts.path}")
    if endpoint in (HEALTHZ, PODS, RUNNING_PODS) and not args:
        return KubeletRequest(endpoint, query=query)
    if f"{endpoint}/{'/'.join(args)}" in (STATS_SUMMARY, METRICS_RESOURCE):
        return KubeletRequest(f"{endpoint}/{args[0]}", query=query)
    if endpoint == CONTAINER_LOGS and len(args) == 3:
        return KubeletRequest(endpoint, args[0], args[1], args[2], query=query)
    if endpoint in (EXEC, ATTACH) and len(args) in (3, 4):
        if len(args) == 3:
            return KubeletRequest(endpoint, args[0], args[1], args[2], query=query)
        return KubeletRequest(endpoint, args[0], args[1], args[3], pod_uid=args[2], query=query)
    if endpoint == PORT_FORWARD and len(args) in (2, 3):
        return KubeletRequest(endpoint, args[0], args[1], pod_uid=args[2] if len(args) == 3 else "", query=query)
    raise RequestError(404, f"no such kubelet endpoint: {parts.path}")


def query_value(query: dict[str, list[str]], name: str) -> str | None:
    """The last value of a query parameter (Go's url.Values.Get takes the first; the
    apiserver never repeats these, so either is right)."""
    values = query.get(name)
    return values[0] if values else None


_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(name: str, text: str | None) -> bool | None:
    """A boolean query parameter the way Go's strconv.ParseBool reads it; None if absent."""
    if text is None:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RequestError(400, f"query parameter {name}={text!r} is not a boolean")


def parse_int(name: str, text: str | None, *, minimum: int | None = None) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text, 10)
    except ValueError:
        raise RequestError(400, f"query parameter {name}={text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise RequestError(400, f"query parameter {name}={value} must be at least {minimum}")
    return value
