"""The admin API the console stands on: messages by time in a queue, CONSUME_MESSAGE_DIRECTLY relayed by the
broker to a client of the group, and the disk figures of GET_BROKER_RUNTIME_INFO."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from console_helpers import AUDIT_GROUP, ORDERS, Traffic, unique

from rocketflow import Message
from rocketflow.client import MQBrokerError, MQClientError, MQError
from rocketflow.client.admin import EARLIEST, Admin, CMResult
from testkit import wait_until


def test_messages_by_time_reads_one_queue_within_the_range(admin: Admin) -> None:
    topic = unique("ByTime")
    admin.ensure_topic(topic, queues=2)
    first = [admin.send(topic, f"early-{index}", keys=f"k{index}") for index in range(6)]
    time.sleep(0.05)
    middle = time.time_ns() // 1_000_000
    time.sleep(0.05)
    later = [admin.send(topic, f"late-{index}") for index in range(4)]
    everything = admin.messages_by_time(topic, EARLIEST, middle + 60_000)
    assert len(everything) == 10
    assert [msg.store_timestamp for msg in everything] == sorted(msg.store_timestamp for msg in everything)
    assert {msg.body for msg in admin.messages_by_time(topic, middle, middle + 60_000)} == {
        f"late-{index}".encode() for index in range(4)}
    assert {msg.body for msg in admin.messages_by_time(topic, EARLIEST, middle)} == {
        f"early-{index}".encode() for index in range(6)}
    queue_one = admin.messages_by_time(topic, EARLIEST, middle + 60_000, queue_id=1)
    expected = sum(1 for result in first + later if result.message_queue.queue_id == 1)
    assert len(queue_one) == expected and {msg.queue_id for msg in queue_one} == {1}
    assert len(admin.messages_by_time(topic, EARLIEST, middle + 60_000, max_num=3)) == 3
    with pytest.raises(MQClientError, match="no readable queue"):
        admin.messages_by_time(topic, EARLIEST, middle, queue_id=7)
    with pytest.raises(MQClientError, match="time range"):
        admin.messages_by_time(topic, middle, middle - 1)


def test_consume_message_directly_runs_the_groups_listener_once(admin: Admin, traffic: Traffic) -> None:
    key = unique("direct-")
    body = f"direct {key}".encode()
    traffic.producer.send(Message(ORDERS, body, keys=key))
    wait_until(lambda: traffic.seen_count(body) == 1, timeout=30, what="the first delivery")
    msg = admin.query_messages(ORDERS, key)[0]
    by_offset_id = admin.consume_message_directly(AUDIT_GROUP, msg.offset_msg_id)
    assert by_offset_id.consume_result is CMResult.CR_SUCCESS
    by_uniq_key = admin.consume_message_directly(AUDIT_GROUP, msg.uniq_key or "", topic=ORDERS)
    assert by_uniq_key.consume_result is CMResult.CR_SUCCESS
    assert traffic.seen_count(body) == 3
    member = admin.consumer_connections(AUDIT_GROUP).connection_set[0].client_id
    assert admin.consume_message_directly(AUDIT_GROUP, msg.offset_msg_id, client_id=member).consume_result \
        is CMResult.CR_SUCCESS
    with pytest.raises(MQBrokerError, match="not online"):
        admin.consume_message_directly(AUDIT_GROUP, msg.offset_msg_id, client_id="10.0.0.1@nobody")
    with pytest.raises(MQError):
        admin.consume_message_directly(unique("nobody-"), msg.offset_msg_id)


def test_runtime_info_reports_disk_use_as_rocketmq_does(admin: Admin, store_dir: Path) -> None:
    addr = admin.cluster_info().broker_addr_table["broker-a"].broker_addrs[0]
    info = admin.broker_runtime_info(addr)
    usage = shutil.disk_usage(store_dir)
    assert float(info["commitLogDiskRatio"]) == pytest.approx(usage.used / usage.total, abs=0.02)
    assert float(info["consumeQueueDiskRatio"]) == pytest.approx(usage.used / usage.total, abs=0.02)
    match = re.fullmatch(r"Total : ([0-9.]+) (\w+), Free : ([0-9.]+) (\w+)\.", info["commitLogDirCapacity"])
    assert match is not None, info["commitLogDirCapacity"]
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    assert float(match.group(1)) * units[match.group(2)] == pytest.approx(usage.total, rel=0.01)
    assert float(match.group(3)) * units[match.group(4)] == pytest.approx(usage.free, rel=0.05)
