"""Transactional messages end to end: `TransactionProducer` against a dev cluster's broker.

Half messages, commit and rollback, check-backs (UNKNOW, a raising listener, a producer that went
away, a broker restart), the check limit, and END_TRANSACTION's validation.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_helpers import pull_messages

from rocketflow import LocalTransactionState, Message, TransactionProducer
from rocketflow.client import MQClientError, Producer, SendStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.names import DEFAULT_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketflow.protocol.sysflag import MessageSysFlag, transaction_value
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import EndTransactionRequestHeader
from testkit import wait_until

#: fast check-backs for the tests (RocketMQ: every 60 s, after 6 s, at most 15 times)
FAST_CHECKS = {"transaction_check_interval_ms": 100, "transaction_timeout_ms": 1000, "transaction_check_max": 3}


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings=FAST_CHECKS)
    try:
        yield cluster
    finally:
        cluster.close()


class Listener:
    """Answers with fixed states and records what it was asked."""

    def __init__(self, execute: LocalTransactionState | Exception,
                 check: LocalTransactionState | Exception = LocalTransactionState.UNKNOW) -> None:
        self.execute = execute
        self.check = check
        self.executed: list[tuple[Message, Any]] = []
        self.checked: list[MessageExt] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        self.executed.append((msg, arg))
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append(msg)
        if isinstance(self.check, Exception):
            raise self.check
        return self.check


def new_topic() -> str:
    return f"Tx_{uuid.uuid4().hex[:10]}"


def new_group() -> str:
    return f"txg_{uuid.uuid4().hex[:8]}"


def visible(producer: Producer, topic: str, queue_id: int) -> list[MessageExt]:
    return pull_messages(producer.instance, MessageQueue(topic, "broker-a", queue_id))


def learn_brokers(producer: Producer) -> None:
    """Route the default topic: a producer that never sent learns the brokers (and heartbeats them)."""
    instance = producer.instance
    assert instance.run(instance.update_topic_route(DEFAULT_TOPIC))


def queue_size(cluster: DevCluster, topic: str) -> int:
    assert cluster.broker is not None
    return cluster.broker.store.get_max_offset_in_queue(topic, 0)


def test_commit_makes_the_message_visible_with_the_transaction_flags(cluster: DevCluster) -> None:
    topic = new_topic()
    listener = Listener(LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
        ops_before = queue_size(cluster, TRANS_OP_HALF_TOPIC)
        msg = Message(topic, b"order-1 paid", tags="pay", keys="order-1", properties={"color": "blue"})
        result = producer.send_message_in_transaction(msg, arg={"order": 1})
        assert result.send_status is SendStatus.SEND_OK
        assert result.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert result.transaction_id == msg.uniq_key == result.msg_id
        assert listener.executed == [(msg, {"order": 1})]
        assert result.message_queue.topic == topic  # the queue chosen for it, not the half topic

        def committed() -> list[MessageExt]:
            return visible(producer, topic, result.message_queue.queue_id)

        wait_until(lambda: len(committed()) == 1)
        stored = committed()[0]
        assert (stored.body, stored.tags, stored.keys, stored.properties["color"]) == (
            b"order-1 paid", "pay", "order-1", "blue")
        assert stored.uniq_key == result.msg_id
        assert transaction_value(stored.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT
        assert MessageConst.REAL_TOPIC not in stored.properties
        assert stored.properties[MessageConst.PRODUCER_GROUP] == producer.group
        assert queue_size(cluster, TRANS_OP_HALF_TOPIC) == ops_before + 1
        # the half message itself stays in the half topic, out of every consumer's sight
        half = pull_messages(producer.instance, MessageQueue(TRANS_HALF_TOPIC, "broker-a", 0), result.queue_offset)
        assert half[0].uniq_key == result.msg_id
        assert half[0].msg_id == result.offset_msg_id
        assert stored.prepared_transaction_offset == half[0].commit_log_offset
        assert half[0].properties[MessageConst.REAL_TOPIC] == topic
        assert transaction_value(half[0].sys_flag) == MessageSysFlag.TRANSACTION_NOT_TYPE


def test_rollback_stores_nothing_visible(cluster: DevCluster) -> None:
    topic = new_topic()
    listener = Listener(LocalTransactionState.ROLLBACK_MESSAGE, check=LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
        ops_before = queue_size(cluster, TRANS_OP_HALF_TOPIC)
        result = producer.send_message_in_transaction(Message(topic, b"never"))
        assert result.local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
        wait_until(lambda: queue_size(cluster, TRANS_OP_HALF_TOPIC) == ops_before + 1)
        # well past the check timeout: the check pass skips it, the check listener is never asked
        sentinel = producer.send_message_in_transaction(Message(topic, b"sentinel"))
        assert sentinel.local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
        threading.Event().wait(1.6)
        assert listener.checked == []
        assert all(not visible(producer, topic, queue_id) for queue_id in range(4))


def test_unknown_outcome_is_checked_back_and_committed_once(cluster: DevCluster) -> None:
    topic = new_topic()
    listener = Listener(LocalTransactionState.UNKNOW, check=LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
        msg = Message(topic, b"late", keys="k-late")
        result = producer.send_message_in_transaction(msg)
        assert result.local_transaction_state is LocalTransactionState.UNKNOW
        queue_id = result.message_queue.queue_id
        assert visible(producer, topic, queue_id) == []
        wait_until(lambda: len(visible(producer, topic, queue_id)) == 1)
        checked = listener.checked[0]
        assert checked.topic == topic and checked.queue_id == queue_id  # the real destination, not the half topic
        assert (checked.body, checked.keys, checked.uniq_key) == (b"late", "k-late", result.msg_id)
        threading.Event().wait(1.0)  # more check passes: it stays committed exactly once
        assert [m.uniq_key for m in visible(producer, topic, queue_id)] == [result.msg_id]


def test_a_raising_local_transaction_is_unknown_then_rolled_back_by_the_check(cluster: DevCluster) -> None:
    topic = new_topic()
    listener = Listener(RuntimeError("database down"), check=LocalTransactionState.ROLLBACK_MESSAGE)
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
        result = producer.send_message_in_transaction(Message(topic, b"x"))
        assert result.local_transaction_state is LocalTransactionState.UNKNOW
        wait_until(lambda: len(listener.checked) >= 1)
        threading.Event().wait(0.5)
        assert visible(producer, topic, result.message_queue.queue_id) == []


def test_a_checker_that_never_knows_gets_the_message_moved_after_the_check_limit(cluster: DevCluster) -> None:
    topic = new_topic()
    listener = Listener(LocalTransactionState.UNKNOW, check=LocalTransactionState.UNKNOW)
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
        parked_before = queue_size(cluster, TRANS_CHECK_MAX_TIME_TOPIC)
        result = producer.send_message_in_transaction(Message(topic, b"limbo"))
        wait_until(lambda: queue_size(cluster, TRANS_CHECK_MAX_TIME_TOPIC) == parked_before + 1)
        threading.Event().wait(0.5)
        assert len([m for m in listener.checked if m.uniq_key == result.msg_id]) == FAST_CHECKS["transaction_check_max"]
        assert visible(producer, topic, result.message_queue.queue_id) == []
        parked = pull_messages(producer.instance, MessageQueue(TRANS_CHECK_MAX_TIME_TOPIC, "broker-a", 0),
                               parked_before)
        assert parked[0].uniq_key == result.msg_id
        assert parked[0].properties[MessageConst.REAL_TOPIC] == topic


def test_another_producer_of_the_group_answers_for_one_that_went_away(cluster: DevCluster) -> None:
    topic = new_topic()
    group = new_group()
    gone = Listener(LocalTransactionState.UNKNOW)
    with TransactionProducer(group, namesrv=cluster.namesrv_addr, listener=gone,
                             instance_name="tx-gone") as producer:
        result = producer.send_message_in_transaction(Message(topic, b"survivor"))
    heir = Listener(LocalTransactionState.ROLLBACK_MESSAGE, check=LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(group, namesrv=cluster.namesrv_addr, listener=heir,
                             instance_name="tx-heir") as producer:
        learn_brokers(producer)
        wait_until(lambda: len(visible(producer, topic, result.message_queue.queue_id)) == 1)
        assert heir.checked[0].uniq_key == result.msg_id
    assert gone.checked == []


def test_pending_half_messages_survive_a_broker_restart(tmp_path: Path) -> None:
    slow = dict(FAST_CHECKS, transaction_check_interval_ms=60_000)
    first = DevCluster.start_in_thread(store_dir=tmp_path, broker_settings=slow)
    try:
        group = new_group()
        with TransactionProducer(group, namesrv=first.namesrv_addr,
                                 listener=Listener(LocalTransactionState.UNKNOW)) as producer:
            result = producer.send_message_in_transaction(Message("TxRestart", b"pending"))
    finally:
        first.close()
    second = DevCluster.start_in_thread(store_dir=tmp_path, broker_settings=FAST_CHECKS)
    try:
        listener = Listener(LocalTransactionState.UNKNOW, check=LocalTransactionState.COMMIT_MESSAGE)
        with TransactionProducer(group, namesrv=second.namesrv_addr, listener=listener) as producer:
            learn_brokers(producer)
            wait_until(lambda: len(visible(producer, "TxRestart", result.message_queue.queue_id)) == 1)
            assert visible(producer, "TxRestart", result.message_queue.queue_id)[0].body == b"pending"
    finally:
        second.close()


def test_delay_levels_and_non_messages_are_refused(cluster: DevCluster) -> None:
    with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr,
                             listener=Listener(LocalTransactionState.COMMIT_MESSAGE)) as producer:
        delayed = Message(new_topic(), b"x")
        delayed.delay_level = 3
        with pytest.raises(MQClientError, match="delay level"):
            producer.send_message_in_transaction(delayed)
        with pytest.raises(MQClientError, match="takes a Message"):
            producer.send_message_in_transaction(b"x")  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="execute_local_transaction"):
        TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=object())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- END_TRANSACTION itself


def end_transaction(producer: Producer, addr: str, **fields: Any) -> RemotingCommand:
    header = EndTransactionRequestHeader(**fields)
    request = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
    instance = producer.instance
    return instance.run(instance.api.invoke(addr, request, 5.0))


def test_end_transaction_is_validated_and_idempotent(cluster: DevCluster) -> None:
    topic = new_topic()
    group = new_group()
    with TransactionProducer(group, namesrv=cluster.namesrv_addr,
                             listener=Listener(LocalTransactionState.UNKNOW)) as producer:
        result = producer.send_message_in_transaction(Message(topic, b"by hand"))
        half = pull_messages(producer.instance, MessageQueue(TRANS_HALF_TOPIC, "broker-a", 0), result.queue_offset)[0]
        addr = cluster.broker_addr
        good = {"producer_group": group, "tran_state_table_offset": result.queue_offset,
                "commit_log_offset": half.commit_log_offset, "commit_or_rollback": 8, "msg_id": result.msg_id}
        cases = [
            (dict(good, producer_group="someone_else"), "The producer group wrong"),
            (dict(good, tran_state_table_offset=result.queue_offset + 1000), "The transaction state table offset"),
            (dict(good, commit_log_offset=half.commit_log_offset + 1), "Find prepared transaction message failed"),
            (dict(good, commit_log_offset=10**12), "Find prepared transaction message failed"),
            (dict(good, commit_or_rollback=5), "commitOrRollback must be"),
            (dict(good, producer_group="bad group!"), "producerGroup"),
        ]
        for fields, remark in cases:
            response = end_transaction(producer, addr, **fields)
            assert response.code == ResponseCode.SYSTEM_ERROR, fields
            assert remark in (response.remark or ""), (fields, response.remark)
        # a normal message's offset is not a half message
        plain = producer.send(Message(topic, b"plain"))
        plain_offset = pull_messages(producer.instance, plain.message_queue, plain.queue_offset)[0].commit_log_offset
        response = end_transaction(producer, addr, **dict(good, commit_log_offset=plain_offset))
        assert response.code == ResponseCode.SYSTEM_ERROR
        queue_id = result.message_queue.queue_id
        before = len(visible(producer, topic, queue_id))
        for _ in range(3):  # repeated commits (and a late rollback) store it once
            assert end_transaction(producer, addr, **good).code == ResponseCode.SUCCESS
        assert end_transaction(producer, addr, **dict(good, commit_or_rollback=12)).code == ResponseCode.SUCCESS
        assert len(visible(producer, topic, queue_id)) == before + 1
        # a header without its required fields
        bare = RemotingCommand.request(RequestCode.END_TRANSACTION, {"producerGroup": group})
        response = producer.instance.run(producer.instance.api.invoke(addr, bare, 5.0))
        assert response.code == ResponseCode.SYSTEM_ERROR and "header" in (response.remark or "")


def test_a_broker_that_rejects_transactions_says_so() -> None:
    rejecting = DevCluster.start_in_thread(broker_settings={"reject_transaction_message": True})
    try:
        with TransactionProducer(new_group(), namesrv=rejecting.namesrv_addr,
                                 listener=Listener(LocalTransactionState.COMMIT_MESSAGE)) as producer, \
                pytest.raises(MQClientError, match="transaction message is forbidden"):
            producer.send_message_in_transaction(Message(new_topic(), b"x"))
    finally:
        rejecting.close()


def test_a_backlog_is_worked_off_in_short_passes_checking_only_the_unresolved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import rocketflow.broker.transaction as transaction_module

    monkeypatch.setattr(transaction_module, "MAX_OPS_PER_PASS", 7)
    monkeypatch.setattr(transaction_module, "MAX_HALF_PER_PASS", 5)
    cluster = DevCluster.start_in_thread(broker_settings={"transaction_check_interval_ms": 3_600_000,
                                                          "transaction_timeout_ms": 1})
    try:
        assert cluster.broker is not None and cluster._loop is not None
        service = cluster.broker.transactions
        topic = new_topic()

        class Switch(Listener):
            def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
                return LocalTransactionState.UNKNOW if arg < 30 else LocalTransactionState.COMMIT_MESSAGE

        listener = Switch(LocalTransactionState.UNKNOW, check=LocalTransactionState.COMMIT_MESSAGE)
        with TransactionProducer(new_group(), namesrv=cluster.namesrv_addr, listener=listener) as producer:
            results = [producer.send_message_in_transaction(Message(topic, f"b{n}".encode()), arg=n)
                       for n in range(60)]
            wait_until(lambda: queue_size(cluster, TRANS_OP_HALF_TOPIC) == 30)

            def run_passes() -> list[Any]:
                async def passes() -> list[Any]:
                    reports = []
                    round_start = int(time.time() * 1000) + 1
                    await asyncio.sleep(0.01)
                    while True:
                        report = service.check(round_start_ms=round_start)
                        reports.append(report)
                        if not report.more:
                            return reports

                return asyncio.run_coroutine_threadsafe(passes(), cluster._loop).result(30)

            reports = run_passes()
            assert len(reports) > 5  # the limits cut the work into many passes
            assert sum(report.checked for report in reports) == 30
            wait_until(lambda: len({m.uniq_key for m in listener.checked}) == 30)
            assert {m.uniq_key for m in listener.checked} == {r.msg_id for r in results[:30]}

            def all_visible() -> list[MessageExt]:
                return [m for queue_id in range(4) for m in visible(producer, topic, queue_id)]

            wait_until(lambda: len(all_visible()) == 60)
            checks_before = len(listener.checked)
            reports = run_passes()  # the put-back copies are resolved now: nothing more to ask
            assert sum(report.checked for report in reports) == 0
            assert len(listener.checked) == checks_before
            assert sorted(m.body for m in all_visible()) == sorted(f"b{n}".encode() for n in range(60))
    finally:
        cluster.close()
