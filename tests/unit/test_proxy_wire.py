"""The gRPC endpoint's hand-written answers (rocketflow.proxy.wire) parse to exactly what the protobuf
objects of rocketflow.proxy.convert and the generated classes make."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.proxy import convert, wire

texts = st.text(min_size=1, max_size=40).filter(lambda text: text.strip() == text and " " not in text)
millis = st.one_of(st.just(0), st.integers(0, 999), st.integers(0, 4_000_000_000_000).map(lambda ms: ms - ms % 1000),
                   st.integers(0, 4_000_000_000_000))


@st.composite
def stored_messages(draw: st.DrawFn) -> MessageExt:
    properties: dict[str, str] = {}
    if draw(st.booleans()):
        properties[MessageConst.TAGS] = draw(st.one_of(st.just(""), texts))
    if draw(st.booleans()):
        properties[MessageConst.KEYS] = " ".join(draw(st.lists(texts, max_size=3)))
    if draw(st.booleans()):
        properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = draw(st.one_of(st.just(""), texts))
    kind = draw(st.sampled_from(["normal", "fifo", "delay", "transaction", "delay-text"]))
    if kind == "fifo":
        properties[convert.MESSAGE_GROUP_PROPERTY] = draw(st.one_of(st.just(""), texts))
    elif kind == "delay":
        properties[convert.DELIVER_MS_PROPERTY] = str(draw(millis))
    elif kind == "delay-text":  # not a time: no delivery timestamp
        properties[convert.DELIVER_MS_PROPERTY] = draw(texts.filter(lambda text: not text.isdigit()))
    elif kind == "transaction":
        properties[MessageConst.TRANSACTION_PREPARED] = draw(st.sampled_from(["true", "false"]))
    if draw(st.booleans()):
        properties["TRACE_CONTEXT"] = draw(st.one_of(st.just(""), texts))
    properties["WAIT"] = "true"
    for key, value in draw(st.dictionaries(texts, st.text(max_size=200), max_size=4)).items():
        properties.setdefault(key, value)
    body = draw(st.one_of(st.binary(max_size=300), st.just(b"y" * 20_000)))
    return MessageExt("topic-a", body, properties=properties, queue_id=draw(st.integers(-1, 300)),
                      queue_offset=draw(st.integers(0, 1 << 40)), commit_log_offset=draw(st.integers(0, 1 << 40)),
                      born_timestamp=draw(millis), store_timestamp=draw(millis),
                      born_host=(draw(st.sampled_from(["", "127.0.0.1", "10.1.2.3"])), 1234),
                      reconsume_times=draw(st.integers(0, 5)))


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(stored_messages(), min_size=1, max_size=3), topic=texts,
       store_host=st.sampled_from(["", "127.0.0.1:10911"]), invisible_ms=st.one_of(st.none(), millis),
       handle=st.text(max_size=150), attempt=st.integers(1, 300))
def test_a_received_message_parses_to_what_incoming_builds(messages: list[MessageExt], topic: str, store_host: str,
                                                            invisible_ms: int | None, handle: str,
                                                            attempt: int) -> None:
    encoder = wire.ReceiveEncoder(topic, store_host=store_host, invisible_ms=invisible_ms)
    for message in messages:  # one encoder for several messages, as a receive uses it
        expected = spb.ReceiveMessageResponse(message=convert.incoming(
            message, topic=topic, receipt_handle=handle, attempt=attempt, invisible_ms=invisible_ms,
            store_host=store_host))
        assert spb.ReceiveMessageResponse.FromString(encoder.encode(message, handle, attempt)) == expected


def test_the_bench_message_is_byte_for_byte_what_protobuf_writes() -> None:
    properties = {MessageConst.TAGS: "T", MessageConst.KEYS: "k1", MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "7F00",
                  "WAIT": "true"}
    message = MessageExt("bench", b"x" * 100, properties=properties, queue_id=3, queue_offset=1234,
                         born_timestamp=1_700_000_000_123, store_timestamp=1_700_000_000_456,
                         born_host=("127.0.0.1", 5555))
    encoded = wire.ReceiveEncoder("bench", store_host="127.0.0.1:10911", invisible_ms=60_000).encode(message, "h", 1)
    assert encoded == spb.ReceiveMessageResponse(message=convert.incoming(
        message, topic="bench", receipt_handle="h", attempt=1, invisible_ms=60_000,
        store_host="127.0.0.1:10911")).SerializeToString()
    assert hashlib.md5(message.body).hexdigest().upper().encode() in encoded


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.text(max_size=40), st.text(max_size=120), st.integers(0, 100_000),
                                  st.text(max_size=60)), min_size=1, max_size=40),
       overall=st.tuples(st.integers(0, 100_000), st.text(max_size=60)))
def test_ack_responses_and_statuses(entries: list[tuple[str, str, int, str]], overall: tuple[int, str]) -> None:
    encoded = wire.ack_response(wire.status(*overall), [(message_id, handle, wire.status(code, text))
                                                         for message_id, handle, code, text in entries])
    expected = spb.AckMessageResponse(status=pb.Status(code=overall[0], message=overall[1]), entries=[  # type: ignore[arg-type]
        spb.AckMessageResultEntry(message_id=message_id, receipt_handle=handle,
                                  status=pb.Status(code=code, message=text))  # type: ignore[arg-type]
        for message_id, handle, code, text in entries])
    assert spb.AckMessageResponse.FromString(encoded) == expected
    assert pb.Status(code=pb.OK, message="OK").SerializeToString() == wire.STATUS_OK


def test_varints_match_protobuf() -> None:
    for value in (0, 1, 127, 128, 300, 16_383, 16_384, (1 << 31) - 1, (1 << 63) - 1, -1, -(1 << 31)):
        assert spb.ReceiveMessageRequest.FromString(b"\x20" + wire.varint(value)).batch_size == \
            (value + (1 << 31)) % (1 << 32) - (1 << 31)
