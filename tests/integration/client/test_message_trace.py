"""Message trace end to end: traced producer and push consumer, read back with the admin API and CLI."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer
from rocketflow.cli.main import cli
from rocketflow.client.admin import Admin
from rocketflow.client.consumer.consume.context import ConsumeConcurrentlyContext
from rocketflow.client.trace import TraceType
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.names import TRACE_TOPIC
from testkit import create_topic, wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"trace_topic_enable": True})
    try:
        yield cluster
    finally:
        cluster.close()


def test_sends_and_consumes_leave_a_trace(cluster: DevCluster) -> None:
    topic = f"Traced_{uuid.uuid4().hex[:8]}"
    group = f"traced_cg_{uuid.uuid4().hex[:6]}"
    failed_once: set[str] = set()
    done: list[str] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            msg = msgs[0]
            if msg.keys == "fails-once" and msg.uniq_key not in failed_once:
                failed_once.add(msg.uniq_key or "")
                context.delay_level_when_next_consume = 1
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            done.append(msg.uniq_key or "")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Producer("traced_pg", namesrv=cluster.namesrv_addr, enable_msg_trace=True) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 2)
        plain = producer.send(Message(topic, b"plain", tags="a", keys="k-plain"))
        flaky = producer.send(Message(topic, b"flaky", tags="b", keys="fails-once"))
        consumer = PushConsumer(group, namesrv=cluster.namesrv_addr, enable_msg_trace=True,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(topic, "*")
        consumer.register_concurrent_listener(listener)
        with consumer:
            wait_until(lambda: sorted(done) == sorted([plain.msg_id, flaky.msg_id]), timeout=20)
    # shut down: both flushed their traces
    with Admin(cluster.namesrv_addr) as admin:
        plain_trace = admin.message_trace(plain.msg_id)
        assert [record.type for record in plain_trace] == [TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER]
        pub, before, after = plain_trace
        assert (pub.group, pub.topic, pub.tags, pub.keys, pub.success) == ("traced_pg", topic, "a", "k-plain", True)
        assert pub.store_host == cluster.broker_addr and pub.offset_msg_id == plain.offset_msg_id
        assert pub.body_length == 5
        assert (before.group, before.retry_times) == (group, 0)
        assert after.request_id == before.request_id and after.success
        flaky_trace = admin.message_trace(flaky.msg_id)
        kinds = [record.type for record in flaky_trace]
        assert kinds.count(TraceType.SUB_BEFORE) == 2 and kinds.count(TraceType.SUB_AFTER) == 2
        afters = [record for record in flaky_trace if record.type is TraceType.SUB_AFTER]
        assert sorted(record.success for record in afters) == [False, True]
        assert max(record.retry_times for record in flaky_trace if record.type is TraceType.SUB_BEFORE) == 1
        assert admin.message_trace("0" * 32) == []
    result = CliRunner().invoke(cli, ["admin", "message", "trace", plain.msg_id, "-n", cluster.namesrv_addr])
    assert result.exit_code == 0, result.output
    assert "3 record(s)" in result.output and "SubAfter" in result.output and "traced_pg" in result.output


def test_tracing_to_a_custom_topic_and_never_tracing_the_trace_topic(cluster: DevCluster) -> None:
    topic = f"Traced2_{uuid.uuid4().hex[:8]}"
    custom = f"MyTraces_{uuid.uuid4().hex[:6]}"
    with Producer("traced_custom_pg", namesrv=cluster.namesrv_addr, enable_msg_trace=True,
                  trace_topic=custom) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 1)
        create_topic(producer.instance, cluster.broker_addr, custom, 1)
        sent = producer.send(Message(topic, b"x"))
        tracer = producer._tracer
        assert tracer is not None
        wait_until(lambda: tracer.sent == 1)
    with Admin(cluster.namesrv_addr) as admin:
        assert [r.type for r in admin.message_trace(sent.msg_id, trace_topic=custom)] == [TraceType.PUB]
        assert admin.message_trace(sent.msg_id, trace_topic=TRACE_TOPIC) == []


def test_a_missing_trace_topic_loses_traces_not_sends() -> None:
    strict = DevCluster.start_in_thread(broker_settings={"auto_create_topic_enable": False})
    try:
        with Producer("untraceable_pg", namesrv=strict.namesrv_addr, enable_msg_trace=True) as producer:
            create_topic(producer.instance, strict.broker_addr, "Untraced", 1)
            results = [producer.send(Message("Untraced", f"m{n}".encode())) for n in range(3)]
            assert all(result.send_status.name == "SEND_OK" for result in results)
            tracer = producer._tracer
            assert tracer is not None
            wait_until(lambda: tracer.failed == 3)
            assert tracer.sent == 0
    finally:
        strict.close()


def test_a_traced_transaction_records_its_half_send_and_its_end(cluster: DevCluster) -> None:
    from rocketflow import LocalTransactionState, TransactionProducer
    from rocketflow.client.trace import TraceMessageType

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

    topic = f"TracedTx_{uuid.uuid4().hex[:8]}"
    with TransactionProducer("traced_tx_pg", namesrv=cluster.namesrv_addr, listener=Commit(),
                             enable_msg_trace=True) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 1)
        sent = producer.send_message_in_transaction(Message(topic, b"tx", keys="order-9"))
    with Admin(cluster.namesrv_addr) as admin:
        records = admin.message_trace(sent.msg_id)
    assert [record.type for record in records] == [TraceType.PUB, TraceType.END_TRANSACTION]
    pub, end = records
    assert pub.msg_type is TraceMessageType.TRANS_HALF and pub.topic == topic
    assert (end.transaction_state, end.from_transaction_check, end.transaction_id) == (
        "COMMIT_MESSAGE", False, sent.msg_id)
    assert end.store_host == cluster.broker_addr and end.keys == "order-9"
