"""The commit-log scan: walk the records from an offset, check each, and hand their dispatch over in batches.

Restart, crash recovery, rebuilding lost consume queues and a slave's dispatch of replicated bytes
all walk the log this way (docs/design/store.md, "Recovery"). The fields are read straight from the
mapped segments; no message objects are built.
"""

from __future__ import annotations

import logging
import mmap
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Final

from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.properties import decode_properties
from rocketflow.protocol.record_layout import (
    BLANK_MAGIC_CODE,
    HOSTS_VARIANT_BYTE,
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    RECORD_FIXED_SIZE_V4,
    RECORD_HEADS,
    SIZE_AND_MAGIC,
    TAIL_FIXED_SIZE,
    head_structs,
    hosts_variant,
)
from rocketflow.protocol.sysflag import TRANSACTION_TYPE_MASK, MessageSysFlag
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.store.dispatcher import DispatchBatch, schedule_tags_code
from rocketflow.store.mapped_file import MappedFileQueue

log = logging.getLogger(__name__)

_PREPARED: Final = int(MessageSysFlag.TRANSACTION_PREPARED)
_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)
_TRANSACTION_MASK: Final = TRANSACTION_TYPE_MASK
_SCAN_TOPIC_CACHE_MAX: Final = 4096


def _zero_tailed_last_record(mm: mmap.mmap, pos: int, total: int, sys_flag: int, segment_size: int) -> bool:
    """Whether the record at `pos` (ending in a zero byte) has properties and is not followed by a record.

    Then its properties were cut by a tear: the bytes from the tear on read as zeros. A record
    followed by another one (or by the end-of-segment blank) was written whole.
    """
    head_size = RECORD_HEADS[hosts_variant(sys_flag)].size
    body_len = _BODY_LEN.unpack_from(mm, pos + head_size - _BODY_LEN.size)[0]
    topic_len = mm[pos + head_size + body_len]
    if head_size + body_len + 1 + topic_len + 2 >= total:
        return False  # no properties: the record ends in its zero properties length
    following = pos + total
    if following + 8 > segment_size:
        return True
    magic: int = SIZE_AND_MAGIC.unpack_from(mm, following)[1]
    return magic != MAGIC_CODE and magic != BLANK_MAGIC_CODE


#: records per `DispatchBatch` a commit-log scan hands over
SCAN_BATCH_RECORDS = 4096
#: what a scan reads of a record's head (the fields below, the others skipped), by `hosts_variant`
_SCAN_HEADS: Final = head_structs(("total_size", "magic", "body_crc", "queue_id", "queue_offset",
                                   "commit_log_offset", "sys_flag", "store_timestamp", "body_len"))
#: the head's last field
_BODY_LEN: Final = struct.Struct(">i")
_scan_topic_cache: dict[bytes, str] = {}


def _scan_topic(raw: bytes, phys: int) -> str | None:
    """A record's topic from its bytes (cached), or None (logged) when it cannot be one."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("commit log: record at %d: topic is not valid UTF-8", phys)
        return None
    if "\x00" in topic:  # a tear zeroed the topic's tail (and no topic holds NUL)
        log.warning("commit log: record at %d has a NUL in its topic", phys)
        return None
    if len(_scan_topic_cache) >= _SCAN_TOPIC_CACHE_MAX:
        _scan_topic_cache.clear()
    _scan_topic_cache[raw] = topic
    return topic


def scan_records(
    files: MappedFileQueue,
    delay_levels_ms: Sequence[int],
    start_offset: int,
    verify_crc: bool,
    on_batch: Callable[[DispatchBatch], None] | None,
    after_crash: bool = False,
    end_offset: int | None = None,
    *,
    dispatch_from: int = 0,
    batch_records: int = SCAN_BATCH_RECORDS,
) -> int:
    """Walk records from `start_offset` while they are valid; returns the offset where they end.

    A record is valid when its magic, size, layout (body, topic and properties lengths add up to
    its size, topic and properties are UTF-8, the topic holds no NUL), position field and
    (optionally) body CRC check out. The first invalid record ends the log: the caller truncates
    there. `after_crash` (abnormal recovery) also ends it at a record whose properties end in NUL
    with no record after it: a power loss tore it (the body CRC does not cover the properties).
    Only a crashed last record whose last property value really ends in NUL is dropped by
    mistake. With `end_offset` (a slave's replicated data) the walk stops before a record, or
    end-of-segment blank, that is not wholly below it.

    With `on_batch`, the consume-queue units and index keys of the valid records from
    `dispatch_from` on are handed over in `DispatchBatch`es of up to `batch_records` records
    (a new one starts where a queue's offsets do not follow on). The fields are read straight
    from the mapped segments, no message objects built: this walk is what a restart, crash
    recovery and a slave's dispatch spend their time in.
    """
    segment_size = files.file_size
    delay_levels = delay_levels_ms
    files_now = files.files
    if not files_now:
        return start_offset
    heads = _SCAN_HEADS
    tail_size = TAIL_FIXED_SIZE
    topics = _scan_topic_cache
    crc32 = zlib.crc32
    separator = MessageConst.KEY_SEPARATOR
    batch = DispatchBatch()
    runs = batch.runs
    index_keys, index_offsets, index_timestamps = batch.index_keys, batch.index_offsets, batch.index_timestamps
    in_batch = 0
    offset = max(start_offset, files_now[0].file_from_offset)
    try:
        for mapped in files_now:
            base = mapped.file_from_offset
            if base + segment_size <= offset:
                continue
            if base > offset:
                break  # a gap between segments ends the log
            pos = offset - base
            mm = mapped.mm
            limit = segment_size if end_offset is None else min(segment_size, end_offset - base)
            while True:
                if pos + 8 > limit:
                    return base + pos
                total, magic = SIZE_AND_MAGIC.unpack_from(mm, pos)
                if magic == BLANK_MAGIC_CODE and total == segment_size - pos:
                    if limit < segment_size:
                        return base + pos
                    offset = base + segment_size
                    break
                phys = base + pos
                if magic != MAGIC_CODE or total <= 0 or pos + total > limit or total < RECORD_FIXED_SIZE_V4:
                    return phys
                head = heads[(mm[pos + HOSTS_VARIANT_BYTE] >> 4) & 3]
                if total < head.size + tail_size:
                    log.warning("commit log: record at %d declares a size of %d bytes, below the minimum",
                                phys, total)
                    return phys
                _, _, stored_crc, queue_id, queue_offset, stored_phys, sys_flag, store_timestamp, body_len = \
                    head.unpack_from(mm, pos)
                record_end = pos + total
                body_start = pos + head.size
                body_end = body_start + body_len
                if body_len < 0 or body_end + tail_size > record_end:
                    log.warning("commit log: record at %d: body length %d does not fit its size", phys, body_len)
                    return phys
                topic_len = mm[body_end]
                topic_end = body_end + 1 + topic_len
                if topic_len > MAX_TOPIC_BYTES or topic_end + 2 > record_end:
                    log.warning("commit log: record at %d: topic length does not fit its size", phys)
                    return phys
                props_start = topic_end + 2
                props_len = (mm[topic_end] << 8) | mm[topic_end + 1]
                if props_len > MAX_PROPERTIES_BYTES or props_start + props_len != record_end:
                    log.warning("commit log: record at %d: properties do not end where the record does", phys)
                    return phys
                if stored_phys != phys:
                    log.warning("commit log: record at %d claims offset %d", phys, stored_phys)
                    return phys
                raw_topic = mm[body_end + 1:topic_end]
                topic = topics.get(raw_topic)
                if topic is None:
                    topic = _scan_topic(raw_topic, phys)
                    if topic is None:
                        return phys
                try:
                    properties_text = mm[props_start:record_end].decode("utf-8")
                except UnicodeDecodeError:
                    log.warning("commit log: record at %d: properties are not valid UTF-8", phys)
                    return phys
                if verify_crc and crc32(mm[body_start:body_end]) & 0x7FFFFFFF != stored_crc:
                    log.warning("commit log: record at %d: body CRC does not match", phys)
                    return phys
                if after_crash and mm[record_end - 1] == 0 and _zero_tailed_last_record(
                        mm, pos, total, sys_flag, segment_size):
                    log.warning("commit log: record at %d ends in zeroed properties: torn by the crash", phys)
                    return phys
                pos = record_end
                if on_batch is None or phys < dispatch_from:
                    continue
                properties = decode_properties(properties_text) if properties_text else {}
                transaction = sys_flag & _TRANSACTION_MASK
                in_queue = transaction != _PREPARED and transaction != _ROLLBACK
                key = (topic, queue_id)
                run = runs.get(key) if in_queue else None
                if in_batch >= batch_records or (run is not None and run[0] + len(run[1]) // 3 != queue_offset):
                    batch.record_count = in_batch
                    on_batch(batch)
                    batch = DispatchBatch()
                    runs = batch.runs
                    index_keys, index_offsets = batch.index_keys, batch.index_offsets
                    index_timestamps = batch.index_timestamps
                    in_batch = 0
                    run = None
                if in_queue:
                    tags = compute_tags_code(properties.get(MessageConst.TAGS))
                    if topic == SCHEDULE_TOPIC:
                        deliver_at = schedule_tags_code(properties, store_timestamp, delay_levels)
                        if deliver_at is not None:
                            tags = deliver_at
                    if run is None:
                        runs[key] = run = [queue_offset, []]
                    run[1].extend((phys, total, tags))
                uniq = properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                if uniq:
                    index_keys.append(f"{topic}#{uniq}".encode("utf-8", "replace"))
                    index_offsets.append(phys)
                    index_timestamps.append(store_timestamp)
                keys = properties.get(MessageConst.KEYS)
                if keys:
                    for word in keys.split(separator):
                        if word:
                            index_keys.append(f"{topic}#{word}".encode("utf-8", "replace"))
                            index_offsets.append(phys)
                            index_timestamps.append(store_timestamp)
                batch.store_timestamp = store_timestamp
                batch.end_offset = record_end + base
                in_batch += 1
        return offset
    finally:
        if in_batch and on_batch is not None:
            batch.record_count = in_batch
            on_batch(batch)


__all__ = ["SCAN_BATCH_RECORDS", "scan_records"]
