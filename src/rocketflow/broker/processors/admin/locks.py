"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the broker-side queue locks of orderly consumers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import LockBatchRequestBody, LockBatchResponseBody, UnlockBatchRequestBody
from rocketflow.protocol.bodies.base import load_json
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import BodyDecodeError

_LockBody = TypeVar("_LockBody", LockBatchRequestBody, UnlockBatchRequestBody)


class LockAdmin:
    """Locks and unlocks batches of queues for a (group, client id) in the `RebalanceLockManager`."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
        }

    def lock_batch_mq(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        body = decode_lock_body(LockBatchRequestBody, request.body, ctx.config.max_queues_per_request)
        locked = ctx.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS, body=LockBatchResponseBody(locked).encode())

    def unlock_batch_mq(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        body = decode_lock_body(UnlockBatchRequestBody, request.body, ctx.config.max_queues_per_request)
        ctx.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS)


def decode_lock_body(cls: type[_LockBody], data: bytes, max_queues: int) -> _LockBody:
    """A (UN)LOCK_BATCH_MQ body, strictly: a legal group, a client id, at most ``max_queues`` queues with a
    legal topic, a broker name and an integer queue id >= 0 (`BodyDecodeError` naming the bad field otherwise)."""
    name = cls.__name__
    parsed = load_json(data, name, "body")
    if not isinstance(parsed, dict):
        raise BodyDecodeError(f"{name}: expected an object, got {type(parsed).__name__}")
    _check_name(parsed.get("consumerGroup"), f"{name}.consumerGroup", validate_group)
    client_id = parsed.get("clientId")
    if not isinstance(client_id, str) or not client_id.strip():
        raise BodyDecodeError(f"{name}.clientId: expected a non-empty string, got {client_id!r}")
    queues = parsed.get("mqSet")
    if queues is not None and not isinstance(queues, list):
        raise BodyDecodeError(f"{name}.mqSet: expected an array, got {queues!r}")
    if queues is not None and len(queues) > max_queues:
        raise BodyDecodeError(f"{name}.mqSet: {len(queues)} queues, more than maxQueuesPerRequest ({max_queues})")
    for index, queue in enumerate(queues or ()):
        where = f"{name}.mqSet[{index}]"
        if not isinstance(queue, dict):
            raise BodyDecodeError(f"{where}: expected an object, got {queue!r}")
        _check_name(queue.get("topic"), f"{where}.topic", validate_topic)
        broker_name = queue.get("brokerName")
        if not isinstance(broker_name, str) or not broker_name:
            raise BodyDecodeError(f"{where}.brokerName: expected a non-empty string, got {broker_name!r}")
        queue_id = queue.get("queueId")
        if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
            raise BodyDecodeError(f"{where}.queueId: expected an integer >= 0, got {queue_id!r}")
    return cls.from_json_dict(parsed, name)


def _check_name(value: object, where: str, validate: Callable[[str], object]) -> None:
    """`BodyDecodeError` at ``where`` unless ``value`` is a string ``validate`` accepts (a group or topic name)."""
    if not isinstance(value, str):
        raise BodyDecodeError(f"{where}: expected a string, got {value!r}")
    try:
        validate(value)
    except InvalidNameError as exc:
        raise BodyDecodeError(f"{where}: {exc}") from None


__all__ = ["LockAdmin", "decode_lock_body"]
