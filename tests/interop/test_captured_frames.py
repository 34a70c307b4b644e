"""Every request frame two real RocketMQ 4.x clients sent (ali-ons 3.12.0 and the C++ client behind
``rocketmq`` 0.4.4, captured in tests/data/captured) must decode: frame -> command -> typed header ->
body. The frame bytes are rebuilt the way each client writes its JSON header (key order, value types,
the C++ client's trailing newline); the rebuild is checked byte-exact against the raw first frames.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketflow.protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    HeartbeatData,
    LockBatchRequestBody,
    MessageModel,
    UnlockBatchRequestBody,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import LanguageCode, RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import FrameDecoder, decode_frame
from rocketflow.remoting.headers import (
    REQUEST_HEADERS,
    FieldKind,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    decode_send_header,
)

INTEROP_DIR = Path(__file__).resolve().parents[1] / "data" / "captured"


#: Request codes seen in the captures that we deliberately do not decode, with the reason.
#: Every other captured code must have a handler below (see test_every_captured_code_is_handled).
UNSUPPORTED_CODES: dict[int, str] = {}

Record = dict[str, Any]


def _frame_files() -> list[Path]:
    files = sorted(INTEROP_DIR.glob("*/frames_*.jsonl"))
    assert files, f"no captured client frames under {INTEROP_DIR}"
    return files


def _records() -> list[tuple[str, Record]]:
    result = []
    for path in _frame_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                result.append((f"{path.parent.name}/{path.stem}:{number}", json.loads(line)))
    return result


RECORDS = _records()


# --------------------------------------------------------------------------- rebuilding the client's bytes


def _header_json(record: Record) -> bytes:
    """The JSON header as the client wrote it (key order and value types from the capture)."""
    if record["lang"] == "CPP":
        # the C++ client (jsoncpp): keys sorted, always an empty remark, a trailing newline
        header = {
            "code": record["code"],
            "extFields": record["extFields"],
            "flag": record["flag"],
            "language": record["lang"],
            "opaque": record["opaque"],
            "remark": "",
            "version": record["version"],
        }
        suffix = b"\n"
    else:
        # ali-ons: insertion order, numbers and booleans left as JSON numbers/booleans in extFields
        header = {
            "code": record["code"],
            "language": record["lang"],
            "opaque": record["opaque"],
            "flag": record["flag"],
            "version": record["version"],
            "extFields": record["extFields"],
        }
        suffix = b""
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + suffix


def _body(record: Record) -> bytes:
    return b"" if record["body"] is None else record["body"].encode("utf-8")


def rebuild_frame(record: Record) -> bytes:
    assert record["ser"] == "JSON"
    header = _header_json(record)
    body = _body(record)
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def _java_string(value: Any) -> str:
    """What Java's extFields map holds for a JSON value the client sent."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- oracles


def _expected_header_value(kind: FieldKind, raw: Any) -> Any:
    if kind is FieldKind.STRING:
        return raw
    if kind is FieldKind.BOOL:
        return raw if isinstance(raw, bool) else str(raw).lower() == "true"
    return raw if isinstance(raw, int) else int(raw)


def _check_typed_header(record: Record, command: RemotingCommand) -> Any:
    """Decode with the code's header class and compare every declared field with the capture."""
    cls = REQUEST_HEADERS[record["code"]]
    header = cls.from_command(command)
    ext = record["extFields"]
    for spec in cls.header_fields():
        actual = getattr(header, spec.attr)
        if spec.wire in ext:
            assert actual == _expected_header_value(spec.kind, ext[spec.wire]), spec.wire
        else:
            assert not spec.required, spec.wire
    return header


_CONSUME_TYPES = ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"]
_MESSAGE_MODELS = ["BROADCASTING", "CLUSTERING"]
_CONSUME_FROM = [
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
]


def _enum_name(raw: Any, names: list[str]) -> str:
    return names[raw] if isinstance(raw, int) else str(raw)


# --------------------------------------------------------------------------- per-code handlers


def _check_route(record: Record, command: RemotingCommand) -> None:
    header = _check_typed_header(record, command)
    assert header.topic in ("TopicTest", "%RETRY%g1", "TBW102")
    assert command.body == b""


def _check_send_v1(record: Record, command: RemotingCommand) -> None:
    header = _check_typed_header(record, command)
    assert isinstance(header, SendMessageRequestHeader)
    assert decode_send_header(command) == header
    assert header.topic == "TopicTest" and header.producer_group == "g1" and header.default_topic == "TBW102"
    assert header.unit_mode is False and header.batch is False  # the C++ client sends "0"
    assert header.properties is not None and "TAGS\x01TagA" in header.properties
    assert command.body == _body(record)


def _check_send_v2(record: Record, command: RemotingCommand) -> None:
    header = _check_typed_header(record, command)
    assert isinstance(header, SendMessageRequestHeaderV2)
    v1 = decode_send_header(command)
    assert v1 == header.to_v1()
    ext = record["extFields"]
    assert (v1.producer_group, v1.topic, v1.default_topic) == (ext["a"], ext["b"], ext["c"])
    assert (v1.queue_id, v1.born_timestamp, v1.properties) == (ext["e"], ext["g"], ext["i"])
    assert v1.unit_mode is ext["k"]
    assert command.body == _body(record)


def _check_plain_header(record: Record, command: RemotingCommand) -> None:
    _check_typed_header(record, command)
    assert command.body == b""


def _check_pull(record: Record, command: RemotingCommand) -> None:
    header = _check_typed_header(record, command)
    assert header.consumer_group == "g1"
    assert header.max_msg_nums == 32
    assert header.suspend_timeout_millis >= 0


def _check_heartbeat(record: Record, command: RemotingCommand) -> None:
    assert record["code"] not in REQUEST_HEADERS
    heartbeat = HeartbeatData.decode(command.body)
    raw = json.loads(record["body"])
    assert heartbeat.client_id == raw["clientID"]
    assert [p.group_name for p in heartbeat.producer_data_set] == [
        p["groupName"] for p in raw.get("producerDataSet", [])
    ]
    assert len(heartbeat.consumer_data_set) == len(raw["consumerDataSet"])
    for consumer, raw_consumer in zip(heartbeat.consumer_data_set, raw["consumerDataSet"], strict=True):
        assert consumer.group_name == raw_consumer["groupName"]
        assert isinstance(consumer.consume_type, ConsumeType)
        assert consumer.consume_type.name == _enum_name(raw_consumer["consumeType"], _CONSUME_TYPES)
        assert isinstance(consumer.message_model, MessageModel)
        assert consumer.message_model.name == _enum_name(raw_consumer["messageModel"], _MESSAGE_MODELS)
        assert isinstance(consumer.consume_from_where, ConsumeFromWhere)
        assert consumer.consume_from_where.name == _enum_name(raw_consumer["consumeFromWhere"], _CONSUME_FROM)
        assert consumer.unit_mode is raw_consumer.get("unitMode", False)
        raw_subs = raw_consumer.get("subscriptionDataSet", [])
        assert len(consumer.subscription_data_set) == len(raw_subs)
        for sub, raw_sub in zip(consumer.subscription_data_set, raw_subs, strict=True):
            assert sub.topic == raw_sub["topic"]
            assert sub.sub_string == raw_sub["subString"]
            assert sub.sub_version == int(raw_sub["subVersion"])
            assert sub.tags_set == set(raw_sub.get("tagsSet", []))
            assert sub.code_set == set(raw_sub.get("codeSet", []))
            assert sub.expression_type == raw_sub.get("expressionType", "TAG")


def _check_lock_body(body_type: type[LockBatchRequestBody] | type[UnlockBatchRequestBody]) -> Callable[..., None]:
    def check(record: Record, command: RemotingCommand) -> None:
        assert record["code"] not in REQUEST_HEADERS
        body = body_type.decode(command.body)
        raw = json.loads(record["body"])
        assert body.client_id == raw["clientId"]
        assert body.consumer_group == raw["consumerGroup"]
        assert body.mq_set == {MessageQueue(q["topic"], q["brokerName"], q["queueId"]) for q in raw["mqSet"]}
        assert len(body.mq_set) == len(raw["mqSet"])

    return check


HANDLERS: dict[int, Callable[[Record, RemotingCommand], None]] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _check_route,
    RequestCode.SEND_MESSAGE: _check_send_v1,
    RequestCode.SEND_MESSAGE_V2: _check_send_v2,
    RequestCode.PULL_MESSAGE: _check_pull,
    RequestCode.QUERY_CONSUMER_OFFSET: _check_plain_header,
    RequestCode.UPDATE_CONSUMER_OFFSET: _check_plain_header,
    RequestCode.GET_MAX_OFFSET: _check_plain_header,
    RequestCode.UNREGISTER_CLIENT: _check_plain_header,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _check_plain_header,
    RequestCode.HEART_BEAT: _check_heartbeat,
    RequestCode.LOCK_BATCH_MQ: _check_lock_body(LockBatchRequestBody),
    RequestCode.UNLOCK_BATCH_MQ: _check_lock_body(UnlockBatchRequestBody),
}


# --------------------------------------------------------------------------- tests


def test_captures_are_present() -> None:
    assert {path.parent.name for path in _frame_files()} == {"ali-ons", "cpp-client"}
    assert len(RECORDS) > 350


def test_every_captured_code_is_handled() -> None:
    captured = {record["code"] for _, record in RECORDS}
    unhandled = captured - set(HANDLERS) - set(UNSUPPORTED_CODES)
    assert not unhandled, f"captured request codes without a decoder check: {sorted(unhandled)}"
    assert all(reason for reason in UNSUPPORTED_CODES.values())


@pytest.mark.parametrize(("frame_id", "record"), RECORDS, ids=[frame_id for frame_id, _ in RECORDS])
def test_captured_frame_decodes(frame_id: str, record: Record) -> None:
    if record["code"] in UNSUPPORTED_CODES:
        pytest.skip(f"code {record['code']} unsupported: {UNSUPPORTED_CODES[record['code']]}")
    decoder = FrameDecoder()
    commands = decoder.feed(rebuild_frame(record))
    assert len(commands) == 1 and decoder.buffered == 0
    (command,) = commands
    assert command.code == record["code"]
    assert command.flag == record["flag"] and not command.is_response
    assert command.language is LanguageCode[record["lang"]]
    assert command.version == record["version"]
    assert command.opaque == record["opaque"]
    assert command.remark == ("" if record["lang"] == "CPP" else None)
    assert command.ext_fields == {key: _java_string(value) for key, value in record["extFields"].items()}
    assert command.body == _body(record)
    HANDLERS[record["code"]](record, command)


@pytest.mark.parametrize("path", _frame_files(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_whole_session_streams_through_one_decoder(path: Path) -> None:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    stream = b"".join(rebuild_frame(record) for record in records)
    decoder = FrameDecoder()
    commands = []
    position = 0
    sizes = [1, 3, 17, 250, 4096]
    index = 0
    while position < len(stream):
        size = sizes[index % len(sizes)]
        commands += decoder.feed(stream[position : position + size])
        position += size
        index += 1
    assert decoder.buffered == 0
    assert [(c.code, c.opaque) for c in commands] == [(r["code"], r["opaque"]) for r in records]


# --------------------------------------------------------------------------- raw first frames


_HEX_LINE = re.compile(r"^([0-9a-fA-F]{8})(?:\s+(.*))?$")


def parse_hexdump(text: str) -> bytes:
    """Bytes from ``hexdump -C``-style lines: offset, up to 16 hex bytes, then an ASCII column."""
    data = bytearray()
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _HEX_LINE.match(line)
        assert match is not None, f"not a hexdump line: {line!r}"
        assert int(match.group(1), 16) == len(data), f"offset mismatch in {line!r}"
        rest = match.group(2) or ""
        hex_part = re.split(r"\s{2,}", rest.strip("|"), maxsplit=1)[0]
        tokens = hex_part.split()
        assert 0 < len(tokens) <= 16 or not rest
        data += bytes(int(token, 16) for token in tokens)
    return bytes(data)


HEX_FILES = sorted(INTEROP_DIR.glob("*/first_frame_producer.hex"))


@pytest.mark.parametrize("path", HEX_FILES, ids=lambda path: path.parent.name)
def test_first_frame_hex_decodes_and_matches_the_rebuild(path: Path) -> None:
    raw = parse_hexdump(path.read_text(encoding="ascii"))
    command = decode_frame(raw)
    assert command.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert command.ext_fields["topic"] == "TopicTest"
    assert command.body == b""
    header = REQUEST_HEADERS[command.code].from_command(command)
    assert header == REQUEST_HEADERS[command.code].from_ext_fields({"topic": "TopicTest"})
    (length,) = struct.unpack_from(">i", raw)
    assert length == len(raw) - 4
    # the first captured frame of the producer session, rebuilt from the jsonl, is byte-identical
    records = [json.loads(line) for line in (path.parent / "frames_producer.jsonl").read_text().splitlines()]
    first = records[0]
    assert rebuild_frame(first) == raw
    if first["lang"] == "CPP":
        assert command.language is LanguageCode.CPP and command.version == 63 and command.opaque == 0
        assert command.remark == ""
        assert raw.endswith(b"}\n")
        assert set(command.ext_fields) == {"AccessKey", "OnsChannel", "Signature", "topic"}
    else:
        assert command.language is LanguageCode.JAVA and command.version == 121 and command.opaque == 1
        assert command.remark is None
        assert command.ext_fields == {"topic": "TopicTest"}


def test_parse_hexdump_checks_offsets() -> None:
    assert parse_hexdump("00000000  41 42  AB\n00000002  43  C\n") == b"ABC"
    with pytest.raises(AssertionError):
        parse_hexdump("00000000  41 42  AB\n00000005  43  C\n")
