"""HTTP/1.1 parsing and response forming of the asyncio worker, without sockets
(kube_offload/runtime/http11.py)."""

from __future__ import annotations

import io

import pytest

from kube_offload.runtime.http11 import (
    ChunkedDecoder,
    HttpError,
    body_framing,
    error_response,
    parse_head,
    response_head,
    wsgi_environ,
)

APISERVER_HEAD = (
    b"POST /mutate/pods?timeout=10s HTTP/1.1\r\n"
    b"Host: kube-offload-webhook.kube-offload.svc:443\r\n"
    b"User-Agent: kube-apiserver-admission\r\n"
    b"Content-Length: 3284\r\n"
    b"Accept: application/json, */*\r\n"
    b"Content-Type: application/json\r\n"
    b"Accept-Encoding: gzip"
)


def test_parses_what_the_apiserver_sends() -> None:
    head = parse_head(APISERVER_HEAD)
    assert (head.method, head.target, head.version) == ("POST", "/mutate/pods?timeout=10s", (1, 1))
    assert head.get("content-type") == "application/json"
    assert head.get("accept") == "application/json, */*"
    assert head.get("x-missing") is None
    framing = body_framing(head)
    assert (framing.length, framing.keep_alive, framing.expect_continue) == (3284, True, False)


def test_repeated_fields_are_joined() -> None:
    head = parse_head(b"GET / HTTP/1.1\r\nAccept: a\r\naccept: b")
    assert head.get("accept") == "a, b"


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GARBAGE", 400),
        (b"\x00\x01garbage that is not HTTP", 400),
        (b"GET  / HTTP/1.1", 400),
        (b"GET / HTTP/2.0", 505),
        (b"GET / HTTP/1.1 extra", 400),
        (b"G(T / HTTP/1.1", 400),
        (b"GET / HTTX/1.1", 400),
        (b"GET /a\x7fb HTTP/1.1", 400),
        (b"GET / HTTP/1.1\r\nNo colon here", 400),
        (b"GET / HTTP/1.1\r\nBad Name: x", 400),
        (b"GET / HTTP/1.1\r\nName : x", 400),  # whitespace before the colon
        (b"GET / HTTP/1.1\r\nA: b\r\n folded", 400),
        (b"GET / HTTP/1.1\r\nA: b\x00c", 400),
        (b"GET /" + b"a" * 5000 + b" HTTP/1.1", 414),
        (b"GET / HTTP/1.1\r\nA: " + b"b" * 9000, 431),
        (b"GET / HTTP/1.1" + b"\r\nA: b" * 101, 431),
    ],
)
def test_malformed_or_oversized_heads_are_4xx_or_505(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        parse_head(data)
    assert caught.value.status == status


def test_limits_are_the_callers() -> None:
    with pytest.raises(HttpError) as caught:
        parse_head(b"GET / HTTP/1.1\r\nA: 12345", max_field_size=5)
    assert caught.value.status == 431
    with pytest.raises(HttpError):
        parse_head(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2", max_fields=1)
    assert parse_head(b"GET / HTTP/1.1\r\nA: 1", max_fields=1).get("a") == "1"


def framing(data: bytes):
    return body_framing(parse_head(data))


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST / HTTP/1.1", 411),
        (b"PUT / HTTP/1.1", 411),
        (b"POST / HTTP/1.1\r\nContent-Length: -1", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: +5", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 0x10", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 5, 6", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", 501),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nExpect: magic", 417),
    ],
)
def test_framing_that_is_refused(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        framing(data)
    assert caught.value.status == status


def test_framing() -> None:
    assert framing(b"GET / HTTP/1.1").length == 0
    assert framing(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5").length == 5
    assert framing(b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked").length is None
    # Keep-alive: HTTP/1.1 unless "close", HTTP/1.0 only when asked.
    assert framing(b"GET / HTTP/1.1").keep_alive
    assert not framing(b"GET / HTTP/1.1\r\nConnection: Close").keep_alive
    assert not framing(b"GET / HTTP/1.0").keep_alive
    assert framing(b"GET / HTTP/1.0\r\nConnection: keep-alive").keep_alive
    assert framing(b"POST / HTTP/1.1\r\nContent-Length: 9\r\nExpect: 100-continue").expect_continue


def test_chunked_body_in_any_pieces() -> None:
    wire = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\nGET / HTTP/1.1"
    for size in (1, 2, 3, 7, len(wire)):
        decoder = ChunkedDecoder()
        out, fed = b"", 0
        while not decoder.done:
            out += decoder.feed(wire[fed:fed + size])
            fed += size
        assert out == b"Wikipedia in\r\n\r\nchunks."
        # What followed the body in the last piece fed, then the pieces not fed: the next request.
        assert decoder.rest + wire[fed:] == b"GET / HTTP/1.1"


def test_chunked_rest_is_kept_when_fed_at_once() -> None:
    decoder = ChunkedDecoder()
    assert decoder.feed(b"3\r\nabc\r\n0\r\n\r\nNEXT") == b"abc"
    assert decoder.done and decoder.rest == b"NEXT"
    with pytest.raises(ValueError):
        decoder.feed(b"more")


@pytest.mark.parametrize(
    "wire",
    [b"zz\r\nab\r\n", b"3\r\nabcX\r\n", b"1" * 20 + b"\r\n", b"3\r\nabc\r\n0\r\nno colon\r\n\r\n", b"1" * 5000],
)
def test_malformed_chunks_are_400(wire: bytes) -> None:
    with pytest.raises(HttpError) as caught:
        ChunkedDecoder().feed(wire)
    assert caught.value.status == 400


def test_environ_is_what_a_wsgi_app_expects() -> None:
    head = parse_head(APISERVER_HEAD + b"\r\nX_Underscore: dropped\r\nX-Forwarded-For: a\r\nX-Forwarded-For: b")
    body = io.BytesIO(b"{}")
    environ = wsgi_environ(head, body, content_length=2, server=("10.0.0.1", 8443), client=("10.0.0.2", 5555))
    assert environ["REQUEST_METHOD"] == "POST"
    assert environ["PATH_INFO"] == "/mutate/pods" and environ["QUERY_STRING"] == "timeout=10s"
    assert environ["SCRIPT_NAME"] == ""
    assert environ["CONTENT_LENGTH"] == "2" and environ["CONTENT_TYPE"] == "application/json"
    assert "HTTP_CONTENT_LENGTH" not in environ and "HTTP_CONTENT_TYPE" not in environ
    assert environ["HTTP_HOST"] == "kube-offload-webhook.kube-offload.svc:443"
    assert environ["HTTP_X_FORWARDED_FOR"] == "a, b"
    assert not any("UNDERSCORE" in key for key in environ)
    assert environ["SERVER_PROTOCOL"] == "HTTP/1.1" and environ["SERVER_PORT"] == "8443"
    assert environ["REMOTE_ADDR"] == "10.0.0.2" and environ["REMOTE_PORT"] == "5555"
    assert environ["wsgi.url_scheme"] == "https" and environ["wsgi.input"] is body
    assert environ["wsgi.input_terminated"] is True and environ["wsgi.multithread"] is False
    chunked = wsgi_environ(parse_head(b"POST /x%20y HTTP/1.1\r\nTransfer-Encoding: chunked"), body,
                           content_length=None, server=("", 0), client=("", 0))
    assert "CONTENT_LENGTH" not in chunked and chunked["PATH_INFO"] == "/x y"


def test_response_head_owns_framing_and_connection() -> None:
    head = response_head(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", "999"), ("Connection", "upgrade")],
        body_length=12, keep_alive=True, date="Fri, 27 Nov 2026 13:00:00 GMT",
    )
    assert head == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
        b"Date: Fri, 27 Nov 2026 13:00:00 GMT\r\nConnection: keep-alive\r\n\r\n"
    )
    assert b"Content-Length" not in response_head("204 No Content", [], body_length=0, keep_alive=False, date="d")
    with pytest.raises(ValueError):
        response_head("200 OK", [("X-Evil", "a\r\nSet-Cookie: b")], body_length=0, keep_alive=True, date="d")


def test_error_response_closes() -> None:
    response = error_response(411, "POST without Content-Length", date="d")
    assert response.startswith(b"HTTP/1.1 411 Length Required\r\n")
    assert b"Connection: close\r\n" in response
    assert response.endswith(b"\r\n\r\nPOST without Content-Length\n")
