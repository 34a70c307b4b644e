"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A batch's body goes to the store as the producer encoded it (`EncodedBatchRequest`): the store checks
and stores its messages in one pass, so the processor only checks the header and the batch-wide
properties. See docs/design/broker.md#sending.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_put import Answer, MessagePut
from rocketflow.broker.processors.common import FAQ_SUFFIX, error, parse_host
from rocketflow.broker.processors.send_rules import (
    MAX_RECONSUME_TIMES_MIN_VERSION,
    PLAIN_SYS_FLAGS,
    Creations,
    check_send,
    pick_queue,
    random_queue,
    sys_flag_error,
)
from rocketflow.broker.transaction import (
    HALF_QUEUE_ID,
    half_message_properties,
    half_topic_config,
    without_transaction_type,
)
from rocketflow.net import GroupResult, RemotingServer, RequestContext
from rocketflow.protocol.bodies import TopicConfig, TopicFilterType
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import DLQ_NUMS_PER_GROUP, TRANS_HALF_TOPIC, PermName, dlq_topic, is_retry_topic
from rocketflow.protocol.properties import InvalidPropertyError, decode_properties, encode_properties_bytes
from rocketflow.protocol.sysflag import MessageSysFlag, transaction_value
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader, decode_send_header
from rocketflow.store.commit_log import EncodedBatchRequest

_TRANSACTION_PREPARED: Final = int(MessageSysFlag.TRANSACTION_PREPARED)
_MULTI_TAGS: Final = int(MessageSysFlag.MULTI_TAGS)


class SendMessageProcessor:
    """Stores what producers send.

    A request is validated and decoded completely before anything is auto-created, so a rejected
    request leaves no topic or group behind.
    """

    def __init__(self, ctx: BrokerContext, put_path: MessagePut) -> None:
        self.ctx = ctx
        self.put_path = put_path

    def register_to(self, server: RemotingServer) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            server.register(code, self.process_send)
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.process_send, group=self.process_send_batches)

    # ------------------------------------------------------------------ send

    def process_send(self, request_ctx: RequestContext, request: RemotingCommand) -> Answer:
        header = decode_send_header(request)
        checked = check_send(self.ctx, request_ctx, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        # the header's batch flag decides, as in RocketMQ: the C++ client sends batches as SEND_MESSAGE with it
        if request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
            return self._send_batch(request_ctx, request, header, checked)
        return self._send_single(request_ctx, request, header, checked)

    def _send_single(self, request_ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                     topic_config: TopicConfig) -> Answer:
        ctx = self.ctx
        config = ctx.config
        body = request.body
        if len(body) > config.max_message_size:
            return error(request, ResponseCode.MESSAGE_ILLEGAL,
                         f"the message body size {len(body)} exceeds the maximum {config.max_message_size}")
        if header.sys_flag & ~PLAIN_SYS_FLAGS:
            wrong = sys_flag_error(header.sys_flag, (body,))
            if wrong is not None:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        topic = header.topic
        queue_id = pick_queue(header.queue_id, topic_config.write_queue_nums)
        reconsume_times = header.reconsume_times or 0
        properties = decode_properties(header.properties) if header.properties else {}
        creations = Creations([topic_config])
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
                         f"the broker[{ctx.identity.ip}] sending transaction message is forbidden")
        # a retried message keeps its properties, TRAN_MSG included: only a first send is a half message
        if transactional and not is_retry_topic(header.topic):
            # stored out of sight until END_TRANSACTION commits it; a delay level waits for the commit
            half_message_properties(properties, topic, queue_id)
            topic, queue_id = TRANS_HALF_TOPIC, HALF_QUEUE_ID
            sys_flag = without_transaction_type(sys_flag)
            transaction = _TRANSACTION_PREPARED
            creations.topics.append(half_topic_config(ctx.topics))
        put = self.put_path.build(request, topic, queue_id, body, properties, header.flag, sys_flag,
                             header.born_timestamp, parse_host(request_ctx.remote_address), reconsume_times,
                             transaction, wait != "false")
        if isinstance(put, RemotingCommand):
            return put
        creations.apply(ctx)
        return self.put_path.put_and_answer(request, [put], header.queue_id if header.queue_id >= 0 else queue_id,
                                       batch=False)

    def _route_retry(self, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int,
                     properties: dict[str, str], reconsume_times: int,
                     creations: Creations) -> tuple[str, int] | RemotingCommand:
        """handleRetryAndDLQ: a plain send to %RETRY%group past the max reconsume times goes to the DLQ."""
        ctx = self.ctx
        topic = header.topic
        group = topic[len("%RETRY%"):]
        group_config = ctx.groups.lookup(group)
        if group_config is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group not exist, {group}{FAQ_SUFFIX}")
        creations.groups.append(group_config)
        max_times = group_config.retry_max_times
        if request.version >= MAX_RECONSUME_TIMES_MIN_VERSION and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if reconsume_times >= max_times:
            topic = dlq_topic(group)
            queue_id = random_queue(DLQ_NUMS_PER_GROUP)
            creations.topics.append(
                ctx.topics.plan_in_send_back(topic, DLQ_NUMS_PER_GROUP, PermName.READ | PermName.WRITE))
            properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return topic, queue_id

    # ------------------------------------------------------------------ batches

    def _send_batch(self, request_ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                    topic_config: TopicConfig) -> Answer:
        batch = self._batch_request(request_ctx, request, header, topic_config)
        if isinstance(batch, RemotingCommand):
            return batch
        # the checks of each message happen while it is stored: a rejected batch creates no topic
        return self.put_path.put_and_answer(request, batch, batch.queue_id, batch=True, creates=topic_config)

    def _batch_request(self, request_ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader,
                       topic_config: TopicConfig) -> EncodedBatchRequest | RemotingCommand:
        topic = header.topic
        if is_retry_topic(topic):
            return error(request, ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {topic}")
        shared = _batch_properties(header.properties, self.ctx.config.cluster)
        if isinstance(shared, str):
            return error(request, ResponseCode.MESSAGE_ILLEGAL, shared)
        wait, suffix = shared
        queue_id = pick_queue(header.queue_id, topic_config.write_queue_nums)
        sys_flag = header.sys_flag
        if sys_flag & ~PLAIN_SYS_FLAGS:
            # the bodies are looked at by the store, which walks the batch anyway
            wrong = sys_flag_error(sys_flag, ())
            if wrong is not None:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        if topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= _MULTI_TAGS
        if not request.body:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, "the batch body is empty")
        return EncodedBatchRequest(topic, queue_id, request.body, suffix, sys_flag=sys_flag,
                                   born_timestamp=header.born_timestamp,
                                   born_host=parse_host(request_ctx.remote_address),
                                   store_host=self.ctx.identity.store_host, wait_store_msg_ok=wait)

    def process_send_batches(self, contexts: Sequence[RequestContext]) -> list[GroupResult]:
        """SEND_BATCH_MESSAGE requests that arrived together: each checked as `process_send` checks it,
        then those accepted stored by one store call (one write for a run of one-size batches)."""
        results: list[GroupResult] = [None] * len(contexts)
        batches: list[EncodedBatchRequest] = []
        accepted: list[int] = []
        creates: list[TopicConfig] = []
        for i, request_ctx in enumerate(contexts):
            request = request_ctx.request
            try:
                header = decode_send_header(request)
                checked = check_send(self.ctx, request_ctx, request, header)
                if isinstance(checked, RemotingCommand):
                    results[i] = checked
                    continue
                batch = self._batch_request(request_ctx, request, header, checked)
            except Exception as exc:  # answered as the dispatcher answers a processor's exception
                results[i] = exc
                continue
            if isinstance(batch, RemotingCommand):
                results[i] = batch
                continue
            batches.append(batch)
            accepted.append(i)
            creates.append(checked)
        if batches:
            answers = self.put_path.put_batches_and_answer([contexts[i].request for i in accepted], batches, creates)
            for i, answer in zip(accepted, answers, strict=True):
                results[i] = answer
        return results


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


__all__ = ["SendMessageProcessor"]
