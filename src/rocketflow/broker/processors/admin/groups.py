"""Subscription groups: create or update, list, delete (with their offsets if asked)."""

from __future__ import annotations

from collections.abc import Awaitable

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler, answer_when_written, error
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import SubscriptionGroupConfig
from rocketflow.protocol.names import InvalidNameError, validate_group
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import DeleteSubscriptionGroupRequestHeader


class GroupAdmin:
    """The subscription group table's admin requests; a change is answered once its journal line is on disk."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
        }

    def update_and_create_subscription_group(self, request_ctx: RequestContext,
                                             request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        config = SubscriptionGroupConfig.decode(request.body)
        try:
            validate_group(config.group_name)
        except InvalidNameError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if config.retry_queue_nums < 0 or config.retry_max_times < -1:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         "retryQueueNums must be >= 0 and retryMaxTimes >= -1")
        groups = self.ctx.groups
        groups.update(config)
        return answer_when_written(groups.written(), request.make_response(ResponseCode.SUCCESS))

    def get_all_subscription_group(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=self.ctx.groups.snapshot().encode())

    def delete_subscription_group(self, request_ctx: RequestContext,
                                  request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = DeleteSubscriptionGroupRequestHeader.from_command(request)
        groups = self.ctx.groups
        groups.delete(header.group_name)
        if header.remove_offset:
            self.ctx.offsets.remove_group(header.group_name)
        return answer_when_written(groups.written(), request.make_response(ResponseCode.SUCCESS))


__all__ = ["GroupAdmin"]
