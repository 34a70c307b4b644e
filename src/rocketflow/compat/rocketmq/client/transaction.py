"""``TransactionMQProducer``: transactional sends, the local transaction and the broker's checks (2.0.x)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from rocketflow import LocalTransactionState, MessageExt, TransactionProducer
from rocketflow import Message as _RfMessage
from rocketflow import Producer as _RfProducer
from rocketflow.client import MQError
from rocketflow.compat.rocketmq.client.message import (
    Message,
    ReceivedMessage,
    SendResult,
    TransactionStatus,
    copy_for_send,
    send_result_of,
)
from rocketflow.compat.rocketmq.client.producer import Producer
from rocketflow.compat.rocketmq.exceptions import RocketMQException

logger = logging.getLogger(__name__)


class _TransactionListener:
    """rocketflow's transaction listener, calling the compat callbacks."""

    def __init__(self, owner: TransactionMQProducer) -> None:
        self._owner = owner

    def execute_local_transaction(self, msg: _RfMessage, arg: Any) -> LocalTransactionState:
        local_execute, user_args = arg
        return _transaction_state(lambda: local_execute(ReceivedMessage(msg), user_args), "local_execute")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        checker = self._owner._checker_callback
        return _transaction_state(lambda: checker(ReceivedMessage(msg)), "checker_callback")


_TRANSACTION_STATES: Final = {
    TransactionStatus.COMMIT: LocalTransactionState.COMMIT_MESSAGE,
    TransactionStatus.ROLLBACK: LocalTransactionState.ROLLBACK_MESSAGE,
    TransactionStatus.UNKNOWN: LocalTransactionState.UNKNOW,
}


def _transaction_state(call: Callable[[], Any], what: str) -> LocalTransactionState:
    """A callback's `TransactionStatus` as rocketflow's state; an exception or another value is UNKNOWN."""
    try:
        status = call()
    except Exception:
        logger.exception("the transaction's %s raised; its state is UNKNOWN (the broker checks back)", what)
        return LocalTransactionState.UNKNOW
    for known, state in _TRANSACTION_STATES.items():
        if status == known:
            return state
    logger.error("the transaction's %s returned %r, not a TransactionStatus; its state is UNKNOWN "
                 "(the broker checks back)", what, status)
    return LocalTransactionState.UNKNOW


class TransactionMQProducer(Producer):
    """A producer of transactional messages (2.0.x).

    ``checker_callback(ReceivedMessage) -> TransactionStatus`` answers the broker's check of a
    transaction left UNKNOWN; ``send_message_in_transaction(msg, local_execute, user_args)`` stores a
    half message, runs ``local_execute(ReceivedMessage, user_args) -> TransactionStatus`` and ends the
    transaction accordingly. ``user_args`` of the constructor is accepted and not used (as there).
    """

    def __init__(self, group_id: str | bytes, checker_callback: Callable[[ReceivedMessage], Any],
                 user_args: Any = None, timeout: int | None = None, compress_level: int | None = None,
                 max_message_size: int | None = None) -> None:
        if not callable(checker_callback):
            raise TypeError(f"checker_callback must be callable, got {checker_callback!r}")
        super().__init__(group_id, False, timeout, compress_level, max_message_size)
        self._checker_callback = checker_callback
        self._user_args = user_args

    def _create(self, settings: dict[str, Any]) -> _RfProducer:
        return TransactionProducer(self._group, listener=_TransactionListener(self), **settings)

    def send_message_in_transaction(self, message: Message, local_execute: Callable[[ReceivedMessage, Any], Any],
                                    user_args: Any = None) -> SendResult:
        """Send ``message`` as a half message, run ``local_execute``, commit or roll back (UNKNOWN: the
        broker asks ``checker_callback`` later). Raises `RocketMQException` when it cannot be sent."""
        producer = self._running(RocketMQException)
        assert isinstance(producer, TransactionProducer)
        if not callable(local_execute):
            raise TypeError(f"local_execute must be callable, got {local_execute!r}")
        try:
            result = producer.send_message_in_transaction(copy_for_send(message), (local_execute, user_args))
        except MQError as exc:
            raise RocketMQException(str(exc)) from exc
        return send_result_of(result)

