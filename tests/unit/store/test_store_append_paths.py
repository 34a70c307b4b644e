"""Every append path of the commit log writes, byte for byte, what the reference record writer writes.

The paths: the single-message fast path (`append_one`), the per-message loop (`append_messages`), the
one-size encoded batch (`_append_one_size_batch`), the encoded batch loop (`_append_by_loop`) and the
several-batches write (`append_encoded_batches`). Each record is read back from the segments and compared
with `encode_record_fields` of the fields it must hold (queue offset, commit-log offset, store time and
host included); segments are small, so the loops roll over segment ends.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import small_config
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.ids import pack_host
from rocketflow.protocol.message import Message
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.record_writer import body_crc, encode_record_fields
from rocketflow.store import batch_append
from rocketflow.store.commit_log import CommitLog
from rocketflow.store.message_append import append_messages, append_one
from rocketflow.store.put_request import AppendResult, EncodedBatchRequest, PutMessageRequest

NOW = 1_700_000_000_123
STORE_HOST = ("10.9.8.7", 10911)
hosts = st.sampled_from([("10.0.0.1", 5000), ("::1", 7)])
props = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "X"]), st.text("abc 12", min_size=1, max_size=8),
                        max_size=4)


def _log(root: Path, segment_size: int = 4096) -> CommitLog:
    log = CommitLog(small_config(root, commit_log_segment_size=segment_size, store_host=STORE_HOST))
    log.files.load()
    return log


def _expected(topic: str, body: bytes, properties: bytes, queue_id: int, flag: int, queue_offset: int, phys: int,
              sys_flag: int, born_timestamp: int, born_host: tuple[str, int], reconsume_times: int = 0,
              prepared_transaction_offset: int = 0) -> bytes:
    return encode_record_fields(
        topic=topic.encode(), body=body, properties=properties, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, commit_log_offset=phys, sys_flag=sys_flag, born_timestamp=born_timestamp,
        born_host=pack_host(*born_host), store_timestamp=NOW, store_host=pack_host(*STORE_HOST),
        reconsume_times=reconsume_times, prepared_transaction_offset=prepared_transaction_offset,
        body_crc=body_crc(body))


def _stored(log: CommitLog, result: AppendResult) -> list[bytes]:
    records = [log.read_record(offset) for offset in result.commit_log_offsets]
    assert all(record is not None for record in records)
    return [record for record in records if record is not None]


def _request(topic: str, queue_id: int, body: bytes, properties: dict[str, str], born: tuple[str, int],
             flag: int = 0, sys_flag: int = 0, reconsume_times: int = 0) -> PutMessageRequest:
    return PutMessageRequest(topic=topic, queue_id=queue_id, body=body,
                             properties_bytes=encode_properties(properties).encode(), properties=properties,
                             flag=flag, sys_flag=sys_flag, born_timestamp=NOW - 5, born_host=born,
                             reconsume_times=reconsume_times)


def _expected_of(request: PutMessageRequest, queue_offset: int, phys: int) -> bytes:
    assert request.properties_bytes is not None and isinstance(request.born_host, tuple)
    return _expected(request.topic, request.body, request.properties_bytes, request.queue_id, request.flag,
                     queue_offset, phys, request.sys_flag, request.born_timestamp, request.born_host,
                     request.reconsume_times)


messages = st.lists(st.tuples(st.sampled_from(["Orders", "Pay"]), st.integers(0, 2), st.binary(max_size=700), props,
                              hosts, st.integers(0, 99), st.sampled_from([0, 0x8, 0x2]), st.integers(0, 3)),
                    min_size=1, max_size=12)


@settings(max_examples=60)
@given(batch=messages)
def test_the_message_paths_write_the_reference_records(batch: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        log = _log(Path(root))
        requests = [_request(topic, queue_id, body, properties, born, flag, sys_flag, reconsume)
                    for topic, queue_id, body, properties, born, flag, sys_flag, reconsume in batch]
        # the single-message path, then the loop for the whole list
        first = requests[0]
        single = append_one(log, first, NOW)
        if single is None:  # IPv6 born host: the loop takes it
            assert first.born_host == ("::1", 7)
            single = append_messages(log, [first], NOW)
        result, _ = single
        assert _stored(log, result) == [_expected_of(first, result.queue_offset, result.wrote_offset)]
        looped, _ = append_messages(log, requests, NOW)
        expected = [_expected_of(request, queue_offset, phys) for request, queue_offset, phys
                    in zip(requests, looped.queue_offsets, looped.commit_log_offsets, strict=True)]
        assert _stored(log, looped) == expected
        # the queue offsets count on per queue
        seen: dict[tuple[str, int], int] = {(first.topic, first.queue_id): 1}
        for request, queue_offset in zip(requests, looped.queue_offsets, strict=True):
            key = (request.topic, request.queue_id)
            assert queue_offset == seen.get(key, 0)
            seen[key] = queue_offset + 1


elements = st.lists(st.tuples(st.binary(max_size=300), props, st.integers(0, 9)), min_size=1, max_size=16)
suffixes = st.sampled_from([{}, {"CLUSTER": "DefaultCluster"}])


def _encoded(batch: list[tuple[bytes, dict[str, str], int]], suffix: dict[str, str], born: tuple[str, int],
             queue_id: int = 1) -> EncodedBatchRequest:
    messages = [Message("Orders", body, flag=flag, properties=properties) for body, properties, flag in batch]
    return EncodedBatchRequest("Orders", queue_id, encode_batch_body(messages), encode_properties(suffix).encode(),
                               born_timestamp=NOW - 5, born_host=born)


def _expected_batch(batch: list[tuple[bytes, dict[str, str], int]], suffix: dict[str, str], born: tuple[str, int],
                    result: AppendResult, queue_id: int = 1) -> list[bytes]:
    expected = []
    for (body, properties, flag), queue_offset, phys in zip(batch, result.queue_offsets, result.commit_log_offsets,
                                                             strict=True):
        own = encode_properties(properties)
        stored = own + encode_properties(suffix) if not own or own.endswith("\x02") or not suffix else \
            own + "\x02" + encode_properties(suffix)
        expected.append(_expected("Orders", body, stored.encode(), queue_id, flag, queue_offset, phys, 0, NOW - 5,
                                  born))
    return expected


@settings(max_examples=60)
@given(batch=elements, suffix=suffixes, born=hosts)
def test_the_encoded_batch_loop_writes_the_reference_records(batch: list[tuple[bytes, dict[str, str], int]],
                                                             suffix: dict[str, str], born: tuple[str, int]) -> None:
    with tempfile.TemporaryDirectory() as root:
        log = _log(Path(root))
        encoded = _encoded(batch, suffix, born)
        result, _ = batch_append._append_by_loop(log, encoded, NOW, *batch_append._batch_layout(log, encoded))
        assert _stored(log, result) == _expected_batch(batch, suffix, born, result)


@settings(max_examples=60)
@given(count=st.integers(1, 20), body_len=st.integers(0, 120), properties=props, suffix=suffixes, born=hosts,
       data=st.data())
def test_the_one_size_batch_paths_write_the_reference_records(count: int, body_len: int, properties: dict[str, str],
                                                              suffix: dict[str, str], born: tuple[str, int],
                                                              data: st.DataObject) -> None:
    """A batch of one encoded size, alone and as several batches written at once."""
    batch = [(data.draw(st.binary(min_size=body_len, max_size=body_len)), properties, index % 3)
             for index in range(count)]
    with tempfile.TemporaryDirectory() as root:
        log = _log(Path(root), segment_size=1 << 20)
        encoded = _encoded(batch, suffix, born)
        stored = batch_append._append_one_size_batch(log, encoded, NOW, *batch_append._batch_layout(log, encoded))
        assert stored is not None
        result, _ = stored
        assert _stored(log, result) == _expected_batch(batch, suffix, born, result)
        several = [_encoded(batch, suffix, born, queue_id) for queue_id in (1, 2, 1)]
        results, _ = batch_append.append_encoded_batches(log, several, NOW)
        assert len(results) == 3
        for queue_id, one in zip((1, 2, 1), results, strict=True):
            assert _stored(log, one) == _expected_batch(batch, suffix, born, one, queue_id)
