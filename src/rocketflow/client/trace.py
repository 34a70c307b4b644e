"""Message trace (RocketMQ's ``enableMsgTrace``): where a message went, written to a trace topic.

With ``enable_msg_trace=True`` a producer records a *Pub* trace for every send (topic, msg id,
tags, keys, broker, body size, cost, success) and a push consumer a *SubBefore* / *SubAfter* pair
around every listener call (group, retry times, cost, success). The records are batched and sent
in the background, in RocketMQ's trace text format, to ``RMQ_SYS_TRACE_TOPIC`` (or the topic given
as ``trace_topic``), keyed by msg id, so RocketMQ's console, ``mqadmin queryMsgTraceById`` and
``rocketflow admin message trace`` can show them. A broker keeps that topic when started with
``traceTopicEnable=true`` (or auto-creates a custom trace topic as any other).

The format: records separated by char 2, fields by char 1, as RocketMQ 4.9.x writes them.
Tracing never fails a send or a consume: a lost trace is logged, at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Final, Protocol, TypeVar

from rocketflow.protocol.message import Message, MessageConst
from rocketflow.protocol.names import TRACE_TOPIC

logger = logging.getLogger(__name__)

CONTENT_SPLITOR: Final = "\x01"
FIELD_SPLITOR: Final = "\x02"
#: Producer group of the trace sender (TraceConstants.GROUP_NAME_PREFIX + the trace topic).
TRACE_PRODUCER_GROUP_PREFIX: Final = "_INNER_TRACE_PRODUCER-"
#: Records sent per trace message at most, and its body size at most (AsyncTraceDispatcher).
TRACE_BATCH_RECORDS: Final = 100
TRACE_MAX_MESSAGE_BYTES: Final = 128 * 1024
#: Records waiting at most; more are dropped (and counted) rather than slowing sends down.
TRACE_QUEUE_MAX: Final = 20_000
#: How often the background sender looks for records.
TRACE_FLUSH_SECONDS: Final = 0.05
#: Seconds between two warnings about traces that could not be sent.
TRACE_WARNING_INTERVAL: Final = 30.0


class TraceType(Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TraceMessageType(IntEnum):
    """RocketMQ's ``MessageType``, written as its ordinal."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3


@dataclass(slots=True)
class TraceRecord:
    """One trace line; which fields are written depends on ``type`` (see `encode_trace_record`)."""

    type: TraceType
    timestamp: int = 0
    region_id: str = ""
    group: str = ""
    topic: str = ""
    msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: TraceMessageType = TraceMessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False
    extra: list[str] = field(default_factory=list)


def _text(value: object) -> str:
    text = "null" if value is None else str(value)
    return text.replace(CONTENT_SPLITOR, " ").replace(FIELD_SPLITOR, " ")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_trace_record(record: TraceRecord) -> str:
    """The record as RocketMQ's TraceDataEncoder writes it (one record, ending with FIELD_SPLITOR)."""
    kind = record.type
    if kind is TraceType.PUB:
        fields = [kind.value, record.timestamp, record.region_id, record.group, record.topic, record.msg_id,
                  record.tags, record.keys, record.store_host, record.body_length, record.cost_ms,
                  int(record.msg_type), record.offset_msg_id, _bool(record.success)]
    elif kind is TraceType.SUB_BEFORE:
        fields = [kind.value, record.timestamp, record.region_id, record.group, record.request_id, record.msg_id,
                  record.retry_times, record.keys]
    elif kind is TraceType.SUB_AFTER:
        fields = [kind.value, record.request_id, record.msg_id, record.cost_ms, _bool(record.success), record.keys,
                  record.context_code, record.timestamp]
    else:
        fields = [kind.value, record.timestamp, record.region_id, record.group, record.topic, record.msg_id,
                  record.tags, record.keys, record.store_host, int(record.msg_type), record.transaction_id,
                  record.transaction_state, _bool(record.from_transaction_check)]
    return CONTENT_SPLITOR.join(_text(value) for value in fields) + FIELD_SPLITOR


def trace_keys(record: TraceRecord) -> list[str]:
    """The keys a trace message carries for ``record``: its msg id and its message keys."""
    keys = [record.msg_id] if record.msg_id else []
    if record.keys and record.keys != "null":
        keys.append(record.keys)
    return keys


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def decode_trace_data(data: str) -> list[TraceRecord]:
    """Trace records from a trace message body (ours or RocketMQ's, older field counts included).

    Lines of unknown types or too few fields are skipped.
    """
    records: list[TraceRecord] = []
    for line in data.split(FIELD_SPLITOR):
        parts = line.split(CONTENT_SPLITOR)
        kind = parts[0]
        if kind == TraceType.PUB.value and len(parts) >= 13:
            record = TraceRecord(TraceType.PUB, timestamp=_int(parts[1]), region_id=parts[2], group=parts[3],
                                 topic=parts[4], msg_id=parts[5], tags=parts[6], keys=parts[7], store_host=parts[8],
                                 body_length=_int(parts[9]), cost_ms=_int(parts[10]))
            msg_type = _int(parts[11])
            record.msg_type = TraceMessageType(msg_type) if 0 <= msg_type <= 3 else TraceMessageType.NORMAL
            if len(parts) == 13:
                record.success = parts[12] == "true"
            else:
                record.offset_msg_id = parts[12]
                record.success = parts[13] == "true"
                record.extra = parts[14:]
            records.append(record)
        elif kind == TraceType.SUB_BEFORE.value and len(parts) >= 8:
            records.append(TraceRecord(TraceType.SUB_BEFORE, timestamp=_int(parts[1]), region_id=parts[2],
                                       group=parts[3], request_id=parts[4], msg_id=parts[5],
                                       retry_times=_int(parts[6]), keys=parts[7]))
        elif kind == TraceType.SUB_AFTER.value and len(parts) >= 6:
            record = TraceRecord(TraceType.SUB_AFTER, request_id=parts[1], msg_id=parts[2], cost_ms=_int(parts[3]),
                                 success=parts[4] == "true", keys=parts[5])
            if len(parts) >= 7:
                record.context_code = _int(parts[6])
            if len(parts) >= 8:
                record.timestamp = _int(parts[7])
            records.append(record)
        elif kind == TraceType.END_TRANSACTION.value and len(parts) >= 13:
            msg_type = _int(parts[9])
            records.append(TraceRecord(
                TraceType.END_TRANSACTION, timestamp=_int(parts[1]), region_id=parts[2], group=parts[3],
                topic=parts[4], msg_id=parts[5], tags=parts[6], keys=parts[7], store_host=parts[8],
                msg_type=TraceMessageType(msg_type) if 0 <= msg_type <= 3 else TraceMessageType.NORMAL,
                transaction_id=parts[10], transaction_state=parts[11], from_transaction_check=parts[12] == "true"))
    return records


def message_type_of(msg: Message) -> TraceMessageType:
    if msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return TraceMessageType.TRANS_HALF
    if msg.delay_level > 0:
        return TraceMessageType.DELAY
    return TraceMessageType.NORMAL


_T = TypeVar("_T")


class LoopRunner(Protocol):
    """Runs a coroutine on the client's event loop and waits for it (`ClientInstance.run`)."""

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T: ...


class TraceSender(Protocol):
    """Sends a trace message (a `Producer` attached to the client instance)."""

    async def send_coro(self, msg: Message) -> object: ...


class TraceDispatcher:
    """Batches trace records and sends them to the trace topic from the client's event loop.

    ``new_sender(group)`` makes the sender of the trace messages, on the loop at the first send.
    """

    def __init__(self, runner: LoopRunner, new_sender: Callable[[str], TraceSender],
                 trace_topic: str | None = None) -> None:
        self.runner = runner
        self._new_sender = new_sender
        self.trace_topic = trace_topic or TRACE_TOPIC
        self._records: deque[TraceRecord] = deque()
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._sender: TraceSender | None = None
        self._last_warning = -TRACE_WARNING_INTERVAL
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    @property
    def producer_group(self) -> str:
        return TRACE_PRODUCER_GROUP_PREFIX + self.trace_topic

    def start(self) -> None:
        async def begin() -> None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

        self.runner.run(begin())

    def append(self, record: TraceRecord) -> None:
        """Queue a record (from any thread); dropped, and counted, when the queue is full."""
        with self._lock:
            if len(self._records) >= TRACE_QUEUE_MAX:
                self.dropped += 1
                return
            self._records.append(record)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout``), then stop."""
        task = self._task
        if task is None:
            return

        async def finish() -> None:
            self._stopping = True
            if self._wake is not None:
                self._wake.set()
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()

        try:
            self.runner.run(finish(), timeout + 1)
        except Exception as exc:  # the instance may be going down already
            logger.warning("trace dispatcher of %s did not flush: %s", self.trace_topic, exc)
        self._task = None

    def _take(self) -> list[TraceRecord]:
        with self._lock:
            taken = list(self._records)
            self._records.clear()
        return taken

    async def _run(self) -> None:
        while True:
            wake = self._wake
            if wake is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TRACE_FLUSH_SECONDS):
                        await wake.wait()
            records = self._take()
            if records:
                await self._send(records)
            if self._stopping and not self._records:
                return

    async def _send(self, records: list[TraceRecord]) -> None:
        sender = self._sender
        if sender is None:
            sender = self._sender = self._new_sender(self.producer_group)
        start = 0
        while start < len(records):
            body_parts: list[str] = []
            keys: list[str] = []
            size = 0
            end = start
            while end < len(records) and end - start < TRACE_BATCH_RECORDS and size < TRACE_MAX_MESSAGE_BYTES:
                text = encode_trace_record(records[end])
                body_parts.append(text)
                size += len(text)
                for key in trace_keys(records[end]):
                    if key not in keys:
                        keys.append(key)
                end += 1
            msg = Message(self.trace_topic, "".join(body_parts).encode("utf-8"), keys=keys)
            try:
                await sender.send_coro(msg)
                self.sent += end - start
            except Exception as exc:
                self.failed += end - start
                now = time.monotonic()
                if now - self._last_warning >= TRACE_WARNING_INTERVAL:  # a missing topic fails every batch
                    self._last_warning = now
                    logger.warning("cannot send trace records to %s (%d lost so far): %s", self.trace_topic,
                                   self.failed, exc)
            start = end


__all__ = [
    "TraceDispatcher",
    "TraceMessageType",
    "TraceRecord",
    "TraceType",
    "decode_trace_data",
    "encode_trace_record",
    "message_type_of",
    "trace_keys",
]
