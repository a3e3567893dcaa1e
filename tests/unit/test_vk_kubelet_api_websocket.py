"""RFC 6455 framing and handshake of the kubelet API's WebSocket (vkubelet/kubeletapi/websocket.py).

Byte strings marked "RFC 6455 5.7" are the examples of that section, so the encoder and
the parser are checked against the standard, not against each other only."""

import pytest

from vkubelet.kubeletapi import websocket as ws


# --- handshake ------------------------------------------------------------------------------
def test_accept_key_is_the_rfc_example():
    # RFC 6455 section 1.3.
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def _handshake(**overrides):
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-Websocket-Version": "13",  # Go's canonical spelling
        "Sec-Websocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    headers.update(overrides)
    return {k: v for k, v in headers.items() if v is not None}


def test_a_valid_handshake_has_no_problem_whatever_the_header_case():
    assert ws.handshake_problem("GET", _handshake()) is None
    lowered = {k.lower(): v for k, v in _handshake().items()}
    assert ws.handshake_problem("GET", lowered) is None
    assert ws.client_key(lowered) == "dGhlIHNhbXBsZSBub25jZQ=="


@pytest.mark.parametrize(
    "method, overrides, fragment",
    [
        ("POST", {}, "must be a GET"),
        ("GET", {"Upgrade": "SPDY/3.1"}, "not a WebSocket upgrade"),
        ("GET", {"Connection": "keep-alive"}, "not a WebSocket upgrade"),
        ("GET", {"Sec-Websocket-Version": "8"}, "version 13"),
        ("GET", {"Sec-Websocket-Key": "not base64!"}, "16 bytes"),
        ("GET", {"Sec-Websocket-Key": "c2hvcnQ="}, "16 bytes"),
        ("GET", {"Sec-Websocket-Key": None}, "16 bytes"),
    ],
)
def test_invalid_handshakes_say_why(method, overrides, fragment):
    assert fragment in ws.handshake_problem(method, _handshake(**overrides))


def test_connection_header_may_list_several_tokens():
    assert ws.is_websocket_request(_handshake(Connection="keep-alive, Upgrade"))


def test_spdy_upgrade_is_an_upgrade_but_not_a_websocket():
    headers = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    assert ws.is_upgrade_request(headers)
    assert not ws.is_websocket_request(headers)


def test_protocols_are_read_from_repeated_comma_separated_headers_in_client_order():
    offered = ws.offered_protocols(["v5.channel.k8s.io, v4.channel.k8s.io", "v3.channel.k8s.io,v4.channel.k8s.io"])
    assert offered == ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"]


def test_the_clients_preference_wins_among_supported_protocols():
    supported = ("v5.channel.k8s.io", "v4.channel.k8s.io")
    assert ws.choose_protocol(["v4.channel.k8s.io", "v5.channel.k8s.io"], supported) == "v4.channel.k8s.io"
    assert ws.choose_protocol(["channel.k8s.io", "v5.channel.k8s.io"], supported) == "v5.channel.k8s.io"
    assert ws.choose_protocol(["base64.channel.k8s.io"], supported) is None


def test_handshake_response_accepts_with_the_chosen_protocol():
    response = ws.handshake_response("dGhlIHNhbXBsZSBub25jZQ==", "v5.channel.k8s.io").decode()
    assert response.startswith("HTTP/1.1 101 Switching Protocols\r\n")
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in response
    assert "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n" in response
    assert response.endswith("\r\n\r\n")


# --- frames: the RFC's own examples -----------------------------------------------------------
HELLO_UNMASKED = bytes([0x81, 0x05, 0x48, 0x65, 0x6C, 0x6C, 0x6F])
HELLO_MASKED = bytes([0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58])


def test_encode_matches_rfc_examples():
    assert ws.encode_frame(ws.OP_TEXT, b"Hello") == HELLO_UNMASKED
    assert ws.encode_frame(ws.OP_TEXT, b"Hello", mask_key=bytes([0x37, 0xFA, 0x21, 0x3D])) == HELLO_MASKED
    assert ws.encode_frame(ws.OP_PING, b"Hello") == bytes([0x89, 0x05]) + b"Hello"
    assert ws.encode_frame(ws.OP_BINARY, bytes(256))[:4] == bytes([0x82, 0x7E, 0x01, 0x00])
    assert ws.encode_frame(ws.OP_BINARY, bytes(65536))[:10] == bytes([0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0])


def test_parse_rfc_examples_on_each_side():
    server = ws.FrameParser(expect_masked=True)
    server.feed(HELLO_MASKED)
    assert server.next_frame() == ws.Frame(ws.OP_TEXT, b"Hello", True)
    client = ws.FrameParser(expect_masked=False)
    client.feed(HELLO_UNMASKED)
    assert client.next_frame() == ws.Frame(ws.OP_TEXT, b"Hello", True)


def test_fragmented_rfc_example_is_reassembled():
    parser = ws.FrameParser(expect_masked=False)
    parser.feed(bytes([0x01, 0x03, 0x48, 0x65, 0x6C]) + bytes([0x80, 0x02, 0x6C, 0x6F]))
    assembler = ws.MessageAssembler()
    first = assembler.add(parser.next_frame())
    second = assembler.add(parser.next_frame())
    assert first is None
    assert second == ws.Message(ws.OP_TEXT, b"Hello")


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 200_000])
def test_round_trip_every_length_encoding_fed_in_pieces(size):
    payload = bytes(i % 251 for i in range(size))
    data = ws.encode_frame(ws.OP_BINARY, payload, mask_key=b"\x01\x02\x03\x04")
    parser = ws.FrameParser(expect_masked=True)
    # Everything but the last byte, in small pieces: no frame comes out early.
    body, last = data[:-1], data[-1:]
    step = max(1, len(body) // 7)
    for start in range(0, len(body), step):
        parser.feed(body[start : start + step])
        assert parser.next_frame() is None
    parser.feed(last)
    assert parser.next_frame() == ws.Frame(ws.OP_BINARY, payload, True)
    assert parser.buffered() == 0


def test_two_frames_in_one_read_come_out_one_by_one():
    parser = ws.FrameParser(expect_masked=False)
    parser.feed(ws.encode_frame(ws.OP_BINARY, b"\x01out") + ws.encode_frame(ws.OP_BINARY, b"\x02err") + b"\x82")
    assert parser.next_frame().payload == b"\x01out"
    assert parser.next_frame().payload == b"\x02err"
    assert parser.next_frame() is None
    assert parser.buffered() == 1


def test_mask_is_its_own_inverse_and_matches_a_bytewise_xor():
    key = b"\xa1\xb2\xc3\xd4"
    data = bytes(range(256)) * 3
    masked = ws.mask_bytes(key, data)
    assert masked == bytes(b ^ key[i % 4] for i, b in enumerate(data))
    assert ws.mask_bytes(key, masked) == data
    assert ws.mask_bytes(key, b"") == b""


def test_mask_keys_are_random():
    assert len({ws.new_mask_key() for _ in range(20)}) > 1


# --- protocol errors ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expect_masked, data, fragment",
    [
        (True, HELLO_UNMASKED, "must be masked"),
        (False, HELLO_MASKED, "must not be masked"),
        (False, bytes([0xC1, 0x00]), "reserved bits"),
        (False, bytes([0x83, 0x00]), "unknown opcode"),
        (False, bytes([0x89, 0x7E, 0x00, 0x80]) + bytes(128), "at most 125"),
        (False, bytes([0x09, 0x00]), "cannot be fragmented"),
        (False, bytes([0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0]), "most significant bit"),
    ],
)
def test_protocol_violations_are_refused(expect_masked, data, fragment):
    parser = ws.FrameParser(expect_masked=expect_masked)
    parser.feed(data)
    with pytest.raises(ws.ProtocolError, match=fragment) as info:
        parser.next_frame()
    assert info.value.close_code == ws.CLOSE_PROTOCOL_ERROR


def test_oversized_frames_are_refused_before_they_are_buffered():
    parser = ws.FrameParser(expect_masked=False, max_payload=1000)
    parser.feed(bytes([0x82, 0x7E, 0x10, 0x00]))  # announces 4096 bytes, sends none
    with pytest.raises(ws.ProtocolError) as info:
        parser.next_frame()
    assert info.value.close_code == ws.CLOSE_TOO_BIG


def test_assembler_refuses_bad_fragment_sequences():
    with pytest.raises(ws.ProtocolError, match="without a message"):
        ws.MessageAssembler().add(ws.Frame(ws.OP_CONTINUATION, b"x", True))
    assembler = ws.MessageAssembler()
    assembler.add(ws.Frame(ws.OP_BINARY, b"a", False))
    with pytest.raises(ws.ProtocolError, match="before the previous one"):
        assembler.add(ws.Frame(ws.OP_BINARY, b"b", True))
    big = ws.MessageAssembler(max_message=3)
    big.add(ws.Frame(ws.OP_BINARY, b"ab", False))
    with pytest.raises(ws.ProtocolError):
        big.add(ws.Frame(ws.OP_CONTINUATION, b"cd", True))


def test_control_frames_pass_between_fragments():
    assembler = ws.MessageAssembler()
    assert assembler.add(ws.Frame(ws.OP_BINARY, b"\x01ab", False)) is None
    assert assembler.add(ws.Frame(ws.OP_PING, b"p", True)) == ws.Message(ws.OP_PING, b"p")
    assert assembler.add(ws.Frame(ws.OP_CONTINUATION, b"cd", True)) == ws.Message(ws.OP_BINARY, b"\x01abcd")


def test_encoder_refuses_invalid_control_frames():
    with pytest.raises(ValueError):
        ws.encode_frame(ws.OP_PING, bytes(126))
    with pytest.raises(ValueError):
        ws.encode_frame(ws.OP_CLOSE, b"", fin=False)


# --- close payloads ------------------------------------------------------------------------------
def test_close_payload_round_trip_and_reserved_codes():
    assert ws.decode_close_payload(ws.encode_close_payload(1000, "bye")) == (1000, "bye")
    assert ws.encode_close_payload(ws.CLOSE_NO_STATUS) == b""
    assert ws.encode_close_payload(ws.CLOSE_ABNORMAL) == b""
    assert ws.decode_close_payload(b"") == (ws.CLOSE_NO_STATUS, "")
    assert len(ws.encode_close_payload(1000, "x" * 500)) == 125
    with pytest.raises(ws.ProtocolError):
        ws.decode_close_payload(b"\x03")
