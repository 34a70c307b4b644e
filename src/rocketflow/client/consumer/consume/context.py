"""What a push consumer's listeners get and return, and what its hooks see.

* `ConsumeConcurrentlyStatus` / `ConsumeConcurrentlyContext`: a concurrent listener's answer and
  its knobs (``ack_index`` acks a prefix of the batch, ``delay_level_when_next_consume`` picks the
  retry delay: 0 lets the broker decide, -1 sends the messages straight to the dead-letter queue).
* `ConsumeOrderlyStatus` / `ConsumeOrderlyContext`: an orderly listener's answer and its knobs
  (``auto_commit``, ``suspend_current_queue_time_millis``).
* `ConsumeReturnType`: how a listener call ended, as hooks and stats see it.
* `ConsumeMessageDirectlyResult`: the CONSUME_MESSAGE_DIRECTLY response body.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Self, TypeAlias

from rocketflow.protocol.bodies import WireBody
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.remoting.errors import BodyDecodeError

#: Java's ``Integer.MAX_VALUE``: the default ``ack_index`` ("everything acked") and RocketMQ's
#: "unlimited" reconsume count of orderly consumers.
JAVA_INT_MAX: Final = 2**31 - 1


class ConsumeConcurrentlyStatus(Enum):
    """A concurrent listener's answer; an exception or ``None`` counts as RECONSUME_LATER."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(Enum):
    """An orderly listener's answer; an exception or ``None`` counts as SUSPEND_CURRENT_QUEUE_A_MOMENT.

    COMMIT and ROLLBACK are deprecated in RocketMQ; with ``auto_commit`` (the default) they act
    like SUCCESS.
    """

    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class ConsumeReturnType(Enum):
    """How a listener call ended (hooks see it as ``props["ConsumeContextType"]``)."""

    SUCCESS = "SUCCESS"
    TIME_OUT = "TIME_OUT"
    EXCEPTION = "EXCEPTION"
    RETURNNULL = "RETURNNULL"
    FAILED = "FAILED"


class CMResult(Enum):
    """Outcome reported by CONSUME_MESSAGE_DIRECTLY (RocketMQ's ``CMResult``)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


#: The hook context property naming the `ConsumeReturnType` (RocketMQ's ``MixAll.CONSUME_CONTEXT_TYPE``).
CONSUME_CONTEXT_TYPE: Final = "ConsumeContextType"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """Passed to a concurrent listener with each batch.

    ``ack_index``: with CONSUME_SUCCESS, messages ``0..ack_index`` count as consumed and the rest
    are retried (default: all consumed). ``delay_level_when_next_consume``: 0 = the broker picks
    ``3 + reconsume_times``, -1 = dead-letter queue at once, > 0 = that delay level.
    """

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = JAVA_INT_MAX


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Passed to an orderly listener with each batch.

    ``auto_commit`` (default True): the offset advances after SUCCESS. Without it the listener
    decides with COMMIT / ROLLBACK. ``suspend_current_queue_time_millis`` (-1 = the consumer's
    setting) is how long the queue pauses after SUSPEND_CURRENT_QUEUE_A_MOMENT.
    """

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


@dataclass(slots=True)
class ConsumeMessageContext:
    """What consume hooks see around one listener call.

    ``status`` is the listener status name (set before `consume_message_after`), ``success``
    whether it counts as consumed, ``props`` free-form (``"ConsumeContextType"`` is the
    `ConsumeReturnType` name).
    """

    consumer_group: str
    message_queue: MessageQueue
    msg_list: list[MessageExt]
    success: bool = False
    status: str = ""
    props: dict[str, str] = field(default_factory=dict)
    #: Anything a hook wants to carry from `consume_message_before` to `consume_message_after`.
    mq_trace_context: Any = None


@dataclass(slots=True)
class ConsumeMessageDirectlyResult(WireBody):
    """CONSUME_MESSAGE_DIRECTLY response body (fastjson shape, keys sorted)."""

    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"autoCommit": self.auto_commit}
        if self.consume_result is not None:
            data["consumeResult"] = self.consume_result.name
        data["order"] = self.order
        if self.remark is not None:
            data["remark"] = self.remark
        data["spentTimeMills"] = self.spent_time_mills
        return data

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise BodyDecodeError(f"{where}: expected an object, got {type(data).__name__}")
        result = data.get("consumeResult")
        try:
            consume_result = CMResult[result] if result is not None else None
        except KeyError:
            raise BodyDecodeError(f"{where}.consumeResult: unknown result {result!r}") from None
        spent = data.get("spentTimeMills", 0)
        if isinstance(spent, bool) or not isinstance(spent, int):
            raise BodyDecodeError(f"{where}.spentTimeMills: expected an integer, got {spent!r}")
        remark = data.get("remark")
        return cls(order=bool(data.get("order", False)), auto_commit=bool(data.get("autoCommit", True)),
                   consume_result=consume_result, remark=None if remark is None else str(remark),
                   spent_time_mills=spent)


#: ``fn(msgs, context) -> ConsumeConcurrentlyStatus`` (plain or ``async def``).
ConcurrentListener: TypeAlias = Callable[
    [list[MessageExt], ConsumeConcurrentlyContext],
    "ConsumeConcurrentlyStatus | Awaitable[ConsumeConcurrentlyStatus | None] | None",
]
#: ``fn(msgs, context) -> ConsumeOrderlyStatus`` (plain or ``async def``).
OrderlyListener: TypeAlias = Callable[
    [list[MessageExt], ConsumeOrderlyContext],
    "ConsumeOrderlyStatus | Awaitable[ConsumeOrderlyStatus | None] | None",
]


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine (an ``async def`` function, or an object whose
    ``__call__`` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable() cannot tell sync from async
    return call is not None and inspect.iscoroutinefunction(call)


__all__ = [
    "CONSUME_CONTEXT_TYPE",
    "JAVA_INT_MAX",
    "CMResult",
    "ConcurrentListener",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeMessageContext",
    "ConsumeMessageDirectlyResult",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeReturnType",
    "OrderlyListener",
    "is_async_callable",
]
