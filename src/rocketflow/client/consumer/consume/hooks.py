"""Consume hooks: code run before and after every listener call (RocketMQ's ``ConsumeMessageHook``).

A hook is any object with ``consume_message_before(context)`` and ``consume_message_after(context)``
(`ConsumeMessageHook` gives no-op defaults and a name). Hooks run on the thread (or, for
``async def`` listeners, the event loop) that calls the listener, so they must be quick. A hook
that raises is logged and skipped; it never changes the consume result.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Final

from rocketflow.client.consumer.consume.context import ConsumeMessageContext
from rocketflow.client.errors import MQClientError
from rocketflow.client.trace import TraceDispatcher, TraceRecord, TraceType

logger = logging.getLogger(__name__)


class ConsumeMessageHook:
    """Base class of consume hooks; override what you need."""

    def hook_name(self) -> str:
        return type(self).__name__

    def consume_message_before(self, context: ConsumeMessageContext) -> None:
        """Called with the batch before the listener runs (``context.status`` is still empty)."""

    def consume_message_after(self, context: ConsumeMessageContext) -> None:
        """Called after the listener with ``status``, ``success`` and ``props["ConsumeContextType"]`` set."""


class ConsumeHooks:
    """The registered hooks of one consumer (thread-safe registration, exceptions contained)."""

    def __init__(self) -> None:
        self._hooks: tuple[object, ...] = ()
        self._lock = threading.Lock()

    def register(self, hook: object) -> None:
        """Add a hook; raises `MQClientError` if it lacks either method."""
        for method in ("consume_message_before", "consume_message_after"):
            if not callable(getattr(hook, method, None)):
                raise MQClientError(f"a consume hook needs a callable {method}(context); {hook!r} has none")
        with self._lock:
            self._hooks = (*self._hooks, hook)

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def before(self, context: ConsumeMessageContext) -> None:
        for hook in self._hooks:
            try:
                hook.consume_message_before(context)  # type: ignore[attr-defined]
            except Exception:
                logger.exception("consume hook %s failed before consuming", _hook_name(hook))

    def after(self, context: ConsumeMessageContext) -> None:
        for hook in self._hooks:
            try:
                hook.consume_message_after(context)  # type: ignore[attr-defined]
            except Exception:
                logger.exception("consume hook %s failed after consuming", _hook_name(hook))


def _hook_name(hook: object) -> str:
    name = getattr(hook, "hook_name", None)
    if callable(name):
        try:
            return str(name())
        except Exception:
            pass
    return type(hook).__name__


class ConsumeTraceHook(ConsumeMessageHook):
    """Records SubBefore / SubAfter traces around every listener call of a consumer."""

    def __init__(self, dispatcher: TraceDispatcher, group: str, region_id: str = "DefaultRegion") -> None:
        self.dispatcher = dispatcher
        self.group = group
        self.region_id = region_id

    def hook_name(self) -> str:
        return "ConsumeTraceHook"

    def consume_message_before(self, context: ConsumeMessageContext) -> None:
        messages = [msg for msg in context.msg_list if msg.topic != self.dispatcher.trace_topic]
        if not messages:
            return
        now = time.time_ns() // 1_000_000
        request_id = uuid.uuid4().hex
        context.mq_trace_context = (request_id, now, messages)
        for msg in messages:
            self.dispatcher.append(TraceRecord(
                TraceType.SUB_BEFORE, timestamp=now, region_id=msg.properties.get("MSG_REGION", self.region_id),
                group=self.group, request_id=request_id, msg_id=msg.uniq_key or msg.msg_id,
                retry_times=msg.reconsume_times, keys=msg.keys or ""))

    def consume_message_after(self, context: ConsumeMessageContext) -> None:
        carried = context.mq_trace_context
        if not isinstance(carried, tuple) or len(carried) != 3:
            return
        request_id, started, messages = carried
        now = time.time_ns() // 1_000_000
        cost = (now - started) // max(len(messages), 1)
        code = _CONTEXT_CODES.get(context.props.get("ConsumeContextType", ""), 0)
        for msg in messages:
            self.dispatcher.append(TraceRecord(
                TraceType.SUB_AFTER, timestamp=now, request_id=request_id, msg_id=msg.uniq_key or msg.msg_id,
                cost_ms=cost, success=context.success, keys=msg.keys or "", context_code=code))


#: ConsumeReturnType names -> their ordinals (the SubAfter context code).
_CONTEXT_CODES: Final = {"SUCCESS": 0, "TIME_OUT": 1, "EXCEPTION": 2, "RETURNNULL": 3, "FAILED": 4}


__all__ = ["ConsumeHooks", "ConsumeMessageHook", "ConsumeTraceHook"]
