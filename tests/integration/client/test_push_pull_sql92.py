"""SQL92 filtering end to end: `MessageSelector.by_sql` on push and pull consumers, evaluated by the broker."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, MessageSelector, Producer, PushConsumer
from rocketflow.client import MQClientError, PullConsumer
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import PullMessageRequestHeader
from testkit import create_topic, wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"enable_property_filter": True})
    try:
        yield cluster
    finally:
        cluster.close()


def send_orders(producer: Producer, topic: str, count: int) -> list[Message]:
    sent = []
    for number in range(count):
        msg = Message(topic, f"order-{number}".encode(), tags="pay" if number % 2 else "ship",
                      keys=f"k{number}", properties={"amount": str(number), "region": ("eu", "us", "apac")[number % 3]})
        if number % 5 == 0:
            del msg.properties["region"]  # a missing property: UNKNOWN in SQL, never matched
        producer.send(msg)
        sent.append(msg)
    return sent


def expected_bodies(sent: list[Message]) -> set[bytes]:
    return {msg.body for msg in sent
            if int(msg.properties["amount"]) >= 10 and msg.properties.get("region") == "eu" and msg.tags == "pay"}


SQL = "amount >= 10 AND region = 'eu' AND TAGS = 'pay'"


def test_push_consumer_receives_exactly_what_the_expression_selects(cluster: DevCluster) -> None:
    topic = f"Sql_{uuid.uuid4().hex[:8]}"
    with Producer("sql_pg", namesrv=cluster.namesrv_addr) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 4)
        sent = send_orders(producer, topic, 60)
        got: list[MessageExt] = []
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], _context: object) -> ConsumeConcurrentlyStatus:
            with lock:
                got.extend(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(f"sql_cg_{uuid.uuid4().hex[:6]}", namesrv=cluster.namesrv_addr,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(topic, MessageSelector.by_sql(SQL))
        consumer.register_concurrent_listener(listener)
        with consumer:
            expected = expected_bodies(sent)
            assert expected  # the data has matches and non-matches
            wait_until(lambda: len(got) >= len(expected))
            # long polling: a held pull wakes for new messages and hands over only the matching one
            later = [Message(topic, b"late-miss", tags="pay", properties={"amount": "99", "region": "us"}),
                     Message(topic, b"late-hit", tags="pay", properties={"amount": "99", "region": "eu"})]
            for msg in later:
                producer.send(msg)
            wait_until(lambda: b"late-hit" in {msg.body for msg in got})
            threading.Event().wait(0.5)
        with lock:
            bodies = [msg.body for msg in got]
        assert sorted(bodies) == sorted(expected | {b"late-hit"})


def test_pull_consumer_with_a_selector(cluster: DevCluster) -> None:
    topic = f"SqlPull_{uuid.uuid4().hex[:8]}"
    with Producer("sql_pull_pg", namesrv=cluster.namesrv_addr) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 2)
        sent = send_orders(producer, topic, 40)
    consumer = PullConsumer(f"sql_pull_cg_{uuid.uuid4().hex[:6]}", namesrv=cluster.namesrv_addr,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, MessageSelector.by_sql("amount BETWEEN 5 AND 20 AND region IN ('us', 'apac')"))
    got: list[bytes] = []
    with consumer:
        expected = {msg.body for msg in sent if 5 <= int(msg.properties["amount"]) <= 20
                    and msg.properties.get("region") in ("us", "apac")}

        def polled_all() -> bool:
            got.extend(msg.body for msg in consumer.poll(timeout=0.5))
            return len(got) >= len(expected)

        wait_until(polled_all, timeout=20)
    assert sorted(got) == sorted(expected)


def test_bad_expressions_are_refused_before_subscribing(cluster: DevCluster) -> None:
    consumer = PushConsumer("sql_bad", namesrv=cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="bad SQL92 expression"):
        consumer.subscribe("SqlBad", MessageSelector.by_sql("amount > AND"))
    with pytest.raises(MQClientError, match="unknown expression type"):
        consumer.subscribe("SqlBad", MessageSelector("XPATH", "/a"))


def raw_pull(producer: Producer, addr: str, topic: str, expression: str) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group="sql_raw", topic=topic, queue_id=0, queue_offset=0, max_msg_nums=32, sys_flag=4,
        commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription=expression, expression_type="SQL92")
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
    return producer.instance.run(producer.instance.api.invoke(addr, request, 5.0))


def test_the_broker_explains_bad_or_unsupported_sql(cluster: DevCluster) -> None:
    topic = f"SqlRaw_{uuid.uuid4().hex[:8]}"
    with Producer("sql_raw_pg", namesrv=cluster.namesrv_addr) as producer:
        create_topic(producer.instance, cluster.broker_addr, topic, 1)
        producer.send(Message(topic, b"x", properties={"a": "1"}))
        response = raw_pull(producer, cluster.broker_addr, topic, "a = = 1")
        assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "SQL92" in (response.remark or "")
        assert raw_pull(producer, cluster.broker_addr, topic, "a = 1").code == ResponseCode.SUCCESS
        # no matches: the pull moves past what it scanned
        missed = raw_pull(producer, cluster.broker_addr, topic, "a = 2")
        assert missed.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert missed.ext_fields["nextBeginOffset"] == "1"
    plain = DevCluster.start_in_thread()
    try:
        with Producer("sql_off_pg", namesrv=plain.namesrv_addr) as producer:
            create_topic(producer.instance, plain.broker_addr, topic, 1)
            response = raw_pull(producer, plain.broker_addr, topic, "a = 1")
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "enablePropertyFilter" in (response.remark or "")
    finally:
        plain.close()
