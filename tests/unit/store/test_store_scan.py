"""The commit-log scan (restart, crash recovery, a slave's dispatch) against the record codec.

The scan reads the fields it needs straight from the mapped segments; these tests hold it to what
decoding each record with `rocketflow.protocol.codec.decode_record` says: the same records valid,
the same end of the log, the same consume-queue units and index keys.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import small_config
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import tags_code
from rocketflow.store import MessageStore, PutMessageRequest
from rocketflow.store.dispatcher import DispatchBatch, schedule_tags_code

SEGMENT = 4096


def _requests() -> list[PutMessageRequest]:
    """Assorted records: tags, keys, UNIQ_KEY, v6 hosts, prepared halves, delayed messages, two topics."""
    made: list[PutMessageRequest] = []
    for i in range(40):
        properties = {"TAGS": ["TagA", "pay", ""][i % 3], "UNIQ_KEY": f"U{i:04d}"}
        if i % 4 == 0:
            properties["KEYS"] = f"k{i} order-{i // 8}"
        sys_flag = int(MessageSysFlag.TRANSACTION_PREPARED) if i % 11 == 5 else 0
        topic = "Orders" if i % 5 else "Pays"
        if i % 13 == 7:
            topic = SCHEDULE_TOPIC
            properties["DELAY"] = str(1 + i % 5)
        born = ("::1", 5000) if i % 7 == 3 else ("10.0.0.1", 5000)
        made.append(PutMessageRequest(topic=topic, queue_id=i % 3, body=bytes([i]) * (20 + 9 * i),
                                      properties={k: v for k, v in properties.items() if v}, sys_flag=sys_flag,
                                      born_timestamp=1_700_000_000_000 + i, born_host=born))
    return made


@pytest.fixture(scope="module")
def store() -> Iterator[MessageStore]:
    with tempfile.TemporaryDirectory() as root:
        config = small_config(Path(root), commit_log_segment_size=SEGMENT)
        with MessageStore(config, clock_ms=lambda: 1_700_000_123_000) as opened:
            for start in range(0, 40, 4):
                assert opened.put_messages(_requests()[start:start + 4]).status.is_ok
            yield opened


def _reference_end(store: MessageStore, verify_crc: bool) -> int:
    """Where the log ends by the codec: the first record that does not decode (or lies) ends it."""
    log = store.commit_log
    offset = log.min_offset
    for mapped in log.files.files:
        pos = offset - mapped.file_from_offset
        while pos + 8 <= SEGMENT:
            total = int.from_bytes(mapped.mm[pos:pos + 4], "big", signed=True)
            magic = int.from_bytes(mapped.mm[pos + 4:pos + 8], "big", signed=True)
            if magic == -875286124 and total == SEGMENT - pos:  # the end-of-segment blank
                break
            if total <= 0 or pos + total > mapped.wrote_position:
                return mapped.file_from_offset + pos
            try:
                msg, end = decode_record(bytes(mapped.mm[pos:pos + total]), verify_crc=verify_crc, with_body=False)
            except RecordDecodeError:
                return mapped.file_from_offset + pos
            if msg.commit_log_offset != mapped.file_from_offset + pos or end != total or "\x00" in msg.topic:
                return mapped.file_from_offset + pos
            pos += total
        else:
            return mapped.file_from_offset + pos
        offset = mapped.file_from_offset + SEGMENT
    return offset


def _reference_dispatch(store: MessageStore) -> tuple[dict[tuple[str, int], list[int]], list[tuple[bytes, int, int]]]:
    """Consume-queue units (flat) per queue and index entries of every record, by decoding each one."""
    log = store.commit_log
    units: dict[tuple[str, int], list[int]] = {}
    index: list[tuple[bytes, int, int]] = []
    offset = log.min_offset
    while offset < log.max_offset:
        record = log.read_record(offset)
        if record is None:  # the end-of-segment blank
            offset += SEGMENT - offset % SEGMENT
            continue
        msg, size = decode_record(record, with_body=False)
        properties = msg.properties
        transaction = msg.sys_flag & 0xC
        if transaction not in (int(MessageSysFlag.TRANSACTION_PREPARED), int(MessageSysFlag.TRANSACTION_ROLLBACK)):
            tags = tags_code(properties.get("TAGS"))
            if msg.topic == SCHEDULE_TOPIC:
                deliver_at = schedule_tags_code(properties, msg.store_timestamp, store.config.delay_levels_ms)
                tags = tags if deliver_at is None else deliver_at
            units.setdefault((msg.topic, msg.queue_id), []).extend((offset, size, tags))
        words = [properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)]
        words.extend((properties.get(MessageConst.KEYS) or "").split(" "))
        index.extend((f"{msg.topic}#{word}".encode(), offset, msg.store_timestamp) for word in words if word)
        offset += size
    return units, index


@pytest.mark.parametrize("batch_records", [1, 3, 4096])
def test_scan_hands_over_what_decoding_each_record_gives(store: MessageStore, batch_records: int) -> None:
    batches: list[DispatchBatch] = []
    end = store.commit_log.scan(0, True, batches.append, batch_records=batch_records)
    assert end == store.commit_log.max_offset
    units: dict[tuple[str, int], list[int]] = {}
    index: list[tuple[bytes, int, int]] = []
    for batch in batches:
        assert 0 < batch.record_count <= batch_records
        for key, (first_offset, flat) in batch.runs.items():
            # runs continue each other: a queue's offsets never jump inside or between batches
            assert first_offset == len(units.get(key, [])) // 3
            units.setdefault(key, []).extend(flat)
        index.extend(zip(batch.index_keys, batch.index_offsets, batch.index_timestamps, strict=True))
    assert sum(batch.record_count for batch in batches) == 40
    assert batches[-1].end_offset == end
    assert (units, index) == _reference_dispatch(store)
    assert any(key[0] == SCHEDULE_TOPIC for key in units) and len(store.commit_log.files.files) > 2


def test_scan_dispatches_from_an_offset(store: MessageStore) -> None:
    everything: list[DispatchBatch] = []
    store.commit_log.scan(0, False, everything.append)
    middle = store.commit_log.files.files[1].file_from_offset + 300
    later: list[DispatchBatch] = []
    store.commit_log.scan(0, False, later.append, dispatch_from=middle)
    kept = [phys for batch in everything for _, (_, flat) in batch.runs.items() for phys in flat[0::3]
            if phys >= middle]
    assert sorted(phys for batch in later for _, (_, flat) in batch.runs.items() for phys in flat[0::3]) == \
        sorted(kept)
    assert all(offset >= middle for batch in later for offset in batch.index_offsets)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), verify_crc=st.booleans())
def test_a_damaged_byte_ends_the_log_where_the_codec_says(store: MessageStore, data: st.DataObject,
                                                          verify_crc: bool) -> None:
    log = store.commit_log
    mapped = data.draw(st.sampled_from(log.files.files))
    position = data.draw(st.integers(0, mapped.wrote_position - 1))
    value = data.draw(st.integers(0, 255))
    original = mapped.mm[position]
    mapped.mm[position] = value
    try:
        assert log.scan(0, verify_crc, None) == _reference_end(store, verify_crc)
        batches: list[DispatchBatch] = []
        assert log.scan(0, verify_crc, batches.append) == _reference_end(store, verify_crc)
    finally:
        mapped.mm[position] = original
