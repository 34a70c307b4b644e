"""Commit-log appends: record layout, offsets, segment rolls with the blank end record, bad input."""

from __future__ import annotations

import struct
from collections.abc import Callable

from conftest import request
from rocketflow.protocol.codec import BLANK_MAGIC_CODE, body_crc, decode_record, encode_record_fields, pack_host
from rocketflow.store import MessageStore, PutMessageRequest, PutMessageStatus


def test_record_bytes_equal_the_codec_encoding(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    result = store.put_message(request(body=b"payload", TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="U1"))
    assert result.status is PutMessageStatus.PUT_OK
    stored = store.select_one_message_by_offset(result.wrote_offset)
    assert stored is not None
    msg, _ = decode_record(stored)
    expected = encode_record_fields(
        topic=b"T", body=b"payload", properties=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1",
        queue_id=0, flag=0, queue_offset=0, commit_log_offset=result.wrote_offset, sys_flag=0,
        born_timestamp=1_700_000_000_000, born_host=pack_host("10.0.0.1", 5000),
        store_timestamp=result.store_timestamp, store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=0, prepared_transaction_offset=0, body_crc=body_crc(b"payload"),
    )
    assert stored == expected
    assert msg.msg_id == result.msg_id
    assert len(stored) == result.wrote_bytes


def test_ipv6_hosts_set_sys_flag_bits(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    req = PutMessageRequest("T", 1, b"x", born_host=("::1", 7), store_host=("fe80::2", 9))
    result = store.put_message(req)
    assert result.status.is_ok
    msg = store.look_message_by_offset(result.wrote_offset)
    assert msg is not None
    assert msg.sys_flag & 0x30 == 0x30
    assert msg.born_host == ("::1", 7) and msg.store_host == ("fe80::2", 9)


def test_offsets_and_blank_record_at_segment_end(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    results = [store.put_message(request(queue_id=i % 2, body=bytes([i]) * 300)) for i in range(40)]
    assert all(r.status.is_ok for r in results)
    # queue offsets count per queue
    assert [r.queue_offset for r in results[:6]] == [0, 0, 1, 1, 2, 2]
    offsets = [r.wrote_offset for r in results]
    assert offsets == sorted(offsets)
    segment = store.config.commit_log_segment_size
    crossings = [o for o in offsets if o % segment == 0 and o > 0]
    assert crossings, "the test must cross segment boundaries"
    for start in crossings:
        prev = max(o for o in offsets if o < start)
        prev_size = results[offsets.index(prev)].wrote_bytes
        blank_at = prev + prev_size
        raw = store.commit_log.read(blank_at, 8)
        assert raw is not None
        remaining, magic = struct.unpack(">ii", raw)
        assert magic == BLANK_MAGIC_CODE
        assert remaining == start - blank_at
        assert remaining < 300 + 100 + 8  # the next record did not fit
    for i, result in enumerate(results):
        msg = store.look_message_by_offset(result.wrote_offset)
        assert msg is not None and msg.body == bytes([i]) * 300 and msg.commit_log_offset == result.wrote_offset


def test_batch_spanning_segments_is_one_put(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    batch = [request(body=bytes([i]) * 500) for i in range(20)]
    result = store.put_messages(batch)
    assert result.status.is_ok and result.message_count == 20
    assert result.queue_offsets == list(range(20))
    assert len(store.commit_log.files.files) >= 3
    got = store.get_messages("g", "T", 0, 0, 32)
    assert got.status.name == "FOUND"
    assert store.get_max_offset_in_queue("T", 0) == 20


def test_illegal_messages_are_rejected_without_side_effects(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(max_message_size=1024)
    assert store.put_message(request(body=b"a")).status.is_ok
    too_big = store.put_messages([request(body=b"b"), request(body=b"x" * 2000)])
    assert too_big.status is PutMessageStatus.MESSAGE_ILLEGAL and "exceeds" in too_big.error
    long_topic = store.put_message(request(topic="t" * 128))
    assert long_topic.status is PutMessageStatus.MESSAGE_ILLEGAL
    props = store.put_message(request(big="v" * 40000))
    assert props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    bad_host = store.put_message(PutMessageRequest("T", 0, b"x", born_host=("not-an-ip", 1)))
    assert bad_host.status is PutMessageStatus.MESSAGE_ILLEGAL
    bad_prop = store.put_message(request(**{"k\x01": "v"}))
    assert bad_prop.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages([]).status is PutMessageStatus.MESSAGE_ILLEGAL
    # nothing of the rejected batch was stored or counted
    assert store.get_max_offset_in_queue("T", 0) == 1
    assert store.put_message(request(body=b"c")).queue_offset == 1


def test_put_after_shutdown_is_service_not_available(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    store.shutdown()
    assert store.put_message(request()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_prepared_transaction_messages_skip_consume_queue(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    prepared = store.put_message(PutMessageRequest("T", 0, b"half", sys_flag=0x4))
    assert prepared.status.is_ok and prepared.queue_offset == 0
    assert store.get_max_offset_in_queue("T", 0) == 0
    normal = store.put_message(request())
    assert normal.queue_offset == 0
    assert store.get_max_offset_in_queue("T", 0) == 1
