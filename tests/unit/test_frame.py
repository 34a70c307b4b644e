"""Frames and commands: encoding, both header types, the incremental decoder, malformed input."""

from __future__ import annotations

import contextlib
import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketflow.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG, ROCKETMQ_VERSION, RemotingCommand
from rocketflow.remoting.errors import (
    FrameTooLargeError,
    MalformedFrameError,
    MalformedHeaderError,
    ProtocolError,
)
from rocketflow.remoting.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    decode_frame,
    encode_binary_header,
    encode_frame,
    encode_json_header,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)

commands = st.builds(
    RemotingCommand,
    code=int16,
    language=st.sampled_from(list(LanguageCode)),
    version=int16,
    opaque=int32,
    flag=st.sampled_from([0, RESPONSE_FLAG, ONEWAY_FLAG, RESPONSE_FLAG | ONEWAY_FLAG]),
    remark=st.none() | text.filter(bool),
    ext_fields=st.dictionaries(text, text, max_size=8),
    body=st.binary(max_size=300),
)


def frame_of(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    words = struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header))
    return words + header + body


# --------------------------------------------------------------------------- encoding facts


def test_json_header_is_written_the_way_fastjson_writes_it() -> None:
    command = RemotingCommand(
        code=105, language=LanguageCode.JAVA, opaque=3, ext_fields={"topic": "TopicTest"}
    )
    assert encode_json_header(command) == (
        b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":3,'
        b'"serializeTypeCurrentRPC":"JSON","version":399}'
    )


def test_json_header_keeps_remark_and_empty_ext_fields() -> None:
    command = RemotingCommand(code=1, remark="boom", flag=RESPONSE_FLAG, language=LanguageCode.JAVA)
    header = orjson.loads(encode_json_header(command))
    assert list(header) == sorted(header)
    assert header["remark"] == "boom"
    assert header["extFields"] == {}


def test_frame_length_words() -> None:
    frame = encode_frame(RemotingCommand(code=10, body=b"xyz"))
    length, word = struct.unpack_from(">iI", frame)
    assert length == len(frame) - 4
    assert word >> 24 == SerializeType.JSON
    assert (word & 0xFFFFFF) == len(frame) - 8 - 3
    binary = encode_frame(RemotingCommand(code=10), SerializeType.ROCKETMQ)
    assert binary[4] == SerializeType.ROCKETMQ


def test_binary_header_sizes_match_rocketmq() -> None:
    # RocketMQ's binary header: fixed part 21 bytes; a 13-byte remark adds 13; one pair key/value adds 14.
    assert len(encode_binary_header(RemotingCommand(code=1))) == 21
    assert len(encode_binary_header(RemotingCommand(code=1, remark="Sample Remark"))) == 34
    assert len(encode_binary_header(RemotingCommand(code=1, ext_fields={"key": "value"}))) == 35


def test_request_defaults_and_response_matching() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    other = RemotingCommand.request(RequestCode.PULL_MESSAGE)
    assert request.opaque != other.opaque
    assert request.version == ROCKETMQ_VERSION and not request.is_response and not request.is_oneway
    response = request.make_response(ResponseCode.PULL_NOT_FOUND, remark="OFFSET_OVERFLOW_ONE")
    assert response.opaque == request.opaque and response.is_response
    assert response.code_name == "PULL_NOT_FOUND"
    assert RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True).is_oneway


# --------------------------------------------------------------------------- round trips


@given(commands)
def test_json_round_trip(command: RemotingCommand) -> None:
    assert decode_frame(encode_frame(command)) == command


@given(commands)
def test_binary_round_trip(command: RemotingCommand) -> None:
    assert decode_frame(encode_frame(command, SerializeType.ROCKETMQ)) == command


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands, min_size=1, max_size=6), st.data())
def test_incremental_decoder_any_split(batch: list[RemotingCommand], data: st.DataObject) -> None:
    serialize_types = st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])
    stream = b"".join(encode_frame(c, data.draw(serialize_types)) for c in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    decoded: list[RemotingCommand] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        # bytes as reads deliver them (decoded in place when nothing is held back), or other buffers
        piece = data.draw(st.sampled_from([bytes, bytearray, memoryview]))(stream[start:cut])
        decoded += decoder.feed(piece)
        start = cut
    assert decoded == batch
    assert decoder.buffered == 0


# --------------------------------------------------------------------------- tolerance


def test_json_decoding_tolerates_real_client_quirks() -> None:
    # Numbers and booleans as ext-field values (ali-ons), trailing newline (C++ client), unknown keys.
    header = (
        b'{"code":14,"extFields":{"queueId":0,"commitOffset":-1,"unitMode":false,"ratio":0.5,"none":null},'
        b'"flag":0,"language":"CPP","opaque":7,"remark":"","someFutureKey":{"a":1},"version":63}\n'
    )
    command = decode_frame(frame_of(header))
    assert command.code == RequestCode.QUERY_CONSUMER_OFFSET
    assert command.ext_fields == {"queueId": "0", "commitOffset": "-1", "unitMode": "false", "ratio": "0.5"}
    assert command.language == LanguageCode.CPP and command.version == 63 and command.opaque == 7


def test_missing_optional_header_fields_take_java_defaults() -> None:
    command = decode_frame(frame_of(b'{"code":105}'))
    assert (command.flag, command.opaque, command.ext_fields, command.remark) == (0, 0, {}, None)
    assert command.language == LanguageCode.JAVA


def test_unknown_language_name_maps_to_other() -> None:
    command = decode_frame(frame_of(b'{"code":105,"language":"COBOL"}'))
    assert command.language == LanguageCode.OTHER


# --------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (struct.pack(">i", 2) + b"ab", MalformedFrameError),
        (struct.pack(">i", -5), MalformedFrameError),
        (struct.pack(">i", DEFAULT_MAX_FRAME_SIZE), FrameTooLargeError),
        (struct.pack(">iI", 8, 100) + b"abcd", MalformedFrameError),
        (frame_of(b"{not json"), MalformedHeaderError),
        (frame_of(b"[1,2]"), MalformedHeaderError),
        (frame_of(b'{"flag":0}'), MalformedHeaderError),
        (frame_of(b'{"code":"abc"}'), MalformedHeaderError),
        (frame_of(b'{"code":1,"extFields":[1]}'), MalformedHeaderError),
        (frame_of(b"\x00\x01", serialize_type=1), MalformedHeaderError),
        (frame_of(b"{}", serialize_type=7), MalformedHeaderError),
        (frame_of(b"\xff\xfe{}"), MalformedHeaderError),
    ],
)
def test_malformed_frames_raise_specific_protocol_errors(frame: bytes, error: type[ProtocolError]) -> None:
    with pytest.raises(error):
        FrameDecoder().feed(frame)


def test_max_frame_size_is_a_setting() -> None:
    frame = encode_frame(RemotingCommand(code=10, body=b"x" * 1000))
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_size=500).feed(frame)
    assert len(FrameDecoder(max_frame_size=2000).feed(frame)) == 1


def test_good_frames_before_a_bad_one_are_not_lost() -> None:
    good = encode_frame(RemotingCommand(code=34, opaque=1))
    decoder = FrameDecoder()
    decoded = decoder.feed(good + good + frame_of(b"{broken"))
    assert [c.opaque for c in decoded] == [1, 1]
    assert isinstance(decoder.error, MalformedHeaderError)
    with pytest.raises(MalformedHeaderError):
        decoder.feed(good)


def test_binary_header_lengths_beyond_the_header_are_rejected() -> None:
    header = bytearray(encode_binary_header(RemotingCommand(code=1, remark="hi", ext_fields={"k": "v"})))
    struct.pack_into(">i", header, 13, 1000)  # remark length
    with pytest.raises(MalformedHeaderError):
        FrameDecoder().feed(frame_of(bytes(header), serialize_type=1))


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 20)
    with contextlib.suppress(ProtocolError):
        decoder.feed(data)


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(commands, st.sampled_from(list(SerializeType)), st.data())
def test_mutated_frames_only_ever_raise_protocol_error(
    command: RemotingCommand, serialize_type: SerializeType, data: st.DataObject
) -> None:
    frame = bytearray(encode_frame(command, serialize_type))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
    decoder = FrameDecoder(max_frame_size=1 << 20)
    with contextlib.suppress(ProtocolError):
        decoder.feed(bytes(frame))
