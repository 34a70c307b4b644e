"""`ClientInstance` with a real broker: heartbeats, consumer lists, periodic tasks and broker->client requests.

`RecordingConsumer` implements the consumer side of the instance's contract (what the push consumer
provides) and records every call the instance makes on it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketflow.client import ClientConfig, ClientInstance, MQClientError, MQTimeoutError
from rocketflow.client.api import PullStatus
from rocketflow.client.consumer.fetcher import PullAPIWrapper
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import ConsumerData, ConsumerRunningInfo, SubscriptionData
from rocketflow.protocol.message import Message, MessageQueue
from rocketflow.protocol.sysflag import build_pull_sys_flag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import GetConsumerRunningInfoRequestHeader
from testkit import create_topic, wait_until

TOPIC = "ClientInstanceT"
GROUP = "cg_instance"


class RecordingConsumer:
    def __init__(self, group: str = GROUP) -> None:
        self.group = group
        self.rebalances = 0
        self.persists = 0
        self.resets: list[tuple[str, dict[MessageQueue, int]]] = []
        self.subscribe_updates: list[tuple[str, list[MessageQueue]]] = []
        self._lock = threading.Lock()

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, subscription_data_set=[SubscriptionData(TOPIC, "*", sub_version=1)])

    async def do_rebalance(self) -> None:
        with self._lock:
            self.rebalances += 1

    def persist_consumer_offset(self) -> None:
        with self._lock:
            self.persists += 1

    def update_topic_subscribe_info(self, topic: str, queues: list[MessageQueue]) -> None:
        self.subscribe_updates.append((topic, queues))

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        self.resets.append((topic, offsets))

    def running_info(self) -> ConsumerRunningInfo:
        return ConsumerRunningInfo(properties={"consumeType": "CONSUME_PASSIVELY"})


def start_instance(cluster: DevCluster, name: str, consumer: RecordingConsumer | None = None,
                   **settings: object) -> ClientInstance:
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name=name, **settings)  # type: ignore[arg-type]
    instance = ClientInstance.get_or_create(config)
    if consumer is not None:
        instance.register_consumer(consumer.group, consumer)
    instance.start()
    return instance


@pytest.fixture
def first(cluster: DevCluster) -> Iterator[tuple[ClientInstance, RecordingConsumer]]:
    consumer = RecordingConsumer()
    instance = start_instance(cluster, "first", consumer, persist_first_delay=0.05,
                              persist_consumer_offset_interval=0.05)
    try:
        create_topic(instance, cluster.broker_addr, TOPIC, 4)
        yield instance, consumer
    finally:
        instance.shutdown()


def test_heartbeat_registers_the_consumer_and_route_updates_reach_it(
        cluster: DevCluster, first: tuple[ClientInstance, RecordingConsumer]) -> None:
    instance, consumer = first
    assert instance.run(instance.update_topic_route(TOPIC))
    expected = [MessageQueue(TOPIC, "broker-a", queue_id) for queue_id in range(4)]
    assert instance.topic_subscribe_info(TOPIC) == expected
    assert (TOPIC, expected) in consumer.subscribe_updates
    assert instance.find_broker_address_in_publish("broker-a") == cluster.broker_addr
    found = instance.find_broker_address_in_subscribe("broker-a", 0, True)
    assert found is not None and found.broker_addr == cluster.broker_addr and not found.slave
    assert instance.find_broker_address_in_subscribe("broker-a", 1, True) is None
    assert instance.find_broker_address_in_subscribe("broker-a", 1, False) == found
    instance.run(instance.send_heartbeat_to_all_brokers())
    assert instance.broker_version_table["broker-a"][cluster.broker_addr] > 0
    assert instance.run(instance.find_consumer_id_list(TOPIC, GROUP)) == [instance.client_id]
    assert instance.run(instance.find_consumer_id_list(TOPIC, "cg_nobody")) == []
    wait_until(lambda: consumer.persists >= 2)  # the offset-persistence task runs
    inner = instance.inner_producer  # CLIENT_INNER_PRODUCER, for messages sent back to retry topics
    assert inner.send(Message(TOPIC, b"from the inner producer")).message_queue.topic == TOPIC
    assert inner.instance is instance
    assert consumer.rebalances >= 1  # the rebalance service runs once at start


def test_a_new_member_triggers_rebalance_and_unregister_removes_it(
        cluster: DevCluster, first: tuple[ClientInstance, RecordingConsumer]) -> None:
    instance, consumer = first
    instance.run(instance.update_topic_route(TOPIC))
    instance.run(instance.send_heartbeat_to_all_brokers())
    before = consumer.rebalances
    second = start_instance(cluster, "second", RecordingConsumer())
    try:
        second.run(second.update_topic_route(TOPIC))
        second.run(second.send_heartbeat_to_all_brokers())
        # the broker notifies the first member (NOTIFY_CONSUMER_IDS_CHANGED): it rebalances at once
        wait_until(lambda: consumer.rebalances > before)
        ids = instance.run(instance.find_consumer_id_list(TOPIC, GROUP))
        assert sorted(ids) == sorted([instance.client_id, second.client_id])
        with pytest.raises(MQClientError, match="already registered"):
            second.register_consumer(GROUP, RecordingConsumer())
    finally:
        second.shutdown()
    assert instance.run(instance.find_consumer_id_list(TOPIC, GROUP)) == [instance.client_id]


def test_broker_requests_reach_the_consumer(cluster: DevCluster,
                                            first: tuple[ClientInstance, RecordingConsumer]) -> None:
    instance, consumer = first
    instance.run(instance.update_topic_route(TOPIC))
    instance.run(instance.send_heartbeat_to_all_brokers())

    header = GetConsumerRunningInfoRequestHeader(consumer_group=GROUP, client_id=instance.client_id)
    response = instance.run(instance.api.invoke(
        cluster.broker_addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext_fields())))
    assert response.code == ResponseCode.SUCCESS, response.remark
    info = ConsumerRunningInfo.decode(response.body)
    assert info.properties["consumeType"] == "CONSUME_PASSIVELY"
    assert info.properties["PROP_NAMESERVER_ADDR"] == cluster.namesrv_addr

    offsets = instance.run(instance.api.invoke_broker_to_reset_offset(cluster.broker_addr, TOPIC, GROUP, -1))
    assert set(offsets) == {MessageQueue(TOPIC, "broker-a", queue_id) for queue_id in range(4)}
    wait_until(lambda: bool(consumer.resets))
    assert consumer.resets == [(TOPIC, offsets)]


def test_lifecycle_is_reference_counted(cluster: DevCluster) -> None:
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="refcount")
    instance = ClientInstance.get_or_create(config)
    assert ClientInstance.get_or_create(config) is instance
    instance.start()
    instance.start()
    thread = instance.loop_thread
    assert thread is not None and thread.is_alive() and thread.daemon
    instance.shutdown()
    assert thread.is_alive() and instance.started
    instance.shutdown()
    assert not thread.is_alive() and not instance.started
    with pytest.raises(MQClientError, match="was shut down"):
        instance.start()
    replacement = ClientInstance.get_or_create(config)
    assert replacement is not instance
    with pytest.raises(MQClientError, match="not started"):
        replacement.run(replacement.send_heartbeat_to_all_brokers())
    replacement.discard()


def test_clients_of_different_name_servers_get_different_instances() -> None:
    first = ClientInstance.get_or_create(ClientConfig(namesrv_addr="127.0.0.1:1", instance_name="shared"))
    same = ClientInstance.get_or_create(ClientConfig(namesrv_addr="127.0.0.1:1", instance_name="shared"))
    other = ClientInstance.get_or_create(ClientConfig(namesrv_addr="127.0.0.1:2", instance_name="shared"))
    assert first is same
    assert other is not first and other.client_id == first.client_id
    assert other.config.namesrv_addr == "127.0.0.1:2"
    first.discard()
    other.discard()


def test_run_hands_back_results_errors_and_timeouts_from_many_threads(cluster: DevCluster) -> None:
    instance = start_instance(cluster, "runner")
    try:
        async def double(value: int) -> int:
            await asyncio.sleep(0)
            return 2 * value

        async def fail() -> None:
            raise ValueError("failed on the loop")

        cancelled = threading.Event()

        async def slow() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        assert instance.run(double(21)) == 42
        with pytest.raises(ValueError, match="failed on the loop"):
            instance.run(fail())
        started = time.monotonic()
        with pytest.raises(MQTimeoutError, match=r"no result within 0.2s"):
            instance.run(slow(), timeout=0.2)
        assert time.monotonic() - started < 5
        assert cancelled.wait(5), "the timed-out coroutine was not cancelled"
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda value: instance.run(double(value)), range(400))) == [2 * v for v in range(400)]
        wait_until(lambda: not instance._submitted)  # finished tasks are not kept
    finally:
        instance.shutdown()
    with pytest.raises(MQClientError, match="not started"):
        instance.run(double(1))


def test_a_pull_for_a_broker_with_no_known_address_fetches_the_route_first(
        cluster: DevCluster, first: tuple[ClientInstance, RecordingConsumer]) -> None:
    instance, _ = first
    sent = instance.inner_producer.send(Message(TOPIC, b"pulled after a route fetch"),
                                        selector=lambda queues, msg, arg: queues[0])
    wrapper = PullAPIWrapper(instance, GROUP)
    mq = sent.message_queue
    sys_flag = build_pull_sys_flag(False, False, True, False)

    def pull() -> object:
        return instance.run(wrapper.pull_kernel_impl(mq, "*", "TAG", 0, sent.queue_offset, 32, sys_flag, 0,
                                                     1000, 3000))

    instance.topic_route_table.clear()  # as before the first route of the topic came
    instance.broker_addr_table.clear()
    result = pull()
    assert getattr(result, "status", None) is PullStatus.FOUND
    assert instance.find_broker_address_in_publish("broker-a") == cluster.broker_addr
    with pytest.raises(MQClientError, match="does not exist"):
        instance.run(wrapper.pull_kernel_impl(MessageQueue(TOPIC, "broker-nowhere", 0), "*", "TAG", 0, 0, 32,
                                              sys_flag, 0, 1000, 3000))
