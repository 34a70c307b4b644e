"""`RemoteBrokerOffsetStore` against a real broker: increase-only memory, persistence, -1 / -2 reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rocketflow.client import ClientConfig, ClientInstance, ReadOffsetType, RemoteBrokerOffsetStore
from rocketflow.dev import DevCluster
from rocketflow.net import RemotingServer
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from testkit import create_topic, wait_until

TOPIC = "ClientOffsets"
GROUP = "cg_offsets"


@pytest.fixture
def instance(cluster: DevCluster) -> Iterator[ClientInstance]:
    instance = ClientInstance.get_or_create(ClientConfig(namesrv_addr=cluster.namesrv_addr,
                                                         instance_name="offset-store-test"))
    instance.start()
    try:
        create_topic(instance, cluster.broker_addr, TOPIC, 4)
        assert instance.run(instance.update_topic_route(TOPIC))
        yield instance
    finally:
        instance.shutdown()


def queue(queue_id: int) -> MessageQueue:
    return MessageQueue(TOPIC, "broker-a", queue_id)


def test_update_offset_increase_only_never_moves_back(instance: ClientInstance) -> None:
    store = RemoteBrokerOffsetStore(instance, GROUP)
    store.update_offset(queue(0), 10, True)
    store.update_offset(queue(0), 7, True)
    assert instance.run(store.read_offset(queue(0), ReadOffsetType.READ_FROM_MEMORY)) == 10
    store.update_offset(queue(0), 12, True)
    store.update_offset(queue(0), 5, False)
    assert instance.run(store.read_offset(queue(0), ReadOffsetType.READ_FROM_MEMORY)) == 5
    assert instance.run(store.read_offset(queue(1), ReadOffsetType.READ_FROM_MEMORY)) == -1
    assert store.clone_offset_table(TOPIC) == {queue(0): 5}
    assert store.clone_offset_table("OtherTopic") == {}
    store.remove_offset(queue(0))
    assert store.clone_offset_table() == {}


def test_persist_all_commits_to_the_broker_and_drops_unassigned_queues(instance: ClientInstance) -> None:
    store = RemoteBrokerOffsetStore(instance, GROUP)
    for queue_id, offset in enumerate((3, 8, 21)):
        store.update_offset(queue(queue_id), offset, True)
    instance.run(store.persist_all([queue(0), queue(1)]))
    assert set(store.clone_offset_table()) == {queue(0), queue(1)}

    reader = RemoteBrokerOffsetStore(instance, GROUP)
    wait_until(lambda: instance.run(reader.read_offset(queue(1), ReadOffsetType.READ_FROM_STORE)) == 8)
    assert instance.run(reader.read_offset(queue(0), ReadOffsetType.READ_FROM_STORE)) == 3
    assert reader.clone_offset_table() == {queue(0): 3, queue(1): 8}  # READ_FROM_STORE also fills memory
    # queue 2 was never committed: a queue that still starts at 0 reads as 0 from the broker (4.9.3)
    assert instance.run(reader.read_offset(queue(2), ReadOffsetType.READ_FROM_STORE)) == 0

    store.update_offset(queue(1), 9, True)
    instance.run(store.persist(queue(1)))
    wait_until(lambda: instance.run(reader.read_offset(queue(1), ReadOffsetType.READ_FROM_STORE)) == 9)
    instance.run(store.update_consume_offset_to_broker(queue(3), 40, is_oneway=False))
    assert instance.run(reader.read_offset(queue(3), ReadOffsetType.MEMORY_FIRST_THEN_STORE)) == 40
    reader.update_offset(queue(3), 41, True)
    assert instance.run(reader.read_offset(queue(3), ReadOffsetType.MEMORY_FIRST_THEN_STORE)) == 41


def test_read_from_store_is_minus_one_without_an_offset_and_minus_two_without_a_broker(
        instance: ClientInstance) -> None:
    async def not_found(context: object, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    server = RemotingServer("127.0.0.1", 0, name="answers QUERY_NOT_FOUND")
    server.register(RequestCode.QUERY_CONSUMER_OFFSET, not_found)
    instance.run(server.start())
    try:
        # a broker that has no offset for the group (what 4.9.3 answers once the queue's head was deleted)
        instance.broker_addr_table["broker-empty"] = {0: server.address}
        store = RemoteBrokerOffsetStore(instance, GROUP)
        missing = MessageQueue(TOPIC, "broker-empty", 0)
        assert instance.run(store.read_offset(missing, ReadOffsetType.READ_FROM_STORE)) == -1
        assert instance.run(store.read_offset(missing, ReadOffsetType.MEMORY_FIRST_THEN_STORE)) == -1
    finally:
        instance.run(server.stop())
    # the broker is gone: the store cannot be asked
    assert instance.run(store.read_offset(missing, ReadOffsetType.READ_FROM_STORE)) == -2
    # a broker name no route knows
    assert instance.run(store.read_offset(MessageQueue(TOPIC, "broker-unknown", 0),
                                          ReadOffsetType.READ_FROM_STORE)) == -2
