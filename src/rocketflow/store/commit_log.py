"""The commit log: every message of every topic, appended as PROTOCOL.md 3.3 records to segment files."""

from __future__ import annotations

import enum
import functools
import logging
import mmap
import struct
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketflow.errors import RocketflowError
from rocketflow.protocol.codec import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    RECORD_FIXED_SIZE_V4,
    SYS_FLAG_POSITION,
    RecordDecodeError,
    decode_record,
    has_zlib_header,
)
from rocketflow.protocol.ids import HOST_SIZE_V6, offset_msg_id_from_packed, pack_host
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.properties import (
    InvalidPropertyError,
    decode_properties,
    decode_properties_bytes,
    encode_properties_bytes,
)
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.store.config import StoreConfig
from rocketflow.store.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

_BLANK = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_HEADS = {
    (False, False): struct.Struct(">iiiiiqqiq8sq8siqi"),
    (True, False): struct.Struct(">iiiiiqqiq20sq8siqi"),
    (False, True): struct.Struct(">iiiiiqqiq8sq20siqi"),
    (True, True): struct.Struct(">iiiiiqqiq20sq20siqi"),
}
_HEAD_V4 = _HEADS[(False, False)]
_HEAD_V4_SIZE = _HEAD_V4.size
_RECORD_STRUCTS: dict[tuple[str, int, int, int], struct.Struct] = {}
_RECORD_STRUCTS_MAX = 4096


def _record_struct(head: struct.Struct, body_len: int, topic_len: int, props_len: int) -> struct.Struct:
    """One struct for a whole record (head, body, topic, properties), cached by the variable lengths.

    Packing a record in one call instead of five pieces joined later is the main saving of the put path.
    """
    key = (head.format, body_len, topic_len, props_len)
    packer = _RECORD_STRUCTS.get(key)
    if packer is None:
        if len(_RECORD_STRUCTS) >= _RECORD_STRUCTS_MAX:
            _RECORD_STRUCTS.clear()
        packer = _RECORD_STRUCTS[key] = struct.Struct(f"{head.format}{body_len}s{topic_len}sh{props_len}s")
    return packer
#: a batch element's head as producers encode it: total size, magic, body CRC, flag, body length
_BATCH_ELEMENT_HEAD = struct.Struct(">iiiii")
_BATCH_ELEMENT_HEAD_SIZE = _BATCH_ELEMENT_HEAD.size
#: the smallest element: the head and an empty properties length
_BATCH_ELEMENT_MIN = _BATCH_ELEMENT_HEAD_SIZE + 2
#: fields of a packed record with the batch's properties apart: the head's 15, body, topic, properties length,
#: own properties, batch properties
_RECORD_FIELDS = 20
#: the most messages a one-size batch is packed for at once (larger ones take the per-message loop)
_ONE_SIZE_BATCH_MAX = 1024
#: distinct TAGS values whose codes a commit log remembers before starting over
_TAGS_CACHE_MAX = 4096
_V6_BITS = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
_BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
_COMPRESSED = int(MessageSysFlag.COMPRESSED)
_STORE_V6 = int(MessageSysFlag.STOREHOST_V6)
_TRANSACTION_MASK = 0xC
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED)
_ROLLBACK = int(MessageSysFlag.TRANSACTION_ROLLBACK)
#: The blank end-of-segment record takes 8 bytes, so a record needs that much room after it.
END_FILE_MIN_BLANK_LENGTH = 8


def enters_consume_queue(sys_flag: int) -> bool:
    """Whether a record with `sys_flag` gets a consume-queue unit (not a prepared or rolled-back half)."""
    transaction = sys_flag & _TRANSACTION_MASK
    return transaction != _PREPARED and transaction != _ROLLBACK


class PutMessageStatus(enum.Enum):
    """Outcome of a put (RocketMQ's `PutMessageStatus`)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def is_ok(self) -> bool:
        return self is PutMessageStatus.PUT_OK


def schedule_tags_code(properties: Mapping[str, str], store_timestamp: int,
                       delay_levels_ms: Sequence[int]) -> int | None:
    """Tags code of a SCHEDULE_TOPIC_XXXX record: its deliver time, store time + the delay of its DELAY level.

    The level is clamped to the highest one (as RocketMQ); None when the record has no usable level.
    """
    text = properties.get(MessageConst.DELAY_TIME_LEVEL)
    if not text or not delay_levels_ms:
        return None
    try:
        level = int(text)
    except ValueError:
        return None
    if level <= 0:
        return None
    return store_timestamp + delay_levels_ms[min(level, len(delay_levels_ms)) - 1]


def _decoded_properties(props: bytes) -> dict[str, str]:
    try:
        return decode_properties_bytes(props)
    except InvalidPropertyError:
        return {}


@functools.lru_cache(maxsize=1024)
def _packed_host(host: str, port: int) -> bytes:
    return pack_host(host, port)


def packed_host(host: tuple[str, int] | bytes) -> bytes:
    """A host as records store it (8 or 20 bytes), from `(ip, port)` or already packed bytes."""
    if isinstance(host, bytes):
        if len(host) not in (8, 20):
            raise ValueError(f"a packed host is 8 or 20 bytes, got {len(host)}")
        return host
    return _packed_host(host[0], host[1])


@functools.lru_cache(maxsize=4096)
def _topic_part(topic: str) -> bytes:
    raw = topic.encode("utf-8")
    if len(raw) > 127:
        raise ValueError(f"topic is {len(raw)} bytes in UTF-8, at most 127 allowed")
    return bytes((len(raw),)) + raw


@dataclass(slots=True)
class PutMessageRequest:
    """One message to store, as the broker hands it over (already routed to topic and queue).

    ``properties_bytes`` is the encoded properties string (UTF-8); when None it is encoded from
    ``properties``. ``tags_code``, ``keys`` and ``uniq_key`` default to what ``properties`` holds
    (TAGS, KEYS, UNIQ_KEY); pass them explicitly together with ``properties_bytes`` to skip that work.
    ``body`` is stored as is (already compressed if ``sys_flag`` says so).
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    properties_bytes: bytes | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | bytes = ("127.0.0.1", 0)
    store_host: tuple[str, int] | bytes | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int | None = None
    keys: str | None = None
    uniq_key: str | None = None
    wait_store_msg_ok: bool = True


def _index_keys(request: PutMessageRequest, prefix: str) -> list[bytes]:
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


@dataclass(slots=True)
class EncodedBatchRequest:
    """A SEND_BATCH_MESSAGE body as the producer encoded it, stored in one pass (RocketMQ's MessageExtBatch).

    ``encoded`` holds the messages in RocketMQ's batch encoding (each: total size, magic, body CRC,
    flag, body length, body, properties length, properties). The commit log walks it once: it checks
    every message, reads TAGS, KEYS and UNIQ_KEY in place, and stores each message's properties
    followed by ``properties_suffix`` (the batch-wide properties, e.g. CLUSTER), as RocketMQ's
    batch encoder does. A malformed message raises `IllegalMessageError` before anything is written.
    """

    topic: str
    queue_id: int
    encoded: bytes
    #: encoded properties added to every message's own (a separator goes between when needed)
    properties_suffix: bytes = b""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | bytes = ("127.0.0.1", 0)
    store_host: tuple[str, int] | bytes | None = None
    wait_store_msg_ok: bool = True


#: what one put stores: messages one by one, or a batch of one topic and queue
PutRequests = Sequence[PutMessageRequest] | EncodedBatchRequest


def waits_for_store(requests: PutRequests) -> bool:
    """Whether a put's sender waits for it to be durable (the WAIT property, RocketMQ's waitStoreMsgOK)."""
    if isinstance(requests, EncodedBatchRequest):
        return requests.wait_store_msg_ok
    return any(request.wait_store_msg_ok for request in requests)


@dataclass(slots=True)
class DispatchBatch:
    """Consume-queue units and index keys of a batch of stored records, grouped for cheap dispatch.

    ``runs`` maps (topic, queue id) to ``[first queue offset, flat [phys, size, tags code, ...]]``
    with consecutive queue offsets; ``index_keys`` (``b"topic#key"``), ``index_offsets`` (phys) and
    ``index_timestamps`` (store time) are the index entries, in parallel lists.
    """

    runs: dict[tuple[str, int], list[Any]] = field(default_factory=dict)
    index_keys: list[bytes] = field(default_factory=list)
    index_offsets: list[int] = field(default_factory=list)
    index_timestamps: list[int] = field(default_factory=list)
    store_timestamp: int = 0
    end_offset: int = 0
    #: records the batch covers (with those that enter no consume queue)
    record_count: int = 0


@dataclass(slots=True)
class AppendResult:
    """Where a put (one message or a batch) landed.

    ``wrote_offset`` is the commit-log offset of the first record, ``queue_offset`` the first
    message's consume-queue offset; per-message values are in the lists.
    """

    status: PutMessageStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    message_count: int = 0
    commit_log_offsets: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    store_host: bytes = b""
    error: str = ""
    #: commit-log offset just past the last record (what a sync flush must cover)
    end_offset: int = 0

    @property
    def msg_id(self) -> str:
        """The offset msg id of the first message ('' when nothing was stored)."""
        if not self.commit_log_offsets:
            return ""
        return offset_msg_id_from_packed(self.store_host, self.commit_log_offsets[0])

    @property
    def msg_ids(self) -> list[str]:
        """Offset msg ids of every stored message (computed on demand: the put path skips it)."""
        return [offset_msg_id_from_packed(self.store_host, off) for off in self.commit_log_offsets]

    @classmethod
    def failed(cls, status: PutMessageStatus, error: str) -> AppendResult:
        return cls(status=status, error=error)


@dataclass(slots=True)
class _StagedBatch:
    """A one-size batch packed for a place in the last segment, not written yet."""

    records: bytes
    #: (topic, queue id), or None when the records enter no consume queue
    key: tuple[str, int] | None
    first_queue_offset: int
    count: int
    first_offset: int
    units: list[int]
    index_keys: list[bytes]
    index_offsets: list[int]
    offsets: list[int]
    store: bytes


@functools.lru_cache(maxsize=256)
def _one_size_batch_struct(body_len: int, props_len: int, count: int) -> struct.Struct:
    """An encoded batch of `count` messages of one body and one properties length, as one struct."""
    return struct.Struct(">" + f"iiiii{body_len}sH{props_len}s" * count)


@functools.lru_cache(maxsize=256)
def _one_size_records_struct(head: struct.Struct, body_len: int, topic_len: int, props_len: int, suffix_len: int,
                             count: int) -> struct.Struct:
    """`count` records of one size as one struct: each record's properties are its own, then the suffix."""
    record = f"{head.format.lstrip('>')}{body_len}s{topic_len}sh{props_len}s{suffix_len}s"
    return struct.Struct(">" + record * count)


def _property_values(all_props: Sequence[bytes], name: bytes) -> list[bytes | None]:
    """Per encoded properties, the value of `name` (``b"KEY\\x01"``) as the batch loop reads it, or None."""
    width = len(name)
    values: list[bytes | None] = []
    add = values.append
    for props in all_props:
        found = props.find(name)
        if found >= 0 and (found == 0 or props[found - 1] == 2):
            stop = props.find(b"\x02", found + width)
            add(props[found + width:stop] if stop >= 0 else props[found + width:])
        else:
            add(None)
    return values


def _same_place_values(data: bytes, all_props: Sequence[bytes], name: bytes, props_start: int,
                       element_size: int, prefix: bytes = b"") -> list[bytes] | None:
    """`prefix` + what `_property_values` reads, when `name` has a value of one length at one place in every
    message of a one-size batch (a producer's UNIQ_KEY): a find per message and strided byte counts instead of a
    loop. None when it is not so, or a value is empty."""
    count = len(all_props)
    first_props = all_props[0]
    first = first_props.find(name)
    if first < 0 or [props.find(name) for props in all_props].count(first) != count:
        return None
    # each name starts a property: at the start, or after a separator in every message
    if first and data[props_start + first - 1::element_size].count(2) != count:
        return None
    value_start = first + len(name)
    stop = first_props.find(b"\x02", value_start)
    if stop >= 0:
        if stop == value_start or data[props_start + stop::element_size].count(2) != count:
            return None
        values = [prefix + props[value_start:stop] for props in all_props]
    else:
        if value_start == len(first_props):
            return None
        values = [prefix + props[value_start:] for props in all_props]
    # a separator inside a value means that message's value ends earlier: not one place after all
    if b"".join(values).count(2) != prefix.count(2) * count:
        return None
    return values


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _illegal_element(index: int, detail: str) -> IllegalMessageError:
    return IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"batch message {index}: {detail}")


def _reserve_chunks(chunks: Sequence[tuple[MappedFile, list[bytes], bool]], last_end: int) -> None:
    """Allocate the disk space of every chunk of a put before writing any: a full disk fails it as a whole.

    `last_end` is where the last chunk ends in its segment (the earlier ones are summed).
    """
    for target, chunk_parts, _end_of_file in chunks[:-1]:
        target.reserve(target.wrote_position + sum(map(len, chunk_parts)))
    chunks[-1][0].reserve(last_end)


def _zero_tailed_last_record(mm: mmap.mmap, pos: int, total: int, sys_flag: int, segment_size: int) -> bool:
    """Whether the record at `pos` (ending in a zero byte) has properties and is not followed by a record.

    Then its properties were cut by a tear: the bytes from the tear on read as zeros. A record
    followed by another one (or by the end-of-segment blank) was written whole.
    """
    head_size = _HEADS[(bool(sys_flag & _BORN_V6), bool(sys_flag & _STORE_V6))].size
    body_len = _I32.unpack_from(mm, pos + head_size - 4)[0]
    topic_len = mm[pos + head_size + body_len]
    if head_size + body_len + 1 + topic_len + 2 >= total:
        return False  # no properties: the record ends in its zero properties length
    following = pos + total
    if following + 8 > segment_size:
        return True
    magic: int = _BLANK.unpack_from(mm, following)[1]
    return magic != MAGIC_CODE and magic != BLANK_MAGIC_CODE


#: records per `DispatchBatch` a commit-log scan hands over
SCAN_BATCH_RECORDS = 4096
#: the low byte of the sys flag, whose bits 4 and 5 say which hosts are IPv6 (and so the head's size)
_SYS_FLAG_LOW_BYTE = SYS_FLAG_POSITION + 3
#: what a scan reads of a record's head (up to the body length), hosts skipped; by the sys flag's v6 bits
_SCAN_HEADS = tuple(struct.Struct(f">iiii4xqqi8x{born}xq{store}x12xi")
                    for born, store in ((8, 8), (20, 8), (8, 20), (20, 20)))
_MIN_RECORD_SIZE = _SCAN_HEADS[0].size + 3
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
    if len(_scan_topic_cache) >= 4096:
        _scan_topic_cache.clear()
    _scan_topic_cache[raw] = topic
    return topic


class IllegalMessageError(RocketflowError, ValueError):
    """A put request that cannot be stored; `status` says why."""

    def __init__(self, status: PutMessageStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class CommitLog:
    """Segments of records plus the per-(topic, queue) next queue offsets.

    Appends must be serialised by the caller (the store's put lock); reads need no lock.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.segment_size = config.commit_log_segment_size
        self.files = MappedFileQueue(config.commit_log_dir, self.segment_size)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        #: TAGS value (raw bytes) -> tags code, for encoded batches
        self._tags_codes: dict[bytes, int] = {}
        self.default_store_host = pack_host(*config.store_host)
        self.lock = threading.Lock()
        self.confirm_offset = 0

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Offset of the first record still stored (RocketMQ's `getMinOffset`)."""
        first = self.files.first
        return first.file_from_offset if first is not None else 0

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    def roll_next_file(self, offset: int) -> int:
        return offset + self.segment_size - offset % self.segment_size

    # -- append ----------------------------------------------------------------------------
    def append(
        self, requests: Sequence[PutMessageRequest], now_ms: int | None = None
    ) -> tuple[AppendResult, DispatchBatch]:
        """Append a batch: one contiguous write per segment, all or nothing.

        Raises `IllegalMessageError` (nothing written) for a request that cannot be stored.
        """
        if not requests:
            raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, "empty batch")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if len(requests) == 1:
            appended = self._append_one(requests[0], now)
            if appended is not None:
                return appended
        max_size = self.config.max_message_size
        max_props = self.config.max_properties_size
        segment_size = self.segment_size
        table = self.topic_queue_table
        saved_table: dict[tuple[str, int], int] = {}
        files = self.files
        mapped = first_mapped = files.last_for_write(0)
        base = mapped.file_from_offset
        pos = mapped.wrote_position
        room = segment_size - pos
        first_offset = base + pos
        chunks: list[tuple[MappedFile, list[bytes], bool]] = []
        parts: list[bytes] = []
        add = parts.append
        batch = DispatchBatch(store_timestamp=now)
        runs = batch.runs
        indexing = self.config.message_index_enable
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
        store_default = self.default_store_host
        record_struct = _record_struct
        packer_sets: dict[tuple[str, int], dict[tuple[int, int], struct.Struct]] = {}
        packers: dict[tuple[int, int], struct.Struct] = {}
        # the packer of the previous record, reused while the lengths and packer set stay the same
        packer = _HEAD_V4
        packer_body_len = packer_props_len = -1
        packer_set = packers
        crc32 = zlib.crc32
        delay_levels = self.config.delay_levels_ms
        # what the previous message shared with this one: the per-(topic, queue, hosts, sys flag) work
        # below is redone only when one of them changes (a batch usually has one of each)
        last_topic: object = None
        last_queue_id = -1
        last_sys_flag = -1
        key: tuple[str, int] = ("", 0)
        topic = ""
        topic_part = b""
        head = _HEAD_V4
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
                        topic_part = _topic_part(topic)
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
                    born_v6 = len(born) == HOST_SIZE_V6
                    store_v6 = len(store) == HOST_SIZE_V6
                    head = _HEADS[(born_v6, store_v6)]
                    last_sys_flag = request.sys_flag
                    sys_flag = (last_sys_flag & ~_V6_BITS) | (_BORN_V6 if born_v6 else 0) | (
                        _STORE_V6 if store_v6 else 0)
                    fixed = head.size + 2 + len(topic_part)
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
                if size > max_size or size + END_FILE_MIN_BLANK_LENGTH > segment_size:
                    raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL,
                                              f"message of {size} bytes exceeds the maximum {max_size}")
                if size + END_FILE_MIN_BLANK_LENGTH > room:
                    add(_BLANK.pack(room, BLANK_MAGIC_CODE))
                    chunks.append((mapped, parts, True))
                    mapped = files.next_for_write(mapped)
                    base = mapped.file_from_offset
                    pos = mapped.wrote_position
                    room = segment_size - pos
                    parts = []
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
                        deliver_at = schedule_tags_code(_decoded_properties(props), now, delay_levels)
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
                    for index_key in _index_keys(request, index_prefix):
                        add_index(index_key)
                        add_index_offset(phys)
            if in_queue:
                table[key] = queue_offset
            batch.index_timestamps = [now] * len(index_keys)
            chunks.append((mapped, parts, False))
            _reserve_chunks(chunks, pos)
        except BaseException:
            for key, value in saved_table.items():
                if value:
                    table[key] = value
                else:
                    table.pop(key, None)
            files.discard_unused_after(first_mapped)
            raise
        for target, chunk_parts, end_of_file in chunks:
            if chunk_parts:
                target.append(b"".join(chunk_parts))
            if end_of_file:
                target.wrote_position = target.file_size
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

    def _append_one(self, request: PutMessageRequest, now: int) -> tuple[AppendResult, DispatchBatch] | None:
        """`append` of the usual single message, in a few steps: None when it is anything else (IPv6
        hosts, a delay, properties not encoded yet, a record that does not fit the last segment, or
        one to reject), which `append`'s general loop then stores or rejects."""
        topic = request.topic
        props = request.properties_bytes
        born_source = request.born_host
        store_source = request.store_host
        if props is None or topic == SCHEDULE_TOPIC or type(born_source) is not tuple:
            return None
        try:
            topic_part = _topic_part(topic)
            born = _packed_host(born_source[0], born_source[1])
            store = self.default_store_host if store_source is None else packed_host(store_source)
        except (ValueError, TypeError, IndexError, UnicodeEncodeError, AttributeError):
            return None
        if len(born) != 8 or len(store) != 8:
            return None
        body = request.body
        body_len = len(body)
        props_len = len(props)
        topic_len = len(topic_part)
        size = _HEAD_V4_SIZE + 2 + topic_len + body_len + props_len
        config = self.config
        if props_len > config.max_properties_size or size > config.max_message_size:
            return None
        mapped = self.files.last_for_write(0)
        pos = mapped.wrote_position
        if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size - pos:
            return None
        phys = mapped.file_from_offset + pos
        sys_flag = request.sys_flag & ~_V6_BITS
        tags = request.tags_code
        if tags is None:
            tags = compute_tags_code(request.properties.get(MessageConst.TAGS))
        queue_id = request.queue_id
        key = (topic, queue_id)
        in_queue = enters_consume_queue(sys_flag)
        queue_offset = self.topic_queue_table.get(key, 0) if in_queue else 0
        record = _record_struct(_HEAD_V4, body_len, topic_len, props_len).pack(
            size, MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, queue_id, request.flag, queue_offset, phys, sys_flag,
            request.born_timestamp, born, now, store, request.reconsume_times, request.prepared_transaction_offset,
            body_len, body, topic_part, props_len, props)
        index_keys = _index_keys(request, topic + "#") if config.message_index_enable else []
        mapped.append(record)  # raises OSError (nothing written) when the disk is full
        end_offset = phys + size
        if in_queue:
            self.topic_queue_table[key] = queue_offset + 1
        batch = DispatchBatch(runs={key: [queue_offset, [phys, size, tags]]} if in_queue else {},
                              index_keys=index_keys, index_offsets=[phys] * len(index_keys),
                              index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
        result = AppendResult(status=PutMessageStatus.PUT_OK, wrote_offset=phys, wrote_bytes=size,
                              queue_offset=queue_offset, store_timestamp=now, message_count=1,
                              commit_log_offsets=[phys], queue_offsets=[queue_offset], store_host=store,
                              end_offset=end_offset)
        return result, batch

    def _batch_layout(self, batch: EncodedBatchRequest) -> tuple[bytes, bytes, bytes, struct.Struct, int]:
        """What every record of a batch shares: topic part, born and store hosts, head struct, sys flag."""
        try:
            topic_part = _topic_part(batch.topic)
        except (ValueError, UnicodeEncodeError, AttributeError) as exc:
            raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"bad topic: {exc}") from None
        try:
            born = packed_host(batch.born_host)
            store = self.default_store_host if batch.store_host is None else packed_host(batch.store_host)
        except (ValueError, TypeError, IndexError) as exc:
            raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, f"bad host: {exc}") from None
        born_v6 = len(born) == HOST_SIZE_V6
        store_v6 = len(store) == HOST_SIZE_V6
        sys_flag = (batch.sys_flag & ~_V6_BITS) | (_BORN_V6 if born_v6 else 0) | (_STORE_V6 if store_v6 else 0)
        return topic_part, born, store, _HEADS[(born_v6, store_v6)], sys_flag

    def _write_batch(self, chunks: list[tuple[MappedFile, list[bytes], bool]], key: tuple[str, int] | None,
                     first_queue_offset: int, next_queue_offset: int, units: list[int], index_keys: list[bytes],
                     index_offsets: list[int], now: int, first_offset: int, end_offset: int, total: int,
                     count: int, offsets: list[int], store: bytes) -> tuple[AppendResult, DispatchBatch]:
        """Write a packed batch's chunks (space reserved) and account for it: the result and its dispatch."""
        for target, chunk_parts, end_of_file in chunks:
            if chunk_parts:
                target.append(chunk_parts[0] if len(chunk_parts) == 1 else b"".join(chunk_parts))
            if end_of_file:
                target.wrote_position = target.file_size
        if key is not None:
            self.topic_queue_table[key] = next_queue_offset
            queue_offsets = list(range(first_queue_offset, next_queue_offset))
        else:
            queue_offsets = [0] * count
        dispatch = DispatchBatch(runs={key: [first_queue_offset, units]} if key is not None else {},
                                 index_keys=index_keys, index_offsets=index_offsets,
                                 index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
        result = AppendResult(
            status=PutMessageStatus.PUT_OK,
            wrote_offset=first_offset,
            wrote_bytes=total,
            queue_offset=first_queue_offset,
            store_timestamp=now,
            message_count=count,
            commit_log_offsets=offsets,
            queue_offsets=queue_offsets,
            store_host=store,
            end_offset=end_offset,
        )
        return result, dispatch

    def _append_one_size_batch(self, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes,
                               store: bytes, head: struct.Struct, sys_flag: int
                               ) -> tuple[AppendResult, DispatchBatch] | None:
        """`append_encoded_batch` for a batch whose messages all have one encoded size, or None (nothing done)
        when it is not like that (see `_stage_one_size_batch`)."""
        mapped = self.files.last_for_write(0)
        staged = self._stage_one_size_batch(batch, now, topic_part, born, store, head, sys_flag, mapped,
                                            mapped.wrote_position, self.topic_queue_table)
        if staged is None:
            return None
        results, dispatch = self._write_staged(mapped, [staged], now)
        return results[0], dispatch

    def append_encoded_batches(self, batches: Sequence[EncodedBatchRequest],
                               now_ms: int | None = None) -> tuple[list[AppendResult], DispatchBatch]:
        """Append the leading batches of `batches` that can be written at once, at least the first one.

        Those that take the one-size path and fit the last segment (several batches that arrived
        together, say) are packed one after the other and written in one piece, with one dispatch
        for all; when the first cannot be, it alone is stored as `append_encoded_batch` stores it.
        Returns the results of the batches taken (a prefix of `batches`) and their dispatch. Raises
        as `append_encoded_batch` does for the first batch (nothing written); a later batch that
        would fail is left for the next call.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        mapped = self.files.last_for_write(0)
        pos = mapped.wrote_position
        queue_offsets: dict[tuple[str, int], int] = {}
        staged: list[_StagedBatch] = []
        table = self.topic_queue_table
        for batch in batches:
            if batch.topic == SCHEDULE_TOPIC or not batch.encoded:
                break
            try:
                layout = self._batch_layout(batch)
            except IllegalMessageError:
                break
            key = (batch.topic, batch.queue_id)
            one = self._stage_one_size_batch(batch, now, *layout, mapped, pos,
                                             queue_offsets if key in queue_offsets else table)
            if one is None:
                if not staged:  # the first one takes the loop (its one-size attempt is already made)
                    result, dispatch = self._append_by_loop(batch, now, *layout)
                    return [result], dispatch
                break
            staged.append(one)
            pos += len(one.records)
            if one.key is not None:
                queue_offsets[one.key] = one.first_queue_offset + one.count
        if not staged:  # the first batch is refused, or belongs to SCHEDULE_TOPIC_XXXX
            result, dispatch = self.append_encoded_batch(batches[0], now)
            return [result], dispatch
        return self._write_staged(mapped, staged, now)

    def _write_staged(self, mapped: MappedFile, staged: list[_StagedBatch],
                      now: int) -> tuple[list[AppendResult], DispatchBatch]:
        """Write staged batches (consecutive, from the wrote position of `mapped`) in one piece: their
        results and one dispatch. Raises OSError (nothing written) when the disk has no room."""
        records = staged[0].records if len(staged) == 1 else b"".join([one.records for one in staged])
        first_offset = staged[0].first_offset
        try:
            mapped.reserve(mapped.wrote_position + len(records))
        except BaseException:
            self.files.discard_unused_after(mapped)
            raise
        mapped.append(records)
        end_offset = first_offset + len(records)
        table = self.topic_queue_table
        runs: dict[tuple[str, int], list[Any]] = {}
        index_keys: list[bytes] = []
        index_offsets: list[int] = []
        results: list[AppendResult] = []
        for one in staged:
            key = one.key
            count = one.count
            if key is not None:
                table[key] = one.first_queue_offset + count
                queue_offsets = list(range(one.first_queue_offset, one.first_queue_offset + count))
                run = runs.get(key)
                if run is None:
                    runs[key] = [one.first_queue_offset, one.units]
                else:  # the same queue again: its units follow on
                    run[1] = run[1] + one.units
            else:
                queue_offsets = [0] * count
            if one.index_keys:
                index_keys += one.index_keys
                index_offsets += one.index_offsets
            results.append(AppendResult(
                status=PutMessageStatus.PUT_OK,
                wrote_offset=one.first_offset,
                wrote_bytes=len(one.records),
                queue_offset=one.first_queue_offset,
                store_timestamp=now,
                message_count=count,
                commit_log_offsets=one.offsets,
                queue_offsets=queue_offsets,
                store_host=one.store,
                end_offset=one.first_offset + len(one.records),
            ))
        dispatch = DispatchBatch(runs=runs, index_keys=index_keys, index_offsets=index_offsets,
                                 index_timestamps=[now] * len(index_keys), store_timestamp=now, end_offset=end_offset)
        return results, dispatch

    def _stage_one_size_batch(self, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes,
                              store: bytes, head: struct.Struct, sys_flag: int, mapped: MappedFile, pos: int,
                              queue_offsets: Mapping[tuple[str, int], int]) -> _StagedBatch | None:
        """Pack a batch whose messages all have one body and one properties length (a producer batching
        same-size records) for position `pos` of `mapped`: one unpack of the whole batch, one pack of all
        its records, and per-message work only in comprehensions. `queue_offsets` gives the queue's next
        offset. None when the batch is not like that, or needs anything the loop does (a check to fail,
        a separator to add, a segment to roll over)."""
        data = batch.encoded
        end = len(data)
        if end < _BATCH_ELEMENT_MIN:
            return None
        element_size, _magic, _crc, _flag, body_len = _BATCH_ELEMENT_HEAD.unpack_from(data, 0)
        props_len = element_size - _BATCH_ELEMENT_MIN - body_len
        if element_size < _BATCH_ELEMENT_MIN or end % element_size or body_len < 0 or not 0 <= props_len <= 0x7FFF:
            return None
        count = end // element_size
        if count > _ONE_SIZE_BATCH_MAX:
            return None
        config = self.config
        suffix = batch.properties_suffix
        if suffix and props_len:
            # each message's last byte is its last properties byte: a separator goes before the batch's
            # properties in all messages or in none, else the loop decides message by message
            ended = data[element_size - 1::element_size].count(2)
            if ended == 0:
                suffix = b"\x02" + suffix
            elif ended != count:
                return None
        record_props_len = props_len + len(suffix)
        size = head.size + 2 + len(topic_part) + body_len + record_props_len
        if (body_len > config.max_message_size or record_props_len > config.max_properties_size
                or size > config.max_message_size
                or pos + count * size + END_FILE_MIN_BLANK_LENGTH > self.segment_size):
            return None
        values = _one_size_batch_struct(body_len, props_len, count).unpack(data)
        if (values[0::8].count(element_size) != count or values[4::8].count(body_len) != count
                or values[6::8].count(props_len) != count):
            return None
        all_props: tuple[bytes, ...] = values[7::8]
        bodies: tuple[bytes, ...] = values[5::8]
        # the messages' own properties in one piece, to check and to look for names in (bodies cannot fake one);
        # joined by 0x02, so that no two halves of a character across messages pass for one
        joined_props = b"\x02".join(all_props)
        if not joined_props.isascii() and not _is_utf8(joined_props):
            return None  # the loop names the message
        if sys_flag & _COMPRESSED and not all(map(has_zlib_header, bodies)):
            return None
        queue_id = batch.queue_id
        key = (batch.topic, queue_id)
        in_queue = enters_consume_queue(sys_flag)
        first_queue_offset = queue_offsets.get(key, 0) if in_queue else 0
        first_offset = mapped.file_from_offset + pos
        physical = range(first_offset, first_offset + count * size, size)
        crc32 = zlib.crc32
        # the records' fields, record after record: the shared ones repeated, then the others set column-wise
        fields: list[Any] = [size, MAGIC_CODE, 0, queue_id, 0, 0, 0, sys_flag, batch.born_timestamp, born, now, store,
                             0, 0, body_len, b"", topic_part, record_props_len, b"", suffix] * count
        fields[2::_RECORD_FIELDS] = [crc32(body) & 0x7FFFFFFF for body in bodies]
        fields[4::_RECORD_FIELDS] = values[3::8]
        fields[5::_RECORD_FIELDS] = range(first_queue_offset, first_queue_offset + count)
        fields[6::_RECORD_FIELDS] = physical
        fields[15::_RECORD_FIELDS] = bodies
        fields[18::_RECORD_FIELDS] = all_props
        records = _one_size_records_struct(head, body_len, len(topic_part), props_len, len(suffix), count).pack(
            *fields)
        index_keys: list[bytes] = []
        index_offsets: list[int] = []
        maybe_tagged = b"S\x01" in joined_props  # one scan for both TAGS and KEYS, usually absent
        if config.message_index_enable:
            prefix = (batch.topic + "#").encode("utf-8")
            has_uniq = b"UNIQ_KEY\x01" in joined_props
            keys = _property_values(all_props, b"KEYS\x01") if maybe_tagged and b"KEYS\x01" in joined_props \
                else None
            same_place = _same_place_values(data, all_props, b"UNIQ_KEY\x01", _BATCH_ELEMENT_MIN + body_len,
                                            element_size, prefix) if has_uniq and keys is None else None
            if same_place is not None:
                index_keys = same_place
                index_offsets = list(physical)
            elif has_uniq or keys is not None:
                nothing: list[bytes | None] = [None] * count
                uniq_keys = _property_values(all_props, b"UNIQ_KEY\x01") if has_uniq else nothing
                for offset, uniq, words in zip(physical, uniq_keys, keys or nothing, strict=True):
                    if uniq:
                        index_keys.append(prefix + uniq)
                        index_offsets.append(offset)
                    if words:
                        for word in words.split(b" "):
                            if word:
                                index_keys.append(prefix + word)
                                index_offsets.append(offset)
        units: list[int] = []
        if in_queue:
            units = [0, size, 0] * count
            units[0::3] = physical
            if maybe_tagged and b"TAGS\x01" in joined_props:
                units[2::3] = [0 if raw is None else self._tags_code(raw)
                               for raw in _property_values(all_props, b"TAGS\x01")]
        return _StagedBatch(records, key if in_queue else None, first_queue_offset, count, first_offset, units,
                            index_keys, index_offsets, list(physical), store)

    def _tags_code(self, raw: bytes) -> int:
        """The tags code of a raw TAGS value (remembered)."""
        cache = self._tags_codes
        code = cache.get(raw)
        if code is None:
            if len(cache) > _TAGS_CACHE_MAX:
                cache.clear()
            code = cache[raw] = compute_tags_code(raw.decode("utf-8", "replace"))
        return code

    def append_encoded_batch(self, batch: EncodedBatchRequest,
                             now_ms: int | None = None) -> tuple[AppendResult, DispatchBatch]:
        """Append an `EncodedBatchRequest`: what `append` stores for the same messages one by one, in one pass.

        Decoding, checks, TAGS/KEYS/UNIQ_KEY lookups and record packing share one loop over the
        encoded messages (no per-message lists in between). Raises `IllegalMessageError` (nothing
        written) for a malformed or oversized message, naming it by its index in the batch.
        """
        if not batch.encoded:
            raise IllegalMessageError(PutMessageStatus.MESSAGE_ILLEGAL, "the batch body is empty")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        layout = self._batch_layout(batch)
        if batch.topic != SCHEDULE_TOPIC:
            stored = self._append_one_size_batch(batch, now, *layout)
            if stored is not None:
                return stored
        return self._append_by_loop(batch, now, *layout)

    def _append_by_loop(self, batch: EncodedBatchRequest, now: int, topic_part: bytes, born: bytes, store: bytes,
                        head: struct.Struct, sys_flag: int) -> tuple[AppendResult, DispatchBatch]:
        """`append_encoded_batch`'s loop over the messages one by one (any batch, the one-size path's or not)."""
        data = batch.encoded
        end = len(data)
        topic = batch.topic
        queue_id = batch.queue_id
        suffix = batch.properties_suffix
        separated_suffix = b"\x02" + suffix
        fixed = head.size + 2 + len(topic_part)
        topic_len = len(topic_part)
        born_timestamp = batch.born_timestamp
        max_size = self.config.max_message_size
        max_props = self.config.max_properties_size
        segment_size = self.segment_size
        key = (topic, queue_id)
        in_queue = enters_consume_queue(sys_flag)
        compressed = bool(sys_flag & _COMPRESSED)
        schedule = topic == SCHEDULE_TOPIC
        delay_levels = self.config.delay_levels_ms
        first_queue_offset = self.topic_queue_table.get(key, 0) if in_queue else 0
        queue_offset = first_queue_offset
        files = self.files
        mapped = first_mapped = files.last_for_write(0)
        base = mapped.file_from_offset
        pos = mapped.wrote_position
        room = segment_size - pos
        first_offset = base + pos
        chunks: list[tuple[MappedFile, list[bytes], bool]] = []
        parts: list[bytes] = []
        add = parts.append
        offsets: list[int] = []
        add_offset = offsets.append
        units: list[int] = []
        add_units = units.extend
        indexing = self.config.message_index_enable
        index_keys: list[bytes] = []
        add_index = index_keys.append
        index_offsets: list[int] = []
        add_index_offset = index_offsets.append
        index_prefix = (topic + "#").encode("utf-8")
        tags_code_of = self._tags_code
        unpack = _BATCH_ELEMENT_HEAD.unpack_from
        crc32 = zlib.crc32
        record_struct = _record_struct
        packers: dict[tuple[int, int], struct.Struct] = {}
        packer = head
        packer_body_len = packer_props_len = -1
        total = 0
        element = 0
        element_start = 0
        try:
            while element_start < end:
                if end - element_start < _BATCH_ELEMENT_MIN:
                    raise _illegal_element(element, f"truncated ({end - element_start} bytes left)")
                declared, _magic, _crc, flag, body_len = unpack(data, element_start)
                body_start = element_start + _BATCH_ELEMENT_HEAD_SIZE
                body_end = body_start + body_len
                if body_len < 0 or body_end + 2 > end:
                    raise _illegal_element(element, f"body length {body_len} exceeds the batch")
                if body_len > max_size:
                    raise _illegal_element(element, f"body size {body_len} exceeds the maximum {max_size}")
                own_props_len = (data[body_end] << 8) | data[body_end + 1]
                element_end = body_end + 2 + own_props_len
                if own_props_len > 0x7FFF or element_end > end:
                    raise _illegal_element(element, f"properties length {own_props_len} exceeds the batch")
                if declared != element_end - element_start:
                    raise _illegal_element(element, f"declared size {declared} != actual {element_end - element_start}")
                body = data[body_start:body_end]
                if compressed and not has_zlib_header(body):
                    raise _illegal_element(element, "the body is flagged compressed (sysFlag bit 0x1) but is not "
                                                    f"zlib data (its first bytes {body[:2].hex() or 'none'} are no "
                                                    "zlib header)")
                tags = 0
                uniq = keys = None
                if own_props_len:
                    props = data[body_end + 2:element_end]
                    if not props.isascii() and not _is_utf8(props):
                        raise _illegal_element(element, "its properties are not valid UTF-8")
                    # TAGS, KEYS and UNIQ_KEY looked up in place: no full properties parse per message
                    found = props.find(b"TAGS\x01")
                    if found >= 0 and (found == 0 or props[found - 1] == 2):
                        stop = props.find(b"\x02", found + 5)
                        tags = tags_code_of(props[found + 5:stop] if stop >= 0 else props[found + 5:])
                    if indexing:
                        found = props.find(b"UNIQ_KEY\x01")
                        if found >= 0 and (found == 0 or props[found - 1] == 2):
                            stop = props.find(b"\x02", found + 9)
                            uniq = props[found + 9:stop] if stop >= 0 else props[found + 9:]
                        found = props.find(b"KEYS\x01")
                        if found >= 0 and (found == 0 or props[found - 1] == 2):
                            stop = props.find(b"\x02", found + 5)
                            keys = props[found + 5:stop] if stop >= 0 else props[found + 5:]
                    if suffix:
                        props = props + suffix if props[-1] == 2 else props + separated_suffix
                else:
                    props = suffix
                props_len = len(props)
                size = fixed + body_len + props_len
                if props_len > max_props:
                    raise IllegalMessageError(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                              f"batch message {element}: properties are {props_len} bytes, "
                                              f"at most {max_props} allowed")
                if size > max_size or size + END_FILE_MIN_BLANK_LENGTH > segment_size:
                    raise _illegal_element(element, f"message of {size} bytes exceeds the maximum {max_size}")
                if size + END_FILE_MIN_BLANK_LENGTH > room:
                    add(_BLANK.pack(room, BLANK_MAGIC_CODE))
                    chunks.append((mapped, parts, True))
                    mapped = files.next_for_write(mapped)
                    base = mapped.file_from_offset
                    pos = mapped.wrote_position
                    room = segment_size - pos
                    parts = []
                    add = parts.append
                    if not offsets:
                        first_offset = base + pos
                phys = base + pos
                if body_len != packer_body_len or props_len != packer_props_len:
                    found_packer = packers.get((body_len, props_len))
                    if found_packer is None:
                        found_packer = packers[(body_len, props_len)] = record_struct(head, body_len, topic_len,
                                                                                      props_len)
                    packer = found_packer
                    packer_body_len, packer_props_len = body_len, props_len
                add(packer.pack(size, MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, phys,
                                sys_flag, born_timestamp, born, now, store, 0, 0, body_len, body, topic_part,
                                props_len, props))
                pos += size
                room -= size
                total += size
                add_offset(phys)
                if in_queue:
                    if schedule:
                        deliver_at = schedule_tags_code(_decoded_properties(props), now, delay_levels)
                        if deliver_at is not None:
                            tags = deliver_at
                    add_units((phys, size, tags))
                    queue_offset += 1
                if uniq:
                    add_index(index_prefix + uniq)
                    add_index_offset(phys)
                if keys:
                    for word in keys.split(b" "):
                        if word:
                            add_index(index_prefix + word)
                            add_index_offset(phys)
                element_start = element_end
                element += 1
            chunks.append((mapped, parts, False))
            _reserve_chunks(chunks, pos)
        except BaseException:
            files.discard_unused_after(first_mapped)
            raise
        return self._write_batch(chunks, key if in_queue else None, first_queue_offset, queue_offset, units,
                                 index_keys, index_offsets, now, first_offset, base + pos, total, element, offsets,
                                 store)

    # -- reads -----------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """The `size` bytes at commit-log `offset`, or None if they are not (or no longer) stored."""
        mapped = self.files.find(offset, first_if_not_found=offset == 0)
        if mapped is None:
            return None
        return mapped.read(offset - mapped.file_from_offset, size)

    def read_record(self, offset: int) -> bytes | None:
        """The whole record at `offset` (its size read from the record), or None."""
        head = self.read(offset, 8)
        if head is None:
            return None
        size, magic = _BLANK.unpack(head)
        if magic != MAGIC_CODE or size <= 0:
            return None
        return self.read(offset, size)

    def decode_at(self, offset: int, size: int | None = None) -> MessageExt | None:
        """Decode the message at `offset` (None if absent or not a valid record)."""
        data = self.read(offset, size) if size is not None else self.read_record(offset)
        if data is None:
            return None
        try:
            msg, _ = decode_record(data)
        except RecordDecodeError:
            return None
        return msg

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at `offset` (-1 if it cannot be read)."""
        head = self.read(offset, 40)
        if head is None or size < RECORD_FIXED_SIZE_V4:
            return -1
        sys_flag = _I32.unpack_from(head, 36)[0]
        data = self.read(offset + 48 + (20 if sys_flag & _BORN_V6 else 8), 8)
        if data is None:
            return -1
        return int.from_bytes(data, "big", signed=True)

    def data_from(self, offset: int, max_size: int | None = None) -> bytes | None:
        """Raw bytes from `offset` to the end of its segment's written data, at most `max_size` of them
        (a master's HA transfers, admin reads); None when the segment is gone or not written that far."""
        mapped = self.files.find(offset, first_if_not_found=offset == 0)
        if mapped is None:
            return None
        position = offset - mapped.file_from_offset
        size = mapped.wrote_position - position
        return mapped.read(position, size if max_size is None else min(size, max_size))

    # -- recovery --------------------------------------------------------------------------
    def scan(
        self,
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
        files = self.files.files
        if not files:
            return start_offset
        segment_size = self.segment_size
        delay_levels = self.config.delay_levels_ms
        heads = _SCAN_HEADS
        topics = _scan_topic_cache
        crc32 = zlib.crc32
        separator = MessageConst.KEY_SEPARATOR
        batch = DispatchBatch()
        runs = batch.runs
        index_keys, index_offsets, index_timestamps = batch.index_keys, batch.index_offsets, batch.index_timestamps
        in_batch = 0
        offset = max(start_offset, files[0].file_from_offset)
        try:
            for mapped in files:
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
                    total, magic = _BLANK.unpack_from(mm, pos)
                    if magic == BLANK_MAGIC_CODE and total == segment_size - pos:
                        if limit < segment_size:
                            return base + pos
                        offset = base + segment_size
                        break
                    phys = base + pos
                    if magic != MAGIC_CODE or total <= 0 or pos + total > limit or total < _MIN_RECORD_SIZE:
                        return phys
                    head = heads[(mm[pos + _SYS_FLAG_LOW_BYTE] >> 4) & 3]
                    if total < head.size + 3:
                        log.warning("commit log: record at %d declares a size of %d bytes, below the minimum",
                                    phys, total)
                        return phys
                    _, _, stored_crc, queue_id, queue_offset, stored_phys, sys_flag, store_timestamp, body_len = \
                        head.unpack_from(mm, pos)
                    record_end = pos + total
                    body_start = pos + head.size
                    body_end = body_start + body_len
                    if body_len < 0 or body_end + 3 > record_end:
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

    def append_data(self, offset: int, data: bytes) -> None:
        """Write replicated commit-log bytes at `offset` (a slave's HA client); the caller holds the put lock.

        `offset` must be the end of the log, or, in an empty log, a segment start: the master sends
        raw bytes of one segment at a time, record boundaries wherever they fall. Raises ValueError
        when the bytes do not fit there (another position, or another segment size than the master's)
        and OSError when the disk refuses them.
        """
        segment_size = self.segment_size
        files = self.files
        if files.files:
            if offset != files.max_offset:
                raise ValueError(f"replicated data at {offset}, but the commit log ends at {files.max_offset}")
        elif offset % segment_size:
            raise ValueError(f"replicated data at {offset} for an empty commit log is not at a segment start "
                             f"(segment size {segment_size}: is it the master's mappedFileSizeCommitLog?)")
        mapped = files.last_for_write(offset)
        position = offset - mapped.file_from_offset
        if position + len(data) > segment_size:
            raise ValueError(f"{len(data)} replicated bytes at {offset} cross the end of the segment at "
                             f"{mapped.file_from_offset + segment_size}: the master's segment size differs")
        if data:
            mapped.append(data)

    def set_max_offset(self, offset: int) -> None:
        """Cut the log at `offset` (end of the last valid record) and fix every segment's positions."""
        self.files.truncate_dirty(offset)
        for mapped in self.files.files:
            end = mapped.file_from_offset + mapped.file_size
            position = mapped.file_size if end <= offset else offset - mapped.file_from_offset
            mapped.set_positions(position)

    def flush(self) -> int:
        """fsync every dirty segment; returns the flushed offset."""
        self.files.flush()
        return self.files.flushed_offset

    def close(self) -> None:
        self.files.close()
