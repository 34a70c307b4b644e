"""Appending `PutMessageRequest`s to the commit log: the per-message loop and the single-message fast path.

Both pack each record with `record_writer`'s packers and hand back where the records landed
(`AppendResult`) and what the consume queues and the index need of them (`DispatchBatch`). They
need the commit log only through `AppendLog`. Encoded batches take `batch_append`'s paths.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.properties import (
    InvalidPropertyError,
    decode_properties_bytes,
    encode_properties_bytes,
)
from rocketflow.protocol.record_layout import (
    BLANK_RECORD_SIZE,
    HEAD_SIZE_V4,
    HOSTS_V6_BITS,
    MAGIC_CODE,
    PROPERTIES_LENGTH,
    RECORD_HEADS,
)
from rocketflow.protocol.record_writer import (
    blank_record,
    packed_host,
    packed_host_of,
    record_head,
    record_packer,
)
from rocketflow.protocol.record_writer import topic_part as topic_part_of
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.store.config import StoreConfig
from rocketflow.store.dispatcher import DispatchBatch, enters_consume_queue, schedule_tags_code
from rocketflow.store.mapped_file import Chunk, MappedFile, MappedFileQueue, reserve_chunks, write_chunks
from rocketflow.store.put_request import AppendResult, IllegalMessageError, PutMessageRequest, PutMessageStatus


class AppendLog(Protocol):
    """What the append paths use of the commit log: its segments, its next queue offsets, its settings."""

    config: StoreConfig
    segment_size: int
    files: MappedFileQueue
    #: (topic, queue id) -> the next queue offset
    topic_queue_table: dict[tuple[str, int], int]
    #: the store host records get when their request names none (packed)
    default_store_host: bytes


def decoded_properties(props: bytes) -> dict[str, str]:
    """Encoded properties as a map ({} when they cannot be decoded): what a scheduled record's deliver time
    is computed from, as recovery recomputes it."""
    try:
        return decode_properties_bytes(props)
    except InvalidPropertyError:
        return {}


def roll_segment(files: MappedFileQueue, mapped: MappedFile, parts: list[bytes], room: int,
                 chunks: list[Chunk]) -> tuple[MappedFile, list[bytes]]:
    """Close ``mapped`` with a blank record over its last ``room`` bytes (its chunk, ``parts``, joins
    ``chunks``): the next segment, and an empty parts list for it."""
    parts.append(blank_record(room))
    chunks.append((mapped, parts, True))
    return files.next_for_write(mapped), []


def index_keys_of(request: PutMessageRequest, prefix: str) -> list[bytes]:
    """A message's index keys (``topic#UNIQ_KEY``, then ``topic#key`` for each of its KEYS)."""
    uniq = request.uniq_key
    keys = request.keys
    if uniq is None:
        uniq = request.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if keys is None:
        keys = request.properties.get(MessageConst.KEYS)
    found = [(prefix + uniq).encode("utf-8", "replace")] if uniq else []
    if keys:
        found += [(prefix + word).encode("utf-8", "replace") for word in keys.split(MessageConst.KEY_SEPARATOR)
                  if word]
    return found


def append_messages(log: AppendLog, requests: Sequence[PutMessageRequest],
                    now: int) -> tuple[AppendResult, DispatchBatch]:
    """Append messages at the end of ``log``: one contiguous write per segment, all or nothing.

    Raises `IllegalMessageError` (nothing written) for a request that cannot be stored.
    """
    if not requests:
        raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
    if len(requests) == 1:
        appended = append_one(log, requests[0], now)
        if appended is not None:
            return appended
    config = log.config
    max_size = config.max_message_size
    max_props = config.max_properties_size
    segment_size = log.segment_size
    table = log.topic_queue_table
    saved_table: dict[tuple[str, int], int] = {}
    files = log.files
    mapped = first_mapped = files.last_for_write(0)
    base = mapped.file_from_offset
    pos = mapped.wrote_position
    room = segment_size - pos
    first_offset = base + pos
    chunks: list[Chunk] = []
    parts: list[bytes] = []
    add = parts.append
    batch = DispatchBatch(store_timestamp=now)
    runs = batch.runs
    indexing = config.message_index_enable
    index_keys = batch.index_keys
    add_index = index_keys.append
    add_index_offset = batch.index_offsets.append
    offsets: list[int] = []
    add_offset = offsets.append
    queue_offsets: list[int] = []
    add_queue_offset = queue_offsets.append
    total = 0
    last_born_source: object = None
    last_store_source: object = None
    born = store = b""
    store_default = log.default_store_host
    record_struct = record_packer
    packer_sets: dict[tuple[str, int], dict[tuple[int, int], struct.Struct]] = {}
    packers: dict[tuple[int, int], struct.Struct] = {}
    # the packer of the previous record, reused while the lengths and packer set stay the same
    packer = RECORD_HEADS[0]
    packer_body_len = packer_props_len = -1
    packer_set = packers
    crc32 = zlib.crc32
    delay_levels = config.delay_levels_ms
    # what the previous message shared with this one: the per-(topic, queue, hosts, sys flag) work
    # below is redone only when one of them changes (a batch usually has one of each)
    last_topic: object = None
    last_queue_id = -1
    last_sys_flag = -1
    key: tuple[str, int] = ("", 0)
    topic = ""
    topic_part = b""
    head = RECORD_HEADS[0]
    fixed = 0
    sys_flag = 0
    in_queue = True
    schedule = False
    index_prefix = ""
    queue_offset = 0
    run_units: list[Any] = []
    add_units = run_units.extend
    try:
        for request in requests:
            born_source = request.born_host
            store_source = request.store_host
            if (request.topic is not last_topic or request.queue_id != last_queue_id
                    or request.sys_flag != last_sys_flag or born_source is not last_born_source
                    or store_source is not last_store_source):
                if in_queue and last_topic is not None:
                    table[key] = queue_offset
                topic = request.topic
                try:
                    topic_part = topic_part_of(topic)
                except (ValueError, UnicodeEncodeError, AttributeError) as exc:
                    raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"bad topic: {exc}") from None
                if born_source is not last_born_source or store_source is not last_store_source:
                    try:
                        born = packed_host(born_source)
                        store = store_default if store_source is None else packed_host(store_source)
                    except (ValueError, TypeError, IndexError) as exc:
                        raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL,
                                                  f"bad host: {exc}") from None
                    last_born_source, last_store_source = born_source, store_source
                last_sys_flag = request.sys_flag
                head, sys_flag = record_head(born, store, last_sys_flag)
                fixed = head.size + PROPERTIES_LENGTH.size + len(topic_part)
                last_topic = topic
                last_queue_id = request.queue_id
                key = (topic, last_queue_id)
                in_queue = enters_consume_queue(sys_flag)
                schedule = topic == SCHEDULE_TOPIC
                index_prefix = topic + "#"
                packers = packer_sets.setdefault((head.format, len(topic_part)), {})
                if in_queue:
                    queue_offset = table.get(key, 0)
                    if key not in saved_table:
                        saved_table[key] = queue_offset
                    run = runs.get(key)
                    if run is None:
                        runs[key] = run = [queue_offset, []]
                    run_units = run[1]
                    add_units = run_units.extend
            props = request.properties_bytes
            if props is None:
                try:
                    props = encode_properties_bytes(request.properties)
                except InvalidPropertyError as exc:
                    raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, str(exc)) from None
            props_len = len(props)
            if props_len > max_props:
                raise IllegalMessageError(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                          f"properties are {props_len} bytes, at most {max_props} allowed")
            body = request.body
            body_len = len(body)
            size = fixed + body_len + props_len
            if size > max_size or size + BLANK_RECORD_SIZE > segment_size:
                raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL,
                                          f"message of {size} bytes exceeds the maximum {max_size}")
            if size + BLANK_RECORD_SIZE > room:
                mapped, parts = roll_segment(files, mapped, parts, room, chunks)
                base = mapped.file_from_offset
                pos = mapped.wrote_position
                room = segment_size - pos
                add = parts.append
                if not offsets:
                    first_offset = base + pos
            phys = base + pos
            tags = request.tags_code
            if tags is None:
                tags = compute_tags_code(request.properties.get(MessageConst.TAGS))
            if in_queue:
                if schedule:
                    # from the stored properties, exactly as recovery recomputes it
                    deliver_at = schedule_tags_code(decoded_properties(props), now, delay_levels)
                    if deliver_at is not None:
                        tags = deliver_at
                stored_queue_offset = queue_offset
                queue_offset += 1
                add_units((phys, size, tags))
            else:
                stored_queue_offset = 0
            if body_len != packer_body_len or props_len != packer_props_len or packers is not packer_set:
                found = packers.get((body_len, props_len))
                if found is None:
                    found = packers[(body_len, props_len)] = record_struct(head, body_len, len(topic_part),
                                                                           props_len)
                packer = found
                packer_body_len, packer_props_len, packer_set = body_len, props_len, packers
            add(packer.pack(
                size, MAGIC_CODE, crc32(body) & 0x7FFFFFFF, last_queue_id, request.flag, stored_queue_offset,
                phys, sys_flag, request.born_timestamp, born, now, store, request.reconsume_times,
                request.prepared_transaction_offset, body_len, body, topic_part, props_len, props))
            pos += size
            room -= size
            total += size
            add_offset(phys)
            add_queue_offset(stored_queue_offset)
            if indexing:
                for index_key in index_keys_of(request, index_prefix):
                    add_index(index_key)
                    add_index_offset(phys)
        if in_queue:
            table[key] = queue_offset
        batch.index_timestamps = [now] * len(index_keys)
        chunks.append((mapped, parts, False))
        reserve_chunks(chunks, pos)
    except BaseException:
        for key, value in saved_table.items():
            if value:
                table[key] = value
            else:
                table.pop(key, None)
        files.discard_unused_after(first_mapped)
        raise
    write_chunks(chunks)
    end_offset = base + pos
    batch.end_offset = end_offset
    result = AppendResult(
        status=PutMessageStatus.PUT_OK,
        wrote_offset=first_offset,
        wrote_bytes=total,
        queue_offset=queue_offsets[0],
        store_timestamp=now,
        message_count=len(offsets),
        commit_log_offsets=offsets,
        queue_offsets=queue_offsets,
        store_host=store,
        end_offset=end_offset,
    )
    return result, batch


def append_one(log: AppendLog, request: PutMessageRequest, now: int) -> tuple[AppendResult, DispatchBatch] | None:
    """`append_messages` of the usual single message, in a few steps: None when it is anything else (IPv6
    hosts, a delay, properties not encoded yet, a record that does not fit the last segment, or one to
    reject), which the general loop then stores or rejects."""
    topic = request.topic
    props = request.properties_bytes
    born_source = request.born_host
    store_source = request.store_host
    if props is None or topic == SCHEDULE_TOPIC or type(born_source) is not tuple:
        return None
    try:
        topic_part = topic_part_of(topic)
        born = packed_host_of(born_source[0], born_source[1])
        store = log.default_store_host if store_source is None else packed_host(store_source)
    except (ValueError, TypeError, IndexError, UnicodeEncodeError, AttributeError):
        return None
    if len(born) != 8 or len(store) != 8:
        return None
    body = request.body
    body_len = len(body)
    props_len = len(props)
    topic_len = len(topic_part)
    size = HEAD_SIZE_V4 + PROPERTIES_LENGTH.size + topic_len + body_len + props_len
    config = log.config
    if props_len > config.max_properties_size or size > config.max_message_size:
        return None
    mapped = log.files.last_for_write(0)
    pos = mapped.wrote_position
    if size + BLANK_RECORD_SIZE > log.segment_size - pos:
        return None
    phys = mapped.file_from_offset + pos
    sys_flag = request.sys_flag & ~HOSTS_V6_BITS
    tags = request.tags_code
    if tags is None:
        tags = compute_tags_code(request.properties.get(MessageConst.TAGS))
    queue_id = request.queue_id
    key = (topic, queue_id)
    in_queue = enters_consume_queue(sys_flag)
    queue_offset = log.topic_queue_table.get(key, 0) if in_queue else 0
    record = record_packer(RECORD_HEADS[0], body_len, topic_len, props_len).pack(
        size, MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, queue_id, request.flag, queue_offset, phys, sys_flag,
        request.born_timestamp, born, now, store, request.reconsume_times, request.prepared_transaction_offset,
        body_len, body, topic_part, props_len, props)
    index_keys = index_keys_of(request, topic + "#") if config.message_index_enable else []
    mapped.append(record)  # raises OSError (nothing written) when the disk is full
    end_offset = phys + size
    if in_queue:
        log.topic_queue_table[key] = queue_offset + 1
    batch = DispatchBatch(runs={key: [queue_offset, [phys, size, tags]]} if in_queue else {},
                          index_keys=index_keys, index_offsets=[phys] * len(index_keys),
                          index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
    result = AppendResult(status=PutMessageStatus.PUT_OK, wrote_offset=phys, wrote_bytes=size,
                          queue_offset=queue_offset, store_timestamp=now, message_count=1,
                          commit_log_offsets=[phys], queue_offsets=[queue_offset], store_host=store,
                          end_offset=end_offset)
    return result, batch


__all__ = ["AppendLog", "append_messages", "append_one", "decoded_properties", "index_keys_of", "roll_segment"]
