"""A master and its slave under one broker name: when the master is gone, push consumers read from
the slave, resuming at the offsets the slave copied from the master, and commit to the slave."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rocketflow import Message, Producer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, SendStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from rocketflow.store import BrokerRole
from testkit import create_topic, wait_until

BROKER = "broker-ha"
TOPIC = "SlaveFailover"
GROUP = "cg_slave_failover"


@pytest.fixture
def master_and_slave() -> Iterator[tuple[DevCluster, DevCluster]]:
    quick = {"broker_name": BROKER, "register_name_server_period_ms": 300, "slave_synchronize_interval_ms": 200,
             "store.ha_send_heartbeat_interval_ms": 200}
    # the slave's dev cluster holds the name server everyone uses, so the master can go alone
    slave = DevCluster.start_in_thread(broker_settings={**quick, "broker_id": 1, "store.broker_role": BrokerRole.SLAVE})
    master: DevCluster | None = None
    try:
        master = DevCluster.start_in_thread(broker_settings={**quick, "namesrv_addr": slave.namesrv_addr,
                                                             "store.ha_listen_port": 0})
        yield master, slave
    finally:
        if master is not None:
            master.close()
        slave.close()


def consume(namesrv: str, count: int) -> list[bytes]:
    received: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], _context: object) -> ConsumeConcurrentlyStatus:
        with lock:
            received.extend(msg.body for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(GROUP, namesrv=namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            poll_name_server_interval=0.5)
    consumer.subscribe(TOPIC, "*")
    consumer.register_concurrent_listener(listener)
    with consumer:
        wait_until(lambda: len(received) >= count, 30)
    return received


def committed(cluster: DevCluster) -> int:
    broker = cluster.broker
    assert broker is not None
    return sum(broker.offsets.query_offset(GROUP, TOPIC, queue_id) for queue_id in range(4))


def test_consumers_carry_on_from_the_slave_when_the_master_is_gone(
        master_and_slave: tuple[DevCluster, DevCluster]) -> None:
    master, slave = master_and_slave
    namesrv = slave.namesrv_addr
    assert master.broker is not None and slave.broker is not None
    master_store, slave_store = master.broker.store, slave.broker.store
    with Producer("pg_slave_failover", namesrv=namesrv) as producer:
        create_topic(producer.instance, master.broker_addr, TOPIC, 4)
        for index in range(40):
            producer.send(Message(TOPIC, b"first-%d" % index))
        assert sorted(consume(namesrv, 40)) == sorted(b"first-%d" % index for index in range(40))
        wait_until(lambda: committed(master) == 40)
        for index in range(40):
            producer.send(Message(TOPIC, b"second-%d" % index))
    # the slave has the log and, within a sync period, the group's offsets
    wait_until(lambda: slave_store.commit_log.max_offset == master_store.commit_log.max_offset)
    wait_until(lambda: committed(slave) == 40)

    master.close()  # unregisters: the route keeps the topic's queues, served by the slave alone

    received = consume(namesrv, 40)
    assert sorted(received) == sorted(b"second-%d" % index for index in range(40))
    wait_until(lambda: committed(slave) == 80)  # offsets go to the slave while the master is away


def test_a_sync_master_without_a_slave_answers_slave_not_available() -> None:
    cluster = DevCluster.start_in_thread(broker_settings={"store.broker_role": BrokerRole.SYNC_MASTER})
    try:
        with Producer("pg_sync_master", namesrv=cluster.namesrv_addr) as producer:
            create_topic(producer.instance, cluster.broker_addr, "SyncMasterAlone", 2)
            result = producer.send(Message("SyncMasterAlone", b"stored-anyway"))
            # stored on the master, but not on a slave: a status, not an error (retryAnotherBrokerWhenNotStoreOK
            # is off by default, as in RocketMQ)
            assert result.send_status is SendStatus.SLAVE_NOT_AVAILABLE
            assert result.msg_id and result.queue_offset == 0
    finally:
        cluster.close()
