"""Transactional messages on the broker: half messages, their commit or rollback, and check-backs.

RocketMQ's two-phase send (4.x, ``TransactionalMessageServiceImpl`` and its check service):

1. A producer sends a message with property ``TRAN_MSG=true``. The broker stores it as a *half
   message* in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real topic and queue kept in the
   ``REAL_TOPIC`` / ``REAL_QID`` properties, so no consumer sees it.
2. The producer runs its local transaction and sends END_TRANSACTION (37) with COMMIT (8) or
   ROLLBACK (12). On commit the message is stored again under its real topic (transaction value
   COMMIT, ``preparedTransactionOffset`` = the half message's commit-log offset). Either way an
   *op message* (tag ``d``, body = the half message's queue offset) goes to
   ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 to mark it resolved.
3. Every ``transaction_check_interval_ms`` the check pass walks the half queue from its consume
   offset (group ``CID_RMQ_SYS_TRANS``, kept in consumerOffset.json). A half message that is
   unresolved and older than ``transaction_timeout_ms`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``)
   is put back at the end of the half queue with ``TRANSACTION_CHECK_TIMES`` + 1, and
   CHECK_TRANSACTION_STATE (39) is sent to a producer of its group (``PGROUP``), which answers
   with END_TRANSACTION. After ``transaction_check_max`` check-backs it is moved to
   ``TRANS_CHECK_MAX_TIME_TOPIC`` instead, where an operator can still find it.

A half message with a long ``CHECK_IMMUNITY_TIME_IN_SECONDS`` holds back the check of the ones
behind it until it is due (RocketMQ re-queues it instead). Beyond RocketMQ: a transaction
resolved once (by its UNIQ_KEY) is not stored twice when its END_TRANSACTION is repeated or races
a check-back, while the broker runs. See docs/design/broker.md#transactions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final

from rocketflow.background import BackgroundTask
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_put import MessagePut
from rocketflow.broker.topic_config_manager import TopicConfigManager
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.protocol.codec import RecordDecodeError, RecordEncodeError, decode_record, encode_record
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, PermName
from rocketflow.protocol.properties import InvalidPropertyError
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rocketflow.store import PutMessageRequest

logger = logging.getLogger(__name__)

#: The consumer group whose offsets track the half and op queues (TransactionalMessageUtil).
CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
#: Tag of an op message that resolves a half message.
REMOVE_TAG: Final = "d"
HALF_QUEUE_ID: Final = 0
#: Half messages one check pass looks at, at most (keeps a pass short on the broker's loop).
MAX_HALF_PER_PASS: Final = 2048
#: Op messages one check pass reads, at most (the rest in the passes right after it).
MAX_OPS_PER_PASS: Final = 8192
#: Op messages held in memory by the check pass, at most.
OPS_IN_MEMORY_MAX: Final = 200_000
#: Transaction ids remembered as resolved (to keep repeated END_TRANSACTIONs from storing twice).
RESOLVED_MEMORY: Final = 100_000
_TRANSACTION_MASK: Final = 0xC
_COMMIT: Final = int(MessageSysFlag.TRANSACTION_COMMIT)
_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)
_READ_WRITE: Final = int(PermName.READ | PermName.WRITE)


@dataclass(slots=True)
class CheckPassReport:
    """What one check pass did."""

    checked: int = 0
    discarded: int = 0
    resolved_skipped: int = 0
    #: half-queue consume offset after the pass
    half_offset: int = 0
    #: the pass stopped at a limit with work left (another pass can run at once)
    more: bool = False


def half_message_properties(properties: dict[str, str], topic: str, queue_id: int) -> None:
    """Record where a half message really goes (REAL_TOPIC / REAL_QID), in place."""
    properties[MessageConst.REAL_TOPIC] = topic
    properties[MessageConst.REAL_QUEUE_ID] = str(queue_id)


def without_transaction_type(sys_flag: int) -> int:
    return sys_flag & ~_TRANSACTION_MASK


def system_topic_config(topics: TopicConfigManager, topic: str) -> TopicConfig:
    """A transaction system topic's config (planned with one read-write queue when it does not exist yet)."""
    config = topics.select(topic)
    if config is None:
        config = topics.plan_in_send_back(topic, 1, _READ_WRITE)
    return config


def half_topic_config(topics: TopicConfigManager) -> TopicConfig:
    """The half topic's config (planned with one read-write queue when it does not exist yet)."""
    return system_topic_config(topics, TRANS_HALF_TOPIC)


class TransactionalMessageService:
    """Half messages of one broker: END_TRANSACTION handling and the periodic check-back."""

    def __init__(self, ctx: BrokerContext, put_path: MessagePut) -> None:
        self.ctx = ctx
        self.put_path = put_path
        self._resolved: OrderedDict[str, int] = OrderedDict()
        #: check-pass state: op messages read (op offset, half offset they resolve) not yet committed past,
        #: the half offsets they resolve, and the next op offset to read (-1: from the committed offset)
        self._ops: deque[tuple[int, int]] = deque()
        self._resolved_at: dict[int, int] = {}
        self._op_next = -1
        self._task = BackgroundTask(self._run)

    # ------------------------------------------------------------------ END_TRANSACTION

    def end_transaction(self, request: RemotingCommand, header: EndTransactionRequestHeader) -> RemotingCommand:
        """Commit or roll back the half message ``header`` names; the response says how it went."""
        commit = header.commit_or_rollback == _COMMIT
        half = self._find_half(header.commit_log_offset)
        if half is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark="Find prepared transaction message failed")
        mismatch = _mismatch(half, header)
        if mismatch:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=mismatch)
        transaction_id = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or half.msg_id
        earlier = self._resolved.get(transaction_id)
        if earlier is not None:
            if earlier != header.commit_or_rollback:
                logger.warning("transaction %s was already %s; ignoring a later %s", transaction_id,
                               _name(earlier), _name(header.commit_or_rollback))
            self._write_op(half)
            return request.make_response(ResponseCode.SUCCESS)
        if commit:
            put = self._final_message(request, half, header)
            if isinstance(put, RemotingCommand):
                return put
            result = self.put_path.put_now(put)
            if not result.status.is_ok:
                return self.put_path.failure(request, result)
        self._remember(transaction_id, header.commit_or_rollback)
        self._write_op(half)
        return request.make_response(ResponseCode.SUCCESS)

    def _find_half(self, commit_log_offset: int) -> MessageExt | None:
        if commit_log_offset < 0:
            return None
        record = self.ctx.store.select_one_message_by_offset(commit_log_offset)
        if record is None:
            return None
        try:
            message, _ = decode_record(record, decompress=False)
        except RecordDecodeError:
            return None
        return message if message.topic == TRANS_HALF_TOPIC else None

    def _final_message(self, request: RemotingCommand, half: MessageExt,
                       header: EndTransactionRequestHeader) -> PutMessageRequest | RemotingCommand:
        properties = dict(half.properties)
        real_topic = properties.pop(MessageConst.REAL_TOPIC, None)
        real_queue = properties.pop(MessageConst.REAL_QUEUE_ID, None)
        if not real_topic or real_queue is None or not real_queue.isdigit():
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         remark="the prepared message has no REAL_TOPIC / REAL_QID")
        properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        sys_flag = without_transaction_type(half.sys_flag) | _COMMIT
        put = self.put_path.build(
            request, real_topic, int(real_queue), half.body, properties, half.flag, sys_flag, half.born_timestamp,
            half.born_host, half.reconsume_times, _COMMIT, False)
        if isinstance(put, PutMessageRequest):
            put.prepared_transaction_offset = header.commit_log_offset
        return put

    def _remember(self, transaction_id: str, outcome: int) -> None:
        resolved = self._resolved
        resolved[transaction_id] = outcome
        if len(resolved) > RESOLVED_MEMORY:
            resolved.popitem(last=False)

    def _write_op(self, half: MessageExt) -> None:
        """Mark ``half`` resolved: an op message whose body is its half-queue offset."""
        topics = self.ctx.topics
        topics.add_if_absent(system_topic_config(topics, TRANS_OP_HALF_TOPIC))
        put = self.put_path.internal(TRANS_OP_HALF_TOPIC, half.queue_id, str(half.queue_offset).encode(),
                                     {MessageConst.TAGS: REMOVE_TAG}, time.time_ns() // 1_000_000)
        result = self.put_path.put_now(put, counted=False)
        if not result.status.is_ok:
            # the transaction is resolved but not marked: a check-back may ask the producer again
            logger.error("cannot write the op message of half message %s: %s %s", half.msg_id,
                         result.status.value, result.error)

    # ------------------------------------------------------------------ check-back

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(max(self.ctx.config.transaction_check_interval_ms, 10) / 1000)
            more = True
            round_start = time.time_ns() // 1_000_000
            while more:  # a backlog is worked off in short passes, letting other requests in between
                try:
                    more = self.check(round_start_ms=round_start).more
                except Exception:
                    logger.exception("transaction check pass failed")
                    more = False
                await asyncio.sleep(0)

    def check(self, now_ms: int | None = None, *, round_start_ms: int | None = None) -> CheckPassReport:
        """One pass over the half queue: check back, discard or skip what is due; returns what it did.

        A pass stops at messages stored since ``round_start_ms`` (default: now), the start of the round
        of passes it belongs to, so a message put back for its check is not checked again in that round.
        """
        ctx = self.ctx
        store = ctx.store
        config = ctx.config
        report = CheckPassReport()
        half_queue = store.consume_queues.find(TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        if half_queue is None:
            return report
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        round_start = now if round_start_ms is None else round_start_ms
        offsets = ctx.offsets
        half_offset = max(offsets.query_offset(CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID), half_queue.min_offset)
        ops_complete = self._read_ops(half_offset)
        resolved_at = self._resolved_at
        end = min(half_queue.max_offset, half_offset + MAX_HALF_PER_PASS)
        offset = half_offset
        while offset < end:
            if offset in resolved_at:
                offset += 1
                continue
            unit = half_queue.unit_at(offset)
            record = None if unit is None else store.select_one_message_by_offset(unit[0], unit[1])
            half = None
            if record is not None:
                try:
                    half, _ = decode_record(record, decompress=False)
                except RecordDecodeError as exc:
                    logger.warning("half message at queue offset %d is damaged (%s); skipping it", offset, exc)
            if half is None:
                offset += 1
                continue
            transaction_id = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or half.msg_id
            if transaction_id in self._resolved:
                report.resolved_skipped += 1
                offset += 1
                continue
            if not ops_complete:
                report.more = True
                break  # op messages not read yet may resolve this one: read on first
            if half.store_timestamp >= round_start:
                break
            immunity = config.transaction_timeout_ms
            immunity_text = half.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_text and immunity_text.isdigit():
                immunity = int(immunity_text) * 1000
            if now - half.born_timestamp < immunity:
                break  # newer ones behind it are younger still
            times_text = half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES)
            times = int(times_text) if times_text and times_text.isdigit() else 0
            reserved_ms = store.config.file_reserved_time_hours * 3_600_000
            if times >= config.transaction_check_max or now - half.born_timestamp > reserved_ms:
                self._discard(half)
                report.discarded += 1
            elif self._check_back(half, times + 1):
                report.checked += 1
            else:
                break  # could not put it back: try again next pass
            offset += 1
        else:
            report.more = end < half_queue.max_offset
        if offset != half_offset:
            offsets.commit_offset(CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, offset)
            for passed in [at for at in resolved_at if at < offset]:
                del resolved_at[passed]
        ops = self._ops
        op_done = -1
        while ops and ops[0][1] < offset:
            op_done = ops.popleft()[0] + 1
        if op_done >= 0:
            offsets.commit_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, op_done)
        report.half_offset = offset
        return report

    def _read_ops(self, half_offset: int) -> bool:
        """Read the next op messages (at most MAX_OPS_PER_PASS) into the pass state; True once all are read.

        Ops read but not yet behind the half queue's consume offset stay in memory between passes;
        the state starts from the op queue's consume offset (after a restart, say). An op whose body
        is unreadable resolves nothing (-1). With OPS_IN_MEMORY_MAX ops held (the half queue stuck
        behind a message not due yet) reading pauses and the pass goes on as if all were read: a
        transaction resolved by an op not read yet may be checked back once more, never lost.
        """
        if len(self._ops) >= OPS_IN_MEMORY_MAX:
            return True
        store = self.ctx.store
        op_queue = store.consume_queues.find(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        if op_queue is None:
            return True
        start = self._op_next
        if start < 0:
            start = max(self.ctx.offsets.query_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID),
                        op_queue.min_offset)
        start = max(start, op_queue.min_offset)
        end = min(op_queue.max_offset, start + MAX_OPS_PER_PASS)
        for op_offset in range(start, end):
            unit = op_queue.unit_at(op_offset)
            record = None if unit is None else store.select_one_message_by_offset(unit[0], unit[1])
            half_at = -1
            if record is not None:
                try:
                    op, _ = decode_record(record)
                    text = op.body.decode("ascii", "replace")
                    half_at = int(text) if text.isdigit() else -1
                except RecordDecodeError:
                    half_at = -1
            self._ops.append((op_offset, half_at))
            if half_at >= half_offset:
                self._resolved_at[half_at] = op_offset
        self._op_next = end
        return end == op_queue.max_offset

    def _check_back(self, half: MessageExt, times: int) -> bool:
        """Put ``half`` back at the end of the half queue with its check count, then ask its producer group."""
        properties = dict(half.properties)
        properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(times)
        try:
            put = self.put_path.moved(half, TRANS_HALF_TOPIC, HALF_QUEUE_ID, properties)
        except InvalidPropertyError as exc:
            logger.error("half message %s has bad properties (%s); discarding it", half.msg_id, exc)
            self._discard(half)
            return True
        result = self.put_path.put_now(put, counted=False)
        if not result.status.is_ok:
            logger.error("cannot put half message %s back for its check: %s %s", half.msg_id, result.status.value,
                         result.error)
            return False
        record = self.ctx.store.select_one_message_by_offset(result.wrote_offset)
        if record is None:
            return True
        copy, _ = decode_record(record, decompress=False)
        self._send_check(copy)
        return True

    def _send_check(self, half: MessageExt) -> None:
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        members = self.ctx.clients.producer_groups.get(group, {})
        channel = next((info.channel for info in members.values() if not info.channel.closed), None)
        if channel is None:
            logger.warning("cannot check transaction %s back: no producer of group %r is connected",
                           half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), group)
            return
        uniq = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half.queue_offset, commit_log_offset=half.commit_log_offset, msg_id=uniq,
            transaction_id=uniq, offset_msg_id=half.msg_id)
        real_queue = half.properties.get(MessageConst.REAL_QUEUE_ID, "")
        half.topic = half.properties.get(MessageConst.REAL_TOPIC, half.topic)
        half.queue_id = int(real_queue) if real_queue.isdigit() else 0
        try:
            body = encode_record(half)
        except RecordEncodeError as exc:
            logger.error("cannot encode half message %s for its check: %s", half.msg_id, exc)
            return
        request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body,
                                          oneway=True, language=LanguageCode.JAVA)
        try:
            channel.send(request)
        except Exception:
            logger.exception("cannot send the check of transaction %s to %s", uniq, channel.remote_address)
            return

    def _discard(self, half: MessageExt) -> None:
        """Move a half message checked too often (or too old) to TRANS_CHECK_MAX_TIME_TOPIC."""
        topics = self.ctx.topics
        topics.add_if_absent(system_topic_config(topics, TRANS_CHECK_MAX_TIME_TOPIC))
        try:
            put = self.put_path.moved(half, TRANS_CHECK_MAX_TIME_TOPIC, HALF_QUEUE_ID, dict(half.properties))
        except InvalidPropertyError as exc:
            logger.error("cannot move half message %s to %s (%s); dropping it", half.msg_id,
                         TRANS_CHECK_MAX_TIME_TOPIC, exc)
            return
        result = self.put_path.put_now(put, counted=False)
        if not result.status.is_ok:
            logger.error("cannot move half message %s to %s; dropping it", half.msg_id, TRANS_CHECK_MAX_TIME_TOPIC)
        else:
            logger.warning("half message %s (transaction %s, group %s) was checked %s times without an answer; "
                           "moved to %s", half.msg_id, half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                           half.properties.get(MessageConst.PRODUCER_GROUP),
                           half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES, "0"), TRANS_CHECK_MAX_TIME_TOPIC)


def _mismatch(half: MessageExt, header: EndTransactionRequestHeader) -> str:
    """Why ``header`` does not match the half message it points at ('' when it does)."""
    if half.properties.get(MessageConst.PRODUCER_GROUP) != header.producer_group:
        return "The producer group wrong"
    if half.queue_offset != header.tran_state_table_offset:
        return "The transaction state table offset wrong"
    if half.commit_log_offset != header.commit_log_offset:
        return "The commit log offset wrong"
    return ""


def _name(value: int) -> str:
    return {_COMMIT: "committed", _ROLLBACK: "rolled back"}.get(value, str(value))


__all__ = [
    "CHECK_GROUP",
    "REMOVE_TAG",
    "CheckPassReport",
    "TransactionalMessageService",
    "half_message_properties",
    "half_topic_config",
    "system_topic_config",
    "without_transaction_type",
]
