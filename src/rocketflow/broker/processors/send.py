"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and CONSUMER_SEND_MSG_BACK (36).

PROTOCOL.md 2.3 and 4.6. A batch's body goes to the store as the producer encoded it
(`EncodedBatchRequest`): the store checks and stores its messages in one pass, so the processor
only checks the header and the batch-wide properties.
"""

from __future__ import annotations

import asyncio
import functools
import random
import struct
from collections.abc import Awaitable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from rocketflow.acl import Permission, request_grant
from rocketflow.broker.processors.common import FAQ_SUFFIX, check_names, error, parse_host
from rocketflow.broker.transaction import HALF_QUEUE_ID, half_message_properties, without_transaction_type
from rocketflow.net import GroupResult, RemotingServer, RequestContext
from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig, TopicFilterType
from rocketflow.protocol.codec import RecordDecodeError, decode_record, has_zlib_header
from rocketflow.protocol.ids import offset_msg_id_from_packed
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import (
    DLQ_NUMS_PER_GROUP,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    InvalidNameError,
    PermName,
    dlq_topic,
    is_retry_topic,
    is_writeable,
    retry_topic,
    validate_topic,
)
from rocketflow.protocol.properties import InvalidPropertyError, decode_properties, encode_properties_bytes
from rocketflow.protocol.sysflag import (
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB_TYPE,
    KNOWN_MESSAGE_SYS_FLAGS,
    MessageSysFlag,
    transaction_value,
)
from rocketflow.protocol.tags import tags_code as compute_tags_code
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
)
from rocketflow.store.commit_log import (
    AppendResult,
    EncodedBatchRequest,
    PutMessageRequest,
    PutMessageStatus,
    waits_for_store,
)

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController

#: Topics no producer may send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
})
#: Request version from which CONSUMER_SEND_MSG_BACK / retry sends honour ``maxReconsumeTimes`` (V3_4_9).
MAX_RECONSUME_TIMES_MIN_VERSION: Final = 121

_MSG_IDS_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def _msg_ids_struct(host_len: int, count: int) -> struct.Struct:
    """Packs `count` (store host, commit-log offset) pairs: the bytes of as many offset msg ids."""
    packer = _MSG_IDS_STRUCTS.get((host_len, count))
    if packer is None:
        packer = struct.Struct(f">{f'{host_len}sq' * count}")
        if count <= 1024:
            _MSG_IDS_STRUCTS[(host_len, count)] = packer
    return packer
_TRANSACTION_PREPARED: Final = int(MessageSysFlag.TRANSACTION_PREPARED)
_TRANSACTION_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)
_MULTI_TAGS: Final = int(MessageSysFlag.MULTI_TAGS)
_ILLEGAL_REMARK: Final = ("the message is illegal, maybe msg body or properties length not matched. "
                          "msg body length limit 128k, msg properties length limit 32k.")
_COMPRESSED: Final = int(MessageSysFlag.COMPRESSED)
#: sysFlag bits a send may carry that need no look at the body (anything else goes through `sys_flag_error`)
_PLAIN_SYS_FLAGS: Final = KNOWN_MESSAGE_SYS_FLAGS & ~_COMPRESSED
#: Lowest queue id a send may name: -1 is RocketMQ's "any queue" (the broker picks one).
ANY_QUEUE: Final = -1


@dataclass(slots=True)
class _Creations:
    """Topics and groups a request needs (existing, or planned auto-creations), stored once it is accepted."""

    topics: list[TopicConfig] = field(default_factory=list)
    groups: list[SubscriptionGroupConfig] = field(default_factory=list)

    def apply(self, broker: BrokerController) -> None:
        for group_config in self.groups:
            broker.groups.add_if_absent(group_config)
        for topic_config in self.topics:
            broker.topics.add_if_absent(topic_config)


class SendMessageProcessor:
    """Stores what producers send and what consumers send back.

    A request is validated and decoded completely before anything is auto-created, so a rejected
    request leaves no topic or group behind.
    """

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self._random = random.Random()

    def register_to(self, server: RemotingServer) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            server.register(code, self.process_send)
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.process_send, group=self.process_send_batches)
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.process_send_back)

    # ------------------------------------------------------------------ checks

    def check_send(self, ctx: RequestContext, request: RemotingCommand,
               header: SendMessageRequestHeader) -> TopicConfig | RemotingCommand:
        """msgCheck: broker/topic permission, topic name, queue id.

        Returns the topic's config, or for a topic that would be auto-created the config to store
        once the message is accepted (not stored yet).
        """
        broker = self.broker
        config = broker.config
        topic = header.topic
        if not is_writeable(config.broker_permission):
            return error(request, ResponseCode.NO_PERMISSION,
                         f"the broker[{broker.broker_ip}] sending message is forbidden")
        illegal = _topic_error(topic)
        if illegal is not None:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, illegal)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return error(request, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        topic_config = broker.topics.select(topic)
        if topic_config is None:
            topic_config = broker.topics.plan_in_send(topic, header.default_topic, ctx.remote_address,
                                                      header.default_topic_queue_nums)
            if topic_config is None and is_retry_topic(topic):
                topic_config = broker.topics.plan_in_send_back(topic, 1, PermName.READ | PermName.WRITE)
            if topic_config is None:
                return error(request, ResponseCode.TOPIC_NOT_EXIST,
                             f"topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}")
        if not is_writeable(topic_config.perm):
            return error(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue_id = header.queue_id
        # RocketMQ's bound: a queue that is readable or writable (a stale route during a shrink still lands)
        limit = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        if queue_id >= limit or queue_id < ANY_QUEUE:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"request queueId[{queue_id}] is illegal (-1 for any queue, else 0..{limit - 1}), "
                         f"{topic_config} Producer: {ctx.remote_address}")
        return topic_config

    def pick_queue(self, queue_id: int, queue_nums: int) -> int:
        if queue_id >= 0:
            return queue_id
        return self._random.randrange(queue_nums) if queue_nums > 0 else 0

    # ------------------------------------------------------------------ send

    def process_send(self, ctx: RequestContext,
                     request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        header = decode_send_header(request)
        checked = self.check_send(ctx, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        if request.code == RequestCode.SEND_BATCH_MESSAGE:
            return self._send_batch(ctx, request, header, checked)
        return self._send_single(ctx, request, header, checked)

    def _send_single(self, ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                     topic_config: TopicConfig) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        broker = self.broker
        config = broker.config
        body = request.body
        if len(body) > config.max_message_size:
            return error(request, ResponseCode.MESSAGE_ILLEGAL,
                         f"the message body size {len(body)} exceeds the maximum {config.max_message_size}")
        if header.sys_flag & ~_PLAIN_SYS_FLAGS:
            wrong = sys_flag_error(header.sys_flag, (body,))
            if wrong is not None:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        topic = header.topic
        queue_id = self.pick_queue(header.queue_id, topic_config.write_queue_nums)
        reconsume_times = header.reconsume_times or 0
        properties = decode_properties(header.properties) if header.properties else {}
        creations = _Creations([topic_config])
        if is_retry_topic(topic):
            routed = self._route_retry(request, header, queue_id, properties, reconsume_times, creations)
            if isinstance(routed, RemotingCommand):
                return routed
            topic, queue_id = routed
        wait = properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        properties[MessageConst.CLUSTER] = config.cluster
        sys_flag = header.sys_flag
        transaction = transaction_value(sys_flag)
        if topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= _MULTI_TAGS
        transactional = properties.get(MessageConst.TRANSACTION_PREPARED) == "true"
        if transactional and config.reject_transaction_message:
            return error(request, ResponseCode.NO_PERMISSION,
                         f"the broker[{broker.broker_ip}] sending transaction message is forbidden")
        # a retried message keeps its properties, TRAN_MSG included: only a first send is a half message
        if transactional and not is_retry_topic(header.topic):
            # stored out of sight until END_TRANSACTION commits it; a delay level waits for the commit
            half_message_properties(properties, topic, queue_id)
            topic, queue_id = TRANS_HALF_TOPIC, HALF_QUEUE_ID
            sys_flag = without_transaction_type(sys_flag)
            transaction = _TRANSACTION_PREPARED
            creations.topics.append(broker.transactions.half_topic_config())
        put = self.build_put_request(request, topic, queue_id, body, properties, header.flag, sys_flag,
                                  header.born_timestamp, parse_host(ctx.remote_address), reconsume_times,
                                  transaction, wait != "false")
        if isinstance(put, RemotingCommand):
            return put
        creations.apply(broker)
        return self._put(request, [put], header.queue_id if header.queue_id >= 0 else queue_id, batch=False)

    def _route_retry(self, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int,
                     properties: dict[str, str], reconsume_times: int,
                     creations: _Creations) -> tuple[str, int] | RemotingCommand:
        """handleRetryAndDLQ: a plain send to %RETRY%group past the max reconsume times goes to the DLQ."""
        broker = self.broker
        topic = header.topic
        group = topic[len("%RETRY%"):]
        group_config = broker.groups.lookup(group)
        if group_config is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group not exist, {group}{FAQ_SUFFIX}")
        creations.groups.append(group_config)
        max_times = group_config.retry_max_times
        if request.version >= MAX_RECONSUME_TIMES_MIN_VERSION and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if reconsume_times >= max_times:
            topic = dlq_topic(group)
            queue_id = self._random.randrange(99_999_999) % DLQ_NUMS_PER_GROUP
            creations.topics.append(
                broker.topics.plan_in_send_back(topic, DLQ_NUMS_PER_GROUP, PermName.READ | PermName.WRITE))
            properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return topic, queue_id

    def build_put_request(self, request: RemotingCommand, topic: str, queue_id: int, body: bytes,
                       properties: dict[str, str], flag: int, sys_flag: int, born_timestamp: int,
                       born_host: tuple[str, int], reconsume_times: int, transaction: int,
                       wait_store_msg_ok: bool) -> PutMessageRequest | RemotingCommand:
        """A put request, rewritten to SCHEDULE_TOPIC_XXXX when it carries a delay level."""
        tags = compute_tags_code(properties.get(MessageConst.TAGS))
        delay_text = properties.get(MessageConst.DELAY_TIME_LEVEL)
        if delay_text and transaction not in (_TRANSACTION_PREPARED, _TRANSACTION_ROLLBACK):
            try:
                level = int(delay_text)
            except ValueError:
                return error(request, ResponseCode.MESSAGE_ILLEGAL,
                             f"the DELAY property must be an integer delay level, got {delay_text!r}")
            if level > 0:
                delays = self.broker.delay_levels_ms
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
            return error(request, ResponseCode.MESSAGE_ILLEGAL, f"bad message properties: {exc}")
        return PutMessageRequest(
            topic=topic, queue_id=queue_id, body=body, properties=properties, properties_bytes=properties_bytes,
            flag=flag, sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            store_host=self.broker.store_host, reconsume_times=reconsume_times, tags_code=tags,
            keys=properties.get(MessageConst.KEYS), uniq_key=properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            wait_store_msg_ok=wait_store_msg_ok,
        )

    def _send_batch(self, ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                    topic_config: TopicConfig) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        batch = self._batch_request(ctx, request, header, topic_config)
        if isinstance(batch, RemotingCommand):
            return batch
        # the checks of each message happen while it is stored: a rejected batch creates no topic
        return self._put(request, batch, batch.queue_id, batch=True, creates=topic_config)

    def _batch_request(self, ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                       topic_config: TopicConfig) -> EncodedBatchRequest | RemotingCommand:
        broker = self.broker
        topic = header.topic
        if is_retry_topic(topic):
            return error(request, ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {topic}")
        shared = _batch_properties(header.properties, broker.config.cluster)
        if isinstance(shared, str):
            return error(request, ResponseCode.MESSAGE_ILLEGAL, shared)
        wait, suffix = shared
        queue_id = self.pick_queue(header.queue_id, topic_config.write_queue_nums)
        sys_flag = header.sys_flag
        if sys_flag & ~_PLAIN_SYS_FLAGS:
            # the bodies are looked at by the store, which walks the batch anyway
            wrong = sys_flag_error(sys_flag, ())
            if wrong is not None:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        if topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= _MULTI_TAGS
        if not request.body:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, "the batch body is empty")
        return EncodedBatchRequest(topic, queue_id, request.body, suffix, sys_flag=sys_flag,
                                   born_timestamp=header.born_timestamp, born_host=parse_host(ctx.remote_address),
                                   store_host=broker.store_host, wait_store_msg_ok=wait)

    def process_send_batches(self, contexts: Sequence[RequestContext]) -> list[GroupResult]:
        """SEND_BATCH_MESSAGE requests that arrived together: each checked as `process_send` checks it,
        then those accepted stored by one store call (one write for a run of one-size batches)."""
        results: list[GroupResult] = [None] * len(contexts)
        batches: list[EncodedBatchRequest] = []
        accepted: list[tuple[int, TopicConfig]] = []
        for i, ctx in enumerate(contexts):
            request = ctx.request
            try:
                header = decode_send_header(request)
                checked = self.check_send(ctx, request, header)
                if isinstance(checked, RemotingCommand):
                    results[i] = checked
                    continue
                batch = self._batch_request(ctx, request, header, checked)
            except Exception as exc:  # answered as the dispatcher answers a processor's exception
                results[i] = exc
                continue
            if isinstance(batch, RemotingCommand):
                results[i] = batch
                continue
            batches.append(batch)
            accepted.append((i, checked))
        if batches:
            topics = self.broker.topics
            outcomes = self.broker.store.put_encoded_batches(batches)
            for (i, topic_config), batch, outcome in zip(accepted, batches, outcomes, strict=True):
                if not isinstance(outcome, AppendResult) or outcome.status is PutMessageStatus.PUT_OK:
                    topics.add_if_absent(topic_config)
                results[i] = self._answer(contexts[i].request, outcome, batch.queue_id, True, batch.wait_store_msg_ok)
        return results

    # ------------------------------------------------------------------ storing

    def _put(self, request: RemotingCommand, requests: list[PutMessageRequest] | EncodedBatchRequest, queue_id: int,
             *, batch: bool, creates: TopicConfig | None = None) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        """Store and answer; `creates` is a topic config to add once the store has taken the messages."""
        outcome = self.broker.store.put_messages_or_wait(requests)
        if creates is not None and (not isinstance(outcome, AppendResult) or outcome.status is PutMessageStatus.PUT_OK):
            self.broker.topics.add_if_absent(creates)
        return self._answer(request, outcome, queue_id, batch, waits_for_store(requests))

    def _answer(self, request: RemotingCommand, outcome: AppendResult | Future[AppendResult], queue_id: int,
                batch: bool, waits: bool) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        """The response to a put, or an awaitable of it when the put waits for a flush or a replica."""
        if self.broker.replicates_synchronously:
            return self._await_put(request, outcome, queue_id, batch, waits)
        if isinstance(outcome, AppendResult):
            return self._put_response(request, outcome, queue_id, batch)
        return self._await_put(request, outcome, queue_id, batch, False)

    async def _await_put(self, request: RemotingCommand, outcome: AppendResult | Future[AppendResult],
                         queue_id: int, batch: bool, wait_for_replica: bool) -> RemotingCommand:
        result = await _appended(outcome)
        if wait_for_replica:
            result = await self.broker.wait_for_replica(result)
        return self._put_response(request, result, queue_id, batch)

    def _put_response(self, request: RemotingCommand, result: AppendResult, queue_id: int,
                      batch: bool) -> RemotingCommand:
        status = result.status
        broker = self.broker
        code: int
        if status is PutMessageStatus.PUT_OK:
            code = ResponseCode.SUCCESS
            broker.stats.put_messages(result.message_count, result.wrote_bytes)
        elif status in _STORED_BUT_NOT_OK:
            code = _STORED_BUT_NOT_OK[status]
            broker.stats.put_messages(result.message_count, result.wrote_bytes)
        else:
            broker.stats.put_failures += 1
            code, remark = _put_failure(status, result.error)
            return request.make_response(code, remark=remark)
        msg_id = self._msg_ids(result) if batch else result.msg_id
        return request.make_response(code, ext_fields={
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": broker.config.region_id,
            "TRACE_ON": "true" if broker.config.trace_on else "false",
        })

    def _msg_ids(self, result: AppendResult) -> str:
        """Comma-joined offset msg ids of a batch: `host + offset` packed for all, hex-encoded in one call."""
        host = result.store_host
        offsets = result.commit_log_offsets
        count = len(offsets)
        # a put's offsets rise, so its first and last bound them all
        if not count or not 0 <= offsets[0] <= offsets[-1] < 1 << 63:
            return ",".join(offset_msg_id_from_packed(host, offset) for offset in offsets)
        args: list[bytes | int] = [host] * (2 * count)
        args[1::2] = offsets
        return _msg_ids_struct(len(host), count).pack(*args).hex(",", len(host) + 8).upper()

    # ------------------------------------------------------------------ send back

    def process_send_back(self, ctx: RequestContext,
                          request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        """CONSUMER_SEND_MSG_BACK, PROTOCOL.md 4.6."""
        header = ConsumerSendMsgBackRequestHeader.from_command(request)
        check_names(group=header.group, group_field="group")
        broker = self.broker
        group_config = broker.groups.lookup(header.group)
        if group_config is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group not exist, {header.group}{FAQ_SUFFIX}")
        if not is_writeable(broker.config.broker_permission):
            return error(request, ResponseCode.NO_PERMISSION,
                         f"the broker[{broker.broker_ip}] sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            broker.groups.add_if_absent(group_config)
            return request.make_response(ResponseCode.SUCCESS)
        record = broker.store.select_one_message_by_offset(header.offset) if header.offset >= 0 else None
        stored = None
        if record is not None:
            try:
                stored, _ = decode_record(record, decompress=False)
            except RecordDecodeError:
                stored = None
        if stored is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")
        # the message moves into the group's retry topic, where the group's consumers read it: with ACL on,
        # the account must be allowed to read it where it is (the hook checked the group only)
        refusal = request_grant(broker.acl_hook, request, ctx.remote_address).message_refusal(
            stored.topic, stored.properties, Permission.SUB)
        if refusal is not None:
            return error(request, ResponseCode.NO_PERMISSION, refusal)
        new_topic = retry_topic(header.group)
        queue_id = self._random.randrange(99_999_999) % group_config.retry_queue_nums
        topic_config = broker.topics.plan_in_send_back(new_topic, group_config.retry_queue_nums,
                                                       PermName.READ | PermName.WRITE)
        if not is_writeable(topic_config.perm):
            return error(request, ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        creations = _Creations([topic_config], [group_config])
        properties = dict(stored.properties)
        properties.setdefault(MessageConst.RETRY_TOPIC, stored.topic)
        properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        max_times = group_config.retry_max_times
        if request.version >= MAX_RECONSUME_TIMES_MIN_VERSION and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        delay_level = header.delay_level
        properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        if stored.reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(header.group)
            queue_id = self._random.randrange(99_999_999) % DLQ_NUMS_PER_GROUP
            dlq_config = broker.topics.plan_in_send_back(new_topic, DLQ_NUMS_PER_GROUP,
                                                         PermName.READ | PermName.WRITE)
            if not is_writeable(dlq_config.perm):
                return error(request, ResponseCode.NO_PERMISSION,
                             f"the topic[{new_topic}] sending message is forbidden")
            creations.topics.append(dlq_config)
        else:
            if delay_level == 0:
                delay_level = 3 + stored.reconsume_times
            properties[MessageConst.DELAY_TIME_LEVEL] = str(delay_level)
        origin = properties.get(MessageConst.ORIGIN_MESSAGE_ID)
        properties[MessageConst.ORIGIN_MESSAGE_ID] = origin if origin else stored.msg_id
        put = self.build_put_request(request, new_topic, queue_id, stored.body, properties, stored.flag,
                                  stored.sys_flag, stored.born_timestamp, stored.born_host,
                                  stored.reconsume_times + 1, transaction_value(stored.sys_flag), True)
        if isinstance(put, RemotingCommand):
            return put
        creations.apply(broker)
        outcome = broker.store.put_messages_or_wait([put])
        if isinstance(outcome, AppendResult) and not broker.replicates_synchronously:
            return self._send_back_response(request, outcome)
        return self._await_send_back(request, outcome)

    async def _await_send_back(self, request: RemotingCommand,
                               outcome: AppendResult | Future[AppendResult]) -> RemotingCommand:
        result = await self.broker.wait_for_replica(await _appended(outcome))
        return self._send_back_response(request, result)

    def _send_back_response(self, request: RemotingCommand, result: AppendResult) -> RemotingCommand:
        if result.status is PutMessageStatus.PUT_OK:
            self.broker.stats.put_messages(result.message_count, result.wrote_bytes)
            return request.make_response(ResponseCode.SUCCESS)
        return request.make_response(ResponseCode.SYSTEM_ERROR, remark=result.status.value)


@functools.lru_cache(maxsize=1024)
def _topic_error(topic: str) -> str | None:
    """Why `topic` is not a legal topic name, or None (remembered: a producer sends to few topics)."""
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        return str(exc)
    return None


def sys_flag_error(sys_flag: int, bodies: Sequence[bytes]) -> str | None:
    """Why a send's ``sysFlag`` (with these bodies) cannot be stored as a record a consumer decodes, or None.

    Bits no 4.x client sets, or 5.x ones this broker does not implement (an inner batch, LZ4 or ZSTD),
    are refused; so is a body flagged COMPRESSED that cannot be zlib data (its header shows it).
    """
    unknown = sys_flag & ~(KNOWN_MESSAGE_SYS_FLAGS | COMPRESSION_TYPE_MASK)
    if unknown:
        return (f"sysFlag {sys_flag:#x} has bits {unknown & 0xFFFFFFFF:#x} this broker does not know (it knows "
                f"{KNOWN_MESSAGE_SYS_FLAGS:#x}, and {COMPRESSION_ZLIB_TYPE:#x} with the compressed bit 0x1)")
    compression = sys_flag & COMPRESSION_TYPE_MASK
    if compression and (compression != COMPRESSION_ZLIB_TYPE or not sys_flag & _COMPRESSED):
        return (f"sysFlag {sys_flag:#x}: compression type {compression >> 8} is not supported; "
                f"compressed bodies are zlib (type 3, {COMPRESSION_ZLIB_TYPE:#x}, with the compressed bit 0x1)")
    if sys_flag & _COMPRESSED:
        for body in bodies:
            if not has_zlib_header(body):
                return ("the body is flagged compressed (sysFlag bit 0x1) but is not zlib data "
                        f"(its first bytes {bytes(body[:2]).hex() or 'none'} are no zlib header)")
    return None


@functools.lru_cache(maxsize=256)
def _batch_properties(properties: str | None, cluster: str) -> tuple[bool, bytes] | str:
    """A batch header's properties -> (whether the sender waits for the store, the encoded properties every
    message of the batch gets), or why they are refused. Producers repeat the same few, so it is remembered."""
    batch_properties = decode_properties(properties) if properties else {}
    if batch_properties.get(MessageConst.DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return "batch messages cannot carry a delay level"
    wait = batch_properties.pop(MessageConst.WAIT_STORE_MSG_OK, None) != "false"
    batch_properties[MessageConst.CLUSTER] = cluster
    try:
        return wait, encode_properties_bytes(batch_properties)
    except InvalidPropertyError as exc:
        return f"bad batch properties: {exc}"


async def _appended(outcome: AppendResult | Future[AppendResult]) -> AppendResult:
    """What `MessageStore.put_messages_or_wait` gave, once the flush it may wait for is done."""
    return outcome if isinstance(outcome, AppendResult) else await asyncio.wrap_future(outcome)


_STORED_BUT_NOT_OK: Final = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}


def _put_failure(status: PutMessageStatus, detail: str) -> tuple[int, str]:
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


__all__ = ["ANY_QUEUE", "MAX_RECONSUME_TIMES_MIN_VERSION", "NOT_ALLOWED_SEND_TOPICS", "SendMessageProcessor",
           "sys_flag_error"]
