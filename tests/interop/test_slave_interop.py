"""Real clients read from our slave once our master is gone: Apache's C++ client (PyPI ``rocketmq``
0.4.4) and ali-ons 3.12.0 push consumers, against a master and a slave broker under one name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from rocketflow import Message, Producer
from rocketflow.dev import DevCluster as InProcessCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store import BrokerRole

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import ClientRunner

BROKER = "broker-ha-interop"
TOPIC = "InteropSlaveRead"
COUNT = 200
QUEUES = 4
RECEIVE_TIMEOUT = 90.0


@pytest.fixture
def master_and_slave() -> Iterator[tuple[InProcessCluster, InProcessCluster]]:
    quick = {"broker_name": BROKER, "register_name_server_period_ms": 300, "slave_synchronize_interval_ms": 200,
             "store.ha_send_heartbeat_interval_ms": 200}
    # the slave's cluster holds the name server everyone uses, so the master can be stopped alone
    slave = InProcessCluster.start_in_thread(
        broker_settings={**quick, "broker_id": 1, "store.broker_role": BrokerRole.SLAVE})
    master: InProcessCluster | None = None
    try:
        master = InProcessCluster.start_in_thread(
            broker_settings={**quick, "namesrv_addr": slave.namesrv_addr, "store.ha_listen_port": 0})
        yield master, slave
    finally:
        if master is not None:
            master.close()
        slave.close()


def commit_offsets_at_zero(broker_addr: str, groups: list[str]) -> None:
    """New groups of these clients would start at the end of the queues: start them at 0 instead."""

    async def commit() -> None:
        async with RemotingClient(name="interop-slave") as client:
            for group in groups:
                for queue_id in range(QUEUES):
                    response = await client.invoke(broker_addr, RemotingCommand.request(
                        RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": TOPIC,
                                                             "queueId": str(queue_id), "commitOffset": "0"}), 5)
                    assert response.code == ResponseCode.SUCCESS

    asyncio.run(commit())


def wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.05)


def test_real_push_consumers_read_from_the_slave_when_the_master_is_gone(
        master_and_slave: tuple[InProcessCluster, InProcessCluster], clients: ClientRunner) -> None:
    master, slave = master_and_slave
    assert master.broker is not None and slave.broker is not None
    master_broker, slave_broker = master.broker, slave.broker
    namesrv = slave.namesrv_addr
    bodies = {f"slave-read-{index}" for index in range(COUNT)}
    with Producer("pg_interop_slave", namesrv=namesrv) as producer:
        instance = producer.instance
        instance.run(instance.api.create_topic(master.broker_addr, TopicConfig(TOPIC, QUEUES, QUEUES)))
        for body in sorted(bodies):
            producer.send(Message(TOPIC, body.encode(), tags="TagA"))
    groups = {"cpp": "G_interop_slave_cpp", "alions": "G_interop_slave_alions"}
    commit_offsets_at_zero(master.broker_addr, list(groups.values()))
    # the slave has the log, the topic and the groups' offsets ...
    wait(lambda: slave_broker.store.commit_log.max_offset == master_broker.store.commit_log.max_offset, 20,
         "the slave to catch up")
    wait(lambda: slave_broker.topics.select(TOPIC) is not None and all(
        slave_broker.offsets.query_offset(group, TOPIC, 0) == 0 for group in groups.values()), 20,
        "the slave to copy the topic and the offsets")
    master.close()  # ... and is all that is left of the broker name

    cpp = clients.cpp_consumer("cpp-slave", namesrv, TOPIC, groups["cpp"])
    alions = clients.alions_consumer("alions-slave", namesrv, TOPIC, groups["alions"], from_where="first")
    for process in (cpp, alions):
        clients.wait_until(lambda p=process: {e.get("body") for e in p.received()} >= bodies,  # type: ignore[misc]
                           RECEIVE_TIMEOUT, f"{process.name} to receive every message from the slave",
                           must_keep_running=(process,))
    clients.stop(cpp, alions)
    for process in (cpp, alions):
        received = [event.get("body") for event in process.received()]
        assert set(received) == bodies, process.name
        print(f"\n{process.name}: {len(received)} received from the slave")
