"""`TransactionProducer`: RocketMQ's transactional messages (``TransactionMQProducer``).

A message sent with `TransactionProducer.send_message_in_transaction` is stored by the broker as
a *half message* that no consumer sees. The producer then runs the listener's
``execute_local_transaction(msg, arg)`` (the local transaction, e.g. a database write) and tells
the broker the outcome with END_TRANSACTION: COMMIT_MESSAGE makes the message visible,
ROLLBACK_MESSAGE drops it, UNKNOW leaves it pending. For a pending half message (an UNKNOW, or a
producer that died before answering) the broker later asks a producer of the same group with
CHECK_TRANSACTION_STATE; the listener's ``check_local_transaction(msg)`` answers on this producer's
check thread pool, and the answer goes back as another END_TRANSACTION.

So a listener's ``check_local_transaction`` must be able to tell, from the message alone (its
keys, its ``transaction_id`` = UNIQ_KEY, its properties), whether the local transaction happened.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Protocol

from rocketflow.client.api import SendResult, SendStatus
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.producer.producer import Producer
from rocketflow.client.trace import TraceMessageType, TraceRecord, TraceType
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.protocol.message import Message, MessageConst, MessageExt
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

logger = logging.getLogger(__name__)

#: Check requests queued for the check threads before further ones are dropped (``checkRequestHoldMax``).
CHECK_REQUEST_HOLD_MAX: Final = 2000


class LocalTransactionState(Enum):
    """What a local transaction came to (RocketMQ's spelling, UNKNOW included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


_WIRE_VALUE: Final = {
    LocalTransactionState.COMMIT_MESSAGE: int(MessageSysFlag.TRANSACTION_COMMIT),
    LocalTransactionState.ROLLBACK_MESSAGE: int(MessageSysFlag.TRANSACTION_ROLLBACK),
    LocalTransactionState.UNKNOW: int(MessageSysFlag.TRANSACTION_NOT_TYPE),
}


class TransactionListener(Protocol):
    """The two callbacks of a transactional producer (RocketMQ's ``TransactionListener``)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction for ``msg`` (already stored as a half message)."""

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """Tell the broker, which asks because it got no final answer, how ``msg``'s transaction ended."""


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A `SendResult` plus the local transaction's outcome (as sent to the broker)."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


class TransactionProducer(Producer):
    """A producer of transactional messages; see the module docstring.

    ``listener`` has ``execute_local_transaction(msg, arg)`` and ``check_local_transaction(msg)``,
    each returning a `LocalTransactionState`. ``check_thread_pool_size`` threads (RocketMQ's
    ``checkThreadPoolMinSize`` / ``MaxSize``, 1) run the checks, with up to ``check_request_hold_max``
    waiting. Other keyword arguments are those of `Producer`.
    """

    def __init__(self, group: str, namesrv: str | None = None, *, listener: TransactionListener,
                 check_thread_pool_size: int = 1, check_request_hold_max: int = CHECK_REQUEST_HOLD_MAX,
                 client_config: ClientConfig | None = None, **settings: Any) -> None:
        super().__init__(group, namesrv, client_config=client_config, **settings)
        for name in ("execute_local_transaction", "check_local_transaction"):
            if not callable(getattr(listener, name, None)):
                raise MQClientError(f"the transaction listener has no {name}() method")
        for name, value in (("check_thread_pool_size", check_thread_pool_size),
                            ("check_request_hold_max", check_request_hold_max)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MQClientError(f"{name} must be a positive int, got {value!r}")
        self.listener = listener
        self.check_thread_pool_size = check_thread_pool_size
        self.check_request_hold_max = check_request_hold_max
        self._checks: concurrent.futures.ThreadPoolExecutor | None = None
        self._checks_waiting = 0
        self._checks_lock = threading.Lock()

    def start(self) -> None:
        self._checks = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.check_thread_pool_size, thread_name_prefix=f"rocketflow-transaction-check-{self.group}")
        try:
            super().start()
        except BaseException:
            self._checks.shutdown(wait=False)
            self._checks = None
            raise

    def shutdown(self) -> None:
        """Stop taking check requests, finish the running ones, then shut down as `Producer.shutdown`."""
        checks, self._checks = self._checks, None
        if checks is not None:
            checks.shutdown(wait=True, cancel_futures=True)
        super().shutdown()

    # ------------------------------------------------------------------ sending

    def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                    timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, end it on the broker.

        Raises `MQClientError` if the half message cannot be sent (nothing was stored, the local
        transaction did not run). A listener that raises leaves the transaction UNKNOW (the broker
        checks back later); a half message the broker stored but could not flush is rolled back.
        """
        if not isinstance(msg, Message):
            raise MQClientError(f"send_message_in_transaction takes a Message, got {type(msg).__name__}")
        if msg.delay_level > 0:
            raise MQClientError("a transactional message cannot have a delay level")
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        try:
            sent = self.send(msg, timeout=timeout)
        except MQError as exc:
            raise MQClientError(f"cannot send the half message of a transaction: {exc}",
                                getattr(exc, "code", None)) from exc
        state = LocalTransactionState.ROLLBACK_MESSAGE
        failure: BaseException | None = None
        transaction_id = msg.uniq_key
        if sent.send_status is SendStatus.SEND_OK:
            try:
                outcome = self.listener.execute_local_transaction(msg, arg)
                state = outcome if isinstance(outcome, LocalTransactionState) else LocalTransactionState.UNKNOW
                if not isinstance(outcome, LocalTransactionState):
                    logger.warning("execute_local_transaction returned %r, not a LocalTransactionState: UNKNOW",
                                   outcome)
            except Exception as exc:
                logger.exception("producer %s: the local transaction of %s raised; its state is UNKNOW",
                                 self.group, transaction_id)
                state = LocalTransactionState.UNKNOW
                failure = exc
        remark = f"executeLocalTransactionBranch exception: {failure!r}" if failure is not None else None
        broker_name = sent.message_queue.broker_name
        self._trace_end(msg, transaction_id, state,
                        self.instance.find_broker_address_in_publish(broker_name) or broker_name, from_check=False)
        try:
            self._end_transaction(sent, transaction_id, state, remark)
        except MQError as exc:
            # the broker will check back: the outcome is not lost
            logger.warning("producer %s: transaction %s is %s locally but END_TRANSACTION failed: %s", self.group,
                           transaction_id, state.value, exc)
        return TransactionSendResult(
            send_status=sent.send_status, msg_id=sent.msg_id, message_queue=sent.message_queue,
            queue_offset=sent.queue_offset, offset_msg_id=sent.offset_msg_id, region_id=sent.region_id,
            trace_on=sent.trace_on, transaction_id=transaction_id, local_transaction_state=state)

    def _end_transaction(self, sent: SendResult, transaction_id: str | None, state: LocalTransactionState,
                         remark: str | None) -> None:
        instance = self.instance
        addr = instance.find_broker_address_in_publish(sent.message_queue.broker_name)
        if addr is None:
            raise MQClientError(f"no address of broker {sent.message_queue.broker_name!r} to end the transaction")
        _host, _port, commit_log_offset = decode_offset_msg_id(sent.offset_msg_id or sent.msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=sent.queue_offset,
            commit_log_offset=commit_log_offset, commit_or_rollback=_WIRE_VALUE[state], msg_id=sent.msg_id,
            from_transaction_check=False, transaction_id=transaction_id)
        self._send_end(instance.vip_address(addr), header, remark)

    def _send_end(self, addr: str, header: EndTransactionRequestHeader, remark: str | None) -> None:
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields(), oneway=True,
                                          language=self.instance.config.language)
        request.remark = remark
        instance = self.instance
        instance.run(instance.api.invoke_oneway(addr, request), self.settings.send_msg_timeout)

    def _trace_end(self, msg: Message, transaction_id: str | None, state: LocalTransactionState, where: str, *,
                   from_check: bool) -> None:
        """An EndTransaction trace record, when this producer traces (``enable_msg_trace``)."""
        tracer = self._tracer
        if tracer is None:
            return
        tracer.append(TraceRecord(
            TraceType.END_TRANSACTION, timestamp=time.time_ns() // 1_000_000, region_id="DefaultRegion",
            group=self.group, topic=msg.topic, msg_id=msg.uniq_key or "", tags=msg.tags or "", keys=msg.keys or "",
            store_host=where, msg_type=TraceMessageType.TRANS_COMMIT, transaction_id=transaction_id or "",
            transaction_state=state.value, from_transaction_check=from_check))

    # ------------------------------------------------------------------ check-backs (from the broker)

    def check_transaction_state(self, broker_addr: str, header: CheckTransactionStateRequestHeader,
                                msg: MessageExt) -> None:
        """Queue a broker's CHECK_TRANSACTION_STATE for the check threads (called on the client's loop)."""
        checks = self._checks
        if checks is None:
            return
        with self._checks_lock:
            if self._checks_waiting >= self.check_request_hold_max:
                logger.warning("producer %s: %d checks waiting, dropping the check of %s (the broker asks again)",
                               self.group, self._checks_waiting, header.transaction_id)
                return
            self._checks_waiting += 1
        try:
            checks.submit(self._check, broker_addr, header, msg)
        except RuntimeError:  # shut down meanwhile
            with self._checks_lock:
                self._checks_waiting -= 1

    def _check(self, broker_addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        with self._checks_lock:
            self._checks_waiting -= 1
        transaction_id = header.transaction_id or msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        state = LocalTransactionState.UNKNOW
        remark: str | None = None
        try:
            outcome = self.listener.check_local_transaction(msg)
            if isinstance(outcome, LocalTransactionState):
                state = outcome
            else:
                logger.warning("check_local_transaction returned %r, not a LocalTransactionState: UNKNOW", outcome)
        except Exception as exc:
            logger.exception("producer %s: checking transaction %s raised; answering UNKNOW", self.group,
                             transaction_id)
            remark = f"checkLocalTransactionState Exception: {exc!r}"
        self._trace_end(msg, transaction_id, state, broker_addr, from_check=True)
        end = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset, commit_or_rollback=_WIRE_VALUE[state],
            msg_id=msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or header.msg_id or "",
            from_transaction_check=True, transaction_id=transaction_id)
        try:
            self._send_end(broker_addr, end, remark)
        except MQError as exc:
            logger.warning("producer %s: cannot answer the check of transaction %s: %s", self.group,
                           transaction_id, exc)


__all__ = [
    "CHECK_REQUEST_HOLD_MAX",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]
