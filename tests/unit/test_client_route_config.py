"""Client routes (publish / subscribe queues, queue selection), settings and pull-result processing."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from rocketflow.client import ClientConfig, MQClientError, PullResult, PullStatus
from rocketflow.client.api import process_pull_result
from rocketflow.client.producer.producer import ProducerSettings, select_queue_by_sharding_key
from rocketflow.client.route import (
    normalized_route,
    route_to_publish_info,
    route_to_subscribe_info,
    shrink_default_route,
)
from rocketflow.protocol.bodies import BrokerData, QueueData, TopicRouteData
from rocketflow.protocol.codec import encode_record
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.tags import parse_subscription


def route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-b", 2, 3, 6), QueueData("broker-a", 4, 2, 6), QueueData("broker-c", 2, 2, 4),
                     QueueData("broker-d", 1, 1, 6)],
        broker_datas=[BrokerData("C", "broker-a", {0: "a:1", 1: "a:2"}), BrokerData("C", "broker-b", {0: "b:1"}),
                      BrokerData("C", "broker-c", {0: "c:1"}), BrokerData("C", "broker-d", {1: "d:2"})],
    )


def test_publish_queues_are_writable_master_queues_sorted_by_broker() -> None:
    info = route_to_publish_info("T", route())
    assert info.ok() and info.have_topic_router_info and not info.order_topic
    # broker-c is read-only, broker-d has no master
    assert info.message_queues == [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1),
                                   MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-b", 1),
                                   MessageQueue("T", "broker-b", 2)]


def test_subscribe_queues_are_every_readable_queue_sorted() -> None:
    queues = route_to_subscribe_info("T", route())
    assert queues == sorted(queues)
    assert Counter(mq.broker_name for mq in queues) == {"broker-a": 4, "broker-b": 2, "broker-c": 2, "broker-d": 1}


def test_order_topic_conf_defines_the_publish_queues() -> None:
    ordered = route()
    ordered.order_topic_conf = "broker-b:2;broker-a:1"
    info = route_to_publish_info("T", ordered)
    assert info.order_topic
    assert info.message_queues == [MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-b", 1),
                                   MessageQueue("T", "broker-a", 0)]


def test_round_robin_covers_every_queue_and_avoids_the_failed_broker() -> None:
    info = route_to_publish_info("T", route())
    picks = [info.select_one_message_queue() for _ in range(10)]
    assert Counter(picks) == {mq: 2 for mq in info.message_queues}
    for _ in range(10):
        assert info.select_one_message_queue("broker-a").broker_name == "broker-b"
    single = route_to_publish_info("T", TopicRouteData([QueueData("broker-a", 2, 2, 6)],
                                                       [BrokerData("C", "broker-a", {0: "a:1"})]))
    assert single.select_one_message_queue("broker-a").broker_name == "broker-a"  # nothing else to pick


def test_default_route_is_shrunk_and_normalized() -> None:
    shrunk = shrink_default_route(TopicRouteData([QueueData("broker-b", 8, 8, 7), QueueData("broker-a", 2, 8, 7)],
                                                 [BrokerData("C", "broker-b", {0: "b:1"}),
                                                  BrokerData("C", "broker-a", {0: "a:1"})]), 4)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in shrunk.queue_datas] == [
        ("broker-a", 2, 2), ("broker-b", 4, 4)]
    assert [b.broker_name for b in shrunk.broker_datas] == ["broker-a", "broker-b"]
    assert normalized_route(shrunk) == shrunk


def test_sharding_key_hash_is_javas_select_by_hash() -> None:
    queues = [MessageQueue("T", "broker-a", queue_id) for queue_id in range(8)]
    assert select_queue_by_sharding_key(queues, "TagA").queue_id == 2598919 % 8
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Java: abs(MIN_VALUE % 3) == 2
    assert select_queue_by_sharding_key(queues[:3], "polygenelubricants").queue_id == 2
    with pytest.raises(MQClientError):
        select_queue_by_sharding_key([], "k")


def test_client_id_and_instance_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_CLIENT_NAME", raising=False)
    config = ClientConfig(namesrv_addr="127.0.0.1:9876;127.0.0.2:9876")
    assert config.namesrv_addresses() == ["127.0.0.1:9876", "127.0.0.2:9876"]
    assert config.build_client_id() == "127.0.0.1@DEFAULT"  # the local address towards the name server
    config.unit_name = "unit1"
    assert config.build_client_id() == "127.0.0.1@DEFAULT@unit1"
    per_process = ClientConfig(namesrv_addr="127.0.0.1:9876")
    per_process.change_instance_name_to_pid(unique=False)
    assert per_process.instance_name == str(os.getpid())
    first, second = ClientConfig(client_ip="10.1.1.1"), ClientConfig(client_ip="10.1.1.1")
    first.change_instance_name_to_pid()
    second.change_instance_name_to_pid()
    assert first.instance_name.startswith(f"{os.getpid()}#") and first.instance_name != second.instance_name
    named = ClientConfig(client_ip="10.1.1.1", instance_name="mine")
    named.change_instance_name_to_pid()
    assert named.build_client_id() == "10.1.1.1@mine"


@pytest.mark.parametrize(("settings", "match"), [
    ({"namesrv_addr": "nohost"}, "invalid name server address"),
    ({"poll_name_server_interval": 0}, "poll_name_server_interval"),
    ({"mq_client_api_timeout": "3"}, "mq_client_api_timeout"),
    ({"pull_time_delay_mills_when_exception": 1.5}, "pull_time_delay_mills_when_exception"),
    ({"instance_name": "a@b"}, "instance_name"),
    ({"client_ip": "not-an-ip"}, "client_ip"),
])
def test_bad_client_settings_are_rejected(settings: dict[str, object], match: str) -> None:
    with pytest.raises(MQClientError, match=match):
        ClientConfig(**settings)  # type: ignore[arg-type]


def test_producer_defaults_are_rocketmqs() -> None:
    settings = ProducerSettings()
    assert (settings.send_msg_timeout, settings.retry_times_when_send_failed,
            settings.retry_times_when_send_async_failed, settings.compress_msg_body_over_howmuch,
            settings.compress_level, settings.max_message_size, settings.default_topic_queue_nums,
            settings.create_topic_key, settings.retry_another_broker_when_not_store_ok) == (
        3.0, 2, 2, 4096, 5, 4 * 1024 * 1024, 4, "TBW102", False)
    with pytest.raises(MQClientError, match="compress_level"):
        ProducerSettings(compress_level=10)


def test_process_pull_result_refilters_tags_and_adds_offsets() -> None:
    records = b"".join(
        encode_record(MessageExt("T", b"m%d" % index, properties={"TAGS": tag} if tag else {}, queue_offset=index,
                                 store_host=("127.0.0.1", 10911)))
        for index, tag in enumerate(["a", "b", None, "a"]))
    mq = MessageQueue("T", "broker-x", 0)
    result = PullResult(PullStatus.FOUND, 4, 0, 4, body=records)
    messages = process_pull_result(result, mq, parse_subscription("a || c"))
    assert [msg.body for msg in messages] == [b"m0", b"m3"] and result.messages == messages
    assert {(msg.broker_name, msg.properties["MIN_OFFSET"], msg.properties["MAX_OFFSET"]) for msg in messages} == {
        ("broker-x", "0", "4")}
    assert len(process_pull_result(PullResult(PullStatus.FOUND, 4, 0, 4, body=records), mq)) == 4
    assert process_pull_result(PullResult(PullStatus.NO_NEW_MSG, 4, 0, 4), mq) == []
