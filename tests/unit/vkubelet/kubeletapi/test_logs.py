"""Kubelet paths and the containerLogs query -> remote pods/log mapping (pure parts)."""

from urllib.parse import urlencode

import pytest

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi import logs
from vkubelet.kubeletapi.paths import (
    ATTACH,
    CONTAINER_LOGS,
    EXEC,
    HEALTHZ,
    PORT_FORWARD,
    RequestError,
    parse_bool,
    parse_request_path,
)


# --- paths ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, endpoint, namespace, pod, container, uid",
    [
        ("/containerLogs/demo/web/app", CONTAINER_LOGS, "demo", "web", "app", ""),
        ("/containerLogs/demo/web/app/", CONTAINER_LOGS, "demo", "web", "app", ""),
        ("/exec/demo/web/app?command=ls&output=1", EXEC, "demo", "web", "app", ""),
        ("/exec/demo/web/0c2c-uid/app", EXEC, "demo", "web", "app", "0c2c-uid"),
        ("/attach/demo/web/app", ATTACH, "demo", "web", "app", ""),
        ("/portForward/demo/web", PORT_FORWARD, "demo", "web", "", ""),
        ("/healthz", HEALTHZ, "", "", "", ""),
        ("/containerLogs/demo/web/my%2Dapp", CONTAINER_LOGS, "demo", "web", "my-app", ""),
    ],
)
def test_paths_the_apiserver_sends_are_parsed(path, endpoint, namespace, pod, container, uid):
    request = parse_request_path(path)
    assert (request.endpoint, request.namespace, request.pod, request.container, request.pod_uid) == (
        endpoint,
        namespace,
        pod,
        container,
        uid,
    )


def test_repeated_query_parameters_are_kept_in_order():
    request = parse_request_path("/exec/demo/web/app?command=sh&command=-c&command=echo+a+b&output=1")
    assert request.query["command"] == ["sh", "-c", "echo a b"]
    assert request.pod_key == "demo/web"


@pytest.mark.parametrize(
    "path",
    ["/", "/containerLogs/demo/web", "/containerLogs/demo//app", "/exec/demo", "/stats/other", "/metrics/cadvisor", "/pods/demo", "/healthz/x"],
)
def test_other_paths_are_404(path):
    with pytest.raises(RequestError) as info:
        parse_request_path(path)
    assert info.value.status == 404


@pytest.mark.parametrize("text, value", [("true", True), ("1", True), ("T", True), ("false", False), ("0", False), (None, None)])
def test_booleans_read_like_go_parsebool(text, value):
    assert parse_bool("follow", text) is value


def test_a_non_boolean_is_a_400_naming_the_parameter():
    with pytest.raises(RequestError, match="follow") as info:
        parse_bool("follow", "yes")
    assert info.value.status == 400


# --- log query ------------------------------------------------------------------------------
def _query(**params):
    return parse_request_path("/containerLogs/demo/web/app?" + urlencode(params)).query


def test_no_options_maps_to_the_container_only():
    query = logs.parse_log_query({})
    assert query == logs.LogQuery()
    assert logs.remote_log_params(query, "app") == [("container", "app")]


def test_every_option_the_apiserver_sends_is_passed_on():
    query = logs.parse_log_query(
        _query(follow="true", previous="true", timestamps="true", tailLines="10", limitBytes="500", sinceSeconds="60", stream="All")
    )
    assert logs.remote_log_params(query, "app") == [
        ("container", "app"),
        ("follow", "true"),
        ("previous", "true"),
        ("timestamps", "true"),
        ("tailLines", "10"),
        ("sinceSeconds", "60"),
        ("limitBytes", "500"),
        ("stream", "All"),
    ]


def test_since_time_is_passed_on_verbatim():
    query = logs.parse_log_query(_query(sinceTime="2026-11-22T10:00:00Z"))
    assert ("sinceTime", "2026-11-22T10:00:00Z") in logs.remote_log_params(query, "app")


def test_false_flags_are_left_out():
    query = logs.parse_log_query(_query(follow="false", timestamps="0"))
    assert logs.remote_log_params(query, "c") == [("container", "c")]


def test_tail_zero_is_kept():
    assert ("tailLines", "0") in logs.remote_log_params(logs.parse_log_query(_query(tailLines="0")), "c")


@pytest.mark.parametrize("tail, expected", [("5", 5), ("all", None)])
def test_legacy_tail_parameter(tail, expected):
    assert logs.parse_log_query(_query(tail=tail)).tail_lines == expected


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"tailLines": "-1"}, "at least 0"),
        ({"tailLines": "ten"}, "not an integer"),
        ({"limitBytes": "0"}, "at least 1"),
        ({"sinceSeconds": "0"}, "at least 1"),
        ({"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"}, "at most one"),
        ({"sinceTime": "yesterday"}, "RFC 3339"),
        ({"stream": "Both"}, "must be one of"),
        ({"stream": "Stderr", "tailLines": "3"}, "tailLines"),
        ({"follow": "maybe"}, "not a boolean"),
    ],
)
def test_invalid_queries_are_400_with_a_reason(params, fragment):
    with pytest.raises(RequestError, match=fragment) as info:
        logs.parse_log_query(_query(**params))
    assert info.value.status == 400


# --- remote errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "status, expected_status, fragment",
    [
        (400, 400, 'container "app" in pod "web" is waiting to start'),
        (404, 404, "not found"),
        (403, 500, "may not read logs in remote cluster remote-1"),
        (401, 500, "may not read logs"),
        (0, 503, "remote cluster remote-1 is unreachable"),
        (500, 502, "remote cluster remote-1 failed"),
        (429, 429, "retry later"),
    ],
)
def test_remote_errors_map_to_codes_whose_message_kubectl_shows(status, expected_status, fragment):
    message = {400: 'container "app" in pod "web" is waiting to start: ContainerCreating'}.get(status, "pods \"web\" not found" if status == 404 else "boom")
    error = logs.remote_error(ApiError(status, "X", message), cluster_id="remote-1", remote_pod="demo-local/web")
    assert error.status == expected_status
    assert fragment in error.message


def test_a_pod_state_error_names_the_remote_pod():
    error = logs.remote_error(ApiError(400, "BadRequest", "previous terminated container \"app\" not found"), cluster_id="r", remote_pod="ns-l/web")
    assert error.message == 'previous terminated container "app" not found (remote cluster r, pod ns-l/web)'


def test_error_body_parsing_prefers_the_status_message():
    err = ApiError.from_response(400, b'{"kind":"Status","message":"container is waiting","reason":"BadRequest"}', "Bad Request")
    assert (err.status, err.reason, err.message) == (400, "BadRequest", "container is waiting")
    plain = ApiError.from_response(502, b"upstream broke\n", "Bad Gateway")
    assert (plain.reason, plain.message) == ("Bad Gateway", "upstream broke")
    empty = ApiError.from_response(503, b"", "Service Unavailable")
    assert empty.message == "Service Unavailable"


def test_iter_chunks_relays_each_read_and_stops_when_asked():
    class Raw:
        def __init__(self, parts):
            self.parts = list(parts)

        def read1(self, _amt):
            return self.parts.pop(0) if self.parts else b""

    assert list(logs.iter_chunks(Raw([b"a\n", b"b\n"]), stopped=lambda: False)) == [b"a\n", b"b\n"]
    assert list(logs.iter_chunks(Raw([b"a\n"]), stopped=lambda: True)) == []


def test_a_followed_log_idle_past_its_timeout_is_recognised():
    # --kubelet-stream-idle-timeout is the followed log's read timeout; its expiry ends the
    # stream cleanly (logs.serve_logs), other errors end it truncated.
    import socket

    from urllib3.exceptions import ProtocolError, ReadTimeoutError

    assert logs.is_read_timeout(ReadTimeoutError(None, "/log", "Read timed out."))
    assert logs.is_read_timeout(socket.timeout("timed out"))
    assert not logs.is_read_timeout(ProtocolError("Connection broken"))
