"""Master/slave replication over TCP: a slave broker copies the master's commit log and tables,
serves pulls, resumes after a restart; SYNC_MASTER sends wait for it; bad HA input closes only
the connection that sent it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from broker_helpers import decoded, message_properties, pull, send, wait_for

from rocketflow.broker import BrokerController, build_broker_config
from rocketflow.dev import DevCluster
from rocketflow.namesrv import NameServer, NamesrvConfig
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import KVTable, TopicConfigSerializeWrapper, TopicRouteData
from rocketflow.protocol.codec import decode_records
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store import BrokerRole, MessageStore, StoreConfig
from rocketflow.store.ha import HAClient
from rocketflow.store.ha.protocol import encode_offset_report, encode_transfer_header

BROKER = "broker-r"


def settings(namesrv: NameServer, root: Path, role: BrokerRole, **extra: Any) -> dict[str, Any]:
    return {
        "listen_port": 0, "namesrv_addr": namesrv.address, "broker_name": BROKER,
        "register_name_server_period_ms": 300, "slave_synchronize_interval_ms": 200,
        "store.store_root": root, "store.broker_role": role, "store.ha_listen_port": 0,
        "store.ha_send_heartbeat_interval_ms": 200, "store.commit_log_segment_size": 64 * 1024,
        "broker_id": 1 if role is BrokerRole.SLAVE else 0, **extra,
    }


@contextlib.asynccontextmanager
async def started(config: dict[str, Any]) -> AsyncIterator[BrokerController]:
    broker = BrokerController(build_broker_config(config))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def in_sync(master: BrokerController, slave: BrokerController, timeout: float = 10.0) -> None:
    async def caught_up() -> bool:
        return slave.store.commit_log.max_offset == master.store.commit_log.max_offset
    await wait_for(caught_up, timeout)


async def queue_bodies(client: RemotingClient, addr: str, topic: str, queue_id: int) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        response = await pull(client, addr, "reader", topic, queue_id, len(bodies))
        if response.code != ResponseCode.SUCCESS:
            return bodies
        bodies.extend(msg.body for msg in decoded(response))


def test_a_slave_copies_the_log_and_tables_serves_pulls_and_refuses_sends(tmp_path: Path) -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        client = RemotingClient()
        try:
            async with started(settings(namesrv, tmp_path / "m", BrokerRole.ASYNC_MASTER)) as master, \
                    started(settings(namesrv, tmp_path / "s", BrokerRole.SLAVE)) as slave:
                for index in range(60):
                    response = await send(client, master.address, "Replicated", b"body-%d" % index,
                                          message_properties(keys=f"key-{index}"), queue_id=index % 4)
                    assert response.code == ResponseCode.SUCCESS
                await in_sync(master, slave)

                async def topic_copied() -> bool:  # a slave serves a topic once it has copied its config
                    return slave.topics.select("Replicated") is not None
                await wait_for(topic_copied, 10)
                for queue_id in range(4):
                    expected = [b"body-%d" % index for index in range(queue_id, 60, 4)]
                    assert await queue_bodies(client, slave.address, "Replicated", queue_id) == expected
                assert len(slave.store.query_message("Replicated", "key-7", 4, 0, 2**62).buffers) == 1

                # the name server lists both under one broker name; the slave learned the master's addresses
                route = TopicRouteData.decode((await client.invoke(namesrv.address, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Replicated"}), 5)).body)
                assert route.broker_datas[0].broker_addrs == {0: master.address, 1: slave.address}
                assert slave.ha_client is not None and slave.ha_client.master_address == master.ha_server_address
                info = master.runtime_info()
                assert info["haConnections"] == "1" and info["brokerRole"] == "ASYNC_MASTER"

                # a slave takes no sends
                refused = await send(client, slave.address, "Replicated", b"nope", message_properties())
                assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE

                # topics, consumer offsets and subscription groups are copied from the master
                await client.invoke(master.address, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": "copied", "topic": "Replicated", "queueId": "2", "commitOffset": "9"}), 5)

                async def offset_copied() -> bool:
                    response = await client.invoke(slave.address, RemotingCommand.request(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": "copied", "topic": "Replicated", "queueId": "2"}), 5)
                    return response.code == ResponseCode.SUCCESS and response.ext_fields.get("offset") == "9"

                await wait_for(offset_copied, 10)
                topics = TopicConfigSerializeWrapper.decode((await client.invoke(slave.address, RemotingCommand.request(
                    RequestCode.GET_ALL_TOPIC_CONFIG), 5)).body)
                assert topics.topic_config_table["Replicated"].write_queue_nums == 4

                # a pull held at the end of a slave's queue is answered when the master's next message arrives
                end = len(await queue_bodies(client, slave.address, "Replicated", 0))
                held = asyncio.ensure_future(pull(client, slave.address, "reader", "Replicated", 0, end,
                                                  suspend=True, suspend_ms=10_000, timeout=15))
                await asyncio.sleep(0.3)
                assert not held.done()
                await send(client, master.address, "Replicated", b"late", message_properties(), queue_id=0)
                answered = await asyncio.wait_for(held, 5)
                assert [msg.body for msg in decoded(answered)] == [b"late"]
        finally:
            await client.close()
            await namesrv.stop()

    asyncio.run(main())


def test_sync_master_waits_for_the_slave(tmp_path: Path) -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        client = RemotingClient()
        try:
            master_config = settings(namesrv, tmp_path / "m", BrokerRole.SYNC_MASTER,
                                     **{"store.sync_flush_timeout_ms": 500})
            async with started(master_config) as master:
                # no slave: stored, but answered SLAVE_NOT_AVAILABLE (the producer decides what to do)
                alone = await send(client, master.address, "SyncRepl", b"alone", message_properties())
                assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE and alone.ext_fields["msgId"]
                assert [m.body for m in decoded(await pull(client, master.address, "g", "SyncRepl", 0, 0))] == \
                    [b"alone"]

                async with started(settings(namesrv, tmp_path / "s", BrokerRole.SLAVE)) as slave:
                    assert master.ha_service is not None
                    ha = master.ha_service

                    async def connected() -> bool:
                        return bool(ha.connections) and ha.push_to_slave_max_offset >= \
                            master.store.commit_log.max_offset
                    await wait_for(connected, 10)
                    for index in range(5):
                        ok = await send(client, master.address, "SyncRepl", b"both-%d" % index, message_properties())
                        assert ok.code == ResponseCode.SUCCESS
                        # acknowledged means the slave has it already
                        assert slave.store.commit_log.max_offset >= master.store.commit_log.max_offset

                async def disconnected() -> bool:
                    return not ha.connections
                await wait_for(disconnected, 10)
                again = await send(client, master.address, "SyncRepl", b"alone-again", message_properties())
                assert again.code == ResponseCode.SLAVE_NOT_AVAILABLE

                # a "slave" that connects but never acknowledges: the send times out waiting for it
                host, _, port = master.ha_server_address.rpartition(":")
                _reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(encode_offset_report(master.store.commit_log.max_offset))
                await writer.drain()
                await wait_for(connected, 5)
                stuck = await send(client, master.address, "SyncRepl", b"unacked", message_properties())
                assert stuck.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
                writer.close()
        finally:
            await client.close()
            await namesrv.stop()

    asyncio.run(main())


def test_a_restarted_slave_resumes_and_bad_ha_input_closes_only_its_connection(tmp_path: Path) -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        client = RemotingClient()
        try:
            async with started(settings(namesrv, tmp_path / "m", BrokerRole.ASYNC_MASTER)) as master:
                async with started(settings(namesrv, tmp_path / "s", BrokerRole.SLAVE)) as slave:
                    for index in range(30):
                        await send(client, master.address, "Resume", b"a-%d" % index, message_properties(),
                                   queue_id=index % 2)
                    await in_sync(master, slave)
                for index in range(30):  # while the slave is down
                    await send(client, master.address, "Resume", b"b-%d" % index, message_properties(),
                               queue_id=index % 2)
                async with started(settings(namesrv, tmp_path / "s", BrokerRole.SLAVE)) as slave:
                    await in_sync(master, slave)

                    async def topic_copied() -> bool:
                        return slave.topics.select("Resume") is not None
                    await wait_for(topic_copied, 10)
                    for queue_id in range(2):
                        assert await queue_bodies(client, slave.address, "Resume", queue_id) == \
                            await queue_bodies(client, master.address, "Resume", queue_id)

                    host, _, port = master.ha_server_address.rpartition(":")
                    beyond = encode_offset_report(master.store.commit_log.max_offset + 10**9)
                    # a negative offset, a request past the master's log, an acknowledgement past it: each
                    # connection is closed at once (the master's heartbeats would keep a kept one busy)
                    for junk in ([encode_offset_report(-1)], [beyond], [encode_offset_report(0), beyond]):
                        reader, writer = await asyncio.open_connection(host, int(port))
                        for report in junk:
                            writer.write(report)
                            await writer.drain()
                            await asyncio.sleep(0.1)

                        async def drained(stream: asyncio.StreamReader = reader) -> None:
                            with contextlib.suppress(ConnectionError):
                                while await stream.read(65536):
                                    pass
                        await asyncio.wait_for(drained(), 3)  # EOF long before the 20 s housekeeping
                        writer.close()
                    # the real slave still replicates
                    await send(client, master.address, "Resume", b"after-junk", message_properties())
                    await in_sync(master, slave)
                    assert master.ha_service is not None and len(master.ha_service.connections) == 1
        finally:
            await client.close()
            await namesrv.stop()

    asyncio.run(main())


def test_a_slave_drops_a_master_that_sends_junk(tmp_path: Path) -> None:
    async def main() -> None:
        sessions = 0

        async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal sessions
            sessions += 1
            await reader.readexactly(8)  # the slave's first report
            if sessions == 1:
                writer.write(encode_transfer_header(0, -7))  # a negative size
            else:
                writer.write(encode_transfer_header(12345, 3) + b"abc")  # not where the slave's log ends (0)
            await writer.drain()
            with contextlib.suppress(ConnectionError):
                await reader.read()
            writer.close()

        server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = MessageStore(StoreConfig(store_root=tmp_path / "slave", broker_role=BrokerRole.SLAVE,
                                         ha_send_heartbeat_interval_ms=100, commit_log_segment_size=64 * 1024))
        store.start()
        ha = HAClient(store, f"127.0.0.1:{port}")
        await ha.start()
        try:
            async def reconnected() -> bool:
                return sessions >= 3
            await wait_for(reconnected, 10)
            assert store.commit_log.max_offset == 0  # nothing of the junk was stored
        finally:
            await ha.stop()
            store.shutdown()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_the_broker_command_takes_role_and_id(tmp_path: Path) -> None:
    base = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "broker",
            "--port", "0", "--store-dir", str(tmp_path / "store")]
    refused = subprocess.run([*base, "--role", "slave"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "a slave's broker_id (brokerId) must be > 0" in refused.stderr
    process = subprocess.Popen([*base, "--role", "SLAVE", "--broker-id", "1", "--set", "haMasterAddress=127.0.0.1:1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert re.fullmatch(r"broker broker-a listening on \S+\n", process.stdout.readline())
        assert process.stdout.readline() == "broker broker-a is slave 1: replicates 127.0.0.1:1\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_slave_stops_at_any_moment_of_its_reconnect_loop(tmp_path: Path) -> None:
    """Stopping replication always ends it, even when the stop lands as a connection attempt fails.

    (asyncio.wait_for on Python 3.11 drops a cancellation that arrives as the awaited call
    completes; the replication loop then ran on and the broker's stop never returned.)
    """
    async def main() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            refused = f"127.0.0.1:{probe.getsockname()[1]}"  # closed again: connecting is refused
        store = MessageStore(StoreConfig(store_root=tmp_path / "slave", broker_role=BrokerRole.SLAVE,
                                         ha_send_heartbeat_interval_ms=1, commit_log_segment_size=64 * 1024))
        store.start()
        rng = random.Random(7)
        try:
            for _ in range(200):
                ha = HAClient(store, refused)
                await ha.start()
                await asyncio.sleep(rng.random() * 0.004)
                async with asyncio.timeout(5):
                    await ha.stop()
        finally:
            store.shutdown()

    asyncio.run(main())


def test_sync_master_acknowledged_sends_survive_kill_9_of_the_master(tmp_path: Path) -> None:
    """Every send a SYNC_MASTER answered SUCCESS is on the slave, even when the master dies mid-stream."""

    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        master = subprocess.Popen(
            [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "broker",
             "-n", namesrv.address, "--port", "0", "--store-dir", str(tmp_path / "m"), "--broker-name", BROKER,
             "--role", "SYNC_MASTER", "--set", "haListenPort=0", "--set", "registerNameServerPeriod=300"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        client = RemotingClient()
        acked: list[bytes] = []
        try:
            assert master.stdout is not None
            line = await asyncio.to_thread(master.stdout.readline)
            found = re.fullmatch(rf"broker {BROKER} listening on (\S+)\n", line)
            assert found, line
            master_addr = found.group(1)
            async with started(settings(namesrv, tmp_path / "s", BrokerRole.SLAVE)):
                async def replicating() -> bool:
                    response = await client.invoke(master_addr, RemotingCommand.request(
                        RequestCode.GET_BROKER_RUNTIME_INFO), 5)
                    return KVTable.decode(response.body).table.get("haConnections") == "1"
                await wait_for(replicating, 10)

                async def producer(worker: int) -> None:
                    for index in range(100_000):
                        body = b"w%d-%d" % (worker, index)
                        try:
                            response = await send(client, master_addr, "Durable", body, message_properties(),
                                                  queue_id=worker)
                        except Exception:
                            return  # the master is gone
                        if response.code == ResponseCode.SUCCESS:
                            acked.append(body)

                senders = [asyncio.ensure_future(producer(worker)) for worker in range(4)]
                await asyncio.sleep(1.5)
                master.kill()  # SIGKILL while sends are in flight
                await asyncio.wait_for(asyncio.gather(*senders), 30)
                assert len(acked) > 50
            with MessageStore(StoreConfig(store_root=tmp_path / "s", broker_role=BrokerRole.SLAVE,
                                          commit_log_segment_size=64 * 1024)) as store:
                stored: set[bytes] = set()
                for queue_id in range(4):
                    offset = 0
                    while (got := store.get_messages("check", "Durable", queue_id, offset, 32)).buffers:
                        stored.update(msg.body for msg in decode_records(got.body()))
                        offset = got.next_begin_offset
            lost = [body for body in acked if body not in stored]
            assert not lost, f"{len(lost)} acknowledged sends are not on the slave, e.g. {lost[:5]}"
        finally:
            if master.poll() is None:
                master.kill()
            master.wait()
            await client.close()
            await namesrv.stop()

    asyncio.run(main())


def test_a_dev_cluster_can_run_slaves(tmp_path: Path) -> None:
    async def main() -> None:
        async with DevCluster(store_dir=tmp_path / "dev", slaves=2,
                              broker_settings={"store.ha_send_heartbeat_interval_ms": 200}) as cluster:
            assert cluster.broker is not None and len(cluster.slaves) == 2
            assert [slave.config.broker_id for slave in cluster.slaves] == [1, 2]
            client = RemotingClient()
            try:
                for index in range(20):
                    response = await send(client, cluster.broker_addr, "DevSlaves", b"d%d" % index,
                                          message_properties())
                    assert response.code == ResponseCode.SUCCESS
                for slave in cluster.slaves:
                    await in_sync(cluster.broker, slave)
                    assert slave.config.store.store_root == tmp_path / "dev" / f"slave-{slave.config.broker_id}"
                route = TopicRouteData.decode((await client.invoke(cluster.namesrv_addr, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DevSlaves"}), 5)).body)
                assert sorted(route.broker_datas[0].broker_addrs) == [0, 1, 2]
            finally:
                await client.close()

    asyncio.run(main())
