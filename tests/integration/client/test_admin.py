"""`Admin` (the programmatic admin API) against a dev cluster: cluster, topics, groups, messages, tail,
consumer progress and connections, offset reset, and the refused / unreachable error paths."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rocketflow import Message, Producer, PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MQBrokerError,
    MQClientError,
    MQConnectError,
)
from rocketflow.client.admin import EARLIEST, LATEST, ORDER_TOPIC_CONFIG_NAMESPACE, Admin, parse_timestamp
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from rocketflow.remoting.codes import ResponseCode
from testkit import wait_until


@pytest.fixture
def admin(cluster: DevCluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv_addr, timeout=5.0) as session:
        yield session


def routed(admin: Admin, topic: str, write_queues: int | None = None) -> bool:
    try:
        route = admin.topic_route(topic)
    except MQClientError:
        return False
    return write_queues is None or any(data.write_queue_nums == write_queues for data in route.queue_datas)


def test_cluster_overview_reports_the_broker(admin: Admin, cluster: DevCluster) -> None:
    statuses = admin.cluster_overview()
    assert [(status.broker_name, status.broker_id, status.addr) for status in statuses] == [
        (cluster.broker_config.broker_name, 0, cluster.broker_addr)]
    assert statuses[0].version == "V4_9_3" and statuses[0].error is None
    assert admin.broker_runtime_info(cluster.broker_addr)["brokerAddr"] == cluster.broker_addr


def test_topic_lifecycle(admin: Admin, cluster: DevCluster) -> None:
    assert admin.create_topic("AdminLife", read_queue_nums=2, write_queue_nums=2) == [cluster.broker_addr]
    wait_until(lambda: routed(admin, "AdminLife", 2))
    assert "AdminLife" in admin.topic_list()
    admin.update_topic("AdminLife", write_queue_nums=3, read_queue_nums=3)
    wait_until(lambda: routed(admin, "AdminLife", 3))
    admin.send("AdminLife", "one", keys="life-1")
    stats = admin.topic_stats("AdminLife")
    assert [row.queue_id for row in stats] == [0, 1, 2]
    assert sum(row.max_offset for row in stats) == 1
    assert all(row.last_update_timestamp > 0 for row in stats if row.max_offset > 0)
    assert admin.delete_topic("AdminLife") == [cluster.broker_addr]
    assert "AdminLife" not in admin.topic_list()
    with pytest.raises(MQClientError, match="does not exist"):
        admin.topic_route("AdminLife")


def test_ordered_topic_goes_to_the_name_server_kv_config(admin: Admin) -> None:
    admin.create_topic("AdminOrdered", read_queue_nums=2, write_queue_nums=2, order=True)
    wait_until(lambda: routed(admin, "AdminOrdered"))
    assert admin.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "AdminOrdered") == "broker-a:2"
    admin.update_topic("AdminOrdered", order=False)
    assert admin.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "AdminOrdered") is None


def test_bad_input_is_refused_before_any_request(admin: Admin) -> None:
    with pytest.raises(MQClientError, match="contains illegal characters"):
        admin.create_topic("bad topic!")
    with pytest.raises(MQClientError, match="nothing to update"):
        admin.update_topic("AnyTopic")
    with pytest.raises(MQClientError, match="no cluster named"):
        admin.create_topic("AdminNoCluster", cluster="NoSuchCluster")
    with pytest.raises(MQClientError, match="invalid timestamp"):
        parse_timestamp("yesterday-ish")
    assert parse_timestamp("1700000000000") == 1700000000000


def test_group_create_list_delete(admin: Admin, cluster: DevCluster) -> None:
    admin.create_group("admin_group_x", retry_max_times=3, consume_broadcast_enable=False)
    groups = {config.group_name: config for config in admin.group_list()}
    assert groups["admin_group_x"].retry_max_times == 3
    assert groups["admin_group_x"].consume_broadcast_enable is False
    assert admin.delete_group("admin_group_x", broker_addr=cluster.broker_addr) == [cluster.broker_addr]
    assert "admin_group_x" not in {config.group_name for config in admin.group_list()}


def test_view_and_query_messages(admin: Admin) -> None:
    admin.create_topic("AdminMessages", read_queue_nums=2, write_queue_nums=2)
    wait_until(lambda: routed(admin, "AdminMessages"))
    result = admin.send("AdminMessages", "payload", keys="order-7", tags="paid", properties={"source": "test"})
    by_offset_id = admin.view_message(result.offset_msg_id)
    by_unique_key = admin.view_message(result.msg_id, topic="AdminMessages")
    by_unique_key_anywhere = admin.view_message(result.msg_id)
    for msg in (by_offset_id, by_unique_key, by_unique_key_anywhere):
        assert (msg.body, msg.tags, msg.keys, msg.properties["source"]) == (b"payload", "paid", "order-7", "test")
        assert msg.uniq_key == result.msg_id
    found = admin.query_messages("AdminMessages", "order-7")
    assert [msg.uniq_key for msg in found] == [result.msg_id]
    assert admin.query_messages("AdminMessages", "order-8") == []
    with pytest.raises(MQClientError, match="not found"):
        admin.view_message("0" * 32, topic="AdminMessages")


def test_tail_follows_messages_sent_after_it_started(admin: Admin) -> None:
    admin.create_topic("AdminTail", read_queue_nums=3, write_queue_nums=3)
    wait_until(lambda: routed(admin, "AdminTail"))
    admin.send("AdminTail", "old")
    with admin.open_tail("AdminTail", from_now=True, hold_seconds=1.0) as tail:
        assert len(tail.queues) == 3
        sent = [admin.send("AdminTail", f"new-{index}").msg_id for index in range(3)]
        received: list[MessageExt] = []
        wait_until(lambda: bool(received.extend(tail.poll(0.2))) or len(received) >= 3, timeout=15)
    assert sorted(msg.uniq_key or "" for msg in received) == sorted(sent)
    assert b"old" not in [msg.body for msg in received]


def test_progress_connections_and_reset_with_a_running_consumer(admin: Admin, cluster: DevCluster) -> None:
    admin.create_topic("AdminProgress", read_queue_nums=2, write_queue_nums=2)
    wait_until(lambda: routed(admin, "AdminProgress"))
    bodies: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            bodies.extend(msg.body for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("admin_progress_cg", namesrv=cluster.namesrv_addr, instance_name="admin-progress",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, persist_first_delay=0.2,
                            persist_consumer_offset_interval=0.2)
    consumer.subscribe("AdminProgress", "*")
    consumer.register_concurrent_listener(listener)
    with consumer, Producer("admin_progress_pg", namesrv=cluster.namesrv_addr) as producer:
        for index in range(6):
            producer.send(Message("AdminProgress", f"m{index}".encode()))
        wait_until(lambda: len(bodies) >= 6, timeout=15)

        def caught_up() -> bool:
            progress = admin.consumer_progress("admin_progress_cg", "AdminProgress")
            return len(progress.queues) == 2 and progress.total_lag == 0 and all(
                row.client_id == consumer.instance.client_id for row in progress.queues)

        wait_until(caught_up, timeout=15)
        progress = admin.consumer_progress("admin_progress_cg")
        assert progress.broker_offset_total >= 6
        connection = admin.consumer_connections("admin_progress_cg")
        assert [member.client_id for member in connection.connection_set] == [consumer.instance.client_id]
        assert set(connection.subscription_table) >= {"AdminProgress"}

        table = admin.reset_offset("admin_progress_cg", "AdminProgress", EARLIEST)
        assert sorted(table.values()) == [0, 0]
        wait_until(lambda: len(bodies) >= 12, timeout=20)
        with lock:
            assert sorted(bodies[6:12]) == sorted(f"m{index}".encode() for index in range(6))

        table = admin.reset_offset("admin_progress_cg", "AdminProgress", LATEST, force=True)
        assert sum(table.values()) == 6


def test_refused_and_unreachable(admin: Admin, cluster: DevCluster) -> None:
    with pytest.raises(MQBrokerError) as refused:
        admin.consumer_connections("admin_nobody_home")
    assert refused.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert "not online" in str(refused.value)
    with Admin("127.0.0.1:1", timeout=2.0) as nowhere, pytest.raises(MQConnectError):
        nowhere.topic_list()
