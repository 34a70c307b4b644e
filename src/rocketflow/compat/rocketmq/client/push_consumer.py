"""``PushConsumer``: a callback per message, over rocketflow's push consumer (2.0.x and 0.4.x contracts)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Final

from rocketflow import ConsumeFromWhere, MessageExt
from rocketflow import MessageModel as _RfMessageModel
from rocketflow import PushConsumer as _RfPushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MQError,
)
from rocketflow.compat.rocketmq.client._common import ClientSettings, ClientState, Connection, as_int, as_text
from rocketflow.compat.rocketmq.client.message import ConsumeStatus, MessageModel, ReceivedMessage, RecvMessage
from rocketflow.compat.rocketmq.exceptions import ConsumerException, NullPointerException, PushConsumerStartFailed

logger = logging.getLogger(__name__)

_MESSAGE_MODEL: Final = {
    MessageModel.BROADCASTING: _RfMessageModel.BROADCASTING,
    MessageModel.CLUSTERING: _RfMessageModel.CLUSTERING,
}



class PushConsumer(ClientSettings):
    """A push consumer: ``PushConsumer(group_id)``, the setters, ``subscribe(topic, callback)``, ``start()``.

    ``callback(ReceivedMessage)`` is called once per message, on one of ``set_thread_count`` threads;
    it returns ``ConsumeStatus.CONSUME_SUCCESS`` or ``ConsumeStatus.RECONSUME_LATER`` (anything else,
    or an exception, is logged and counts as RECONSUME_LATER: the broker redelivers the message later).
    With 0.4.x's ``set_namesrv_addr`` / ``set_namesrv_domain`` the return value is ignored instead.
    Each topic's messages go to the callback of its own ``subscribe``.
    """

    def __init__(self, group_id: str | bytes, orderly: bool = False,
                 message_model: MessageModel | int = MessageModel.CLUSTERING) -> None:
        if group_id is None:
            raise NullPointerException("Returned null pointer when create PushConsumer")
        self._group = as_text(group_id, "group_id")
        self._orderly = bool(orderly)
        self._message_model: MessageModel | int = message_model
        self._connection = Connection()
        self._thread_count = os.cpu_count() or 1
        self._batch_max_size = 1
        self._subscriptions: dict[str, tuple[str, Callable[[ReceivedMessage], Any]]] = {}
        self._last_callback: Callable[[ReceivedMessage], Any] | None = None
        #: 0.4.x's callback contract (return value ignored), chosen by the 0.4.x name server setters
        self._legacy = False
        self._state = ClientState.CREATED
        self._lock = threading.Lock()
        self._consumer: _RfPushConsumer | None = None
        self.set_message_model(message_model)

    # ------------------------------------------------------------------ settings

    def set_message_model(self, model: MessageModel | int) -> None:
        """CLUSTERING (the group shares the messages) or BROADCASTING (every consumer gets all)."""
        self._message_model = model

    def set_group(self, group_id: str | bytes) -> None:
        self._group = as_text(group_id, "group_id")

    def set_namesrv_addr(self, addr: str | bytes) -> None:
        """0.4.x spelling of `set_name_server_address`; also selects 0.4.x's callback contract."""
        self._legacy = True
        self.set_name_server_address(addr)

    def set_namesrv_domain(self, domain: str | bytes) -> None:
        """0.4.x spelling of `set_name_server_domain`; also selects 0.4.x's callback contract."""
        self._legacy = True
        self.set_name_server_domain(domain)

    def set_thread_count(self, thread_count: int) -> None:
        """Consume threads (default: one per CPU, as the C++ client); applied at ``start()``."""
        count = as_int(thread_count, "thread_count")
        if count == 0:
            raise NullPointerException("thread_count must not be 0")
        if count < 0:
            logger.error("set_thread_count(%d) ignored: the count must be positive", count)
            return
        self._thread_count = count

    def set_message_batch_max_size(self, max_size: int) -> None:
        """Messages per consume task (default 1); the callback still gets them one at a time, and one
        that is not consumed makes the rest of its batch come again too (as in the C++ client)."""
        size = as_int(max_size, "max_size")
        if size == 0:
            raise NullPointerException("max_size must not be 0")
        if size < 0:
            return
        self._batch_max_size = size

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, topic: str | bytes, callback: Callable[[ReceivedMessage], Any],
                  expression: str | bytes = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"TagA || TagB"``)."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        name = as_text(topic, "topic")
        sub_expression = as_text(expression, "expression") or "*"
        self._subscriptions[name] = (sub_expression, callback)
        self._last_callback = callback
        consumer = self._consumer
        if consumer is not None:
            try:
                consumer.subscribe(name, sub_expression)
            except MQError as exc:
                raise ConsumerException(str(exc)) from exc

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start consuming; raises `PushConsumerStartFailed` (e.g. without a subscription). A second
        call, or one after ``shutdown()``, does nothing."""
        with self._lock:
            if self._state is not ClientState.CREATED:
                return
            if not self._subscriptions:
                raise PushConsumerStartFailed("messageListener is null: call subscribe(topic, callback) "
                                              "before start()")
            try:
                consumer = self._create()
                for topic, (expression, _) in self._subscriptions.items():
                    consumer.subscribe(topic, expression)
                if self._orderly:
                    consumer.register_orderly_listener(self._consume_orderly)
                else:
                    consumer.register_concurrent_listener(self._consume_concurrently)
                consumer.start()
            except (MQError, ValueError) as exc:
                raise PushConsumerStartFailed(str(exc)) from exc
            self._consumer = consumer
            self._state = ClientState.RUNNING

    def _create(self) -> _RfPushConsumer:
        try:
            model = _MESSAGE_MODEL[MessageModel(self._message_model)]
        except ValueError:
            raise ValueError(f"messageModel {self._message_model!r} is not valid") from None
        threads = min(self._thread_count, 1000)
        return _RfPushConsumer(
            self._group, message_model=model, consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            consume_thread_min=threads, consume_thread_max=threads,
            consume_message_batch_max_size=min(self._batch_max_size, 1024), **self._connection.client_settings())

    def shutdown(self) -> None:
        """Stop consuming: running callbacks finish and the offsets are committed (idempotent; as in the
        C++ client, one never started may still start afterwards). Not from a callback."""
        with self._lock:
            if self._state is not ClientState.RUNNING:
                return
            self._state = ClientState.SHUT_DOWN
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.shutdown()
            except MQError as exc:
                raise ConsumerException(str(exc)) from exc

    # ------------------------------------------------------------------ consumption

    def _consume_one(self, msg: MessageExt) -> bool:
        entry = self._subscriptions.get(msg.topic)
        callback = entry[1] if entry is not None else self._last_callback
        if callback is None:
            return False
        wrapped = RecvMessage(msg) if self._legacy else ReceivedMessage(msg)
        try:
            status = callback(wrapped)
        except Exception:
            logger.exception("the consume callback raised on message %s of %s; it will be consumed again later",
                             wrapped.id, msg.topic)
            return False
        if self._legacy or status == ConsumeStatus.CONSUME_SUCCESS:
            return True
        if status != ConsumeStatus.RECONSUME_LATER:
            logger.error("the consume callback returned %r for message %s of %s, not a ConsumeStatus; it will be "
                         "consumed again later (return ConsumeStatus.CONSUME_SUCCESS)", status, wrapped.id, msg.topic)
        return False

    def _consume_concurrently(self, msgs: list[MessageExt],
                              context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            if not self._consume_one(msg):
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _consume_orderly(self, msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        for msg in msgs:
            if not self._consume_one(msg):
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

