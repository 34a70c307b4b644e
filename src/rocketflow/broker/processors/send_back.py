"""CONSUMER_SEND_MSG_BACK (36): a consumer returns a message it could not consume.

The message, read back from the commit log by its offset, moves to the group's retry topic with a
delay level (3 + its reconsume times unless the consumer names one), or to the group's dead-letter
topic once it was reconsumed too often. See docs/design/broker.md#send-back.
"""

from __future__ import annotations

from rocketflow.acl import Permission, request_grant
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_put import Answer, MessagePut
from rocketflow.broker.processors.common import FAQ_SUFFIX, check_names, error
from rocketflow.broker.processors.send_rules import MAX_RECONSUME_TIMES_MIN_VERSION, Creations, random_queue
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import DLQ_NUMS_PER_GROUP, PermName, dlq_topic, is_writeable, retry_topic
from rocketflow.protocol.sysflag import transaction_value
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import ConsumerSendMsgBackRequestHeader


class SendBackProcessor:
    """Moves returned messages to their group's retry or dead-letter topic."""

    def __init__(self, ctx: BrokerContext, put_path: MessagePut) -> None:
        self.ctx = ctx
        self.put_path = put_path

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.process)

    def process(self, request_ctx: RequestContext, request: RemotingCommand) -> Answer:
        header = ConsumerSendMsgBackRequestHeader.from_command(request)
        check_names(group=header.group, group_field="group")
        ctx = self.ctx
        group_config = ctx.groups.lookup(header.group)
        if group_config is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group not exist, {header.group}{FAQ_SUFFIX}")
        if not is_writeable(ctx.config.broker_permission):
            return error(request, ResponseCode.NO_PERMISSION,
                         f"the broker[{ctx.identity.ip}] sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            ctx.groups.add_if_absent(group_config)
            return request.make_response(ResponseCode.SUCCESS)
        record = ctx.store.select_one_message_by_offset(header.offset) if header.offset >= 0 else None
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
        refusal = request_grant(ctx.acl_hook, request, request_ctx.remote_address).message_refusal(
            stored.topic, stored.properties, Permission.SUB)
        if refusal is not None:
            return error(request, ResponseCode.NO_PERMISSION, refusal)
        new_topic = retry_topic(header.group)
        queue_id = random_queue(group_config.retry_queue_nums)
        topic_config = ctx.topics.plan_in_send_back(new_topic, group_config.retry_queue_nums,
                                                    PermName.READ | PermName.WRITE)
        if not is_writeable(topic_config.perm):
            return error(request, ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        creations = Creations([topic_config], [group_config])
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
            queue_id = random_queue(DLQ_NUMS_PER_GROUP)
            dlq_config = ctx.topics.plan_in_send_back(new_topic, DLQ_NUMS_PER_GROUP, PermName.READ | PermName.WRITE)
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
        put = self.put_path.build(request, new_topic, queue_id, stored.body, properties, stored.flag,
                                  stored.sys_flag, stored.born_timestamp, stored.born_host,
                                  stored.reconsume_times + 1, transaction_value(stored.sys_flag), True)
        if isinstance(put, RemotingCommand):
            return put
        creations.apply(ctx)
        return self.put_path.put_and_acknowledge(request, put)


__all__ = ["SendBackProcessor"]
