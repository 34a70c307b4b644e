"""PULL_MESSAGE (11): the pull's checks, the store status mapped to a response code, and long polling.

See docs/design/broker.md#pulling-and-long-polling.
"""

from __future__ import annotations

from typing import Final

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.long_polling import PullRequestHoldService
from rocketflow.broker.message_filter import FilterCompiler, filter_codes, is_tag_type
from rocketflow.broker.processors.common import FAQ_SUFFIX, check_names, error
from rocketflow.filter import FilterSyntaxError
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.bodies import MessageModel, SubscriptionData
from rocketflow.protocol.names import is_readable
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.protocol.tags import SubscriptionParseError, SubscriptionTooLargeError, parse_subscription
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import PullMessageRequestHeader
from rocketflow.store import BrokerRole, GetMessageStatus, MessageFilter, TagsCodeFilter

_COMMIT_OFFSET: Final = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND: Final = int(PullSysFlag.SUSPEND)
_SUBSCRIPTION: Final = int(PullSysFlag.SUBSCRIPTION)

#: Store status -> response code; the two "no queue" statuses depend on the offset.
_STATUS_CODES: Final = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}
_NO_QUEUE: Final = (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)


class PullMessageProcessor:
    """Reads messages for consumers; suspends pulls that find nothing when they allow it (`hold_service`)."""

    def __init__(self, ctx: BrokerContext, filters: FilterCompiler) -> None:
        self.ctx = ctx
        self.filters = filters
        config = ctx.config
        self.hold_service = PullRequestHoldService(
            self.run_without_suspend,
            long_polling_enable=config.long_polling_enable,
            short_polling_time_ms=config.short_polling_time_ms,
            check_interval_ms=config.long_polling_check_interval_ms if config.long_polling_enable
            else config.short_polling_time_ms,
            max_offset=ctx.store.get_max_offset_in_queue,
        )

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.process_request)

    def process_request(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        return self.process(request_ctx, request, allow_suspend=True)

    def run_without_suspend(self, request_ctx: RequestContext, request: RemotingCommand,
                            header: PullMessageRequestHeader | None = None) -> RemotingCommand | None:
        """Re-run a held pull (long polling wake-up or timeout); ``header`` is its request's, parsed and
        checked when it was suspended (every other check runs again)."""
        return self.process(request_ctx, request, allow_suspend=False, header=header)

    def process(self, request_ctx: RequestContext, request: RemotingCommand, *, allow_suspend: bool,
                header: PullMessageRequestHeader | None = None) -> RemotingCommand | None:
        ctx = self.ctx
        config = ctx.config
        if header is None:
            header = PullMessageRequestHeader.from_command(request)
            check_names(group=header.consumer_group)
        if not is_readable(config.broker_permission):
            return error(request, ResponseCode.NO_PERMISSION,
                         f"the broker[{ctx.identity.ip}] pulling message is forbidden")
        group = header.consumer_group
        # an auto-created group is stored only once the pull passes its checks
        group_config = ctx.groups.lookup(group)
        if group_config is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group [{group}] does not exist, {FAQ_SUFFIX}")
        if not group_config.consume_enable:
            return error(request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        sys_flag = header.sys_flag
        has_suspend = bool(sys_flag & _SUSPEND)
        has_commit_offset = bool(sys_flag & _COMMIT_OFFSET)
        has_subscription = bool(sys_flag & _SUBSCRIPTION)
        topic = header.topic
        topic_config = ctx.topics.select(topic)
        if topic_config is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST,
                         f"topic[{topic}] not exist, apply first please! {FAQ_SUFFIX}")
        if not is_readable(topic_config.perm):
            return error(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        queue_id = header.queue_id
        if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                         f"[{topic_config.read_queue_nums}] consumer:[{request_ctx.remote_address}]")
        subscription: SubscriptionData | None
        if has_subscription and len(header.subscription or "") > config.max_subscription_length:
            return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                         f"the subscription is {len(header.subscription or '')} characters long, more than "
                         f"maxSubscriptionLength ({config.max_subscription_length})")
        if has_subscription and not is_tag_type(header.expression_type):
            subscription = SubscriptionData(topic, header.subscription or "", set(), set(), header.sub_version,
                                            header.expression_type or "TAG")
        elif has_subscription:
            try:
                parsed = parse_subscription(header.subscription, max_tags=config.max_tags_per_subscription)
            except SubscriptionTooLargeError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                             f"parse the consumer's subscription failed: {exc} (maxTagsPerSubscription)")
            except SubscriptionParseError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                             f"parse the consumer's subscription failed: {exc}")
            subscription = SubscriptionData(topic, parsed.sub_string, set(parsed.tags_set), set(parsed.code_set),
                                            header.sub_version, header.expression_type or "TAG")
        else:
            group_info = ctx.clients.get_consumer_group(group)
            if group_info is None:
                return error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                             f"the consumer's group info not exist{FAQ_SUFFIX}")
            if not group_config.consume_broadcast_enable and group_info.message_model is MessageModel.BROADCASTING:
                return error(request, ResponseCode.NO_PERMISSION,
                             f"the consumer group[{group}] can not consume by broadcast way")
            subscription = group_info.subscriptions.get(topic)
            if subscription is None:
                return error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                             f"the consumer's subscription not exist{FAQ_SUFFIX}")
            if subscription.sub_version < header.sub_version:
                return error(request, ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        message_filter: MessageFilter | None
        if is_tag_type(subscription.expression_type):
            codes = filter_codes(subscription)
            message_filter = None if codes is None else TagsCodeFilter(codes)
        else:
            if not config.enable_property_filter:
                return error(request, ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter "
                             f"message by {subscription.expression_type} (enablePropertyFilter is off)")
            try:
                message_filter = self.filters.compile(subscription.expression_type, subscription.sub_string)
            except FilterSyntaxError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                             f"parse the consumer's {subscription.expression_type} subscription failed: {exc}")
            codes = None  # a held pull wakes on any new message and re-evaluates
        ctx.groups.add_if_absent(group_config)
        store = ctx.store
        offset = header.queue_offset
        result = store.get_messages(group, topic, queue_id, offset, header.max_msg_nums, message_filter)
        status = result.status
        if status in _NO_QUEUE:
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODES[status]
        role = store.config.broker_role
        # A slave serves pulls whatever slaveReadEnable says (in 4.9.3 the status overwrites the slave's
        # PULL_RETRY_IMMEDIATELY): that is how consumers keep reading while the master is down. The
        # setting only decides whether the answer suggests reading from a slave.
        if config.slave_read_enable:
            suggest = (group_config.which_broker_when_consume_slowly if result.suggest_pulling_from_slave
                       else group_config.broker_id)
        else:
            suggest = 0
        if allow_suspend and has_commit_offset and role is not BrokerRole.SLAVE:
            ctx.offsets.commit_offset(group, topic, queue_id, header.commit_offset)
        if code == ResponseCode.SUCCESS:
            ctx.stats.get_messages(result.message_count, result.buffer_total_size, group)
            body = result.body()
        else:
            body = b""
            if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
                self.hold_service.suspend(request_ctx, request, topic, queue_id, offset, codes,
                                          header.suspend_timeout_millis, header)
                return None
        return request.make_response(code, remark=status.value, ext_fields={
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }, body=body)


__all__ = ["PullMessageProcessor"]
