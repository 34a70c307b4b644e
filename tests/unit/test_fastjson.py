"""fastjson dialect: exact output for the bodies' shapes as Java writes them, round trips, and fuzzed parsing."""

from __future__ import annotations

import contextlib
import math
from enum import Enum, IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.errors import BodyDecodeError
from rocketflow.remoting.fastjson import MAX_DEPTH, ObjectKey, _dumps_python, dumps, java_double, loads

MQ_A0 = MessageQueue("T", "broker-a", 0)


# --------------------------------------------------------------------------- exact output


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}},
            '{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}',
        ),
        (
            {"offsetTable": {MessageQueue("t", "b", 0): 5}},
            '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:5}}',
        ),
        (
            {
                "consumeTps": 0.0,
                "offsetTable": {
                    MQ_A0: {"brokerOffset": 120, "consumerOffset": 100, "lastTimestamp": 1650000000000}
                },
            },
            '{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
            '{"brokerOffset":120,"consumerOffset":100,"lastTimestamp":1650000000000}}}',
        ),
        ({"offsetTable": {"TopicTest@g": {0: 123, 1: 98}}}, '{"offsetTable":{"TopicTest@g":{0:123,1:98}}}'),
        ({"offsetTable": {1: 0, 3: 27}}, '{"offsetTable":{1:0,3:27}}'),
        ({"a": None, "b": 1, "c": {"d": None}}, '{"b":1,"c":{}}'),
        ({"flag": True, "other": False, "list": [None, 1]}, '{"flag":true,"other":false,"list":[null,1]}'),
        (
            {-1: "neg", ObjectKey({"x": 1}): [MQ_A0]},
            '{-1:"neg",{"x":1}:[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}',
        ),
        ({"tps": 1e7, "small": 1e-5}, '{"tps":1.0E7,"small":1.0E-5}'),
        ({"s": 'q"\\\n\x01é'}, '{"s":"q\\"\\\\\\n\\u0001é"}'),
        ((1, 2), "[1,2]"),
        ({"k": {3, 1}}, None),  # set order is Python's; only checked to be a valid array below
    ],
)
def test_dumps_exact(value: Any, expected: str | None) -> None:
    encoded = dumps(value)
    if expected is None:
        assert sorted(loads(encoded)["k"]) == [1, 3]
        return
    assert encoded.decode() == expected
    assert _dumps_python(value, pretty=False).decode() == expected


class Color(Enum):
    RED = "red-value"


class Number(IntEnum):
    SEVEN = 7


def test_enums_are_written_by_name_but_int_enums_as_numbers() -> None:
    assert dumps({"c": Color.RED, "n": Number.SEVEN, Number.SEVEN: 1}) == b'{"c":"RED","n":7,7:1}'


def test_dumps_rejects_unsupported_types() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})
    with pytest.raises(TypeError):
        dumps({(1, 2): "tuple keys are not JSON"})


def test_lone_surrogate_is_escaped_not_crashing() -> None:
    encoded = dumps({"s": "a\ud800b"})
    assert encoded == b'{"s":"a\\ud800b"}'
    assert loads(encoded) == {"s": "a\ufffdb"}


# --------------------------------------------------------------------------- pretty format (config files)


def test_pretty_bean_maps_use_tabs_and_no_space_after_colon() -> None:
    # topics.json as the broker writes it
    value = {
        "dataVersion": {"counter": 3, "timestamp": 1622907213314},
        "topicConfigTable": {
            "TopicTest": {
                "order": False,
                "perm": 6,
                "readQueueNums": 4,
                "topicFilterType": "SINGLE_TAG",
                "topicName": "TopicTest",
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
        },
    }
    expected = (
        "{\n"
        '\t"dataVersion":{\n'
        '\t\t"counter":3,\n'
        '\t\t"timestamp":1622907213314\n'
        "\t},\n"
        '\t"topicConfigTable":{\n'
        '\t\t"TopicTest":{\n'
        '\t\t\t"order":false,\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"TopicTest",\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )
    assert dumps(value, pretty=True).decode() == expected


def test_pretty_numeric_keys_stay_on_one_line() -> None:
    # consumerOffset.json: entries of an Integer-keyed map are not broken onto new lines
    value = {"offsetTable": {"TopicTest@g": {0: 0, 1: 1, 2: 0, 3: 0}, "%RETRY%g@g": {0: 0}}}
    expected = (
        "{\n"
        '\t"offsetTable":{\n'
        '\t\t"TopicTest@g":{0:0,1:1,2:0,3:0\n'
        "\t\t},\n"
        '\t\t"%RETRY%g@g":{0:0\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )
    assert dumps(value, pretty=True).decode() == expected


def test_pretty_object_keys_are_indented_beans() -> None:
    # a broadcasting client's offsets.json
    value = {
        "offsetTable": {
            MessageQueue("TopicTest", "broker-a", 3): 1470,
            MessageQueue("TopicTest", "broker-a", 2): 1471,
        }
    }
    expected = (
        "{\n"
        '\t"offsetTable":{{\n'
        '\t\t\t"brokerName":"broker-a",\n'
        '\t\t\t"queueId":3,\n'
        '\t\t\t"topic":"TopicTest"\n'
        "\t\t}:1470,{\n"
        '\t\t\t"brokerName":"broker-a",\n'
        '\t\t\t"queueId":2,\n'
        '\t\t\t"topic":"TopicTest"\n'
        "\t\t}:1471\n"
        "\t}\n"
        "}"
    )
    assert dumps(value, pretty=True).decode() == expected


def test_pretty_lists_break_only_with_two_or_more_items() -> None:
    assert (
        dumps({"a": [1], "b": [], "c": {}}, pretty=True).decode() == '{\n\t"a":[1],\n\t"b":[],\n\t"c":{}\n}'
    )
    assert dumps({"a": [1, 2]}, pretty=True).decode() == '{\n\t"a":[\n\t\t1,\n\t\t2\n\t]\n}'


# --------------------------------------------------------------------------- Java doubles


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (100.0, "100.0"),
        (0.1, "0.1"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (123.456, "123.456"),
        (-2.5, "-2.5"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (1.5e16, "1.5E16"),
        (1e22, "1.0E22"),
        (2.5e-10, "2.5E-10"),
        (math.nan, "null"),
        (math.inf, "null"),
    ],
)
def test_java_double(value: float, expected: str) -> None:
    assert java_double(value) == expected


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_java_double_round_trips(value: float) -> None:
    text = java_double(value)
    assert float(text) == value
    assert "." in text


# --------------------------------------------------------------------------- reading


def test_loads_fastjson_quirks() -> None:
    parsed = loads(
        b'{"brokerAddrs":{0:"a",1:"b",-2:"c"},"q":{{"brokerName":"b","queueId":0,"topic":"t"}:{"x":1}}}\n'
    )
    assert parsed["brokerAddrs"] == {0: "a", 1: "b", -2: "c"}
    (key,) = parsed["q"]
    assert isinstance(key, ObjectKey)
    assert key.as_dict() == {"brokerName": "b", "queueId": 0, "topic": "t"}
    assert key == ObjectKey({"topic": "t", "queueId": 0, "brokerName": "b"})
    assert parsed["q"][key] == {"x": 1}


def test_loads_standard_json_and_whitespace() -> None:
    assert loads(' \n{"a": [1, 2.5, true, null, "x"], "0": 1}\n\n') == {
        "a": [1, 2.5, True, None, "x"],
        "0": 1,
    }
    assert loads("[]") == []
    assert loads(bytearray(b"{}")) == {}
    assert loads(memoryview(b"7")) == 7


def test_object_key_is_immutable_and_hashable() -> None:
    key = ObjectKey({"a": {"b": [1, {"c": 2}]}, "z": 1})
    assert hash(key) == hash(ObjectKey({"z": 1, "a": {"b": [1, {"c": 2}]}}))
    assert {key: 1}[ObjectKey({"z": 1, "a": {"b": [1, {"c": 2}]}})] == 1
    assert key != ObjectKey({"z": 2, "a": {"b": [1, {"c": 2}]}})
    assert key != {"z": 1}
    assert key["z"] == 1 and len(key) == 2 and set(key) == {"a", "z"}
    thawed = key.as_dict()
    thawed["z"] = 5
    thawed["a"]["b"].append(3)
    assert key.as_dict() == {"a": {"b": [1, {"c": 2}]}, "z": 1}
    with pytest.raises(TypeError):
        key["z"] = 3  # type: ignore[index]
    with pytest.raises(KeyError):
        key["missing"]


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"   ",
        b"{",
        b'{"a":}',
        b"{0:}",
        b"{0 1}",
        b"[1,]",
        b"[1 2]",
        b'{"a" 1}',
        b'{"a":1,}',
        b"{tru:1}",
        b"{[1]:2}",
        b"nul",
        b"01",
        b"-",
        b"1.",
        b'"unterminated',
        b'"bad \\x escape"',
        b"\xff\xfe",
        b'{"a":1} trailing',
        b"{0:1}}",
        b"{" + b"{0:" * (MAX_DEPTH + 5),
        b"{0:" * (MAX_DEPTH + 5) + b"1" + b"}" * (MAX_DEPTH + 5),
        b"{0:1e999}",
    ],
)
def test_malformed_input_raises_body_decode_error_with_position(bad: bytes) -> None:
    with pytest.raises(BodyDecodeError) as info:
        loads(bad)
    message = str(info.value)
    assert "position" in message or "byte" in message


def test_error_message_points_at_the_problem() -> None:
    with pytest.raises(BodyDecodeError, match=r"position 10 \(line 2, column 3\)"):
        loads(b'{0:"a",\n  x}')


# --------------------------------------------------------------------------- properties

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_queues = st.builds(MessageQueue, st.text(max_size=8), st.text(max_size=8), st.integers(-5, 1000))
_keys = st.text(max_size=10) | st.integers(min_value=-(2**63), max_value=2**63 - 1) | _queues


def _values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4)


_documents = st.recursive(_scalars | _queues, _values, max_leaves=25)


def _normalise(value: Any) -> Any:
    """What a fastjson round trip gives back: object keys as ObjectKey, beans as dicts, no nulls in maps."""
    if isinstance(value, MessageQueue):
        return value.to_json_dict()
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            if item is None:
                continue
            if isinstance(key, MessageQueue):
                key = ObjectKey(key.to_json_dict())
            result[key] = _normalise(item)
        return result
    if isinstance(value, list | tuple):
        return [_normalise(item) for item in value]
    return value


@settings(max_examples=300)
@given(_documents)
def test_round_trip_compact_and_pretty(document: Any) -> None:
    expected = _normalise(document)
    assert loads(dumps(document)) == expected
    assert loads(dumps(document, pretty=True)) == expected


_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300)
@given(_plain)
def test_fast_path_output_equals_python_writer(document: Any) -> None:
    assert dumps(document) == _dumps_python(document, pretty=False)


@given(st.dictionaries(st.integers(-1000, 1000), st.integers()), st.dictionaries(_queues, st.integers()))
def test_int_and_queue_keyed_maps_round_trip(
    int_map: dict[int, int], queue_map: dict[MessageQueue, int]
) -> None:
    document = {"ints": int_map, "queues": queue_map}
    decoded = loads(dumps(document))
    assert decoded["ints"] == int_map
    assert {
        MessageQueue.from_json_dict(key.as_dict()): value for key, value in decoded["queues"].items()
    } == queue_map


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_fuzz_bytes_only_body_decode_error(data: bytes) -> None:
    with contextlib.suppress(BodyDecodeError):
        loads(data)


@settings(max_examples=500)
@given(st.text(alphabet='{}[]:,"0123456789-.eE truefalsn\\u\n\t x', max_size=40))
def test_fuzz_json_like_text_only_body_decode_error(text: str) -> None:
    with contextlib.suppress(BodyDecodeError):
        loads(text)


@settings(max_examples=300)
@given(_documents, st.data())
def test_fuzz_mutated_documents_only_body_decode_error(document: Any, data: st.DataObject) -> None:
    encoded = bytearray(dumps(document))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        position = data.draw(st.integers(0, len(encoded)))
        if action == "delete" and encoded:
            del encoded[min(position, len(encoded) - 1)]
        elif action == "insert":
            encoded.insert(position, data.draw(st.sampled_from(b'{}[]:,"0-.e\\x\xff')))
        elif encoded:
            encoded[min(position, len(encoded) - 1)] = data.draw(st.integers(0, 255))
    with contextlib.suppress(BodyDecodeError):
        loads(bytes(encoded))
