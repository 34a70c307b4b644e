"""`MessagePut`: the one path by which the broker puts a message into its store and answers.

Sends, consumers' send-backs, replies, committed transactions, half messages put back for their
check, op messages and delayed messages due for delivery all come through here. It builds the put
request (checking the properties encode, moving a delayed message to its schedule queue), stores it,
waits for the flush and the slave when the sender asked to, counts it, and maps the store's status to
a response code and remark. See docs/design/broker.md#the-put-path.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Sequence
from concurrent.futures import Future
from typing import Final, Protocol

from rocketflow.broker.context import BrokerContext
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.protocol.ids import offset_msg_id_from_packed
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.properties import InvalidPropertyError, encode_properties_bytes
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store import AppendResult, PutMessageRequest, PutMessageStatus
from rocketflow.store.commit_log import EncodedBatchRequest, waits_for_store

_TRANSACTION_PREPARED: Final = int(MessageSysFlag.TRANSACTION_PREPARED)
_TRANSACTION_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)
_ILLEGAL_REMARK: Final = ("the message is illegal, maybe msg body or properties length not matched. "
                          "msg body length limit 128k, msg properties length limit 32k.")
#: Stored, but not as durably as asked: the sender is told, and the message counts as stored.
_STORED_BUT_NOT_OK: Final = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
_MSG_IDS_STRUCTS: dict[tuple[int, int], struct.Struct] = {}

#: What a put gives before its flush: the result, or a future of it under SYNC_FLUSH.
PutOutcome = AppendResult | Future[AppendResult]
#: A response now, or an awaitable of it (a put waiting for its flush or its slave).
Answer = RemotingCommand | Awaitable[RemotingCommand | None]


class ReplicaWait(Protocol):
    """The broker's replication as the put path sees it (see `rocketflow.broker.replication`)."""

    @property
    def replicates_synchronously(self) -> bool: ...

    async def wait_for_replica(self, result: AppendResult) -> AppendResult: ...


def put_failure(status: PutMessageStatus, detail: str) -> tuple[int, str]:
    """The response code and remark of a put the store refused."""
    if status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
        return ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL, f"{_ILLEGAL_REMARK} ({detail})" if detail else _ILLEGAL_REMARK
    if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        return ResponseCode.SERVICE_NOT_AVAILABLE, (
            "service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full, messages are put to the slave, message store has been shut down, etc. ({detail})")
    if status is PutMessageStatus.OS_PAGE_CACHE_BUSY:
        return ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
    return ResponseCode.SYSTEM_ERROR, f"{status.value} {detail}".strip()


class MessagePut:
    """Builds, stores and answers the broker's puts (see the module's docstring)."""

    def __init__(self, ctx: BrokerContext, replicas: ReplicaWait) -> None:
        self._store = ctx.store
        self._topics = ctx.topics
        self._stats = ctx.stats
        self._config = ctx.config
        self._identity = ctx.identity
        self._replicas = replicas
        self._delay_levels_ms = ctx.config.delay_levels_ms

    # ------------------------------------------------------------------ building

    def build(self, request: RemotingCommand, topic: str, queue_id: int, body: bytes, properties: dict[str, str],
              flag: int, sys_flag: int, born_timestamp: int, born_host: tuple[str, int], reconsume_times: int,
              transaction: int, wait_store_msg_ok: bool) -> PutMessageRequest | RemotingCommand:
        """The put of a message a client sent, or MESSAGE_ILLEGAL; one with a delay level goes to its
        SCHEDULE_TOPIC_XXXX queue, its destination kept in REAL_TOPIC / REAL_QID."""
        tags = compute_tags_code(properties.get(MessageConst.TAGS))
        delay_text = properties.get(MessageConst.DELAY_TIME_LEVEL)
        if delay_text and transaction not in (_TRANSACTION_PREPARED, _TRANSACTION_ROLLBACK):
            try:
                level = int(delay_text)
            except ValueError:
                return request.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=(
                    f"the DELAY property must be an integer delay level, got {delay_text!r}"))
            if level > 0:
                delays = self._delay_levels_ms
                level = min(level, len(delays))
                properties[MessageConst.REAL_TOPIC] = topic
                properties[MessageConst.REAL_QUEUE_ID] = str(queue_id)
                properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
                topic = SCHEDULE_TOPIC
                queue_id = level - 1
                # its tags code (the deliver time) is set by the store, from the store timestamp
        try:
            properties_bytes = encode_properties_bytes(properties)
        except InvalidPropertyError as exc:
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=f"bad message properties: {exc}")
        return PutMessageRequest(
            topic=topic, queue_id=queue_id, body=body, properties=properties, properties_bytes=properties_bytes,
            flag=flag, sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            store_host=self._identity.store_host, reconsume_times=reconsume_times, tags_code=tags,
            keys=properties.get(MessageConst.KEYS), uniq_key=properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            wait_store_msg_ok=wait_store_msg_ok,
        )

    def moved(self, message: MessageExt, topic: str, queue_id: int, properties: dict[str, str], *,
              sys_flag: int | None = None, prepared_transaction_offset: int = 0) -> PutMessageRequest:
        """The put of a stored ``message`` again, under ``topic`` and ``queue_id`` with ``properties`` (a
        delayed message due, a half message put back or given up); raises `InvalidPropertyError`."""
        return PutMessageRequest(
            topic=topic, queue_id=queue_id, body=message.body, properties=properties,
            properties_bytes=encode_properties_bytes(properties), flag=message.flag,
            sys_flag=message.sys_flag if sys_flag is None else sys_flag, born_timestamp=message.born_timestamp,
            born_host=message.born_host, store_host=self._identity.store_host,
            reconsume_times=message.reconsume_times, prepared_transaction_offset=prepared_transaction_offset,
            tags_code=compute_tags_code(properties.get(MessageConst.TAGS)), keys=properties.get(MessageConst.KEYS),
            uniq_key=properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), wait_store_msg_ok=False)

    def internal(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str],
                 born_timestamp: int) -> PutMessageRequest:
        """The put of a message the broker writes for itself (an op message), born here."""
        host = self._identity.store_host
        return PutMessageRequest(
            topic=topic, queue_id=queue_id, body=body, properties=properties,
            properties_bytes=encode_properties_bytes(properties), born_timestamp=born_timestamp, born_host=host,
            store_host=host, tags_code=compute_tags_code(properties.get(MessageConst.TAGS)), wait_store_msg_ok=False)

    # ------------------------------------------------------------------ storing

    def put_now(self, put: PutMessageRequest, *, counted: bool = True) -> AppendResult:
        """Store a put nobody waits on (``wait_store_msg_ok`` false, so no flush is awaited); ``counted``: a
        stored message counts in the broker's put statistics."""
        result = self._store.put_message(put)
        if counted and result.status is PutMessageStatus.PUT_OK:
            self._stats.put_messages(result.message_count, result.wrote_bytes)
        return result

    def put_and_answer(self, request: RemotingCommand, puts: list[PutMessageRequest] | EncodedBatchRequest,
                       queue_id: int, *, batch: bool, creates: TopicConfig | None = None) -> Answer:
        """Store a send and answer it; ``creates`` is a topic to add once the store has taken the messages."""
        outcome = self._store.put_messages_or_wait(puts)
        if creates is not None and (not isinstance(outcome, AppendResult) or outcome.status is PutMessageStatus.PUT_OK):
            self._topics.add_if_absent(creates)
        return self.answer(request, outcome, queue_id, batch, waits_for_store(puts))

    def put_batches_and_answer(self, requests: Sequence[RemotingCommand], batches: Sequence[EncodedBatchRequest],
                               creates: Sequence[TopicConfig]) -> list[Answer]:
        """`put_and_answer` for SEND_BATCH_MESSAGE requests that arrived together, stored by one store call."""
        outcomes = self._store.put_encoded_batches(batches)
        topics = self._topics
        answers: list[Answer] = []
        for request, batch, topic_config, outcome in zip(requests, batches, creates, outcomes, strict=True):
            if not isinstance(outcome, AppendResult) or outcome.status is PutMessageStatus.PUT_OK:
                topics.add_if_absent(topic_config)
            answers.append(self.answer(request, outcome, batch.queue_id, True, batch.wait_store_msg_ok))
        return answers

    def put_and_acknowledge(self, request: RemotingCommand, put: PutMessageRequest) -> Answer:
        """Store a consumer's send-back: SUCCESS, or SYSTEM_ERROR naming the status (as RocketMQ answers)."""
        outcome = self._store.put_messages_or_wait([put])
        if isinstance(outcome, AppendResult) and not self._replicas.replicates_synchronously:
            return self._acknowledgement(request, outcome)
        return self._await_acknowledgement(request, outcome)

    # ------------------------------------------------------------------ answering

    def answer(self, request: RemotingCommand, outcome: PutOutcome, queue_id: int, batch: bool,
               waits: bool) -> Answer:
        """The response to a send, or an awaitable of it when the put waits for a flush or a replica."""
        if self._replicas.replicates_synchronously:
            return self._await_answer(request, outcome, queue_id, batch, waits)
        if isinstance(outcome, AppendResult):
            return self._send_response(request, outcome, queue_id, batch)
        return self._await_answer(request, outcome, queue_id, batch, False)

    def failure(self, request: RemotingCommand, result: AppendResult) -> RemotingCommand:
        """The response to a put the store refused."""
        code, remark = put_failure(result.status, result.error)
        return request.make_response(code, remark=remark)

    async def _await_answer(self, request: RemotingCommand, outcome: PutOutcome, queue_id: int, batch: bool,
                            wait_for_replica: bool) -> RemotingCommand:
        result = await _flushed(outcome)
        if wait_for_replica:
            result = await self._replicas.wait_for_replica(result)
        return self._send_response(request, result, queue_id, batch)

    def _send_response(self, request: RemotingCommand, result: AppendResult, queue_id: int,
                       batch: bool) -> RemotingCommand:
        status = result.status
        code: int
        if status is PutMessageStatus.PUT_OK:
            code = ResponseCode.SUCCESS
            self._stats.put_messages(result.message_count, result.wrote_bytes)
        elif status in _STORED_BUT_NOT_OK:
            code = _STORED_BUT_NOT_OK[status]
            self._stats.put_messages(result.message_count, result.wrote_bytes)
        else:
            self._stats.put_failures += 1
            return self.failure(request, result)
        config = self._config
        return request.make_response(code, ext_fields={
            "msgId": _msg_ids(result) if batch else result.msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": config.region_id,
            "TRACE_ON": "true" if config.trace_on else "false",
        })

    async def _await_acknowledgement(self, request: RemotingCommand, outcome: PutOutcome) -> RemotingCommand:
        result = await self._replicas.wait_for_replica(await _flushed(outcome))
        return self._acknowledgement(request, result)

    def _acknowledgement(self, request: RemotingCommand, result: AppendResult) -> RemotingCommand:
        if result.status is PutMessageStatus.PUT_OK:
            self._stats.put_messages(result.message_count, result.wrote_bytes)
            return request.make_response(ResponseCode.SUCCESS)
        return request.make_response(ResponseCode.SYSTEM_ERROR, remark=result.status.value)


async def _flushed(outcome: PutOutcome) -> AppendResult:
    """The result of a put, once the flush it may wait for is done."""
    return outcome if isinstance(outcome, AppendResult) else await asyncio.wrap_future(outcome)


def _msg_ids_struct(host_len: int, count: int) -> struct.Struct:
    """Packs ``count`` (store host, commit-log offset) pairs: the bytes of as many offset msg ids."""
    packer = _MSG_IDS_STRUCTS.get((host_len, count))
    if packer is None:
        packer = struct.Struct(f">{f'{host_len}sq' * count}")
        if count <= 1024:
            _MSG_IDS_STRUCTS[(host_len, count)] = packer
    return packer


def _msg_ids(result: AppendResult) -> str:
    """Comma-joined offset msg ids of a batch: ``host + offset`` packed for all, hex-encoded in one call."""
    host = result.store_host
    offsets = result.commit_log_offsets
    count = len(offsets)
    # a put's offsets rise, so its first and last bound them all
    if not count or not 0 <= offsets[0] <= offsets[-1] < 1 << 63:
        return ",".join(offset_msg_id_from_packed(host, offset) for offset in offsets)
    args: list[bytes | int] = [host] * (2 * count)
    args[1::2] = offsets
    return _msg_ids_struct(len(host), count).pack(*args).hex(",", len(host) + 8).upper()


__all__ = ["Answer", "MessagePut", "PutOutcome", "ReplicaWait", "put_failure"]
