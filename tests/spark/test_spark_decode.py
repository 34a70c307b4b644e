"""The column-wise record decoder against the per-message path, offsets JSON, options and admission control."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rocketflow.protocol.codec import MAGIC_CODE, RecordDecodeError, compress_body, encode_record  # noqa: E402
from rocketflow.protocol.message import MessageExt, MessageQueue  # noqa: E402
from rocketflow.protocol.sysflag import MessageSysFlag  # noqa: E402
from rocketflow.spark.columns import (  # noqa: E402
    ARROW_SCHEMA,
    UndecodableRecordError,
    messages_to_batch,
    records_to_batch,
)
from rocketflow.spark.connection import SourceError  # noqa: E402
from rocketflow.spark.options import ReaderOptions, WriterOptions, offsets_from_json, offsets_to_json  # noqa: E402
from rocketflow.spark.source import cap_by_backlog  # noqa: E402

_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=8)


def _record(index: int, body: bytes, props: dict[str, str], **fields: object) -> bytes:
    msg = MessageExt("TopicX", body, properties=props, queue_id=2, queue_offset=100 + index,
                     commit_log_offset=index * 321, born_timestamp=1_700_000_000_000 + index,
                     store_timestamp=1_700_000_000_500 + index, store_host=("10.0.0.7", 10911),
                     reconsume_times=index % 3, **fields)  # type: ignore[arg-type]
    return encode_record(msg)


def _both(data: bytes) -> tuple[object, object]:
    from rocketflow.protocol.codec import decode_records

    fast = records_to_batch(data, "TopicX", "broker-a")
    slow = messages_to_batch(decode_records(data), "broker-a")
    return fast, slow


@given(st.lists(st.tuples(st.binary(max_size=40), st.dictionaries(_text, _text, max_size=4)), min_size=1,
                max_size=30))
def test_fast_path_equals_per_message_path(items: list[tuple[bytes, dict[str, str]]]) -> None:
    data = b"".join(_record(index, body, props) for index, (body, props) in enumerate(items))
    fast, slow = _both(data)
    assert fast.schema == ARROW_SCHEMA
    assert fast.to_pylist() == slow.to_pylist()


def test_values_and_msg_id_fallback() -> None:
    data = _record(0, b"hello", {"UNIQ_KEY": "ABC", "KEYS": "k1 k2", "TAGS": "TagA"}) + _record(1, b"", {})
    rows = records_to_batch(data, "TopicX", "broker-a").to_pylist()
    assert rows[0]["msg_id"] == "ABC" and rows[0]["keys"] == "k1 k2" and rows[0]["tags"] == "TagA"
    assert rows[0]["body"] == b"hello" and rows[0]["queue_offset"] == 100 and rows[0]["queue_id"] == 2
    assert rows[0]["store_timestamp"].timestamp() == pytest.approx(1_700_000_000.5)
    # no UNIQ_KEY: the offset message id (store host 10.0.0.7:10911, commit-log offset 321)
    assert rows[1]["msg_id"] == "0A000007" + "00002A9F" + f"{321:016X}"
    assert rows[1]["keys"] is None and rows[1]["tags"] is None and rows[1]["properties"] == []


def test_compressed_and_ipv6_records_take_the_slow_path() -> None:
    body = b"z" * 5000
    compressed = _record(0, compress_body(body), {"UNIQ_KEY": "C"}, sys_flag=int(MessageSysFlag.COMPRESSED))
    ipv6 = _record(1, b"six", {"UNIQ_KEY": "D"}, born_host=("::1", 5))
    rows = records_to_batch(compressed + ipv6, "TopicX", "broker-a").to_pylist()
    assert [row["body"] for row in rows] == [body, b"six"]


def test_magic_inside_a_body_still_decodes() -> None:
    magic = MAGIC_CODE.to_bytes(4, "big", signed=True)
    data = b"".join(_record(index, b"\x00\x00\x00\x60" + magic + b"pad" * index, {"UNIQ_KEY": str(index)})
                    for index in range(5))
    fast, slow = _both(data)
    assert fast.to_pylist() == slow.to_pylist()


@given(st.integers(1, 30), st.integers(0, 400), st.integers(0, 29), st.integers(-3, 3), st.booleans())
def test_every_way_of_finding_the_records_equals_the_per_message_path(
        count: int, body_size: int, odd_index: int, odd_delta: int, magic_in_bodies: bool) -> None:
    """Records of one size (found by stride), small ones (by the magic scan) and big ones (by the walk),
    with one record of another size among them, and with bodies that hold size + magic at a stride."""
    magic = MAGIC_CODE.to_bytes(4, "big", signed=True)
    records = []
    for index in range(count):
        size = max(0, body_size + (odd_delta if index == odd_index % count else 0))
        body = (b"\x00\x00\x01\x00" + magic + b"s" * size)[:size] if magic_in_bodies else bytes([index % 7]) * size
        records.append(_record(index, body, {"UNIQ_KEY": f"U{index:04d}", "TAGS": "T"}))
    fast, slow = _both(b"".join(records))
    assert fast.to_pylist() == slow.to_pylist()


def test_a_stride_lookalike_inside_a_body_is_not_taken_for_a_record() -> None:
    """A body holding the first record's size and the magic code where a stride falls does not fool the
    stride check when the records are of other sizes: they decode as the per-message path does."""
    magic = MAGIC_CODE.to_bytes(4, "big", signed=True)
    first = _record(0, b"a" * 300, {"UNIQ_KEY": "A"})
    stride = len(first)
    second = _record(1, b"b" * 10, {"UNIQ_KEY": "B"})
    empty_third = _record(2, b"", {"UNIQ_KEY": "C"})
    third_body_start = stride + len(second) + empty_third.index(b"TopicX") - 1
    lookalike_at = 2 * stride - third_body_start
    assert lookalike_at >= 0
    body = b"c" * lookalike_at + stride.to_bytes(4, "big") + magic
    third = _record(2, body, {"UNIQ_KEY": "C"})
    # pad with a fourth record so the whole is a multiple of the first size and the stride check runs
    missing = -(stride + len(second) + len(third)) % stride
    fourth_empty = len(_record(3, b"", {"UNIQ_KEY": "D"}))
    fourth = _record(3, b"d" * (missing + (stride if missing < fourth_empty else 0) - fourth_empty), {"UNIQ_KEY": "D"})
    data = first + second + third + fourth
    assert len(data) % stride == 0 and data[2 * stride:2 * stride + 8] == stride.to_bytes(4, "big") + magic
    fast, slow = _both(data)
    assert fast.to_pylist() == slow.to_pylist()
    assert [row["body"][:1] for row in fast.to_pylist()] == [b"a", b"b", b"c", b"d"]


def test_garbage_raises_a_decode_error() -> None:
    good = _record(0, b"abc", {})
    with pytest.raises(RecordDecodeError):
        records_to_batch(good + b"\x00" * 100, "TopicX", "broker-a")
    with pytest.raises(RecordDecodeError):
        records_to_batch(good[:-5], "TopicX", "broker-a")
    # records of one size, the third with a damaged magic code: not taken as records by the stride check
    uniform = [bytearray(_record(index, b"xyz", {"UNIQ_KEY": f"U{index}"})) for index in range(4)]
    uniform[2][4] ^= 0xFF
    with pytest.raises(RecordDecodeError):
        records_to_batch(b"".join(uniform), "TopicX", "broker-a")


def test_an_undecodable_record_is_a_row_with_its_stored_body_and_the_reason() -> None:
    """A COMPRESSED body that is not zlib (slow path) and properties that are not UTF-8 (found by the fast
    path's check): rows in offset order among the others, or an error with fail_on_bad_records."""
    not_zlib = _record(1, b"never deflated", {"UNIQ_KEY": "Z", "TAGS": "T"}, sys_flag=int(MessageSysFlag.COMPRESSED))
    latin = bytearray(_record(3, b"latin", {"KEYS": "café"}))
    latin[latin.index("é".encode())] = 0xE9
    for bad, body, reason in ((not_zlib, b"never deflated", "zlib"), (bytes(latin), b"latin", "UTF-8")):
        data = _record(0, b"a", {"UNIQ_KEY": "A"}) + bad + _record(5, b"b", {"UNIQ_KEY": "B"})
        rows = records_to_batch(data, "TopicX", "broker-a").to_pylist()
        assert [row["body"] for row in rows] == [b"a", body, b"b"]
        assert [row["decode_error"] is None for row in rows] == [True, False, True]
        assert reason in rows[1]["decode_error"] and rows[1]["topic"] == "TopicX"
        with pytest.raises(UndecodableRecordError, match=f"offset 10[13] cannot be decoded.*{reason}"):
            records_to_batch(data, "TopicX", "broker-a", fail_on_bad_records=True)
    assert records_to_batch(_record(0, b"a", {}), "TopicX", "broker-a").column(12).null_count == 1
    options = ReaderOptions.parse({"namesrv": "h:1", "topic": "T", "failOnBadRecords": "true"}, streaming=False)
    assert options.fail_on_bad_records and not ReaderOptions.parse({"namesrv": "h:1", "topic": "T"},
                                                                    streaming=False).fail_on_bad_records


def test_offsets_json_round_trip_and_order() -> None:
    offsets = {MessageQueue("B", "broker-a", 10): 5, MessageQueue("A", "broker-b", 0): 1,
               MessageQueue("B", "broker-a", 2): 7}
    data = offsets_to_json(offsets)
    assert list(data) == ["A", "B"] and list(data["B"]) == ["broker-a:2", "broker-a:10"]
    assert offsets_from_json(data) == offsets
    for bad in ('{"T": {"broker-a": 1}}', '{"T": {"b:0": "x"}}', "[1]", "{nope", '{"T": 3}'):
        with pytest.raises(SourceError):
            offsets_from_json(bad)


def test_cap_by_backlog_shares_the_limit() -> None:
    a, b, c = (MessageQueue("T", "broker-a", index) for index in range(3))
    end = cap_by_backlog({a: 0, b: 100, c: 5}, {a: 900, b: 200, c: 5}, 100)
    assert end[c] == 5 and (end[a] - 0) + (end[b] - 100) == 100
    assert end[a] == 90 and end[b] == 110
    assert cap_by_backlog({a: 0}, {a: 10}, 100) == {a: 10}
    assert cap_by_backlog({a: 0, b: 0}, {a: 1, b: 1}, 1) in ({a: 1, b: 0}, {a: 0, b: 1})


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "T"}, "namesrv is required"),
    ({"namesrv": "h:1"}, "topic is required"),
    ({"namesrv": "nope", "topic": "T"}, "not host:port"),
    ({"namesrv": "h:1", "topic": "T", "startingoffsets": "soon"}, "startingOffsets"),
    ({"namesrv": "h:1", "topic": "T", "startingoffsets": "group"}, "needs the group"),
    ({"namesrv": "h:1", "topic": "T", "maxmessagespertrigger": "0"}, ">= 1"),
    ({"namesrv": "h:1", "topic": "T", "failondataloss": "maybe"}, "true or false"),
    ({"namesrv": "h:1", "topic": "T", "subexpression": "||"}, "subExpression"),
    ({"namesrv": "h:1", "topic": "T", "colour": "red"}, "unknown"),
    ({"namesrv": "h:1", "topic": "T", "startingoffsets": '{"U": {"b:0": 1}}'}, "not in option topic"),
    ({"namesrv": "h:1", "topic": "T", "startingoffsets": "earliest", "startingtimestamp": "5"}, "not both"),
])
def test_bad_reader_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(SourceError, match=message):
        ReaderOptions.parse(options, streaming=True)


def test_reader_options_defaults() -> None:
    stream = ReaderOptions.parse({"namesrv": "h:1", "topic": "A, B,A"}, streaming=True)
    assert stream.topics == ("A", "B") and stream.starting == "latest" and stream.fail_on_data_loss
    batch = ReaderOptions.parse({"NameSrv": "h:1", "topic": "A", "endingOffsets": '{"A": {"b:0": 3}}'},
                                streaming=False)
    assert batch.starting == "earliest" and batch.ending == "json"
    with pytest.raises(SourceError, match="batch queries only"):
        ReaderOptions.parse({"namesrv": "h:1", "topic": "A", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(SourceError, match="one topic"):
        WriterOptions.parse({"namesrv": "h:1", "topic": "A,B"})


_raw_properties = st.text(alphabet=st.sampled_from(["\x01", "\x02", "a", "b", "é", "K"]), max_size=24)


@given(st.lists(_raw_properties, max_size=12))
def test_properties_map_splits_like_decode_properties(texts: list[str]) -> None:
    from rocketflow.protocol.properties import decode_properties
    from rocketflow.spark.columns import properties_map

    maps = properties_map(pa.array(texts, pa.string())).to_pylist()
    assert [dict(entries) for entries in maps] == [decode_properties(text) for text in texts]
    # A key written twice stays twice, in order (lookups take the last, like decode_properties).
    for text, entries in zip(texts, maps, strict=True):
        expected = [tuple(segment.split("\x01", 1)) for segment in text.split("\x02")]
        assert entries == [pair for pair in expected if len(pair) == 2 and pair[0] and pair[1]]


@given(st.lists(st.binary(max_size=30), min_size=1, max_size=20), st.integers(0, 5))
def test_bodies_of_every_length_around_the_inline_limit(bodies: list[bytes], sliced: int) -> None:
    data = b"".join(_record(index, body, {"UNIQ_KEY": "u" * (index % 15)}) for index, body in enumerate(bodies))
    fast, slow = _both(data)
    assert fast.to_pylist() == slow.to_pylist()
    from rocketflow.spark.columns import properties_map

    texts = pa.array(["a\x01b\x02c\x01" + "d" * index for index in range(8)], pa.string()).slice(sliced)
    assert properties_map(texts).to_pylist() == [[("a", "b"), ("c", "d" * index)] if index else [("a", "b")]
                                                 for index in range(sliced, 8)]


def test_without_properties_the_batch_is_the_full_one_less_the_map() -> None:
    from rocketflow.protocol.codec import decode_records
    from rocketflow.spark.columns import ARROW_SCHEMA_WITHOUT_PROPERTIES

    plain = b"".join(_record(index, b"b%d" % index, {"UNIQ_KEY": f"U{index}", "KEYS": "k", "TAGS": "t"})
                     for index in range(5))
    compressed = _record(5, compress_body(b"z" * 300, 5), {"KEYS": "kz"}, sys_flag=int(MessageSysFlag.COMPRESSED))
    for data in (plain, plain + compressed):
        full = records_to_batch(data, "TopicX", "broker-a")
        lean = records_to_batch(data, "TopicX", "broker-a", include_properties=False)
        assert lean.schema == ARROW_SCHEMA_WITHOUT_PROPERTIES
        assert lean.to_pylist() == [{k: v for k, v in row.items() if k != "properties"} for row in full.to_pylist()]
    slow = messages_to_batch(decode_records(plain), "broker-a", include_properties=False)
    assert slow.schema == ARROW_SCHEMA_WITHOUT_PROPERTIES


_raw_properties = st.lists(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "KEY", "TAGSX", "UNIQ", "a", "\x01", "\x02",
                                            "\x01\x01", "v", "K", "S", "", "é"]), max_size=12).map("".join)


@given(st.lists(_raw_properties, min_size=1, max_size=20))
def test_property_values_equal_a_lookup_in_the_map(texts: list[str]) -> None:
    """The map-free lookup the source uses by default agrees with the map on any properties text:
    repeated keys (the last wins), empty values, keys that are prefixes of others, stray separators."""
    import pyarrow.compute as pc

    from rocketflow.spark.columns import properties_map, property_values

    array = pa.array(texts, pa.string())
    keys = ("UNIQ_KEY", "KEYS", "TAGS")
    properties = properties_map(array)
    for key, values in zip(keys, property_values(array, *keys), strict=True):
        assert values.to_pylist() == pc.map_lookup(properties, key, "last").to_pylist(), key
